"""Predicted against published (book section :ref:`sec-profile-workdepth`): every published run
the book cites with seconds per step or per phase, its workload as stated, set against
:func:`~rlmperf_lite.cost.estimate_rl_step` and the simulator through
:func:`~rlmperf_lite.sim.runs.compare_run`, with the relative error of each and, where a model
is more than 30% off, what the data says about why.

- :data:`PUBLISHED_RUNS`: the rows of ``rlmperf_lite/sim/data/published_runs.json`` (one per
  run: source, model, hardware, GPUs, algorithm, workload fields each marked stated, derived or
  assumed, layout, published seconds), the figures it points at loaded from the library's own
  tables (NeMo-RL's step times :data:`~rlmperf_lite.sim.frameworks.NEMO_RL_PERF_V04`, verl's
  sync times :data:`rlmperf_lite.cost.VERL_SYNC_ROWS`) rather than copied.
- :func:`published_run_log`: a row's seconds as a one-step :class:`~rlmperf_lite.sim.runs.RunLog`.
- :func:`published_runs_table`: the table, and the median and worst absolute error of each model.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from importlib import resources

import numpy as np

from ..checks import check_efficiency, check_int, progress_bar
from ..cost import (VERL_SYNC_ROWS, calibrate_weight_sync, resolve_hardware, resolve_model,
                    verl_sync_model_s)
from .frameworks import NEMO_RL_PERF_V04
from .from_cost import system_from_cost
from .runs import BOOK_PHASES, RUN_FORMATS, RunLog, compare_run
from .workload import Workload

__all__ = ["BASES", "FAR_OFF", "PUBLISHED_RUNS", "PublishedComparison", "PublishedTable",
           "load_published_runs", "published_run_log", "published_runs_table"]

BASES = ("stated", "derived", "assumed")
"""How a workload field is known. The source says it, it is computed from what the source says
(formula in its basis), or it is assumed (with where the value comes from)."""

FAR_OFF = 0.3
"""A model is far off a row when abs((published - model) / published) exceeds this."""

_FILE = "published_runs.json"
_ROW_KEYS = ("id", "kind", "source", "tables", "model", "preset", "hardware")
_WORKLOAD = ("prompts", "group_size", "prompt_len", "mean_response_len", "max_response_len",
             "length_sigma")


def _check_row(row: dict, sources: dict, where: str) -> None:
    """ValueError naming ``where`` unless ``row`` has its keys, a known source and bases."""
    missing = [k for k in _ROW_KEYS if k not in row]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}")
    if row["kind"] not in ("step", "weight_sync"):
        raise ValueError(f"{where}: kind must be 'step' or 'weight_sync', got {row['kind']!r}")
    if row["source"].get("doc") not in sources or not row["source"].get("section"):
        raise ValueError(f"{where}: source needs a doc of 'sources' and a section")
    if row["kind"] == "step" and sorted(row.get("workload", {})) != sorted(_WORKLOAD):
        raise ValueError(f"{where}: workload must have exactly the fields {list(_WORKLOAD)}")
    for name, f in row.get("workload", {}).items():
        if not str(f.get("basis", "")).startswith(BASES):
            raise ValueError(f"{where}: workload {name}'s basis must start with one of {BASES}")
    bad = sorted(set(row.get("published", {})) - set(BOOK_PHASES))
    if bad:
        raise ValueError(f"{where}: published phases {bad} are not book phases {BOOK_PHASES}")


def _resolve(row: dict, where: str) -> dict:
    """The row with the figures its ``published_from`` points at filled in."""
    ref = row.get("published_from")
    if ref is None:
        return row
    if ref["table"] == "nemo-rl-perf-v0.4.json":
        gpus, step_s = NEMO_RL_PERF_V04["rows"][ref["row"]][ref["pair"]]
        return {**row, "gpus": gpus, "published": {**row["published"], "step": step_s}}
    if ref["table"] == "weight_sync.json verl_sync_rows":
        hit = [r for r in VERL_SYNC_ROWS if r[0] == ref["row"]]
        if len(hit) != 1:
            raise ValueError(f"{where}: no verl sync row {ref['row']!r}")
        _, _, train, rollout, plain_s, engine_s = hit[0]
        return {**row, "gpus": train + rollout, "trainer_ranks": train, "rollout_ranks": rollout,
                "published": {"weight_sync": engine_s if ref["checkpoint_engine"] else plain_s}}
    raise ValueError(f"{where}: published_from names an unknown table {ref['table']!r}")


def load_published_runs(path=None) -> dict:
    """{"sources", "rows", "not_modelled"} of ``path`` (default: the shipped
    ``data/published_runs.json``), each row checked and its ``published_from`` resolved.

    Raises:
        ValueError: naming the file and the row: not JSON, a duplicate id, a missing key, an
            unknown source or table, a workload field without a basis of :data:`BASES`.
    """
    path = resources.files("rlmperf_lite.sim") / "data" / _FILE if path is None else path
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path.name}: not a readable JSON file ({e})") from None
    rows, seen = [], set()
    for i, row in enumerate(rec["rows"]):
        where = f"{path.name}: row {i} ({row.get('id')!r})"
        if row.get("id") in seen:
            raise ValueError(f"{where}: duplicate id")
        seen.add(row.get("id"))
        _check_row(row, rec["sources"], where)
        rows.append(_resolve(row, where))
    return {"sources": rec["sources"], "rows": tuple(rows),
            "not_modelled": tuple(rec["not_modelled"])}


PUBLISHED_RUNS = load_published_runs()
"""The published runs (:func:`load_published_runs`), a dict with keys ``"sources"``,
``"rows"`` and ``"not_modelled"``."""

_VERL_TIMER = {phases[0]: timer for timer, phases in RUN_FORMATS["verl"]["timing"].items()
               if len(phases) == 1}


def published_run_log(row: dict) -> RunLog:
    """A row's published seconds as a one-step :class:`~rlmperf_lite.sim.runs.RunLog` in
    verl's timer names (those :func:`~rlmperf_lite.sim.runs.compare_run` maps onto the book's
    phases; verl's own tables use them), its budget as ``response_length/max``."""
    timing = {_VERL_TIMER[p]: float(s) for p, s in row["published"].items()}
    budget = float(row["workload"]["max_response_len"]["value"])
    return RunLog(f"published:{row['id']}", "verl", "table", (1,), (timing,),
                  ({"response_length/max": budget},))


@dataclass(frozen=True)
class PublishedComparison:
    """One published run against both models: the headline seconds (the step; a sync row's
    weight sync), the relative error (published - model) / published of each (None where a
    model has no number), the generation shares of a colocated synchronous row, and where a
    model is :data:`FAR_OFF`, why."""

    id: str
    kind: str
    source: str
    model: str
    hardware: str
    gpus: int
    layout: str
    published_s: float
    estimated_s: float | None
    simulated_s: float | None
    estimate_error: float | None
    simulation_error: float | None
    published_generation_share: float | None = None
    estimated_generation_share: float | None = None
    simulated_generation_share: float | None = None
    assumed: tuple = ()
    """The inputs the source does not state."""
    in_sample: bool = False
    """A sync row the weight-sync constants were fitted to (left out of the summary)."""
    why: str | None = None
    """Where a model is far off, as the phase with the largest gap, the shares, the assumptions
    and what is not modelled, from the data; where a model cannot set the run up, its
    message."""
    comparison: object = field(default=None, repr=False, compare=False)
    """The row's :class:`~rlmperf_lite.sim.runs.RunComparison` (None for a sync row)."""


@dataclass(frozen=True)
class PublishedTable:
    """The rows of :func:`published_runs_table` and their summary."""

    rows: tuple
    summary: dict
    """The errors per kind of row, as kind -> ``"estimate"`` or ``"simulation"`` -> a dict of
    ``rows``, ``median_abs_error``, ``worst_abs_error`` and ``worst_row``. A weight-sync summary
    counts the held-out rows only."""
    settings: dict
    """The efficiencies and steps every row used (no per-row tuning)."""

    def as_dict(self) -> dict:
        """Plain types only: strict JSON."""
        rows = [{k: v for k, v in asdict(r).items() if k != "comparison"} for r in self.rows]
        for d in rows:
            d["assumed"] = list(d["assumed"])
        return {"rows": rows, "summary": self.summary, "settings": dict(self.settings)}


def _error(published: float, model: float | None) -> float | None:
    return None if model is None else (published - model) / published


def _share(phases: dict) -> float | None:
    return phases["rollout"] / phases["step"] if {"rollout", "step"} <= set(phases) else None


def _assumed(row: dict) -> tuple:
    out = [k for k, f in row.get("workload", {}).items() if f["basis"].startswith("assumed")]
    out += [k[:-len("_basis")] for k, v in row.items()
            if k.endswith("_basis") and str(v).startswith("assumed")]
    return tuple(out)


def _source(row: dict, sources: dict) -> str:
    src = sources[row["source"]["doc"]]
    return f"{src['doc']} @{src['commit']}, {row['source']['section']}"


def _value(row: dict, name: str):
    """A row field that may be a {value, basis} pair, as its value (None if absent)."""
    v = row.get(name)
    return v["value"] if isinstance(v, dict) else v


def _step_row(row: dict, sources: dict, settings: dict) -> PublishedComparison:
    """A step row through :func:`~rlmperf_lite.sim.runs.compare_run`."""
    w = {k: f["value"] for k, f in row["workload"].items()}
    c = compare_run(published_run_log(row), model=row["preset"], hardware=row["hardware"],
                    gpus=row["gpus"], algo=row["algo"], prompts=w["prompts"],
                    group_size=w["group_size"], prompt_len=w["prompt_len"],
                    response_len=int(round(w["mean_response_len"])), warmup_steps=0,
                    length_sigma=w["length_sigma"], preset=row.get("framework_preset"),
                    layout=row.get("layout") or None, kl_coef=_value(row, "kl_coef"),
                    recompute_old_logprobs=_value(row, "recompute_old_logprobs"), **settings)
    step = next(r for r in c.rows if r.phase == "step")
    layout = next(n for n in c.not_inferred if n.startswith("the layout: "))
    shares = (None, None, None)
    if c.estimated_phases_s:                # colocated and synchronous: generation shares
        shares = (_share(row["published"]), _share(c.estimated_phases_s),
                  _share(c.simulated_phases_s))
    out = PublishedComparison(
        row["id"], "step", _source(row, sources), row["model"], row["hardware"], row["gpus"],
        layout[len("the layout: "):], step.measured_s, step.estimated_s, step.simulated_s,
        step.estimate_error, step.simulation_error, *shares, assumed=_assumed(row),
        comparison=c)
    return _with_why(out, row, c)


def _sync_row(row: dict, sources: dict, held_out: dict) -> PublishedComparison:
    """A weight-sync row: the cost model of verl's sync
    (:func:`~rlmperf_lite.cost.verl_sync_model_s`, its assumed Megatron layout) and the
    simulator's disaggregated sync (Megatron at the engine's tp)."""
    bucketed = row["layout"]["sync_bucketed"]
    train, rollout = row["trainer_ranks"], row["rollout_ranks"]
    est = verl_sync_model_s(row["preset"], train, rollout, row["hardware"], bucketed=bucketed)
    try:
        sim, refused = system_from_cost(
            row["preset"], row["hardware"], Workload(), placement="disaggregated",
            gpus=train + rollout, rollout_gpus=rollout, sync_backend="megatron",
            sync_bucketed=bucketed).weight_sync_s, None
    except ValueError as e:     # e.g. a Megatron plan at the engine's tp the model refuses
        sim, refused = None, f"the simulator cannot set this sync up: {e}"
    published = row["published"]["weight_sync"]
    out = PublishedComparison(
        row["id"], "weight_sync", _source(row, sources), row["model"], row["hardware"],
        row["gpus"], f"{train} trainer : {rollout} rollout ranks, Megatron, "
        f"{'checkpoint engine' if bucketed else 'tensor by tensor'}", published, est, sim,
        _error(published, est), _error(published, sim),
        in_sample=not held_out[(row["model"], bucketed)])
    out = _with_why(out, row, None)
    return out if refused is None else dataclasses.replace(
        out, why="; ".join(w for w in (refused, out.why) if w))


def _far(out: PublishedComparison) -> list:
    return [(label, e) for label, e in (("estimate", out.estimate_error),
                                        ("simulation", out.simulation_error))
            if e is not None and abs(e) > FAR_OFF]


def _gap(c, side: str) -> str | None:
    """The logged phase (not the step) with the largest gap to ``side`` ("estimated" or
    "simulated")."""
    rows = [(r.measured_s - getattr(r, f"{side}_s"), r) for r in c.rows
            if r.phase != "step" and getattr(r, f"{side}_s") is not None]
    if not rows:
        return None
    _, r = max(rows, key=lambda x: abs(x[0]))
    return f"largest gap in {r.phase}: {r.measured_s:.1f} s published, " \
           f"{getattr(r, f'{side}_s'):.1f} s {side}"


def _length_notes(row: dict, c) -> list:
    """The tail's effect on each model: the estimate's fixed lengths, the cut mean."""
    w = {k: f["value"] for k, f in row["workload"].items()}
    wl = Workload(prompts=1, group_size=1, prompt_len=1, mean_response_len=w["mean_response_len"],
                  max_response_len=w["max_response_len"], length_sigma=w["length_sigma"])
    n, prob = wl.length_pmf()
    mean = float(n @ prob)
    out = []
    if abs(mean - w["mean_response_len"]) > 0.1 * w["mean_response_len"]:
        out.append(f"the log-normal cut at {w['max_response_len']} tokens has a mean of "
                   f"{mean:.0f} tokens, not the {w['mean_response_len']:g} given")
    est, sim = c.estimated_phases_s.get("rollout"), c.simulated_phases_s.get("rollout")
    if est is not None and sim and est < 0.5 * sim and c.inputs["mode"] == "sync":
        out.append(f"the estimate gives every response the mean length: its generation takes "
                   f"{est:.0f} s, the simulator's long tail {sim:.0f} s")
    return out


def _step_why(out: PublishedComparison, row: dict, c) -> list:
    parts = []
    for label, e in _far(out):
        gap = _gap(c, {"estimate": "estimated", "simulation": "simulated"}[label])
        parts.append(f"{label} {e:+.0%}" + (f" ({gap})" if gap else ""))
    shares = [(n, v) for n, v in (("published", out.published_generation_share),
                                  ("estimated", out.estimated_generation_share),
                                  ("simulated", out.simulated_generation_share)) if v is not None]
    if len(shares) > 1:
        parts.append("generation share " + ", ".join(f"{v:.0%} {n}" for n, v in shares))
    if c.inputs["mode"] == "async":
        parts.append("asynchronous: the rollout row is the trainer's wait for samples")
    parts += _length_notes(row, c)
    return parts


def _sync_why(out: PublishedComparison, row: dict) -> list:
    parts = [f"{label} {e:+.0%}" for label, e in _far(out)]
    hw = resolve_hardware(row["hardware"])
    bytes_ = 2 * resolve_model(row["preset"], "actor").num_params()
    bound = bytes_ / hw.intra_node_bandwidth_bytes_per_s
    if out.published_s < bound:
        parts.append(f"the published {out.published_s:g} s is under the {bound * 1e3:.0f} ms "
                     f"that moving the {bytes_ / 1e9:.1f} GB of bf16 weights over one NVLink "
                     f"takes: the run moves or times less than the whole model")
    parts.append("in-sample: the sync constants were fitted to this row" if out.in_sample else
                 "held out of the sync calibration")
    return parts


def _with_why(out: PublishedComparison, row: dict, c) -> PublishedComparison:
    """``out`` with ``why`` set when a model is far off it."""
    if not _far(out):
        return out
    parts = _step_why(out, row, c) if c is not None else _sync_why(out, row)
    if out.assumed:
        parts.append("assumed: " + ", ".join(out.assumed))
    if row.get("not_modelled"):
        parts.append("not modelled: " + "; ".join(row["not_modelled"]))
    return dataclasses.replace(out, why="; ".join(parts))


def _summary(rows) -> dict:
    """Median and worst absolute error of each model per kind (sync rows: held out only)."""
    out = {}
    for kind in ("step", "weight_sync"):
        mine = [r for r in rows if r.kind == kind and not r.in_sample]
        out[kind] = {}
        for label in ("estimate", "simulation"):
            errs = [(abs(getattr(r, f"{label}_error")), r.id) for r in mine
                    if getattr(r, f"{label}_error") is not None]
            worst = max(errs) if errs else (None, None)
            out[kind][label] = {"rows": len(errs),
                                "median_abs_error": float(np.median([e for e, _ in errs]))
                                if errs else None,
                                "worst_abs_error": worst[0], "worst_row": worst[1]}
    return out


def published_runs_table(runs: dict | None = None, *, train_efficiency: float = 0.4,
                         decode_efficiency: float = 0.6, sim_steps: int | None = None,
                         progress: bool = False) -> PublishedTable:
    """Every row of ``runs`` (default :data:`PUBLISHED_RUNS`) against the estimate and the
    simulator, with one setting for all rows: the efficiencies (default the library's,
    :func:`~rlmperf_lite.sim.runs.compare_run`'s) and the simulated steps (None: the steady
    window, :func:`~rlmperf_lite.sim.steady_steps`). ``progress``: a text bar over the rows.

    A row whose inputs the models refuse (a model that fits no replica of the hardware) is
    kept with no model seconds and the models' message as its ``why``.

    Raises:
        ValueError: naming a bad efficiency, ``sim_steps`` or ``progress``.
    """
    runs = PUBLISHED_RUNS if runs is None else runs
    check_efficiency("train_efficiency", train_efficiency)
    check_efficiency("decode_efficiency", decode_efficiency)
    check_int("sim_steps", sim_steps, 2, optional=True)
    settings = dict(train_efficiency=train_efficiency, decode_efficiency=decode_efficiency,
                    sim_steps=sim_steps)
    held_out = {}
    for r in calibrate_weight_sync()["rows"]:
        held_out[(r["model"], False)] = r["held_out"]
        held_out[(r["model"], True)] = r["held_out_checkpoint_engine"]
    rows = []
    for row in progress_bar(runs["rows"], progress, desc="published runs", unit="run"):
        try:
            rows.append(_step_row(row, runs["sources"], settings) if row["kind"] == "step"
                        else _sync_row(row, runs["sources"], held_out))
        except ValueError as e:         # a run the models cannot place: a row that says so
            rows.append(_refused(row, runs["sources"], e))
    return PublishedTable(tuple(rows), _summary(rows), settings)


def _refused(row: dict, sources: dict, err: ValueError) -> PublishedComparison:
    """A row whose inputs the models refuse: its published seconds, no model, the reason."""
    published = row["published"]["step" if row["kind"] == "step" else "weight_sync"]
    why = f"the models cannot set this run up: {err}"
    if row.get("not_modelled"):
        why += "; not modelled: " + "; ".join(row["not_modelled"])
    return PublishedComparison(row["id"], row["kind"], _source(row, sources), row["model"],
                               row["hardware"], row["gpus"], "not modelled", published, None,
                               None, None, None, assumed=_assumed(row), why=why)
