"""The work-depth calculator of Chapter 11, staleness (book section :ref:`sec-async-workdepth`):
W, D_k and Brent's bounds in seconds of one weight version of the asynchronous GRPO step, from
:func:`~rlmperf_lite.sim.workdepth.layout_workdepth`, with the simulator's steady time per
version set against them. Built on
:class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`: the live widget and its
no-kernel twin share one definition."""
from __future__ import annotations

from ..sim import Workload
from ..sim.workdepth import layout_workdepth
from .workdepth_calc import WorkDepthCalculator

__all__ = ["STALENESS_WD_OPTIONS", "STALENESS_WD_STATIC", "STALENESS_WD_SYSTEM", "SCHEDULES",
           "staleness_workdepth_calculator", "staleness_workdepth_widget",
           "staleness_workdepth_static"]

SCHEDULES = {"partial rollout, streaming": dict(partial_rollout=True, consume="ready"),
             "drained, own batch": dict(partial_rollout=False, consume="batch")}
"""AReaL's and verl's fully-async schedule, and verl's one-step-off one (section 11.1)."""
STALENESS_WD_OPTIONS = {
    "staleness": (0, 1, 2, 4, 8),
    "rollout_gpus": (8, 12, 16, 20, 24),
    "schedule": tuple(SCHEDULES),
    "minibatches": (1, 4),
}
"""The settings, each with its options. The bound k, the GPUs that generate (of 32), the
schedule, and the streaming updates per version."""
STALENESS_WD_STATIC = {**STALENESS_WD_OPTIONS, "rollout_gpus": (8, 16, 24)}
"""The no-kernel twin's grid, 60 settings, each simulated when the book is built (about 5 s)."""
STALENESS_WD_SYSTEM = dict(actor="qwen2.5-7b", hardware="h100-sxm", gpus=32, prompts=32,
                           group_size=16, prompt_len=512, mean_response_len=2048.0,
                           max_response_len=8192, length_sigma=1.0, kl_coef=0.001, steps=16)
"""Chapter 11's step (Chapter 10's system disaggregated), 16 simulated versions as in the
staleness sweep of section 11.3."""
_LABELS = {"staleness": "staleness bound k", "rollout_gpus": "rollout GPUs",
           "schedule": "schedule", "minibatches": "updates per version"}
_START = {"staleness": 2, "rollout_gpus": 16, "schedule": "partial rollout, streaming",
          "minibatches": 1}
_WORKLOAD = ("prompts", "group_size", "prompt_len", "mean_response_len", "max_response_len",
             "length_sigma")


def _compute(fixed: dict):
    kw = {**STALENESS_WD_SYSTEM, **fixed}
    wl = Workload(**{k: kw.pop(k) for k in _WORKLOAD})

    def compute(staleness, rollout_gpus, schedule, minibatches):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {tuple(SCHEDULES)}, got {schedule!r}")
        wd = layout_workdepth(workload=wl, placement="disaggregated", rollout_gpus=rollout_gpus,
                              staleness=staleness, minibatches=minibatches,
                              **SCHEDULES[schedule], **kw)
        sync_s, chain = wd.weight_sync_s, wd.generation
        note = (f"floors per version: engine W_gen/p_gen + sync {wd.gen_floor_s + sync_s:.3g} s, "
                f"trainer W_train/p_train + sync {wd.train_floor_s + sync_s:.3g} s; D_k "
                f"{wd.depth_s:.3g} s, generation's chain {chain['depth_s']:.3g} s (straggler "
                f"{chain['straggler_s']:.3g} s); decode at {wd.batch_per_replica} sequences per "
                "replica")
        return wd.phases, note, wd.simulate().step_time_s
    return compute


def staleness_workdepth_calculator(*, static_options=None, start=None,
                                   **fixed) -> WorkDepthCalculator:
    """W (GPU-s), D_k (s) and Brent's bounds of one weight version on the settings of
    :data:`STALENESS_WD_OPTIONS`, the others fixed (``fixed`` overrides
    :data:`STALENESS_WD_SYSTEM`); the simulator's steady time per version is set against the
    bounds. ``static_options``: the no-kernel twin's grid (default
    :data:`STALENESS_WD_STATIC`)."""
    return WorkDepthCalculator(
        compute=_compute(fixed), options=STALENESS_WD_OPTIONS,
        static_options=STALENESS_WD_STATIC if static_options is None else static_options,
        title="One weight version by staleness bound: W/p and D_k",
        start={**_START, **(start or {})}, labels=_LABELS, measured_label="simulated version")


def staleness_workdepth_widget(**kwargs):
    """The live panel of :func:`staleness_workdepth_calculator` (same arguments)."""
    return staleness_workdepth_calculator(**kwargs).widget()


def staleness_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`staleness_workdepth_calculator` (same arguments)."""
    return staleness_workdepth_calculator(**kwargs).static()
