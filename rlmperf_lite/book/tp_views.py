"""Views of Chapter 8 (tensor, sequence and context parallelism): bytes per rank by mesh axis,
the activation formulas per layer, Megatron's f and g on a split block, ring attention per rank
and step by step, step time against tp, the live calculator (ipywidgets) and its no-kernel twin
(a grid the library evaluates when the book is built). They take results of
:mod:`rlmperf_lite.parallel` and :mod:`rlmperf_lite.cost` and hold no formulas of their own.
"""
from __future__ import annotations

import html
import itertools

import altair as alt

from ..cost import (HardwareSpec, ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                    hardware_presets, memory_per_gpu, model_presets, train_step_time)
from .static_calculators import bound_controls, grid_data
from .widgets import wire

__all__ = ["TP_WORKLOAD", "TIME_PARTS", "shard_shapes_html", "tp_block_rows", "tp_block_chart",
           "bytes_by_axis_chart",
           "activation_chart", "ring_work_chart", "ring_steps_rows", "ring_steps_chart",
           "tp_scaling_chart", "tp_plan_results",
           "tp_summary_html", "tp_widget", "tp_grid", "tp_grid_chart"]

TP_WORKLOAD = {"gpus": 64, "global_batch": 512, "micro_batch_size": 1, "zero_stage": 1,
               "recompute": "selective"}
"""The calculators' default setting, Chapter 4's batch of 32 prompts x 16 samples (512
sequences) on 64 GPUs, one sequence per micro-batch, ZeRO-1 over the data-parallel ranks and
selective recomputation (the attention scores are not kept, as FlashAttention-style kernels
do)."""

TIME_PARTS = (("compute", "compute_s"), ("TP communication", "tp"),
              ("CP communication", "cp"), ("DP exposed", "dp_exposed_s"))
"""The parts of a step's time the chapter's charts show, as (label, TrainStepTime field, or key of
its ``comm_s``). With pp = 1 and a dense model they add up to ``total_s``."""


def _seconds(step, key: str) -> float:
    """One part of a :class:`~rlmperf_lite.cost.TrainStepTime` by its TIME_PARTS key."""
    return float(getattr(step, key)) if key.endswith("_s") else float(step.comm_s[key])


# ---- the toy demonstrations -----------------------------------------------------------------
def shard_shapes_html(shards_per_rank: list, block: int = 0) -> str:
    """A table of the shapes of block ``block``'s weights on each tp rank (from
    :func:`rlmperf_lite.parallel.shard_params_tp`), sharded and replicated alike."""
    names = [k for k in shards_per_rank[0] if k.startswith(f"h{block}.")]
    head = "<tr><th>weight</th>" + "".join(
        f"<th>rank {r}</th>" for r in range(len(shards_per_rank))) + "</tr>"
    rows = "".join(
        f"<tr><td><code>{html.escape(k)}</code></td>" + "".join(
            f"<td>{' x '.join(str(d) for d in s[k].shape)}</td>" for s in shards_per_rank)
        + "</tr>" for k in names)
    return f"<table>{head}{rows}</table>"


def _shape(a) -> str:
    return "(" + ", ".join(str(d) for d in a.shape) + ")"


def tp_block_rows(cache, log) -> list[dict]:
    """The boxes of Megatron's split block (Shoeybi et al. 2019, Fig. 3), from one run of
    :func:`~rlmperf_lite.parallel.tp_block_forward` (its ``cache``, without sequence
    parallelism) and :func:`~rlmperf_lite.parallel.tp_block_backward` (its group's ``log``,
    holding the block's four all-reduces: g of attention and of the MLP forward, f of the MLP
    and of attention backward). One row per box: ``block`` ("attention", "MLP"), ``column``
    (0 input, 1 f, 2 column-parallel, 3 row-parallel, 4 g, 5 output), ``rank`` (None for f and
    g, which span the ranks), ``lines`` (its label, with the rank's shapes from the cache's
    arrays) and ``bytes`` (f's and g's all-reduce, bytes per rank from the log).

    Raises:
        ValueError: a cache with sequence parallelism, or a log without the four all-reduces.
    """
    calls = [c for c in log.calls if c["op"] == "all_reduce"]
    if cache.get("sp") or len(calls) != 4 or len(log.calls) != 4:
        raise ValueError("cache and log must come from one tp_block_forward and tp_block_backward "
                         "without sp (four all-reduces in the log)")
    tp, ar = len(cache["att"]), [float(c["bytes_per_rank"][0]) for c in calls]
    rows = []
    for block, g_bytes, f_bytes in (("attention", ar[0], ar[3]), ("MLP", ar[1], ar[2])):
        rows += [{"block": block, "column": 1, "rank": None, "bytes": f_bytes,
                  "lines": ["f", "fwd: identity", "bwd: all-reduce", f"{f_bytes:,.0f} B per rank"]},
                 {"block": block, "column": 4, "rank": None, "bytes": g_bytes,
                  "lines": ["g", "fwd: all-reduce", f"{g_bytes:,.0f} B per rank", "bwd: identity"]}]
        for r in range(tp):
            x, wqkv, wo, q, y = (cache["att"][r][i] for i in (0, 1, 2, 3, 7))
            (_, w_up), (u, w_down) = cache["mlp"][r][0], cache["mlp"][r][2]
            col, row = ((["q, k, v of its heads", f"{_shape(q)} each", f"wqkv {_shape(wqkv)}"],
                         [f"y_{r} wo_{r}", f"partial sum {_shape(x)}",
                          f"y_{r} {_shape(y)}, wo {_shape(wo)}"])
                        if block == "attention" else
                        ([f"φ(X A_{r})", _shape(u), f"A_{r} = w_up {_shape(w_up)}"],
                         [f"φ(X A_{r}) B_{r}", f"partial sum {_shape(x)}",
                          f"B_{r} = w_down {_shape(w_down)}"]))
            rows += [{"block": block, "column": c, "rank": r, "bytes": None, "lines": lines}
                     for c, lines in ((0, ["X", _shape(x)]), (2, col), (3, row),
                                      (5, ["output", _shape(x)]))]
    return rows


def tp_block_chart(cache, log, *, title: str | None = None):
    """Megatron's f and g on the tp ranks of a block (:func:`tp_block_rows`), one panel per
    sub-block: each rank's tensors left to right, the column-parallel product, the
    row-parallel one giving a partial sum, f before and g after, spanning the ranks."""
    rows = tp_block_rows(cache, log)
    tp = 1 + max(r["rank"] for r in rows if r["rank"] is not None)
    width = {0: 0.8, 1: 1.1, 2: 1.5, 3: 1.5, 4: 1.1, 5: 0.8}
    left = {0: 0.0, 1: 1.0, 2: 2.3, 3: 4.0, 4: 5.7, 5: 7.0}
    for r in rows:
        r["x"], r["x2"] = left[r["column"]], left[r["column"]] + width[r["column"]]
        r["xc"] = r["x"] + width[r["column"]] / 2
        lo, hi = (0, tp - 1) if r["rank"] is None else (r["rank"], r["rank"])
        r["y"], r["y2"], r["yc"] = lo - 0.4, hi + 0.4, (lo + hi) / 2
        r["kind"] = "f, g (all-reduce)" if r["rank"] is None else \
            {0: "replicated", 5: "replicated", 2: "column-parallel", 3: "row-parallel"}[r["column"]]
    arrows = [{"block": b, "x": left[c] + width[c], "x2": left[c + 1], "y": k}
              for b in ("attention", "MLP") for c in range(5) for k in range(tp)]
    def x(field):
        return alt.X(f"{field}:Q", axis=None, scale=alt.Scale(domain=[-0.6, 7.9]))

    def y(field):
        return alt.Y(f"{field}:Q", axis=None, scale=alt.Scale(domain=[tp - 0.5, -0.5]))
    boxes = alt.Chart(alt.Data(values=rows)).mark_rect(cornerRadius=4, stroke="gray").encode(
        x=x("x"), x2="x2:Q", y=y("y"), y2="y2:Q", color=alt.Color("kind:N", title=None, scale=alt.Scale(
            domain=["replicated", "column-parallel", "row-parallel", "f, g (all-reduce)"],
            range=["#eeeeee", "#9ecae9", "#c7e9c0", "#fdd0a2"])))
    text = alt.Chart(alt.Data(values=rows)).mark_text(fontSize=10, lineHeight=12).encode(
        x=x("xc"), y=y("yc"), text="lines:N")
    links = alt.Chart(alt.Data(values=arrows)).mark_rule(color="gray").encode(
        x=x("x"), x2="x2:Q", y=y("y"))
    ranks = alt.Chart(alt.Data(values=[{"block": b, "rank": f"rank {k}", "y": k}
                                       for b in ("attention", "MLP") for k in range(tp)])
                      ).mark_text(align="right", dx=-4, fontSize=10).encode(
        x=alt.X("x:Q", axis=None, scale=alt.Scale(domain=[-0.6, 7.9])), y=y("y"),
        text="rank:N").transform_calculate(x="0")
    panels = [alt.layer(links.transform_filter(alt.datum.block == b),
                        boxes.transform_filter(alt.datum.block == b),
                        text.transform_filter(alt.datum.block == b),
                        ranks.transform_filter(alt.datum.block == b)).properties(
        width=640, height=95 * tp, title=b) for b in ("attention", "MLP")]
    return alt.vconcat(*panels).properties(
        title=title or f"Megatron's f and g on tp = {tp} ranks (one block of the toy model)"
    ).configure_view(stroke=None)


def bytes_by_axis_chart(bytes_by_axis: dict, *, title: str = "Bytes each rank sent in one step"):
    """``bytes_by_axis``: {axis: (world,) bytes per global rank} (``parallel_grpo_step``'s
    ``bytes_by_axis``). One bar per rank, stacked by mesh axis."""
    rows = [{"rank": f"rank {r}", "axis": axis, "bytes": float(b)}
            for axis, per_rank in bytes_by_axis.items() for r, b in enumerate(per_rank)]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("rank:N", title=None),
        x=alt.X("sum(bytes):Q", title="bytes sent", axis=alt.Axis(format="~s")),
        color=alt.Color("axis:N", title="axis", sort=list(bytes_by_axis)),
        tooltip=["rank:N", "axis:N", alt.Tooltip("bytes:Q", format=",.0f")],
    ).properties(width=420, height=30 * len(rows) // max(1, len(bytes_by_axis)) + 20,
                 title=title)


def activation_chart(per_layer: dict, *, title: str = "Activation bytes per layer per GPU"):
    """``per_layer``: {setting label: bytes} (e.g. ``activation_bytes_per_layer`` results). One
    bar per setting, in the given order, on a log axis."""
    rows = [{"setting": k, "bytes": float(v)} for k, v in per_layer.items()]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("setting:N", sort=list(per_layer), title=None),
        x=alt.X("bytes:Q", scale=alt.Scale(type="log", domainMin=1), stack=None,
                title="bytes per layer (log)", axis=alt.Axis(format="~s")),
        tooltip=["setting:N", alt.Tooltip("bytes:Q", format=".4~s")],
    ).properties(width=420, height=28 * len(rows) + 20, title=title)


def ring_work_chart(work: dict, *, title: str = "Causal attention blocks each rank computes"):
    """``work``: {layout: (cp,) blocks per rank} (``ring_attention_work`` or a forward pass's
    ``cache["work"]``). Grouped bars per rank; the slowest rank sets the pace."""
    rows = [{"rank": r, "layout": layout, "blocks": float(b)}
            for layout, per_rank in work.items() for r, b in enumerate(per_rank)]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("rank:O", title="cp rank", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("layout:N", sort=list(work)),
        y=alt.Y("blocks:Q", title="(T/cp)² score blocks"),
        color=alt.Color("layout:N", sort=list(work), title=None),
        tooltip=["layout:N", "rank:O", alt.Tooltip("blocks:Q", format=".2f")],
    ).properties(width=360, height=200, title=title)


def ring_steps_rows(caches: dict) -> list[dict]:
    """``caches``: {layout: the cache of :func:`~rlmperf_lite.parallel.ring_attention_forward`}
    (``cache["ring"]`` of ``cp_attention_forward``). One row per layout, ring step and rank:
    ``layout``, ``step``, ``rank``, ``kv_owner`` (whose K/V chunk the rank holds then, from
    ``cache["kv_owner"]``), ``blocks`` (the (T/cp)^2 score blocks it computes against it,
    ``cache["work_by_step"]``: 1, a half with zigzag, 0 where the causal mask hides the whole
    chunk) and ``rank_blocks`` (its total over the steps, ``cache["work"]``).

    Raises:
        ValueError: ``caches`` empty, or a cache without the per-step arrays.
    """
    if not isinstance(caches, dict) or not caches:
        raise ValueError("caches must be a non-empty {layout: ring_attention_forward cache}")
    rows = []
    for layout, c in caches.items():
        if not isinstance(c, dict) or "work_by_step" not in c or "kv_owner" not in c:
            raise ValueError(f"caches[{layout!r}] must be the cache ring_attention_forward "
                             f"returns (with work_by_step and kv_owner)")
        cp = len(c["work"])
        rows += [{"layout": layout, "step": step, "rank": r,
                  "kv_owner": int(c["kv_owner"][step, r]),
                  "blocks": float(c["work_by_step"][step, r]),
                  "rank_blocks": float(c["work"][r])}
                 for step in range(cp) for r in range(cp)]
    return rows


def ring_steps_chart(caches: dict, *, title: str = "Ring attention step by step"):
    """A rank x step grid per layout (:func:`ring_steps_rows`): each cell names the K/V chunk
    the rank holds at that step and is shaded by the score blocks it computes against it; the
    label at each row's end is the rank's total, the slowest rank sets the pace."""
    rows = ring_steps_rows(caches)
    for r in rows:
        r["cell"] = f"K/V {r['kv_owner']}"
        r["total"] = f"{r['rank_blocks']:g} block{'' if r['rank_blocks'] == 1 else 's'}"
    last = max(r["step"] for r in rows)
    y = alt.Y("rank:O", title="cp rank")
    base = alt.Chart()
    cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
        x=alt.X("step:O", title="ring step", axis=alt.Axis(labelAngle=0)), y=y,
        color=alt.Color("blocks:Q", title="blocks computed", scale=alt.Scale(
            domain=[0, 1], range=["#f7f7f7", "#3182bd"])),
        tooltip=["layout:N", "step:O", "rank:O", "kv_owner:O",
                 alt.Tooltip("blocks:Q", format=".2f")])
    text = base.mark_text(fontSize=11).encode(
        x="step:O", y=y, text="cell:N",
        color=alt.condition(alt.datum.blocks > 0.6, alt.value("white"), alt.value("black")))
    totals = base.mark_text(align="left", dx=36, fontSize=11).encode(
        x="step:O", y=y, text="total:N").transform_filter(alt.datum.step == last)
    return alt.layer(cells, text, totals, data=alt.Data(values=rows)).properties(
        width=56 * (last + 1), height=34 * (last + 1)).facet(
        column=alt.Column("layout:N", title=None, sort=list(caches),
                          header=alt.Header(labelFontSize=12))).properties(title=title)


def tp_scaling_chart(steps: dict, *, title: str = "One training step against tp"):
    """``steps``: {label (e.g. tp): TrainStepTime}. One bar per label, stacked by
    :data:`TIME_PARTS`; the bar's length is the step's ``total_s`` (pp = 1, dense model)."""
    order = [label for label, _ in TIME_PARTS]
    rows = [{"setting": str(k), "part": label, "seconds": _seconds(st, key)}
            for k, st in steps.items() for label, key in TIME_PARTS]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("setting:N", sort=[str(k) for k in steps], title=None),
        x=alt.X("sum(seconds):Q", title="seconds per step"),
        color=alt.Color("part:N", sort=order, title=None),
        order=alt.Order("part_order:Q"),
        tooltip=["setting:N", "part:N", alt.Tooltip("seconds:Q", format=".3f")],
    ).transform_calculate(part_order=f"indexof({order!r}, datum.part)").properties(
        width=420, height=30 * len(steps) + 20, title=title)


# ---- the calculators -------------------------------------------------------------------------
def tp_plan_results(model: str | ModelConfig, hardware: str | HardwareSpec, tp: int,
                    sp: bool, cp: int, seq_len: int, *, gpus: int = TP_WORKLOAD["gpus"],
                    global_batch: int = TP_WORKLOAD["global_batch"],
                    micro_batch_size: int = TP_WORKLOAD["micro_batch_size"],
                    zero_stage: int = TP_WORKLOAD["zero_stage"],
                    recompute: str = TP_WORKLOAD["recompute"]):
    """The library's memory and step time for a plan of ``gpus`` GPUs split into tp x cp
    model-parallel groups and dp = gpus // (tp x cp) data-parallel ranks (``hardware`` a preset
    name or a HardwareSpec):
    (``memory_per_gpu`` result, ``train_step_time`` result, HardwareSpec). Every rule of
    :meth:`~rlmperf_lite.cost.ParallelPlan.check` is applied, with the GPU count and the node size.

    Raises:
        ValueError: the library's, e.g. tp not dividing the KV heads, tp above the node size,
            sp without tp, a GPU count or batch that does not split.
    """
    m = model if isinstance(model, ModelConfig) else ModelConfig.preset(model)
    hw = hardware if isinstance(hardware, HardwareSpec) else hardware_preset(hardware)
    wl = TrainWorkload(global_batch=global_batch, seq_len=seq_len,
                       micro_batch_size=micro_batch_size)
    dp = max(1, gpus // (tp * cp))
    plan = ParallelPlan(dp=dp, tp=tp, cp=cp, sp=sp, zero_stage=zero_stage, recompute=recompute,
                        microbatches=wl.microbatches_per_rank(dp))
    plan.validate(m, hw, gpus, wl)
    return memory_per_gpu(m, plan, wl), train_step_time(m, hw, plan, wl), hw


def tp_summary_html(mem, step, hw) -> str:
    """A small HTML table of one plan's step time parts and memory per GPU (against HBM)."""
    fits = mem.total_bytes <= hw.hbm_bytes
    verdict = "fits" if fits else "<b style='color:firebrick'>does not fit</b>"
    times = "".join(f"<tr><td>{label}</td><td>{_seconds(step, key):.3f} s</td></tr>"
                    for label, key in TIME_PARTS)
    states = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
    return (f"<table><tr><th>per GPU</th><th></th></tr>{times}"
            f"<tr><th>step</th><th>{step.total_s:.3f} s</th></tr>"
            f"<tr><td>model states</td><td>{states / 1e9:,.2f} GB</td></tr>"
            f"<tr><td>activations</td><td>{mem.activation_bytes / 1e9:,.2f} GB</td></tr>"
            f"<tr><th>memory</th><th>{mem.total_bytes / 1e9:,.2f} GB</th></tr>"
            f"<tr><td>HBM of {html.escape(hw.name)}</td><td>{hw.hbm_bytes / 1e9:,.0f} GB: "
            f"{verdict}</td></tr></table>")


def _memory_chart(mem, hw, title: str):
    order = ["model states", "activations"]
    rows = [{"part": "model states",
             "GB": (mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes) / 1e9},
            {"part": "activations", "GB": mem.activation_bytes / 1e9}]
    bars = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("sum(GB):Q", title="GB per GPU (dashed: HBM)"),
        color=alt.Color("part:N", sort=order, title=None, scale=alt.Scale(scheme="dark2")),
        order=alt.Order("part_order:Q"),
        tooltip=["part:N", alt.Tooltip("GB:Q", format=".2f")],
    ).transform_calculate(part_order=f"indexof({order!r}, datum.part)")
    hbm = alt.Chart(alt.Data(values=[{"GB": hw.hbm_bytes / 1e9}])).mark_rule(
        color="firebrick", strokeDash=[4, 3], size=2).encode(x="GB:Q")
    return (bars + hbm).properties(width=420, height=40, title=title)


TP_OPTIONS = (1, 2, 4, 8, 16)
CP_OPTIONS = (1, 2, 4, 8, 16)
SEQ_OPTIONS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
GPU_OPTIONS = (8, 16, 32, 64, 128, 256, 512, 1024)


def tp_widget(**defaults):
    """Model, accelerator, tp, sequence parallelism, cp, sequence length and GPUs driving
    :func:`tp_plan_results`: the step's compute against its TP and CP communication (and the
    exposed DP traffic), and the memory per GPU against the HBM. Bad settings show the
    library's ValueError message."""
    import ipywidgets as w

    c = {"model": "llama-3.1-70b", "hardware": "h100-sxm", "tp": 8, "sp": True, "cp": 1,
         "seq_len": 4096, "gpus": TP_WORKLOAD["gpus"], **defaults}
    controls = {
        "model": w.Dropdown(options=model_presets(), value=c["model"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "tp": w.SelectionSlider(options=TP_OPTIONS, value=c["tp"], description="tp"),
        "sp": w.Checkbox(value=c["sp"], description="sequence parallel"),
        "cp": w.SelectionSlider(options=CP_OPTIONS, value=c["cp"], description="cp"),
        "seq_len": w.SelectionSlider(options=SEQ_OPTIONS, value=c["seq_len"],
                                     description="seq_len"),
        "gpus": w.SelectionSlider(options=GPU_OPTIONS, value=c["gpus"], description="GPUs"),
    }

    def compute(kw):
        mem, step, hw = tp_plan_results(kw["model"], kw["hardware"], kw["tp"], kw["sp"],
                                        kw["cp"], kw["seq_len"], gpus=kw["gpus"])
        return tp_summary_html(mem, step, hw), [alt.vconcat(
            tp_scaling_chart({"this plan": step}, title="One training step"),
            _memory_chart(mem, hw, "Memory per GPU")).resolve_scale(color="independent")]

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])


TP_GRID = {"model": ("qwen2.5-7b", "llama-3.1-8b", "qwen2.5-32b", "llama-3.1-70b"),
           "tp": (1, 2, 4, 8), "sp": ("off", "on"), "cp": (1, 2, 4, 8),
           "seq_len": (4096, 8192, 16384, 32768)}


def tp_grid(grid: dict | None = None, *, hardware: str | HardwareSpec = "h100-sxm",
            **workload) -> list[dict]:
    """The calculator of :func:`tp_widget` over a grid (default ``TP_GRID``: model, tp,
    sp "off"/"on", cp, seq_len; ``workload`` keywords of :func:`tp_plan_results`). For each
    setting, rows of ``kind`` "time" (``part`` a :data:`TIME_PARTS` label, ``value`` seconds),
    "total" (the step's seconds), "memory" (``part`` model states or activations, ``value``
    bytes per GPU) and "hbm". A setting the library rejects gives an "error" row whose
    ``part`` is the library's message (commas turned into semicolons for the CSV), and the
    other rows with value 0 (the chart then shows empty bars and the message)."""
    grid = grid or TP_GRID
    hbm_bytes = (hardware if isinstance(hardware, HardwareSpec)
                 else hardware_preset(hardware)).hbm_bytes
    keys = list(grid)
    rows = []
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        try:
            mem, step, hw = tp_plan_results(point["model"], hardware, point["tp"],
                                            point["sp"] == "on", point["cp"], point["seq_len"],
                                            **workload)
        except ValueError as err:
            msg = str(err).split(": ", 1)[-1] if str(err).startswith("invalid") else str(err)
            rows.append({**point, "kind": "error", "part": msg.replace(",", ";"), "value": 0.0})
            # empty bars keep the chart's layout (a layer with no rows has no size in Vega)
            rows += [{**point, "kind": kind, "part": part, "value": 0.0} for kind, part in
                     [("time", label) for label, _ in TIME_PARTS] + [("total", "step")] +
                     [("memory", "model states"), ("memory", "activations")]]
            rows.append({**point, "kind": "hbm", "part": "HBM", "value": hbm_bytes})
            continue
        rows += [{**point, "kind": "time", "part": label, "value": _seconds(step, key)}
                 for label, key in TIME_PARTS]
        rows.append({**point, "kind": "total", "part": "step", "value": step.total_s})
        rows += [{**point, "kind": "memory", "part": "model states",
                  "value": mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes},
                 {**point, "kind": "memory", "part": "activations",
                  "value": mem.activation_bytes},
                 {**point, "kind": "hbm", "part": "HBM", "value": hw.hbm_bytes}]
    return rows


def tp_grid_chart(rows: list[dict], *, start: dict | None = None,
                  title: str = "Tensor, sequence and context parallelism: time and memory "
                               "per GPU"):
    """The no-kernel calculator: one dropdown per grid key; a text line with the step's
    seconds (or the library's message for a rejected setting), the step's parts as bars, and
    the memory per GPU stacked (model states, activations) with the device's HBM dashed.

    Raises:
        ValueError: empty ``rows`` (pass :func:`tp_grid`'s result).
    """
    if not rows:
        raise ValueError("rows is empty: pass tp_grid()'s result")
    controls = [k for k in rows[0] if k not in ("kind", "part", "value")]
    params, predicate = bound_controls(rows, controls, start)
    data = grid_data(rows, controls + ["kind", "part", "value"])
    base = alt.Chart(data).transform_filter(predicate)
    text = base.transform_calculate(
        step="datum.kind === 'total' ? datum.value : 0",
        mem="datum.kind === 'memory' ? datum.value : 0",
        err="datum.kind === 'error' ? datum.part : ''").transform_aggregate(
        step="sum(step)", mem="sum(mem)", err="max(err)").transform_calculate(
        text="datum.err ? 'rejected: ' + datum.err : 'step ' + format(datum.step, '.3~f') + "
             "' s; ' + format(datum.mem / 1e9, '.1f') + ' GB per GPU'").mark_text(
        align="left", x=0, y=-8, fontSize=11, limit=520).encode(text="text:N")
    order = [label for label, _ in TIME_PARTS]
    time = base.transform_filter(alt.datum.kind == "time").mark_bar().encode(
        y=alt.Y("part:N", sort=order, title=None),
        x=alt.X("value:Q", title="seconds per step"),
        color=alt.Color("part:N", sort=order, legend=None),
        tooltip=["part:N", alt.Tooltip("value:Q", format=".4~g", title="seconds")])
    parts = ["model states", "activations"]
    memory = base.transform_filter(alt.datum.kind == "memory").transform_calculate(
        part_order=f"indexof({parts!r}, datum.part)").mark_bar().encode(
        x=alt.X("sum(value):Q", title="bytes per GPU (dashed: HBM)",
                axis=alt.Axis(format="~s")),
        color=alt.Color("part:N", sort=parts, title=None, scale=alt.Scale(scheme="dark2")),
        order=alt.Order("part_order:Q"),
        tooltip=["part:N", alt.Tooltip("value:Q", format=".4~s", title="bytes")])
    hbm = base.transform_filter(alt.datum.kind == "hbm").mark_rule(
        color="firebrick", strokeDash=[4, 3], size=2).encode(
        x="value:Q", tooltip=[alt.Tooltip("value:Q", format=".4~s", title="HBM bytes")])
    return alt.vconcat(
        (time + text).properties(width=440, height=110),
        (memory + hbm).properties(width=440, height=40),
    ).resolve_scale(color="independent").add_params(*params).properties(title=title)
