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


# Figures of the prose pages: a lab builds the chart and glues figure_html(chart); the page shows
# it with {glue:figure} and :doc: (book/_ext/glue_figure.py).

def figure_html(chart):
    """``chart`` drawn as static SVG (by vl-convert, now) inside an HTML output, for
    ``glue(key, figure_html(chart), display=False)``: myst-nb pastes an output into another page
    only as HTML or a bitmap, not as image/svg+xml, and an inline SVG needs no script."""
    import vl_convert as vlc
    from IPython.display import HTML
    return HTML(vlc.vegalite_to_svg(chart.to_dict()))


def step_timeline_rows(est) -> list[dict]:
    """One row per phase of an :class:`~rlmperf_lite.cost.RLStepEstimate`, as the colocated
    layout runs them, one after another on all its GPUs: ``phase``, ``model``, ``bound``,
    ``start_s``, ``end_s`` (running sums of the phases' ``time_s``; the last end is
    ``est.time_s``) and ``seconds``; a phase of no model (the advantages) shows as "no model"."""
    rows, t = [], 0.0
    for p in est.phases:
        rows.append({"phase": p.name, "model": "no model" if p.model == "-" else p.model,
                     "bound": p.bound, "start_s": t,
                     "end_s": t + p.time_s, "seconds": p.time_s})
        t += p.time_s
    return rows


def step_timeline_chart(est, *, title: str | None = None):
    """A colocated step's phases as bars on one time axis (:func:`~rlmperf_lite.book.charts.step_timeline_rows`), coloured
    by the model that runs them, each labelled with its seconds."""
    rows = step_timeline_rows(est)
    y = alt.Y("phase:N", sort=[r["phase"] for r in rows], title=None)
    base = alt.Chart(alt.Data(values=rows))
    bars = base.mark_bar(height=14).encode(
        y=y, x=alt.X("start_s:Q", title="seconds from the start of the step"), x2="end_s:Q",
        color=alt.Color("model:N", title="model"),
        tooltip=["phase:N", "model:N", "bound:N", alt.Tooltip("seconds:Q", format=".3f")])
    labels = base.mark_text(align="left", dx=4, fontSize=11).encode(
        y=y, x="end_s:Q", text=alt.Text("seconds:Q", format=".2f"))
    return (bars + labels).properties(
        width=460, height=200,
        title=title or f"One colocated {est.algo.upper()} step on {est.gpus} {est.hardware}")


def brent_bound_rows(model_wd: dict, phases=("rollout_decode", "actor_update")) -> list[dict]:
    """``model_wd``: {processors p: WorkDepth}. For each of ``phases`` and each p, four rows
    ``phase``, ``p``, ``term``, ``rounds``: W/p, 𝒟, the lower bound max(W/p, 𝒟) and Brent's
    upper bound W/p + 𝒟.

    Raises:
        ValueError: empty ``model_wd``, or a phase name the results lack.
    """
    if not model_wd:
        raise ValueError("model_wd is empty: pass {processors p: WorkDepth}")
    names = [ph.name for ph in next(iter(model_wd.values())).phases]
    for name in phases:
        check_choice("phases", name, names)
    return [{"phase": name, "p": p, "term": term, "rounds": value}
            for p, wd in model_wd.items() for name in phases
            for term, value in (("W/p", wd.phase(name).work_rounds),
                                ("𝒟", wd.phase(name).depth_rounds),
                                ("max(W/p, 𝒟)", wd.phase(name).lower_rounds),
                                ("W/p + 𝒟", wd.phase(name).brent_rounds))]


def brent_bounds_chart(model_wd: dict, phases=("rollout_decode", "actor_update"), *,
                       title: str = "Brent's bounds against the processors p"):
    """Per phase (a panel each), W/p, 𝒟 and the two bounds between which a greedy schedule's
    rounds lie, max(W/p, 𝒟) <= T_p <= W/p + 𝒟, against p, log-log
    (:func:`~rlmperf_lite.book.charts.brent_bound_rows`)."""
    rows = brent_bound_rows(model_wd, phases)
    terms = ["W/p", "𝒟", "max(W/p, 𝒟)", "W/p + 𝒟"]
    bound = alt.FieldOneOfPredicate(field="term", oneOf=terms[2:])
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("p:Q", scale=alt.Scale(type="log"), title="processors p",
                axis=alt.Axis(format=".0e")),
        y=alt.Y("rounds:Q", scale=alt.Scale(type="log"), title="rounds",
                axis=alt.Axis(format=".0e")),
        color=alt.Color("term:N", title=None, sort=terms),
        strokeDash=alt.condition(bound, alt.value([1, 0]), alt.value([4, 3])),
        strokeWidth=alt.condition(bound, alt.value(2.5), alt.value(1.2)),
        tooltip=["phase:N", "term:N", "p:Q", alt.Tooltip("rounds:Q", format=".3g")],
    ).properties(width=250, height=220).facet(
        column=alt.Column("phase:N", title=None, sort=list(phases))).properties(title=title)


def length_histogram_rows(lengths, group_sizes=(16,), *, bins: int = 64) -> tuple:
    """(bars, marks) for the response-length histogram: ``bars`` one dict per bin of ``lengths``
    (``start``, ``end`` in tokens, ``share`` of the responses in it; ``bins`` equal bins from 0 to
    the longest), ``marks`` the mean length and, for each G of ``group_sizes``, the expected
    longest of G draws (:func:`~rlmperf_lite.cost.expected_max_length`), as ``mark``, ``tokens``.

    Raises:
        ValueError: naming ``lengths``, ``group_sizes`` or ``bins``.
    """
    import numpy as np

    from ..cost import expected_max_length
    check_int("bins", bins, 1)
    if not group_sizes:
        raise ValueError("group_sizes is empty: pass the G (or B G) to mark, e.g. (16,)")
    marks = [{"mark": f"longest of {G:,} (expected)", "tokens": expected_max_length(lengths, G)}
             for G in group_sizes]                       # validates lengths and each G
    x = np.asarray(lengths, dtype=float).reshape(-1)
    counts, edges = np.histogram(x, bins=bins, range=(0.0, float(x.max())))
    bars = [{"start": float(a), "end": float(b), "share": c / x.size}
            for a, b, c in zip(edges[:-1], edges[1:], counts)]
    return bars, [{"mark": "mean", "tokens": float(x.mean())}] + marks


def length_histogram_chart(lengths, group_sizes=(16,), *, bins: int = 64,
                           title: str = "Response lengths, and the straggler a group waits for"):
    """Histogram of ``lengths`` with the mean and the expected longest of each G of
    ``group_sizes`` marked by labelled rules (:func:`~rlmperf_lite.book.charts.length_histogram_rows`)."""
    bars, marks = length_histogram_rows(lengths, group_sizes, bins=bins)
    hist = alt.Chart(alt.Data(values=bars)).mark_rect(color="steelblue").encode(
        x=alt.X("start:Q", title="response length (tokens)"), x2="end:Q",
        y=alt.Y("share:Q", title="share of responses", axis=alt.Axis(format="%")),
        y2=alt.datum(0),
        tooltip=[alt.Tooltip("start:Q", format=",.0f"), alt.Tooltip("end:Q", format=",.0f"),
                 alt.Tooltip("share:Q", format=".2%")])
    mark = alt.Chart(alt.Data(values=marks))
    colours = ["black", "darkorange", "firebrick", "purple", "seagreen"]
    rules = mark.mark_rule(strokeWidth=2).encode(
        x="tokens:Q", color=alt.Color("mark:N", title=None, sort=[m["mark"] for m in marks],
                                      scale=alt.Scale(range=colours)),
        tooltip=["mark:N", alt.Tooltip("tokens:Q", format=",.0f")])
    text = mark.mark_text(align="left", dx=4, angle=0, baseline="top", fontSize=11).encode(
        x="tokens:Q", y=alt.value(4), text=alt.Text("tokens:Q", format=",.0f"),
        color=alt.Color("mark:N", sort=[m["mark"] for m in marks], scale=alt.Scale(range=colours)))
    return (hist + rules + text).properties(width=460, height=220, title=title)


def phase_roofline_rows(est) -> tuple:
    """(roof, phases) for :func:`~rlmperf_lite.book.phase_roofline_chart` from an
    :class:`~rlmperf_lite.cost.RLStepEstimate`: ``roof`` the device's min(peak, intensity x HBM
    bandwidth) from 0.1 to 10^5 FLOPs per byte; ``phases`` one dict per phase with FLOPs and
    bytes: ``phase``, ``bound``, ``intensity`` = flops / bytes_moved and ``flops_per_s`` = the
    rate per GPU the estimate gives it, flops / (time_s x gpus)."""
    hw, dtype = est.inputs["hardware"], est.inputs["dtype"]
    peak, bw = hw.peak(dtype), hw.hbm_bandwidth_bytes_per_s
    roof = [{"intensity": 10 ** (k / 4), "flops_per_s": min(peak, 10 ** (k / 4) * bw)}
            for k in range(-4, 21)]
    phases = [{"phase": p.name, "bound": p.bound, "intensity": p.flops / p.bytes_moved,
               "flops_per_s": p.flops / (p.time_s * est.gpus)}
              for p in est.phases if p.flops > 0 and p.bytes_moved > 0 and p.time_s > 0]
    return roof, phases


def phase_roofline_chart(est, *, title: str | None = None):
    """The device's roofline (log-log) with each phase of ``est`` placed at its arithmetic
    intensity and its estimated FLOP/s per GPU (:func:`~rlmperf_lite.book.charts.phase_roofline_rows`)."""
    roof, phases = phase_roofline_rows(est)
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"),
              title="arithmetic intensity (FLOPs per byte)")
    y = alt.Y("flops_per_s:Q", scale=alt.Scale(type="log"), title="FLOP/s per GPU",
              axis=alt.Axis(format=".0e"))
    line = alt.Chart(alt.Data(values=roof)).mark_line(color="gray").encode(x=x, y=y)
    order = [r["phase"] for r in phases]
    dots = alt.Chart(alt.Data(values=phases)).mark_point(size=90, filled=True).encode(
        x=x, y=y, color=alt.Color("phase:N", title=None, sort=order),
        shape=alt.Shape("bound:N", title="bound"),
        tooltip=["phase:N", "bound:N", alt.Tooltip("intensity:Q", format=".3g"),
                 alt.Tooltip("flops_per_s:Q", format=".3g")])
    return (line + dots).properties(
        width=460, height=260,
        title=title or f"The phases of a {est.algo.upper()} step on the {est.hardware} roofline")


MISMATCH_METRICS = {"eval_accuracy": "held-out accuracy",
                    "mismatch_k3_kl": "mismatch KL (nats per token)"}
"""The metrics :func:`~rlmperf_lite.book.mismatch_curves_chart` draws, with their axis titles."""


def mismatch_curve_rows(runs: dict) -> list[dict]:
    """``runs``: {(method, seed): RLResult} of :func:`~rlmperf_lite.rl.train_grpo` with an
    engine and ``eval_every`` > 0. One row per run, step and metric of
    :data:`~rlmperf_lite.book.charts.MISMATCH_METRICS` that the step logged: ``method``,
    ``seed``, ``step``, ``metric`` and ``value``.

    Raises:
        ValueError: naming ``runs``, when it is not such a dict or a run logged neither metric.
    """
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {(method, seed): RLResult}")
    rows = []
    for key, run in runs.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"runs keys must be (method, seed) tuples, got {key!r}")
        if not isinstance(run, RLResult) or not run.history:
            raise ValueError(f"runs[{key!r}] must be an RLResult with a history (from "
                             f"train_grpo), got {type(run).__name__}")
        got = [{"method": str(key[0]), "seed": int(key[1]), "step": int(h["step"]),
                "metric": m, "value": float(h[m])}
               for h in run.history for m in MISMATCH_METRICS if m in h]
        if {r["metric"] for r in got} != set(MISMATCH_METRICS):
            raise ValueError(f"runs[{key!r}] must log {sorted(MISMATCH_METRICS)}: train with an "
                             f"engine (rollout_dtype) and eval_every > 0")
        rows += got
    return rows


def mismatch_curves_chart(runs: dict, *, title: str | None = None):
    """Held-out accuracy (top) and the engine–trainer mismatch KL (bottom, log scale) against
    the step, one colour per method and one dash per seed
    (:func:`~rlmperf_lite.book.charts.mismatch_curve_rows`)."""
    rows = mismatch_curve_rows(runs)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    panels = []
    for metric, label in MISMATCH_METRICS.items():
        acc = metric == "eval_accuracy"
        panels.append(alt.Chart(alt.Data(values=[r for r in rows if r["metric"] == metric]))
                      .mark_line(strokeWidth=2 if acc else 1.2).encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("value:Q", title=label, axis=alt.Axis(format=".2f" if acc else ".0e"),
                    scale=alt.Scale(zero=False) if acc else alt.Scale(type="log")),
            color=alt.Color("method:N", title="old log-probs", sort=methods),
            strokeDash=alt.StrokeDash("seed:N", title="seed"),
            tooltip=["method:N", "seed:N", "step:Q", alt.Tooltip("value:Q", format=".3g")])
            .properties(width=460, height=170 if acc else 130))
    return alt.vconcat(*panels).resolve_scale(color="shared", strokeDash="shared").properties(
        title=title or "Held-out accuracy and the engine–trainer mismatch, by method and seed")
