"""Lab 6's work-depth calculator: the compute profile of PPO, GRPO and variants in seconds —
each phase's W/p and D and the step's Brent bounds at a chosen decode batch per GPU
(:func:`~rlmperf_lite.cost.profiles.profile_step_workdepth_s`), live and with no kernel from
one definition (:class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`)."""
from __future__ import annotations

from ..cost.profiles import generation_share, profile_step_workdepth_s
from .workdepth_calc import WorkDepthCalculator

__all__ = ["PROFILE_OPTIONS", "profile_workdepth_calculator", "profile_workdepth_widget",
           "profile_workdepth_static"]

PROFILE_OPTIONS = {
    "algo": ("grpo", "dapo", "reinforce_pp", "ppo"),
    "sequences_per_gpu": (1, 2, 4, 8, 16, 32, 64, 128),
    "response_len": (1024, 4096, 16384),
    "hardware": ("h100", "h20", "b200"),
    "gpus": (8, 64),
}
_STATIC_OPTIONS = {**PROFILE_OPTIONS, "gpus": (64,)}
_LABELS = {"algo": "algorithm", "sequences_per_gpu": "sequences per GPU (decode)",
           "response_len": "R response", "hardware": "GPU", "gpus": "GPUs p"}
# Lab 6's step: Qwen2.5-7B, groups of 16, 512-token prompts, a KL term (DAPO: none)
_STEP = {"actor": "qwen2.5-7b", "group_size": 16, "prompt_len": 512, "kl_coef": 0.001}
_START = {"algo": "grpo", "sequences_per_gpu": 8, "response_len": 4096, "hardware": "h100",
          "gpus": 64}


def _compute(fixed: dict):
    def compute(algo, **values):
        kw = {**_STEP, **fixed, **values}
        step = profile_step_workdepth_s(algo, **kw)
        grpo = step if algo == "grpo" else profile_step_workdepth_s("grpo", **kw)
        B, G = step.inputs["prompts"], step.inputs["group_size"]
        batch = f"{B * G} prompts x 1" if algo == "ppo" else f"{B} prompts x {G}"
        note = (f"{step.sequences_per_gpu:g} sequences per GPU in decode ({batch} on "
                f"{step.processors} GPUs); generation {generation_share(step):.1%} of the lower "
                f"bound, {generation_share(step, 'upper'):.1%} of the upper; step bounds "
                f"{step.brent_lower_s / grpo.brent_lower_s:.2f}x and "
                f"{step.brent_upper_s / grpo.brent_upper_s:.2f}x GRPO's")
        return step.phases, note, step.estimate_s
    return compute


def profile_workdepth_calculator(*, start=None, **fixed) -> WorkDepthCalculator:
    """W, W/p, D and Brent's bounds in seconds per phase of one step of an algorithm, with the
    algorithm, the sequences per GPU in decode, R, the GPU and p as controls; the note gives
    generation's share of both bounds and the bounds against GRPO's. ``fixed`` overrides Lab 6's
    step (Qwen2.5-7B, G = 16, P = 512, KL 0.001) with any argument of
    :func:`~rlmperf_lite.cost.estimate_rl_step` but ``prompts`` (set by the decode batch)."""
    return WorkDepthCalculator(
        compute=_compute(fixed), options=PROFILE_OPTIONS, static_options=_STATIC_OPTIONS,
        title="Compute profile in seconds: W/p and D per phase", start={**_START, **(start or {})},
        labels=_LABELS, measured_label="estimate_rl_step")


def profile_workdepth_widget(**kwargs):
    """The live panel of :func:`profile_workdepth_calculator` (same arguments)."""
    return profile_workdepth_calculator(**kwargs).widget()


def profile_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`profile_workdepth_calculator` (same arguments)."""
    return profile_workdepth_calculator(**kwargs).static()
