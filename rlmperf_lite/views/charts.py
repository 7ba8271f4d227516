"""Altair charts of training histories, sweeps and work-depth results (Chapters 1-3 labs)."""
from __future__ import annotations

import altair as alt

PHASE_TIMES = ("rollout_s", "ref_logps_s", "reward_s", "advantages_s", "update_s")


def learning_curve_chart(history: list, *, window: int = 20, title: str = "GRPO learning curve"):
    """Batch mean reward per step (points) and its ``window``-step rolling mean (line)."""
    rows = [{"step": h["step"], "reward_mean": h["reward_mean"]} for h in history]
    base = alt.Chart(alt.Data(values=rows)).encode(x=alt.X("step:Q", title="step"))
    points = base.mark_circle(size=12, opacity=0.3).encode(
        y=alt.Y("reward_mean:Q", title="batch mean reward", scale=alt.Scale(domain=[0, 1])))
    line = base.transform_window(
        rolling="mean(reward_mean)", frame=[-window + 1, 0]).mark_line(color="firebrick").encode(
        y="rolling:Q")
    return (points + line).properties(width=520, height=240, title=title)


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


def sweep_spread_chart(runs: list, *,
                       title: str = "Cost of reaching the target: each seed, mean and range"):
    """Per variant, the samples and the training seconds each seed needed to reach the target
    (points), their mean (tick) and min-max range (rule). Runs that missed it are left out."""
    if not runs:
        raise ValueError("runs is empty: pass the list run_sweep returned")
    rows = [{"variant": r.variant, "seed": str(r.seed), "measure": m, "value": p[k]}
            for r in runs if (p := r.reached)
            for m, k in (("completions generated", "samples"), ("training seconds", "train_s"))]
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
