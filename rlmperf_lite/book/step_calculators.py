"""The work-depth calculator of one RL step of a real model, in seconds (Chapters 4, 5 and 6),
built on :class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`: its live widget and
its no-kernel twin share one definition."""
from __future__ import annotations

from ..cost import rl_step_workdepth_s
from .workdepth_calc import WorkDepthCalculator

__all__ = ["step_workdepth_calculator", "step_workdepth_widget", "step_workdepth_static",
           "STEP_OPTIONS", "STATIC_OPTIONS"]

# the options each setting takes; the first of each, or ``start``, is shown first
STEP_OPTIONS = {
    "actor": ("qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b"),
    "algo": ("grpo", "ppo", "dapo", "rloo"),
    "gpus": (8, 16, 32, 64, 128, 256, 512),
    "prompts": (8, 16, 32, 64, 128, 256, 512),
    "group_size": (4, 8, 16, 32),
    "prompt_len": (256, 512, 1024, 2048),
    "response_len": (512, 1024, 2048, 4096, 8192, 16384),
    "kl_coef": (0.0, 0.001, 0.01),
    "ppo_epochs": (1, 2, 4),
}
# the no-kernel twin's grid: fewer options, so that every combination can be embedded
STATIC_OPTIONS = {**STEP_OPTIONS, "gpus": (16, 64, 256), "prompts": (8, 32, 128, 512),
                  "response_len": (1024, 4096, 16384), "group_size": (4, 16),
                  "prompt_len": (512, 2048), "kl_coef": (0.0, 0.001), "algo": ("grpo", "ppo")}
_LABELS = {"actor": "model", "algo": "algorithm", "gpus": "GPUs p", "prompts": "B prompts",
           "group_size": "G group", "prompt_len": "P prompt", "response_len": "R response",
           "kl_coef": "KL coef", "ppo_epochs": "epochs"}
_START = {"actor": "qwen2.5-7b", "algo": "grpo", "gpus": 64, "prompts": 32, "group_size": 16,
          "prompt_len": 512, "response_len": 4096, "kl_coef": 0.001, "ppo_epochs": 1}


def _compute(hardware: str, fixed: dict):
    def compute(**values):
        kw = {**_START, **fixed, **values}
        algo = kw.pop("algo")
        if algo == "dapo":                              # DAPO holds no reference model
            kw["kl_coef"] = 0.0
        wd = rl_step_workdepth_s(algo, hardware=hardware, **kw)
        decode = wd.phase("rollout_decode")
        note = (f"{wd.sequences_per_gpu:g} sequences per GPU in decode (replicas of "
                f"{wd.rollout_tp} GPU); decode's W/p is "
                f"{decode.work_per_processor_s / decode.depth_s:.2f} x its depth D")
        return wd.phases, note, wd.estimate_s
    return compute


def step_workdepth_calculator(settings=("actor", "gpus", "prompts", "response_len", "kl_coef"),
                              *, static_settings=None, hardware: str = "h100", start=None,
                              **fixed) -> WorkDepthCalculator:
    """W, D and Brent's bounds in seconds of each phase of one RL step
    (:func:`~rlmperf_lite.cost.rl_step_workdepth_s`), with a control for each of ``settings``
    (keys of :data:`STEP_OPTIONS`) and the others fixed (``fixed``, else the Chapter 5 step:
    Qwen2.5-7B, GRPO, 64 GPUs, 32 x 16, 512 + 4,096 tokens, KL 0.001); the estimate's step
    time is set against the bounds. ``static_settings``: the settings the no-kernel twin
    varies, over :data:`STATIC_OPTIONS` (default all of ``settings``).

    Raises:
        ValueError: a setting that is not a key of :data:`STEP_OPTIONS`.
    """
    unknown = [s for s in settings if s not in STEP_OPTIONS]
    if unknown:
        raise ValueError(f"settings {unknown} unknown; choose among {list(STEP_OPTIONS)}")
    options = {s: STEP_OPTIONS[s] for s in settings}
    first = {**_START, **(start or {})}
    varied = settings if static_settings is None else static_settings
    static = {s: STATIC_OPTIONS[s] if s in varied else (first[s],) for s in settings}
    return WorkDepthCalculator(
        compute=_compute(hardware, fixed), options=options, static_options=static,
        title="One RL step: W/p and D per phase", start=first,
        labels=_LABELS, measured_label="estimate_rl_step")


def step_workdepth_widget(settings=("actor", "gpus", "prompts", "response_len", "kl_coef"),
                          **kwargs):
    """The live panel of :func:`step_workdepth_calculator` (same arguments)."""
    return step_workdepth_calculator(settings, **kwargs).widget()


def step_workdepth_static(settings=("actor", "gpus", "prompts", "response_len", "kl_coef"),
                          **kwargs):
    """The no-kernel twin of :func:`step_workdepth_calculator` (same arguments)."""
    return step_workdepth_calculator(settings, **kwargs).static()
