"""Pipeline schedules as data, and a simulator that turns one into a timeline (book section
:ref:`sec-pp-stages`).

A schedule is, per pipeline stage, the ordered list of the ops that stage runs: ``("F", mb)``
(forward of microbatch ``mb``) and ``("B", mb)`` (its backward), or ``("F", mb, chunk)`` in the
interleaved schedule, where each stage holds ``v`` model chunks. Three schedules:

    GPipe        all m forwards, then all m backwards          (Huang et al. 2019, §2.2)
    1F1B         p - s - 1 warm-up forwards on stage s, then alternate one forward and one
                 backward (PipeDream-Flush; Narayanan et al. 2021, §2.2.1, Fig. 4 top)
    interleaved  1F1B over v chunks per stage; chunk c of stage s is virtual stage c p + s
                 (Narayanan et al. 2021, §2.2.2, Fig. 4 bottom; Megatron-LM's order)

With p stages, m microbatches and equal work per stage, the pipeline bubble (idle time) as a
fraction of the ideal time m (t_f + t_b) is (p - 1) / m for GPipe and 1F1B and (p - 1) / (v m)
for the interleaved schedule (Narayanan et al. 2021, §2.2.1-2.2.2). 1F1B's gain over GPipe is
memory: stage s keeps at most p - s microbatches' activations instead of m.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_int, check_number

__all__ = ["gpipe_schedule", "one_f_one_b_schedule", "interleaved_schedule", "make_schedule",
           "SCHEDULES", "schedule_timeline",
           "PipelineTimeline"]


def _check(pp, microbatches):
    check_int("pp", pp, 1)
    check_int("microbatches", microbatches, 1)


def gpipe_schedule(pp: int, microbatches: int) -> list:
    """GPipe (Huang et al. 2019, §2.2): every stage runs F of microbatches 0..m-1, then their B.

    Returns:
        ``schedule[s]``, stage s's ordered list of ``("F", mb)`` and ``("B", mb)``.
    Raises:
        ValueError: ``pp`` or ``microbatches`` not an int >= 1.
    """
    _check(pp, microbatches)
    forwards = [("F", mb) for mb in range(microbatches)]
    backwards = [("B", mb) for mb in range(microbatches)]
    return [forwards + backwards for _ in range(pp)]


def one_f_one_b_schedule(pp: int, microbatches: int) -> list:
    """1F1B, PipeDream-Flush (Narayanan et al. 2021, §2.2.1): stage s runs
    w = min(p - s - 1, m) warm-up forwards, then m - w pairs (F of mb w + i, B of mb i), then the
    w remaining backwards. At most w + 1 <= p - s microbatches are in flight on stage s.

    Returns and raises as :func:`gpipe_schedule`.
    """
    _check(pp, microbatches)
    schedule = []
    for s in range(pp):
        warmup = min(pp - s - 1, microbatches)
        ops = [("F", mb) for mb in range(warmup)]
        for i in range(microbatches - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", mb) for mb in range(microbatches - warmup, microbatches)]
        schedule.append(ops)
    return schedule


def interleaved_schedule(pp: int, microbatches: int, interleave: int) -> list:
    """Interleaved 1F1B with v = ``interleave`` model chunks per stage (Narayanan et al. 2021,
    §2.2.2), in Megatron-LM's order (``forward_backward_pipelining_with_interleaving``).

    The k-th forward of a stage runs chunk (k mod p v) // p on microbatch (k // p v) p + k mod p:
    p microbatches go through chunk 0, then the same p through chunk 1, and so on. The k-th
    backward visits the chunks in reverse. Stage s warms up with 2 (p - s - 1) + (v - 1) p
    forwards (all m v of them when m = p), then alternates one forward and one backward.

    Returns:
        ``schedule[s]``, stage s's ordered list of ``("F", mb, chunk)`` and ``("B", mb, chunk)``.
    Raises:
        ValueError: ``pp``, ``microbatches`` or ``interleave`` not an int >= 1, or
            ``microbatches`` not a multiple of ``pp`` (Megatron-LM's requirement).
    """
    _check(pp, microbatches)
    check_int("interleave", interleave, 1)
    if microbatches % pp:
        raise ValueError(f"microbatches={microbatches} must be a multiple of pp={pp} for the "
                         f"interleaved schedule")
    group = pp * interleave                                 # forwards per round of all chunks
    total = microbatches * interleave

    def op(kind, k):
        chunk = (k % group) // pp
        if kind == "B":
            chunk = interleave - 1 - chunk
        return (kind, (k // group) * pp + k % pp, chunk)

    schedule = []
    for s in range(pp):
        warmup = total if microbatches == pp else \
            min(2 * (pp - s - 1) + (interleave - 1) * pp, total)
        ops = [op("F", k) for k in range(warmup)]
        for k in range(total - warmup):
            ops += [op("F", warmup + k), op("B", k)]
        ops += [op("B", k) for k in range(total - warmup, total)]
        schedule.append(ops)
    return schedule


@dataclass(frozen=True)
class PipelineTimeline:
    """When each op of a schedule runs, and what the schedule costs.

    Times are in the unit of ``forward_time`` / ``backward_time`` (seconds if given seconds).

    Attributes:
        records: one dict per op, ``stage``, ``op`` ("F" or "B"), ``microbatch``, ``chunk``
            (0 unless interleaved), ``start``, ``end``; sorted by (start, stage), the order in
            which :func:`rlmperf_lite.parallel.pipeline_grads` executes them (a Gantt
            chart's data).
        makespan: end of the last op.
        busy: (p,) time each stage computes.
        idle: (p,) makespan - busy, each stage's bubble.
        peak_in_flight: (p,) int, the most microbatches (microbatch-chunks if interleaved) whose
            F is done and B is not, on each stage: the activations it must keep.
    """

    records: list
    makespan: float
    busy: np.ndarray
    idle: np.ndarray
    peak_in_flight: np.ndarray

    @property
    def bubble_fraction(self) -> float:
        """Bubble time over ideal time, t_pb / t_id = (makespan - busy) / busy of the busiest
        stage (Narayanan et al. 2021, §2.2.1: (p - 1) / m for GPipe and 1F1B)."""
        ideal = float(self.busy.max())
        return (self.makespan - ideal) / ideal


SCHEDULES = ("gpipe", "1f1b", "interleaved")


def make_schedule(schedule: str, pp: int, microbatches: int, interleave: int = 1) -> list:
    """The schedule of that name: :func:`gpipe_schedule`, :func:`one_f_one_b_schedule` or
    :func:`interleaved_schedule` (the only one that takes ``interleave``).

    Raises:
        ValueError: an unknown ``schedule``, or the schedule function's own ValueError.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    check_int("interleave", interleave, 1)
    if schedule == "interleaved":
        return interleaved_schedule(pp, microbatches, interleave)
    return (gpipe_schedule if schedule == "gpipe" else one_f_one_b_schedule)(pp, microbatches)


def _is_op(o) -> bool:
    """("F" or "B", microbatch[, chunk]) with non-negative int indices (no bools)."""
    return isinstance(o, (list, tuple)) and len(o) in (2, 3) and \
        isinstance(o[0], str) and o[0] in ("F", "B") and \
        all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0
            for i in o[1:])


def schedule_timeline(schedule: list, forward_time: float = 1.0,
                      backward_time: float = 2.0) -> PipelineTimeline:
    """Simulate a schedule: each stage runs its ops one at a time in list order, each op as soon
    as its inputs exist (communication takes no time):

        F(mb) on virtual stage k   after F(mb) on k - 1 (its input activation)
        B(mb) on virtual stage k   after B(mb) on k + 1 (its output gradient) and F(mb) on k

    Virtual stage k = chunk p + s; without chunks it is the stage s. A chunk does 1/v of a
    stage's layers, so its ops take ``forward_time / v`` and ``backward_time / v``.

    Args:
        schedule: per stage, a list of ops as returned by the ``*_schedule`` functions.
        forward_time, backward_time: > 0, time of one microbatch's F and B on a whole stage
            (default 1 and 2: backward costs twice the forward's FLOPs).
    Returns:
        A :class:`PipelineTimeline`.
    Raises:
        ValueError: ``forward_time`` or ``backward_time`` not > 0, or a ``schedule`` that is not a
            list of op lists, or that can never finish (an op waits on one that never runs).
    """
    check_number("forward_time", forward_time, low=0, low_open=True)
    check_number("backward_time", backward_time, low=0, low_open=True)
    _check_schedule(schedule)
    pp = len(schedule)
    ops = [[(o[0], int(o[1]), int(o[2]) if len(o) > 2 else 0) for o in stage]
           for stage in schedule]
    v = 1 + max((c for stage in ops for _, _, c in stage), default=0)
    duration = {"F": forward_time / v, "B": backward_time / v}
    records, free_at, nxt = _run_ops(ops, duration, last=pp * v - 1)
    stuck = [s for s in range(pp) if nxt[s] < len(ops[s])]
    if stuck:
        s = stuck[0]
        raise ValueError(f"schedule can never finish: stage {s} waits forever at op "
                         f"{schedule[s][nxt[s]]!r} (its input is never produced before it)")
    records.sort(key=lambda r: (r["start"], r["stage"]))
    busy = np.array([sum(duration[kind] for kind, _, _ in stage) for stage in ops])  # (p,)
    makespan = max(free_at)
    peak = np.zeros(pp, dtype=int)                                  # (p,)
    for s, stage in enumerate(ops):
        kept = np.cumsum([1 if kind == "F" else -1 for kind, _, _ in stage])
        peak[s] = max(kept.max(initial=0), 0)
    return PipelineTimeline(records, makespan, busy, makespan - busy, peak)


def _check_schedule(schedule) -> None:
    """ValueError unless ``schedule`` is a non-empty list, per stage, of lists of ops."""
    if not isinstance(schedule, (list, tuple)) or not schedule or \
            any(not isinstance(ops, (list, tuple)) for ops in schedule):
        raise ValueError("schedule must be a non-empty list, per stage, of lists of ops such as "
                         "('F', 0)")
    for s, stage in enumerate(schedule):
        for o in stage:
            if not _is_op(o):
                raise ValueError(f"schedule[{s}] holds {o!r}, not an op: each op is a tuple "
                                 f"('F' or 'B', microbatch) or ('F' or 'B', microbatch, chunk) "
                                 f"with ints >= 0, e.g. ('F', 0)")


def _run_ops(ops, duration: dict, last: int) -> tuple:
    """Sweep the stages, running every op whose inputs exist, until none can run: returns
    (records, each stage's free time, each stage's next op index)."""
    pp = len(ops)
    end = {}                                                         # (kind, mb, vstage) -> end
    records, free_at, nxt = [], [0.0] * pp, [0] * pp

    def inputs(kind, mb, k):
        if kind == "F":
            return [("F", mb, k - 1)] if k > 0 else []
        return [("F", mb, k)] + ([("B", mb, k + 1)] if k < last else [])

    progress = True
    while progress:
        progress = False
        for s in range(pp):
            while nxt[s] < len(ops[s]):
                kind, mb, chunk = ops[s][nxt[s]]
                k = chunk * pp + s
                deps = inputs(kind, mb, k)
                if any(d not in end for d in deps):
                    break
                start = max([free_at[s]] + [end[d] for d in deps])
                end[(kind, mb, k)] = free_at[s] = start + duration[kind]
                records.append({"stage": s, "op": kind, "microbatch": mb, "chunk": chunk,
                                "start": start, "end": free_at[s]})
                nxt[s] += 1
                progress = True
    return records, free_at, nxt
