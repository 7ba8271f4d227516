"""Charts and tables of the toy RL system on Ray (book chapter "A mini RL system on
Ray"). They display what :mod:`rlmperf_lite.distributed` measures and
:func:`~rlmperf_lite.distributed.predict_run` predicts, and hold no formulas of their own: a run's
measured timeline next to the simulator's (its bars from
:func:`~rlmperf_lite.book.sim_views.timeline_rows`, drawn on one lane per actor as the measured
one), the table of prediction errors and learning curves. The chapter's calculators are in
:mod:`rlmperf_lite.book.ray_calculators`.

    from rlmperf_lite.book.ray_views import measured_vs_predicted_chart, error_table_html
    measured_vs_predicted_chart(run, compare_run(run, config), steps=range(5, 10))
"""
from __future__ import annotations

import html

import altair as alt

from ..distributed import RayRunResult, RunComparison
from ..rl.common import RLResult
from .sim_views import PHASE_SCALE, step_set, timeline_rows

__all__ = ["measured_rows", "measured_timeline_chart", "measured_vs_predicted_chart",
           "node_timeline_chart", "error_rows", "error_table_html", "curve_chart"]

_EXTRA = {"advantages": "#333333", "grad_allreduce": "#d67195"}
"""Colours of the measured phases the simulator has no bar for: the controller's advantages
(dark grey, far from the weight sync's brown) and the learners' gradient exchange."""
_COLOURS = {**dict(zip(PHASE_SCALE.domain, PHASE_SCALE.range)), **_EXTRA}
_OTHER = "#888888"                               # a phase of neither (a hand-made timeline)
_POOL_ORDER = ("colocated", "rollout", "ref_reward", "learner", "controller")
_MAX_LANES = 8                                   # device lanes drawn per pool at most


def _phase_scale(phases) -> alt.Scale:
    """The colour scale of the phases drawn, and only those (the legend lists no phase the
    chart lacks), each in its colour of :data:`~rlmperf_lite.book.sim_views.PHASE_SCALE`."""
    domain = [p for p in _COLOURS if p in phases] + sorted(set(phases) - set(_COLOURS))
    return alt.Scale(domain=domain, range=[_COLOURS.get(p, _OTHER) for p in domain])


def _check_run(result) -> None:
    if not isinstance(result, RayRunResult) or not result.timeline:
        raise ValueError(f"result must be a RayRunResult with a timeline (from "
                         f"rlmperf_lite.distributed.train_ray), got {type(result).__name__}")


# ---- timelines ---------------------------------------------------------------------------------
def measured_rows(result: RayRunResult, *, steps=None) -> list[dict]:
    """The measured timeline's bars as dicts ``lane``, ``pool``, ``phase``, ``step``,
    ``start_s``, ``end_s``; ``steps`` None (all), an int or an iterable of steps.

    Raises:
        ValueError: naming ``result`` or ``steps``.
    """
    _check_run(result)
    keep = step_set(steps)
    return [{"lane": iv.lane, "pool": iv.pool, "phase": iv.phase, "step": iv.step,
             "start_s": iv.start_s, "end_s": iv.end_s}
            for iv in result.timeline if keep is None or iv.step in keep]


def _gantt(rows: list[dict], lanes: list, domain: tuple, title: str, scale: alt.Scale):
    return alt.Chart(alt.Data(values=rows)).mark_bar(stroke="white", strokeWidth=0.3).encode(
        x=alt.X("start_s:Q", title="seconds", scale=alt.Scale(domain=list(domain), nice=False)),
        x2="end_s:Q",
        y=alt.Y("lane:N", sort=lanes, title=None),
        color=alt.Color("phase:N", scale=scale, title="phase"),
        tooltip=["lane:N", "phase:N", "step:Q", alt.Tooltip("start_s:Q", format=".4f"),
                 alt.Tooltip("end_s:Q", format=".4f")],
    ).properties(width=560, height=16 * len(lanes) + 8, title=title)


def _lanes(rows: list[dict]) -> list:
    lanes = sorted({(r["pool"], r["lane"]) for r in rows},
                   key=lambda pl: (_POOL_ORDER.index(pl[0]) if pl[0] in _POOL_ORDER else 99,
                                   pl[1]))
    return [lane for _, lane in lanes]


def measured_timeline_chart(result: RayRunResult, *, steps=None, title: str | None = None,
                            span_s: float | None = None):
    """A Gantt chart of a Ray run's measured timeline (one lane per actor, and the
    controller's); ``span_s`` fixes the x range to that many seconds from the first bar.

    Raises:
        ValueError: naming ``result`` or ``steps``, or when the steps chosen have no bars.
    """
    rows = measured_rows(result, steps=steps)
    if not rows:
        raise ValueError(f"no bars for steps={steps!r}")
    x0 = min(r["start_s"] for r in rows)
    x1 = x0 + span_s if span_s else max(r["end_s"] for r in rows)
    return _gantt(rows, _lanes(rows), (x0, x1), title or f"measured on Ray: {result.mode}",
                  _phase_scale({r["phase"] for r in rows}))


def node_timeline_chart(record: dict, *, title: str | None = None):
    """A Gantt chart of a run recorded on several nodes
    (:func:`~rlmperf_lite.distributed.run_record`): one row per node and actor, ``node k ·
    lane``, grouped by node, bars coloured by phase. A run that lost a node is drawn in two
    panels, each on its own time axis (the restart between them can last longer than all the
    steps): until the actors started after the loss were ready, with a red rule where the node
    was removed, and from then on (``killed["recovered_s"]`` of the record).

    Raises:
        ValueError: naming ``record`` when it is not a run record with a timeline.
    """
    if not isinstance(record, dict) or not record.get("timeline"):
        raise ValueError("record must be a run record with a timeline (from "
                         "rlmperf_lite.distributed.run_record or load_run_records)")
    order = {lane: k for k, lane in enumerate(_lanes(record["timeline"]))}
    rows = [{**bar, "row": f"node {bar['node']} · {bar['lane']}"} for bar in record["timeline"]]
    lanes = [row for *_, row in sorted({(r["node"], order[r["lane"]], r["row"]) for r in rows})]
    scale = _phase_scale({r["phase"] for r in rows})
    name = title or f"{record['mode']} on {record['num_nodes']} nodes"
    killed = record.get("killed") or {}
    split = killed.get("recovered_s")
    if split is None:
        return _node_panel(rows, lanes, name, scale)
    before = [r for r in rows if r["start_s"] < split]
    after = [r for r in rows if r["start_s"] >= split]
    mark = alt.Data(values=[{"at_s": killed["at_s"], "label": f"node {killed['node']} removed"}])
    rule = alt.Chart(mark).mark_rule(color="#c0392b", strokeWidth=2).encode(x="at_s:Q")
    text = alt.Chart(mark).mark_text(color="#c0392b", align="right", dx=-4, y=4,
                                     baseline="top").encode(x="at_s:Q", text="label:N")
    top = alt.layer(_node_panel(before, lanes, f"{name}: until node {killed['node']} was lost",
                                scale), rule, text)
    bottom = _node_panel(after, lanes, f"after the recovery: the actors started again were "
                                       f"ready at {split:.2f} s", scale)
    return alt.vconcat(top, bottom).resolve_scale(x="independent", color="shared")


def _node_panel(rows: list[dict], lanes: list, title: str, scale: alt.Scale):
    domain = (min(r["start_s"] for r in rows), max(r["end_s"] for r in rows))
    return _gantt(rows, lanes, domain, title, scale).encode(
        y=alt.Y("row:N", sort=lanes, title=None))


def _predicted_rows(comparison: RunComparison, steps) -> list[dict]:
    """The simulated timeline's bars (:func:`~rlmperf_lite.book.sim_views.timeline_rows`) on
    the measured timeline's lanes, one per actor: the simulator draws a pool's phases after
    generation and its weight syncs on one lane named after the pool (the phase's time is its
    device-seconds split evenly over the pool's devices, so every device runs the whole bar),
    and generation on the replica lanes ``pool/rK``; here each pool-lane bar is drawn on every
    device lane ``pool/r0`` ... (the rollout pool's are its replica lanes), as the Ray actors
    ``rollout/r0``, ``ref_reward/r0``, ``learner/r0`` ... record them. Presentation only: the
    bars' times are the simulator's."""
    result = comparison.predicted
    system = result.system
    rollout_pool = system.placement["rollout"]
    rows = []
    for row in timeline_rows(result, max_replicas=_MAX_LANES, steps=steps):
        if row["lane"] != row["pool"]:
            rows.append(row)
            continue
        n = system.replicas if row["pool"] == rollout_pool else system.pools.get(row["pool"], 1)
        rows += [{**row, "lane": f"{row['pool']}/r{i}"} for i in range(min(n, _MAX_LANES))]
    return rows


def _check_same_run(result: RayRunResult, comparison: RunComparison) -> None:
    """``comparison`` is :func:`compare_run` of ``result``: same mode, steps and actors."""
    actors = {}
    for iv in result.timeline:
        if iv.phase in ("generate", "actor_update"):
            actors.setdefault(iv.phase, set()).add(iv.lane)
    run = (result.mode, len(result.history), len(actors.get("generate", ())),
           len(actors.get("actor_update", ())))
    other = (comparison.mode, comparison.predicted.steps, comparison.num_rollout_workers,
             comparison.num_learners)
    if run != other:
        raise ValueError(f"comparison is of another run: (mode, steps, rollout workers, "
                         f"learners) {other} against result's {run}; pass "
                         f"compare_run(result)")


def measured_vs_predicted_chart(result: RayRunResult, comparison: RunComparison, *,
                                steps=None):
    """The measured timeline above the simulator's for the same steps
    (:func:`~rlmperf_lite.book.sim_views.timeline_chart`), both drawn over the same length of
    time from their first bar, so a bar's width means the same in both.

    The predicted bars are drawn on lanes named as the measured ones, one per actor: the
    simulator's pool lane (a pool's phases after generation and its weight syncs, each device of
    the pool busy for the whole bar) is drawn on every device lane ``pool/r0``, ``pool/r1`` ...
    beside the replicas' generation, so one rollout worker is one lane ``rollout/r0`` in both
    charts. The legend lists only the phases drawn.

    Raises:
        ValueError: naming ``result``, ``comparison`` or ``steps``; ``comparison`` when it is
            not :func:`~rlmperf_lite.distributed.compare_run` of ``result`` (another mode,
            number of steps, rollout workers or learners).
    """
    _check_run(result)
    if not isinstance(comparison, RunComparison):
        raise ValueError(f"comparison must be a RunComparison (from compare_run), got "
                         f"{type(comparison).__name__}")
    _check_same_run(result, comparison)
    rows = measured_rows(result, steps=steps)
    predicted = _predicted_rows(comparison, steps)
    if not rows or not predicted:
        raise ValueError(f"no bars for steps={steps!r}; the run has steps 0 to "
                         f"{len(result.history) - 1}")
    m0, s0 = min(r["start_s"] for r in rows), min(r["start_s"] for r in predicted)
    span = max(max(r["end_s"] for r in rows) - m0, max(r["end_s"] for r in predicted) - s0)
    scale = _phase_scale({r["phase"] for r in rows + predicted})
    measured = _gantt(rows, _lanes(rows), (m0, m0 + span),
                      f"measured on Ray ({comparison.predicted.system.name}): mean steady step "
                      f"{comparison.measured_step_s * 1e3:.2f} ms", scale)
    sim = _gantt(predicted, _lanes(predicted), (s0, s0 + span),
                 f"predicted from the measured phase costs: step "
                 f"{comparison.predicted_step_s * 1e3:.2f} ms", scale)
    return alt.vconcat(measured, sim).resolve_scale(x="independent", color="shared")


# ---- errors ------------------------------------------------------------------------------------
def error_rows(comparisons: dict) -> list[dict]:
    """``comparisons``: {name: RunComparison}. One dict per run: ``run``, ``measured_step_s``,
    ``predicted_step_s``, ``step_error``, ``unexplained_s``, ``compute`` {pool: (measured,
    predicted)}, read from each comparison.

    Raises:
        ValueError: naming ``comparisons``.
    """
    if not isinstance(comparisons, dict) or not comparisons or not all(
            isinstance(c, RunComparison) for c in comparisons.values()):
        raise ValueError("comparisons must be a non-empty dict {name: RunComparison}")
    return [{"run": name, "measured_step_s": c.measured_step_s,
             "predicted_step_s": c.predicted_step_s, "step_error": c.step_error,
             "unexplained_s": c.unexplained_s,
             "compute": {p.pool: (p.measured, p.predicted) for p in c.pools}}
            for name, c in comparisons.items()]


def error_table_html(comparisons: dict) -> str:
    """:func:`error_rows` as an HTML table (milliseconds, errors in %)."""
    body = "".join(
        f"<tr><td>{html.escape(r['run'])}</td><td>{r['measured_step_s'] * 1e3:.2f}</td>"
        f"<td>{r['predicted_step_s'] * 1e3:.2f}</td><td>{r['step_error']:+.0%}</td>"
        f"<td>{r['unexplained_s'] * 1e3:.2f}</td><td>"
        + ", ".join(f"{html.escape(p)} {m:.0%} / {q:.0%}" for p, (m, q) in r["compute"].items())
        + "</td></tr>" for r in error_rows(comparisons))
    return ("<table><tr><th>run</th><th>measured step (ms)</th><th>predicted (ms)</th>"
            "<th>error</th><th>unexplained (ms)</th><th>compute share, measured / predicted"
            f"</th></tr>{body}</table>")


def curve_chart(runs: dict, *, metric: str = "reward_mean", title: str | None = None):
    """``runs``: {name: RLResult}. ``metric`` per step, one line per run (dashed after the
    first, so equal curves show as one line with dashes on it).

    Raises:
        ValueError: naming ``runs`` or ``metric``.
    """
    if not isinstance(runs, dict) or not runs or not all(
            isinstance(r, RLResult) and r.history for r in runs.values()):
        raise ValueError("runs must be a non-empty dict {name: RLResult with a history}")
    rows = []
    for i, (name, run) in enumerate(runs.items()):
        if metric not in run.history[0]:
            raise ValueError(f"metric {metric!r} is not in the history of {name!r}")
        rows += [{"run": name, "dash": i > 0, "step": h["step"], "value": float(h[metric])}
                 for h in run.history]
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("step:Q", title="step"), y=alt.Y("value:Q", title=metric,
                                                 scale=alt.Scale(zero=False)),
        color=alt.Color("run:N", sort=list(runs), title=None),
        strokeDash=alt.StrokeDash("dash:N", legend=None),
        tooltip=["run:N", "step:Q", alt.Tooltip("value:Q", format=".4f")],
    ).properties(width=440, height=200, title=title or f"{metric} per step")
