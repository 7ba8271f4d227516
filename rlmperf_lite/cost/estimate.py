"""One RL step of a real model on real hardware, phase by phase (book sections :ref:`sec-step-7b`
and :ref:`sec-profiles-side-by-side`).

The model of execution is deliberately simple, the *synchronous colocated* layout of Part III:
every phase runs on all ``gpus`` in turn.

- Rollout: inference replicas of tp GPUs (:mod:`rlmperf_lite.cost.rollout` states its choices:
  prefill shared by a prompt's G samples, decode batches balanced longest-first, the longest
  response of a replica sets its time).
- Training side (log-probs, values, updates): every pass split evenly over the GPUs, training
  states sharded ZeRO-3 style (16 bytes per trainable parameter, 2 per frozen one, divided by
  ``gpus``). Activations per GPU: one sequence in flight, with full recomputation — each
  layer's input kept (Korthikanti et al. 2022), one layer's full activations while it is
  recomputed (FlashAttention: no stored scores), and the fp32 logits of the sequence
  (``rlmperf_lite.cost.memory.lm_head_activation_bytes``).
- Memory: training states stay resident while the engine generates (no offload); the engine's
  weights and KV cache are released during training.
- Weight sync: the mechanism model of :mod:`rlmperf_lite.cost.weight_sync` (gather the ZeRO-3
  shards over the ``gpus``, CUDA IPC handover tensor by tensor, the engine's load;
  :ref:`sec-weight-sync-mechanism`), or with ``weight_sync="bandwidth"`` the pure bandwidth
  bound :func:`~rlmperf_lite.cost.rollout.weight_sync_s` (the all-gather alone). Model switches
  (sleep/wake, offload) are not phases of this estimate.
- An array of response lengths is an empirical distribution: the B G samples take its B G
  evenly spaced quantiles.

Times are roofline times (:func:`rlmperf_lite.cost.roofline_time`) divided by an efficiency:
``train_efficiency`` (the MFU a tuned trainer reaches, 1.0 = peak) for compute-bound work
(training passes, prefill, decode's arithmetic) and ``decode_efficiency`` (share of the memory
bandwidth reached) for the bytes prefill and decode read. The result is a model to reason
with, not a prediction of a given framework's seconds; Part III refines the layout.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..checks import (check_bool, check_choice, check_efficiency, check_int, check_number,
                      check_real_array)
from .flops import ADAMW_FLOPS_PER_PARAM, forward_flops, mtp_flops
from .hardware import resolve_hardware
from .memory import activation_bytes_per_layer, lm_head_activation_bytes, model_state_bytes
from .phase import PhaseEstimate, PhaseSequence
from .parallel_plan import MAX_GPUS, ParallelPlan
from .rollout import check_rollout_tp, rollout_phases, weight_sync_s
from .rollout import rollout_tp as smallest_rollout_tp
from .weight_sync import SYNC_METHODS, weight_sync_time_s
from .presets import resolve_model
from .roofline import roofline_time

__all__ = ["ALGOS", "GENERATION_PHASES", "PhaseEstimate", "RLStepEstimate", "estimate_rl_step",
           "sample_lengths"]

ALGOS = ("grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo")
GENERATION_PHASES = ("rollout_prefill", "rollout_decode")
"""The phases of generation in a step (prefill, then the decode steps), whose share of the step
the estimate, the work-depth profiles and the toy's prediction report."""


@dataclass(frozen=True)
class RLStepEstimate(PhaseSequence):
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

    time_s = property(lambda self: self.total("time_s"))
    flops = property(lambda self: self.total("flops"))

    @property
    def generation_time_s(self) -> float:
        """Seconds of the rollout, prefill and decode."""
        return float(sum(p.time_s for p in self.phases if p.name in GENERATION_PHASES))

    @property
    def generation_time_share(self) -> float:
        return self.generation_time_s / self.time_s

    @property
    def generation_flops_share(self) -> float:
        return sum(p.flops for p in self.phases if p.name in GENERATION_PHASES) / self.flops

    def as_dict(self) -> dict:
        return {"algo": self.algo, "hardware": self.hardware, "gpus": self.gpus,
                "rollout_tp": self.rollout_tp, "fits": self.fits, "overflow": self.overflow,
                "time_s": self.time_s, "flops": self.flops,
                "generation_time_share": self.generation_time_share,
                "generation_flops_share": self.generation_flops_share,
                "phases": [{**asdict(p), "per_gpu_memory_bytes": p.per_gpu_memory_bytes}
                           for p in self.phases]}


MAX_RESPONSE_LEN = 10**6
"""The longest response the calculators cost (a decode phase is walked step by step)."""


def sample_lengths(response_len, n_seq: int) -> np.ndarray:
    """One response length per sample: an int for all, or n_seq evenly spaced quantiles of an
    empirical distribution (any 1-D array of lengths), longest last."""
    r = check_real_array("response_len", response_len, low=1, high=MAX_RESPONSE_LEN).reshape(-1)
    if np.any(r != np.round(r)):
        raise ValueError(f"response_len must be whole numbers of tokens, got {response_len!r}")
    if r.size == 1:
        return np.full(n_seq, r[0])
    q = (np.arange(n_seq) + 0.5) / n_seq
    return np.round(np.quantile(np.sort(r), q, method="inverted_cdf"))


def estimate_rl_step(algo: str = "grpo", *, actor, hardware, prompts: int, group_size: int,
                     prompt_len: int, response_len, gpus: int, critic=None, reference=None,
                     reward=None, kl_coef: float = 0.0, ppo_epochs: int = 1,
                     recompute_old_logprobs: bool = True, train_efficiency: float = 1.0,
                     decode_efficiency: float = 1.0, dtype: str = "bf16",
                     rollout_tp: int | None = None,
                     weight_sync: str = "mechanism") -> RLStepEstimate:
    """Per-phase FLOPs, bytes, time and memory of one RL step (see the module docstring).

    Args:
        algo: one of :data:`ALGOS`; PPO samples ``prompts * group_size`` prompts once each and
            adds a critic (``critic``, default the actor's shape), DAPO holds no reference.
        actor, critic, reference, reward: ModelConfig or preset name; ``reference`` defaults to
            the actor's when ``kl_coef`` > 0; ``reward`` None: a verifier (no GPU work).
        hardware, gpus: HardwareSpec or preset name, and the GPUs of the colocated layout.
        prompts, group_size, prompt_len: B, G, P.
        response_len: R, an int or an array of lengths whose distribution the B G responses
            follow (the longest sets the decode time of its replica).
        ppo_epochs: passes over the batch per step (updates only).
        recompute_old_logprobs: an extra actor forward for the "old" log-probs, as verl and
            OpenRLHF do (False: taken from the sampler, as the book's toy loops do).
        dtype: "bf16" or "fp16" (the peak; weights and KV cache are 2 bytes).
        rollout_tp: GPUs per replica, None (the smallest that fits) or one of
            ``rollout_tp_choices``; decode steps add their all-reduces (``decode_tp_comm``).
        weight_sync: "mechanism" (default) or "bandwidth" (module docstring).
    Returns :class:`RLStepEstimate`; raises ValueError naming any bad argument (sizes, lengths,
    efficiencies outside [1e-6, 1], ``gpus`` not a multiple of the rollout replica, ...).
    """
    check_choice("algo", algo, ALGOS)
    hw, actor = resolve_hardware(hardware), resolve_model(actor, "actor")
    _check_step_args(algo, prompts, group_size, prompt_len, gpus, ppo_epochs, kl_coef,
                     recompute_old_logprobs, dtype, train_efficiency, decode_efficiency,
                     critic, reference)
    R = sample_lengths(response_len, prompts * group_size)              # (B G,)
    T = prompt_len + R
    actor.check_positions(T.max(), "prompt_len + response_len")
    models = _step_models(algo, actor, critic, reference, reward, kl_coef)
    tp = _replica_tp(actor, hw, gpus, rollout_tp)
    resident = sum(model_state_bytes(m.num_params(), trainable=k in ("actor", "critic"))
                   for k, m in models.items()) / gpus
    # PPO samples one completion for each of its B G prompts; the GRPO family G per prompt
    phases = list(rollout_phases(
        actor, hw, prefill_prompts=len(R) if algo == "ppo" else prompts, prompt_len=prompt_len,
        lengths=R, gpus=gpus, tp=tp, train_efficiency=train_efficiency,
        decode_efficiency=decode_efficiency, dtype=dtype, resident=resident))
    cost = _TrainCost(hw, gpus, dtype, train_efficiency, T, resident)
    phases += _train_phases(models, cost, R, ppo_epochs, recompute_old_logprobs)
    phases.append(_sync_phase(actor, hw, gpus, tp, resident, weight_sync))
    _check_finite(phases, train_efficiency, decode_efficiency)
    fits, overflow = _memory_verdict(phases, hw)
    inputs = dict(actor=actor, hardware=hw, prompts=prompts, group_size=group_size,
                  prompt_len=prompt_len, response_len=response_len, gpus=gpus, critic=critic,
                  reference=reference, reward=reward, kl_coef=kl_coef, ppo_epochs=ppo_epochs,
                  recompute_old_logprobs=recompute_old_logprobs,
                  train_efficiency=train_efficiency, decode_efficiency=decode_efficiency,
                  dtype=dtype, rollout_tp=rollout_tp, weight_sync=weight_sync)
    return RLStepEstimate(algo, hw.name, gpus, tp, tuple(phases), fits, overflow, inputs)


def _replica_tp(actor, hw, gpus: int, rollout_tp) -> int:
    """The engine's tp: ``rollout_tp`` checked, or the smallest that fits (dividing ``gpus``)."""
    if rollout_tp is not None:
        check_rollout_tp("rollout_tp", rollout_tp, actor, hw, gpus)
        return rollout_tp
    tp = smallest_rollout_tp(actor, hw, gpus)
    if gpus % tp:
        raise ValueError(f"gpus={gpus} is not a multiple of the rollout replica size tp={tp} "
                         f"({actor.name} needs {tp} {hw.name} per replica)")
    return tp


def _sync_phase(actor, hw, gpus: int, tp: int, resident: float, weight_sync: str):
    """The weight sync (module docstring): from ZeRO-3 shards over ``gpus`` to tp ``tp``."""
    check_choice("weight_sync", weight_sync, SYNC_METHODS)
    w_bytes = 2.0 * actor.num_params()
    sync_t = weight_sync_s(w_bytes, hw, gpus) if weight_sync == "bandwidth" else \
        weight_sync_time_s(actor, hw, ParallelPlan(dp=gpus, zero_stage=3), tp)
    return PhaseEstimate("weight_sync", "actor", 0.0, w_bytes * gpus, sync_t, "link",
                         {"model states": resident, "weights": w_bytes / tp})


def _check_step_args(algo, prompts, group_size, prompt_len, gpus, ppo_epochs, kl_coef,
                     recompute_old_logprobs, dtype, train_efficiency, decode_efficiency,
                     critic, reference) -> None:
    """The scalar checks of :func:`estimate_rl_step` (ValueError naming the argument)."""
    for label, v in (("prompts", prompts), ("prompt_len", prompt_len),
                     ("ppo_epochs", ppo_epochs)):
        check_int(label, v, 1)
    check_int("gpus", gpus, 1, high=MAX_GPUS)
    check_int("group_size", group_size, 2 if algo in ("grpo", "dr_grpo", "dapo", "rloo") else 1)
    check_number("kl_coef", kl_coef, low=0)
    check_bool("recompute_old_logprobs", recompute_old_logprobs)
    check_choice("dtype", dtype, ("bf16", "fp16"))      # weights and KV are costed as 2 bytes
    check_efficiency("train_efficiency", train_efficiency)
    check_efficiency("decode_efficiency", decode_efficiency)
    if critic is not None and algo != "ppo":
        raise ValueError(f"critic applies to algo='ppo' only, not {algo!r}")
    if reference is not None and algo == "dapo":
        raise ValueError("DAPO has no KL term: pass no reference model with algo='dapo'")
    if prompts * group_size > 10**7:
        raise ValueError(f"prompts * group_size = {prompts * group_size} samples per step "
                         f"exceeds 1e7")


def _step_models(algo, actor, critic, reference, reward, kl_coef) -> dict:
    """{role: ModelConfig} of the step: the actor, PPO's critic (default the actor's shape), the
    reference when a KL term is on (not DAPO), a reward model if given."""
    models = {"actor": actor}
    if algo == "ppo":
        models["critic"] = resolve_model(critic, "critic") if critic is not None else actor
    if (kl_coef > 0 or reference is not None) and algo != "dapo":
        models["reference"] = (resolve_model(reference, "reference") if reference is not None
                               else actor)
    if reward is not None:
        models["reward"] = resolve_model(reward, "reward")
    return models


@dataclass(frozen=True)
class _TrainCost:
    """What every phase after generation is costed with: the hardware, the colocated GPUs,
    the dtype's peak at ``train_efficiency``, the (B G,) sequence lengths T, the resident
    model states per GPU."""

    hw: object
    gpus: int
    dtype: str
    efficiency: float
    T: np.ndarray
    resident: float

    def time(self, flops, bytes_moved) -> tuple:
        """(seconds, bound) of the roofline over all GPUs, at the training efficiency."""
        r = roofline_time(flops, bytes_moved, self.hw, dtype=self.dtype, num_devices=self.gpus)
        return r["time_s"] / self.efficiency, r["bound"]

    def memory(self, m, head: bool) -> dict:
        """Per-GPU memory of a pass over one sequence of the longest length in flight."""
        s = int(self.T.max())
        kept = m.num_hidden_layers * activation_bytes_per_layer(m, s, 1, recompute="full")
        layer = activation_bytes_per_layer(m, s, 1)              # recomputed, then freed
        logits = lm_head_activation_bytes(m, s, 1) if head else 0.0   # fp32 logits
        return {"model states": self.resident, "activations": kept + layer + logits}


def _train_phases(models, cost: _TrainCost, R, ppo_epochs, recompute_old_logprobs) -> list:
    """The phases after generation: forward passes, advantages, then the updates."""
    phases = []

    def fwd(name, key, head="all"):
        m = models[key]
        f = forward_flops(m, cost.T, lm_head=head)
        t, b = cost.time(f, cost.gpus * 2.0 * m.num_params())
        phases.append(PhaseEstimate(name, key, f, cost.gpus * 2.0 * m.num_params(), t, b,
                                    cost.memory(m, head == "all")))

    if recompute_old_logprobs:
        fwd("old_logprobs", "actor")
    if "reference" in models:
        fwd("ref_logprobs", "reference")
    if "reward" in models:
        fwd("reward", "reward", head="none")
    if "critic" in models:
        fwd("critic_values", "critic", head="none")
    phases.append(PhaseEstimate("advantages", "-", 10.0 * float(R.sum()), 8.0 * float(R.sum()),
                                0.0, "memory", {"model states": cost.resident}))
    for key in ("actor", "critic"):
        if key in models:
            phases.append(_update_phase(key, models[key], cost, ppo_epochs))
    return phases


def _update_phase(key: str, m, cost: _TrainCost, ppo_epochs: int) -> PhaseEstimate:
    """A model's update: ppo_epochs x (forward + backward, 3 forwards, + AdamW's 12 N; the
    actor's multi-token-prediction modules when it trains them, ``mtp_flops``)."""
    head = "all" if key == "actor" else "none"
    mtp = mtp_flops(m, cost.T) if key == "actor" else 0.0
    f = ppo_epochs * (3 * forward_flops(m, cost.T, lm_head=head) + mtp
                      + ADAMW_FLOPS_PER_PARAM * m.num_params())
    # per pass: bf16 weights read (forward, backward) and gradients written, then the
    # optimizer reads and writes fp32 master weights and two moments: ~18 bytes/parameter
    moved = ppo_epochs * cost.gpus * 18.0 * m.num_params()
    t, b = cost.time(f, moved)
    return PhaseEstimate(f"{key}_update", key, f, moved, t, b, cost.memory(m, head == "all"))


def _check_finite(phases, train_efficiency, decode_efficiency) -> None:
    """ValueError if a phase's time is not finite (e.g. an efficiency of 1e-320)."""
    slow = [p.name for p in phases if not np.isfinite(p.time_s)]
    if slow:
        raise ValueError(f"train_efficiency={train_efficiency!r} and decode_efficiency="
                         f"{decode_efficiency!r} give {slow[0]} an infinite time: use "
                         "efficiencies that are realistic fractions of the peak (e.g. 0.3-1)")


def _memory_verdict(phases, hw) -> tuple:
    """(fits, overflow message or None) of the phase that needs the most memory per GPU."""
    worst = max(phases, key=lambda p: p.per_gpu_memory_bytes)
    if worst.per_gpu_memory_bytes <= hw.hbm_bytes:
        return True, None
    parts = " + ".join(f"{k} {v / 1e9:.1f} GB" for k, v in worst.memory_parts.items() if v)
    return False, (f"{worst.name} needs {worst.per_gpu_memory_bytes / 1e9:.1f} GB per GPU "
                   f"({parts}); {hw.name} has {hw.hbm_bytes / 1e9:.0f} GB")
