"""Altair charts of training histories (one run or many), sweeps and work-depth results."""
from __future__ import annotations

import altair as alt

from ..checks import check_choice, check_int
from ..rl.common import RLResult

PHASE_TIMES = ("rollout_s", "ref_logps_s", "reward_s", "advantages_s", "update_s")


OBJECTIVE_ORDER = ("naive", "decoupled", "behaviour")
"""The objectives of :func:`~rlmperf_lite.rl.train_async_grpo`, in the order the charts use."""


def check_runs(runs) -> None:
    """ValueError unless ``runs`` is a non-empty {(k, objective, seed): RLResult} of runs with a
    history (from :func:`~rlmperf_lite.rl.train_async_grpo`), objectives in
    :data:`~rlmperf_lite.book.charts.OBJECTIVE_ORDER`."""
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {(k, objective, seed): RLResult}")
    for key, run in runs.items():
        if not (isinstance(key, tuple) and len(key) == 3):
            raise ValueError(f"runs keys must be (k, objective, seed) tuples, got {key!r}")
        check_choice("objective", key[1], OBJECTIVE_ORDER)
        if not isinstance(run, RLResult) or not run.history:
            raise ValueError(f"runs[{key!r}] must be an RLResult with a history (from "
                             f"train_async_grpo), got {type(run).__name__}")


def learning_rows(runs: dict, metric: str = "reward_mean") -> list[dict]:
    """``runs``: {(k, objective, seed): RLResult}. One row per run and step: ``k``,
    ``objective``, ``seed``, ``step`` and ``value`` = the history's ``metric``.

    Raises:
        ValueError: naming ``runs`` or ``metric`` (not in the histories).
    """
    check_runs(runs)
    rows = []
    for (k, objective, seed), run in runs.items():
        if metric not in run.history[0]:
            raise ValueError(f"metric {metric!r} is not in the history; it has "
                             f"{sorted(run.history[0])}")
        rows += [{"k": int(k), "objective": objective, "seed": int(seed), "step": int(h["step"]),
                  "value": float(h[metric])} for h in run.history]
    return rows


def learning_curve_chart(runs, *, metric: str = "reward_mean", window: int | None = None,
                         seed: int | None = None, title: str | None = None):
    """Learning curves, of one run or of many:

    - ``runs`` a history (the rows of a training loop): the batch's ``metric`` per step
      (points) and its ``window``-step rolling mean (line; default window 20);
    - ``runs`` a dict {(k, objective, seed): RLResult}: the ``window``-step rolling mean of
      ``metric`` (:func:`~rlmperf_lite.book.charts.learning_rows`; default window 15)
      against the step, one panel per objective, one line per staleness bound k; ``seed``:
      only that seed's runs (default: the first seed of ``runs``).

    Raises:
        ValueError: naming ``runs``, ``metric``, ``window`` or ``seed``.
    """
    if isinstance(runs, dict):
        return _runs_curves(runs, metric, 15 if window is None else window, seed, title)
    return _history_curve(runs, metric, 20 if window is None else window,
                          title or "GRPO learning curve")


def _history_curve(history, metric: str, window: int, title: str):
    """One run's ``metric`` per step (points) and its rolling mean (line)."""
    check_int("window", window, 1)
    if not isinstance(history, (list, tuple)) or not history or metric not in history[0]:
        raise ValueError(f"runs must be a history (a non-empty list of rows with {metric!r}) "
                         f"or a dict {{(k, objective, seed): RLResult}}")
    rows = [{"step": h["step"], metric: h[metric]} for h in history]
    reward = metric == "reward_mean"
    base = alt.Chart(alt.Data(values=rows)).encode(x=alt.X("step:Q", title="step"))
    points = base.mark_circle(size=12, opacity=0.3).encode(
        y=alt.Y(f"{metric}:Q", title="batch mean reward" if reward else f"batch {metric}",
                scale=alt.Scale(domain=[0, 1]) if reward else alt.Scale(zero=False)))
    line = base.transform_window(
        rolling=f"mean({metric})", frame=[-window + 1, 0]).mark_line(color="firebrick").encode(
        y="rolling:Q")
    return (points + line).properties(width=520, height=240, title=title)


def _runs_curves(runs: dict, metric: str, window: int, seed, title):
    """Rolling means of many runs' ``metric``, a panel per objective, a line per k."""
    check_int("window", window, 1)
    rows = learning_rows(runs, metric)
    seeds = list(dict.fromkeys(r["seed"] for r in rows))
    seed = seeds[0] if seed is None else seed
    if seed not in seeds:
        raise ValueError(f"seed must be one of {seeds}, got {seed!r}")
    rows = [r for r in rows if r["seed"] == seed]
    objectives = [o for o in OBJECTIVE_ORDER if any(r["objective"] == o for r in rows)]
    return alt.Chart(alt.Data(values=rows)).transform_window(
        rolling="mean(value)", frame=[-window + 1, 0], groupby=["k", "objective"],
        sort=[alt.SortField("step")]).mark_line().encode(
        x=alt.X("step:Q", title="step"),
        y=alt.Y("rolling:Q", title=f"{metric} ({window}-step mean)"),
        color=alt.Color("k:O", title="staleness k", scale=alt.Scale(scheme="viridis")),
        tooltip=["objective:N", "k:O", "step:Q", alt.Tooltip("rolling:Q", format=".3f")],
    ).properties(width=230, height=180).facet(
        column=alt.Column("objective:N", sort=objectives, title=None)).properties(
        title=title or f"Asynchronous GRPO on the toy task, seed {seed}")


def phase_time_chart(history: list, *,
                     title: str = "Where a GRPO run's time goes (measured, summed over steps)"):
    """Total measured seconds per phase over a run, as horizontal bars."""
    rows = [{"phase": k.removesuffix("_s"), "seconds": sum(h[k] for h in history)}
            for k in PHASE_TIMES if k in history[0]]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("phase:N", sort=None, title=None),
        x=alt.X("seconds:Q", title="total wall time (s)"),
        tooltip=["phase:N", alt.Tooltip("seconds:Q", format=".3f")],
    ).properties(width=420, height=150, title=title)


def workdepth_chart(results: dict, *, title: str = "Share of work and depth per phase"):
    """``results``: {label: WorkDepth}. Bars of each phase's share of work W and depth 𝒟."""
    rows = []
    for label, wd in results.items():
        for p in wd.phases:
            rows.append({"model": label, "phase": p.name, "measure": "work W",
                         "share": p.work_flops / wd.work_flops})
            rows.append({"model": label, "phase": p.name, "measure": "depth 𝒟",
                         "share": p.depth_rounds / wd.depth_rounds})
    order = [p.name for p in next(iter(results.values())).phases]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("share:Q", title="share of the step", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("phase:N", sort=order, title=None),
        color=alt.Color("measure:N", title=None),
        yOffset="measure:N",
        column=alt.Column("model:N", title=None, sort=list(results)),
        tooltip=["model:N", "phase:N", "measure:N", alt.Tooltip("share:Q", format=".2%")],
    ).properties(width=260, height=220, title=title)


def brent_terms_chart(results: dict, *, title: str | None = None):
    """``results``: {label: WorkDepth}, all at one processor count p. Bars of each phase's two
    terms of Brent's bound W/p + 𝒟, in rounds on a log scale (zero terms left out): the view
    of :func:`workdepth_chart` that moves with p. Default title names p.

    Raises:
        ValueError: empty ``results``, or results at different p.
    """
    if not results:
        raise ValueError("results is empty: pass {label: WorkDepth}")
    counts = {ph.processors for wd in results.values() for ph in wd.phases}
    if len(counts) != 1:
        raise ValueError(f"results must share one processor count p, got {sorted(counts)}")
    rows = [{"model": label, "phase": ph.name, "term": term, "rounds": value}
            for label, wd in results.items() for ph in wd.phases
            for term, value in (("W/p", ph.work_rounds), ("𝒟", ph.depth_rounds))
            if value > 0]
    order = [ph.name for ph in next(iter(results.values())).phases]
    (p,) = counts
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("rounds:Q", title="rounds", scale=alt.Scale(type="log"), stack=None),
        y=alt.Y("phase:N", sort=order, title=None),
        color=alt.Color("term:N", title=None, sort=["W/p", "𝒟"]),
        yOffset=alt.YOffset("term:N", sort=["W/p", "𝒟"]),
        column=alt.Column("model:N", title=None, sort=list(results)),
        tooltip=["model:N", "phase:N", "term:N", alt.Tooltip("rounds:Q", format=".3g")],
    ).properties(width=260, height=220,
                 title=title or f"W/p and 𝒟 per phase at p = {p:,} processors")


def metrics_chart(history: list, metrics: tuple, *, title: str = "Training metrics"):
    """One small line chart per metric (``history`` rows from a training loop), side by side."""
    rows = [{"step": h["step"], "metric": m, "value": h[m]} for h in history for m in metrics
            if h.get(m) is not None]
    return alt.Chart(alt.Data(values=rows)).mark_line().encode(
        x=alt.X("step:Q", title="step"),
        y=alt.Y("value:Q", title=None),
        facet=alt.Facet("metric:N", title=None, columns=len(metrics), sort=list(metrics)),
    ).resolve_scale(y="independent").properties(width=200, height=150, title=title)


def sweep_curves_chart(runs: list, *, x: str = "samples",
                       title: str = "Held-out accuracy while training (one line per seed)"):
    """``runs``: :class:`rlmperf_lite.rl.SweepRun` list. Held-out greedy accuracy against
    ``x`` ("samples" generated, "step" or "train_s"), one panel per variant, the target dashed."""
    titles = {"samples": "completions generated", "step": "step", "train_s": "training seconds"}
    if x not in titles:
        raise ValueError(f"x must be one of {tuple(titles)}, got {x!r}")
    if not runs:
        raise ValueError("runs is empty: pass the list run_sweep returned")
    rows = [{**p, "variant": r.variant, "seed": str(r.seed)} for r in runs for p in r.curve]
    order = list(dict.fromkeys(r.variant for r in runs))
    lines = alt.Chart().mark_line(point=True, strokeWidth=1.5).encode(
        x=alt.X(f"{x}:Q", title=titles[x]),
        y=alt.Y("eval_accuracy:Q", title="held-out accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("seed:N", title="seed"),
        tooltip=["variant:N", "seed:N", "step:Q", "samples:Q",
                 alt.Tooltip("eval_accuracy:Q", format=".3f")])
    target = alt.Chart().mark_rule(strokeDash=[4, 3], color="gray").encode(
        y=alt.datum(runs[0].target_accuracy))
    return alt.layer(lines, target, data=alt.Data(values=rows)).properties(
        width=150, height=150).facet(
        facet=alt.Facet("variant:N", title=None, sort=order), columns=len(order)).properties(
        title=title)


def reached_costs(runs: list) -> list[dict]:
    """``runs``: :class:`rlmperf_lite.rl.SweepRun` list. One dict per run that reached its
    target (the others are left out): ``variant``, ``seed``, ``step`` and ``samples`` (completions
    generated, resampled ones included) at the evaluation that reached it, and ``flops``, every
    FLOP the toy model counted in those steps (each history row's ``*_flops``: rollout with its
    resampling rounds, reference pass, update). Unlike the seconds, steps and FLOPs do not depend
    on what else the machine ran while the sweep's processes shared its cores."""
    rows = []
    for r in runs:
        if (p := r.reached) is None:
            continue
        flops = sum(v for h in r.history[:p["step"]] for k, v in h.items() if k.endswith("_flops"))
        rows.append({"variant": r.variant, "seed": r.seed, "step": p["step"],
                     "samples": p["samples"], "flops": float(flops)})
    return rows


def sweep_spread_chart(runs: list, *,
                       title: str = "Cost of reaching the target: each seed, mean and range"):
    """Per variant, the completions generated and the FLOPs counted (:func:`reached_costs`)
    until each seed reached the target (points), their mean (tick) and min-max range (rule).
    Runs that missed it are left out."""
    if not runs:
        raise ValueError("runs is empty: pass the list run_sweep returned")
    rows = [{"variant": c["variant"], "seed": str(c["seed"]), "measure": m, "value": c[k]}
            for c in reached_costs(runs)
            for m, k in (("completions generated", "samples"), ("FLOPs counted", "flops"))]
    order = list(dict.fromkeys(r.variant for r in runs))
    y = alt.Y("variant:N", sort=order, title=None)
    base = alt.Chart()
    spread = base.mark_rule(color="gray").encode(y=y, x=alt.X("min(value):Q", title=None),
                                                 x2="max(value):Q")
    mean = base.mark_tick(color="black", thickness=2, size=14).encode(y=y, x="mean(value):Q")
    points = base.mark_circle(size=50, opacity=0.8).encode(
        y=y, x="value:Q", color=alt.Color("seed:N", title="seed"),
        tooltip=["variant:N", "seed:N", "measure:N", alt.Tooltip("value:Q", format=",.4g")])
    return alt.layer(spread, mean, points, data=alt.Data(values=rows)).properties(
        width=300, height=150).facet(
        column=alt.Column("measure:N", title=None)).resolve_scale(x="independent").properties(
        title=title)


def lines_chart(rows: list, *, x: str, y: str, color: str, x_title: str, y_title: str,
                title: str, points: list | None = None, dashed: tuple = (),
                log_x: bool = False):
    """A plain line chart of ``rows`` (dicts), one line per value of ``color``; ``points``
    (dicts with the same x and y keys) are overlaid as black dots, e.g. measurements. Lines
    whose ``color`` value is in ``dashed`` are drawn thick and dashed, so that a line lying on
    top of another stays visible; ``log_x`` puts x on a log scale."""
    is_dashed = alt.FieldOneOfPredicate(field=color, oneOf=list(dashed))
    x_enc = alt.X(f"{x}:Q", title=x_title)
    if log_x:
        x_enc = x_enc.scale(type="log")
    lines = alt.Chart(alt.Data(values=rows)).mark_line().encode(
        x=x_enc, y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color(f"{color}:N", title=color, sort=None),
        strokeDash=alt.condition(is_dashed, alt.value([6, 4]), alt.value([1, 0])),
        strokeWidth=alt.condition(is_dashed, alt.value(4), alt.value(1.5)),
        tooltip=[f"{color}:N", alt.Tooltip(f"{x}:Q", format=".3g"),
                 alt.Tooltip(f"{y}:Q", format=".3g")])
    if points:
        lines = lines + alt.Chart(alt.Data(values=points)).mark_circle(
            color="black", size=30, opacity=0.6).encode(x=f"{x}:Q", y=f"{y}:Q")
    return lines.properties(width=420, height=220, title=title)
