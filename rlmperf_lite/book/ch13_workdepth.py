"""The work-depth calculator of Chapter 13: the guidelines' decisions — the split of the
example's 32 H20s between the pools, synchronous or asynchronous, the staleness bound, the
group size at 2,048 samples per step, the engine's replica size — as W, D, W/p and Brent's
bounds of the steady step (:func:`~rlmperf_lite.sim.workdepth.system_workdepth`), with the
simulated step set against them, live and with no kernel from one definition
(:class:`~rlmperf_lite.book.WorkDepthCalculator`)."""
from __future__ import annotations

from dataclasses import replace

from ..sim.sizing import EXAMPLE, STEPS, example_workload, simulate_placement
from ..sim.workdepth import system_workdepth
from .workdepth_calc import WorkDepthCalculator

__all__ = ["GUIDELINE_WD_OPTIONS", "GUIDELINE_WD_STATIC", "guideline_workdepth_calculator",
           "guideline_workdepth_widget", "guideline_workdepth_static"]

GUIDELINE_WD_OPTIONS = {"split": ("colocated", "4:28", "8:24", "9:23", "12:20", "16:16", "24:8"),
                        "mode": ("async", "sync"), "staleness": (0.0, 0.25, 0.5, 1.0, 2.0),
                        "group_size": (2, 8, 16, 64, 128), "engine_tp": (1, 2, 4, "best")}
"""The split (rollout to training GPUs of the 32), the schedule, its staleness bound, G
(B = 2,048 / G) and the engine's tp (``engine_tp`` of
:func:`~rlmperf_lite.sim.from_cost.system_from_cost`; "best" the shortest generation plus
sync)."""
GUIDELINE_WD_STATIC = {"split": ("colocated", "4:28", "9:23", "16:16"), "mode": ("async", "sync"),
                       "staleness": (0.0, 0.5, 1.0), "group_size": (16, 128), "engine_tp": (1,)}
"""The no-kernel twin's grid (26 settings the library accepts; the engine at tp 1, the live
panel alone sweeps tp)."""
_LABELS = {"split": "rollout : train", "mode": "schedule", "staleness": "staleness",
           "group_size": "G group", "engine_tp": "engine tp"}
_EFF = {k: EXAMPLE[k] for k in ("train_efficiency", "decode_efficiency")}


def _compute(split, mode, staleness, group_size, engine_tp=1):
    if mode == "sync" and staleness:
        raise ValueError(f"staleness={staleness:g}: a synchronous system runs no version "
                         "ahead; set staleness 0, or schedule 'async'")
    base = example_workload()
    S = base.samples_per_step
    if S % group_size or (S // group_size) % 4:
        raise ValueError(f"group_size={group_size} must divide the {S} samples per step into "
                         "a number of prompts divisible by the 4 streaming updates")
    wl = replace(base, prompts=S // group_size, group_size=group_size)
    rollout = None if split == "colocated" else int(split.split(":")[0])
    extra = dict(staleness=staleness, minibatches=4) if mode == "async" else {}
    point = simulate_placement(EXAMPLE["actor"], EXAMPLE["hardware"], wl, EXAMPLE["gpus"],
                               rollout_gpus=rollout, mode=mode, engine_tp=engine_tp, **extra,
                               **_EFF)
    wd = system_workdepth(point.system, wl, steps=STEPS)
    gen = wd.generation
    note = (f"{point.name}, G = {group_size} (B = {wl.prompts}), engine tp {point.engine_tp} x "
            f"{point.replicas} replicas: generation's chain "
            f"{gen['depth_s']:.1f} s (straggler {gen['straggler_s']:.1f} s), k = {gen['k']}; "
            f"the pools' own lower bound {wd.pool_lower_s:.1f} s; trainer bound "
            f"{point.trainer_bound_s:.1f} s")
    return wd.phases, note, point.step_time_s


def guideline_workdepth_calculator() -> WorkDepthCalculator:
    """The steady step's W (GPU-s), D (s) and Brent's bounds of the example system (Qwen2.5-7B
    on 32 H20s, :data:`~rlmperf_lite.sim.sizing.EXAMPLE`) for a split, schedule, staleness
    bound, group size and engine tp, and the simulated step per version
    (:func:`~rlmperf_lite.sim.sizing.simulate_placement`, 8 steps, 4 streaming updates per
    version asynchronously).

    Settings refused (shown as a message): a colocated asynchronous system, a staleness with a
    synchronous one, a G that leaves a number of prompts the 4 updates do not divide, an
    engine tp that does not divide the rollout GPUs.
    """
    return WorkDepthCalculator(
        compute=_compute, options=GUIDELINE_WD_OPTIONS, static_options=GUIDELINE_WD_STATIC,
        title="The guidelines' decisions: W/p and D of a step", labels=_LABELS,
        start={"split": "9:23", "mode": "async", "staleness": 0.5, "group_size": 16,
               "engine_tp": 1},
        measured_label="simulated step")


def guideline_workdepth_widget():
    """The live panel of :func:`guideline_workdepth_calculator`."""
    return guideline_workdepth_calculator().widget()


def guideline_workdepth_static():
    """The no-kernel twin of :func:`guideline_workdepth_calculator`."""
    return guideline_workdepth_calculator().static()
