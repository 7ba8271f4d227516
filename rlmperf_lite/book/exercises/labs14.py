"""Answers to the exercises of Lab 14 (a mini RL system on Ray): each expected value is computed
by the simulator at call time from the reference per-phase costs of the toy on Ray
(:data:`rlmperf_lite.distributed.REFERENCE_COSTS`), so no answer needs Ray (see
:mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

from ._answer import Answer

__all__ = ["ANSWERS", "STEPS", "SLOW_SYNC_S"]

STEPS = 12
"""Simulated steps per prediction (the step time is the mean of the steady steps)."""

SLOW_SYNC_S = 0.02
"""Exercise 3's weight sync: 20 ms instead of the object store's few milliseconds."""


def _step_s(mode: str, **kw) -> float:
    """The predicted step time (s) of the toy with the reference costs."""
    from ...distributed import REFERENCE_COSTS, predict_run
    return predict_run(REFERENCE_COSTS, mode, STEPS, **kw).step_time_s


def _workdepth(weight_sync_s: float | None = None, **kw):
    import dataclasses

    from ...distributed import REFERENCE_COSTS, controller_workdepth
    costs = REFERENCE_COSTS if weight_sync_s is None else dataclasses.replace(
        REFERENCE_COSTS, phase_s={**REFERENCE_COSTS.phase_s, "weight_sync": weight_sync_s})
    return controller_workdepth(costs, **kw)


ANSWERS: dict[str, Answer] = {
    "ch14.1a": Answer(lambda: _step_s("sync"),
                      "predicted sync step time (s), one rollout worker, reference costs",
                      "predict_run(REFERENCE_COSTS, 'sync', 12).step_time_s"),
    "ch14.1b": Answer(lambda: _step_s("sync", num_rollout_workers=2),
                      "the same with two rollout workers",
                      "predict_run(..., num_rollout_workers=2)"),
    "ch14.2a": Answer(lambda: _step_s("one_step_off"),
                      "predicted one-step-off step time (s), reference costs",
                      "predict_run(REFERENCE_COSTS, 'one_step_off', 12).step_time_s"),
    "ch14.2b": Answer(lambda: _step_s("async", staleness=4),
                      "predicted step time (s) at staleness 4",
                      "predict_run(REFERENCE_COSTS, 'async', 12, staleness=4).step_time_s"),
    "ch14.3a": Answer(lambda: _step_s("sync", weight_sync_s=SLOW_SYNC_S),
                      "predicted sync step time (s) with a 20-ms weight sync",
                      "predict_run(..., 'sync', 12, weight_sync_s=0.02)"),
    "ch14.3b": Answer(lambda: _step_s("one_step_off", weight_sync_s=SLOW_SYNC_S),
                      "predicted one-step-off step time (s) with a 20-ms weight sync",
                      "predict_run(..., 'one_step_off', 12, weight_sync_s=0.02)"),
    "ch14.3c": Answer(lambda: _workdepth(SLOW_SYNC_S, staleness=1, sync="pull").per_version_s,
                      "one-step-off per version (s) with a 20-ms sync that the rollout worker "
                      "pulls (the toy's dataflow)",
                      "controller_workdepth(slow costs, staleness=1, sync='pull').per_version_s"),
    "ch14.4a": Answer(lambda: _workdepth(staleness=1).work_s,
                      "work W (s) of a one-step-off step, reference costs",
                      "controller_workdepth(REFERENCE_COSTS, staleness=1).work_s"),
    "ch14.4b": Answer(lambda: _workdepth(staleness=1).depth_s,
                      "depth D (s) of the same step's dataflow",
                      "controller_workdepth(REFERENCE_COSTS, staleness=1).depth_s"),
    "ch14.4c": Answer(lambda: _workdepth(staleness=1, prox_beside_scoring=False).per_version_s,
                      "one-step-off per version (s) on a controller that asks for the proximal "
                      "log-probs only once the scores are back",
                      "controller_workdepth(REFERENCE_COSTS, staleness=1, "
                      "prox_beside_scoring=False).per_version_s"),
}
"""Exercise id -> :class:`~rlmperf_lite.book.exercises.Answer` for Lab 14."""
