"""Answers to the exercises of Lab 13 (practical guidelines for RL systems): each expected value
is computed by the library at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

from ._answer import Answer

__all__ = ["ANSWERS"]


def _example():
    """(actor, hardware, gpus, efficiencies) of the book's example system."""
    from ...sim.sizing import EXAMPLE
    effs = {k: EXAMPLE[k] for k in ("train_efficiency", "decode_efficiency")}
    return EXAMPLE["actor"], EXAMPLE["hardware"], EXAMPLE["gpus"], effs


def _gain_64(length_sigma: float = 0.5) -> float:
    """Gain of the best split (async, staleness 0.5) over colocation on 64 GPUs."""
    from ...sim.sizing import best_split, example_workload
    actor, hw, _, effs = _example()
    return best_split(actor, hw, example_workload(length_sigma), 64, **effs).gain


def _split(rollout_gpus: int):
    """The example's asynchronous system (staleness 0.5, 4 streaming updates) at a split."""
    from ...sim.sizing import example_workload, simulate_placement
    actor, hw, gpus, effs = _example()
    return simulate_placement(actor, hw, example_workload(), gpus, rollout_gpus=rollout_gpus,
                              mode="async", staleness=0.5, minibatches=4, **effs)


def _knee_12():
    from ...sim.sizing import example_workload, staleness_knee, staleness_sweep
    actor, hw, gpus, effs = _example()
    return staleness_knee(staleness_sweep(actor, hw, example_workload(), gpus, rollout_gpus=12,
                                          stalenesses=(0.0, 0.25, 0.5, 1.0), **effs))


def _wait_growth(length_sigma: float = 0.5) -> float:
    from ...sim.sizing import example_workload, expected_group_wait
    wl = example_workload(length_sigma)
    return expected_group_wait(wl, 64) / expected_group_wait(wl, 4)


def _sync_72b(**kw) -> float:
    """The disaggregated weight sync of Qwen2.5-72B, 32:32 of 64 H20s (``kw``: weight_sync)."""
    from ...sim.sizing import example_workload, weight_sync_comparison
    _, hw, _, effs = _example()
    return weight_sync_comparison("qwen2.5-72b", hw, example_workload(), 64, rollout_gpus=32,
                                  **kw, **effs)["disaggregated"]


def _best_tp(length_sigma: float = 0.5):
    """(the row with the shortest step, the tp-1 row) of the colocated example at each engine
    tp (:func:`~rlmperf_lite.sim.sizing.engine_tp_sweep`)."""
    from ...sim.sizing import engine_tp_sweep, example_workload
    actor, hw, gpus, effs = _example()
    rows = engine_tp_sweep(actor, hw, example_workload(length_sigma), gpus, **effs)
    return min(rows, key=lambda r: (r.step_time_s, r.engine_tp)), rows[0]


def _tp_speedup(length_sigma: float = 0.5) -> float:
    best, one = _best_tp(length_sigma)
    return one.step_time_s / best.step_time_s


ANSWERS: dict[str, Answer] = {
    "ch13.1": Answer(lambda: _gain_64(0.5),
                     "gain of the best split over colocation, 64 H20s, sigma 0.5",
                     "best_split(MODEL, HW, example_workload(0.5), 64, **EFF).gain: colocated "
                     "step time over the best split's"),
    "ch13.2a": Answer(lambda: _split(16).rollout_idle,
                      "idle share of the rollout pool at the 16:16 split",
                      "simulate_placement(..., rollout_gpus=16, mode='async', staleness=0.5, "
                      "minibatches=4).rollout_idle, a share in [0, 1]"),
    "ch13.2b": Answer(lambda: _split(16).step_time_s / _split(9).step_time_s,
                      "step time at 16:16 over that at 9:23",
                      "the same simulate_placement call with rollout_gpus=9 for the "
                      "denominator"),
    "ch13.3a": Answer(lambda: _knee_12().staleness,
                      "smallest staleness bound within 5% of the fastest at 12:20",
                      "staleness_knee(staleness_sweep(..., rollout_gpus=12, stalenesses=(0.0, "
                      "0.25, 0.5, 1.0))).staleness",
                      rtol=0.0),
    "ch13.3b": Answer(lambda: _knee_12().mean_staleness,
                      "mean staleness of the samples trained on at that bound",
                      "the knee's mean_staleness (versions)"),
    "ch13.4": Answer(lambda: _wait_growth(0.5),
                     "growth of E[longest of G] from G=4 to G=64 at sigma 0.5",
                     "expected_group_wait(example_workload(0.5), 64) / the same for G = 4"),
    "ch13.5a": Answer(lambda: _sync_72b(),
                      "mechanism-model weight sync of Qwen2.5-72B, 32:32 H20s (s)",
                      "weight_sync_comparison('qwen2.5-72b', 'h20', ..., 64, "
                      "rollout_gpus=32)['disaggregated'] (the default, weight_sync='mechanism')"),
    "ch13.5b": Answer(lambda: _sync_72b() / _sync_72b(weight_sync="bandwidth"),
                      "that sync over the bandwidth bound of the same layout",
                      "the same call with weight_sync='bandwidth' for the denominator"),
    "ch13.6a": Answer(lambda: _best_tp(0.5)[0].engine_tp,
                      "engine tp of the shortest colocated step, 32 H20s, sigma 0.5",
                      "min(engine_tp_sweep(MODEL, HW, example_workload(0.5), 32, **EFF), "
                      "key=step_time_s).engine_tp", rtol=0.0),
    "ch13.6b": Answer(lambda: _tp_speedup(0.5),
                      "colocated step at tp 1 over the step at that tp, sigma 0.5",
                      "the sweep's first row (tp 1) over its fastest row, step_time_s"),
}
"""Exercise id -> :class:`~rlmperf_lite.book.exercises.Answer` for Lab 13."""
