"""Lab 3's work-depth calculator: one step of each member of the GRPO family and of PPO on a
real model, in seconds, DAPO's rounds of generation included
(:func:`~rlmperf_lite.cost.variant_step_workdepth_s`), live and with no
kernel from one definition (:class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`)."""
from __future__ import annotations

from ..cost.variants import variant_step_workdepth_s
from ..cost.variants import VARIANT_KL
from .workdepth_calc import WorkDepthCalculator

__all__ = ["VARIANT_OPTIONS", "variant_workdepth_calculator", "variant_workdepth_widget",
           "variant_workdepth_static"]

VARIANT_OPTIONS = {
    "variant": tuple(VARIANT_KL),                       # grpo, dr_grpo, dapo, rloo, ...
    "gpus": (8, 16, 32, 64, 128, 256, 512),
    "pass_rate": (0.5, 0.8, 0.9, 0.95, 0.99),
    "group_size": (1, 4, 8, 16),                        # 1: REINFORCE++ and PPO only
    "kl_coef": (0.0, 0.001),
}
_STATIC_OPTIONS = {**VARIANT_OPTIONS, "gpus": (16, 64, 256), "pass_rate": (0.5, 0.8, 0.95),
                   "group_size": (1, 4, 16)}
_LABELS = {"variant": "variant", "gpus": "GPUs p", "pass_rate": "pass rate q",
           "group_size": "G group", "kl_coef": "KL coef"}
# Lab 3's step: Qwen2.5-7B, 32 prompts x 16, 512 + 4,096 tokens, a KL term, on 64 H100s
_STEP = {"actor": "qwen2.5-7b", "hardware": "h100", "prompts": 32, "prompt_len": 512,
         "response_len": 4096}
_START = {"variant": "dapo", "gpus": 64, "pass_rate": 0.8, "group_size": 16, "kl_coef": 0.001}


def _compute(fixed: dict):
    def compute(variant, pass_rate, **values):
        v = variant_step_workdepth_s(variant, pass_rate=pass_rate, **{**_STEP, **fixed, **values})
        s = v.step
        decode = s.phase("rollout_decode")
        note = (f"{v.variant} on {s.processors} GPUs, {s.inputs['prompts']} prompts x "
                f"{s.inputs['group_size']}: {v.expected_rounds:.3g} rounds of generation "
                f"(pass rate {pass_rate:g}, {v.informative_frac:.1%} of groups informative); "
                f"decode D = {decode.depth_s:.3g} s, {s.sequences_per_gpu:g} sequences per GPU")
        return s.phases, note, s.estimate_s
    return compute


def variant_workdepth_calculator(*, start=None, **fixed) -> WorkDepthCalculator:
    """W, D, W/p and Brent's bounds in seconds per phase of one step of a variant, with the
    variant, the GPUs p, the pass rate q (DAPO's rounds), G and the KL coefficient as controls;
    ``fixed`` overrides the step (default Lab 3's: Qwen2.5-7B, 32 prompts, 512 + 4,096 tokens,
    H100) with any argument of :func:`~rlmperf_lite.cost.estimate_rl_step`. The estimate's step
    time, with DAPO's rounds, is set against the bounds."""
    return WorkDepthCalculator(
        compute=_compute(fixed), options=VARIANT_OPTIONS, static_options=_STATIC_OPTIONS,
        title="One step of a variant: W/p and D per phase", start={**_START, **(start or {})},
        labels=_LABELS, measured_label="estimate_rl_step, with the rounds")


def variant_workdepth_widget(**kwargs):
    """The live panel of :func:`variant_workdepth_calculator` (same arguments)."""
    return variant_workdepth_calculator(**kwargs).widget()


def variant_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`variant_workdepth_calculator` (same arguments)."""
    return variant_workdepth_calculator(**kwargs).static()
