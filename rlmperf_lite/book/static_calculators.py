"""Calculators that work in the published page with no kernel (book Chapter 4 lab; issue:
a published book).

The library computes a grid of results at build time; the page's chart filters the grid with
its own dropdowns (Vega-Lite parameters bound to HTML controls), so the numbers shown are the
library's, single-sourced, and a reader can explore them in a plain browser, drawn by the Vega
bundle that the book serves itself (``book/_ext/offline_assets.py`` writes it from
vl-convert). Jupyter shows the chart's initial state.
"""
from __future__ import annotations

import hashlib
import itertools
import json

import altair as alt

from ..cost import estimate_rl_step

__all__ = ["estimate_grid", "estimate_calculator_chart", "static_chart", "static_chart_html"]

GRID = {"actor": ("qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b"),
        "hardware": ("h100-sxm", "h20", "b200"),
        "algo": ("grpo", "ppo"),
        "gpus": (8, 16, 32, 64, 128),
        "response_len": (1024, 2048, 4096, 8192, 16384),
        "group_size": (4, 8, 16)}
NUMERIC = ("gpus", "response_len", "group_size")


def estimate_grid(grid: dict = GRID, **fixed) -> list[dict]:
    """One row per phase of :func:`~rlmperf_lite.cost.estimate_rl_step` for every combination
    of ``grid`` (fixed arguments: 32 prompts of 512 tokens, kl_coef 0.001, unless given in
    ``fixed``). Settings the estimator rejects (e.g. GPUs that are not a multiple of the replica
    size) give no rows.

    Returns:
        dicts with the grid's keys, ``phase``, ``time_s``, ``flops``, ``per_gpu_memory_gb``,
        ``step_time_s``, ``generation_time_share`` and ``fits``.
    """
    base = {"prompts": 32, "prompt_len": 512, "kl_coef": 0.001, **fixed}
    keys = list(grid)
    rows = []
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        args = {**base, **point}
        try:
            est = estimate_rl_step(args.pop("algo"), **args)
        except ValueError:
            continue
        for p in est.phases:
            rows.append({**point, "phase": p.name, "time_s": p.time_s, "flops": p.flops,
                         "per_gpu_memory_gb": p.per_gpu_memory_bytes / 1e9,
                         "step_time_s": est.time_s,
                         "generation_time_share": est.generation_time_share,
                         "fits": est.fits})
    return rows


def bound_controls(rows: list[dict], controls: list[str], start: dict | None = None) -> tuple:
    """One dropdown per control, bound to a Vega-Lite parameter whose options are the values
    the rows hold, starting at ``start`` (else the first value). Returns (params, predicate):
    the parameters to add to a chart and the filter keeping the rows of the chosen setting."""
    start = start or {}
    params, predicate = [], None
    for k in controls:
        options = list(dict.fromkeys(r[k] for r in rows))
        p = alt.param(name=k, value=start.get(k, options[0]),
                      bind=alt.binding_select(options=options, name=f"{k} "))
        params.append(p)
        cond = alt.datum[k] == p
        predicate = cond if predicate is None else predicate & cond
    return params, predicate


def grid_csv(rows: list[dict], columns: list[str]) -> str:
    """``rows``' ``columns`` as CSV text, a header line then one line per row, floats to 4
    significant digits (what the no-kernel charts embed)."""
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    return "\n".join([",".join(columns)] + [",".join(cell(r[c]) for c in columns)
                                            for r in rows])


def grid_data(rows: list[dict], columns: list[str]) -> alt.InlineData:
    """``rows``' ``columns`` embedded in the chart as CSV (4 significant digits), the columns
    whose first value is a number parsed back as numbers (the controls' comparisons with the
    bound parameters need them numeric)."""
    numeric = {k: "number" for k in columns
               if isinstance(rows[0][k], (int, float)) and not isinstance(rows[0][k], bool)}
    return alt.InlineData(values=grid_csv(rows, columns),
                          format=alt.CsvDataFormat(type="csv", parse=numeric))


def estimate_calculator_chart(rows: list[dict], *, start: dict | None = None):
    """Bars of each phase's time for the setting chosen with the chart's own controls (model,
    GPU, algorithm, GPUs, response length, group size); the title line gives the step time and
    the share of generation (both summed from the phases shown). ``rows`` from
    :func:`estimate_grid`, embedded as CSV with times to 4 significant digits; ``start`` the
    initial setting (default: the first value of each control).

    Raises:
        ValueError: empty ``rows``.
    """
    if not rows:
        raise ValueError("rows is empty: pass estimate_grid()'s result")
    controls = [k for k in GRID if k in rows[0]]
    params, predicate = bound_controls(rows, controls, start)
    order = list(dict.fromkeys(r["phase"] for r in rows))
    columns = controls + ["phase", "time_s", "flops", "per_gpu_memory_gb"]
    data = alt.InlineData(values=grid_csv(rows, columns), format=alt.CsvDataFormat(
        type="csv", parse={**{k: "number" for k in NUMERIC if k in controls},
                           "time_s": "number", "flops": "number",
                           "per_gpu_memory_gb": "number"}))
    base = alt.Chart(data).transform_filter(predicate)
    bars = base.mark_bar().encode(
        y=alt.Y("phase:N", sort=order, title=None),
        x=alt.X("time_s:Q", title="seconds"),
        color=alt.Color("phase:N", sort=order, legend=None),
        tooltip=["phase:N", alt.Tooltip("time_s:Q", format=".3f"),
                 alt.Tooltip("flops:Q", format=".3g"),
                 alt.Tooltip("per_gpu_memory_gb:Q", format=".1f", title="GB per GPU")])
    label = base.transform_calculate(
        gen="indexof(datum.phase, 'rollout') === 0 ? datum.time_s : 0"
    ).transform_aggregate(step="sum(time_s)", gen="sum(gen)", n="count()",
                          mem="max(per_gpu_memory_gb)").transform_calculate(
        text="datum.n > 0 ? 'step ' + format(datum.step, '.2f') + ' s, generation ' + "
             "format(datum.gen / datum.step, '.0%') + ' of the time, peak ' + "
             "format(datum.mem, '.1f') + ' GB per GPU' : "
             "'no estimate for this setting (e.g. GPUs not a multiple of the replica size)'"
    ).mark_text(align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
    return (bars + label).add_params(*params).properties(
        width=440, height=220, title="One RL step, phase by phase (no kernel needed)")


def static_chart_html(chart) -> str:
    """The page output of :func:`static_chart`: a ``<div>`` holding the chart's initial state
    as static SVG (what Jupyter shows) and a script that replaces it, on page load, with the live
    chart drawn by the book's own Vega bundle (``_static/vega/vega-bundle.js``). The element id
    is derived from the spec, so the output is the same on every run."""
    import vl_convert as vlc
    spec = chart.to_dict()
    text = json.dumps(spec, sort_keys=True)
    div = "rlmperf-vega-" + hashlib.sha1(text.encode()).hexdigest()[:12]
    svg = vlc.vegalite_to_svg(spec)
    code = text.replace("</", "<\\/")              # no "</script>" inside the script
    return (f'<div id="{div}" class="rlmperf-static-chart">{svg}</div>\n'
            f'<script>window.addEventListener("load", function () {{ '
            f'vegaEmbed("#{div}", {code}, {{"actions": false, "renderer": "svg"}})'
            f'.then(function (r) {{ (window.rlmperfViews = window.rlmperfViews || {{}})'
            f'["{div}"] = r.view; }}); }});</script>')


def static_chart(chart):
    """``chart`` (an Altair chart with bound controls) as an HTML output that is interactive in
    the built page with no kernel (see :func:`static_chart_html`)."""
    from IPython.display import HTML
    return HTML(static_chart_html(chart))
