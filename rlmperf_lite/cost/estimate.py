"""One RL step of a real model on real hardware, phase by phase (book Chapters 4 and 6).

The model of execution is deliberately simple, the *synchronous colocated* layout of Part III:
every phase runs on all ``gpus`` in turn. Training-side phases (log-probs, values, updates) are
split evenly over the GPUs (data parallel with ZeRO-3 sharding of the training states). The
rollout runs on inference replicas of ``tp`` GPUs each (tp = the smallest power of two within
a node whose HBM holds the bf16 weights with room for the KV cache), each replica decoding its
share of the samples as one batch, one token per step, until its longest response ends.

Times are roofline times (:func:`rlmperf_lite.cost.roofline_time`) divided by an efficiency:
``train_efficiency`` (the MFU a tuned trainer reaches, 1.0 = peak) for compute-bound phases and
``decode_efficiency`` (share of memory bandwidth a decode step achieves) for the rollout. The
result is a model to reason with, not a prediction of a given framework's seconds; Part III
refines the layout.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..checks import check_choice, check_int, check_number, check_real_array
from .flops import decode_flops, forward_flops, matmul_weights_per_token, prefill_flops
from .hardware import HardwareSpec, hardware_preset
from .memory import activation_bytes_per_layer, kv_cache_bytes_per_token
from .model import ModelConfig
from .presets import model_preset
from .roofline import roofline_time

__all__ = ["ALGOS", "PhaseEstimate", "RLStepEstimate", "estimate_rl_step"]

ALGOS = ("grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo")
_GENERATION = ("rollout_prefill", "rollout_decode")


@dataclass(frozen=True)
class PhaseEstimate:
    """One phase: ``flops`` and ``bytes_moved`` summed over all GPUs, ``time_s`` wall time,
    ``bound`` ("compute" / "memory" / "link"), ``memory_parts`` the bytes per GPU it holds
    ({"model states": ..., "weights": ..., "KV cache": ..., "activations": ...})."""

    name: str
    model: str
    flops: float
    bytes_moved: float
    time_s: float
    bound: str
    memory_parts: dict

    @property
    def per_gpu_memory_bytes(self) -> float:
        return float(sum(self.memory_parts.values()))


@dataclass(frozen=True)
class RLStepEstimate:
    """Phases in execution order and totals; ``fits`` is False when a phase needs more memory
    per GPU than the device has, and ``overflow`` then names the phase and its parts."""

    algo: str
    hardware: str
    gpus: int
    rollout_tp: int
    phases: tuple
    fits: bool
    overflow: str | None
    inputs: dict = field(default_factory=dict, compare=False, repr=False)

    def workdepth(self, processors: int = 1):
        """Work W and depth 𝒟 of each phase, with Brent's bounds for ``processors``
        (:func:`rlmperf_lite.cost.rl_step_workdepth` for the same inputs)."""
        from .workdepth import rl_step_workdepth
        return rl_step_workdepth(self.algo, processors=processors, **self.inputs)

    @property
    def time_s(self) -> float:
        return float(sum(p.time_s for p in self.phases))

    @property
    def flops(self) -> float:
        return float(sum(p.flops for p in self.phases))

    @property
    def generation_time_share(self) -> float:
        return sum(p.time_s for p in self.phases if p.name in _GENERATION) / self.time_s

    @property
    def generation_flops_share(self) -> float:
        return sum(p.flops for p in self.phases if p.name in _GENERATION) / self.flops

    def phase(self, name: str) -> PhaseEstimate:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(f"no phase {name!r}; phases are {[p.name for p in self.phases]}")

    def as_dict(self) -> dict:
        return {"algo": self.algo, "hardware": self.hardware, "gpus": self.gpus,
                "rollout_tp": self.rollout_tp, "fits": self.fits, "overflow": self.overflow,
                "time_s": self.time_s, "flops": self.flops,
                "generation_time_share": self.generation_time_share,
                "generation_flops_share": self.generation_flops_share,
                "phases": [{**asdict(p), "per_gpu_memory_bytes": p.per_gpu_memory_bytes}
                           for p in self.phases]}


def _resolve(model, label):
    if isinstance(model, str):
        return model_preset(model)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"{label} must be a ModelConfig or a preset name, got "
                         f"{type(model).__name__}")
    return model


def _lengths(response_len, n_seq: int) -> np.ndarray:
    """One response length per sample: an int for all, or n_seq evenly spaced quantiles of an
    empirical distribution (any 1-D array of lengths), longest last."""
    r = check_real_array("response_len", response_len, low=1).reshape(-1)
    if np.any(r != np.round(r)):
        raise ValueError(f"response_len must be whole numbers of tokens, got {response_len!r}")
    if r.size == 1:
        return np.full(n_seq, r[0])
    q = (np.arange(n_seq) + 0.5) / n_seq
    return np.round(np.quantile(np.sort(r), q, method="inverted_cdf"))


def _rollout_tp(model: ModelConfig, hw: HardwareSpec, gpus: int, kv_share: float) -> int:
    """Smallest power-of-two TP degree within a node whose HBM holds the weights with
    ``kv_share`` of it left for the KV cache (capped by the GPUs available)."""
    tp, weights = 1, 2.0 * model.num_params()
    while weights / tp > (1 - kv_share) * hw.hbm_bytes and tp * 2 <= min(hw.gpus_per_node, gpus):
        tp *= 2
    return tp


def estimate_rl_step(algo: str = "grpo", *, actor, hardware, prompts: int, group_size: int,
                     prompt_len: int, response_len, gpus: int, critic=None, reference=None,
                     reward=None, kl_coef: float = 0.0, ppo_epochs: int = 1,
                     recompute_old_logprobs: bool = True, train_efficiency: float = 1.0,
                     decode_efficiency: float = 1.0, dtype: str = "bf16") -> RLStepEstimate:
    """Per-phase FLOPs, bytes, time and memory of one RL step (see the module docstring).

    Args:
        algo: one of :data:`ALGOS`; PPO samples ``prompts * group_size`` prompts once each and
            adds a critic (``critic``, default the actor's shape), DAPO holds no reference.
        actor, critic, reference, reward: ModelConfig or preset name; ``reference`` defaults to
            the actor's shape when ``kl_coef`` > 0; ``reward`` None = a rule-based verifier
            (no GPU work).
        hardware: HardwareSpec or preset name. gpus: GPUs of the colocated layout.
        prompts, group_size, prompt_len: B, G, P. response_len: R, an int or an array of
            lengths whose distribution the B G responses follow (the longest sets the
            decode time of its replica).
        ppo_epochs: passes over the batch per step (updates only).
        recompute_old_logprobs: an extra actor forward for the "old" log-probs, as verl and
            OpenRLHF do (False: taken from the sampler, as the book's toy loops do).
    Returns:
        :class:`RLStepEstimate`.
    Raises:
        ValueError: naming any bad argument (unknown algo or preset, non-positive sizes,
            lengths, efficiencies outside (0, 1], too few GPUs for the rollout replicas).
    """
    check_choice("algo", algo, ALGOS)
    hw = hardware_preset(hardware) if isinstance(hardware, str) else hardware
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec or a preset name, got {hardware!r}")
    actor = _resolve(actor, "actor")
    for label, v in (("prompts", prompts), ("prompt_len", prompt_len), ("gpus", gpus),
                     ("ppo_epochs", ppo_epochs)):
        check_int(label, v, 1)
    check_int("group_size", group_size, 2 if algo in ("grpo", "dr_grpo", "dapo", "rloo") else 1)
    check_number("kl_coef", kl_coef, low=0)
    for label, v in (("train_efficiency", train_efficiency),
                     ("decode_efficiency", decode_efficiency)):
        check_number(label, v, low=0, high=1, low_open=True)
    n_seq = prompts * group_size
    R = _lengths(response_len, n_seq)
    T = prompt_len + R
    models = {"actor": actor}
    if algo == "ppo":
        models["critic"] = _resolve(critic, "critic") if critic is not None else actor
    if (kl_coef > 0 or reference is not None) and algo != "dapo":
        models["reference"] = _resolve(reference, "reference") if reference is not None else actor
    if reward is not None:
        models["reward"] = _resolve(reward, "reward")

    def timed(flops, bytes_moved, eff, devices=gpus):
        r = roofline_time(flops, bytes_moved, hw, dtype=dtype, num_devices=devices)
        return r["time_s"] / eff, r["bound"]

    phases = []
    kv_tok = kv_cache_bytes_per_token(actor)
    tp = _rollout_tp(actor, hw, gpus, kv_share=0.3)
    replicas = gpus // tp
    w_bytes = 2.0 * actor.num_params()
    # rollout: prefill once per prompt (its G samples share it), then decode step by step
    pf = prefill_flops(actor, [prompt_len] * prompts)
    t, bound = timed(pf, replicas * w_bytes + prompts * prompt_len * kv_tok, train_efficiency)
    seqs = np.sort(R)[::-1]
    per_replica = [seqs[i::replicas] for i in range(replicas)]       # longest spread evenly
    busiest = max(per_replica, key=lambda s: s.sum())
    steps = int(busiest.max()) - 1
    j = np.arange(1, steps + 1)
    active = (busiest[None, :] > j[:, None]).sum(axis=1)             # sequences still running
    ctx = (np.minimum(busiest[None, :], j[:, None]) + prompt_len) * (busiest[None, :] > j[:, None])
    d_v = actor.v_head_dim if actor.is_mla else actor.head_size
    attn_pair = actor.num_hidden_layers * 2 * actor.num_attention_heads * (actor.head_size + d_v)
    step_flops = active * 2.0 * matmul_weights_per_token(actor) + attn_pair * ctx.sum(axis=1)
    step_bytes = w_bytes + kv_tok * ctx.sum(axis=1)
    peak, bw = hw.peak(dtype) * tp, hw.hbm_bandwidth_bytes_per_s * tp
    step_t = np.maximum(step_flops / (peak * train_efficiency),
                        step_bytes / (bw * decode_efficiency))
    dec_flops = decode_flops(actor, prompt_len, R)                   # all replicas
    # training states stay resident while the colocated engine generates (no offload)
    states = sum(16.0 * m.num_params() for k, m in models.items() if k in ("actor", "critic"))
    frozen = sum(2.0 * m.num_params() for k, m in models.items() if k in ("reference", "reward"))
    resident = (states + frozen) / gpus
    kv_peak = kv_tok * float((prompt_len + busiest).sum()) / tp
    engine = {"model states": resident, "weights": w_bytes / tp}
    phases.append(PhaseEstimate("rollout_prefill", "actor", pf, replicas * w_bytes, t, bound,
                                {**engine, "KV cache": prompts / replicas * prompt_len * kv_tok
                                 / tp}))
    dec_bound = "memory" if steps and (step_bytes / bw).sum() >= (step_flops / peak).sum() \
        else "compute"
    phases.append(PhaseEstimate("rollout_decode", "actor", dec_flops,
                                float(step_bytes.sum()) * replicas, float(step_t.sum()),
                                dec_bound, {**engine, "KV cache": kv_peak}))
    # training side: every pass split over all GPUs, states sharded (ZeRO-3)

    def act_mem(m):   # one sequence of the longest length in flight, full recompute
        return m.num_hidden_layers * activation_bytes_per_layer(m, int(T.max()), 1,
                                                                recompute="full")

    def fwd(name, key, head="all"):
        m = models[key]
        f = forward_flops(m, T, lm_head=head)
        t, b = timed(f, gpus * 2.0 * m.num_params(), train_efficiency)
        phases.append(PhaseEstimate(name, key, f, gpus * 2.0 * m.num_params(), t, b,
                                    {"model states": resident, "activations": act_mem(m)}))

    if recompute_old_logprobs:
        fwd("old_logprobs", "actor")
    if "reference" in models:
        fwd("ref_logprobs", "reference")
    if "reward" in models:
        fwd("reward", "reward", head="none")
    if "critic" in models:
        fwd("critic_values", "critic", head="none")
    phases.append(PhaseEstimate("advantages", "-", 10.0 * float(R.sum()), 8.0 * float(R.sum()),
                                0.0, "memory", {"model states": resident}))
    for key in ("actor", "critic"):
        if key not in models:
            continue
        m = models[key]
        head = "all" if key == "actor" else "none"
        f = ppo_epochs * (3 * forward_flops(m, T, lm_head=head) + 12.0 * m.num_params())
        moved = ppo_epochs * gpus * 18.0 * m.num_params()       # weights, grads, Adam states
        t, b = timed(f, moved, train_efficiency)
        phases.append(PhaseEstimate(f"{key}_update", key, f, moved, t, b,
                                    {"model states": resident, "activations": act_mem(m)}))
    # weight sync: the trained bf16 weights gathered onto each rollout replica over NVLink
    link = hw.intra_node_bandwidth_bytes_per_s or hw.hbm_bandwidth_bytes_per_s
    phases.append(PhaseEstimate("weight_sync", "actor", 0.0, w_bytes * replicas,
                                w_bytes * (1 - 1 / gpus) / link, "link", engine))
    worst = max(phases, key=lambda p: p.per_gpu_memory_bytes)
    fits = worst.per_gpu_memory_bytes <= hw.hbm_bytes
    parts = " + ".join(f"{k} {v / 1e9:.1f} GB" for k, v in worst.memory_parts.items() if v)
    overflow = None if fits else (
        f"{worst.name} needs {worst.per_gpu_memory_bytes / 1e9:.1f} GB per GPU ({parts}); "
        f"{hw.name} has {hw.hbm_bytes / 1e9:.0f} GB")
    inputs = dict(actor=actor, hardware=hw, prompts=prompts, group_size=group_size,
                  prompt_len=prompt_len, response_len=response_len, gpus=gpus, critic=critic,
                  reference=reference, reward=reward, kl_coef=kl_coef, ppo_epochs=ppo_epochs,
                  recompute_old_logprobs=recompute_old_logprobs,
                  train_efficiency=train_efficiency, decode_efficiency=decode_efficiency,
                  dtype=dtype)
    return RLStepEstimate(algo, hw.name, gpus, tp, tuple(phases), fits, overflow, inputs)
