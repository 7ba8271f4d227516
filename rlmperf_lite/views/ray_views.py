"""Charts, tables and calculators of the toy RL system on Ray (book chapter "A mini RL system on
Ray"). They display what :mod:`rlmperf_lite.distributed` measures and
:func:`~rlmperf_lite.distributed.predict_run` predicts, and hold no formulas of their own: a run's
measured timeline next to the simulator's (its bars from
:func:`~rlmperf_lite.views.sim_views.timeline_rows`, drawn on one lane per actor as the measured
one), the table of prediction errors, learning curves, a live widget that runs Ray, and a
no-kernel calculator of the simulator's prediction evaluated over a grid when the book is built.

    from rlmperf_lite.views.ray_views import measured_vs_predicted_chart, error_table_html
    measured_vs_predicted_chart(run, compare_run(run, config), steps=range(5, 10))
"""
from __future__ import annotations

import html
import itertools

import altair as alt

from ..checks import check_choice, check_int
from ..distributed import (MODES, REFERENCE_COSTS, RayRunResult, RunComparison, ToyCosts,
                           check_layout, compare_run, mode_config, mode_staleness, predict_run)
from ..rl.common import RLResult
from .grid_charts import grid_chart
from .sim_views import PHASE_SCALE, step_set, timeline_rows
from .widgets import error_html

__all__ = ["measured_rows", "measured_timeline_chart", "measured_vs_predicted_chart",
           "error_rows", "error_table_html", "curve_chart", "RAY_GRID", "STEP_TIME",
           "THROUGHPUT", "ray_grid", "ray_grid_chart", "WIDGET_MAX_STEPS", "ray_widget"]

_EXTRA = {"advantages": "#333333", "grad_allreduce": "#d67195"}
"""Colours of the measured phases the simulator has no bar for: the controller's advantages
(dark grey, far from the weight sync's brown) and the learners' gradient exchange."""
_COLOURS = {**dict(zip(PHASE_SCALE.domain, PHASE_SCALE.range)), **_EXTRA}
_OTHER = "#888888"                               # a phase of neither (a hand-made timeline)
_POOL_ORDER = ("colocated", "rollout", "ref_reward", "learner", "controller")
_MAX_LANES = 8                                   # device lanes drawn per pool at most


def _phase_scale(phases) -> alt.Scale:
    """The colour scale of the phases drawn, and only those (the legend lists no phase the
    chart lacks), each in its colour of :data:`~rlmperf_lite.views.sim_views.PHASE_SCALE`."""
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


def _predicted_rows(comparison: RunComparison, steps) -> list[dict]:
    """The simulated timeline's bars (:func:`~rlmperf_lite.views.sim_views.timeline_rows`) on
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
    (:func:`~rlmperf_lite.views.sim_views.timeline_chart`), both drawn over the same length of
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


# ---- no-kernel calculator ----------------------------------------------------------------------
STEP_TIME, THROUGHPUT = "step time (s)", "throughput (tokens/s per device)"
RAY_GRID = {"mode": (("colocated", None), ("sync", None), ("one_step_off", None), ("async", 2),
                     ("async", 4)),
            "rollout_workers": (1, 2, 4), "learners": (1, 2)}
"""The grid of :func:`ray_grid`: (mode, staleness) pairs, rollout workers W and learners L
(colocated only where W = L, as the controller requires)."""


def _mode_label(mode: str, staleness) -> str:
    return mode if staleness is None else f"{mode} k={staleness}"


def ray_grid(costs: ToyCosts = REFERENCE_COSTS, grid: dict | None = None, *,
             steps: int = 12) -> list[dict]:
    """:func:`~rlmperf_lite.distributed.predict_run` of the toy with ``costs`` over the
    grid (``RAY_GRID``): one row per setting and measure (``STEP_TIME``, ``THROUGHPUT``) with
    ``mode`` (a label), ``rollout_workers``, ``learners``, ``measure``, ``value``. Layouts
    the controller cannot run (colocated with W != L, W or L more than the B prompts) give no
    rows; every other setting must be valid.

    Raises:
        ValueError: naming ``costs``, ``steps`` or ``grid`` (not a dict of RAY_GRID's keys,
            an empty or bad entry, a (mode, staleness) pair the library refuses, or no point a
            possible layout).
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts (e.g. REFERENCE_COSTS or measured_costs of "
                         f"a run), got {type(costs).__name__}")
    check_int("steps", steps, 1)
    grid = RAY_GRID if grid is None else grid
    if not isinstance(grid, dict) or set(grid) != set(RAY_GRID):
        keys = sorted(grid) if isinstance(grid, dict) else type(grid).__name__
        raise ValueError(f"grid must be a dict with exactly the keys {sorted(RAY_GRID)} (as "
                         f"RAY_GRID), got {keys}")
    for key in RAY_GRID:
        if not isinstance(grid[key], (tuple, list)) or not grid[key]:
            raise ValueError(f"grid[{key!r}] must be a non-empty tuple or list, got "
                             f"{grid[key]!r}")
    for pair in grid["mode"]:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"grid['mode'] holds (mode, staleness) pairs, got {pair!r}")
        try:
            mode_staleness(*pair)
        except ValueError as err:
            raise ValueError(f"grid['mode'] entry {tuple(pair)!r}: {err}") from None
    for key in ("rollout_workers", "learners"):
        for n in grid[key]:
            check_int(f"grid[{key!r}] entry", n, 1)
    rows = []
    for (mode, k), W, L in itertools.product(grid["mode"], grid["rollout_workers"],
                                             grid["learners"]):
        try:
            check_layout(mode, costs.num_prompts, W, L)
        except ValueError:                     # a layout the controller cannot run: no bar
            continue
        r = predict_run(costs, mode, steps, staleness=k, num_rollout_workers=W, num_learners=L)
        point = {"mode": _mode_label(mode, k), "rollout_workers": W, "learners": L}
        rows.append({**point, "measure": STEP_TIME, "value": r.step_time_s})
        rows.append({**point, "measure": THROUGHPUT,
                     "value": r.throughput_tokens_per_s_per_gpu})
    if not rows:
        raise ValueError(f"no point of grid is a layout the controller can run (colocated needs "
                         f"rollout_workers = learners; both at most num_prompts="
                         f"{costs.num_prompts}); got {grid!r}")
    return rows


def ray_grid_chart(rows: list[dict], *, start: dict | None = None):
    """Bars of the predicted measure per mode, for the rollout workers, learners and measure
    chosen with the page's own dropdowns (no kernel needed); ``rows`` from :func:`ray_grid`."""
    return grid_chart(rows, controls=["rollout_workers", "learners", "measure"],
                      category="mode", value="value",
                      value_title="predicted (the measure chosen)",
                      title="The toy on Ray, predicted from per-phase costs (no kernel needed)",
                      start=start)


# ---- live widget -------------------------------------------------------------------------------
WIDGET_MAX_STEPS = 50
"""The most steps :func:`ray_widget` runs (a few minutes on a laptop; the cell blocks while Ray
runs), so a typo does not start an hours-long run."""


def _check_widget_steps(steps) -> None:
    check_int("steps", steps, 2)                  # compare_run: a warm-up step and a steady one
    if steps > WIDGET_MAX_STEPS:
        raise ValueError(f"steps={steps} is more than the widget runs (at most "
                         f"{WIDGET_MAX_STEPS}, as the cell blocks while Ray runs); call "
                         f"train_ray and compare_run for a longer run")


def ray_widget(config, *, base_params: dict, runs: dict | None = None, mode: str = "sync",
               steps: int = 10, staleness: int = 2, num_rollout_workers: int = 1):
    """A live calculator that runs Ray: mode, staleness (for ``"async"``), steps and rollout
    workers drive :func:`~rlmperf_lite.distributed.train_ray` (from ``base_params``, with
    ``config``'s other settings) and :func:`~rlmperf_lite.distributed.compare_run`; it
    shows the error table and the measured timeline over the predicted one for the last three
    steps. ``runs``: finished runs to show instead of running again, keyed (mode, staleness,
    steps, rollout workers). ``steps``: 2 to :data:`WIDGET_MAX_STEPS`. Bad inputs show the
    library's ValueError message.

    Raises:
        ValueError: naming ``mode`` or ``steps`` (the starting values).
    """
    import ipywidgets as w
    from IPython.display import display

    from ..distributed import train_ray

    check_choice("mode", mode, MODES)
    _check_widget_steps(steps)
    cache = dict(runs or {})
    controls = {"mode": w.Dropdown(options=list(MODES), value=mode, description="mode"),
                "staleness": w.IntText(value=staleness, description="k (async)"),
                "steps": w.IntText(value=steps, description="steps"),
                "workers": w.IntText(value=num_rollout_workers, description="rollout W")}
    message, out = w.HTML(), w.Output()

    def update(_=None):
        v = {k: c.value for k, c in controls.items()}
        try:
            _check_widget_steps(v["steps"])
            cfg = mode_config(config, v["mode"], steps=v["steps"],
                              staleness=v["staleness"] if v["mode"] == "async" else None)
            key = (v["mode"], cfg.staleness, v["steps"], v["workers"])
            if key not in cache:
                message.value = "running on Ray ..."
                W = v["workers"]
                cache[key] = train_ray(cfg, mode=v["mode"], base_params=base_params,
                                       num_rollout_workers=W,
                                       num_learners=W if v["mode"] == "colocated" else 1)
            comparison = compare_run(cache[key], cfg)
        except ValueError as err:
            message.value = error_html(err)
            out.clear_output()
            return
        message.value = error_table_html({key[0]: comparison})
        with out:
            out.clear_output(wait=True)
            display(measured_vs_predicted_chart(cache[key], comparison,
                                                steps=range(max(0, v["steps"] - 3), v["steps"])))

    for c in controls.values():
        c.observe(update, names="value")
    update()
    return w.VBox([w.HBox(list(controls.values())), message, out])
