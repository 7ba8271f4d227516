"""Compute profiles in seconds (book sections :ref:`sec-phase-profile` and
:ref:`sec-profile-workdepth`): the step of a real model at a chosen decode batch per GPU, and
the toy loops' measured phase times set against the estimate and Brent's bounds for the toy's
shape on the measured CPU.

The toy's loops time their phases (``rollout_s``, ``update_s``, ... in each history row); one
loop phase covers one or more phases of :func:`~rlmperf_lite.cost.estimate_rl_step`
(:data:`LOOP_PHASES`). The toy is one process holding one copy of the weights: one "GPU", no
weight sync, old log-probs recorded at sampling time, a verifier for the reward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_choice, check_int
from .estimate import ALGOS, GENERATION_PHASES, RLStepEstimate, estimate_rl_step
from .hardware import HardwareSpec
from .model import ModelConfig
from .phase import PhaseSequence
from .workdepth_s import StepWorkDepth, rl_step_workdepth_s

__all__ = ["profile_step_workdepth_s", "generation_share", "LOOP_PHASES", "cpu_as_fp32_device",
           "toy_step_kwargs", "MeasuredPhase", "MeasuredProfile", "measured_profile"]

#: For each loop, which of the estimate's phases each history key times, as
#: ``{loop: {history key: phases}}``; PPO's ``reward_s`` also times the
#: reference pass, its ``update_s`` both models' updates (rlmperf_lite.rl.grpo / .ppo)
LOOP_PHASES = {
    "grpo": {"rollout_s": GENERATION_PHASES, "ref_logps_s": ("ref_logprobs",),
             "reward_s": ("reward",),
             "advantages_s": ("advantages",), "update_s": ("actor_update",)},
    "ppo": {"rollout_s": GENERATION_PHASES, "reward_s": ("ref_logprobs", "reward"),
            "values_s": ("critic_values",), "advantages_s": ("advantages",),
            "update_s": ("actor_update", "critic_update")},
}


def profile_step_workdepth_s(algo: str = "grpo", *, sequences_per_gpu: int, gpus: int,
                             group_size: int, **estimate_kwargs) -> StepWorkDepth:
    """:func:`~rlmperf_lite.cost.rl_step_workdepth_s` of the step whose decode holds
    ``sequences_per_gpu`` s sequences per GPU: B G = s x ``gpus`` samples, B = s gpus / G prompts
    of G samples (PPO: B G prompts of one), so that ``.sequences_per_gpu`` = s for any replica
    size. Other arguments as :func:`~rlmperf_lite.cost.estimate_rl_step`.

    Raises:
        ValueError: s < 1; s x gpus not a multiple of ``group_size``; ``prompts`` given (s sets
            it); as the estimate.
    """
    if "prompts" in estimate_kwargs:
        raise ValueError("prompts is set by sequences_per_gpu (B = s x gpus / group_size): "
                         "leave it out")
    for label, v in (("sequences_per_gpu", sequences_per_gpu), ("gpus", gpus),
                     ("group_size", group_size)):
        check_int(label, v, 1)
    samples = sequences_per_gpu * gpus
    if samples % group_size:
        raise ValueError(f"sequences_per_gpu={sequences_per_gpu} on gpus={gpus} gives {samples} "
                         f"samples, not a multiple of group_size={group_size}: choose s so that "
                         "s x gpus / group_size is a whole number of prompts")
    return rl_step_workdepth_s(algo, prompts=samples // group_size, group_size=group_size,
                               gpus=gpus, **estimate_kwargs)


def generation_share(step: StepWorkDepth, bound: str = "lower") -> float:
    """The rollout's (prefill + decode) share of the step's Brent ``bound``, "lower"
    (max(W/p, D) summed over phases) or "upper" (W/p + D)."""
    check_choice("bound", bound, ("lower", "upper"))
    attr = f"brent_{bound}_s"
    return sum(getattr(p, attr) for p in step.phases if p.name in GENERATION_PHASES) / \
        getattr(step, attr)


def cpu_as_fp32_device(cpu: HardwareSpec) -> HardwareSpec:
    """``cpu`` (e.g. :func:`~rlmperf_lite.cost.measure_cpu`) with its fp32 GEMM rate as the
    bf16 and fp16 peaks, the rates the estimate charges: the toy computes in float32. (Bytes are
    still costed at 2 per weight; the toy's phases are compute-bound on a CPU.)

    Raises:
        ValueError: the spec has no fp32 peak."""
    fp32 = cpu.peak("fp32")
    return replace(cpu, name=f"{cpu.name}, fp32", peak_flops={**cpu.peak_flops, "bf16": fp32,
                                                               "fp16": fp32})


def toy_step_kwargs(config, *, prompt_len: int, response_len: int, hardware) -> dict:
    """:func:`~rlmperf_lite.cost.estimate_rl_step`'s keyword arguments for one step of a toy
    loop run with ``config`` (a :class:`~rlmperf_lite.rl.GRPOConfig` or
    :class:`~rlmperf_lite.rl.PPOConfig`): its model's shape, B = ``num_prompts`` x G =
    ``group_size`` (PPO: 1), P = ``prompt_len``, R = ``response_len`` (the loop's decode width),
    its ``kl_coef`` and ``ppo_epochs``, one device, old log-probs from the sampler, and the
    bandwidth-bound weight sync (the toy's sampler reads the trainer's arrays: no engine, no
    handover, 0 s on one device)."""
    check_int("prompt_len", prompt_len, 1)
    check_int("response_len", response_len, 1)
    return dict(actor=ModelConfig.from_tiny_lm(config.model), hardware=hardware,
                prompts=config.num_prompts, group_size=getattr(config, "group_size", 1),
                prompt_len=prompt_len, response_len=response_len, gpus=1,
                kl_coef=config.kl_coef, ppo_epochs=getattr(config, "ppo_epochs", 1),
                recompute_old_logprobs=False, weight_sync="bandwidth")


@dataclass(frozen=True)
class MeasuredPhase:
    """One phase of a toy loop: its wall time ``measured_s`` (the fastest of the steps, see
    :func:`measured_profile`), and the estimate's ``estimate_s``, ``flops`` and Brent's bounds
    for the estimate's phases it covers."""

    name: str
    measured_s: float
    estimate_s: float
    brent_lower_s: float
    brent_upper_s: float
    flops: float

    @property
    def ratio(self) -> float:
        """The measured time over the estimated one (inf where the estimate is 0, as for the
        verifier, on the CPU)."""
        return self.measured_s / self.estimate_s if self.estimate_s else math.inf


@dataclass(frozen=True)
class MeasuredProfile(PhaseSequence):
    """A toy loop's phases, measured and estimated (see :func:`measured_profile`); the step is
    the sum of its phases' times."""

    algo: str
    phases: tuple
    estimate: RLStepEstimate
    workdepth: StepWorkDepth
    response_len: int

    measured_s = property(lambda self: self.total("measured_s"))
    estimate_s = property(lambda self: self.total("estimate_s"))
    brent_lower_s = property(lambda self: self.total("brent_lower_s"))
    brent_upper_s = property(lambda self: self.total("brent_upper_s"))

    def shares(self, which: str = "measured") -> dict:
        """{phase: share of the step}, of the ``which`` = "measured" or "estimate" times."""
        check_choice("which", which, ("measured", "estimate"))
        total = getattr(self, f"{which}_s")
        return {p.name: getattr(p, f"{which}_s") / total for p in self.phases}

    def dominant(self, which: str = "measured") -> str:
        """The phase with the largest share."""
        shares = self.shares(which)
        return max(shares, key=shares.get)


def measured_profile(algo: str, history, config, *, hardware, prompt_len: int) -> MeasuredProfile:
    """The phases of toy steps (``history``: rows of a loop's
    :attr:`~rlmperf_lite.rl.common.RLResult.history`, e.g. after the first few steps) of ``algo``
    run with ``config``, set against :func:`~rlmperf_lite.cost.estimate_rl_step` and
    :func:`~rlmperf_lite.cost.rl_step_workdepth_s` on ``hardware`` (e.g.
    :func:`cpu_as_fp32_device` of the measured CPU) for the toy's shape
    (:func:`toy_step_kwargs`, R = the median decode width the rows record). Each phase's time
    is the least of its ``*_s`` wall times over the rows of width R: best-of-n, as ``timeit``
    reports, since other processes on the machine only ever add time.

    Raises:
        ValueError: an unknown algo or DAPO (its rounds vary from step to step), an empty
            history or one without the loop's keys.
    """
    check_choice("algo", algo, tuple(a for a in ALGOS if a != "dapo"))
    rows = list(history)
    keys = LOOP_PHASES["ppo" if algo == "ppo" else "grpo"]
    if not rows or any(k not in r for r in rows for k in (*keys, "response_width")):
        raise ValueError(f"history must be non-empty rows of a {algo} loop with the keys "
                         f"{[*keys, 'response_width']}")
    R = int(round(float(np.median([r["response_width"] for r in rows]))))
    at_R = [r for r in rows if r["response_width"] == R] or rows     # an even split: all rows
    kw = toy_step_kwargs(config, prompt_len=prompt_len, response_len=R, hardware=hardware)
    est, wd = estimate_rl_step(algo, **kw), rl_step_workdepth_s(algo, **kw)
    phases = []
    for key, names in keys.items():
        covered = [(e, w) for e, w in zip(est.phases, wd.phases) if e.name in names]
        phases.append(MeasuredPhase(
            key[:-2], float(min(r[key] for r in at_R)),
            float(sum(e.time_s for e, _ in covered)),
            float(sum(w.brent_lower_s for _, w in covered)),
            float(sum(w.brent_upper_s for _, w in covered)),
            float(sum(e.flops for e, _ in covered))))
    return MeasuredProfile(algo, tuple(phases), est, wd, R)
