"""Lab 4's work-depth calculator: the phases of one RL step of a real model, in seconds — the
step calculator of :mod:`rlmperf_lite.book.step_calculators` with the controls of Chapter 4's
step (algorithm, GPUs, prompts, response length, KL term)."""
from __future__ import annotations

from .step_calculators import step_workdepth_calculator
from .workdepth_calc import WorkDepthCalculator

__all__ = ["PHASE_SETTINGS", "phase_workdepth_calculator", "phase_workdepth_widget",
           "phase_workdepth_static"]

#: The controls, keys of :data:`~rlmperf_lite.book.step_calculators.STEP_OPTIONS`
PHASE_SETTINGS = ("algo", "gpus", "prompts", "response_len", "kl_coef")
# Lab 4's step: GRPO on Qwen2.5-7B, 32 prompts x 16, 512 + 4,096 tokens, KL 0.001, 64 H100s
_START = {"algo": "grpo", "gpus": 64, "prompts": 32, "response_len": 4096, "kl_coef": 0.001}


def phase_workdepth_calculator(**fixed) -> WorkDepthCalculator:
    """W, W/p, D and Brent's bounds in seconds of each phase of Lab 4's step, with the
    controls of :data:`PHASE_SETTINGS` (the no-kernel twin over every combination of their
    static options); ``fixed``: other arguments of
    :func:`~rlmperf_lite.cost.estimate_rl_step` (e.g. ``actor``, ``group_size``)."""
    return step_workdepth_calculator(PHASE_SETTINGS, start=_START, **fixed)


def phase_workdepth_widget(**fixed):
    """The live panel of :func:`phase_workdepth_calculator` (same arguments)."""
    return phase_workdepth_calculator(**fixed).widget()


def phase_workdepth_static(**fixed):
    """The no-kernel twin of :func:`phase_workdepth_calculator` (same arguments)."""
    return phase_workdepth_calculator(**fixed).static()
