"""Tables, charts and calculators of the RL-frameworks chapter (book Chapter 12). They display
what :mod:`rlmperf_lite.sim.frameworks` and the simulator compute and hold no formulas of their
own; the run timelines and the comparison table are those of
:mod:`rlmperf_lite.book.sim_views`.

    from rlmperf_lite.book.framework_views import facts_table_html, breakdown_chart
"""
from __future__ import annotations

import dataclasses
import html

import altair as alt

from ..checks import progress_bar
from ..cost import hardware_presets, model_presets
from ..sim import simulate
from ..sim.breakdown import step_breakdown
from ..sim.frameworks import (DEFAULT_WORKLOAD, FRAMEWORKS, PRESETS, framework_names,
                              framework_system)
from ..sim.phases import switches_per_step
from .grid_charts import grid_chart
from .sim_views import compare_table_html, timeline_chart
from .widgets import wire

__all__ = ["facts_table_html", "claims_table_html", "presets_table_html", "sync_table_html",
           "BREAKDOWN_PARTS", "breakdown_rows", "breakdown_chart", "framework_widget",
           "FRAMEWORK_GRID", "framework_grid", "framework_grid_chart", "STEP_TIME", "THROUGHPUT"]


def _esc(x) -> str:
    return html.escape(str(x))


def facts_table_html(frameworks: dict = FRAMEWORKS) -> str:
    """The taxonomy table (book Table 12.1): one row per framework — default placement, rollout
    engines, training backends, modes with the staleness knob and its default, runtime, weight
    sync, and the version the row describes (``as_of``)."""
    rows = "".join(
        f"<tr><td><b>{_esc(f.name)}</b></td><td>{_esc(f.placement_default)}</td>"
        f"<td>{_esc(f.rollout_engines)}</td><td>{_esc(f.training_backends)}</td>"
        f"<td>{_esc(f.modes)}; <code>{_esc(f.staleness_knob)}</code> "
        f"(default {_esc(f.staleness_default)})</td><td>{_esc(f.runtime)}</td>"
        f"<td>{_esc(f.weight_sync)}</td><td>{_esc(f.as_of)}</td></tr>"
        for f in frameworks.values())
    return ("<table><tr><th>framework</th><th>default placement</th><th>rollout engine</th>"
            "<th>training backend</th><th>sync / async, staleness knob</th><th>runtime</th>"
            "<th>weight sync</th><th>as of</th></tr>" + rows + "</table>")


def claims_table_html(frameworks: dict = FRAMEWORKS) -> str:
    """Each framework's headline claim with its stated inputs and its source."""
    rows = "".join(
        f"<tr><td><b>{_esc(f.name)}</b></td><td>{_esc(f.headline_claim)}</td>"
        f"<td>{_esc(f.claim_inputs)}</td><td>{_esc(f.sources['headline_claim'])}</td></tr>"
        for f in frameworks.values())
    return ("<table><tr><th>framework</th><th>claim</th><th>inputs as stated</th>"
            "<th>source</th></tr>" + rows + "</table>")


def presets_table_html(systems: dict, presets: dict = PRESETS) -> str:
    """``systems``: {preset name: RLSystem} (from
    :func:`~rlmperf_lite.sim.frameworks.framework_system`). One row per preset: the framework,
    GPUs per pool, mode, staleness, partial rollout, streaming updates per version, the
    framework settings it stands for, and the simplifications."""
    rows = []
    for name, s in systems.items():
        p = presets[name]
        pools = ", ".join(f"{_esc(k)} {v}" for k, v in s.pools.items() if k != "cpu")
        rows.append(
            f"<tr><td><b>{_esc(name)}</b></td><td>{_esc(p.framework)}</td><td>{pools}</td>"
            f"<td>{_esc(s.mode)}</td><td>{s.staleness:g}</td>"
            f"<td>{'yes' if s.partial_rollout and s.mode == 'async' else 'no'}</td>"
            f"<td>{s.minibatches}</td><td>{_esc(p.knobs)}</td><td>{_esc(p.notes)}</td></tr>")
    return ("<table><tr><th>preset</th><th>framework</th><th>GPUs per pool</th><th>mode</th>"
            "<th>staleness</th><th>partial rollout</th><th>updates per version</th>"
            "<th>framework settings</th><th>simplifications</th></tr>" + "".join(rows)
            + "</table>")


def sync_table_html(systems: dict, bandwidth_s: dict | None = None,
                    presets: dict = PRESETS) -> str:
    """``systems``: {preset name: RLSystem}. One row per preset: its pools, the trainer the
    sync gathers from and whether it moves buckets (the preset's ``sync_backend``,
    ``sync_bucketed``), the seconds of one weight sync and of one model switch as the system
    charges them (:func:`~rlmperf_lite.sim.from_cost.sync_and_switch_s`), the switches per
    synchronous step (:func:`~rlmperf_lite.sim.phases.switches_per_step`), ``bandwidth_s``
    ({preset: seconds}, optional: the bandwidth bound the chapters used before) and the
    preset's ``sync_source``."""
    bound = "<th>bandwidth bound (s)</th>" if bandwidth_s is not None else ""
    rows = []
    for name, s in systems.items():
        p = presets[name]
        pools = ", ".join(f"{_esc(k)} {v}" for k, v in s.pools.items() if k != "cpu")
        n_switch = max(switches_per_step(s).values(), default=0) if s.switch_s > 0 else 0
        old = f"<td>{bandwidth_s[name]:.3f}</td>" if bandwidth_s is not None else ""
        rows.append(
            f"<tr><td><b>{_esc(name)}</b></td><td>{pools}</td><td>{_esc(p.sync_backend)}"
            f"</td><td>{'yes' if p.sync_bucketed else 'no'}</td><td>{s.weight_sync_s:.3f}</td>"
            f"<td>{s.switch_s:.3f}</td><td>{n_switch}</td>{old}"
            f"<td>{_esc(p.sync_source)}</td></tr>")
    return ("<table><tr><th>preset</th><th>GPUs per pool</th><th>trainer</th><th>buckets</th>"
            "<th>one sync (s)</th><th>one switch (s)</th><th>switches per step</th>" + bound
            + "<th>source</th></tr>" + "".join(rows) + "</table>")


# ---- the critical path of a step --------------------------------------------------------------
BREAKDOWN_PARTS = {"generation_only_s": "generation only", "training_only_s": "training only",
                   "overlap_s": "generation and training overlap",
                   "weight_sync_s": "weight sync", "idle_s": "neither"}
_PART_SCALE = alt.Scale(domain=list(BREAKDOWN_PARTS.values()),
                        range=["#4c78a8", "#f58518", "#54a24b", "#9d755d", "#dddddd"])


def breakdown_rows(breakdowns: dict) -> list[dict]:
    """``breakdowns``: {system: :func:`~rlmperf_lite.sim.breakdown.step_breakdown` dict}. One
    row per system and part with its seconds, plus the system's ``step_time_s`` and
    ``work_bound_s``."""
    if not isinstance(breakdowns, dict) or not breakdowns:
        raise ValueError("breakdowns must be a non-empty dict {system: step_breakdown(...)}")
    need = [*BREAKDOWN_PARTS, "step_time_s", "work_bound_s"]
    for name, b in breakdowns.items():
        missing = [k for k in need if not isinstance(b, dict) or k not in b]
        if missing:
            raise ValueError(f"breakdowns[{name!r}] must be a step_breakdown(...) dict; it lacks "
                             f"{missing}")
    return [{"system": name, "part": label, "seconds": float(b[key]),
             "step_time_s": float(b["step_time_s"]), "work_bound_s": float(b["work_bound_s"])}
            for name, b in breakdowns.items() for key, label in BREAKDOWN_PARTS.items()]


def breakdown_chart(breakdowns: dict, *, title: str = "Where a step's wall time goes, and the "
                                                      "busy GPU-seconds per GPU (black tick)"):
    """Stacked bars per system: the seconds of a steady-state step spent generating only,
    training only, overlapping both, syncing weights, or neither; a black tick at the
    schedule's busy GPU-seconds over GPUs (``work_bound_s``: a measurement, not W/p)."""
    rows = breakdown_rows(breakdowns)
    systems = list(breakdowns)
    order = list(BREAKDOWN_PARTS.values())
    bars = alt.Chart(alt.Data(values=rows)).transform_calculate(
        order=f"indexof({order!r}, datum.part)").mark_bar().encode(
        x=alt.X("seconds:Q", stack="zero", title="seconds per step"),
        y=alt.Y("system:N", sort=systems, title=None),
        color=alt.Color("part:N", scale=_PART_SCALE, title=None),
        order=alt.Order("order:Q"),
        tooltip=["system:N", "part:N", alt.Tooltip("seconds:Q", format=".2f"),
                 alt.Tooltip("step_time_s:Q", format=".2f", title="step (s)")])
    ticks = alt.Chart(alt.Data(values=[r for r in rows if r["part"] == order[0]])).mark_tick(
        color="black", thickness=2, size=18).encode(
        x="work_bound_s:Q", y=alt.Y("system:N", sort=systems),
        tooltip=["system:N", alt.Tooltip("work_bound_s:Q", format=".2f",
                                         title="busy GPU-s / GPUs (s)")])
    return (bars + ticks).properties(width=440, height=24 * len(systems) + 10, title=title)


# ---- live widget --------------------------------------------------------------------------------
def framework_widget(**defaults):
    """A live calculator: two framework presets side by side (dropdowns), the model, the GPU
    type and the number of GPUs drive :func:`~rlmperf_lite.sim.frameworks.framework_system` and
    :func:`~rlmperf_lite.sim.simulate` on the presets' default workload; it shows the
    comparison table, the step breakdown and the timeline of two steps of each. Bad inputs
    show the library's ValueError message."""
    import ipywidgets as w

    c = {"a": "verl", "b": "areal", "actor": "qwen2.5-7b", "hardware": "h100-sxm", "gpus": 64,
         "steps": 12, **defaults}
    controls = {
        "a": w.Dropdown(options=framework_names(), value=c["a"], description="preset A"),
        "b": w.Dropdown(options=framework_names(), value=c["b"], description="preset B"),
        "actor": w.Dropdown(options=model_presets(), value=c["actor"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "gpus": w.IntText(value=c["gpus"], description="GPUs"),
    }

    def compute(v):
        results = {}
        for key in ("a", "b"):
            system = framework_system(v[key], actor=v["actor"], hardware=v["hardware"],
                                      gpus=v["gpus"])
            results[v[key]] = simulate(system, DEFAULT_WORKLOAD, steps=c["steps"])
        parts = {k: step_breakdown(r) for k, r in results.items()}
        charts = [breakdown_chart(parts)]
        for r in results.values():
            last = r.steps - 1
            charts.append(timeline_chart(r, steps=(last - 2, last - 1), max_replicas=4,
                                         running=False))
        return compare_table_html(results), charts

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())[:3]),
                           w.VBox(list(controls.values())[3:])]), message, out])


# ---- no-kernel calculator -----------------------------------------------------------------------
STEP_TIME, THROUGHPUT = "step time (s)", "throughput (tokens/s/GPU)"
FRAMEWORK_GRID = {"framework": ("verl", "openrlhf", "trl", "nemo-rl", "nemo-aligner",
                                "deepspeed-chat", "real", "areal", "slime", "roll", "streamrl",
                                "llamarl", "pipelinerl", "prime-rl", "verl-fully-async"),
                  "actor": ("qwen2.5-7b", "qwen2.5-32b"), "gpus": (16, 32, 64, 128)}
"""The grid of :func:`framework_grid`: each framework's default preset (and verl's fully async
recipe), two models, four cluster sizes (H100)."""


def framework_grid(grid: dict | None = None, *, hardware: str = "h100-sxm",
                   steps: int = 12, progress: bool = False) -> list[dict]:
    """Each preset of ``grid["framework"]`` for each model and GPU count, simulated for
    ``steps`` steps on the presets' default workload: one row per preset and measure
    (``STEP_TIME``, ``THROUGHPUT``) with ``framework``, ``actor``, ``gpus``, ``measure``,
    ``value``. Presets that map to the same system are simulated once. Settings the library
    rejects give no rows. ``progress``: a text bar over the (model, GPUs) cells.

    Raises:
        ValueError: ``progress`` not a bool.
    """
    grid = grid or FRAMEWORK_GRID
    rows, seen = [], {}
    cells = [(actor, gpus) for actor in grid["actor"] for gpus in grid["gpus"]]
    for actor, gpus in progress_bar(cells, progress, desc="grid", unit="cell"):
        for name in grid["framework"]:
            try:
                system = framework_system(name, actor=actor, hardware=hardware, gpus=gpus)
                key = repr(dataclasses.replace(system, name=""))
                if key not in seen:
                    seen[key] = simulate(system, DEFAULT_WORKLOAD, steps=steps)
            except ValueError:
                continue
            r = seen[key]
            point = {"framework": name, "actor": actor, "gpus": gpus}
            rows.append({**point, "measure": STEP_TIME, "value": r.step_time_s})
            rows.append({**point, "measure": THROUGHPUT,
                         "value": r.throughput_tokens_per_s_per_gpu})
    return rows


def framework_grid_chart(rows: list[dict], *, start: dict | None = None,
                         title: str = "Each framework's default layout on the simulator "
                                      "(no kernel needed)"):
    """Bars of the measure chosen with the page's own dropdowns (model, GPUs, measure), one per
    framework preset; rows from :func:`framework_grid`."""
    return grid_chart(rows, controls=["actor", "gpus", "measure"], category="framework",
                      value="value", value_title="value", title=title,
                      start=start or {"actor": "qwen2.5-7b", "gpus": 64, "measure": STEP_TIME})
