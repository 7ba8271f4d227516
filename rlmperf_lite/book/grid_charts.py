"""No-kernel calculators of Chapters 1, 3 and 5: the library evaluates its calculator over a
grid when the book is built, and the page's own controls pick a setting (see
:mod:`rlmperf_lite.book.static_calculators`, which draws them with the book's Vega bundle).
"""
from __future__ import annotations

import itertools

import altair as alt

from ..cost import rl_step_workdepth
from ..cost.variants import compare_variants
from ..cost.workdepth import grpo_step_workdepth
from .static_calculators import bound_controls, grid_data

__all__ = ["grid_chart", "grpo_workdepth_grid", "rl_workdepth_grid", "variant_cost_grid"]

LLAMA2_7B = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
                 intermediate_size=11008, mlp="swiglu")


def grid_points(grid: dict):
    """Every setting of ``grid`` ({name: values}) as a dict {name: value}, the last name
    varying fastest (the order of ``itertools.product``)."""
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        yield dict(zip(keys, values))


def grpo_workdepth_grid(grid: dict | None = None) -> list[dict]:
    """Chapter 1's calculator (:func:`~rlmperf_lite.cost.grpo_step_workdepth`,
    Llama-2-7B shape, P = 512) over a grid of B, G, R and log10 p: per phase, Brent's bounds
    max(W/p, 𝒟) and W/p + 𝒟 in rounds."""
    grid = grid or {"num_prompts": (8, 32, 128, 512), "group_size": (1, 4, 16, 64),
                    "response_len": (256, 1024, 4096, 16384), "log10_p": (0, 3, 6, 9, 12)}
    rows = []
    for point in grid_points(grid):
        args = {k: v for k, v in point.items() if k != "log10_p"}
        wd = grpo_step_workdepth(**LLAMA2_7B, prompt_len=512, processors=10 ** point["log10_p"],
                                 **args)
        for p in wd.phases:
            rows.append({**point, "phase": p.name, "lower": p.lower_rounds,
                         "brent": p.brent_rounds})
    return rows


def rl_workdepth_grid(grid: dict | None = None) -> list[dict]:
    """Chapter 5's calculator (:func:`rlmperf_lite.cost.rl_step_workdepth`, GRPO, 32 prompts of
    512 tokens, 64 H100s) over models, G, R and log10 p: per phase max(W/p, 𝒟) rounds."""
    grid = grid or {"actor": ("qwen2.5-7b", "llama-3.1-8b", "llama-3.1-70b"),
                    "group_size": (4, 8, 16, 64), "response_len": (1024, 4096, 16384),
                    "log10_p": (6, 9, 12, 15)}
    rows = []
    for point in grid_points(grid):
        wd = rl_step_workdepth("grpo", actor=point["actor"], hardware="h100", prompts=32,
                               group_size=point["group_size"], prompt_len=512,
                               response_len=point["response_len"], gpus=64,
                               processors=10 ** point["log10_p"])
        for p in wd.phases:
            if p.work_flops > 0:
                rows.append({**point, "phase": p.name, "lower": p.lower_rounds})
    return rows


def variant_cost_grid(grid: dict | None = None) -> list[dict]:
    """Chapter 3's calculator (:func:`~rlmperf_lite.cost.compare_variants`,
    Llama-2-7B shape, 32 prompts, P = 512, R = 4096) over the pass rate, G and the KL
    coefficient: per variant and measure (completions generated, model-state GB, work in FLOPs,
    depth in rounds) one value."""
    grid = grid or {"pass_rate": (0.2, 0.5, 0.8, 0.9, 0.95), "group_size": (4, 8, 16, 32),
                    "kl_coef": (0.0, 0.001)}
    rows = []
    for point in grid_points(grid):
        for c in compare_variants(**LLAMA2_7B, num_prompts=32, prompt_len=512,
                                  response_len=4096, **point):
            for measure, value in (("completions generated", c.samples_generated),
                                   ("model states (GB)", c.model_state_bytes / 1e9),
                                   ("work W (FLOPs)", c.workdepth.work_flops),
                                   ("depth (rounds)", c.workdepth.depth_rounds)):
                rows.append({**point, "variant": c.variant, "measure": measure,
                             "value": value})
    return rows


def grid_chart(rows: list[dict], *, controls: list[str], category: str, value: str,
               value_title: str, title: str, start: dict | None = None, log: bool = False,
               total: str | None = None):
    """Bars of ``value`` per ``category`` for the setting chosen with one bound dropdown per
    control; ``total`` (a label) adds a text line with the sum of the bars shown.

    Raises:
        ValueError: empty ``rows`` or a control missing from them.
    """
    if not rows:
        raise ValueError("rows is empty: pass a *_grid() result")
    missing = [k for k in controls + [category, value] if k not in rows[0]]
    if missing:
        raise ValueError(f"rows lack the columns {missing}")
    params, predicate = bound_controls(rows, controls, start)
    data = grid_data(rows, controls + [category, value])
    order = list(dict.fromkeys(r[category] for r in rows))
    base = alt.Chart(data).transform_filter(predicate)
    chart = base.mark_bar().encode(
        y=alt.Y(f"{category}:N", sort=order, title=None),
        # on a log axis bars must not stack (a stacked bar starts at 0, which a log scale
        # cannot place: zero-width bars) and start from 1 (values are rounds or counts >= 1)
        x=alt.X(f"{value}:Q", title=value_title,
                scale=alt.Scale(type="log", domainMin=1) if log else alt.Undefined,
                stack=None if log else alt.Undefined),
        color=alt.Color(f"{category}:N", sort=order, legend=None),
        tooltip=[f"{category}:N", alt.Tooltip(f"{value}:Q", format=".4~s")])
    if total:
        chart = chart + base.transform_aggregate(sum=f"sum({value})").transform_calculate(
            text=f"'{total} ' + format(datum.sum, '.4~s')").mark_text(
            align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
    return chart.add_params(*params).properties(width=440, height=200, title=title)
