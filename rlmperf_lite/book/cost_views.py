"""Charts and the calculator of Part II's cost model (Chapter 4 lab). They display what
:mod:`rlmperf_lite.cost` computes and hold no formulas of their own."""
from __future__ import annotations

import html

import altair as alt

from .widgets import length_slider, wire
from ..cost import (ALGOS, estimate_rl_step, hardware_presets, resolve_hardware, model_presets,
                    roofline_time)

__all__ = ["roofline_chart", "phase_share_chart", "memory_chart", "estimate_table_html",
           "estimate_widget", "brent_chart", "rl_workdepth_widget", "step_time_chart"]


def roofline_chart(hardware, kernels: dict, *, dtype: str = "bf16",
                   title: str = "Roofline"):
    """Attainable FLOP/s against arithmetic intensity (log-log) for ``hardware``, with each
    kernel of ``kernels`` ({label: (flops, bytes)}) placed at its intensity and its roofline
    rate (flops / :func:`~rlmperf_lite.cost.roofline_time`)."""
    hw = resolve_hardware(hardware)
    peak, bw = hw.peak(dtype), hw.hbm_bandwidth_bytes_per_s
    xs = [10 ** (k / 4) for k in range(-8, 21)]
    roof = [{"intensity": x, "flops_per_s": min(peak, x * bw)} for x in xs]
    pts = []
    for label, (flops, moved) in kernels.items():
        r = roofline_time(flops, moved, hw, dtype=dtype)
        pts.append({"kernel": label, "intensity": r["intensity"],
                    "flops_per_s": flops / r["time_s"], "bound": r["bound"]})
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"),
              title="arithmetic intensity (FLOPs per byte)")
    y = alt.Y("flops_per_s:Q", scale=alt.Scale(type="log"), title="attainable FLOP/s")
    line = alt.Chart(alt.Data(values=roof)).mark_line(color="gray").encode(x=x, y=y)
    dots = alt.Chart(alt.Data(values=pts)).mark_point(size=80, filled=True).encode(
        x=x, y=y, color=alt.Color("kernel:N", title=None, sort=list(kernels)),
        shape=alt.Shape("bound:N"),
        tooltip=["kernel:N", "bound:N", alt.Tooltip("intensity:Q", format=".3g"),
                 alt.Tooltip("flops_per_s:Q", format=".3g")])
    return (line + dots).properties(width=460, height=260, title=f"{title}: {hw.name}, {dtype}")


def phase_share_chart(est, *, title: str = "Share of the step per phase"):
    """Each phase's share of the step's time and of its FLOPs (an
    :class:`~rlmperf_lite.cost.RLStepEstimate`)."""
    rows = []
    for p in est.phases:
        rows.append({"phase": p.name, "measure": "time", "share": p.time_s / est.time_s})
        rows.append({"phase": p.name, "measure": "FLOPs", "share": p.flops / est.flops})
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("share:Q", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1]),
                title="share of the step"),
        y=alt.Y("phase:N", sort=[p.name for p in est.phases], title=None),
        color=alt.Color("measure:N", title=None), yOffset="measure:N",
        tooltip=["phase:N", "measure:N", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=380, height=240, title=title)


def memory_chart(est, hardware, *, title: str = "Memory per GPU in each phase"):
    """Per-GPU memory of each phase, stacked by part (model states, weights, KV cache,
    activations), against the device's HBM (dashed)."""
    hw = resolve_hardware(hardware)
    rows = [{"phase": p.name, "part": k, "GB": v / 1e9} for p in est.phases
            for k, v in p.memory_parts.items()]
    bars = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("phase:N", sort=[p.name for p in est.phases], title=None),
        x=alt.X("sum(GB):Q", title="GB per GPU"), color=alt.Color("part:N", title=None),
        tooltip=["phase:N", "part:N", alt.Tooltip("GB:Q", format=".1f")])
    hbm = alt.Chart(alt.Data(values=[{"GB": hw.hbm_bytes / 1e9}])).mark_rule(
        color="firebrick", strokeDash=[4, 3]).encode(x="GB:Q")
    return (bars + hbm).properties(width=380, height=200, title=title)


def estimate_table_html(est) -> str:
    """An HTML table of an :class:`~rlmperf_lite.cost.RLStepEstimate`'s phases and totals."""
    rows = "".join(
        f"<tr><td>{p.name}</td><td>{p.model}</td><td>{p.flops:.3g}</td>"
        f"<td>{p.bytes_moved:.3g}</td><td>{p.time_s:.3f}</td><td>{p.bound}</td>"
        f"<td>{p.per_gpu_memory_bytes / 1e9:.1f}</td></tr>" for p in est.phases)
    fit = "" if est.fits else f"<p><b style='color:firebrick'>{html.escape(est.overflow)}</b></p>"
    return (f"<table><tr><th>phase</th><th>model</th><th>FLOPs</th><th>bytes</th>"
            f"<th>time (s)</th><th>bound</th><th>GB/GPU</th></tr>{rows}"
            f"<tr><th>step</th><th></th><th>{est.flops:.3g}</th><th></th>"
            f"<th>{est.time_s:.3f}</th><th></th><th></th></tr></table>"
            f"<p>generation: {est.generation_time_share:.0%} of the time, "
            f"{est.generation_flops_share:.0%} of the FLOPs; rollout replicas of "
            f"{est.rollout_tp} GPU</p>{fit}")


def estimate_widget(**defaults):
    """Dropdowns and sliders driving :func:`~rlmperf_lite.cost.estimate_rl_step` (model
    preset, accelerator, algorithm, B, G, P, R, GPUs, KL coefficient; defaults: the Chapter 4
    lab's step); bad combinations show the ValueError's message."""
    import ipywidgets as w

    c = {"actor": "qwen2.5-7b", "hardware": "h100-sxm", "algo": "grpo", "prompts": 32,
         "group_size": 16, "prompt_len": 512, "response_len": 4096, "gpus": 64,
         "kl_coef": 0.001, **defaults}
    controls = {
        "actor": w.Dropdown(options=model_presets(), value=c["actor"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "algo": w.Dropdown(options=list(ALGOS), value=c["algo"], description="algo"),
        "prompts": w.IntSlider(value=c["prompts"], min=1, max=1024, description="B prompts"),
        "group_size": w.IntSlider(value=c["group_size"], min=1, max=64, description="G group"),
        "prompt_len": w.IntSlider(value=c["prompt_len"], min=1, max=8192, description="P"),
        "response_len": length_slider(c["response_len"], "R"),
        "gpus": w.IntSlider(value=c["gpus"], min=1, max=1024, description="GPUs"),
        "kl_coef": w.FloatSlider(value=c["kl_coef"], min=0.0, max=0.1, step=0.001,
                                 readout_format=".3f", description="kl_coef"),
    }

    def compute(kw):
        est = estimate_rl_step(kw.pop("algo"), **kw)
        return estimate_table_html(est), [phase_share_chart(est)]

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])


def brent_chart(model_wd: dict, *, title: str = "Brent's bounds against processors"):
    """``model_wd``: {processors p: WorkDepth}. For each phase, the lower bound max(W/p, 𝒟)
    on its rounds against p (log-log): it falls as W/p until it meets the phase's depth."""
    rows = [{"p": p, "phase": ph.name, "rounds": ph.lower_rounds}
            for p, wd in model_wd.items() for ph in wd.phases if ph.work_flops > 0]
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("p:Q", scale=alt.Scale(type="log"), title="processors p"),
        y=alt.Y("rounds:Q", scale=alt.Scale(type="log"), title="max(W/p, 𝒟) rounds"),
        color=alt.Color("phase:N", title=None),
        tooltip=["phase:N", "p:Q", alt.Tooltip("rounds:Q", format=".3g")],
    ).properties(width=460, height=260, title=title)


def rl_workdepth_widget(**defaults):
    """Model, G, R and log10 p driving :func:`rlmperf_lite.cost.rl_step_workdepth` (GRPO,
    32 prompts, 512-token prompts): W, 𝒟, W/𝒟 and Brent's bound per phase; errors shown."""
    import ipywidgets as w

    from ..cost import rl_step_workdepth
    c = {"actor": "qwen2.5-7b", "group_size": 16, "response_len": 4096, "log10_p": 8.0,
         **defaults}
    controls = {
        "actor": w.Dropdown(options=model_presets(), value=c["actor"], description="model"),
        "group_size": w.IntSlider(value=c["group_size"], min=1, max=64, description="G group"),
        "response_len": length_slider(c["response_len"], "R"),
        "log10_p": w.FloatSlider(value=c["log10_p"], min=0, max=16, step=0.5,
                                 description="log10 p"),
    }

    def compute(kw):
        wd = rl_step_workdepth("grpo", actor=kw["actor"], hardware="h100", prompts=32,
                               group_size=kw["group_size"], prompt_len=512,
                               response_len=kw["response_len"], gpus=64,
                               processors=int(round(10 ** kw["log10_p"])))
        rows = "".join(f"<tr><td>{p.name}</td><td>{p.work_flops:.3g}</td>"
                       f"<td>{p.depth_rounds:.4g}</td><td>{p.parallelism:.3g}</td>"
                       f"<td>{p.brent_rounds:.3g}</td></tr>" for p in wd.phases)
        return ("<table><tr><th>phase</th><th>W (FLOPs)</th><th>𝒟 (rounds)</th>"
                f"<th>W/𝒟</th><th>W/p + 𝒟</th></tr>{rows}<tr><th>step</th>"
                f"<th>{wd.work_flops:.3g}</th><th>{wd.depth_rounds:.4g}</th><th></th>"
                f"<th>{wd.brent_rounds:.3g}</th></tr></table>"), ()

    message, _ = wire(controls, compute)
    return w.HBox([w.VBox(list(controls.values())), message])


def step_time_chart(estimates: dict, *, title: str = "Time of one step, by phase"):
    """``estimates``: {label: RLStepEstimate}. One stacked bar of phase times per label."""
    rows = [{"run": label, "phase": p.name, "seconds": p.time_s}
            for label, est in estimates.items() for p in est.phases if p.time_s > 0]
    order = list(dict.fromkeys(p.name for est in estimates.values() for p in est.phases))
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("run:N", sort=list(estimates), title=None),
        x=alt.X("sum(seconds):Q", title="seconds per step"),
        color=alt.Color("phase:N", sort=order, title=None),
        order=alt.Order("phase_order:Q"),
        tooltip=["run:N", "phase:N", alt.Tooltip("seconds:Q", format=".2f")],
    ).transform_calculate(
        phase_order=f"indexof({order!r}, datum.phase)"
    ).properties(width=440, height=30 * len(estimates) + 40, title=title)
