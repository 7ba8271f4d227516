"""Altair charts of training histories and work-depth results (Chapter 1 lab)."""
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
