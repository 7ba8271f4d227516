"""The toy GRPO system on several Ray nodes, one of them lost in the middle of a run, and the
record of such a run (book section sec-ray-multinode).

:func:`run_with_node_loss` runs a :class:`~rlmperf_lite.distributed.Controller` with its actors
spread over the nodes of a :class:`~rlmperf_lite.distributed.LocalCluster` and removes the node
that runs a chosen actor once a chosen step is done. :func:`run_record` turns a run into plain
JSON, node ids replaced by node indices: ``bench/ray_multinode.py`` writes two such records to
:data:`RECORDED_RUNS`, which the book draws without starting Ray, and :func:`load_run_records`
reads them back.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from ..checks import check_int
from .controller import Controller
from .modes import spread_order
from .result import RayRunResult, timeline_nodes
from .runtime import alive_node_ids

__all__ = ["run_with_node_loss", "run_record", "RECORD_KEYS", "RECORDED_RUNS",
           "load_run_records"]

RECORDED_RUNS = Path(__file__).parent / "data" / "multinode_runs.json"
"""Two runs on a two-node :class:`~rlmperf_lite.distributed.LocalCluster` that each lost node 1,
written by ``bench/ray_multinode.py``: ``"replaced"`` (it ran the rollout worker) and
``"resumed"`` (it ran a learner); read with :func:`load_run_records`."""
RECORD_KEYS = ("mode", "placement", "config", "num_nodes", "actors", "node_losses",
               "replacements", "killed", "history", "timeline", "run_s")
"""The keys of a :func:`run_record`, in order."""


def run_with_node_loss(cluster, config, *, mode: str = "sync", kill_lane: str = "rollout/r0",
                       after_step: int = 0, on_step=None,
                       **kwargs) -> tuple[RayRunResult, dict]:
    """Run ``config`` in ``mode`` with ``placement="spread"`` on ``cluster`` (a
    :class:`~rlmperf_lite.distributed.LocalCluster` this process has joined, with
    :func:`~rlmperf_lite.distributed.init_ray`), ``kwargs`` going to the Controller, and
    remove the node running ``kill_lane`` once step ``after_step`` is done (after
    ``on_step(row)``, which sees each step once, as the Controller's). Returns the
    :class:`~rlmperf_lite.distributed.RayRunResult` and {node_id, lane, after_step, at_s
    (seconds after the first step started)} of the node removed.

    Raises:
        ValueError: naming ``kill_lane`` (no such actor, or "spread" puts it on the driver's
            node, the head, whose loss ends the cluster), ``after_step`` (not a step of the run
            before its last), ``on_step``, or a Controller argument; all before an actor starts.
    """
    check_int("after_step", after_step, 0)
    if on_step is not None and not callable(on_step):
        raise ValueError(f"on_step must be None or a callable taking the step's metrics, got "
                         f"{on_step!r}")
    if not after_step < config.steps - 1:
        raise ValueError(f"after_step={after_step} must be a step of the run before its last "
                         f"(config.steps={config.steps})")
    lanes = spread_order(mode, kwargs.get("num_rollout_workers", 1),
                         kwargs.get("num_learners", 1))
    if kill_lane not in lanes:
        raise ValueError(f"kill_lane={kill_lane!r} is not an actor of this run; choose one of "
                         f"{lanes}")
    if lanes.index(kill_lane) % len(alive_node_ids()) == 0:    # dealt to the driver's node
        raise ValueError(f"kill_lane={kill_lane!r} runs on the head node, whose loss ends the "
                         f"cluster; choose an actor on another node: "
                         f"{[x for i, x in enumerate(lanes) if i % len(alive_node_ids())]}")
    ctrl = Controller(config, mode=mode, placement="spread", **kwargs)
    killed = {}

    def kill(row):
        if on_step is not None:
            on_step(row)
        if row["step"] == after_step and not killed:
            node_id = ctrl.actor_nodes[kill_lane]
            cluster.remove_node(cluster.node_ids.index(node_id))
            killed.update(node_id=node_id, lane=kill_lane, after_step=after_step,
                          at_s=time.time() - ctrl.started_s)
    try:
        result = ctrl.run(on_step=kill)
    finally:
        ctrl.shutdown()
    return result, killed


def _plain(value):
    """A history value as JSON: floats finite or None, numpy scalars as Python numbers."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    value = float(value)
    return value if math.isfinite(value) else None


def run_record(result: RayRunResult, killed: dict | None = None) -> dict:
    """``result`` as plain JSON (keys :data:`RECORD_KEYS`): node ids replaced by node indices,
    every bar of the timeline with its node (:func:`~rlmperf_lite.distributed.timeline_nodes`),
    the history with every metric, and ``killed``, the node removed by
    :func:`run_with_node_loss` ({} if none) with ``recovered_s``, when the first actor started
    after it was ready (None if none was)."""
    index = {node: k for k, node in enumerate(result.nodes)}
    if killed:
        later = [a["ready_s"] for a in result.actors if a["ready_s"] > killed["at_s"]]
        killed = {**{k: v for k, v in killed.items() if k != "node_id"},
                  "node": index[killed["node_id"]], "recovered_s": min(later, default=None)}
    c = result.config
    bars = [{"pool": iv.pool, "lane": iv.lane, "phase": iv.phase, "start_s": iv.start_s,
             "end_s": iv.end_s, "step": iv.step, "node": node}
            for iv, node in zip(result.timeline, timeline_nodes(result))]
    return {
        "mode": result.mode, "placement": result.placement,
        "config": {"steps": c.steps, "num_prompts": c.num_prompts, "group_size": c.group_size,
                   "staleness": c.staleness, "kl_coef": c.kl_coef, "seed": c.seed},
        "num_nodes": len(result.nodes),
        "actors": [{"lane": a["lane"], "node": a["node"], "ready_s": a["ready_s"]}
                   for a in result.actors],
        "node_losses": [{k: e[k] for k in ("step", "node", "lanes", "recovery",
                                           "resumed_from", "noticed_s")}
                        for e in result.node_losses],
        "replacements": [{"step": r["step"], "lane": r["lane"], "error": r["error"],
                          "node": index.get(r["node_id"]), "new_node": index.get(
                              r["new_node_id"])} for r in result.replacements],
        "killed": dict(killed or {}),
        "history": [{k: _plain(v) for k, v in row.items()} for row in result.history],
        "timeline": bars, "run_s": result.run_s}


def load_run_records(path=RECORDED_RUNS) -> dict:
    """The file of recorded runs at ``path``: {"machine": a note on where they ran, "runs":
    {name: :func:`run_record`}, "checks": {name: {what was compared: bool}}}.

    Raises:
        ValueError: naming ``path`` when it is missing, not JSON, or lacks a key.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"path={str(path)!r} is not a readable JSON file of recorded runs "
                         f"({err}); write it with bench/ray_multinode.py") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) and data[k]
                                             for k in ("runs", "checks")):
        raise ValueError(f"path={str(path)!r} lacks its 'runs' or 'checks'; write it with "
                         f"bench/ray_multinode.py")
    for name, record in data["runs"].items():
        missing = [k for k in RECORD_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            raise ValueError(f"path={str(path)!r}: run {name!r} lacks {missing}; write it "
                             f"again with bench/ray_multinode.py")
    return data
