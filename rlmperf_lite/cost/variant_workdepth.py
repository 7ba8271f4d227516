"""Work and depth in seconds of one step of each member of the GRPO family and of PPO, with
DAPO's dynamic sampling (book section :ref:`sec-variant-costs`, Lab 3's calculator).

The phases are those of :func:`~rlmperf_lite.cost.rl_step_workdepth_s`. A DAPO step that needs
k rounds of generation runs the rollout phases k times, one round after another (a round's
groups must be scored before the sampler knows whether the batch is full), so both their work W
and their depth D are k times one round's. k is a random variable; its expectation is the
library's DAPO cost model, :func:`~rlmperf_lite.variant_costs.dynamic_sampling_rounds` of the
informative share :func:`~rlmperf_lite.variant_costs.informative_fraction` implies, and W and D
are linear in k, so the expected bounds are one round's times E[k].
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..checks import check_choice, check_number
from .. import variant_costs   # a module, not its names: variant_costs imports cost.memory
from .estimate import estimate_rl_step
from .workdepth_s import StepWorkDepth, rl_step_workdepth_s

__all__ = ["RESAMPLED_PHASES", "VariantWorkDepth", "variant_step_workdepth_s"]

#: The phases a DAPO round repeats; generate, then score (a reward model, when there is one).
RESAMPLED_PHASES = ("rollout_prefill", "rollout_decode", "reward")


@dataclass(frozen=True)
class VariantWorkDepth:
    """One step of ``variant`` (see :func:`variant_step_workdepth_s`).

    Attributes:
        step: the phases in seconds, the rollout phases at ``expected_rounds`` rounds, and
            ``step.estimate_s`` the estimate's step time with the same rounds.
        expected_rounds: E[k], rounds of generation per step (1 for every variant but DAPO).
        informative_frac: f, the share of groups whose rewards differ at ``pass_rate``.
        pass_rate: q, each prompt's probability of a correct completion.
    """

    variant: str
    step: StepWorkDepth
    expected_rounds: float
    informative_frac: float
    pass_rate: float


def variant_step_workdepth_s(variant: str = "grpo", *, pass_rate: float,
                             max_resample_rounds: int | None = 3,
                             **estimate_kwargs) -> VariantWorkDepth:
    """W (GPU-seconds), D (seconds) and Brent's bounds per phase of one step of ``variant``
    (a key of :data:`~rlmperf_lite.variant_costs.VARIANT_KL`), for the step that
    :func:`~rlmperf_lite.cost.estimate_rl_step` describes (same keyword arguments; B =
    ``prompts``, G = ``group_size``).

    DAPO: f = 1 - q^G - (1 - q)^G at per-prompt pass rate q = ``pass_rate``, E[k] =
    ``dynamic_sampling_rounds(f, B, max_resample_rounds)``; the phases of
    :data:`RESAMPLED_PHASES` get W x E[k] and D x E[k], the estimate's step time
    ``(E[k] - 1)`` x their estimated time more. DAPO holds no reference model whatever
    ``kl_coef`` is (Yu et al. 2025), as the estimate does. The other variants: one round.

    Raises:
        ValueError: an unknown variant, ``pass_rate`` outside [0, 1], and as
            :func:`~rlmperf_lite.cost.estimate_rl_step` and
            :func:`~rlmperf_lite.variant_costs.dynamic_sampling_rounds`, naming the argument.
    """
    check_choice("variant", variant, tuple(variant_costs.VARIANT_KL))
    check_number("pass_rate", pass_rate, low=0, high=1)
    wd = rl_step_workdepth_s(variant, **estimate_kwargs)       # validates the step's inputs
    f = variant_costs.informative_fraction(pass_rate, wd.inputs["group_size"])
    if variant != "dapo":
        return VariantWorkDepth(variant, wd, 1.0, f, pass_rate)
    rounds = variant_costs.dynamic_sampling_rounds(f, wd.inputs["prompts"], max_resample_rounds)
    k = rounds["expected_rounds"]
    est = estimate_rl_step(variant, **wd.inputs)
    extra_s = (k - 1) * sum(p.time_s for p in est.phases if p.name in RESAMPLED_PHASES)
    phases = tuple(replace(p, work_flops=k * p.work_flops, work_gpu_s=k * p.work_gpu_s,
                           depth_s=k * p.depth_s) if p.name in RESAMPLED_PHASES else p
                   for p in wd.phases)
    step = replace(wd, phases=phases, estimate_s=wd.estimate_s + extra_s)
    return VariantWorkDepth(variant, step, float(k), f, pass_rate)
