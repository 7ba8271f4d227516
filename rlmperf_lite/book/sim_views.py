"""Charts, tables and calculators of the RL-system simulator (book Chapters 10 and 11). They
display what :mod:`rlmperf_lite.sim` computes and hold no formulas of their own: a Gantt chart
of a simulated run (one lane per pool and per rollout replica, with the number of sequences
running in the engine underneath), utilisation per pool, a comparison table, a live widget,
a no-kernel calculator evaluated over a grid when the book is built, and the weight sync's data
path hop by hop (from :func:`rlmperf_lite.cost.weight_sync_breakdown`).

    from rlmperf_lite.book.sim_views import timeline_chart, utilisation_chart
    timeline_chart(simulate(system, workload, steps=4), steps=(2, 3))
"""
from __future__ import annotations

import html
import itertools

import altair as alt
import numpy as np

from ..checks import check_choice, check_int
from ..cost import hardware_presets, model_presets
from ..sim import SimResult, Workload, simulate
from ..sim.layouts import PLACEMENTS, placement_system   # the builders' home; importable here too
from .static_calculators import bound_controls, grid_data
from .widgets import wire

__all__ = ["PHASES", "PHASE_SCALE", "step_set", "timeline_rows", "running_rows",
           "timeline_chart", "utilisation_rows", "utilisation_chart", "split_chart",
           "compare_rows", "compare_table_html", "placement_widget", "placement_grid",
           "placement_grid_chart"]

PHASES = ("generate", "old_logp", "ref_logp", "logps", "values", "reward", "actor_update",
          "critic_update", "weight_sync", "switch", "pause")
"""The kinds of bar in a timeline — generation on the replica lanes, the phases after it
(``logps`` is the fused old + reference pass), weight syncs, model switches and sync pauses."""
PHASE_SCALE = alt.Scale(domain=list(PHASES), range=[
    "#4c78a8", "#72b7b2", "#54a24b", "#88d27a", "#b279a2", "#eeca3b", "#f58518", "#e45756",
    "#9d755d", "#bab0ac", "#ff9da6"])
"""The colour of each of :data:`PHASES` in every timeline of the book (Chapters 10, 11 and 14
share it, so a phase has one colour everywhere)."""
_STATES = ("compute", "sync", "switch", "idle")
_STATE_SCALE = alt.Scale(domain=list(_STATES), range=["#4c78a8", "#9d755d", "#bab0ac", "#eeeeee"])


def step_set(steps) -> set | None:
    """The steps a timeline view keeps: None (all steps), an int, or an iterable of ints -> a
    set of step indices (None for all).

    Raises:
        ValueError: naming ``steps`` when it is none of these.
    """
    if steps is None:
        return None
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        return {int(steps)}
    try:
        items = list(steps)
    except TypeError:
        items = None
    if items is None or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                                for s in items):
        raise ValueError(f"steps must be None, an int or an iterable of ints, got {steps!r}")
    return {int(s) for s in items}


def _check_result(result) -> None:
    if not isinstance(result, SimResult):
        raise ValueError(f"result must be a SimResult (from rlmperf_lite.sim.simulate), got "
                         f"{type(result).__name__}")


def _label(steps: np.ndarray) -> str:
    lo, hi = int(steps.min()), int(steps.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"


# ---- timeline ---------------------------------------------------------------------------------
def timeline_rows(result: SimResult, *, max_replicas: int = 8, steps=None) -> list[dict]:
    """The bars of a run's timeline: dicts with ``lane``, ``pool``, ``phase``, ``step`` (the
    first step a bar serves), ``steps`` (its label, "3" or "3–4"), ``start_s``, ``end_s``.

    Lanes, pool by pool: the pool's own lane (its phases after generation, switches and weight
    syncs), then for the rollout pool the lanes of its first ``max_replicas`` replicas, each
    showing the spans in which the replica runs at least one sequence (its samples' slot
    intervals merged) and the sync pauses. ``steps``: None for all, an int, or an iterable
    of step indices (samples by ``consumed_step``, bars by their step).

    Raises:
        ValueError: naming ``result``, ``max_replicas`` or ``steps``.
    """
    _check_result(result)
    check_int("max_replicas", max_replicas, 0)
    keep = step_set(steps)
    system = result.system
    rollout_pool = system.placement["rollout"]
    rows = []

    def add(lane, pool, phase, step_ids, a, b):
        rows.append({"lane": lane, "pool": pool, "phase": phase,
                     "step": int(np.min(step_ids)), "steps": _label(np.asarray(step_ids)),
                     "start_s": float(a), "end_s": float(b)})

    for iv in result.intervals:
        if keep is None or iv.step in keep:
            add(iv.lane, iv.pool, iv.phase, [iv.step], iv.start_s, iv.end_s)
    sync_step = {}
    for k, (a, b) in enumerate(result.sync_windows):
        sync_step[a] = k
        if keep is None or k in keep:
            for pool in dict.fromkeys((rollout_pool, system.placement["actor"])):
                add(pool, pool, "weight_sync", [k], a, b)
    s = result.samples
    mine = np.ones(len(s["start_s"]), bool) if keep is None else \
        np.isin(s["consumed_step"], sorted(keep))
    shown = min(system.replicas, max_replicas)
    for r in range(shown):
        lane = f"{rollout_pool}/r{r}"
        m = mine & (s["replica"] == r)
        order = np.argsort(s["start_s"][m], kind="stable")
        starts, ends = s["start_s"][m][order], s["end_s"][m][order]
        step_ids = s["consumed_step"][m][order]
        span = None                                   # [start, end, first index, last index]
        for i, (a, b) in enumerate(zip(starts, ends)):
            if span is not None and a <= span[1]:
                span[1], span[3] = max(span[1], b), i
                continue
            if span is not None:
                add(lane, rollout_pool, "generate", step_ids[span[2]:span[3] + 1], span[0],
                    span[1])
            span = [a, b, i, i]
        if span is not None:
            add(lane, rollout_pool, "generate", step_ids[span[2]:span[3] + 1], span[0], span[1])
        for a, b in result.rollout_pauses:
            k = sync_step.get(a, -1)
            if keep is None or k in keep:
                add(lane, rollout_pool, "pause", [k], a, b)
    return rows


def running_rows(result: SimResult, *, steps=None) -> list[dict]:
    """Sequences holding a slot of the engine over time (all replicas): a step function from
    the samples' ``start_s`` and ``end_s``, as dicts ``t_s``, ``running`` (the count from
    ``t_s`` until the next row). ``steps`` as in :func:`timeline_rows`."""
    _check_result(result)
    keep = step_set(steps)
    s = result.samples
    m = np.ones(len(s["start_s"]), bool) if keep is None else \
        np.isin(s["consumed_step"], sorted(keep))
    times = np.concatenate([s["start_s"][m], s["end_s"][m]])
    delta = np.concatenate([np.ones(m.sum(), int), -np.ones(m.sum(), int)])
    order = np.lexsort((delta, times))                 # ends before starts at equal times
    t, count = times[order], np.cumsum(delta[order])
    last = np.r_[t[1:] != t[:-1], True]                # one row per distinct time
    return [{"t_s": float(a), "running": int(c)} for a, c in zip(t[last], count[last])]


def timeline_chart(result: SimResult, *, max_replicas: int = 8, steps=None,
                   title: str | None = None, running: bool = True):
    """A Gantt chart of a simulated run (:func:`timeline_rows`: lane against seconds, bars
    coloured by phase, tooltips phase/step/start/end) and, with ``running``, a panel under it
    with the number of sequences running in the engine (:func:`running_rows`) — the long tail
    of a synchronous step is its falling edge.

    Raises:
        ValueError: naming ``result``, ``max_replicas`` or ``steps``, or when the chosen steps
            have no bars.
    """
    rows = timeline_rows(result, max_replicas=max_replicas, steps=steps)
    if not rows:
        raise ValueError(f"no bars for steps={steps!r}; the run has steps 0 to "
                         f"{result.steps - 1}")
    system = result.system
    rollout_pool = system.placement["rollout"]
    shown = min(system.replicas, max_replicas)
    lanes = []
    for pool in system.pools:
        lanes.append(pool)
        if pool == rollout_pool:
            lanes += [f"{pool}/r{r}" for r in range(shown)]
    lanes = [lane for lane in lanes if any(r["lane"] == lane for r in rows)]
    x0, x1 = min(r["start_s"] for r in rows), max(r["end_s"] for r in rows)
    x = alt.X("start_s:Q", title="seconds", scale=alt.Scale(domain=[x0, x1], nice=False))
    name = system.name or "simulated run"
    note = f"; {shown} of {system.replicas} replicas shown" if shown < system.replicas else ""
    gantt = alt.Chart(alt.Data(values=rows)).mark_bar(stroke="white", strokeWidth=0.3).encode(
        x=x, x2="end_s:Q",
        y=alt.Y("lane:N", sort=lanes, title=None),
        color=alt.Color("phase:N", scale=PHASE_SCALE, title="phase"),
        tooltip=["lane:N", "phase:N", alt.Tooltip("steps:N", title="step"),
                 alt.Tooltip("start_s:Q", format=".3f"), alt.Tooltip("end_s:Q", format=".3f")],
    ).properties(width=560, height=16 * len(lanes) + 8,
                 title=title or f"{name}: step {result.step_time_s:.2f} s{note}")
    if not running:
        return gantt
    run = running_rows(result, steps=steps)
    slots = system.replicas * system.engine.slots
    area = alt.Chart(alt.Data(values=run)).mark_area(interpolate="step-after",
                                                     opacity=0.7).encode(
        x=alt.X("t_s:Q", title="seconds", scale=alt.Scale(domain=[x0, x1], nice=False)),
        y=alt.Y("running:Q", title="sequences running"),
        tooltip=[alt.Tooltip("t_s:Q", format=".3f"), "running:Q"],
    ).properties(width=560, height=90,
                 title=f"sequences running in the engine ({system.replicas} replicas x "
                       f"{system.engine.slots} slots = {slots})")
    return alt.vconcat(gantt, area).resolve_scale(x="shared")


# ---- utilisation and comparison ----------------------------------------------------------------
def _check_results(results) -> None:
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {name: SimResult}")
    for r in results.values():
        _check_result(r)


def utilisation_rows(results: dict) -> list[dict]:
    """``results``: {name: SimResult}. One row per system, pool and state (compute, sync,
    switch, idle) with the share of the pool's GPU-seconds, from ``SimResult.utilisation``."""
    _check_results(results)
    rows = []
    for name, r in results.items():
        for pool, shares in r.utilisation().items():
            for state in _STATES:
                rows.append({"system": name, "pool": pool, "label": f"{name} · {pool}",
                             "gpus": r.system.pools[pool], "state": state,
                             "share": float(shares[state])})
    return rows


def utilisation_chart(results: dict, *, title: str = "Where each pool's GPU-seconds go"):
    """Stacked bars per system and pool: the shares of compute, weight sync, model switches and
    idle time (:func:`utilisation_rows`)."""
    rows = utilisation_rows(results)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    return alt.Chart(alt.Data(values=rows)).transform_calculate(
        order=f"indexof({list(_STATES)!r}, datum.state)").mark_bar().encode(
        x=alt.X("share:Q", stack="zero", axis=alt.Axis(format="%"), title="share of GPU-s",
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("label:N", sort=labels, title=None),
        color=alt.Color("state:N", scale=_STATE_SCALE, title=None),
        order=alt.Order("order:Q"),
        tooltip=["system:N", "pool:N", "gpus:Q", "state:N", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=420, height=22 * len(labels) + 10, title=title)


def compare_rows(results: dict) -> list[dict]:
    """One dict per system: ``system``, ``gpus``, ``step_time_s``,
    ``throughput_tokens_per_s_per_gpu``, ``compute`` ({pool: compute share}) and
    ``mean_staleness``, read from each SimResult."""
    _check_results(results)
    return [{"system": name, "gpus": r.system.gpus, "step_time_s": r.step_time_s,
             "throughput_tokens_per_s_per_gpu": r.throughput_tokens_per_s_per_gpu,
             "compute": {p: float(u["compute"]) for p, u in r.utilisation().items()},
             "mean_staleness": float(r.staleness.mean())} for name, r in results.items()]


def compare_table_html(results: dict) -> str:
    """:func:`compare_rows` as an HTML table: step time, throughput (tokens/s/GPU, verl's
    ``perf/throughput``), each pool's compute share and GPUs, mean staleness."""
    body = "".join(
        f"<tr><td>{html.escape(r['system'])}</td><td>{r['gpus']}</td>"
        f"<td>{r['step_time_s']:.4g}</td><td>{r['throughput_tokens_per_s_per_gpu']:,.1f}</td>"
        f"<td>{', '.join(f'{html.escape(p)} {c:.0%}' for p, c in r['compute'].items())}</td>"
        f"<td>{r['mean_staleness']:.2f}</td></tr>" for r in compare_rows(results))
    return ("<table><tr><th>system</th><th>GPUs</th><th>step (s)</th>"
            "<th>tokens/s/GPU</th><th>compute share per pool</th><th>mean staleness</th></tr>"
            f"{body}</table>")


_MEASURES = {"step_time_s": "step time (s)",
             "throughput_tokens_per_s_per_gpu": "throughput (tokens/s/GPU)"}


def split_chart(results: dict, *, reference: SimResult | None = None,
                measure: str = "step_time_s", title: str | None = None):
    """``results``: {rollout GPUs: SimResult} of systems that differ only in how many GPUs
    generate. A line of ``measure`` (``"step_time_s"`` or
    ``"throughput_tokens_per_s_per_gpu"``) against the rollout GPUs, the best point ringed;
    ``reference`` (e.g. the colocated system) as a dashed rule.

    Raises:
        ValueError: naming ``results`` or ``measure``.
    """
    check_choice("measure", measure, tuple(_MEASURES))
    if isinstance(results, dict) and not all(isinstance(k, (int, np.integer))
                                             and not isinstance(k, bool) for k in results):
        raise ValueError(f"results must be keyed by the number of rollout GPUs (ints), got "
                         f"keys {list(results)!r}")
    _check_results({str(k): r for k, r in results.items()} if isinstance(results, dict)
                   else results)
    rows = [{"rollout_gpus": int(k), "value": float(getattr(r, measure)),
             "system": r.system.name} for k, r in results.items()]
    pick = min if measure == "step_time_s" else max
    best = pick(rows, key=lambda row: row["value"])
    x = alt.X("rollout_gpus:Q", title="rollout GPUs")
    y = alt.Y("value:Q", title=_MEASURES[measure], scale=alt.Scale(zero=False))
    tip = ["system:N", "rollout_gpus:Q", alt.Tooltip("value:Q", format=".4~g")]
    line = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(x=x, y=y, tooltip=tip)
    ring = alt.Chart(alt.Data(values=[best])).mark_point(size=220, color="firebrick").encode(
        x=x, y=y, tooltip=tip)
    layers = [line, ring]
    if reference is not None:
        _check_result(reference)
        ref = [{"value": float(getattr(reference, measure)), "system": reference.system.name}]
        layers.append(alt.Chart(alt.Data(values=ref)).mark_rule(
            strokeDash=[5, 4], color="gray").encode(y="value:Q", tooltip=["system:N",
                                                                          "value:Q"]))
    total = next(iter(results.values())).system.gpus
    dashed = f"; dashed: {reference.system.name}" if reference is not None else ""
    return alt.layer(*layers).properties(
        width=440, height=220,
        title=title or f"{_MEASURES[measure]} by rollout GPUs of {total} (best: "
                       f"{best['rollout_gpus']}){dashed}")


# ---- live widget --------------------------------------------------------------------------------
def placement_widget(**defaults):
    """A live calculator: placement, model, GPU type, algorithm, reward model, GPUs, rollout
    GPUs (the rollout pool of a disaggregated layout, the actor pool of a hybrid one), the
    workload, execution mode and staleness, ``fuse_logps``, ``overlap_reward`` and the switch
    cost (the library's modelled switch, or the seconds typed in) drive
    :func:`~rlmperf_lite.sim.layouts.placement_system` and :func:`~rlmperf_lite.sim.simulate`;
    it shows the timeline of two steps and the comparison table. Bad inputs show the library's
    ValueError message."""
    import ipywidgets as w

    c = {"placement": "colocated", "actor": "qwen2.5-7b", "hardware": "h100-sxm",
         "algo": "grpo", "reward_model": False, "gpus": 32, "rollout_gpus": 8, "prompts": 32,
         "group_size": 16, "mean_response_len": 2048, "max_response_len": 8192,
         "mode": "sync", "staleness": 0.0, "fuse_logps": False, "overlap_reward": False,
         "modelled_switch": True, "switch_s": 0.0, **defaults}
    controls = {
        "placement": w.Dropdown(options=list(PLACEMENTS), value=c["placement"],
                                description="placement"),
        "actor": w.Dropdown(options=model_presets(), value=c["actor"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "algo": w.Dropdown(options=["grpo", "ppo"], value=c["algo"], description="algorithm"),
        "reward_model": w.Checkbox(value=c["reward_model"], description="reward model"),
        "gpus": w.IntText(value=c["gpus"], description="GPUs"),
        "rollout_gpus": w.IntText(value=c["rollout_gpus"], description="rollout GPUs"),
        "prompts": w.IntText(value=c["prompts"], description="prompts B"),
        "group_size": w.IntText(value=c["group_size"], description="group G"),
        "mean_response_len": w.IntText(value=c["mean_response_len"], description="mean R"),
        "max_response_len": w.IntText(value=c["max_response_len"], description="max R"),
        "mode": w.Dropdown(options=["sync", "async"], value=c["mode"], description="mode"),
        "staleness": w.FloatText(value=c["staleness"], description="staleness"),
        "fuse_logps": w.Checkbox(value=c["fuse_logps"], description="fuse_logps"),
        "overlap_reward": w.Checkbox(value=c["overlap_reward"], description="overlap_reward"),
        "modelled_switch": w.Checkbox(value=c["modelled_switch"], description="modelled switch"),
        "switch_s": w.FloatText(value=c["switch_s"], description="switch (s)"),
    }

    def compute(v):
        wl = Workload(prompts=v["prompts"], group_size=v["group_size"],
                      mean_response_len=float(v["mean_response_len"]),
                      max_response_len=v["max_response_len"])
        system = placement_system(
            v["placement"], actor=v["actor"], hardware=v["hardware"], workload=wl,
            gpus=v["gpus"], rollout_gpus=v["rollout_gpus"], algo=v["algo"],
            reward_model=v["actor"] if v["reward_model"] else None, mode=v["mode"],
            staleness=v["staleness"], fuse_logps=v["fuse_logps"],
            overlap_reward=v["overlap_reward"],
            switch_s=None if v["modelled_switch"] else v["switch_s"])
        result = simulate(system, wl, steps=6)
        return (compare_table_html({system.name: result}),
                [timeline_chart(result, steps=(3, 4))])

    message, out = wire(controls, compute)
    names = list(controls.values())
    return w.VBox([w.HBox([w.VBox(names[:6]), w.VBox(names[6:11]), w.VBox(names[11:])]),
                   message, out])


# ---- no-kernel calculator -----------------------------------------------------------------------
STEP_TIME, THROUGHPUT = "step time (s)", "throughput (tokens/s/GPU)"
PLACEMENT_GRID = {"actor": ("qwen2.5-7b", "llama-3.1-8b", "qwen2.5-32b"), "gpus": (16, 32, 64),
                  "switch_s": (0.0, 1.0, 4.0), "eighths": (1, 2, 3, 4, 5, 6, 7)}
"""The grid of :func:`placement_grid`: models, GPUs, seconds per model switch, and the rollout
pool's share of the GPUs in eighths (disaggregated)."""


def placement_grid(grid: dict | None = None, *, workload: Workload | None = None,
                   hardware: str = "h100-sxm", steps: int = 6) -> list[dict]:
    """Synchronous GRPO (KL 0.001, rule reward) of each model on each number of ``hardware``
    GPUs, simulated colocated and disaggregated with the rollout pool on each eighth of the
    GPUs, for each switch cost: one row per system and measure (``STEP_TIME``, ``THROUGHPUT``)
    with ``actor``, ``gpus``, ``switch_s``, ``placement``, ``rollout_share`` (1 when
    colocated), ``rollout_gpus``, ``measure``, ``value``. Default workload: 32 prompts x 16,
    512-token prompts, log-normal responses of mean 2,048 cut at 8,192. Settings the library
    rejects give no rows."""
    grid = grid or PLACEMENT_GRID
    wl = workload or Workload(prompts=32, group_size=16, prompt_len=512,
                              mean_response_len=2048.0, max_response_len=8192)
    rows = []
    for actor, gpus, switch_s in itertools.product(grid["actor"], grid["gpus"],
                                                   grid["switch_s"]):
        point = {"actor": actor, "gpus": gpus, "switch_s": switch_s}
        layouts = [("colocated", None)] + [("disaggregated", gpus * k // 8)
                                           for k in grid["eighths"] if gpus * k % 8 == 0]
        for placement, rollout in layouts:
            try:
                system = placement_system(placement, actor=actor, hardware=hardware,
                                          workload=wl, gpus=gpus, rollout_gpus=rollout,
                                          switch_s=switch_s)
                r = simulate(system, wl, steps=steps)
            except ValueError:
                continue
            common = {**point, "placement": placement,
                      "rollout_share": 1.0 if rollout is None else rollout / gpus,
                      "rollout_gpus": gpus if rollout is None else rollout}
            rows.append({**common, "measure": STEP_TIME, "value": r.step_time_s})
            rows.append({**common, "measure": THROUGHPUT,
                         "value": r.throughput_tokens_per_s_per_gpu})
    return rows


def placement_grid_chart(rows: list[dict], *, start: dict | None = None,
                         title: str = "Synchronous GRPO: disaggregated by rollout share, "
                                      "colocated dashed (no kernel needed)"):
    """The measure chosen with the page's own dropdowns (model, GPUs, switch cost, measure)
    against the rollout pool's share of the GPUs, disaggregated (line and points), with the
    colocated system as a dashed rule; rows from :func:`placement_grid`.

    Raises:
        ValueError: empty ``rows``.
    """
    if not rows:
        raise ValueError("rows is empty: pass placement_grid()'s result")
    controls = ["actor", "gpus", "switch_s", "measure"]
    params, predicate = bound_controls(rows, controls, start)
    data = grid_data(rows, controls + ["placement", "rollout_share", "rollout_gpus", "value"])
    base = alt.Chart(data).transform_filter(predicate)
    disagg = base.transform_filter(alt.datum.placement == "disaggregated")
    y = alt.Y("value:Q", title=None, scale=alt.Scale(zero=False))
    line = disagg.mark_line(point=True).encode(
        x=alt.X("rollout_share:Q", title="rollout GPUs / all GPUs (disaggregated)",
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        y=y, tooltip=["rollout_gpus:Q", alt.Tooltip("value:Q", format=".4~g")])
    rule = base.transform_filter(alt.datum.placement == "colocated").mark_rule(
        strokeDash=[5, 4], color="firebrick").encode(
        y="value:Q", tooltip=[alt.Tooltip("value:Q", format=".4~g", title="colocated")])
    label = base.transform_filter(alt.datum.placement == "colocated").transform_calculate(
        text="'colocated ' + format(datum.value, '.4~g') + ', ' + datum.measure").mark_text(
        align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
    return (line + rule + label).add_params(*params).properties(width=440, height=220,
                                                                title=title)


__all__ += ["STEP_TIME", "THROUGHPUT", "PLACEMENT_GRID"]


# ---- the weight sync's data path (book section sec-weight-sync-mechanism) --------------------
SYNC_HOPS = ("gather", "convert", "transfer", "load")
"""The stages of :func:`~rlmperf_lite.cost.weight_sync_breakdown`, in the order the bytes go."""


def weight_sync_path_rows(syncs: dict) -> list[dict]:
    """``syncs``: {label: :class:`~rlmperf_lite.cost.StageBreakdown` of a weight sync}. One row
    per label and box, left to right: ``column`` 0 the trainer's shard (2N over the gather's
    ranks), 1-4 the hops of :data:`SYNC_HOPS` with their ``seconds`` and ``bytes`` per GPU
    (``stages``, ``stage_bytes``) and ``share`` of the sync's total, 5 the engine's shard
    (``inputs["engine_shard_bytes"]``); ``name`` and ``lines`` label the box.

    Raises:
        ValueError: ``syncs`` empty, or an entry that is not a weight sync's breakdown.
    """
    if not isinstance(syncs, dict) or not syncs:
        raise ValueError("syncs must be a non-empty {label: weight_sync_breakdown(...)}")
    rows = []
    for label, b in syncs.items():
        if getattr(b, "kind", None) != "weight sync" or set(b.stages) != set(SYNC_HOPS):
            raise ValueError(f"syncs[{label!r}] must be a weight_sync_breakdown result")
        inp = b.inputs
        ipc = inp["mode"] == "colocated" and not inp["bucketed"]
        how = {"gather": f"all-gather over {inp['gather_ranks']}",
               "convert": "Megatron to HF layout" if inp["backend"] == "megatron" else
               "none (HF names)",
               "transfer": ("IPC handles" if ipc else "IPC, buckets") if inp["mode"] == "colocated"
               else "broadcast, buckets" if inp["bucketed"] else "broadcast per tensor",
               "load": f"load_weights, tp {inp['infer_tp']}"}
        trainer = b.weight_bytes / inp["gather_ranks"]
        rows.append({"sync": label, "column": 0, "name": "trainer shards", "bytes": trainer,
                     "seconds": None, "share": None,
                     "lines": ["trainer shards", f"{trainer / 1e9:.2f} GB per rank"]})
        for c, hop in enumerate(SYNC_HOPS, start=1):
            sec, moved = b.stages[hop], b.stage_bytes[hop]
            rows.append({"sync": label, "column": c, "name": hop, "bytes": moved,
                         "seconds": sec, "share": sec / b.total_s,
                         "lines": [hop, how[hop], f"{moved / 1e9:.2f} GB, {sec * 1e3:.1f} ms"]})
        shard = inp["engine_shard_bytes"]
        rows.append({"sync": label, "column": 5, "name": "engine layout", "bytes": shard,
                     "seconds": b.total_s, "share": None,
                     "lines": ["engine layout", f"{shard / 1e9:.2f} GB per GPU",
                               f"sync {b.total_s:.3f} s"]})
    return rows


def weight_sync_path_chart(syncs: dict, *, title: str = "The weight sync's data path"):
    """Each sync of ``syncs`` as a row of boxes (:func:`weight_sync_path_rows`): the trainer's
    shards, the four hops with their bytes per GPU and milliseconds, shaded by their share of
    the sync's time, and the engine's layout with the total."""
    rows = weight_sync_path_rows(syncs)
    labels = list(syncs)
    for r in rows:
        r["x"], r["x2"], r["xc"] = 1.25 * r["column"], 1.25 * r["column"] + 1.05, \
            1.25 * r["column"] + 0.525
        r["y"] = labels.index(r["sync"])
    x = {"scale": alt.Scale(domain=[-0.05, 7.35]), "axis": None}
    y_scale = alt.Scale(domain=[len(labels) - 0.55, -0.7])
    y = alt.Y("y:Q", axis=None, scale=y_scale)
    base = alt.Chart(alt.Data(values=rows))
    hops = base.transform_filter(alt.datum.share != None).mark_rect(  # noqa: E711 (Vega)
        cornerRadius=4, stroke="gray").encode(
        x=alt.X("x:Q", **x), x2="x2:Q", y=alt.Y("y0:Q", axis=None, scale=y_scale), y2="y1:Q",
        color=alt.Color("share:Q", title="share of the sync", scale=alt.Scale(
            domain=[0, 1], range=["#fff5eb", "#e6550d"]), legend=alt.Legend(format="%")),
        tooltip=["sync:N", "name:N", alt.Tooltip("seconds:Q", format=".4f"),
                 alt.Tooltip("bytes:Q", format=".4~s")]).transform_calculate(
        y0="datum.y - 0.3", y1="datum.y + 0.3")
    ends = base.transform_filter(alt.datum.share == None).mark_rect(  # noqa: E711
        cornerRadius=4, stroke="gray", color="#eeeeee").encode(
        x=alt.X("x:Q", **x), x2="x2:Q", y=alt.Y("y0:Q", axis=None, scale=y_scale),
        y2="y1:Q").transform_calculate(y0="datum.y - 0.3", y1="datum.y + 0.3")
    text = base.mark_text(fontSize=10, lineHeight=12).encode(
        x=alt.X("xc:Q", **x), y=y, text="lines:N")
    links = alt.Chart(alt.Data(values=[{"x": 1.25 * c + 1.05, "x2": 1.25 * (c + 1), "y": k}
                                       for k in range(len(labels)) for c in range(5)])
                      ).mark_rule(color="gray").encode(x=alt.X("x:Q", **x), x2="x2:Q", y=y)
    names = alt.Chart(alt.Data(values=[{"sync": s, "y": k - 0.33, "x": 0}
                                       for k, s in enumerate(labels)])).mark_text(
        align="left", baseline="bottom", dy=-2, fontSize=11, fontWeight="bold").encode(
        x=alt.X("x:Q", **x), y=y, text="sync:N")
    return alt.layer(links, ends, hops, text, names).properties(
        width=700, height=110 * len(labels), title=title).configure_view(stroke=None)


__all__ += ["SYNC_HOPS", "weight_sync_path_rows", "weight_sync_path_chart"]
