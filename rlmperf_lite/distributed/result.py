"""What a run on Ray returns: the in-process loops' per-step history plus the measured timeline,
in the simulator's format (book chapter "A mini RL system on Ray")."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..rl.common import RLResult
from ..sim.phases import Interval
from ..sim.result import union_s

__all__ = ["RayRunResult", "PHASE_TIMES", "to_intervals", "phase_times", "phase_overlap_s",
           "timeline_nodes"]

PHASE_TIMES = {"generate": "rollout_s", "ref_logp": "ref_logps_s", "reward": "reward_s",
               "advantages": "advantages_s", "old_logp": "prox_logps_s",
               "actor_update": "update_s", "grad_allreduce": "update_s",
               "weight_sync": "weight_sync_s"}
"""Timeline phase -> the history's ``*_s`` key of :func:`rlmperf_lite.rl.train_async_grpo`."""


@dataclass
class RayRunResult(RLResult):
    """:class:`rlmperf_lite.rl.common.RLResult` (final params, per-step history with the keys of
    train_async_grpo's, the reference model) plus what the run on Ray adds. The history's
    ``*_s`` are the time each phase ran on at least one actor in that step
    (:func:`~rlmperf_lite.distributed.phase_times`); ``step_s`` is the wall time from the end of
    one step of the controller's loop to the end of the next (one weight version each, as the
    simulator's step time; it includes ``on_step`` and any checkpoint written)."""

    mode: str = "sync"
    config: object = None
    """The :class:`~rlmperf_lite.rl.AsyncGRPOConfig` the run ran (the given config with the
    mode's staleness, :func:`~rlmperf_lite.distributed.run_config`)."""
    timeline: list = field(default_factory=list)
    """:class:`~rlmperf_lite.sim.Interval` bars (pool = the actors' role, lane = the
    actor), seconds since the first step started, sorted by start."""
    replacements: list = field(default_factory=list)
    """{step, lane, error} of each rollout worker that died and was replaced."""
    checkpoints: list = field(default_factory=list)
    """Checkpoint directories written."""
    run_s: float = 0.0
    """Wall time of the steps (the actors' start excluded)."""
    placement: str = "default"
    """Where the actors went on the Ray nodes (:data:`~rlmperf_lite.distributed.PLACEMENTS`)."""
    nodes: list = field(default_factory=list)
    """The Ray node ids (hex) the run used, the driver's first; a node's position here is the
    ``node`` of :attr:`actors` and :attr:`node_losses`."""
    actors: list = field(default_factory=list)
    """{lane, node, node_id, ready_s} of the controller (lane ``controller``) and of every actor
    started, in start order, ``ready_s`` seconds after the first step started (negative:
    before); a replacement, or an actor started again by a resume, is a new entry."""
    node_losses: list = field(default_factory=list)
    """{step, node, node_id, lanes, recovery, resumed_from, noticed_s} of each node that died
    under the run: the lanes that ran on it; ``"replaced"`` (its rollout workers started again
    on other nodes, the step went on) or ``"resumed"`` (every actor started again from the
    checkpoint of step ``resumed_from``, 0 the run's start); ``noticed_s``, seconds after the
    first step started, is when the controller's call to one of them failed."""


def to_intervals(records: list, t0: float) -> list:
    """Workers' ``(pool, lane, phase, start, end, step)`` records (epoch seconds) -> Interval
    bars in seconds since ``t0``, sorted by start then lane."""
    bars = [Interval(pool, lane, phase, a - t0, b - t0, step)
            for pool, lane, phase, a, b, step in records]
    return sorted(bars, key=lambda iv: (iv.start_s, iv.lane))


def phase_times(step: int, records: list) -> dict:
    """The history's ``*_s`` of ``step``: for each key of
    :data:`~rlmperf_lite.distributed.PHASE_TIMES`, the wall time during which at least one actor
    ran one of its phases in that step (the union of their bars: gaps between them, e.g. a
    learner waiting for the others' gradients, are not counted; 0.0 if none ran)."""
    spans = {}
    for _, _, phase, a, b, s in records:
        if s == step and phase in PHASE_TIMES:
            spans.setdefault(PHASE_TIMES[phase], []).append((a, b))
    return {name: union_s(spans[name], -math.inf, math.inf) if name in spans else 0.0
            for name in dict.fromkeys(PHASE_TIMES.values())}


def phase_overlap_s(timeline: list, phases_a, phases_b, step: int,
                    step_b: int | None = None) -> float:
    """Seconds during which a phase of ``phases_a`` in ``step`` and one of ``phases_b`` in
    ``step_b`` (default: the same step) ran at the same time, on any actors: with A and B the
    unions of their :class:`~rlmperf_lite.sim.Interval` bars,
    ``len(A & B) = len(A) + len(B) - len(A | B)``. E.g. scoring, ``("ref_logp", "reward")``,
    against the proximal log-probs, ``("old_logp",)``; or step t's training phases against
    step t+1's ``("generate",)``.

    Raises:
        ValueError: naming ``phases_a`` or ``phases_b`` when not a non-empty tuple or list of
            phase names.
    """
    for name, phases in (("phases_a", phases_a), ("phases_b", phases_b)):
        if not isinstance(phases, (tuple, list)) or not phases:
            raise ValueError(f"{name} must be a non-empty tuple of phase names, got {phases!r}")
    sb = step if step_b is None else step_b
    a = [(iv.start_s, iv.end_s) for iv in timeline if iv.step == step and iv.phase in phases_a]
    b = [(iv.start_s, iv.end_s) for iv in timeline if iv.step == sb and iv.phase in phases_b]
    inf = math.inf
    return max(0.0, union_s(a, -inf, inf) + union_s(b, -inf, inf) - union_s(a + b, -inf, inf))


def timeline_nodes(result: RayRunResult) -> list:
    """The node (index into ``result.nodes``) of each bar of ``result.timeline``: that of the
    actor holding the bar's lane when the bar started (its latest entry in
    :attr:`RayRunResult.actors` ready by then).

    Raises:
        ValueError: naming ``result`` when a bar's lane has no actor entry.
    """
    by_lane = {}
    for actor in result.actors:
        by_lane.setdefault(actor["lane"], []).append(actor)
    nodes = []
    for iv in result.timeline:
        entries = by_lane.get(iv.lane)
        if not entries:
            raise ValueError(f"result has no actor entry for lane {iv.lane!r}: pass the "
                             f"RayRunResult of a run, whose actors list every lane")
        ready = [a for a in entries if a["ready_s"] <= iv.start_s] or entries[:1]
        nodes.append(ready[-1]["node"])
    return nodes
