"""Charts, tables and calculators of the toy RL system on Ray (book chapter "A mini RL system on
Ray"). They display what :mod:`rlmperf_lite.distributed` measures and
:func:`~rlmperf_lite.distributed.predict_run` predicts, and hold no formulas of their own: a run's
measured timeline next to the simulator's (drawn by
:func:`~rlmperf_lite.views.sim_views.timeline_chart`), the table of prediction errors, learning
curves, a live widget that runs Ray, and a no-kernel calculator of the simulator's prediction
evaluated over a grid when the book is built.

    from rlmperf_lite.views.ray_views import measured_vs_predicted_chart, error_table_html
    measured_vs_predicted_chart(run, compare_run(run, config), steps=range(5, 10))
"""
from __future__ import annotations

import html
import itertools

import altair as alt

from ..checks import check_choice, check_int
from ..distributed import MODES, RayRunResult
from ..distributed import (REFERENCE_COSTS, RunComparison, ToyCosts, compare_run,
                                   mode_config, predict_run)
from ..rl.common import RLResult
from .grid_charts import grid_chart
from .sim_views import PHASE_SCALE, step_set, timeline_chart, timeline_rows
from .widgets import error_html

__all__ = ["measured_rows", "measured_timeline_chart", "measured_vs_predicted_chart",
           "error_rows", "error_table_html", "curve_chart", "RAY_GRID", "STEP_TIME",
           "THROUGHPUT", "ray_grid", "ray_grid_chart", "ray_widget"]

_EXTRA = {"advantages": "#79706e", "grad_allreduce": "#d67195"}
_SCALE = alt.Scale(domain=list(PHASE_SCALE.domain) + list(_EXTRA),
                   range=list(PHASE_SCALE.range) + list(_EXTRA.values()))
_POOL_ORDER = ("colocated", "rollout", "ref_reward", "learner", "controller")


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


def _gantt(rows: list[dict], lanes: list, domain: tuple, title: str):
    return alt.Chart(alt.Data(values=rows)).mark_bar(stroke="white", strokeWidth=0.3).encode(
        x=alt.X("start_s:Q", title="seconds", scale=alt.Scale(domain=list(domain), nice=False)),
        x2="end_s:Q",
        y=alt.Y("lane:N", sort=lanes, title=None),
        color=alt.Color("phase:N", scale=_SCALE, title="phase"),
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
    return _gantt(rows, _lanes(rows), (x0, x1), title or f"measured on Ray: {result.mode}")


def measured_vs_predicted_chart(result: RayRunResult, comparison: RunComparison, *,
                                steps=None):
    """The measured timeline above the simulator's for the same steps
    (:func:`~rlmperf_lite.views.sim_views.timeline_chart`), both drawn over the same length of
    time from their first bar, so a bar's width means the same in both.

    Raises:
        ValueError: naming ``result``, ``comparison`` or ``steps``.
    """
    if not isinstance(comparison, RunComparison):
        raise ValueError(f"comparison must be a RunComparison (from compare_run), got "
                         f"{type(comparison).__name__}")
    rows = measured_rows(result, steps=steps)
    predicted = timeline_rows(comparison.predicted, steps=steps)
    if not rows or not predicted:
        raise ValueError(f"no bars for steps={steps!r}")
    m0, s0 = min(r["start_s"] for r in rows), min(r["start_s"] for r in predicted)
    span = max(max(r["end_s"] for r in rows) - m0, max(r["end_s"] for r in predicted) - s0)
    measured = measured_timeline_chart(
        result, steps=steps, span_s=span,
        title=f"measured on Ray ({comparison.predicted.system.name}): mean steady step "
              f"{comparison.measured_step_s * 1e3:.2f} ms")
    sim = timeline_chart(comparison.predicted, steps=steps, running=False,
                         title=f"predicted from the measured phase costs: step "
                               f"{comparison.predicted_step_s * 1e3:.2f} ms").encode(
        x=alt.X("start_s:Q", title="seconds", scale=alt.Scale(domain=[s0, s0 + span],
                                                              nice=False)))
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
    ``mode`` (a label), ``rollout_workers``, ``learners``, ``measure``, ``value``. Settings the
    library rejects give no rows."""
    grid = grid or RAY_GRID
    rows = []
    for (mode, k), W, L in itertools.product(grid["mode"], grid["rollout_workers"],
                                             grid["learners"]):
        try:
            r = predict_run(costs, mode, steps, staleness=k, num_rollout_workers=W,
                            num_learners=L)
        except ValueError:
            continue
        point = {"mode": _mode_label(mode, k), "rollout_workers": W, "learners": L}
        rows.append({**point, "measure": STEP_TIME, "value": r.step_time_s})
        rows.append({**point, "measure": THROUGHPUT,
                     "value": r.throughput_tokens_per_s_per_gpu})
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
def ray_widget(config, *, base_params: dict, runs: dict | None = None, mode: str = "sync",
               steps: int = 10, staleness: int = 2, num_rollout_workers: int = 1):
    """A live calculator that runs Ray: mode, staleness (for ``"async"``), steps and rollout
    workers drive :func:`~rlmperf_lite.distributed.train_ray` (from ``base_params``, with
    ``config``'s other settings) and :func:`~rlmperf_lite.distributed.compare_run`; it
    shows the error table and the measured timeline over the predicted one for the last three
    steps. ``runs``: finished runs to show instead of running again, keyed (mode, staleness,
    steps, rollout workers). Bad inputs show the library's ValueError message."""
    import ipywidgets as w
    from IPython.display import display

    from ..distributed import train_ray

    check_choice("mode", mode, MODES)
    check_int("steps", steps, 2)
    cache = dict(runs or {})
    controls = {"mode": w.Dropdown(options=list(MODES), value=mode, description="mode"),
                "staleness": w.IntText(value=staleness, description="k (async)"),
                "steps": w.IntText(value=steps, description="steps"),
                "workers": w.IntText(value=num_rollout_workers, description="rollout W")}
    message, out = w.HTML(), w.Output()

    def update(_=None):
        v = {k: c.value for k, c in controls.items()}
        try:
            check_int("steps", v["steps"], 2)     # compare_run skips the first step
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
