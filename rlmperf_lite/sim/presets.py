"""RL frameworks on the simulator's knobs: each framework's checked facts, and its default layout
and mode as a ready :class:`~rlmperf_lite.sim.RLSystem` (book Chapter 12).

Two tables:

- :data:`FRAMEWORKS` — name -> :class:`FrameworkFacts`: placement, rollout engines, training
  backends, sync/async modes and the staleness knob, runtime, weight sync, the headline claim
  with its inputs, and a source for each (repository file + the commit of the copy read, or a
  paper + the part read). "unconfirmed" marks what no primary source read said.
- :data:`PRESETS` — preset name -> :class:`FrameworkPreset`: how a framework's default layout
  (and named variants, e.g. ``"verl-fully-async"``) maps on the simulator's pools, placement,
  mode, ``staleness``, ``partial_rollout`` and ``minibatches``, the split of GPUs where the
  framework's documents state one, and the simplifications in ``notes``.

:func:`framework_system` builds a preset for a model, an accelerator, a GPU count and a
workload, with the costs of :func:`~rlmperf_lite.sim.from_cost.system_from_cost`. What every
preset shares: the simulator's vLLM-like engine (continuous batching, no prefill), an FSDP
(ZeRO-3) trainer's costs from the cost model whatever the framework's own backend, the weight
sync of :func:`~rlmperf_lite.cost.reshard_time_s`, and no switch cost on a shared pool (offload
and onload are not modelled). The presets compare *layouts and modes* on one workload; they do
not reproduce any framework's measured speed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..checks import check_choice, check_int, check_number
from ..cost import resolve_hardware, resolve_model
from ..cost.estimate import ALGOS
from ..cost.rollout import rollout_tp
from .from_cost import system_from_cost
from .system import RLSystem
from .workload import Workload

__all__ = ["FrameworkFacts", "FrameworkPreset", "FRAMEWORKS", "PRESETS", "FACT_FIELDS",
           "DEFAULT_WORKLOAD", "NEMO_RL_PERF_V04", "framework_names", "framework_system",
           "preset_gpu_split", "published_speedups", "step_breakdown"]

GH = "https://github.com/"
UNCONFIRMED = "unconfirmed: not found in a primary source read for this book"


@dataclass(frozen=True)
class FrameworkFacts:
    """What a framework's own documents say about its layout (book section 12.1). Every fact
    field has an entry in ``sources`` (a URL with the commit of the copy read, or a paper and
    the part read); a fact no primary source confirmed says "unconfirmed"."""

    name: str
    placement_default: str
    """Where the models run by default."""
    placements_other: str
    """Other placements it offers (flags or recipes)."""
    rollout_engines: str
    training_backends: str
    modes: str
    """Synchronous and asynchronous modes."""
    staleness_knob: str
    """The knob bounding how far generation runs ahead of training."""
    staleness_default: str
    staleness_meaning: str
    runtime: str
    """What launches and drives the workers."""
    weight_sync: str
    """How new weights reach the rollout engine."""
    headline_claim: str
    claim_inputs: str
    """Model, hardware, baseline and metric behind the claim, as stated."""
    sources: dict = field(default_factory=dict)
    """Fact field -> source."""
    cite: tuple = ()
    """Bibliography keys of the book (book/references.bib) for this framework."""


FACT_FIELDS = ("placement_default", "placements_other", "rollout_engines", "training_backends",
               "modes", "staleness_knob", "runtime", "weight_sync", "headline_claim")
"""The fields of :class:`FrameworkFacts` that each need a source (the default and meaning of
the staleness knob share the knob's source, the claim's inputs the claim's)."""

_VERL = GH + "volcengine/verl/blob/main/"
_ORLHF = GH + "OpenRLHF/OpenRLHF/blob/main/README.md"
_NRL = GH + "NVIDIA-NeMo/RL/blob/main/"
_AREAL = GH + "inclusionAI/AReaL/blob/main/"
_SLIME = GH + "THUDM/slime/blob/main/"
_ROLL = GH + "alibaba/ROLL/blob/main/"
_REAL = GH + "openpsi-project/ReaLHF/blob/main/"

FRAMEWORKS: dict[str, FrameworkFacts] = {f.name: f for f in (
    FrameworkFacts(
        name="verl",
        placement_default="colocated: actor, rollout, reference and critic on one global pool "
                          "(hybrid engine)",
        placements_other="split placement example (actor+ref | critic+reward); separate "
                         "rollout and trainer GPUs in the one-step-off and fully async recipes",
        rollout_engines="vLLM, SGLang (HF in older versions; a TensorRT-LLM worker doc exists)",
        training_backends="FSDP/FSDP2, Megatron",
        modes="sync; one-step-off; fully async (staleness threshold, partial rollout)",
        staleness_knob="async_training.staleness_threshold",
        staleness_default="unconfirmed for the key (the quick-start script sets 0)",
        staleness_meaning="maximum proportion of stale samples; 0 = synchronous, 1 ~ one-step-off",
        runtime="Ray; a single-process controller driving multi-process workers",
        weight_sync="colocated: in place over NCCL (hybrid engine); async recipes: NCCL "
                    "broadcast tensor by tensor (under 300 ms at most), checkpoint-engine "
                    "bucketing in newer versions",
        headline_claim="1.53x-20.57x throughput over state-of-the-art baselines (paper); fully "
                       "async 2.35x-2.67x (docs)",
        claim_inputs="paper: hardware, models and per-baseline numbers unconfirmed; fully async: "
                     "Qwen2.5-Math-7B, DAPO, H20, 64 rollout + 64 trainer GPUs vs 128 "
                     "colocated, max response 28K, total time at 100-400 steps",
        sources={
            "placement_default": _VERL + "docs/examples/config.rst (@006cefd3, hybrid_engine: "
                                         "True); verl/trainer/main_ppo.py (@006cebf8, "
                                         "global_pool)",
            "placements_other": _VERL + "examples/split_placement/README.md (@35eb23a2); "
                                        "docs/advance/one_step_off.md (@e55d1431); "
                                        "docs/advance/fully_async.md (@ca44f950)",
            "rollout_engines": _VERL + "docs/examples/config.rst (@006cefd3, rollout.name)",
            "training_backends": _VERL + "README.md",
            "modes": _VERL + "docs/advance/one_step_off.md (@e55d1431); "
                             "docs/advance/fully_async.md (@ca44f950)",
            "staleness_knob": _VERL + "docs/advance/fully_async.md (@ca44f950)",
            "runtime": _VERL + "docs/hybrid_flow.rst (@3f388066)",
            "weight_sync": _VERL + "docs/hybrid_flow.rst (@3f388066); "
                                   "docs/advance/one_step_off.md (@e55d1431); "
                                   "docs/advance/fully_async.md (@ca44f950)",
            "headline_claim": "arXiv:2409.19256 abstract; " + _VERL +
                              "docs/advance/fully_async.md (@ca44f950)",
        },
        cite=("sheng2024hybridflow", "verlonestepoff", "verlfullyasync")),
    FrameworkFacts(
        name="OpenRLHF",
        placement_default="separate GPUs per model: vLLM engines, actor, reference, critic and "
                          "reward model apart",
        placements_other="--colocate_all_models (hybrid engine), --colocate_actor_ref, "
                         "--colocate_critic_reward; tuning guide: vLLM:actor:critic = 1:1:1",
        rollout_engines="vLLM (+AutoTP)",
        training_backends="DeepSpeed ZeRO-3 (+AutoTP)",
        modes="sync; --async_train",
        staleness_knob="OPENRLHF_ASYNC_QUEUE_SIZE (environment variable)",
        staleness_default="unconfirmed (the README example sets 1)",
        staleness_meaning="how many batches the buffer holds: the degree of off-policy",
        runtime="Ray, single controller (refactor, 2025/4)",
        weight_sync="--vllm_sync_backend nccl; CUDA IPC in hybrid-engine settings",
        headline_claim="generation takes 80% of RLHF time (README); 1.82x-2.5x vs optimized "
                       "DSChat (README, 'outdated'); 1.22x-1.68x (arXiv v5)",
        claim_inputs="README table: 7B on 16, 13B-70B on 32 A800-80GB, time per 1024 prompts; "
                     "v5: baselines and hardware unconfirmed",
        sources={
            "placement_default": _ORLHF + " (@002d808a)",
            "placements_other": _ORLHF + " (@002d808a), tuning guide",
            "rollout_engines": _ORLHF + " (@002d808a)",
            "training_backends": _ORLHF + " (@002d808a)",
            "modes": _ORLHF + " (@002d808a, --async_train)",
            "staleness_knob": _ORLHF + " (@002d808a, OPENRLHF_ASYNC_QUEUE_SIZE)",
            "runtime": _ORLHF + " (@002d808a, news 2025/4)",
            "weight_sync": "https://blog.vllm.ai/2025/04/23/openrlhf-vllm.html",
            "headline_claim": _ORLHF + " (@002d808a); arXiv:2405.11143v5 abstract",
        },
        cite=("hu2024openrlhf", "openrlhfreadme", "openrlhfvllmblog")),
    FrameworkFacts(
        name="TRL",
        placement_default="vLLM colocated in the trainer process (vllm_mode='colocate', the "
                          "default since PR #5255, 2026-03-10; 'server' before)",
        placements_other="vllm_mode='server': trl vllm-serve on other GPUs",
        rollout_engines="vLLM",
        training_backends="Accelerate + DeepSpeed ZeRO-1/2/3 (FSDP unconfirmed)",
        modes="sync GRPOTrainer; AsyncGRPOTrainer (experimental in v1.17, stable from v1.18)",
        staleness_knob="max_staleness (AsyncGRPOConfig)",
        staleness_default="4",
        staleness_meaning="weight-update steps a rollout sample may lag before it is discarded",
        runtime="Accelerate / torchrun",
        weight_sync="async: NCCL to the vLLM server every weight_sync_steps (default 1); "
                    "colocate: in the same process",
        headline_claim="colocate vs server: up to 1.43x (1.5B), 1.73x (7B, TP), ~1.26x "
                       "(Qwen2.5-Math-72B with 4 fewer GPUs)",
        claim_inputs="server: 7 training + 1 vLLM GPU, throughput scaled by 8/7, vs colocate on "
                     "8; GPU type unconfirmed",
        sources={
            "placement_default": GH + "huggingface/trl/pull/5255",
            "placements_other": "https://huggingface.co/blog/vllm-colocate",
            "rollout_engines": "https://huggingface.co/blog/vllm-colocate",
            "training_backends": GH + "huggingface/trl (docs: deepspeed_integration)",
            "modes": GH + "huggingface/trl (release notes v1.17, v1.18)",
            "staleness_knob": GH + "huggingface/trl/blob/main/trl/experimental/async_grpo/"
                                   "async_grpo_config.py (@019ac735)",
            "runtime": GH + "huggingface/trl (docs)",
            "weight_sync": GH + "huggingface/trl (release notes v1.18.0)",
            "headline_claim": "https://huggingface.co/blog/vllm-colocate",
        },
        cite=("vonwerra2020trl", "trlpr5255", "toslali2025vllmcolocate", "trlasyncgrpo")),
    FrameworkFacts(
        name="NeMo-RL",
        placement_default="colocated (policy.generation.colocated.enabled: true)",
        placements_other="non-colocated generation (required for async GRPO with vLLM)",
        rollout_engines="vLLM (default), Megatron-Core inference; SGLang later (PR #1674)",
        training_backends="DTensor/FSDP2 (default), Megatron-Core (Megatron-Bridge)",
        modes="sync; async GRPO (grpo.async_grpo.enabled), in_flight_weight_updates",
        staleness_knob="max_trajectory_age_steps",
        staleness_default="1 (exemplar config)",
        staleness_meaning="a trajectory generated with weights v10 can train steps v10 or v11",
        runtime="Ray, single-process controller",
        weight_sync="CUDA IPC handles (colocated) or NCCL collective (vLLM worker extension)",
        headline_claim="Llama3.1-8B, 16 GPUs: 97.7 s/step on-policy vs 74.6 s one-step "
                       "off-policy (v0.4 performance summary)",
        claim_inputs="GRPO, OpenMathInstruct-2, DGX-H100, BF16, Megatron-Core; other rows "
                     "compare different GPU counts",
        sources={
            "placement_default": _NRL + "examples/configs/grpo_math_1B.yaml (@00294d9b)",
            "placements_other": _NRL + "docs/guides/async-grpo.md (@0f8bce64)",
            "rollout_engines": _NRL + "docs/about/backends.md (@4a86f453); "
                                      "docs/design-docs/generation.md (@0d8b98c5)",
            "training_backends": _NRL + "examples/configs/grpo_math_1B.yaml (@00294d9b)",
            "modes": _NRL + "docs/guides/async-grpo.md (@0f8bce64)",
            "staleness_knob": _NRL + "docs/guides/async-grpo.md (@0f8bce64)",
            "runtime": _NRL + "docs/design-docs/design-and-philosophy.md (@01c3e2d6)",
            "weight_sync": _NRL + "nemo_rl/models/generation/vllm_backend (API doc)",
            "headline_claim": _NRL + "docs/about/performance-summary.md (@06beed91)",
        },
        cite=("nemorl", "nemorlasyncgrpo", "nemorlperf")),
    FrameworkFacts(
        name="NeMo-Aligner",
        placement_default="actor and initial policy in one job, critic and reward model in "
                          "another (CPU offload swap)",
        placements_other="none documented",
        rollout_engines="generation inside the actor (Megatron/NeMo); TensorRT-LLM optional "
                        "(trainer.ppo.trt_llm.enable=True)",
        training_backends="Megatron (NeMo)",
        modes="sync PPO (on-policy); async overlap unconfirmed (third-party only)",
        staleness_knob="none (on-policy)",
        staleness_default="-",
        staleness_meaning="-",
        runtime="PyTriton HTTP servers, Slurm heterogeneous jobs",
        weight_sync="refit into TensorRT-LLM: unconfirmed (third-party only)",
        headline_claim="Llama3-70B, actor/critic nodes 8/4 -> 64/32: step 366.7 s -> 56.9 s "
                       "(scaling efficiency 6.44 for 8x the nodes)",
        claim_inputs="Llama3-70B actor + Llama3-70B reward model, HelpSteer2 prompts, 1024 "
                     "rollout samples, GBS 128, reshard on; GPUs per node not stated",
        sources={
            "placement_default": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst "
                                      "(@0a225501)",
            "placements_other": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst",
            "rollout_engines": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst",
            "training_backends": "arXiv:2405.01481 abstract",
            "modes": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst",
            "staleness_knob": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst",
            "runtime": GH + "NVIDIA/NeMo-Aligner/blob/main/nemo_aligner/algorithms/"
                            "critic_server_trainer.py (@12250417)",
            "weight_sync": UNCONFIRMED,
            "headline_claim": GH + "NVIDIA/NeMo-Aligner/blob/main/docs/user-guide/rlhf.rst "
                                   "(@0a225501, scaling table)",
        },
        cite=("shen2024nemoaligner", "nemoalignerrlhf")),
    FrameworkFacts(
        name="DeepSpeed-Chat",
        placement_default="colocated: actor, reference, critic and reward model on the same "
                          "GPUs; the Hybrid Engine switches the actor between ZeRO training "
                          "and TP inference",
        placements_other="none documented",
        rollout_engines="DeepSpeed-Inference kernels in the Hybrid Engine",
        training_backends="ZeRO (stage 3 in the example scripts)",
        modes="sync PPO",
        staleness_knob="none (on-policy)",
        staleness_default="-",
        staleness_meaning="-",
        runtime="deepspeed launcher",
        weight_sync="in place: the Hybrid Engine regathers the ZeRO shards into TP inference "
                    "layout (--inference_tp_size)",
        headline_claim="6-19x over Colossal-AI Coati and 1.4-10.5x over HF-DDP (step-3 "
                       "throughput)",
        claim_inputs="one DGX node with 8 A100-40G GPUs",
        sources={k: GH + "microsoft/DeepSpeedExamples/blob/master/applications/DeepSpeed-Chat/"
                 + ("training/step3_rlhf_finetuning/training_scripts/opt/single_node/run_13b.sh "
                    "(@62adcab0)" if k in ("training_backends", "weight_sync", "runtime")
                    else "README.md (@00906a77)")
                 for k in FACT_FIELDS},
        cite=("yao2023deepspeedchat", "deepspeedchatreadme")),
    FrameworkFacts(
        name="ReaL",
        placement_default="parameter reallocation: devices and parallel strategy chosen per "
                          "model function call",
        placements_other="allocation_mode heuristic or manual",
        rollout_engines="own generation pipeline ('on par with vLLM'); vLLM integration",
        training_backends="own 3D parallelism, ZeRO, sequence parallelism",
        modes="sync",
        staleness_knob="none (on-policy)",
        staleness_default="-",
        staleness_meaning="-",
        runtime="local subprocesses, SLURM (+Pyxis) or Ray; a master worker and model workers "
                "over ZMQ",
        weight_sync="parameters reallocated between the layouts of model function calls",
        headline_claim="up to 3.58x (arXiv v2 abstract); 1.8-3.0x (MLSys 2025 abstract)",
        claim_inputs="LLaMA models up to 70B on up to 128 GPUs; GPU type and baseline "
                     "unconfirmed",
        sources={
            "placement_default": "arXiv:2406.14088 abstract; " + _REAL +
                                 "docs/source/quickstart.rst (@0dbc9338)",
            "placements_other": _REAL + "docs/source/arch.rst (@309563d4)",
            "rollout_engines": _REAL + "docs/source/arch.rst (@309563d4); "
                                    "README.md (@073e9c64)",
            "training_backends": _REAL + "docs/source/arch.rst",
            "modes": "arXiv:2406.14088 abstract",
            "staleness_knob": "arXiv:2406.14088 abstract",
            "runtime": _REAL + "docs/source/arch.rst (@309563d4); "
                            "docs/source/distributed.rst (@023026a1)",
            "weight_sync": "arXiv:2406.14088 abstract",
            "headline_claim": "arXiv:2406.14088v2 abstract; "
                              "https://mlsys.org/virtual/2025/poster/2949",
        },
        cite=("mei2024real",)),
    FrameworkFacts(
        name="AReaL",
        placement_default="fully disaggregated: rollout and trainer GPU sets from allocation "
                          "strings (e.g. 8 inference + 8 training GPUs)",
        placements_other="none documented",
        rollout_engines="SGLang, vLLM",
        training_backends="FSDP (default), Megatron, Archon (experimental)",
        modes="fully async with interruptible rollout and decoupled PPO; eta = 0 synchronous",
        staleness_knob="max_head_offpolicyness (eta)",
        staleness_default="0 (code); 4 in the math re-run, 16 for code training",
        staleness_meaning="a request is refused when the current version is more than eta "
                          "versions ahead of it; 0 = synchronous, 1 = one-step overlap",
        runtime="legacy launchers local / ray / slurm; newer single-controller scheduler",
        weight_sync="weight_update_mode 'xccl' (default in newer versions) or 'disk'",
        headline_claim="up to 2.77x training speed-up vs synchronous systems with the same "
                       "number of GPUs (arXiv v2+; v1 said 2.57x)",
        claim_inputs="2.77x = 41.0 h / 14.8 h (computed): R1-Distill-Qwen-1.5B, 16 nodes, "
                     "1000 PPO steps (v0.3 blog); GPU type unconfirmed",
        sources={
            "placement_default": _AREAL + "docs/en/reference/alloc_mode.md (@755c56d0)",
            "placements_other": _AREAL + "docs/en/reference/alloc_mode.md (@755c56d0)",
            "rollout_engines": _AREAL + "docs/en/reference/alloc_mode.md (@755c56d0)",
            "training_backends": _AREAL + "docs/en/reference/alloc_mode.md (@755c56d0)",
            "modes": "arXiv:2505.24298 sections 4-5; " + _AREAL + "blog/AReaL_v0_3.md "
                                                                  "(@177dce56)",
            "staleness_knob": _AREAL + "areal/api/cli_args.py (InferenceEngineConfig); "
                                       "docs/references/reproduce.md (@4e8b8657)",
            "runtime": _AREAL + "docs/en/reference/alloc_mode.md (@755c56d0)",
            "weight_sync": _AREAL + "areal/api/cli_args.py (weight_update_mode)",
            "headline_claim": "arXiv:2505.24298v2 abstract; " + _AREAL + "blog/AReaL_v0_3.md "
                                                                         "(@177dce56)",
        },
        cite=("fu2025areal", "arealv03blog")),
    FrameworkFacts(
        name="slime",
        placement_default="disaggregated: separate training and inference GPUs",
        placements_other="--colocate",
        rollout_engines="SGLang (+ sgl-router)",
        training_backends="Megatron; FSDP",
        modes="sync (train.py); one-step overlap (train_async.py, disaggregated only); a fully "
              "async rollout function",
        staleness_knob="--update-weights-interval (train_async.py); fully async bound "
                       "unconfirmed",
        staleness_default="unconfirmed",
        staleness_meaning="how often the trainer pushes weights to the engines",
        runtime="Ray",
        weight_sync="colocated: CUDA IPC (update_weights_from_tensor); disaggregated: "
                    "update_weights_from_distributed over NVLink/IB",
        headline_claim="none found (unconfirmed)",
        claim_inputs="-",
        sources={
            "placement_default": _SLIME + "docs/en/get_started/usage.md (@04ab9881)",
            "placements_other": _SLIME + "docs/en/get_started/quick_start.md (@02d08602)",
            "rollout_engines": _SLIME + "README.md (@0b0c277d)",
            "training_backends": _SLIME + "docs/en/get_started/usage.md (@04ab9881)",
            "modes": _SLIME + "train_async.py (@03f33927); examples/fully_async/README.md "
                              "(@17211d44)",
            "staleness_knob": _SLIME + "train_async.py (@03f33927)",
            "runtime": _SLIME + "README.md (@0b0c277d)",
            "weight_sync": "https://hebiao064.github.io/rl-weight-sync (slime team blog)",
            "headline_claim": UNCONFIRMED,
        },
        cite=("zhu2025slime",)),
    FrameworkFacts(
        name="ROLL",
        placement_default="unconfirmed (AutoDeviceMapping: colocated or disaggregated, per "
                          "role)",
        placements_other="colocated or disaggregated (AutoDeviceMapping)",
        rollout_engines="vLLM, SGLang",
        training_backends="Megatron-Core (mcore-adapter), DeepSpeed ZeRO; FSDP2 in later "
                          "versions",
        modes="sync (async_generation_ratio 0); async generation",
        staleness_knob="async_generation_ratio",
        staleness_default="0 (integers only)",
        staleness_meaning="ratio of ahead generation requests in the pipeline; 0 = synchronous",
        runtime="Ray, single controller",
        weight_sync="unconfirmed",
        headline_claim="ROLL Flash: up to 2.24x on RLVR and 2.72x on agentic tasks, same GPU "
                       "budget as the synchronous baselines",
        claim_inputs="models, GPUs and split behind the numbers unconfirmed",
        sources={
            "placement_default": _ROLL + "README.md (@05001fba)",
            "placements_other": _ROLL + "README.md (@05001fba)",
            "rollout_engines": _ROLL + "README.md (@05001fba)",
            "training_backends": _ROLL + "README.md (@05001fba)",
            "modes": _ROLL + "roll/configs/base_config.py",
            "staleness_knob": _ROLL + "roll/configs/base_config.py",
            "runtime": "arXiv:2506.06122 abstract",
            "weight_sync": UNCONFIRMED,
            "headline_claim": "arXiv:2510.11345 abstract (ROLL Flash)",
        },
        cite=("wang2025roll", "lu2025rollflash")),
    FrameworkFacts(
        name="StreamRL",
        placement_default="disaggregated: a stream generation service and a trainer, possibly "
                          "heterogeneous and across datacenters",
        placements_other="none documented",
        rollout_engines="unconfirmed",
        training_backends="unconfirmed",
        modes="sync with stream generation (dynamic-batch pipelining); fully async",
        staleness_knob="unconfirmed",
        staleness_default="unconfirmed",
        staleness_meaning="-",
        runtime="unconfirmed",
        weight_sync="unconfirmed",
        headline_claim="up to 2.66x throughput vs existing state-of-the-art systems; up to "
                       "1.33x cost-effectiveness heterogeneous, cross-datacenter",
        claim_inputs="baseline identity unconfirmed",
        sources={**{k: "arXiv:2504.15930 abstract" for k in FACT_FIELDS},
                 **{k: UNCONFIRMED for k in ("rollout_engines", "training_backends",
                                             "staleness_knob", "runtime", "weight_sync")}},
        cite=("zhong2025streamrl",)),
    FrameworkFacts(
        name="LlamaRL",
        placement_default="unconfirmed (separate generator and trainer: third-party summary; "
                          "the abstract lists colocated model offloading)",
        placements_other="colocated model offloading (abstract)",
        rollout_engines="unconfirmed",
        training_backends="native PyTorch",
        modes="async off-policy (AIPO objective)",
        staleness_knob="unconfirmed",
        staleness_default="unconfirmed",
        staleness_meaning="-",
        runtime="single controller",
        weight_sync="distributed direct memory access (DDMA)",
        headline_claim="up to 10.7x vs DeepSpeed-Chat-like systems on a 405B policy",
        claim_inputs="405B policy (8B and 70B also run); GPU counts unconfirmed",
        sources={**{k: "arXiv:2505.24034 abstract" for k in FACT_FIELDS},
                 **{k: UNCONFIRMED for k in ("placement_default", "rollout_engines",
                                             "staleness_knob")}},
        cite=("wu2025llamarl",)),
    FrameworkFacts(
        name="PipelineRL",
        placement_default="disaggregated: world.actor_fraction : finetune_fraction = 4 : 4",
        placements_other="none documented",
        rollout_engines="vLLM",
        training_backends="DeepSpeed ZeRO-3 (default), FSDP, via Accelerate",
        modes="async with in-flight weight updates",
        staleness_knob="finetune.max_lag",
        staleness_default="null (no bound) in conf/base.yaml",
        staleness_meaning="most versions a sample may lag (backpressure)",
        runtime="own launcher (pipelinerl.launch); streams via files or Redis",
        weight_sync="NCCL broadcast after each optimizer step, without halting sampling",
        headline_claim="~2x faster learning than conventional RL baselines",
        claim_inputs="128 H100 GPUs (arXiv abstract; the NeurIPS submission says 32)",
        sources={
            "placement_default": GH + "ServiceNow/PipelineRL/blob/main/conf/base.yaml "
                                      "(@0176c4f6)",
            "placements_other": GH + "ServiceNow/PipelineRL/blob/main/README.md (@05a1366f)",
            "rollout_engines": GH + "ServiceNow/PipelineRL/blob/main/README.md (@05a1366f)",
            "training_backends": GH + "ServiceNow/PipelineRL/blob/main/conf/base.yaml "
                                      "(@0176c4f6)",
            "modes": "arXiv:2509.19128 abstract",
            "staleness_knob": GH + "ServiceNow/PipelineRL/blob/main/conf/base.yaml (@0176c4f6)",
            "runtime": GH + "ServiceNow/PipelineRL/blob/main/README.md (@05a1366f)",
            "weight_sync": GH + "ServiceNow/PipelineRL/blob/main/README.md (@05a1366f)",
            "headline_claim": "arXiv:2509.19128 v1/v2 abstract",
        },
        cite=("piche2025pipelinerl",)),
    FrameworkFacts(
        name="prime-rl",
        placement_default="disaggregated: orchestrator (CPU), trainer and inference server as "
                          "separate processes",
        placements_other="none documented",
        rollout_engines="vLLM",
        training_backends="FSDP2 (+CP, EP)",
        modes="async; no_async = true for synchronous debugging",
        staleness_knob="max_async_level (and max_off_policy_steps)",
        staleness_default="1 in one stored config, 2 in the docs (version-dependent); "
                          "max_off_policy_steps 8",
        staleness_meaning="steps inference may run ahead of training (0 = synchronous); "
                          "rollouts more than max_off_policy_steps behind are dropped",
        runtime="Slurm / Kubernetes",
        weight_sync="filesystem or NCCL broadcast (default unconfirmed); SHARDCAST in "
                    "INTELLECT-2",
        headline_claim="INTELLECT-2: a 32B model trained by globally decentralized async RL "
                       "(no speed-up number); INTELLECT-3: RL on up to 512 H200s",
        claim_inputs="-",
        sources={
            "placement_default": GH + "PrimeIntellect-ai/prime-rl/blob/main/README.md "
                                      "(@01d8228a)",
            "placements_other": GH + "PrimeIntellect-ai/prime-rl/blob/main/README.md",
            "rollout_engines": GH + "PrimeIntellect-ai/prime-rl/blob/main/README.md",
            "training_backends": GH + "PrimeIntellect-ai/prime-rl/blob/main/README.md",
            "modes": GH + "PrimeIntellect-ai/prime-rl/blob/main/docs/async.md (@19b7c555)",
            "staleness_knob": GH + "PrimeIntellect-ai/prime-rl/blob/main/docs/architecture/"
                                   "async-rl.md (@7b0a694b); docs/async.md (@19b7c555)",
            "runtime": GH + "PrimeIntellect-ai/prime-rl/blob/main/README.md (@01d8228a)",
            "weight_sync": "arXiv:2505.07291 abstract; " + GH +
                           "PrimeIntellect-ai/prime-rl (config source)",
            "headline_claim": "arXiv:2505.07291 abstract; arXiv:2512.16144 abstract",
        },
        cite=("primeintellect2025primerl", "primeintellect2025intellect2",
              "primeintellect2025intellect3")),
)}
"""Framework name -> its checked facts (book Table 12.1)."""


@dataclass(frozen=True)
class FrameworkPreset:
    """A framework's layout and mode on the simulator's knobs (book section 12.2).

    ``layout``: ``"colocated"`` (every model on all GPUs, time-shared), ``"disaggregated"``
    (rollout on ``rollout_share`` of the GPUs, every training model on the rest),
    ``"separate"`` (OpenRLHF: rollout, actor + reference, and critic + reward model each on
    their own pool, in equal shares), or ``"split"`` (NeMo-Aligner: rollout, actor and reference
    on ``1 - critic_share`` of the GPUs, critic and reward model on the rest)."""

    framework: str
    """Key of :data:`FRAMEWORKS`."""
    layout: str
    mode: str = "sync"
    rollout_share: float | None = None
    """For a disaggregated layout, the share of GPUs that generate (rounded to whole
    replicas)."""
    critic_share: float | None = None
    """For a split layout, the share of GPUs of the critic + reward-model job."""
    staleness: float = 0.0
    partial_rollout: bool = False
    minibatches: int = 1
    consume: str = "ready"
    """In async mode, ``"batch"`` when an update trains only the groups of its own batch (a
    one-step-off recipe), ``"ready"`` when it takes the first ready groups (streaming)."""
    recompute_old_logprobs: bool = True
    reward_model: str | None = None
    """``"actor"``: a reward model of the actor's shape by default (NeMo-Aligner)."""
    knobs: str = ""
    """The framework's own settings this preset stands for."""
    notes: str = ""
    """How the mapping simplifies the framework."""

    def __post_init__(self):
        check_choice("FrameworkPreset.framework", self.framework, tuple(FRAMEWORKS))
        check_choice("FrameworkPreset.layout", self.layout,
                     ("colocated", "disaggregated", "separate", "split"))
        check_choice("FrameworkPreset.mode", self.mode, ("sync", "async"))
        check_choice("FrameworkPreset.consume", self.consume, ("ready", "batch"))
        if self.layout == "disaggregated":
            check_number("FrameworkPreset.rollout_share", self.rollout_share, low=0, high=1,
                         low_open=True, high_open=True)
        if self.layout == "split":
            check_number("FrameworkPreset.critic_share", self.critic_share, low=0, high=1,
                         low_open=True, high_open=True)


_ASSUMED_HALF = "rollout:train split not stated by the framework: half the GPUs generate " \
                "(assumed; override rollout_share=)"
_COMMON = "vLLM-like engine and FSDP trainer costs from the cost model"

PRESETS: dict[str, FrameworkPreset] = {
    "verl": FrameworkPreset(
        "verl", "colocated", knobs="actor_rollout_ref.hybrid_engine=True",
        notes="hybrid engine: every role on all GPUs, one after another; the FSDP -> vLLM "
              "reshard is the weight sync; freeing and reloading the KV cache and the "
              f"optimizer states (offload) is not modelled; {_COMMON}"),
    "verl-one-step-off": FrameworkPreset(
        "verl", "disaggregated", mode="async", rollout_share=0.25, staleness=1.0,
        consume="batch",
        knobs="one_step_off recipe, hybrid_engine=False; 4 rollout : 12 trainer GPUs as in "
              "the doc's 16-GPU run",
        notes="generation of batch k+1 overlaps training on batch k: staleness 1, each "
              "update on its own batch, samples drained before each sync (no partial "
              "rollout); split 1:3 from "
              "docs/advance/one_step_off.md (4 of 16 GPUs generate)"),
    "verl-fully-async": FrameworkPreset(
        "verl", "disaggregated", mode="async", rollout_share=0.5, staleness=0.5,
        partial_rollout=True, minibatches=4, recompute_old_logprobs=False,
        knobs="fully_async recipe: staleness_threshold=0.5, partial_rollout=True, "
              "trigger_parameter_sync_step=4, use_rollout_log_probs; 64:64 of 128 GPUs",
        notes="the doc's 7B run: half the GPUs generate, 4 streaming updates per weight "
              "version, in-flight samples paused across a sync, old log-probs taken from "
              "the rollout (no recompute); checkpoint-engine bucketing not modelled"),
    "openrlhf": FrameworkPreset(
        "OpenRLHF", "separate",
        knobs="default placement; vLLM : actor : critic = 1:1:1 (tuning guide)",
        notes="vLLM engines, actor (+reference) and critic (+reward model) on equal pools "
              "(the tuning guide's 1:1:1; vLLM : actor 1:1 without a critic or reward model); "
              "the reference and the reward model share the actor's and the critic's pool "
              "(--colocate_actor_ref, --colocate_critic_reward): the bare default's separate "
              "pools for them have no stated size; DeepSpeed ZeRO-3 costed as FSDP"),
    "openrlhf-hybrid": FrameworkPreset(
        "OpenRLHF", "colocated", knobs="--colocate_all_models --vllm_enable_sleep "
                                      "--deepspeed_enable_sleep",
        notes=f"hybrid engine: every model and the vLLM engines on all GPUs; sleep/wake not "
              f"modelled; {_COMMON}"),
    "openrlhf-async": FrameworkPreset(
        "OpenRLHF", "separate", mode="async", staleness=1.0,
        knobs="--async_train, OPENRLHF_ASYNC_QUEUE_SIZE=1",
        notes="the separate pools of 'openrlhf'; a queue of one batch = one step off "
              "(staleness 1); partial rollout unconfirmed, so samples are drained before each "
              "sync"),
    "trl": FrameworkPreset(
        "TRL", "colocated", knobs="vllm_mode='colocate' (default since PR #5255)",
        notes=f"vLLM in the trainer processes on all GPUs (sleep mode not modelled); "
              f"before PR #5255 the default was 'server' (preset 'trl-server'); {_COMMON}"),
    "trl-server": FrameworkPreset(
        "TRL", "disaggregated", rollout_share=0.125,
        knobs="vllm_mode='server' (trl vllm-serve); 1 vLLM + 7 training GPUs as in the HF "
              "blog",
        notes="synchronous: the vLLM GPUs wait while the trainer trains and vice versa; "
              "split 1:7 from the blog's 8-GPU comparison"),
    "trl-async": FrameworkPreset(
        "TRL", "disaggregated", mode="async", rollout_share=0.5, staleness=4.0,
        knobs="AsyncGRPOTrainer: max_staleness=4, weight_sync_steps=1 (vLLM server)",
        notes="max_staleness 4 discards samples older than 4 updates; modelled as an "
              f"admission bound of 4 versions (max_inflight_tasks scales with it); partial "
              f"rollout unconfirmed (drained); {_ASSUMED_HALF}"),
    "nemo-rl": FrameworkPreset(
        "NeMo-RL", "colocated", knobs="policy.generation.colocated.enabled=true",
        notes=f"every role on all GPUs; refit by CUDA IPC as the reshard; {_COMMON}"),
    "nemo-rl-async": FrameworkPreset(
        "NeMo-RL", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        knobs="grpo.async_grpo.enabled=true, max_trajectory_age_steps=1, "
              "colocated.enabled=false, in_flight_weight_updates=false",
        notes=f"trajectories at most one version old; no in-flight updates (drained before a "
              f"sync); {_ASSUMED_HALF}"),
    "nemo-aligner": FrameworkPreset(
        "NeMo-Aligner", "split", critic_share=1 / 3, reward_model="actor",
        knobs="actor job (generation, actor, initial policy) : critic job (critic, reward "
              "model) = 2:1 nodes, as in the scaling table",
        notes="synchronous; the reward model has the actor's shape by default (the table's "
              "70B actor + 70B reward model); generation inside the actor job with the "
              "vLLM-like engine (TensorRT-LLM and its refit not modelled); the CPU offload "
              "swap in the critic job not modelled"),
    "deepspeed-chat": FrameworkPreset(
        "DeepSpeed-Chat", "colocated",
        knobs="--enable_hybrid_engine, ZeRO-3, --inference_tp_size",
        notes="every model on all GPUs; the Hybrid Engine's generation is given the "
              "simulator's continuous-batching engine, which DeepSpeed-Inference did not "
              "have (optimistic); ZeRO-3 -> TP regather as the weight sync"),
    "real": FrameworkPreset(
        "ReaL", "colocated", knobs="allocation_mode=heuristic",
        notes="modelled as colocated and synchronous: ReaL's parameter reallocation (a new "
              "device set and parallel strategy for each model call) is not modelled, so the "
              "preset shows none of its gains"),
    "areal": FrameworkPreset(
        "AReaL", "disaggregated", mode="async", rollout_share=5 / 6, staleness=4.0,
        partial_rollout=True,
        knobs="max_head_offpolicyness=4, interruptible rollout, decoupled PPO with "
              "recompute_logprob; allocation sglang.d80m2p1+d4m2p4 (160:32 GPUs)",
        notes="eta = 4 from the math re-run settings (the code default 0 is synchronous); "
              "rollout:train = 5:1 from the reproduce guide's 192-GPU run; interruptible "
              "rollout = partial rollout (the KV-cache recompute after an interrupt is not "
              "costed); the proximal log-probs recomputed (old_logp phase)"),
    "slime": FrameworkPreset(
        "slime", "disaggregated", rollout_share=0.5,
        knobs="train.py; --actor-num-gpus-per-node 4, --rollout-num-gpus 4 (quick start)",
        notes="synchronous on separate GPUs, split 1:1 from the quick start's 4 + 4; "
              "Megatron costed as FSDP"),
    "slime-colocate": FrameworkPreset(
        "slime", "colocated", knobs="--colocate", notes=f"every role on all GPUs; {_COMMON}"),
    "slime-async": FrameworkPreset(
        "slime", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        consume="batch",
        knobs="train_async.py (rollout k+1 starts before training k), "
              "--update-weights-interval 1",
        notes="one-step overlap: staleness 1; generation drained before each weight update; "
              "split 1:1 as the quick start"),
    "roll": FrameworkPreset(
        "ROLL", "colocated", knobs="async_generation_ratio=0",
        notes="synchronous; the default device mapping is unconfirmed, modelled colocated"),
    "roll-async": FrameworkPreset(
        "ROLL", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        knobs="async_generation_ratio=1 (the examples' value), disaggregated device mapping",
        notes=f"ratio 1 = generation one batch ahead (staleness 1); partial rollout "
              f"unconfirmed (drained); {_ASSUMED_HALF}"),
    "streamrl": FrameworkPreset(
        "StreamRL", "disaggregated", mode="async", rollout_share=0.5, staleness=0.0,
        minibatches=4,
        knobs="stream generation in synchronous RL",
        notes="on-policy, but the trainer starts on finished samples while the batch is "
              "still generating: 4 streaming updates per version (assumed); the "
              f"output-length ranker and heterogeneous GPUs not modelled; {_ASSUMED_HALF}"),
    "streamrl-async": FrameworkPreset(
        "StreamRL", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        minibatches=4, knobs="fully asynchronous stream generation",
        notes=f"as 'streamrl' with generation one version ahead (staleness 1, assumed); "
              f"{_ASSUMED_HALF}"),
    "llamarl": FrameworkPreset(
        "LlamaRL", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        knobs="asynchronous off-policy training (AIPO)",
        notes=f"separate generator and trainer (third-party); one version of lag assumed; "
              f"DDMA weight sync costed as the cost model's reshard; {_ASSUMED_HALF}"),
    "pipelinerl": FrameworkPreset(
        "PipelineRL", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        partial_rollout=True,
        knobs="actor_fraction=4, finetune_fraction=4, in-flight weight updates, "
              "max_lag=null",
        notes="in-flight weight updates = partial rollout (sampling only pauses for the "
              "broadcast); max_lag is unbounded by default but the simulator needs a bound: "
              "1 version assumed (override staleness=); split 1:1 from conf/base.yaml"),
    "prime-rl": FrameworkPreset(
        "prime-rl", "disaggregated", mode="async", rollout_share=0.5, staleness=1.0,
        knobs="max_async_level=1 (one stored config; the docs say 2), orchestrator on CPU",
        notes=f"inference at most one step ahead; rule rewards on the CPU orchestrator; "
              f"partial rollout unconfirmed (drained); {_ASSUMED_HALF}"),
}
"""Preset name -> the framework's layout and mode on the simulator (book Table 12.2)."""

DEFAULT_WORKLOAD = Workload(prompts=128)
"""The default workload of the presets (book Chapter 12) — 128 prompts x 16 responses, 512-token
prompts, log-normal responses of mean 2,048 tokens (sigma 1) cut at 8,192 — the simulator's
default lengths, four times its default batch, so that training is a visible part of a step."""

_COST_KEYS = ("kl_coef", "reward_model", "recompute_old_logprobs", "train_efficiency",
              "decode_efficiency", "max_num_seqs")
_SYSTEM_KEYS = ("mode", "staleness", "partial_rollout", "minibatches", "fuse_logps",
                "overlap_reward", "switch_s", "weight_sync_s", "consume")
_LAYOUT_KEYS = ("rollout_share", "critic_share")
OVERRIDES = _COST_KEYS + _SYSTEM_KEYS + _LAYOUT_KEYS
"""Keyword arguments :func:`framework_system` accepts besides its own."""


def framework_names() -> list[str]:
    """The preset names, in table order (``"verl"``, ``"verl-one-step-off"``, ...)."""
    return list(PRESETS)


def _preset(name) -> FrameworkPreset:
    key = name.lower() if isinstance(name, str) else name
    if key not in PRESETS:
        raise ValueError(f"name must be one of {framework_names()}, got {name!r}")
    return PRESETS[key]


def _round_to(n: float, tp: int) -> int:
    return max(tp, int(round(n / tp)) * tp)


def preset_gpu_split(name: str, gpus: int, tp: int, *, has_third_pool: bool = True,
                     rollout_share: float | None = None,
                     critic_share: float | None = None) -> dict:
    """GPUs per pool of preset ``name`` on ``gpus`` GPUs whose rollout replicas hold ``tp``
    GPUs: the framework's stated shares, the generating pool rounded to whole replicas.
    ``has_third_pool``: whether the "separate" layout needs the critic + reward pool (False:
    rollout and actor halves), and whether the "split" layout's critic job has any model.

    Returns:
        A dict pool -> GPUs, pools as :func:`framework_system` names them.

    Raises:
        ValueError: naming ``gpus`` when they are too few for the layout.
    """
    p = _preset(name)
    check_int("gpus", gpus, 1)
    check_int("tp", tp, 1)
    if p.layout == "colocated":
        return {"all": gpus}
    if p.layout == "disaggregated":
        share = p.rollout_share if rollout_share is None else rollout_share
        rollout = _round_to(gpus * share, tp)
        while rollout >= gpus and rollout > tp:
            rollout -= tp
        split = {"rollout": rollout, "train": gpus - rollout}
    elif p.layout == "separate":
        n = 3 if has_third_pool else 2
        rollout = _round_to(gpus / n, tp)
        critic = int(round(gpus / n)) if has_third_pool else 0
        split = {"rollout": rollout, "actor": gpus - rollout - critic,
                 **({"critic": critic} if has_third_pool else {})}
    else:                                                     # split: actor job | critic job
        share = p.critic_share if critic_share is None else critic_share
        actor = _round_to(gpus * (1 - share), tp)
        while actor >= gpus and actor > tp:
            actor -= tp
        split = {"actor": actor, "critic": gpus - actor}
    if min(split.values()) < 1 or split.get("rollout", split.get("actor")) < tp:
        raise ValueError(f"gpus = {gpus} is too few for the {p.layout} layout of {name!r} "
                         f"with {tp}-GPU rollout replicas: pools would be {split}")
    return split


def framework_system(name: str, *, actor="qwen2.5-7b", hardware="h100-sxm", gpus: int = 64,
                     workload: Workload | None = None, algo: str = "grpo",
                     **overrides) -> RLSystem:
    """Preset ``name``'s default layout and mode (:data:`PRESETS`) for ``actor`` on ``gpus``
    GPUs of ``hardware``, with the costs of
    :func:`~rlmperf_lite.sim.from_cost.system_from_cost` for ``workload`` (default
    :data:`DEFAULT_WORKLOAD`) and ``algo`` (book section 12.2).

    ``overrides`` (any of ``OVERRIDES``): cost-model arguments (``kl_coef``,
    ``reward_model``, ``recompute_old_logprobs``, efficiencies, ``max_num_seqs``),
    :class:`~rlmperf_lite.sim.RLSystem` fields (``mode``, ``staleness``, ``partial_rollout``,
    ``minibatches``, ``weight_sync_s``, ...), or the layout's ``rollout_share`` / ``critic_share``.

    Raises:
        ValueError: naming the parameter — an unknown ``name`` or override, a bad ``gpus``,
            ``workload`` or ``algo``, too few GPUs for the layout, the NeMo-Aligner layout
            with nothing for its critic job, or from the cost models and
            :class:`~rlmperf_lite.sim.RLSystem` (e.g. ``mode="async"`` on a colocated preset).
    """
    p = _preset(name)
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ValueError(f"overrides {unknown} are not parameters of framework_system; "
                         f"allowed: {list(OVERRIDES)}")
    check_int("gpus", gpus, 1)
    check_choice("algo", algo, ALGOS)
    wl = DEFAULT_WORKLOAD if workload is None else workload
    if not isinstance(wl, Workload):
        raise ValueError(f"workload must be a Workload or None, got {type(workload).__name__}")
    model, hw = resolve_model(actor, "actor"), resolve_hardware(hardware)
    cost_kw = {"recompute_old_logprobs": p.recompute_old_logprobs,
               "reward_model": model if p.reward_model == "actor" else p.reward_model,
               **{k: overrides[k] for k in _COST_KEYS if k in overrides}}
    sys_kw = {"mode": p.mode, "staleness": p.staleness, "partial_rollout": p.partial_rollout,
              "minibatches": p.minibatches, "consume": p.consume, "name": name.lower(),
              **{k: overrides[k] for k in _SYSTEM_KEYS if k in overrides}}
    shares = {k: overrides[k] for k in _LAYOUT_KEYS if k in overrides}
    for k, v in shares.items():
        check_number(k, v, low=0, high=1, low_open=True, high_open=True)
    tp = rollout_tp(model, hw, gpus)
    critic = algo == "ppo"
    third = critic or cost_kw["reward_model"] is not None
    if p.layout == "split" and not third:
        raise ValueError(f"reward_model: {name!r} puts the critic and the reward model in a "
                         f"job of their own; with algo={algo!r} and no reward model it would "
                         f"hold nothing (pass reward_model= or algo='ppo')")
    split = preset_gpu_split(name, gpus, tp, has_third_pool=third, **shares)
    common = dict(algo=algo, **cost_kw)
    if p.layout == "colocated":
        return system_from_cost(model, hw, wl, placement="colocated", gpus=gpus, **common,
                                **sys_kw)
    if p.layout == "disaggregated":
        return system_from_cost(model, hw, wl, placement="disaggregated", gpus=gpus,
                                rollout_gpus=split["rollout"], **common, **sys_kw)
    on_cpu = cost_kw["reward_model"] is None
    if p.layout == "separate":      # engine and sync as disaggregated onto the actor's pool
        base = system_from_cost(model, hw, wl, placement="disaggregated",
                                gpus=split["rollout"] + split["actor"],
                                rollout_gpus=split["rollout"], **common, mode="sync")
        pools = dict(split)
        placement = {"rollout": "rollout", "actor": "actor", "ref": "actor",
                     "critic": "critic" if third else "actor",
                     "reward": "cpu" if on_cpu else "critic"}
    else:                           # split: generation inside the actor job, colocated sync
        base = system_from_cost(model, hw, wl, placement="colocated", gpus=split["actor"],
                                **common, mode="sync")
        pools = dict(split)
        placement = {"rollout": "actor", "actor": "actor", "ref": "actor", "critic": "critic",
                     "reward": "cpu" if on_cpu else "critic"}
    if on_cpu:
        pools["cpu"] = 1
    return dataclasses.replace(base, pools=pools, placement=placement,
                               **{k: v for k, v in sys_kw.items()})


# ---- published step times: what a speed-up compares -----------------------------------------

NEMO_RL_PERF_V04 = {
    "source": _NRL + "docs/about/performance-summary.md (@06beed91): v0.4, GRPO, "
                     "OpenMathInstruct-2, DGX-H100, BF16, Megatron-Core",
    "rows": {   # model: ((GPUs, s/step) on-policy, (GPUs, s/step) one-step off-policy)
        "Llama3.1-8B": ((16, 97.7), (16, 74.6)),
        "DeepSeek-V3": ((256, 154.0), (512, 77.9)),
        "Qwen3-235B": ((128, 506.0), (256, 241.0)),
        "Qwen3-30B-A3B": ((32, 225.0), (32, 244.0)),
        "Qwen3-32B": ((32, 393.0), (64, 215.0)),
    },
}
"""NeMo-RL's published on-policy and one-step-off step times (book section 12.4); the rows do
not state the one-step-off runs' rollout:train split."""


def published_speedups(table: dict = NEMO_RL_PERF_V04) -> dict:
    """{model: {"step_speedup", "gpu_s_speedup", "gpus_ratio"}} of a table of (GPUs, seconds
    per step) pairs, baseline first: the ratio of step times, and the ratio of GPU-seconds per
    step (t0 g0) / (t1 g1), which is what a speed-up on more GPUs buys per GPU (book section
    12.4)."""
    out = {}
    for model, ((g0, t0), (g1, t1)) in table["rows"].items():
        out[model] = {"step_speedup": t0 / t1, "gpu_s_speedup": t0 * g0 / (t1 * g1),
                      "gpus_ratio": g1 / g0}
    return out


# ---- the critical path of a simulated step ------------------------------------------------

def _merge(spans) -> list:
    out = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _subtract(spans, holes) -> list:
    out, holes = [], _merge(holes)
    for a, b in spans:
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append([a, h0])
            a = max(a, h1)
        if a < b:
            out.append([a, b])
    return out


def _covered(spans, points):
    """For each of ``points``, whether a merged span contains it."""
    import numpy as np
    if not spans:
        return np.zeros(len(points), dtype=bool)
    starts = np.array([s[0] for s in spans])
    ends = np.array([s[1] for s in spans])
    i = np.searchsorted(starts, points, side="right") - 1          # last span starting before
    return (i >= 0) & (points < ends[np.maximum(i, 0)])


def step_breakdown(result, tail_steps: int | None = None) -> dict:
    """Where a steady-state step's wall time goes (book section 12.5): the mean, over the steps
    after the warm-up, of the seconds during which the GPUs only generate
    (``generation_only_s``), only run phases after generation (``training_only_s``), do both
    on different pools (``overlap_s``), sync weights (``weight_sync_s``) or do neither
    (``idle_s``: switches, waiting); the five sum to ``step_time_s``. In a synchronous step
    generation, training and the sync are links of one chain, so the step is their sum; an
    asynchronous system moves time into ``overlap_s``.

    Also the busy time: ``work_gpu_s``, the GPU-seconds during which this schedule keeps GPUs
    busy per step (a rollout replica while it runs at least one sequence, every phase after
    generation on its pool's GPUs), and ``work_bound_s`` = ``work_gpu_s`` / GPUs. Both
    measure the schedule (a replica decoding one straggler counts as busy), so they are not
    the work W of the book's definition nor a lower bound on the step: that is
    :func:`~rlmperf_lite.sim.workdepth.system_workdepth`.

    The window: the steps after :attr:`~rlmperf_lite.sim.SimResult.warmup_steps`, less the
    last ``tail_steps``; ``step_time_s`` is the mean step time over the window. The breakdown
    is a split of wall time, not of samples, and a result holds every sample the engine
    started (those never trained with ``consumed_step`` -1), so the window's generation is
    complete whatever ``tail_steps``. The default, ceil(staleness) steps (one more with partial
    rollout) for an asynchronous run and none for a synchronous one, is a heuristic, a
    conservative margin that keeps the run's last versions out of the mean (``tail_steps=0``
    is as valid and moves the book's presets' numbers by well under 1%). It is not a
    staleness bound: the staleness bound limits how far the engine runs
    ahead when it admits a group, and with streaming consumption a sample can be trained
    many more versions after it started (:attr:`~rlmperf_lite.sim.SimResult.staleness`).

    Raises:
        ValueError: naming ``result`` if it is not a :class:`~rlmperf_lite.sim.SimResult`, or
            ``tail_steps`` if it is negative or leaves no step in the window (simulate more
            steps).
    """
    import math

    import numpy as np

    from .result import SimResult
    if not isinstance(result, SimResult):
        raise ValueError(f"result must be a SimResult, got {type(result).__name__}")
    sys_ = result.system
    if tail_steps is None:
        tail_steps = 0 if sys_.mode == "sync" else \
            math.ceil(sys_.staleness) + (sys_.partial_rollout and sys_.staleness > 0)
    check_int("tail_steps", tail_steps, 0)
    warm, ends = max(result.warmup_steps, 1), result.step_end_s
    last = result.steps - 1 - tail_steps
    if last < warm:
        raise ValueError(f"tail_steps = {tail_steps} leaves no step after the {warm} warm-up "
                         f"steps of a {result.steps}-step run: simulate at least "
                         f"{2 * (tail_steps + 1)} steps")
    lo, hi, n = float(ends[warm - 1]), float(ends[last]), last - warm + 1
    s = result.samples
    gen = _subtract(_merge(zip(s["start_s"], s["end_s"])), result.rollout_pauses)
    train = _merge((iv.start_s, iv.end_s) for iv in result.intervals
                   if iv.phase != "switch" and iv.pool != "cpu")
    sync = _merge(result.sync_windows)
    cuts = sorted({lo, hi, *(x for sp in (gen, train, sync) for ab in sp for x in ab
                              if lo < x < hi)})
    cuts = np.array(cuts)                                                  # (K,)
    mid, width = (cuts[1:] + cuts[:-1]) / 2, np.diff(cuts)                 # (K - 1,)
    in_sync, in_gen, in_train = (_covered(sp, mid) for sp in (sync, gen, train))
    parts = {"generation_only_s": ~in_sync & in_gen & ~in_train,
             "training_only_s": ~in_sync & ~in_gen & in_train,
             "overlap_s": ~in_sync & in_gen & in_train,
             "weight_sync_s": in_sync,
             "idle_s": ~in_sync & ~in_gen & ~in_train}
    out = {k: float(width[m].sum()) / n for k, m in parts.items()}
    u = result.utilisation(window=(lo, hi))
    work = sum(share["compute"] * result.system.pools[pool] for pool, share in u.items())
    out["step_time_s"] = (hi - lo) / n
    out["work_gpu_s"] = work * (hi - lo) / n
    out["work_bound_s"] = out["work_gpu_s"] / result.system.gpus
    return out
