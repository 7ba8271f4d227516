"""The work-depth calculator of Chapter 14: the Ray controller's step in milliseconds, per
mode, rollout workers, learners and where the weight sync sits
(:func:`~rlmperf_lite.distributed.controller_workdepth`), with the simulator's prediction
(:func:`~rlmperf_lite.distributed.predict_run`) set against Brent's bounds, live and with no
kernel from one definition (:class:`~rlmperf_lite.book.WorkDepthCalculator`).
It replaces the no-kernel prediction grid of :mod:`rlmperf_lite.book.ray_calculators` in the
lab; the live Ray runs stay :func:`~rlmperf_lite.book.ray_calculators.ray_widget`."""
from __future__ import annotations

from ..cost import PhaseWorkDepth
from ..distributed import (REFERENCE_COSTS, SYNC_MODELS, ToyCosts, controller_workdepth,
                           mode_staleness, predict_run, toy_system)
from .ray_calculators import RAY_GRID
from .workdepth_calc import WorkDepthCalculator

__all__ = ["CONTROLLER_WD_MODES", "CONTROLLER_WD_OPTIONS", "controller_workdepth_calculator",
           "controller_workdepth_widget", "controller_workdepth_static"]

CONTROLLER_WD_MODES = {(m if k is None else f"{m} k={k}"): (m, k) for m, k in RAY_GRID["mode"]}
"""The calculator's mode labels (those of the prediction grid, ``RAY_GRID``) -> (mode,
staleness) of the controller."""
CONTROLLER_WD_OPTIONS = {"mode": tuple(CONTROLLER_WD_MODES),
                         "rollout_workers": RAY_GRID["rollout_workers"],
                         "learners": RAY_GRID["learners"], "sync": SYNC_MODELS}
"""Every combination is the no-kernel twin's grid (colocated only where W = L)."""
PREDICT_STEPS = 12
_LABELS = {"mode": "mode", "rollout_workers": "rollout W", "learners": "learners L",
           "sync": "weight sync"}


def _compute(costs: ToyCosts):
    def compute(mode, rollout_workers, learners, sync):
        name, k = CONTROLLER_WD_MODES[mode]
        layout = dict(staleness=k, num_rollout_workers=rollout_workers, num_learners=learners)
        system = toy_system(costs, name, **layout)                   # refuses a bad layout
        wd = controller_workdepth(costs, staleness=mode_staleness(name, k),
                                  num_rollout_workers=rollout_workers, num_learners=learners,
                                  sync=sync, num_scorers=learners if name == "colocated" else 1)
        label = "step, k = 0" if wd.staleness == 0 else f"version, k = {wd.staleness}"
        phases = [PhaseWorkDepth(label, 0.0, wd.work_s, wd.per_version_s, system.gpus)]
        predicted = None if sync == "pull" else predict_run(costs, name, PREDICT_STEPS,
                                                            **layout).step_time_s
        note = (f"{mode} on {system.gpus} actors {dict(system.pools)}: D_gen "
                f"{wd.generate_s * 1e3:.2f} ms, D_train {wd.train_depth_s * 1e3:.2f} ms, one "
                f"step's latency D {wd.depth_s * 1e3:.2f} ms, W/D {wd.parallelism:.2f}" +
                ("; the simulator models a broadcast sync, so no prediction for 'pull'"
                 if sync == "pull" else ""))
        return phases, note, predicted
    return compute


def controller_workdepth_calculator(costs: ToyCosts = REFERENCE_COSTS) -> WorkDepthCalculator:
    """W, D per version and Brent's bounds of the controller's step on its actors (one device
    each), from ``costs`` (default the reference costs, so the page is the same on every
    machine; pass :func:`~rlmperf_lite.distributed.measured_costs` of a run for its own), and
    the simulator's prediction for a broadcast sync (``PREDICT_STEPS`` steps).

    Raises:
        ValueError: naming ``costs`` if it is not a ToyCosts; a layout the controller cannot
            run (colocated with W != L) is shown as the library's message.
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts (REFERENCE_COSTS or measured_costs of a "
                         f"run), got {type(costs).__name__}")
    return WorkDepthCalculator(
        compute=_compute(costs), options=CONTROLLER_WD_OPTIONS,
        title="The controller's step: W/p and D per version", labels=_LABELS,
        start={"mode": "one_step_off", "rollout_workers": 1, "learners": 1,
               "sync": "broadcast"}, measured_label="simulator's prediction")


def controller_workdepth_widget(costs: ToyCosts = REFERENCE_COSTS):
    """The live panel of :func:`controller_workdepth_calculator`."""
    return controller_workdepth_calculator(costs).widget()


def controller_workdepth_static(costs: ToyCosts = REFERENCE_COSTS):
    """The no-kernel twin of :func:`controller_workdepth_calculator`."""
    return controller_workdepth_calculator(costs).static()
