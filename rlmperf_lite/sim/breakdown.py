"""Where a simulated step's wall time goes (book section :ref:`sec-frameworks-workdepth`): the
seconds of a steady-state step during which the GPUs only generate, only train, do both, sync
weights or wait, from the intervals of a :class:`~rlmperf_lite.sim.SimResult`."""
from __future__ import annotations

import math

import numpy as np

from ..checks import check_int
from .result import SimResult

__all__ = ["step_breakdown"]


def _merge(spans) -> list:
    """[start, end) spans, sorted and merged where they touch or overlap."""
    out = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _subtract(spans, holes) -> list:
    """``spans`` less the time in ``holes``."""
    out, holes = [], _merge(holes)
    for a, b in spans:
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append([a, h0])
            a = max(a, h1)
        if a < b:
            out.append([a, b])
    return out


def _covered(spans, points):
    """For each of ``points`` (K,), whether a merged span contains it: (K,) bool."""
    if not spans:
        return np.zeros(len(points), dtype=bool)
    starts = np.array([s[0] for s in spans])
    ends = np.array([s[1] for s in spans])
    i = np.searchsorted(starts, points, side="right") - 1          # last span starting before
    return (i >= 0) & (points < ends[np.maximum(i, 0)])


def _window(result: SimResult, tail_steps: int | None) -> tuple:
    """(lo_s, hi_s, steps) of the steady-state window: after the warm-up, less the last
    ``tail_steps``. Raises ValueError naming ``tail_steps`` if no step is left."""
    sys_ = result.system
    if tail_steps is None:
        # a heuristic, conservative margin that keeps the run's last versions out of the mean
        # (tail_steps=0 is as valid: a result holds every sample the engine started, so the
        # window's generation is complete, and it moves the book's presets' numbers by well
        # under 1%). Not a staleness bound: with streaming consumption a sample can be
        # trained many versions after it started (SimResult.staleness)
        tail_steps = 0 if sys_.mode == "sync" else \
            math.ceil(sys_.staleness) + (sys_.partial_rollout and sys_.staleness > 0)
    check_int("tail_steps", tail_steps, 0)
    warm, ends = max(result.warmup_steps, 1), result.step_end_s
    last = result.steps - 1 - tail_steps
    if last < warm:
        raise ValueError(f"tail_steps = {tail_steps} leaves no step after the {warm} warm-up "
                         f"steps of a {result.steps}-step run: simulate at least "
                         f"{2 * (tail_steps + 1)} steps")
    return float(ends[warm - 1]), float(ends[last]), last - warm + 1


def _wall_time_parts(result: SimResult, lo: float, hi: float) -> dict:
    """Seconds of [lo, hi) in each of the five parts (summed over the window, not averaged)."""
    s = result.samples
    gen = _subtract(_merge(zip(s["start_s"], s["end_s"])), result.rollout_pauses)
    train = _merge((iv.start_s, iv.end_s) for iv in result.intervals
                   if iv.phase != "switch" and iv.pool != "cpu")
    sync = _merge(result.sync_windows)
    cuts = sorted({lo, hi, *(x for sp in (gen, train, sync) for ab in sp for x in ab
                              if lo < x < hi)})
    cuts = np.array(cuts)                                                  # (K,)
    mid, width = (cuts[1:] + cuts[:-1]) / 2, np.diff(cuts)                 # (K - 1,)
    in_sync, in_gen, in_train = (_covered(sp, mid) for sp in (sync, gen, train))
    parts = {"generation_only_s": ~in_sync & in_gen & ~in_train,
             "training_only_s": ~in_sync & ~in_gen & in_train,
             "overlap_s": ~in_sync & in_gen & in_train,
             "weight_sync_s": in_sync,
             "idle_s": ~in_sync & ~in_gen & ~in_train}
    return {k: float(width[m].sum()) for k, m in parts.items()}


def step_breakdown(result, tail_steps: int | None = None) -> dict:
    """Mean seconds per steady-state step during which the GPUs only generate
    (``generation_only_s``), only train (``training_only_s``), do both on different pools
    (``overlap_s``), sync weights (``weight_sync_s``) or neither (``idle_s``); the five sum to
    ``step_time_s``. ``work_gpu_s``: GPU-seconds the schedule keeps GPUs busy per step (a
    replica running one straggler counts), ``work_bound_s`` = ``work_gpu_s`` / GPUs: not the
    book's W nor a bound (that is :func:`~rlmperf_lite.sim.workdepth.system_workdepth`).

    The window: the steps after :attr:`~rlmperf_lite.sim.SimResult.warmup_steps`, less the
    last ``tail_steps`` (default ceil(staleness), one more with partial rollout, for an
    asynchronous run; 0 for a synchronous one).

    Raises:
        ValueError: naming ``result`` if it is not a :class:`~rlmperf_lite.sim.SimResult`, or
            ``tail_steps`` if it is negative or leaves no step in the window (simulate more
            steps).
    """
    if not isinstance(result, SimResult):
        raise ValueError(f"result must be a SimResult, got {type(result).__name__}")
    lo, hi, n = _window(result, tail_steps)
    # a split of wall time, not of samples: in a synchronous step generation, training and
    # the sync are links of one chain, so the step is their sum; asynchrony moves time into
    # overlap_s
    out = {k: v / n for k, v in _wall_time_parts(result, lo, hi).items()}
    u = result.utilisation(window=(lo, hi))
    work = sum(share["compute"] * result.system.pools[pool] for pool, share in u.items())
    out["step_time_s"] = (hi - lo) / n
    out["work_gpu_s"] = work * (hi - lo) / n
    out["work_bound_s"] = out["work_gpu_s"] / result.system.gpus
    return out
