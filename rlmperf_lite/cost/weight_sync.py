"""The weight sync and the model switch as mechanisms, stage by stage (book section
:ref:`sec-weight-sync-mechanism`).

A sync moves the trainer's new weights into the rollout engine. What verl, NeMo-RL, OpenRLHF
and slime do, as named stages (each a formula; constants in ``data/weight_sync.json``, each
with its source or marked calibrated / assumed):

- ``gather``: every trainer rank assembles full tensors from its shards — a hierarchical
  all-gather of the 2N weight bytes over the ZeRO-3 group (``backend="fsdp"``, dp cp ranks) or
  the Megatron model-parallel group (tp pp ep ranks), NVLink inside a node, the network cards
  across nodes (:func:`~rlmperf_lite.cost.rollout.weight_sync_s`).
- ``convert``: Megatron names and fused layouts to the engine's (QKV split, gate/up fusion):
  every byte read and written once at HBM speed; FSDP already holds HF names (0).
- ``transfer``: disaggregated, trainer rank 0 broadcasts full tensors to every rollout rank
  (verl ``nccl_checkpoint_engine.py``; OpenRLHF, slime likewise): 2N bytes at the broadcast's
  bus bandwidth (nccl-tests: busbw = algbw), either tensor by tensor (a calibrated cost per
  tensor that grows with log2 of the nodes spanned) or in buckets (``bucketed=True``, the
  checkpoint engine: a cost per bucket, no cost per tensor); across nodes one sender reaches a
  calibrated share of its network card, inside a node NVLink in full. Colocated, a CUDA IPC
  handle per tensor (or per bucket) and no bytes across GPUs.
- ``load``: the engine's ``load_weights``, a measured cost per tensor plus its shard
  (2N / tp_i bytes, :func:`~rlmperf_lite.cost.reshard_bytes_per_gpu`) copied at HBM speed.

A model switch on a time-shared pool (:func:`switch_breakdown`) swaps the trainer and the
engine: the engine sleeps or wakes (vLLM sleep level 1: its weight shard to or from pinned host
memory, KV cache freed; level 2: weights dropped, nothing copied) and, with
``trainer_offload``, the trainer's states (16 bytes per parameter, ZeRO-3-sharded) go to or
come from the host, all over the host link (PCIe) at ``host_link_efficiency`` of its peak.

The bandwidth bound the chapters used before (:func:`~rlmperf_lite.cost.reshard_time_s`,
received bytes over a link) is ``method="bandwidth"`` of :func:`weight_sync_time_s`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from ..checks import check_bool, check_choice, check_efficiency, check_int, check_number
from .collective import collective_time_s
from .hardware import HardwareSpec, resolve_hardware
from .memory import model_state_bytes
from .model import ModelConfig
from .parallel_plan import ParallelPlan
from .presets import resolve_model
from .reshard import reshard_bytes_per_gpu, reshard_time_s
from .rollout import rollout_tp, weight_sync_s as allgather_time_s

__all__ = ["SYNC_MODES", "SYNC_BACKENDS", "SYNC_METHODS", "VERL_SYNC_ROWS", "StageBreakdown",
           "weight_sync_constants", "weight_sync_sources", "num_weight_tensors",
           "weight_sync_breakdown", "weight_sync_time_s", "switch_breakdown", "switch_time_s",
           "verl_megatron_plan", "verl_sync_model_s", "calibrate_weight_sync"]

SYNC_MODES = ("colocated", "disaggregated")
SYNC_BACKENDS = ("fsdp", "megatron")
SYNC_METHODS = ("mechanism", "bandwidth")


@lru_cache(maxsize=None)
def _data() -> dict:
    path = resources.files("rlmperf_lite.cost") / "data" / "weight_sync.json"
    return json.loads(path.read_text(encoding="utf-8"))


def weight_sync_constants() -> dict:
    """{name: value} of the model's constants (``data/weight_sync.json``)."""
    return {k: v["value"] for k, v in _data()["constants"].items()}


def weight_sync_sources() -> dict:
    """{name: (kind, source)}: kind is measured, config, calibrated or assumed."""
    return {k: (v["kind"], v["source"]) for k, v in _data()["constants"].items()}


VERL_SYNC_ROWS = tuple(tuple(r) for r in _data()["verl_sync_rows"]["rows"])
"""verl's measured syncs (model, preset, trainer ranks, rollout ranks, seconds without and with
the checkpoint engine): H20s, Megatron trainer (``data/weight_sync.json`` gives the source)."""


def _constants(overrides) -> dict:
    c = weight_sync_constants()
    if overrides is not None:
        if not isinstance(overrides, dict) or set(overrides) - set(c):
            raise ValueError(f"constants must be a dict with keys among {sorted(c)}, got "
                             f"{overrides!r}")
        c.update(overrides)
    # an efficiency in [1e-6, 1], a positive bandwidth multiplier (the calibration probes with a
    # huge one to isolate the per-tensor costs), a bucket of at least one byte, seconds >= 0
    for k, v in c.items():
        if k == "host_link_efficiency":
            check_efficiency(f"constants[{k!r}]", v)
        elif k == "broadcast_bandwidth_share":
            check_number(f"constants[{k!r}]", v, low=0, low_open=True)
        elif k == "bucket_bytes":
            check_number(f"constants[{k!r}]", v, low=1)
        else:
            check_number(f"constants[{k!r}]", v, low=0)
    return c


def num_weight_tensors(model: ModelConfig) -> int:
    """Tensors in the model's Hugging Face checkpoint (its ``weight_map`` entries): per layer
    2 norms, attention (q k v o, their biases, q/k norms; MLA's 7), the MLP's 2 or 3 matrices
    (and biases), or for a MoE layer the router, E x 3 expert matrices and the shared experts;
    plus embedding, final norm, untied head, learned positions (LayerNorm: weight and bias).
    Qwen2.5-7B: 339; Qwen3-30B-A3B: 18,867 (tests cite the checkpoints)."""
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    norm = 2 if model.norm == "layernorm" else 1
    mlp = model.mlp_matrices * (2 if model.mlp_bias else 1)
    if model.is_mla:         # q (or q_a, q_a_layernorm, q_b), kv_a, kv_a_layernorm, kv_b, o
        attn = (1 if model.q_lora_rank is None else 3) + 4
    else:
        attn = 4 + 3 * (model.qkv_bias or model.attention_bias) + model.attention_bias \
            + 2 * model.qk_norm + model.attention_sinks
    moe = 1 + model.router_bias + model.num_experts * mlp + (mlp if model.num_shared_experts
                                                             else 0) + model.shared_expert_gate
    layers = model.num_hidden_layers
    per_layer = model.norms_per_layer * norm + attn
    body = layers * per_layer + (layers - model.num_moe_layers) * mlp + model.num_moe_layers * moe
    return (body + 1 + norm + (0 if model.tie_word_embeddings else 1)
            + (model.position == "learned"))


@dataclass(frozen=True)
class StageBreakdown:
    """Seconds per named stage, in order (a sync: gather, convert, transfer, load; a switch:
    engine, trainer), the bytes each stage handles per GPU, and the inputs that set them."""

    kind: str
    stages: dict
    tensors: int
    weight_bytes: float
    """The bytes of the full bf16 weights, 2N."""
    inputs: dict = field(default_factory=dict, compare=False)
    stage_bytes: dict = field(default_factory=dict, compare=False)
    """Per stage (keys of ``stages``), the weight bytes it handles on one GPU. A sync's gather
    receives (k - 1) / k of 2N over its k ranks; convert rewrites 2N (Megatron) or nothing;
    transfer sends 2N (a broadcast, or colocated buckets) or nothing (an IPC handle per
    tensor); load copies the engine's shard. A switch moves the engine's and the trainer's
    bytes over the host link."""

    @property
    def total_s(self) -> float:
        return float(sum(self.stages.values()))

    def __getitem__(self, stage: str) -> float:
        return self.stages[stage]


def _gather_ranks(plan: ParallelPlan, backend: str) -> int:
    """Ranks a trainer rank gathers full tensors from: ZeRO-3's dp cp (FSDP), or Megatron's
    tp pp ep (experts also split over ep; PP stages broadcast their layers)."""
    if backend == "fsdp":
        return plan.dp * plan.cp if plan.zero_stage == 3 else 1
    return plan.tp * plan.pp * plan.ep


def _broadcast(hw: HardwareSpec, train_gpus: int, rollout_gpus: int) -> tuple:
    """(nodes spanned, bandwidth) of trainer rank 0's broadcast to every rollout rank: one node
    when trainers and engines share its NVLink domain, else the engines' nodes plus the
    sender's."""
    if train_gpus + rollout_gpus <= hw.nvlink_domain:
        bw, nodes = hw.intra_node_bandwidth_bytes_per_s, 1
    else:
        bw, nodes = hw.inter_node_bandwidth_bytes_per_s, math.ceil(
            rollout_gpus / hw.gpus_per_node) + 1
    if bw is None:
        raise ValueError(f"hardware {hw.name!r} has no {'intra' if nodes == 1 else 'inter'}"
                         f"-node bandwidth for the weight broadcast")
    return nodes, float(bw)


def _transfer(hw, c, w, n_t, mode, bucketed, train_gpus, rollout_gpus) -> float:
    """The transfer stage (module docstring)."""
    buckets = math.ceil(w / c["bucket_bytes"])
    if mode == "colocated":             # CUDA IPC: a handle per tensor, or a packed bucket
        if bucketed:
            return buckets * c["per_bucket_s"] + 2.0 * w / hw.hbm_bandwidth_bytes_per_s
        return n_t * c["per_tensor_s"]
    nodes, bw = _broadcast(hw, train_gpus, rollout_gpus)
    if nodes > 1:                       # one sender's broadcast across nodes: a share of the NIC
        bw *= c["broadcast_bandwidth_share"]
    bytes_s = collective_time_s("broadcast", w, rollout_gpus + 1, bw)
    if bucketed:
        return bytes_s + buckets * c["per_bucket_s"]
    return bytes_s + n_t * (c["per_tensor_s"]
                            + c["per_tensor_per_node_doubling_s"] * math.log2(nodes))


def weight_sync_breakdown(actor, hardware, train_plan: ParallelPlan, infer_tp: int, *,
                          mode: str = "colocated", backend: str = "fsdp",
                          bucketed: bool = False, rollout_gpus: int | None = None,
                          weight_bytes: int = 2, constants: dict | None = None
                          ) -> StageBreakdown:
    """Seconds of one weight sync by stage (module docstring): ``actor`` trained with
    ``train_plan`` (``backend`` ``"fsdp"`` or ``"megatron"``) into an engine of tensor
    parallelism ``infer_tp``; ``mode`` ``"colocated"`` (same GPUs) or ``"disaggregated"``
    (``rollout_gpus`` engine GPUs apart); ``bucketed`` = checkpoint-engine buckets;
    ``constants`` override entries of :func:`weight_sync_constants`.

    Raises:
        ValueError: naming the argument — bad types, an unknown mode or backend, no
            ``rollout_gpus`` when disaggregated, an invalid plan or engine size
            (:func:`~rlmperf_lite.cost.reshard_bytes_per_gpu`), hardware without the link.
    """
    hw, actor = resolve_hardware(hardware), resolve_model(actor, "actor")
    check_choice("mode", mode, SYNC_MODES)
    check_choice("backend", backend, SYNC_BACKENDS)
    check_bool("bucketed", bucketed)
    check_int("rollout_gpus", rollout_gpus, 1, optional=mode == "colocated")
    c = _constants(constants)
    # the engine's shard (and every validity check of the layouts)
    shard = reshard_bytes_per_gpu(actor, train_plan, infer_tp, mode="disaggregated",
                                  weight_bytes=weight_bytes)
    w, n_t = float(weight_bytes) * actor.num_params(), num_weight_tensors(actor)
    hbm, k = hw.hbm_bandwidth_bytes_per_s, _gather_ranks(train_plan, backend)
    stages = {
        "gather": allgather_time_s(w, hw, k),
        "convert": 2.0 * w / hbm if backend == "megatron" else 0.0,   # read + write each byte
        "transfer": _transfer(hw, c, w, n_t, mode, bucketed, train_plan.gpus, rollout_gpus),
        "load": n_t * c["load_per_tensor_s"] + 2.0 * shard / hbm,
    }
    moved = {"gather": w * (1 - 1 / k), "convert": w if backend == "megatron" else 0.0,
             "transfer": w if mode == "disaggregated" or bucketed else 0.0, "load": shard}
    return StageBreakdown("weight sync", stages, n_t, w, dict(
        mode=mode, backend=backend, bucketed=bucketed, infer_tp=infer_tp,
        rollout_gpus=rollout_gpus, train_gpus=train_plan.gpus, engine_shard_bytes=shard,
        gather_ranks=k), moved)


def weight_sync_time_s(actor, hardware, train_plan: ParallelPlan, infer_tp: int, *,
                       mode: str = "colocated", backend: str = "fsdp", bucketed: bool = False,
                       rollout_gpus: int | None = None, weight_bytes: int = 2,
                       method: str = "mechanism", constants: dict | None = None) -> float:
    """Seconds of one weight sync: the total of :func:`weight_sync_breakdown`, or with
    ``method="bandwidth"`` the bandwidth bound :func:`~rlmperf_lite.cost.reshard_time_s`
    (received bytes over one link, the chapters' model before the mechanism one).

    Raises:
        ValueError: naming ``method``, or as :func:`weight_sync_breakdown`.
    """
    check_choice("method", method, SYNC_METHODS)
    if method == "bandwidth":
        return reshard_time_s(resolve_model(actor, "actor"), resolve_hardware(hardware),
                              train_plan, infer_tp, mode=mode, weight_bytes=weight_bytes)
    return weight_sync_breakdown(actor, hardware, train_plan, infer_tp, mode=mode,
                                 backend=backend, bucketed=bucketed, rollout_gpus=rollout_gpus,
                                 weight_bytes=weight_bytes, constants=constants).total_s


def switch_breakdown(actor, hardware, gpus: int, infer_tp: int, *, trainer_offload: bool = False,
                     sleep_level: int = 1, trained_models: int = 1, weight_bytes: int = 2,
                     constants: dict | None = None) -> StageBreakdown:
    """Seconds of one model switch on a time-shared pool of ``gpus`` (module docstring): the
    engine's shard 2N / ``infer_tp`` out or in (vLLM sleep level 1; level 2 copies nothing)
    and, with ``trainer_offload``, ``trained_models`` x 16 N / ``gpus`` bytes of trainer states
    the other way, both over the host link at ``host_link_efficiency`` of its peak.

    Raises:
        ValueError: naming the argument, or ``hardware.host_link_bandwidth_bytes_per_s`` when
            bytes must cross a link the preset does not give.
    """
    hw, actor = resolve_hardware(hardware), resolve_model(actor, "actor")
    check_int("gpus", gpus, 1)
    check_int("infer_tp", infer_tp, 1)
    check_int("sleep_level", sleep_level, 1)          # not True or 1.0, which == 1
    check_choice("sleep_level", sleep_level, (1, 2))
    check_bool("trainer_offload", trainer_offload)
    check_int("trained_models", trained_models, 0)
    check_int("weight_bytes", weight_bytes, 1)
    c = _constants(constants)
    engine_bytes = float(weight_bytes) * actor.num_params() / infer_tp if sleep_level == 1 else 0.0
    trainer_bytes = (trained_models * model_state_bytes(actor.num_params()) / gpus
                     if trainer_offload else 0.0)
    bw = hw.host_link_bandwidth_bytes_per_s
    if bw is None and engine_bytes + trainer_bytes > 0:
        raise ValueError(f"hardware.host_link_bandwidth_bytes_per_s is None for {hw.name!r}: "
                         f"give the host link (PCIe) bandwidth, or sleep_level=2 and "
                         f"trainer_offload=False (nothing copied)")
    rate = (bw or 1.0) * c["host_link_efficiency"]
    stages = {"engine": c["engine_sleep_wake_s"] + engine_bytes / rate,
              "trainer": trainer_bytes / rate}
    return StageBreakdown("switch", stages, num_weight_tensors(actor),
                          float(weight_bytes) * actor.num_params(),
                          dict(gpus=gpus, infer_tp=infer_tp, sleep_level=sleep_level,
                               trainer_offload=trainer_offload, engine_bytes=engine_bytes,
                               trainer_bytes=trainer_bytes),
                          {"engine": engine_bytes, "trainer": trainer_bytes})


def switch_time_s(actor, hardware, gpus: int, infer_tp: int, **kw) -> float:
    """Seconds of one model switch, the total of :func:`switch_breakdown` (same arguments)."""
    return switch_breakdown(actor, hardware, gpus, infer_tp, **kw).total_s


# ---- calibration against verl's published syncs --------------------------------------------

def verl_megatron_plan(preset: str, trainer_ranks: int) -> ParallelPlan:
    """The (assumed, ``data/weight_sync.json``) Megatron layout of verl's ablation trainers."""
    lay = _data()["verl_megatron_plans"][preset]
    tp, pp, ep = lay["tp"], lay["pp"], lay["ep"]
    return ParallelPlan(dp=trainer_ranks // (tp * pp), tp=tp, pp=pp, ep=ep, sp=tp > 1,
                        zero_stage=1, microbatches=pp)


def verl_sync_model_s(preset: str, trainer_ranks: int, rollout_ranks: int, hardware="h20", *,
                      bucketed: bool = False, constants: dict | None = None) -> float:
    """The mechanism model of one of verl's ablation syncs: ``preset`` trained by its Megatron
    layout (:func:`verl_megatron_plan`) on ``trainer_ranks`` GPUs, sent to an engine of the
    smallest tp that fits on ``rollout_ranks`` others, plain or ``bucketed`` (the checkpoint
    engine)."""
    m, hw = resolve_model(preset, "actor"), resolve_hardware(hardware)
    return weight_sync_time_s(m, hw, verl_megatron_plan(preset, trainer_ranks),
                              rollout_tp(m, hw, rollout_ranks), mode="disaggregated",
                              backend="megatron", bucketed=bucketed,
                              rollout_gpus=rollout_ranks, constants=constants)


def calibrate_weight_sync(rows=VERL_SYNC_ROWS, hardware="h20", *,
                          fit=("qwen2.5-7b", "qwen3-235b-a22b"),
                          fit_bucketed=("qwen3-235b-a22b",)) -> dict:
    """Fit the free constants to verl's measured syncs, by least squares: first
    ``broadcast_bandwidth_share`` to the rows ``fit_bucketed`` with the checkpoint engine
    (where bytes are all that differ from the plain sync), then ``per_tensor_s`` and
    ``per_tensor_per_node_doubling_s`` (linear in them) to the rows ``fit`` without it; the
    other rows are held out.

    Returns:
        dict ``constants`` (the fitted values) and ``rows`` (per row: model, measured and
        modelled seconds without and with the checkpoint engine, held_out flags).

    Raises:
        ValueError: naming ``rows``, ``fit`` or ``fit_bucketed`` (empty or of the wrong type).
    """
    hw = resolve_hardware(hardware)
    for label, v in (("fit", fit), ("fit_bucketed", fit_bucketed)):
        if isinstance(v, str) or not isinstance(v, (list, tuple)) or not v:
            raise ValueError(f"{label} must be a non-empty tuple of preset names, got {v!r}")
    if not isinstance(rows, (list, tuple)) or not rows or any(
            not isinstance(r, (list, tuple)) or len(r) != 6 for r in rows):
        raise ValueError("rows must be a non-empty tuple of (model, preset, trainer ranks, "
                         f"rollout ranks, seconds, seconds with checkpoint engine), got {rows!r}")
    def model_s(preset, train, rollout, bucketed, constants):
        return verl_sync_model_s(preset, train, rollout, hw, bucketed=bucketed,
                                 constants=constants)

    den, num = [], []
    for _, preset, train, rollout, _, t_bucket in rows:
        if preset in fit_bucketed:  # t = rest + network bytes time / share: 1 / share linear
            full = model_s(preset, train, rollout, True, {"broadcast_bandwidth_share": 1})
            rest = model_s(preset, train, rollout, True, {"broadcast_bandwidth_share": 1e12})
            den.append(full - rest)
            num.append(t_bucket - rest)
    share = float(np.dot(den, den) / np.dot(den, num))
    zero = {"per_tensor_s": 0.0, "per_tensor_per_node_doubling_s": 0.0,
            "broadcast_bandwidth_share": share}
    A, b = [], []
    for _, preset, train, rollout, t_plain, _ in rows:
        if preset in fit:           # t = base + n_t (c0 + c1 log2 nodes)
            n_t = num_weight_tensors(resolve_model(preset, "actor"))
            nodes, _ = _broadcast(hw, train, rollout)
            A.append([n_t, n_t * math.log2(nodes)])
            b.append(t_plain - model_s(preset, train, rollout, False, zero))
    c0, c1 = np.linalg.lstsq(np.array(A, dtype=float), np.array(b), rcond=None)[0]
    fitted = {"per_tensor_s": float(c0), "per_tensor_per_node_doubling_s": float(c1),
              "broadcast_bandwidth_share": share}
    out = [dict(model=model, preset=preset, trainer_ranks=train, rollout_ranks=rollout,
                measured_s=t0, modelled_s=model_s(preset, train, rollout, False, fitted),
                measured_checkpoint_engine_s=t1,
                modelled_checkpoint_engine_s=model_s(preset, train, rollout, True, fitted),
                held_out=preset not in fit, held_out_checkpoint_engine=preset not in fit_bucketed)
           for model, preset, train, rollout, t0, t1 in rows]
    return {"constants": fitted, "rows": out}
