"""Charts, tables and calculators of asynchronous RL and staleness (book Chapter 11). They display
what :mod:`rlmperf_lite.sim` and :func:`rlmperf_lite.rl.train_async_grpo` compute and hold no
formulas of their own: final accuracies by staleness bound and objective (the learning curves
are :func:`~rlmperf_lite.book.learning_curve_chart`'s), the staleness of the samples a run
trained on, step time against the staleness bound, verl's published ablation next to the
simulated one, accuracy against predicted wall time, a live widget and a no-kernel calculator
evaluated over a grid when the book is built.

    from rlmperf_lite.book.async_views import staleness_chart, staleness_sweep_chart
    staleness_chart({"one-step-off": result_1, "eta = 2": result_2})
"""
from __future__ import annotations

import itertools

import altair as alt

from ..checks import check_choice
from ..sim import SimResult, Workload, simulate
from ..sim.layouts import async_system, placement_system  # noqa: F401 (Lab 11 imports both here)
from ..sim.sizing import PlacementResult
from .charts import OBJECTIVE_ORDER, check_runs
from .charts import learning_curve_chart, learning_rows  # noqa: F401 (Lab 11 imports them here)
from .sim_views import compare_table_html, timeline_chart
from .static_calculators import bound_controls, grid_data
from .widgets import wire

__all__ = ["final_rows", "final_accuracy_chart", "staleness_rows", "staleness_chart",
           "sweep_rows", "staleness_sweep_chart", "ablation_rows", "ablation_chart",
           "trade_rows", "trade_chart", "async_widget", "ASYNC_GRID", "async_grid",
           "async_grid_chart", "STEP_TIME", "THROUGHPUT", "MEAN_STALENESS"]

_OBJ_SCALE = alt.Scale(domain=list(OBJECTIVE_ORDER), range=["#e45756", "#4c78a8", "#54a24b"])


# ---- the toy model: learning curves and final accuracy ------------------------------------
def final_rows(runs: dict, metric: str = "eval_accuracy") -> list[dict]:
    """One row per run: ``k``, ``objective``, ``seed`` and ``value`` = ``metric`` of its last
    history row (run with ``eval_every`` for ``eval_accuracy``).

    Raises:
        ValueError: naming ``runs`` or ``metric`` (not in a run's last row).
    """
    check_runs(runs)
    rows = []
    for (k, objective, seed), run in runs.items():
        last = run.history[-1]
        if metric not in last:
            raise ValueError(f"metric {metric!r} is not in the last history row of run "
                             f"{(k, objective, seed)!r}; for eval_accuracy train with "
                             f"eval_every=steps")
        rows.append({"k": int(k), "objective": objective, "seed": int(seed),
                     "value": float(last[metric])})
    return rows


def final_accuracy_chart(runs: dict, *, base_accuracy: float | None = None,
                         metric: str = "eval_accuracy", title: str | None = None):
    """``metric`` at the end of each run (:func:`final_rows`) against the staleness bound k:
    one point per seed, a line through the seeds' mean, one colour per objective; with
    ``base_accuracy`` (the warm-start model's) a dashed rule.

    Raises:
        ValueError: naming ``runs`` or ``metric``.
    """
    rows = final_rows(runs, metric)
    ks = sorted({r["k"] for r in rows})
    x = alt.X("k:O", title="staleness bound k", sort=ks)
    color = alt.Color("objective:N", scale=_OBJ_SCALE, title="objective")
    base = alt.Chart(alt.Data(values=rows))
    points = base.mark_point(opacity=0.6).encode(
        x=x, y=alt.Y("value:Q", title=f"final {metric}", scale=alt.Scale(domain=[0, 1])),
        color=color, xOffset=alt.XOffset("objective:N", sort=list(OBJECTIVE_ORDER)),
        tooltip=["objective:N", "k:O", "seed:Q", alt.Tooltip("value:Q", format=".3f")])
    mean = base.mark_line(point=True).encode(
        x=x, y="mean(value):Q", color=color,
        tooltip=["objective:N", "k:O", alt.Tooltip("mean(value):Q", format=".3f",
                                                     title="mean over seeds")])
    layers = [points, mean]
    if base_accuracy is not None:
        layers.append(alt.Chart(alt.Data(values=[{"value": float(base_accuracy),
                                                  "what": "warm-start model"}])).mark_rule(
            strokeDash=[5, 4], color="gray").encode(y="value:Q", tooltip=["what:N",
                                                                            "value:Q"]))
    seeds = len({r["seed"] for r in rows})
    return alt.layer(*layers).properties(
        width=420, height=240,
        title=title or f"Final {metric} by staleness bound ({seeds} seed(s) per point; "
                       f"line: mean; dashed: before RL)")


# ---- the simulator: staleness of consumed samples, sweeps -----------------------------------
def _check_results(results) -> None:
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {name: SimResult}")
    for r in results.values():
        if not isinstance(r, SimResult):
            raise ValueError(f"results values must be SimResults (from "
                             f"rlmperf_lite.sim.simulate), got {type(r).__name__}")


def staleness_rows(results: dict) -> list[dict]:
    """``results``: {name: SimResult}. One row per system and staleness value of the samples
    it trained on (``SimResult.staleness_counts``): ``system``, ``staleness``, ``samples`` and
    ``share`` of the system's samples."""
    _check_results(results)
    rows = []
    for name, r in results.items():
        counts = r.staleness_counts()
        total = sum(counts.values())
        rows += [{"system": name, "staleness": k, "samples": n, "share": n / total}
                 for k, n in counts.items()]
    return rows


def staleness_chart(results, *, title: str | None = None):
    """Staleness, of simulated runs or of a sweep of the staleness bound:

    - ``results`` a dict {name: SimResult}: grouped bars, the share of each system's trained
      samples by staleness (versions between the weights that started the sample and those it
      trained), from :func:`staleness_rows`;
    - ``results`` a list of :class:`~rlmperf_lite.sim.sizing.PlacementResult` (from
      :func:`~rlmperf_lite.sim.sizing.staleness_sweep`): left, the step time per staleness
      bound with the trainer bound (train time + weight sync) dashed; right, the mean
      staleness of the samples trained on.

    Raises:
        ValueError: ``results`` neither of these.
    """
    if isinstance(results, dict):
        return _staleness_shares(results, title or "Staleness of the samples trained on")
    points = list(results) if isinstance(results, (list, tuple)) else []
    if not points or not all(isinstance(p, PlacementResult) for p in points):
        raise ValueError("results must be a non-empty dict {name: SimResult} or a list of "
                         "PlacementResults (from rlmperf_lite.sim.sizing.staleness_sweep)")
    return _staleness_bounds(points, title or "Staleness bound: speed and freshness")


def _staleness_shares(results: dict, title: str):
    """Grouped bars of :func:`staleness_rows`: share of samples by staleness, per system."""
    rows = staleness_rows(results)
    names = list(results)
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("staleness:O", title="staleness (versions)"),
        xOffset=alt.XOffset("system:N", sort=names),
        y=alt.Y("share:Q", title="share of samples", axis=alt.Axis(format="%")),
        color=alt.Color("system:N", sort=names, title=None),
        tooltip=["system:N", "staleness:O", "samples:Q", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=420, height=200, title=title)


def _staleness_bounds(points: list, title: str):
    """Step time (and the trainer bound) and mean staleness against the staleness bound."""
    rows = [{"staleness": p.staleness, "series": s, "seconds": v} for p in points
            for s, v in (("step time", p.step_time_s), ("trainer bound", p.trainer_bound_s))]
    speed = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("staleness:Q", title="staleness bound"),
        y=alt.Y("seconds:Q", title="seconds per step", scale=alt.Scale(zero=False)),
        strokeDash=alt.StrokeDash("series:N", title=None),
        tooltip=["staleness:Q", "series:N", alt.Tooltip("seconds:Q", format=".1f")]
    ).properties(width=300, height=200, title="Step time")
    stale = alt.Chart(alt.Data(values=[{"staleness": p.staleness, "mean": p.mean_staleness}
                                       for p in points])).mark_line(point=True).encode(
        x=alt.X("staleness:Q", title="staleness bound"),
        y=alt.Y("mean:Q", title="mean staleness (versions)"),
        tooltip=["staleness:Q", alt.Tooltip("mean:Q", format=".3f")]
    ).properties(width=220, height=200, title="Samples trained on")
    return alt.hconcat(speed, stale).properties(title=title)


_MEASURES = {"step_time_s": "step time (s)",
             "throughput_tokens_per_s_per_gpu": "throughput (tokens/s/GPU)"}


def sweep_rows(sweeps: dict, measure: str = "step_time_s") -> list[dict]:
    """``sweeps``: {label: {staleness bound: SimResult}}. One row per point: ``label``,
    ``staleness``, ``value`` (the result's ``measure``: ``"step_time_s"`` or
    ``"throughput_tokens_per_s_per_gpu"``) and ``mean_staleness`` of the trained samples.

    Raises:
        ValueError: naming ``sweeps`` or ``measure``.
    """
    check_choice("measure", measure, tuple(_MEASURES))
    if not isinstance(sweeps, dict) or not sweeps:
        raise ValueError("sweeps must be a non-empty dict {label: {staleness: SimResult}}")
    rows = []
    for label, sweep in sweeps.items():
        _check_results(sweep if isinstance(sweep, dict) else None)
        rows += [{"label": str(label), "staleness": float(s), "value": float(getattr(r, measure)),
                  "mean_staleness": float(r.staleness.mean())} for s, r in sweep.items()]
    return rows


def staleness_sweep_chart(sweeps: dict, *, measure: str = "step_time_s",
                          bounds: dict | None = None, reference: SimResult | None = None,
                          title: str | None = None):
    """``measure`` against the staleness bound, one line per label of ``sweeps``
    (:func:`sweep_rows`); ``bounds``: {label: value} drawn as dashed rules in the label's
    colour (e.g. the trainer's busy seconds per version); ``reference`` (e.g. the colocated
    synchronous system) as a gray dashed rule.

    Raises:
        ValueError: naming ``sweeps``, ``measure``, ``bounds`` or ``reference``.
    """
    rows = sweep_rows(sweeps, measure)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    color = alt.Color("label:N", sort=labels, title=None)
    y = alt.Y("value:Q", title=_MEASURES[measure], scale=alt.Scale(zero=True))
    layers = [alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("staleness:Q", title="staleness bound"), y=y, color=color,
        tooltip=["label:N", "staleness:Q", alt.Tooltip("value:Q", format=".4~g"),
                 alt.Tooltip("mean_staleness:Q", format=".2f")])]
    if bounds:
        unknown = set(map(str, bounds)) - set(labels)
        if unknown:
            raise ValueError(f"bounds keys must be labels of sweeps {labels}, got "
                             f"{sorted(unknown)}")
        rule = [{"label": str(k), "value": float(v)} for k, v in bounds.items()]
        layers.append(alt.Chart(alt.Data(values=rule)).mark_rule(strokeDash=[5, 4]).encode(
            y="value:Q", color=color,
            tooltip=["label:N", alt.Tooltip("value:Q", format=".4~g", title="bound")]))
    if reference is not None:
        if not isinstance(reference, SimResult):
            raise ValueError(f"reference must be a SimResult, got {type(reference).__name__}")
        ref = [{"value": float(getattr(reference, measure)), "system": reference.system.name}]
        layers.append(alt.Chart(alt.Data(values=ref)).mark_rule(
            strokeDash=[2, 2], color="gray").encode(y="value:Q", tooltip=["system:N",
                                                                          "value:Q"]))
    notes = ("; dashed: each trainer's busy time per version" if bounds else "") + \
        (f"; gray: {reference.system.name}" if reference is not None else "")
    return alt.layer(*layers).properties(
        width=440, height=240, title=title or f"{_MEASURES[measure]} by staleness bound{notes}")


# ---- verl's ablation ---------------------------------------------------------------------------
def ablation_rows(rows: list[dict]) -> list[dict]:
    """Rows of :func:`~rlmperf_lite.sim.reproduce.reproduce_verl_staleness_ablation` in long
    form: ``staleness``, ``source`` ("published" or "simulated") and ``step_s``; the colocated
    baseline (staleness None) is left out.

    Raises:
        ValueError: ``rows`` empty or without a staleness 0 row.
    """
    if not rows or not any(r["staleness"] == 0 for r in rows):
        raise ValueError("rows must be reproduce_verl_staleness_ablation()'s result, with a "
                         "staleness 0 row")
    out = []
    for r in rows:
        if r["staleness"] is None:
            continue
        for source, key in (("published", "published_step_s"), ("simulated", "simulated_step_s")):
            if r[key] is not None:
                out.append({"staleness": float(r["staleness"]), "source": source,
                            "step_s": float(r[key])})
    return out


def ablation_chart(rows: list[dict], *,
                   title: str = "verl's 128-GPU staleness ablation, published and simulated "
                                "(each relative to its staleness 0)"):
    """Step time relative to staleness 0 against verl's ``staleness_threshold``, published and
    simulated (:func:`ablation_rows`; the ratio is drawn by the chart from the rows' step
    times), tooltips with the seconds."""
    data = ablation_rows(rows)
    return alt.Chart(alt.Data(values=data)).transform_calculate(
        at0="datum.staleness == 0 ? datum.step_s : null").transform_joinaggregate(
        base="max(at0)", groupby=["source"]).transform_calculate(
        relative="datum.step_s / datum.base").mark_line(point=True).encode(
        x=alt.X("staleness:Q", title="staleness_threshold"),
        y=alt.Y("relative:Q", title="step time / step time at 0",
                scale=alt.Scale(domain=[0, 1.05])),
        color=alt.Color("source:N", title=None),
        tooltip=["source:N", "staleness:Q", alt.Tooltip("step_s:Q", format=".2f"),
                 alt.Tooltip("relative:Q", format=".3f")],
    ).properties(width=420, height=220, title=title)


# ---- the trade: accuracy against predicted wall time --------------------------------------
def trade_rows(runs: dict, wall_s: dict, metric: str = "eval_accuracy") -> list[dict]:
    """One row per run of ``runs`` ({(k, objective, seed): RLResult}): ``k``, ``objective``,
    ``seed``, ``value`` (its final ``metric``) and ``wall_s`` = ``wall_s[(k, objective)]``,
    the wall time the simulator predicts for that setting.

    Raises:
        ValueError: naming ``runs``, ``metric`` or ``wall_s`` (a setting without a time).
    """
    rows = final_rows(runs, metric)
    for r in rows:
        key = (r["k"], r["objective"])
        if key not in wall_s:
            raise ValueError(f"wall_s has no time for (k, objective) = {key!r}")
        r["wall_s"] = float(wall_s[key])
    return rows


def trade_chart(runs: dict, wall_s: dict, *, metric: str = "eval_accuracy",
                base_accuracy: float | None = None, title: str | None = None):
    """Final ``metric`` against predicted wall time (:func:`trade_rows`): a point per run, the
    seeds' mean ringed and labelled with k, one colour per objective; ``base_accuracy`` as a
    dashed rule."""
    rows = trade_rows(runs, wall_s, metric)
    color = alt.Color("objective:N", scale=_OBJ_SCALE, title="objective")
    x = alt.X("wall_s:Q", title="predicted wall time of the run (s)", scale=alt.Scale(zero=False))
    base = alt.Chart(alt.Data(values=rows))
    points = base.mark_point(opacity=0.5).encode(
        x=x, y=alt.Y("value:Q", title=f"final {metric}", scale=alt.Scale(domain=[0, 1])),
        color=color, tooltip=["objective:N", "k:O", "seed:Q",
                              alt.Tooltip("wall_s:Q", format=".3f"),
                              alt.Tooltip("value:Q", format=".3f")])
    mean = base.transform_aggregate(value="mean(value)", wall_s="mean(wall_s)",
                                    groupby=["k", "objective"])
    ring = mean.mark_point(size=160, filled=True, opacity=0.8).encode(x=x, y="value:Q",
                                                                     color=color)
    text = mean.transform_calculate(label="'k=' + datum.k").mark_text(
        dx=12, align="left", fontSize=11).encode(x=x, y="value:Q", text="label:N", color=color)
    layers = [points, ring, text]
    if base_accuracy is not None:
        layers.append(alt.Chart(alt.Data(values=[{"value": float(base_accuracy)}])).mark_rule(
            strokeDash=[5, 4], color="gray").encode(y="value:Q"))
    return alt.layer(*layers).properties(
        width=440, height=240,
        title=title or f"The trade: final {metric} against the simulator's wall time")


# ---- live widget --------------------------------------------------------------------------------
def async_widget(**defaults):
    """A live calculator: execution mode, how ready samples are consumed, the staleness bound,
    partial rollout, streaming updates per version, the rollout pool's GPUs (of ``gpus``) and
    the mean response length drive :func:`~rlmperf_lite.sim.layouts.async_system` and
    :func:`~rlmperf_lite.sim.simulate` (GRPO of Qwen2.5-7B on H100s by default). It shows the
    comparison with the colocated synchronous system, the staleness of the trained samples and
    the timeline of two steps. Bad inputs show the library's ValueError message."""
    import ipywidgets as w

    c = {"actor": "qwen2.5-7b", "hardware": "h100-sxm", "gpus": 32, "rollout_gpus": 16,
         "prompts": 32, "group_size": 16, "mean_response_len": 2048, "max_response_len": 8192,
         "mode": "async", "consume": "ready", "staleness": 2.0, "partial_rollout": True,
         "minibatches": 1, **defaults}
    controls = {
        "mode": w.Dropdown(options=["sync", "async"], value=c["mode"], description="mode"),
        "consume": w.Dropdown(options=["ready", "batch"], value=c["consume"],
                              description="consume"),
        "staleness": w.FloatText(value=c["staleness"], description="staleness"),
        "partial_rollout": w.Checkbox(value=c["partial_rollout"], description="partial rollout"),
        "minibatches": w.IntText(value=c["minibatches"], description="updates/ver."),
        "rollout_gpus": w.IntSlider(value=c["rollout_gpus"], min=1, max=c["gpus"] - 1,
                                    description="rollout GPUs"),
        "mean_response_len": w.IntText(value=c["mean_response_len"], description="mean R"),
    }

    def compute(v):
        wl = Workload(prompts=c["prompts"], group_size=c["group_size"],
                      mean_response_len=float(v["mean_response_len"]),
                      max_response_len=c["max_response_len"])
        system = async_system(actor=c["actor"], hardware=c["hardware"], workload=wl,
                              gpus=c["gpus"], rollout_gpus=v["rollout_gpus"],
                              mode=v["mode"], staleness=v["staleness"],
                              partial_rollout=v["partial_rollout"],
                              minibatches=v["minibatches"], consume=v["consume"])
        colocated = placement_system("colocated", actor=c["actor"],
                                     hardware=c["hardware"], workload=wl, gpus=c["gpus"])
        results = {colocated.name + " (sync)": simulate(colocated, wl, steps=8),
                   system.name: simulate(system, wl, steps=8)}
        return compare_table_html(results), [
            staleness_chart({system.name: results[system.name]}),
            timeline_chart(results[system.name], steps=(4, 5))]

    message, out = wire(controls, compute)
    names = list(controls.values())
    return w.VBox([w.HBox([w.VBox(names[:4]), w.VBox(names[4:])]), message, out])


# ---- no-kernel calculator -----------------------------------------------------------------------
STEP_TIME, THROUGHPUT, MEAN_STALENESS = ("step time (s)", "throughput (tokens/s/GPU)",
                                         "mean staleness")
ASYNC_GRID = {"rollout_gpus": (8, 16, 24), "staleness": (0.0, 0.5, 1.0, 2.0, 4.0),
              "partial": ("on", "off"), "minibatches": (1, 4)}
"""The grid of :func:`async_grid`: rollout GPUs (of 32), staleness bounds, partial rollout
("on"/"off") and streaming updates per version."""


def async_grid(grid: dict | None = None, *, workload: Workload | None = None,
               actor: str = "qwen2.5-7b", hardware: str = "h100-sxm", gpus: int = 32,
               steps: int = 8) -> list[dict]:
    """Asynchronous GRPO (KL 0.001, rule reward, streaming consumption) of ``actor`` on ``gpus``
    ``hardware`` GPUs, disaggregated, simulated for every setting of ``grid``, plus the
    colocated synchronous system: one row per system and measure (``STEP_TIME``,
    ``THROUGHPUT``, ``MEAN_STALENESS``) with ``rollout_gpus``, ``staleness``, ``partial``,
    ``minibatches``, ``placement``, ``measure``, ``value`` (the colocated rows repeat the
    controls' values so any setting shows them). Default workload: Chapter 10's 32 prompts x 16,
    512-token prompts, log-normal responses of mean 2,048 cut at 8,192. Settings the library
    rejects give no rows."""
    grid = grid or ASYNC_GRID
    wl = workload or Workload(prompts=32, group_size=16, prompt_len=512,
                              mean_response_len=2048.0, max_response_len=8192)
    common = dict(actor=actor, hardware=hardware, workload=wl, gpus=gpus)
    rows = []

    def add(point, placement, r):
        for measure, value in ((STEP_TIME, r.step_time_s),
                               (THROUGHPUT, r.throughput_tokens_per_s_per_gpu),
                               (MEAN_STALENESS, float(r.staleness.mean()))):
            rows.append({**point, "placement": placement, "measure": measure, "value": value})

    colocated = simulate(placement_system("colocated", kl_coef=0.001, **common), wl, steps)
    for rollout, partial, mb in itertools.product(grid["rollout_gpus"], grid["partial"],
                                                  grid["minibatches"]):
        for s in grid["staleness"]:
            point = {"rollout_gpus": rollout, "staleness": s, "partial": partial,
                     "minibatches": mb}
            try:
                system = async_system(rollout_gpus=rollout, staleness=s,
                                      partial_rollout=partial == "on", minibatches=mb,
                                      **common)
                add(point, "disaggregated", simulate(system, wl, steps))
            except ValueError:
                continue
            add(point, "colocated", colocated)
    return rows


def async_grid_chart(rows: list[dict], *, start: dict | None = None,
                     title: str = "Asynchronous GRPO: the measure against the staleness bound "
                                  "(dashed: colocated synchronous; no kernel needed)"):
    """The measure chosen with the page's own dropdowns (rollout GPUs, partial rollout,
    updates per version, measure) against the staleness bound, disaggregated (line and
    points), with the colocated synchronous system as a dashed rule; rows from
    :func:`async_grid`.

    Raises:
        ValueError: empty ``rows``.
    """
    if not rows:
        raise ValueError("rows is empty: pass async_grid()'s result")
    controls = ["rollout_gpus", "partial", "minibatches", "measure"]
    params, predicate = bound_controls(rows, controls, start)
    data = grid_data(rows, controls + ["staleness", "placement", "value"])
    base = alt.Chart(data).transform_filter(predicate)
    line = base.transform_filter(alt.datum.placement == "disaggregated").mark_line(
        point=True).encode(
        x=alt.X("staleness:Q", title="staleness bound"),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=True)),
        tooltip=["staleness:Q", alt.Tooltip("value:Q", format=".4~g")])
    colocated = base.transform_filter(alt.datum.placement == "colocated").transform_aggregate(
        value="max(value)", groupby=["measure"])
    rule = colocated.mark_rule(strokeDash=[5, 4], color="firebrick").encode(
        y="value:Q", tooltip=[alt.Tooltip("value:Q", format=".4~g", title="colocated sync")])
    label = colocated.transform_calculate(
        text="'colocated sync ' + format(datum.value, '.4~g') + ', ' + datum.measure").mark_text(
        align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
    return (line + rule + label).add_params(*params).properties(width=440, height=220,
                                                                title=title)

