"""Views of Chapter 7 (data parallelism, ZeRO and FSDP): the simulated ring as a table, bytes
per rank and model-state bytes per GPU as charts (and what each ZeRO stage shards), the live
calculator (ipywidgets) and its no-kernel twin (a grid the library evaluates when the book is
built). They take results of :mod:`rlmperf_lite.parallel` and :mod:`rlmperf_lite.cost` and hold
no formulas of their own.
"""
from __future__ import annotations

import html
import itertools

import altair as alt

from ..checks import check_choice
from ..cost import (ModelConfig, ParallelPlan, TrainWorkload, hardware_preset, hardware_presets,
                    memory_per_gpu, model_presets, train_step_time)
from .static_calculators import bound_controls, grid_data
from .widgets import wire

__all__ = ["MEMORY_PARTS", "DP_WORKLOAD", "ring_table_html", "zero_comm_chart",
           "state_bytes_chart", "zero_shard_rows", "zero_shard_chart", "dp_scaling_chart", "dp_plan_results", "dp_summary_html",
           "dp_widget", "dp_grid", "dp_grid_chart"]

MEMORY_PARTS = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activation_bytes")
"""The per-GPU memory components, in the keys of :class:`rlmperf_lite.cost.TrainMemory`."""

DP_WORKLOAD = {"global_batch": 512, "seq_len": 4608, "micro_batch_size": 1,
               "recompute": "full"}
"""The calculators' default training batch, Chapter 4's GRPO step, 32 prompts x 16 samples of
512 + 4,096 tokens, one sequence per micro-batch, full activation recomputation."""

_PART_LABEL = {"weights_bytes": "weights", "grads_bytes": "gradients",
               "optimizer_bytes": "optimizer states", "activation_bytes": "activations"}
_STAGE_LABEL = {0: "0: DP", 1: "1: +optimizer", 2: "2: +gradients", 3: "3: +weights (FSDP)"}


def _cell(x) -> str:
    """One rank's array as short text: its elements joined (strings as they are)."""
    return ", ".join(str(v) if isinstance(v, str) else f"{v:.4g}" for v in list(x.ravel()))


def ring_table_html(stages: dict, sent_bytes: dict | None = None) -> str:
    """A table with one row per rank and one column per stage of a collective.

    Args:
        stages: {label: list of per-rank arrays} (e.g. "input", "after reduce-scatter").
        sent_bytes: {label: bytes each rank sent to reach that stage}, shown under the column.
    """
    labels = list(stages)
    n = len(stages[labels[0]])
    head = "<tr><th>rank</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in labels) + "</tr>"
    rows = "".join("<tr><td>" + str(r) + "</td>" + "".join(
        f"<td><code>{html.escape(_cell(stages[k][r]))}</code></td>" for k in labels) + "</tr>"
        for r in range(n))
    foot = ""
    if sent_bytes:
        foot = "<tr><th>bytes sent per rank</th>" + "".join(
            f"<td>{', '.join(f'{b:,.0f}' for b in sent_bytes[k])}</td>" if k in sent_bytes
            else "<td></td>" for k in labels) + "</tr>"
    return f"<table>{head}{rows}{foot}</table>"


def zero_comm_chart(by_stage: dict, psi_bytes: float, *,
                    title: str = "Bytes each rank sends in one step, in units of Ψ"):
    """``by_stage``: {stage: {op: bytes sent by one rank}} (from ``CommLog.bytes_by_op``).
    Stacked bars per stage of each op's bytes divided by ``psi_bytes`` (the weights' bytes)."""
    rows = [{"stage": _STAGE_LABEL.get(s, str(s)), "op": op, "psi": b / psi_bytes, "bytes": b}
            for s, ops in by_stage.items() for op, b in ops.items()]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("stage:N", title="ZeRO stage", sort=[_STAGE_LABEL.get(s, str(s))
                                                      for s in by_stage]),
        x=alt.X("sum(psi):Q", title="bytes sent per rank / Ψ"),
        color=alt.Color("op:N", title=None),
        tooltip=["stage:N", "op:N", alt.Tooltip("bytes:Q", format=",.0f"),
                 alt.Tooltip("psi:Q", format=".4f", title="× Ψ")],
    ).properties(width=420, height=140, title=title)


def state_bytes_chart(parts: dict, *, hbm_bytes: float | None = None,
                      title: str = "Memory per GPU", x_title: str = "bytes per GPU"):
    """``parts``: {label: {component: bytes}} with keys among :data:`MEMORY_PARTS` (a
    ``model_state_breakdown`` result or ``TrainMemory.as_dict()``). One stacked bar per label;
    ``hbm_bytes`` adds the device's memory as a dashed rule."""
    rows = [{"setting": label, "part": _PART_LABEL[k], "bytes": float(d[k])}
            for label, d in parts.items() for k in MEMORY_PARTS if k in d]
    order = [_PART_LABEL[k] for k in MEMORY_PARTS]
    bars = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("setting:N", sort=list(parts), title=None),
        x=alt.X("sum(bytes):Q", title=x_title, axis=alt.Axis(format="~s")),
        color=alt.Color("part:N", sort=order, title=None),
        order=alt.Order("part_order:Q"),
        tooltip=["setting:N", "part:N", alt.Tooltip("bytes:Q", format=".4~s")],
    ).transform_calculate(part_order=f"indexof({order!r}, datum.part)")
    if hbm_bytes is not None:
        rule = alt.Chart(alt.Data(values=[{"bytes": float(hbm_bytes)}])).mark_rule(
            color="firebrick", strokeDash=[4, 3]).encode(
            x="bytes:Q", tooltip=[alt.Tooltip("bytes:Q", format=".4~s", title="HBM")])
        bars = bars + rule
    return bars.properties(width=420, height=28 * len(parts) + 30, title=title)


_ZERO_NAME = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def zero_shard_rows(memories: dict) -> list[dict]:
    """``memories``: {ZeRO stage: :class:`~rlmperf_lite.cost.TrainMemory`} of one plan at
    stages 0 to 3 (stage 0 included: it is what the others shard). One row per stage and part
    of :data:`MEMORY_PARTS`: ``stage`` (DDP, ZeRO-1 ...), ``part``, ``bytes``, ``start_bytes``
    and ``end_bytes`` (running sums; the last end is the stage's ``total_bytes``), ``sharded``
    (fewer bytes than at stage 0) and ``factor`` (stage 0's bytes over these, the dp degree
    when sharded, 1 when not).

    Raises:
        ValueError: ``memories`` without stage 0, or with a stage outside 0..3.
    """
    if not isinstance(memories, dict) or 0 not in memories:
        raise ValueError("memories must be {zero stage: TrainMemory} with stage 0 (DDP) in it")
    for s in memories:
        check_choice("memories' stages", s, tuple(_ZERO_NAME))
    full, rows = memories[0].as_dict(), []
    for s, mem in sorted(memories.items()):
        d, start = mem.as_dict(), 0.0
        for k in MEMORY_PARTS:
            b = float(d[k])
            rows.append({"stage": _ZERO_NAME[s], "part": _PART_LABEL[k], "bytes": b,
                         "start_bytes": start, "end_bytes": start + b,
                         "sharded": b < full[k], "factor": full[k] / b if b else 1.0,
                         "total_bytes": float(mem.total_bytes)})
            start += b
    return rows


def zero_shard_chart(memories: dict, *, hbm_bytes: float | None = None,
                     title: str = "What each ZeRO stage shards, bytes per GPU"):
    """Two panels from :func:`zero_shard_rows`: left, a grid of stage x model state, each cell
    the GB one GPU holds, marked "all" (replicated) or "1/dp" (sharded); right, each stage's
    stacked bytes per GPU with activations, labelled with its total (``hbm_bytes``: the
    device's memory as a dashed rule)."""
    rows = zero_shard_rows(memories)
    for r in rows:
        r["holds"] = f"1/{r['factor']:.0f}" if r["sharded"] else "all"
        r["cell"] = f"{r['bytes'] / 1e9:.1f} GB, {r['holds']}"
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    parts = [_PART_LABEL[k] for k in MEMORY_PARTS]
    y = alt.Y("stage:N", sort=stages, title=None)
    size = {"width": 420, "height": 30 * len(stages)}
    cells = alt.Chart(alt.Data(values=[r for r in rows if r["part"] != "activations"]))
    x_cell = alt.X("part:N", sort=parts[:3], title=None, axis=alt.Axis(orient="top",
                                                                        labelAngle=0))
    grid = cells.mark_rect(stroke="white", strokeWidth=2).encode(
        x=x_cell, y=y, color=alt.Color("sharded:N", scale=alt.Scale(
            domain=[False, True], range=["#f2b6a0", "#9ecae9"]), legend=alt.Legend(
            title="model states", labelExpr="datum.value ? 'sharded over dp' : 'replicated'")),
        tooltip=["stage:N", "part:N", "holds:N", alt.Tooltip("bytes:Q", format=".4~s")])
    grid = (grid + cells.mark_text(fontSize=11).encode(x=x_cell, y=y, text="cell:N")
            ).properties(**size)
    top = max(r["total_bytes"] for r in rows) * 1.15
    bars = alt.Chart(alt.Data(values=rows)).mark_bar(height=18).encode(
        y=y, x=alt.X("start_bytes:Q", title="bytes per GPU", scale=alt.Scale(domain=[0, top]),
                     axis=alt.Axis(tickCount=5,
                                   labelExpr="format(datum.value / 1e9, '.0f') + ' GB'")),
        x2="end_bytes:Q", color=alt.Color("part:N", sort=parts, title="memory"),
        tooltip=["stage:N", "part:N", alt.Tooltip("bytes:Q", format=".4~s")])
    ends = [r for r in rows if r["part"] == parts[-1]]
    layers = bars + alt.Chart(alt.Data(values=ends)).mark_text(
        align="left", dx=4, fontSize=11).encode(y=y, x="end_bytes:Q", text="label:N"
                                                ).transform_calculate(
        label="format(datum.total_bytes / 1e9, '.1f') + ' GB'")
    if hbm_bytes is not None:
        layers += alt.Chart(alt.Data(values=[{"bytes": float(hbm_bytes)}])).mark_rule(
            color="firebrick", strokeDash=[4, 3]).encode(x="bytes:Q")
    return alt.vconcat(grid, layers.properties(**size)).resolve_scale(
        color="independent").properties(title=title)

def dp_scaling_chart(steps: dict, *, title: str = "One training step against dp"):
    """``steps``: {dp: TrainStepTime}. Compute, data-parallel communication (all of it and the
    part not hidden behind the backward pass) and the step's total, against dp (log-log)."""
    rows = []
    for dp, st in steps.items():
        for label, v in (("compute", st.compute_s), ("DP communication", st.comm_s["dp"]),
                         ("DP exposed", st.dp_exposed_s), ("step", st.total_s)):
            if v > 0:
                rows.append({"dp": dp, "time": label, "seconds": v})
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("dp:Q", scale=alt.Scale(type="log", base=2), title="data-parallel ranks dp"),
        y=alt.Y("seconds:Q", scale=alt.Scale(type="log"), title="seconds per step"),
        color=alt.Color("time:N", title=None,
                        sort=["step", "compute", "DP communication", "DP exposed"]),
        strokeDash=alt.condition(alt.datum.time == "step", alt.value([6, 3]), alt.value([1, 0])),
        tooltip=["time:N", "dp:Q", alt.Tooltip("seconds:Q", format=".3g")],
    ).properties(width=420, height=240, title=title)


def dp_plan_results(model: str | ModelConfig, hardware: str, dp: int, zero_stage: int, *,
                    global_batch: int = DP_WORKLOAD["global_batch"],
                    seq_len: int = DP_WORKLOAD["seq_len"],
                    micro_batch_size: int = DP_WORKLOAD["micro_batch_size"],
                    recompute: str = DP_WORKLOAD["recompute"]):
    """The library's memory and step time for a pure data-parallel plan (every GPU a dp rank):
    (``memory_per_gpu`` result, ``train_step_time`` result, HardwareSpec). The plan's
    micro-batches per rank are ``TrainWorkload.microbatches_per_rank``; the library rejects a
    batch that does not split evenly.

    Raises:
        ValueError: the library's, e.g. an unknown preset or a batch that does not divide.
    """
    m = model if isinstance(model, ModelConfig) else ModelConfig.preset(model)
    hw = hardware_preset(hardware)
    wl = TrainWorkload(global_batch=global_batch, seq_len=seq_len,
                       micro_batch_size=micro_batch_size)
    plan = ParallelPlan(dp=dp, zero_stage=zero_stage, recompute=recompute,
                        microbatches=wl.microbatches_per_rank(dp))
    return memory_per_gpu(m, plan, wl), train_step_time(m, hw, plan, wl), hw


def dp_summary_html(mem, step, hw) -> str:
    """A small HTML table of one plan's memory per GPU (against HBM) and step time parts."""
    fits = mem.total_bytes <= hw.hbm_bytes
    verdict = ("fits" if fits else "<b style='color:firebrick'>does not fit</b>")
    rows = "".join(f"<tr><td>{_PART_LABEL[k]}</td><td>{getattr(mem, k) / 1e9:,.2f} GB</td></tr>"
                   for k in MEMORY_PARTS)
    return (f"<table><tr><th>per GPU</th><th></th></tr>{rows}"
            f"<tr><th>total</th><th>{mem.total_bytes / 1e9:,.2f} GB</th></tr>"
            f"<tr><td>HBM of {html.escape(hw.name)}</td><td>{hw.hbm_bytes / 1e9:,.0f} GB: "
            f"{verdict}</td></tr>"
            f"<tr><td>compute</td><td>{step.compute_s:.3f} s</td></tr>"
            f"<tr><td>DP communication</td><td>{step.comm_s['dp']:.3f} s</td></tr>"
            f"<tr><td>DP exposed</td><td>{step.dp_exposed_s:.3f} s</td></tr>"
            f"<tr><th>step</th><th>{step.total_s:.3f} s</th></tr></table>")


def _time_chart(step, title: str):
    rows = [{"part": k, "seconds": v} for k, v in
            (("compute", step.compute_s), ("DP communication", step.comm_s["dp"]),
             ("DP exposed", step.dp_exposed_s), ("step", step.total_s))]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("part:N", sort=[r["part"] for r in rows], title=None),
        x=alt.X("seconds:Q", title="seconds per step"),
        color=alt.Color("part:N", sort=[r["part"] for r in rows], legend=None),
        tooltip=["part:N", alt.Tooltip("seconds:Q", format=".3f")],
    ).properties(width=420, height=110, title=title)


DP_OPTIONS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def dp_widget(**defaults):
    """Model, accelerator, dp, ZeRO stage, recomputation and global batch driving
    :func:`rlmperf_lite.cost.memory_per_gpu` and :func:`rlmperf_lite.cost.train_step_time` for a
    pure data-parallel plan: memory per GPU by component against the HBM, and the step's compute
    against its DP communication. Bad settings show the library's ValueError message."""
    import ipywidgets as w

    c = {"model": "qwen2.5-7b", "hardware": "h100-sxm", "dp": 8, "zero_stage": 3,
         **DP_WORKLOAD, **defaults}
    controls = {
        "model": w.Dropdown(options=model_presets(), value=c["model"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "dp": w.SelectionSlider(options=DP_OPTIONS, value=c["dp"], description="dp"),
        "zero_stage": w.Dropdown(options=[0, 1, 2, 3], value=c["zero_stage"],
                                 description="zero_stage"),
        "recompute": w.Dropdown(options=["none", "selective", "full"], value=c["recompute"],
                                description="recompute"),
        "global_batch": w.IntSlider(value=c["global_batch"], min=1, max=4096,
                                    description="batch (seqs)"),
        "seq_len": w.IntSlider(value=c["seq_len"], min=128, max=32768, step=128,
                               description="seq_len"),
    }

    def compute(kw):
        mem, step, hw = dp_plan_results(kw.pop("model"), kw.pop("hardware"), kw.pop("dp"),
                                        kw.pop("zero_stage"), **kw)
        return dp_summary_html(mem, step, hw), [alt.vconcat(
            state_bytes_chart({"per GPU": mem.as_dict()}, hbm_bytes=hw.hbm_bytes,
                              title="Memory per GPU (dashed: HBM)"),
            _time_chart(step, "One training step"))]

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])


DP_GRID = {"model": ("qwen2.5-7b", "llama-3.1-8b", "qwen2.5-32b", "llama-3.1-70b"),
           "hardware": ("h100-sxm", "h20", "b200"),
           "zero_stage": (0, 1, 2, 3),
           "dp": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)}


def dp_grid(grid: dict | None = None, **workload) -> list[dict]:
    """The calculator of :func:`dp_widget` over a grid (default ``DP_GRID``, workload
    :data:`DP_WORKLOAD` unless given): for each setting, rows of ``kind`` "memory" (``part`` a
    component, ``value`` bytes per GPU), "hbm" (the device's bytes) and "time" (``part``
    compute, DP communication, DP exposed or step; ``value`` seconds). Settings the library
    rejects give no rows."""
    grid = grid or DP_GRID
    keys = list(grid)
    rows = []
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        try:
            mem, step, hw = dp_plan_results(point["model"], point["hardware"], point["dp"],
                                            point["zero_stage"], **workload)
        except ValueError:
            continue
        rows += [{**point, "kind": "memory", "part": _PART_LABEL[k], "value": getattr(mem, k)}
                 for k in MEMORY_PARTS]
        rows.append({**point, "kind": "hbm", "part": "HBM", "value": hw.hbm_bytes})
        rows += [{**point, "kind": "time", "part": label, "value": v} for label, v in
                 (("compute", step.compute_s), ("DP communication", step.comm_s["dp"]),
                  ("DP exposed", step.dp_exposed_s), ("step", step.total_s))]
    return rows


def dp_grid_chart(rows: list[dict], *, start: dict | None = None,
                  title: str = "Data parallelism with ZeRO: memory and time per GPU"):
    """The no-kernel calculator: one dropdown per grid key (model, hardware, zero_stage, dp);
    above, the memory per GPU stacked by component with the device's HBM dashed; below, the
    step's compute, DP communication (all, and the exposed part) and total seconds.

    Raises:
        ValueError: empty ``rows`` (pass :func:`dp_grid`'s result).
    """
    if not rows:
        raise ValueError("rows is empty: pass dp_grid()'s result")
    controls = [k for k in rows[0] if k not in ("kind", "part", "value")]
    params, predicate = bound_controls(rows, controls, start)
    data = grid_data(rows, controls + ["kind", "part", "value"])
    base = alt.Chart(data).transform_filter(predicate)
    order = [_PART_LABEL[k] for k in MEMORY_PARTS]
    memory = base.transform_filter(alt.datum.kind == "memory").transform_calculate(
        part_order=f"indexof({order!r}, datum.part)").mark_bar().encode(
        x=alt.X("sum(value):Q", title="bytes per GPU (dashed: HBM)",
                axis=alt.Axis(format="~s")),
        color=alt.Color("part:N", sort=order, title=None),
        order=alt.Order("part_order:Q"),
        tooltip=["part:N", alt.Tooltip("value:Q", format=".4~s", title="bytes")])
    hbm = base.transform_filter(alt.datum.kind == "hbm").mark_rule(
        color="firebrick", strokeDash=[4, 3], size=2).encode(
        x="value:Q", tooltip=[alt.Tooltip("value:Q", format=".4~s", title="HBM bytes")])
    total = base.transform_filter(alt.datum.kind == "memory").transform_aggregate(
        total="sum(value)").transform_calculate(
        text="'total ' + format(datum.total, '.3~s') + 'B per GPU'").mark_text(
        align="left", x=0, y=-10, fontSize=12).encode(text="text:N")
    times = ["compute", "DP communication", "DP exposed", "step"]
    time = base.transform_filter(alt.datum.kind == "time").mark_bar().encode(
        y=alt.Y("part:N", sort=times, title=None),
        x=alt.X("value:Q", title="seconds per step"),
        color=alt.Color("part:N", sort=times, legend=None,
                        scale=alt.Scale(scheme="dark2")),
        tooltip=["part:N", alt.Tooltip("value:Q", format=".4~g", title="seconds")])
    return alt.vconcat(
        (memory + hbm + total).properties(width=440, height=50),
        time.properties(width=440, height=110),
    ).resolve_scale(color="independent").add_params(*params).properties(title=title)
