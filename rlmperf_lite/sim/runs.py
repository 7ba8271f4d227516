"""A training run's log next to the models (book section :ref:`sec-profile-workdepth`): the time
of each phase per step, as verl or NeMo-RL log it, mapped onto the book's phases and set against
:func:`~rlmperf_lite.cost.estimate_rl_step` and the simulator for the same workload.

- :func:`read_run_log`: verl's JSON-lines file (its ``file`` logger) or console lines, or
  NeMo-RL's console output, format detected; per step, each logged timer's seconds.
- :func:`compare_run`: the median of each phase over the steps after the warm-up, the estimate
  and the simulated steady state for the workload the log states (response and prompt lengths,
  the batch where logged; the rest from arguments), the relative error of each, and the inputs
  taken from defaults (efficiencies, sequences per GPU, tp, layout); ``preset`` and ``layout``
  simulate a framework's layout and mode instead of the colocated synchronous one.

The names, the files' formats and the mapping are data, with the source each was read from:
``rlmperf_lite/sim/data/run_formats.json`` (:data:`RUN_FORMATS`).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from ..checks import check_bool, check_choice, check_int, check_number
from ..cost import estimate_rl_step
from ..cost.estimate import ALGOS
from .from_cost import system_from_cost
from .workload import Workload

__all__ = ["BOOK_PHASES", "RUN_FORMATS", "RunLog", "PhaseComparison", "RunComparison",
           "read_run_log", "estimated_phase_s", "simulated_phase_s", "compare_run"]

BOOK_PHASES = ("rollout", "reward", "old_logprobs", "ref_logprobs", "critic_values",
               "advantages", "critic_update", "actor_update", "weight_sync", "switch", "step")
"""The phases of a step the book costs, in execution order (``switch``: model switches on a
time-shared pool; ``step``: the whole step)."""

RUN_FORMATS = json.loads((resources.files("rlmperf_lite.sim") / "data" / "run_formats.json")
                         .read_text(encoding="utf-8"))["formats"]
"""Framework -> its log files, timer names, phase mapping, workload metrics and sources."""

_VERL_CONSOLE = re.compile(r"step:(\d+) - (.*)$")
_NEMO_TOTAL = re.compile(r"• Total step time: (\S+)s\s*$")
_NEMO_TIMER = re.compile(r"• ([\w/.\-]+): (\S+)s \(\S+%\)\s*$")
_NEMO_METRIC = re.compile(r"• ([A-Za-z ]+): (\S+)\s*$")


@dataclass(frozen=True)
class RunLog:
    """The steps of one training log: per step, each timer's seconds as logged, and the
    numeric metrics the workload is read from."""

    path: str
    format: str
    """A key of :data:`RUN_FORMATS`."""
    kind: str
    """``"jsonl"``, ``"console"`` or ``"table"`` (a published table's figures,
    :func:`~rlmperf_lite.sim.published.published_run_log`)."""
    steps: tuple
    """Step numbers of shape (S,), as logged (verl) or 1..S in order (NeMo-RL, whose step header
    restarts each epoch)."""
    timing_s: tuple
    """(S,) dicts, timer name as logged -> seconds."""
    metrics: tuple
    """(S,) dicts, metric name -> value, for the metrics the format's workload reads."""

    def phase_keys(self) -> dict:
        """{phase row: logged timers summed into it}; a row names the book phases it holds,
        joined by "+" (``"old_logprobs+ref_logprobs"`` where one timer holds both)."""
        spec, seen = RUN_FORMATS[self.format], {k for t in self.timing_s for k in t}
        rows = {}
        for key, phases in spec["timing"].items():
            if key not in seen:
                continue
            extra = [p for other, p in spec["contains_when_absent"].get(key, {}).items()
                     if other not in seen]
            held = sorted(set(phases) | set(extra), key=BOOK_PHASES.index)
            rows.setdefault("+".join(held), []).append(key)
        return rows

    def phase_seconds(self) -> dict:
        """{phase row: seconds per step, shape (S,)}, NaN where a step logged none of the
        row's timers."""
        return {row: np.array([sum(t[k] for k in keys if k in t) if any(k in t for k in keys)
                               else np.nan for t in self.timing_s])
                for row, keys in self.phase_keys().items()}

    @property
    def unmapped(self) -> tuple:
        """Logged timers that are no phase of the book's step, sorted."""
        mapped = RUN_FORMATS[self.format]["timing"]
        return tuple(sorted({k for t in self.timing_s for k in t} - set(mapped)))


def read_run_log(path, format: str | None = None) -> RunLog:
    """The per-step timers of the training log at ``path``: verl's ``file``-logger JSON lines
    or console lines, or NeMo-RL's console output (:data:`RUN_FORMATS`); ``format`` None
    detects it from the lines.

    Raises:
        ValueError: naming the file: missing, a directory, empty, not text, no line of the
            format (or of any, for detection), no timer, or a timer that is not a finite
            number of seconds >= 0 (with its line and name); ``format`` not a known one.
    """
    if format is not None:
        check_choice("format", format, tuple(RUN_FORMATS))
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be the path of a log file, got {path!r}")
    path = Path(path)
    lines = _read_lines(path)
    fmt = format or _detect(lines, path)
    kind, steps, timing, metrics = (_parse_verl if fmt == "verl" else _parse_nemo)(lines, path)
    if not steps:
        raise ValueError(f"{path}: no step with {fmt} timers ({_timer_hint(fmt)}): is this "
                         f"a training log of {fmt}?")
    return RunLog(str(path), fmt, kind, tuple(steps), tuple(timing), tuple(metrics))


def _read_lines(path: Path) -> list:
    """The file's lines, or a ValueError saying why there are none."""
    if not path.exists():
        raise ValueError(f"log file {str(path)!r} does not exist: pass the path of a training "
                         f"log (verl's JSON lines or console output, NeMo-RL's console output)")
    if path.is_dir():
        raise ValueError(f"log file {str(path)!r} is a directory: pass the log file in it")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"log file {str(path)!r} is not UTF-8 text: pass a text log (not a "
                         f"TensorBoard events file)") from None
    except OSError as err:                  # e.g. no permission to read it
        raise ValueError(f"log file {str(path)!r} cannot be read ({err.strerror})") from None
    if not text.strip():
        raise ValueError(f"log file {str(path)!r} is empty")
    return text.splitlines()


def _timer_hint(fmt: str) -> str:
    return {"verl": "'timing_s/...' metrics", "nemo-rl": "'• Total step time: ...s' lines"}[fmt]


def _detect(lines, path: Path) -> str:
    """The format of the first line that is a verl record or a NeMo-RL step total."""
    for line in lines:
        if _verl_json(line) is not None or _VERL_CONSOLE.search(line):
            return "verl"
        if _NEMO_TOTAL.search(line):
            return "nemo-rl"
    raise ValueError(f"{path}: the format is none of {tuple(RUN_FORMATS)} (no verl JSON line "
                     f"{{'step': N, 'data': {{...}}}} or 'step:N - key:value' line, no "
                     f"NeMo-RL '• Total step time:' line): pass format= if it is one of them")


def _verl_json(line: str):
    """(step, data) of a verl file-logger line, or None."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(rec, dict) and isinstance(rec.get("data"), dict) and \
            isinstance(rec.get("step"), int) and not isinstance(rec["step"], bool):
        return rec["step"], rec["data"]
    return None


def _verl_console(line: str):
    """(step, data) of a verl console line, values as floats (or the raw text), or None."""
    match = _VERL_CONSOLE.search(line)
    if not match:
        return None
    data = {}
    for part in match.group(2).split(" - "):
        key, sep, value = part.rpartition(":")
        if sep:
            data[key.strip()] = _number(value.strip())
    return int(match.group(1)), data


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def _seconds(path: Path, where: str, name: str, value) -> float:
    """A timer's value as finite seconds >= 0, or a ValueError naming the file and timer."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value >= 0
    if not ok:
        raise ValueError(f"{path}:{where}: timer {name!r} is {value!r}, not a finite number of "
                         f"seconds >= 0: drop the line or fix the value")
    return float(value)


def _parse_verl(lines, path: Path) -> tuple:
    """(kind, steps, timing, metrics) of verl JSON or console lines (a step logged twice, as
    after a resume, keeps its last record)."""
    spec, kind, by_step = RUN_FORMATS["verl"], None, {}
    wanted = set(spec["workload"].values())
    for i, line in enumerate(lines, 1):
        rec, this = _verl_json(line), "jsonl"
        if rec is None:
            rec, this = _verl_console(line), "console"
        if rec is None:
            continue
        step, data = rec
        timing = {k: _seconds(path, str(i), k, v) for k, v in data.items()
                  if k.startswith(spec["timing_prefix"])}
        if not timing:                      # e.g. validation metrics logged at step 0
            continue
        kind = kind or this
        metrics = {k: float(data[k]) for k in wanted if isinstance(data.get(k), (int, float))
                   and not isinstance(data[k], bool) and math.isfinite(data[k])}
        by_step[step] = (timing, metrics)
    steps = sorted(by_step)
    return kind, steps, [by_step[s][0] for s in steps], [by_step[s][1] for s in steps]


def _parse_nemo(lines, path: Path) -> tuple:
    """(kind, steps, timing, metrics) of NeMo-RL console output: a step's block opens at its
    '• Total step time' line; the metrics printed since the previous block belong to it."""
    spec = RUN_FORMATS["nemo-rl"]
    names = spec["console_metrics"]
    timing, metrics, pending = [], [], {}
    for i, line in enumerate(lines, 1):
        total = _NEMO_TOTAL.search(line)
        if total:
            timing.append({"total_step_time": _seconds(path, str(i), "total_step_time",
                                                       _number(total.group(1)))})
            metrics.append(pending)
            pending = {}
            continue
        timer = _NEMO_TIMER.search(line)
        if timer and timing:
            timing[-1][timer.group(1)] = _seconds(path, str(i), timer.group(1),
                                                  _number(timer.group(2)))
            continue
        metric = _NEMO_METRIC.search(line)
        if metric and metric.group(1) in names:
            value = _number(metric.group(2))
            if isinstance(value, float) and math.isfinite(value):
                pending[names[metric.group(1)]] = value
    return "console", list(range(1, len(timing) + 1)), timing, metrics


# ---- the models' side -------------------------------------------------------------------------

_SIM_PHASES = {"reward": "reward", "old_logp": "old_logprobs", "ref_logp": "ref_logprobs",
               "values": "critic_values", "actor_update": "actor_update",
               "critic_update": "critic_update", "switch": "switch"}


def estimated_phase_s(estimate) -> dict:
    """{book phase: seconds} of an :class:`~rlmperf_lite.cost.RLStepEstimate` (rollout =
    prefill + decode; ``step`` = the total, which has no model switches)."""
    out = {}
    for p in estimate.phases:
        book = "rollout" if p.name in ("rollout_prefill", "rollout_decode") else p.name
        if book in BOOK_PHASES:
            out[book] = out.get(book, 0.0) + float(p.time_s)
    out["step"] = float(estimate.time_s)
    return out


def simulated_phase_s(result) -> dict:
    """{book phase: mean seconds per steady-state step} of a
    :class:`~rlmperf_lite.sim.SimResult`: its phases' bars, model switches, weight sync and
    step time; advantages are free in the simulator. ``rollout`` is, in a synchronous run, each
    step's generation span; in an asynchronous one the trainer's wait for its samples, the
    step less the trainer pool's bars and the sync (what verl's fully-async and one-step-off
    ``gen`` / ``wait_prev_gen`` timers measure). The phases the system does not run are absent.

    Raises:
        ValueError: naming ``result`` if it is not a SimResult.
    """
    from .result import SimResult
    if not isinstance(result, SimResult):
        raise ValueError(f"result must be the SimResult of a run, got {result!r:.80}")
    window = range(result.warmup_steps, result.steps)
    out = {"advantages": 0.0, "switch": 0.0}
    out.update({_SIM_PHASES[p]: 0.0 for p in result.system.costs if p in _SIM_PHASES})
    for iv in result.intervals:
        if iv.step in window and iv.phase in _SIM_PHASES:
            book = _SIM_PHASES[iv.phase]
            out[book] = out.get(book, 0.0) + (iv.end_s - iv.start_s) / len(window)
    out["weight_sync"] = float(np.mean([b - a for a, b in result.sync_windows[window.start:]]))
    out["step"] = result.step_time_s
    if result.system.mode == "sync":
        out["rollout"] = float(np.mean([result.generation_span_s(s) for s in window]))
    else:                       # the trainer's pool: busy with its bars, else waiting
        trainer = result.system.placement["actor"]
        busy = sum(iv.end_s - iv.start_s for iv in result.intervals
                   if iv.step in window and iv.pool == trainer) / len(window)
        out["rollout"] = max(0.0, out["step"] - busy - out["weight_sync"])
    return out


# ---- the comparison ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseComparison:
    """One row: measured (median over the steps used), estimated and simulated seconds, and
    the relative error (measured - model) / measured of each (None where a side lacks it)."""

    phase: str
    """The book phases the row holds, joined by "+"."""
    logged_as: tuple
    """The framework's timers summed into the row."""
    measured_s: float
    estimated_s: float | None
    simulated_s: float | None
    estimate_error: float | None
    simulation_error: float | None


@dataclass(frozen=True)
class RunComparison:
    """A run measured against the estimate and the simulator (:func:`compare_run`)."""

    log: str
    format: str
    kind: str
    steps_logged: int
    steps_used: tuple
    """The step numbers the medians are taken over (after the warm-up)."""
    inputs: dict
    """The workload and settings both models were given."""
    inferred: dict
    """Input -> the logged metric (or timers) it was read from."""
    not_inferred: tuple
    """The inputs no log states, taken from defaults (or the arguments), each with its
    value."""
    rows: tuple
    """:class:`PhaseComparison` rows in the book's phase order."""
    unmapped: tuple
    notes: tuple = field(default=())
    estimated_phases_s: dict = field(default_factory=dict)
    """Every phase of the estimate, logged or not, as book phase -> seconds
    (:func:`estimated_phase_s`; empty when the layout has no estimate)."""
    simulated_phases_s: dict = field(default_factory=dict)
    """Every phase of the simulated steady state (:func:`simulated_phase_s`), logged or not."""

    def as_dict(self) -> dict:
        """Plain types only (None for a missing value): strict JSON."""
        return {"log": self.log, "format": self.format, "kind": self.kind,
                "steps_logged": self.steps_logged, "steps_used": list(self.steps_used),
                "inputs": dict(self.inputs), "inferred": dict(self.inferred),
                "not_inferred": list(self.not_inferred),
                "rows": [{**asdict(r), "logged_as": list(r.logged_as)} for r in self.rows],
                "unmapped": list(self.unmapped), "notes": list(self.notes),
                "estimated_phases_s": dict(self.estimated_phases_s),
                "simulated_phases_s": dict(self.simulated_phases_s)}


def _median(log: RunLog, name: str, used) -> float | None:
    """The median over ``used`` steps of a workload metric of the format, or None."""
    metric = RUN_FORMATS[log.format]["workload"].get(name)
    values = [log.metrics[i][metric] for i in used if metric in log.metrics[i]]
    return float(np.median(values)) if values else None


def _lengths(log: RunLog, used, prompt_len, response_len, inferred: dict) -> tuple:
    """(P, R) from the arguments, else the logged means; ValueError naming the missing one."""
    out = []
    for name, given in (("prompt_len", prompt_len), ("response_len", response_len)):
        if given is None:
            given = _median(log, name, used)
            metric = RUN_FORMATS[log.format]["workload"].get(name)
            if given is None:
                raise ValueError(f"{name}: {log.path} logs no {name.replace('_', ' ')} "
                                 f"({metric or 'the ' + log.format + ' console prints none'}): "
                                 f"pass {name}")
            inferred[name] = f"{metric} (median {given:g})"
            given = max(1, int(round(given)))
        check_int(name, given, 1)
        out.append(given)
    return tuple(out)


def _batch(log: RunLog, used, P: int, R: int, prompts, group_size, inferred, notes) -> tuple:
    """(B, G): the arguments, or B G = the logged tokens per step / (P + R) split by the one
    given; ValueError naming ``prompts`` / ``group_size`` when neither the log nor they say."""
    tokens = _median(log, "total_tokens", used)
    samples = None if tokens is None else tokens / (P + R)
    if prompts is not None and group_size is not None:
        if samples is not None and abs(prompts * group_size - samples) > 0.05 * samples:
            notes.append(f"prompts x group_size = {prompts * group_size} but the log's tokens "
                         f"per step / (P + R) give {samples:.0f} samples")
        return prompts, group_size
    if samples is None:
        missing = [f"{n} ({f})" for n, v, f in (("prompts", prompts, "--prompts"),
                                                  ("group_size", group_size, "--group-size"))
                   if v is None]
        raise ValueError(f"{' and '.join(m.split()[0] for m in missing)}: {log.path} does not "
                         f"log the batch (tokens per step): pass {' and '.join(missing)}")
    metric = RUN_FORMATS[log.format]["workload"]["total_tokens"]
    if prompts is None and group_size is None:
        raise ValueError(f"group_size: {log.path} logs the tokens per step ({metric}) but not "
                         f"how they split into prompts x group size: pass group_size "
                         f"(verl's actor_rollout_ref.rollout.n) or prompts")
    if group_size is not None:
        check_int("group_size", group_size, 1)
        prompts = max(1, round(samples / group_size))
        inferred["prompts"] = f"{metric} / (P + R) / group_size"
    else:
        check_int("prompts", prompts, 1)
        group_size = max(1, round(samples / prompts))
        inferred["group_size"] = f"{metric} / (P + R) / prompts"
    return prompts, group_size


def _algorithm(rows: dict, algo, kl_coef, recompute, inferred, not_inferred) -> tuple:
    """(algo, kl_coef, recompute_old_logprobs): the arguments, else from the timers logged."""
    critic = any(p in row.split("+") for row in rows for p in ("critic_values", "critic_update"))
    if algo is None:
        algo = "ppo" if critic else "grpo"
        if critic:
            inferred["algo"] = "the critic timers (logged: ppo)"
        else:
            not_inferred.append("algo='grpo' (no critic timers; the GRPO family costs alike)")
    check_choice("algo", algo, ALGOS)
    ref = any("ref_logprobs" in row.split("+") for row in rows)
    fused = any(row == "old_logprobs+ref_logprobs" for row in rows)
    if fused:
        not_inferred.append("a reference pass (one timer holds the old and reference log-probs)")
    if kl_coef is None:
        kl_coef = 0.001 if ref and algo != "dapo" else 0.0     # only its presence costs time
        if ref:
            inferred["reference"] = "the reference log-prob timer (logged; kl_coef 0.001 " \
                                    "stands for it)"
    check_number("kl_coef", kl_coef, low=0)
    if recompute is None:
        recompute = any("old_logprobs" in row.split("+") for row in rows)
        inferred["recompute_old_logprobs"] = f"the old log-prob timer " \
                                             f"({'' if recompute else 'not '}logged)"
    check_bool("recompute_old_logprobs", recompute)
    return algo, kl_coef, recompute


def _rows(log: RunLog, used, est: dict, sim: dict) -> tuple:
    """The :class:`PhaseComparison` rows, in the book's phase order."""
    keys, seconds = log.phase_keys(), log.phase_seconds()
    rows = []
    for row in sorted(keys, key=lambda r: BOOK_PHASES.index(r.split("+")[0])):
        values = seconds[row][list(used)]
        values = values[np.isfinite(values)]
        if not values.size:
            continue
        measured = float(np.median(values))
        sides = []
        for model in (est, sim):
            parts = [model[p] for p in row.split("+") if p in model]
            sides.append(float(sum(parts)) if parts else None)
        errors = [None if s is None or measured == 0 else (measured - s) / measured
                  for s in sides]
        rows.append(PhaseComparison(row, tuple(keys[row]), measured, *sides, *errors))
    return tuple(rows)


def compare_run(log, *, model, hardware, gpus: int, format: str | None = None,
                algo: str | None = None, prompts: int | None = None,
                group_size: int | None = None, prompt_len: int | None = None,
                response_len: int | None = None, warmup_steps: int = 1,
                train_efficiency: float = 0.4, decode_efficiency: float = 0.6,
                length_sigma: float = 1.0, sim_steps: int | None = None, preset: str | None = None,
                layout: dict | None = None, kl_coef: float | None = None,
                recompute_old_logprobs: bool | None = None) -> RunComparison:
    """The run in ``log`` (a path or a :class:`RunLog`) measured against
    :func:`~rlmperf_lite.cost.estimate_rl_step` and the simulator for its workload on ``gpus``
    x ``hardware``: per phase, the median over the steps after ``warmup_steps``, both models'
    seconds and (measured - model) / measured.

    ``format`` applies to a path. The workload: arguments first, else the log (verl:
    ``response_length/mean``, ``prompt_length/mean``, the batch from ``perf/total_num_tokens``
    and ``prompts`` or ``group_size``; NeMo-RL: the mean generation length); the algorithm,
    reference and old-log-prob recompute from the timers logged unless given (``algo``,
    ``kl_coef``, ``recompute_old_logprobs``). ``not_inferred`` lists the rest. The simulator:
    colocated and synchronous (:func:`~rlmperf_lite.sim.from_cost.system_from_cost`), or
    framework ``preset``'s layout and mode (:func:`~rlmperf_lite.sim.frameworks.framework_system`)
    with its knobs set by ``layout`` (``rollout_share``, ``staleness``, ``minibatches``,
    ``engine_tp``, ``sync_backend``, ...), run for ``sim_steps`` steps (None:
    :func:`~rlmperf_lite.sim.steady_steps`, the book's one steady-state window). The estimate
    models the colocated synchronous step only: for another layout its side is None.

    Raises:
        ValueError: from :func:`read_run_log`; naming ``warmup_steps`` when it leaves no step,
            an input the log does not give (named), ``preset`` or ``layout``, or a bad
            argument (from the cost models and the simulator too).
    """
    run = log if isinstance(log, RunLog) else read_run_log(log, format)
    check_int("gpus", gpus, 1)
    check_number("length_sigma", length_sigma, low=0, high=4)
    check_int("sim_steps", sim_steps, 2, optional=True)
    layout, used = _layout(preset, layout), _used_steps(run, warmup_steps)
    inferred, not_inferred, notes = {}, [], []
    P, R = _lengths(run, used, prompt_len, response_len, inferred)
    B, G = _batch(run, used, P, R, prompts, group_size, inferred, notes)
    algo, kl_coef, recompute = _algorithm(run.phase_keys(), algo, kl_coef,
                                          recompute_old_logprobs, inferred, not_inferred)
    common = dict(algo=algo, kl_coef=kl_coef, recompute_old_logprobs=recompute,
                  train_efficiency=train_efficiency, decode_efficiency=decode_efficiency)
    workload = _sim_workload(run, used, B, G, P, R, length_sigma, not_inferred)
    est, system = _estimate_and_system(model, hardware, gpus, workload, R, common, preset,
                                       layout, notes)
    inputs = dict(model=getattr(model, "name", model), hardware=getattr(hardware, "name",
                  hardware), gpus=gpus, prompts=B, group_size=G, prompt_len=P,
                  response_len=R, **common, preset=preset, layout=dict(layout),
                  mode=system.mode)
    from . import simulate, steady_steps
    sim = simulate(system, workload, steady_steps(system) if sim_steps is None else sim_steps)
    not_inferred += _defaults(train_efficiency, decode_efficiency, system, preset, layout)
    est_s, sim_s = {} if est is None else estimated_phase_s(est), simulated_phase_s(sim)
    rows = _rows(run, used, est_s, sim_s)
    _notes(run, gpus, rows, notes, used)
    return RunComparison(run.path, run.format, run.kind, len(run.steps),
                         tuple(run.steps[i] for i in used), inputs, inferred,
                         tuple(not_inferred), rows, run.unmapped, tuple(notes), est_s, sim_s)


def _used_steps(run: RunLog, warmup_steps) -> range:
    """The indices of the steps after the warm-up, or a ValueError naming ``warmup_steps``."""
    check_int("warmup_steps", warmup_steps, 0)
    if warmup_steps >= len(run.steps):
        raise ValueError(f"warmup_steps={warmup_steps} leaves none of the {len(run.steps)} "
                         f"steps of {run.path}: pass a smaller warmup_steps")
    return range(warmup_steps, len(run.steps))


_OWN_ARGS = ("algo", "kl_coef", "recompute_old_logprobs", "train_efficiency",
             "decode_efficiency")


def _layout(preset, layout) -> dict:
    """``layout`` checked against ``preset``'s knobs, as a dict; ValueError naming either."""
    from .frameworks import OVERRIDES, PRESETS
    if preset is None:
        if layout:
            raise ValueError(f"layout={layout!r} sets a preset's knobs: pass preset= too "
                             f"(one of {list(PRESETS)})")
        return {}
    check_choice("preset", preset, tuple(PRESETS))
    layout = {} if layout is None else layout
    if not isinstance(layout, dict):
        raise ValueError(f"layout must be a dict of preset knobs or None, got {layout!r:.80}")
    own = sorted(set(layout) & set(_OWN_ARGS))
    unknown = sorted(set(layout) - set(OVERRIDES))
    if own or unknown:
        why = "are arguments of compare_run: pass them as such" if own else \
            "are no knobs of a preset"
        raise ValueError(f"layout: {own or unknown} {why}; knobs: "
                         f"{[k for k in OVERRIDES if k not in _OWN_ARGS]}")
    return dict(layout)


def _estimate_and_system(model, hardware, gpus: int, workload: Workload, R: int,
                         common: dict, preset, layout: dict, notes: list) -> tuple:
    """(the estimate, or None for a layout it does not model; the simulator's system)."""
    from .frameworks import PRESETS, framework_system
    tp = layout.get("engine_tp")
    est = None
    if preset is None or PRESETS[preset].layout == "colocated":
        est = estimate_rl_step(actor=model, hardware=hardware, prompts=workload.prompts,
                               group_size=workload.group_size, prompt_len=workload.prompt_len,
                               response_len=R, gpus=gpus,
                               rollout_tp=tp if isinstance(tp, int) else None, **common)
        if not est.fits:
            notes.append(f"the estimate does not fit in memory: {est.overflow}")
    else:
        notes.append(f"no estimate: estimate_rl_step models the colocated synchronous step, "
                     f"not preset {preset!r}'s {PRESETS[preset].layout} layout")
    if preset is None:
        return est, system_from_cost(model, hardware, workload, placement="colocated",
                                     gpus=gpus, **common)
    return est, framework_system(preset, actor=model, hardware=hardware, gpus=gpus,
                                 workload=workload, **common, **layout)


def _sim_workload(run: RunLog, used, B, G, P, R, length_sigma, not_inferred) -> Workload:
    """The simulator's workload: the log's longest response as the budget, else 4 R."""
    longest = RUN_FORMATS[run.format]["workload"].get("max_response_len")
    values = [run.metrics[i][longest] for i in used if longest in run.metrics[i]]
    budget = max(R, int(math.ceil(max(values)))) if values else 4 * R
    if not values:
        not_inferred.append(f"max_response_len={budget} (4 x the mean response length)")
    not_inferred.append(f"the response lengths' spread: log-normal, sigma={length_sigma:g} "
                        f"(the estimate gives every response the mean)")
    return Workload(prompts=B, group_size=G, prompt_len=P, mean_response_len=float(R),
                    max_response_len=budget, length_sigma=length_sigma)


def _defaults(train_efficiency, decode_efficiency, system, preset, layout: dict) -> list:
    """The model inputs no log states, with the values used."""
    given = "engine_tp" in layout
    out = [f"train_efficiency={train_efficiency:g} (MFU of the training passes)",
           f"decode_efficiency={decode_efficiency:g} (share of HBM bandwidth in decode)",
           "sequences per GPU in decode (the estimate: the batch over the replicas; the "
           "simulator: max_num_seqs=256 slots per replica, KV cache in 0.9 of HBM)",
           f"rollout tp={system.engine.tp} "
           f"({'given' if given else 'the smallest replica that holds the model'})"]
    pools = ", ".join(f"{p} {n}" for p, n in system.pools.items() if p != "cpu")
    if preset is None:
        out.append(f"the layout: colocated on all {system.gpus} GPUs, ZeRO-3 training, "
                   f"synchronous")
    else:
        out.append(f"the layout: preset {preset!r} ({pools}; {system.mode}, staleness "
                   f"{system.staleness:g}) with {layout or 'its defaults'}")
    return out


_UNMODELLED = {"reward": "a rule-based reward is no GPU work in the models (the log's seconds "
                         "are the CPU's)",
               "switch": "the estimate has no model switches (the simulator has)"}


def _notes(run: RunLog, gpus: int, rows, notes: list, used) -> None:
    """What to keep in mind reading the rows: phases a model leaves out, rounding, and the
    GPUs the log implies."""
    notes += [f"{r.phase}: {_UNMODELLED[r.phase]}" for r in rows
              if r.phase in _UNMODELLED and (r.estimated_s is None or r.simulated_s is None)]
    if run.kind == "console":
        notes.append(f"console values are rounded to {({'verl': 3, 'nemo-rl': 2})[run.format]} "
                     f"decimals")
    tokens = _median(run, "total_tokens", used)
    rate = _median(run, "throughput_tokens_per_s_per_gpu", used)
    step = [t.get("timing_s/step") for t in (run.timing_s[i] for i in used)]
    step = [s for s in step if s]
    if tokens and rate and step:
        implied = tokens / (rate * float(np.median(step)))
        if abs(implied - gpus) > 0.05 * gpus:
            notes.append(f"perf/throughput implies {implied:.1f} GPUs, not gpus={gpus}")
