"""Charts, tables and calculators of Chapter 9 (pipeline and expert parallelism, choosing a
plan). They display what :mod:`rlmperf_lite.parallel` and :mod:`rlmperf_lite.cost` compute and
hold no formulas of their own: a Gantt chart of a simulated pipeline schedule, bytes per rank,
expert loads, the planner's ranked table and rejection reasons, two live widgets and two
no-kernel calculators evaluated over a grid when the book is built."""
from __future__ import annotations

import html
import itertools
import re
from collections import Counter

import altair as alt

from ..cost import (TRAINING_BACKENDS, hardware_preset, hardware_presets, model_preset,
                    model_presets, pipeline_bubble_fraction, search_plans, TrainWorkload)
from ..cost.backends import DEFAULT_BACKEND
from ..parallel.schedules import SCHEDULES, make_schedule, schedule_timeline
from .static_calculators import bound_controls, grid_csv
from .widgets import wire

__all__ = ["SCHEDULE_NAMES", "pipeline_gantt_chart", "bytes_per_rank_chart",
           "expert_load_chart", "stage_layout_text", "plan_table_html", "rejection_summary",
           "rejection_table_html",
           "pipeline_widget", "planner_widget", "pipeline_bubble_grid", "pipeline_bubble_chart",
           "pipeline_gantt_grid", "gantt_grid_chart"]

SCHEDULE_NAMES = SCHEDULES
_OP_COLORS = alt.Scale(domain=["F", "B"], range=["#4c78a8", "#f58518"])


# ---- pipeline timelines -------------------------------------------------------------------------
def _gantt_layers(base, *, x_title: str) -> list:
    """Bars from ``start`` to ``end`` per stage, F blue and B orange, microbatch labels."""
    bars = base.mark_bar(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("start:Q", title=x_title), x2="end:Q",
        y=alt.Y("stage:O", title="stage"),
        color=alt.Color("op:N", scale=_OP_COLORS, title="op"),
        opacity=alt.condition("datum.chunk > 0", alt.value(0.5), alt.value(1.0)),
        tooltip=["stage:O", "op:N", "microbatch:Q", "chunk:Q", "start:Q", "end:Q"])
    text = base.mark_text(fontSize=8, color="white").encode(
        x="mid:Q", y="stage:O", text="microbatch:N").transform_calculate(
        mid="(datum.start + datum.end) / 2")
    return [bars, text]


def pipeline_gantt_chart(timelines: dict, *, title: str = "Pipeline schedules, stage by stage"):
    """``timelines``: {label: PipelineTimeline}. One Gantt chart per label, stacked: stage on
    y, time on x (in units of one microbatch's forward on a whole stage), forward ops blue,
    backward orange, each labelled with its microbatch (lighter: the second model chunk of the
    interleaved schedule). The white gaps are the bubble; each subtitle gives the timeline's
    ``bubble_fraction`` and ``makespan``."""
    if not timelines:
        raise ValueError("timelines is empty: pass {label: schedule_timeline(...)}")
    charts = []
    for label, tl in timelines.items():
        rows = [{**r, "schedule": label} for r in tl.records]
        pp = int(max(r["stage"] for r in tl.records)) + 1
        layers = _gantt_layers(alt.Chart(), x_title="time (forward of one microbatch = 1)")
        charts.append(alt.layer(*layers, data=alt.Data(values=rows)).properties(
            width=520, height=22 * pp + 10,
            title=f"{label}: bubble {tl.bubble_fraction:.1%} of the ideal time, "
                  f"makespan {tl.makespan:g}"))
    return alt.vconcat(*charts).properties(title=title).resolve_scale(x="shared")


def pipeline_bubble_chart(rows: list, *, title: str = "Pipeline bubble against microbatches"):
    """``rows``: dicts with ``microbatches``, ``bubble``, ``pp`` and ``source`` ("simulated
    timeline" or "(p - 1) / m"). Lines for the formula, dots for the simulated timelines."""
    line = alt.Chart(alt.Data(values=[r for r in rows if r["source"] != "simulated timeline"]))
    dots = alt.Chart(alt.Data(values=[r for r in rows if r["source"] == "simulated timeline"]))
    x = alt.X("microbatches:Q", scale=alt.Scale(type="log", base=2), title="microbatches m")
    y = alt.Y("bubble:Q", axis=alt.Axis(format="%"), title="bubble / ideal time")
    color = alt.Color("pp:N", title="pp")
    return (line.mark_line().encode(x=x, y=y, color=color) +
            dots.mark_point(size=60, filled=True).encode(
                x=x, y=y, color=color,
                tooltip=["pp:N", "microbatches:Q", alt.Tooltip("bubble:Q", format=".5f")])
            ).properties(width=420, height=220, title=title)


# ---- bytes and loads ----------------------------------------------------------------------------
def bytes_per_rank_chart(sent: dict, *, title: str = "Bytes sent per rank"):
    """``sent``: {label: sequence of bytes, one per rank} (e.g. ``group.log.sent_bytes`` and the
    formula's values). Grouped bars per rank, one colour per label."""
    rows = [{"rank": r, "what": label, "bytes": float(b)} for label, values in sent.items()
            for r, b in enumerate(values)]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("rank:O", title="rank"), xOffset="what:N",
        y=alt.Y("bytes:Q", title="bytes sent"),
        color=alt.Color("what:N", title=None, sort=list(sent)),
        tooltip=["what:N", "rank:O", alt.Tooltip("bytes:Q", format=",.0f")],
    ).properties(width=360, height=200, title=title)


def expert_load_chart(loads: dict, *, title: str = "Assignments per expert"):
    """``loads``: {label: (E,) assignments per expert, from ``expert_load``}. Bars per expert,
    one panel per label, with a dashed rule at the mean load (perfect balance)."""
    rows = [{"expert": e, "routing": label, "assignments": int(n)}
            for label, load in loads.items() for e, n in enumerate(load)]
    base = alt.Chart(alt.Data(values=rows))
    bars = base.mark_bar().encode(
        x=alt.X("expert:O", title="expert"),
        y=alt.Y("assignments:Q", title="(token, choice) pairs"),
        tooltip=["routing:N", "expert:O", "assignments:Q"])
    mean = base.mark_rule(color="firebrick", strokeDash=[4, 3]).encode(y="mean(assignments):Q")
    return alt.layer(bars, mean).properties(width=240, height=180).facet(
        column=alt.Column("routing:N", title=None, sort=list(loads))).properties(title=title)


# ---- the planner --------------------------------------------------------------------------------
_PLAN_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero_stage", "microbatches", "interleave",
                 "recompute")


def stage_layout_text(plan, model) -> str:
    """A plan's pipeline stages (``ParallelPlan.stage_layers``) as text: "80" without a
    pipeline, "10 x 8" for even stages, "11/10 x 6/9" for Megatron's first/middle/last."""
    layers = plan.stage_layers(model)
    if len(set(layers)) == 1:
        return str(layers[0]) if len(layers) == 1 else f"{layers[0]} x {len(layers)}"
    middle = f"/{layers[1]} x {len(layers) - 2}" if len(layers) > 2 else ""
    return f"{layers[0]}{middle}/{layers[-1]}"


def _flags_text(row: dict) -> str:
    """A table row's first / last stage layers ("even" when neither is set)."""
    first, last = row["first_stage_layers"], row["last_stage_layers"]
    return "even" if first is None and last is None else f"{first or '-'} ... {last or '-'}"


def plan_table_html(search, limit: int = 10) -> str:
    """The planner's ranked plans (``search.table(limit)``) as an HTML table: the layout (the
    first and last pipeline stages' layers when uneven), the predicted step time, memory per
    GPU and the shares of exposed communication and bubble."""
    rows = search.table(limit)
    head = "".join(f"<th>{c}</th>" for c in ("#",) + _PLAN_COLUMNS) + \
        "<th>first ... last layers</th><th>step (s)</th><th>GB/GPU</th><th>comm</th>" \
        "<th>bubble</th>"
    body = "".join(
        "<tr>" + f"<td>{i + 1}</td>" + "".join(f"<td>{r[c]}</td>" for c in _PLAN_COLUMNS) +
        f"<td>{_flags_text(r)}</td>"
        f"<td>{r['step_time_s']:.3f}</td><td>{r['memory_per_gpu_gb']:.1f}</td>"
        f"<td>{r['comm_share']:.1%}</td><td>{r['bubble_share']:.1%}</td></tr>"
        for i, r in enumerate(rows))
    return (f"<p>{search.num_valid:,} valid plans of {search.num_enumerated:,} enumerated; "
            f"the {len(rows)} fastest:</p><table><tr>{head}</tr>{body}</table>")


def rejection_summary(search) -> list:
    """[(rule, number of plans breaking it)], most frequent first: each reason of
    ``search.rejected`` with its numbers replaced by "N", so that the messages of one rule
    ("tp=16 exceeds nvlink_domain_gpus=8 ...") count together. A plan that breaks several rules
    counts under each."""
    counts = Counter(re.sub(r"(?<==)\d+(?:\.\d+)?|\d+(?:\.\d+)?(?= GB)", "N", why)
                     for _, reasons in search.rejected for why in reasons)
    return counts.most_common()


def rejection_table_html(search, limit: int | None = None) -> str:
    """:func:`rejection_summary` as an HTML table (at most ``limit`` rules)."""
    rows = "".join(f"<tr><td>{n:,}</td><td>{html.escape(rule)}</td></tr>"
                   for rule, n in rejection_summary(search)[:limit])
    return (f"<p>{len(search.rejected):,} plans rejected; plans per broken rule:</p>"
            f"<table><tr><th>plans</th><th>rule</th></tr>{rows}</table>")


# ---- live widgets -------------------------------------------------------------------------------
def pipeline_widget(**defaults):
    """Sliders for pp, microbatches m and interleave v and a schedule dropdown, driving
    :func:`rlmperf_lite.parallel.schedule_timeline`: the Gantt chart, the simulated bubble
    beside :func:`rlmperf_lite.cost.pipeline_bubble_fraction`, and the microbatches in flight
    per stage. Bad combinations show the library's ValueError message."""
    import ipywidgets as w

    c = {"pp": 4, "microbatches": 8, "schedule": "1f1b", "interleave": 2, **defaults}
    controls = {
        "pp": w.IntSlider(value=c["pp"], min=1, max=16, description="pp"),
        "microbatches": w.IntSlider(value=c["microbatches"], min=1, max=64,
                                    description="microbatches"),
        "schedule": w.Dropdown(options=list(SCHEDULE_NAMES), value=c["schedule"],
                               description="schedule"),
        "interleave": w.IntSlider(value=c["interleave"], min=1, max=4,
                                  description="interleave v"),
    }

    def compute(kw):
        v = kw["interleave"] if kw["schedule"] == "interleaved" else 1
        tl = schedule_timeline(make_schedule(kw["schedule"], kw["pp"], kw["microbatches"], v))
        formula = pipeline_bubble_fraction(kw["pp"], kw["microbatches"], v)
        return (f"<p>simulated bubble {tl.bubble_fraction:.4f} of the ideal time; "
                f"(p - 1) / (v m) = {formula:.4f}; makespan {tl.makespan:g}; "
                f"in flight per stage: {list(map(int, tl.peak_in_flight))}</p>",
                [pipeline_gantt_chart({kw["schedule"]: tl}, title="")])

    message, out = wire(controls, compute)
    return w.VBox([w.HBox(list(controls.values())), message, out])


def planner_widget(**defaults):
    """Model and accelerator dropdowns, the GPUs, sequences per step and tokens per sequence,
    and the training backend whose rules apply (``rlmperf_lite.cost.backends``), driving
    :func:`rlmperf_lite.cost.search_plans`: the ten fastest plans and the rejection reasons.
    Bad inputs show the library's ValueError message."""
    import ipywidgets as w

    c = {"model": "qwen2.5-72b", "hardware": "h100-sxm", "gpus": 256, "global_batch": 512,
         "seq_len": 4608, "backend": DEFAULT_BACKEND, **defaults}
    controls = {
        "model": w.Dropdown(options=model_presets(), value=c["model"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "gpus": w.IntText(value=c["gpus"], description="GPUs"),
        "global_batch": w.IntText(value=c["global_batch"], description="sequences"),
        "seq_len": w.IntText(value=c["seq_len"], description="tokens/seq"),
        "backend": w.Dropdown(options=list(TRAINING_BACKENDS), value=c["backend"],
                              description="backend"),
    }

    def compute(kw):
        search = search_plans(model_preset(kw["model"]), hardware_preset(kw["hardware"]),
                              kw["gpus"], TrainWorkload(global_batch=kw["global_batch"],
                                                        seq_len=kw["seq_len"]),
                              backend=kw["backend"])
        best = "" if search.best else \
            "<p><b style='color:firebrick'>no valid plan: see the rejections</b></p>"
        return best + plan_table_html(search, 10) + rejection_table_html(search, 8), ()

    message, _ = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values()))]), message])


# ---- no-kernel calculators ----------------------------------------------------------------------
_GRID_SCHEDULES = (("GPipe", "gpipe", 1), ("1F1B", "1f1b", 1),
                   ("interleaved v=2", "interleaved", 2), ("interleaved v=4", "interleaved", 4))
BUBBLE = "bubble / ideal time"
IN_FLIGHT = "in flight on stage 0 (microbatch-chunks)"


def pipeline_bubble_grid(grid: dict | None = None) -> list[dict]:
    """The simulated timelines over pp and m for GPipe, 1F1B and interleaving with v = 2 and 4:
    per schedule the ``bubble_fraction`` and stage 0's ``peak_in_flight`` (microbatches; for
    interleaving, microbatch-chunks of 1/v of the stage's layers each). Settings a schedule
    refuses (interleaving with m not a multiple of pp) give no rows."""
    grid = grid or {"pp": (2, 4, 8, 16), "microbatches": (16, 32, 64, 128)}
    rows = []
    for pp, m in itertools.product(grid["pp"], grid["microbatches"]):
        for label, name, v in _GRID_SCHEDULES:
            try:
                tl = schedule_timeline(make_schedule(name, pp, m, v))
            except ValueError:
                continue
            point = {"pp": pp, "microbatches": m, "schedule": label}
            rows.append({**point, "measure": BUBBLE, "value": tl.bubble_fraction})
            rows.append({**point, "measure": IN_FLIGHT, "value": int(tl.peak_in_flight[0])})
    return rows


def pipeline_gantt_grid(grid: dict | None = None) -> list[dict]:
    """Every op of the simulated timeline for each pp, m and schedule (GPipe, 1F1B, interleaved
    v = 2), with the timeline's ``bubble_fraction``: the data of :func:`gantt_grid_chart`."""
    grid = grid or {"pp": (2, 4, 8), "microbatches": (8, 16, 32)}
    rows = []
    for pp, m in itertools.product(grid["pp"], grid["microbatches"]):
        for label, name, v in _GRID_SCHEDULES[:3]:
            try:
                tl = schedule_timeline(make_schedule(name, pp, m, v))
            except ValueError:
                continue
            rows += [{"pp": pp, "microbatches": m, "schedule": label, **r,
                      "bubble": tl.bubble_fraction} for r in tl.records]
    return rows


def gantt_grid_chart(rows: list[dict], *, start: dict | None = None,
                     title: str = "Pipeline schedule (no kernel needed)"):
    """The Gantt chart of the setting chosen with the page's own dropdowns (pp, microbatches,
    schedule), from :func:`pipeline_gantt_grid`'s rows; a text line gives the bubble.

    Raises:
        ValueError: empty ``rows``.
    """
    if not rows:
        raise ValueError("rows is empty: pass pipeline_gantt_grid()'s result")
    controls = ["pp", "microbatches", "schedule"]
    params, predicate = bound_controls(rows, controls, start)
    columns = controls + ["stage", "op", "microbatch", "chunk", "start", "end", "bubble"]
    numbers = ("pp", "microbatches", "stage", "microbatch", "chunk", "start", "end", "bubble")
    data = alt.InlineData(values=grid_csv(rows, columns), format=alt.CsvDataFormat(
        type="csv", parse={k: "number" for k in numbers}))
    gantt = _gantt_layers(alt.Chart(), x_title="time (forward of one microbatch = 1)")
    label = alt.Chart().transform_aggregate(
        bubble="max(bubble)", makespan="max(end)").transform_calculate(
        text="'bubble ' + format(datum.bubble, '.2%') + ' of the ideal time, makespan ' + "
             "format(datum.makespan, '.4~g')").mark_text(
        align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
    chart = alt.layer(*gantt, label, data=data).transform_filter(predicate)
    return chart.add_params(*params).properties(width=520, height=200, title=title)


__all__ += ["BUBBLE", "IN_FLIGHT"]
