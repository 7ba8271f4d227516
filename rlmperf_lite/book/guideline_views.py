"""Views of Chapter 13's guidelines (sizing an RL system): tables and charts of the results of
:mod:`rlmperf_lite.sim.sizing`, its live widget and its no-kernel grid. No maths here: every
number shown is a field or property of a library result."""
from __future__ import annotations

import itertools

import altair as alt

from ..sim.sizing import (EXAMPLE, best_split, example_workload, simulate_placement,
                          split_candidates)
from .async_views import staleness_chart  # noqa: F401 (one home; Lab 13 imports it here)
from .grid_charts import grid_chart
from .widgets import wire

__all__ = ["placement_table_html", "engine_tp_table_html", "sync_table_html",
           "split_search_chart", "idle_chart",
           "gain_chart", "scaling_chart", "group_size_chart", "toy_group_chart",
           "sizing_widget", "guideline_grid", "guideline_grid_chart", "GUIDELINE_GRID"]


def _split_label(p) -> str:
    return "colocated" if p.placement == "colocated" else \
        f"{p.rollout_gpus}:{p.train_gpus}"


def placement_table_html(points) -> str:
    """An HTML table of :class:`~rlmperf_lite.sim.sizing.PlacementResult` rows."""
    head = ("<tr><th>system</th><th>rollout : train GPUs</th><th>engine tp × replicas</th>"
            "<th>step (s)</th><th>tokens/s/GPU</th><th>rollout idle</th><th>train idle</th>"
            "<th>rollout time (s)</th><th>train time (s)</th><th>mean staleness</th></tr>")
    rows = "".join(
        f"<tr><td>{p.name}</td><td>{_split_label(p)}</td><td>{p.engine_tp} × {p.replicas}</td>"
        f"<td>{p.step_time_s:,.1f}</td>"
        f"<td>{p.throughput_tokens_per_s_per_gpu:,.0f}</td><td>{p.rollout_idle:.0%}</td>"
        f"<td>{p.train_idle:.0%}</td><td>{p.rollout_time_s:,.1f}</td>"
        f"<td>{p.train_time_s:,.1f}</td><td>{p.mean_staleness:.2f}</td></tr>" for p in points)
    return f"<table>{head}{rows}</table>"


def engine_tp_table_html(points) -> str:
    """An HTML table of :func:`~rlmperf_lite.sim.sizing.engine_tp_sweep` rows: the engine's
    tp and replicas, Brent's bounds on one batch's generation (W/p and D), the simulated
    generation, the train time, the sync and a switch, and the step."""
    head = ("<tr><th>engine tp</th><th>replicas</th><th>generation W/p (s)</th>"
            "<th>generation D (s)</th><th>generation, simulated (s)</th><th>train time (s)</th>"
            "<th>sync (s)</th><th>switch (s)</th><th>step (s)</th><th>tokens/s/GPU</th></tr>")
    rows = "".join(
        f"<tr><td>{p.engine_tp}</td><td>{p.replicas}</td><td>{p.generation_work_s:.1f}</td>"
        f"<td>{p.generation_depth_s:.1f}</td><td>{p.rollout_time_s:.1f}</td>"
        f"<td>{p.train_time_s:.1f}</td><td>{p.weight_sync_s:.2f}</td>"
        f"<td>{p.system.switch_s:.2f}</td><td>{p.step_time_s:.1f}</td>"
        f"<td>{p.throughput_tokens_per_s_per_gpu:,.0f}</td></tr>" for p in points)
    return f"<table>{head}{rows}</table>"


def sync_table_html(rows, fit=None) -> str:
    """An HTML table of :func:`~rlmperf_lite.sim.sizing.weight_sync_against_verl` rows: the
    bandwidth bound, the mechanism model without and with the checkpoint engine, and verl's
    measurements. ``fit``: the rows of :func:`~rlmperf_lite.cost.calibrate_weight_sync`, to
    mark each modelled value as fitted to its measurement or held out."""
    marks = {r["model"]: r for r in fit or ()}

    def mech(r, key, held):
        m = marks.get(r["model"])
        tag = "" if m is None else (" (held out)" if m[held] else " (fitted)")
        return f"<td>{r[key]:.2f}{tag}</td>"

    head = ("<tr><th>model</th><th>trainer : rollout ranks</th><th>bandwidth bound (s)</th>"
            "<th>mechanism (s)</th><th>verl measured (s)</th>"
            "<th>mechanism, checkpoint engine (s)</th>"
            "<th>verl measured, checkpoint engine (s)</th></tr>")
    body = "".join(
        f"<tr><td>{r['model']}</td><td>{r['trainer_ranks']}:{r['rollout_ranks']}</td>"
        f"<td>{r['bandwidth_s']:.2f}</td>{mech(r, 'modelled_s', 'held_out')}"
        f"<td>{r['measured_s']:.2f}</td>"
        f"{mech(r, 'modelled_checkpoint_engine_s', 'held_out_checkpoint_engine')}"
        f"<td>{r['measured_checkpoint_engine_s']:.2f}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def split_search_chart(search, *, title: str = "Step time against the rollout pool's size"):
    """Simulated step time of each split of a :class:`~rlmperf_lite.sim.sizing.SplitSearch`,
    with each split's rollout time (one batch, the pool to itself) and train time (one step),
    and the colocated step time dashed."""
    rows = []
    for p in search.points:
        for series, v in (("step time (simulated)", p.step_time_s),
                          ("rollout time (one batch alone)", p.rollout_time_s),
                          ("train time (one step)", p.train_time_s)):
            rows.append({"rollout_gpus": p.rollout_gpus, "series": series, "seconds": v})
    lines = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("rollout_gpus:Q", title="rollout GPUs (the rest train)"),
        y=alt.Y("seconds:Q", title="seconds", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["rollout_gpus:Q", "series:N", alt.Tooltip("seconds:Q", format=".1f")])
    layers = [lines]
    if search.colocated is not None:
        rule = alt.Chart(alt.Data(values=[{"seconds": search.colocated.step_time_s,
                                           "label": "colocated step"}])).mark_rule(
            strokeDash=[6, 4], color="black").encode(y="seconds:Q", tooltip=["label:N"])
        layers.append(rule)
    return alt.layer(*layers).properties(width=440, height=240, title=title)


def idle_chart(search, *, title: str = "Idle share of each pool (verl's idle ratios)"):
    """Rollout and training pools' idle shares for each split of a search."""
    rows = [{"rollout_gpus": p.rollout_gpus, "pool": pool, "idle": v}
            for p in search.points
            for pool, v in (("rollout", p.rollout_idle), ("train", p.train_idle))]
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("rollout_gpus:Q", title="rollout GPUs"),
        y=alt.Y("idle:Q", title="idle share", axis=alt.Axis(format="%")),
        color=alt.Color("pool:N", title="pool"),
        tooltip=["rollout_gpus:Q", "pool:N", alt.Tooltip("idle:Q", format=".1%")]
    ).properties(width=440, height=200, title=title)


def gain_chart(values, searches, *, param: str,
               title: str = "Colocated step over the best split's"):
    """:attr:`~rlmperf_lite.sim.sizing.SplitSearch.gain` for each value of ``param``, with the
    break-even line at 1."""
    rows = [{param: v, "gain": s.gain} for v, s in zip(values, searches)]
    points = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X(f"{param}:Q", title=param), y=alt.Y("gain:Q", title="gain (> 1: disaggregate)"),
        tooltip=[f"{param}:Q", alt.Tooltip("gain:Q", format=".3f")])
    one = alt.Chart(alt.Data(values=[{"gain": 1.0}])).mark_rule(strokeDash=[6, 4]).encode(
        y="gain:Q")
    return (points + one).properties(width=360, height=200, title=title)


def scaling_chart(values, searches, *, param: str = "gpus",
                  title: str = "Step time: colocated and the best split"):
    """Colocated and best disaggregated step times for each value of ``param`` (log axes)."""
    rows = []
    for v, s in zip(values, searches):
        rows += [{param: v, "system": "colocated (sync)", "step_time_s": s.colocated.step_time_s},
                 {param: v, "system": "best split (async)", "step_time_s": s.best.step_time_s}]
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X(f"{param}:Q", title=param, scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=list(values))),
        y=alt.Y("step_time_s:Q", title="seconds per step", scale=alt.Scale(type="log")),
        color=alt.Color("system:N", title=None),
        tooltip=[f"{param}:Q", "system:N", alt.Tooltip("step_time_s:Q", format=".1f")]
    ).properties(width=360, height=220, title=title)


def group_size_chart(points, *, title: str = "Group size at a fixed number of samples per step"):
    """Left: step time of each system per group size G; right: the expected wait of a group,
    E[longest of G response lengths]."""
    rows = [{"G": p.group_size, "system": k, "step_time_s": r.step_time_s}
            for p in points for k, r in p.results.items()]
    sizes = [p.group_size for p in points]
    steps = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("G:Q", title="group size G", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sizes)),
        y=alt.Y("step_time_s:Q", title="seconds per step"),
        color=alt.Color("system:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["G:Q", "system:N", alt.Tooltip("step_time_s:Q", format=".1f")]
    ).properties(width=300, height=220, title="Step time")
    wait = alt.Chart(alt.Data(values=[{"G": p.group_size, "tokens": p.expected_wait_tokens}
                                      for p in points])).mark_line(point=True).encode(
        x=alt.X("G:Q", title="group size G", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sizes)),
        y=alt.Y("tokens:Q", title="E[longest of G] (tokens)"),
        tooltip=["G:Q", alt.Tooltip("tokens:Q", format=",.0f")]
    ).properties(width=220, height=220, title="A group's wait")
    return alt.hconcat(steps, wait).properties(title=title)


def toy_group_chart(rows, *, title: str = "The toy: a group's longest completion"):
    """``rows`` of {"G", "measured", "independent"}: the mean longest completion of groups of
    G (measured) and E[max of G] of the same lengths drawn independently."""
    long = [{"G": r["G"], "series": s, "tokens": r[k]} for r in rows
            for s, k in (("measured (groups of one prompt)", "measured"),
                         ("independent draws, E[max of G]", "independent"))]
    return alt.Chart(alt.Data(values=long)).mark_line(point=True).encode(
        x=alt.X("G:Q", title="group size G", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("tokens:Q", title="tokens", scale=alt.Scale(zero=False)),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["G:Q", "series:N", alt.Tooltip("tokens:Q", format=".3f")]
    ).properties(width=360, height=200, title=title)


WIDGET_MODELS = ("qwen2.5-7b", "qwen2.5-32b", "llama-3.1-8b", "qwen2.5-72b")


def sizing_widget(**defaults):
    """Model, GPU type, GPUs, the response-length tail (log-normal sigma), the staleness
    bound and the engine's replica size (the smallest that fits, or ``engine_tp="best"`` on
    every system) driving :func:`~rlmperf_lite.sim.sizing.best_split` on the example's step
    (:func:`~rlmperf_lite.sim.sizing.example_workload`): the colocated system, the best and
    the balanced split in a table, and the step time of every split tried. Bad settings (a
    model whose training states do not fit the GPUs left) show the library's ValueError."""
    import ipywidgets as w

    c = {"actor": EXAMPLE["actor"], "hardware": EXAMPLE["hardware"], "gpus": EXAMPLE["gpus"],
         "length_sigma": 1.0, "staleness": 0.5, "engine_tp": "smallest", **defaults}
    controls = {
        "actor": w.Dropdown(options=WIDGET_MODELS, value=c["actor"], description="model"),
        "hardware": w.Dropdown(options=("h20", "h100-sxm"), value=c["hardware"],
                               description="GPU"),
        "gpus": w.Dropdown(options=(8, 16, 32, 64, 128), value=c["gpus"], description="GPUs"),
        "length_sigma": w.FloatSlider(value=c["length_sigma"], min=0.0, max=1.5, step=0.25,
                                      description="length tail σ"),
        "staleness": w.Dropdown(options=(0.0, 0.1, 0.25, 0.5, 1.0, 2.0), value=c["staleness"],
                                description="staleness"),
        "engine_tp": w.Dropdown(options=("smallest", "best"), value=c["engine_tp"],
                                description="engine tp"),
    }

    def compute(kw):
        search = best_split(kw["actor"], kw["hardware"], example_workload(kw["length_sigma"]),
                            kw["gpus"], staleness=kw["staleness"], count=6,
                            engine_tp=None if kw["engine_tp"] == "smallest" else "best",
                            train_efficiency=EXAMPLE["train_efficiency"],
                            decode_efficiency=EXAMPLE["decode_efficiency"])
        return (f"<b>best split {_split_label(search.best)}: "
                f"{search.gain:.2f}x the colocated throughput</b>"
                + placement_table_html([search.colocated, search.best, search.balanced]),
                [split_search_chart(search)])

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])


GUIDELINE_GRID = {"actor": ("qwen2.5-7b", "qwen2.5-32b"), "gpus": (16, 64),
                  "length_sigma": (0.0, 1.0), "staleness": (0.5, 1.0)}
"""The no-kernel calculator's settings (each point simulates the colocated system and three
splits)."""
GRID_STEPS = 6
"""Steps simulated per system in the grid (fewer than the lab's 8, to keep the build short)."""


def guideline_grid(grid: dict | None = None, *, steps: int = GRID_STEPS) -> list[dict]:
    """Step time of the colocated system and of the disaggregated splits that give the rollout
    1/8, 1/4 and 3/8 of the GPUs (:func:`~rlmperf_lite.sim.sizing.split_candidates` with
    ``stride=gpus // 8``; asynchronous at the point's staleness, 4 streaming updates) for every
    setting of ``grid``
    (default :data:`GUIDELINE_GRID`) on the example's hardware and step, from
    :func:`~rlmperf_lite.sim.sizing.simulate_placement`. Settings the library rejects give no
    rows.

    Returns:
        dicts with the grid's keys, ``placement`` ("colocated" or "r:t" GPUs) and
        ``step_time_s``.
    """
    grid = grid or GUIDELINE_GRID
    keys = list(grid)
    rows, colocated = [], {}
    effs = dict(train_efficiency=EXAMPLE["train_efficiency"],
                decode_efficiency=EXAMPLE["decode_efficiency"])
    hw = EXAMPLE["hardware"]
    for values in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, values))
        wl = example_workload(point["length_sigma"])
        key = (point["actor"], point["gpus"], point["length_sigma"])
        try:
            if key not in colocated:
                colocated[key] = simulate_placement(point["actor"], hw, wl, point["gpus"],
                                                    steps=steps, **effs)
            results = [colocated[key]] + [
                simulate_placement(point["actor"], hw, wl, point["gpus"], rollout_gpus=rg,
                                   mode="async", staleness=point["staleness"], minibatches=4,
                                   steps=steps, **effs)
                for rg in split_candidates(point["actor"], hw, point["gpus"],
                                           stride=point["gpus"] // 8, max_rollout_share=0.375,
                                           workload=wl, **effs)]
        except ValueError:
            continue
        rows += [{**point, "placement": _split_label(p), "step_time_s": p.step_time_s}
                 for p in results]
    return rows


def guideline_grid_chart(rows: list[dict], *, start: dict | None = None):
    """The no-kernel calculator: dropdowns for model, GPUs, length tail and staleness; bars of
    the step time of the colocated system and of each rollout:train split.

    Raises:
        ValueError: empty ``rows`` (pass :func:`guideline_grid`'s result).
    """
    if not rows:
        raise ValueError("rows is empty: pass guideline_grid()'s result")
    return grid_chart(rows, controls=["actor", "gpus", "length_sigma", "staleness"],
                      category="placement", value="step_time_s", value_title="seconds per step",
                      start=start, title="Colocated or split, and how (H20, no kernel needed)")
