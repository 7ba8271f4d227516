"""Search every parallel layout of a training job and rank the valid ones by predicted step
time (book section :ref:`sec-choose-plan`).

The search space for ``gpus`` GPUs: every ordered factorisation dp x tp x pp x cp = gpus; for a
MoE model every ep dividing dp x cp (ep = 1 for a dense model); every ZeRO stage, recompute
mode, sp (True only with tp > 1) and interleave (> 1 only with pp > 1) among the options given.
microbatches = global_batch / (dp x micro_batch_size). Stages: L / pp layers each when pp x v
divides L, else (``uneven_stages``) the balanced first/last-stage layout of
:func:`rlmperf_lite.cost.balanced_stage_layers` (94 layers, pp = 4: 23/24/24/23),
as Megatron-Core's ``--decoder-first/last-pipeline-num-layers`` allow; and, with
``uneven_stages``, where it differs, a second candidate with the layout that balances the
stages' work with the LM head on the last stage
(:func:`rlmperf_lite.cost.work_balanced_stage_layers`; 94 layers, pp = 4: 24/24/24/22; 80
layers, pp = 8: 11/10 x 6/9), so the search picks whichever is faster or fits (the first stage,
which holds the most micro-batches in flight, may then hold more layers). Every plan carries the
``backend`` whose rules apply (:mod:`rlmperf_lite.cost.backends`). Combinations that are
meaningless by construction (sp without tp, interleaving without a pipeline, ep on a dense
model) are not generated; all others are, and each is either ranked or rejected with the
rules it breaks (:meth:`rlmperf_lite.cost.ParallelPlan.check`) and "out of memory" when
:func:`rlmperf_lite.cost.memory_per_gpu` exceeds ``memory_fraction`` of the HBM.

All candidates are costed at once with numpy arrays, through the same kernels as
:func:`rlmperf_lite.cost.train_step_time` and :func:`rlmperf_lite.cost.memory_per_gpu`, so
the numbers equal theirs plan by plan (``tests/test_cost_parallel_planner.py``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ..checks import check_bool, check_choice, check_efficiency, check_int, check_number
from .backends import DEFAULT_BACKEND, training_backend
from .hardware import HardwareSpec, resolve_hardware
from .model import ModelConfig
from .parallel_memory import SCHEDULES, train_memory_arrays
from .parallel_plan import (RECOMPUTE, ParallelPlan, TrainWorkload, balanced_stage_layers,
                            plan_rules)
from .parallel_step import check_links, stage_train_flops, step_time_arrays
from .presets import resolve_model

__all__ = ["RankedPlan", "PlanSearch", "search_plans", "compare_nvlink_domains",
           "work_balanced_stage_layers"]

_FIELDS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero_stage", "microbatches", "interleave",
           "recompute")


@dataclass(frozen=True)
class RankedPlan:
    """A valid plan and its predicted cost."""

    plan: ParallelPlan
    step_time_s: float
    memory_per_gpu_bytes: float
    comm_share: float
    """Share of the step in exposed communication."""
    bubble_share: float
    """Share of the step in the pipeline bubble."""

    def as_row(self) -> dict:
        return {**self.plan.as_dict(), "step_time_s": self.step_time_s,
                "memory_per_gpu_gb": self.memory_per_gpu_bytes / 1e9,
                "comm_share": self.comm_share, "bubble_share": self.bubble_share}


class PlanSearch:
    """The result of :func:`search_plans`: ``ranked`` (valid plans, fastest first),
    ``rejected`` ((plan, reasons) pairs), ``best``, ``table()``, and the raw per-candidate
    arrays in ``columns`` (plan fields) and ``costs`` (step-time parts, memory)."""

    def __init__(self, columns: dict, costs: dict, rules: list):
        self.columns, self.costs, self._rules = columns, costs, rules
        broken = np.zeros(len(columns["dp"]), dtype=bool)
        for mask, _ in rules:
            broken |= mask
        valid = np.flatnonzero(~broken)
        self._order = valid[np.argsort(costs["total_s"][valid], kind="stable")]
        self._broken = broken

    @property
    def num_enumerated(self) -> int:
        return int(self._broken.size)

    @property
    def num_valid(self) -> int:
        return int(self._order.size)

    def plan(self, i: int) -> ParallelPlan:
        """Candidate ``i`` as a :class:`ParallelPlan`."""
        c = self.columns
        stages = {k: int(c[k][i]) or None for k in ("first_stage_layers", "last_stage_layers")}
        return ParallelPlan(**{k: (RECOMPUTE[int(c[k][i])] if k == "recompute" else
                                   bool(c[k][i]) if k == "sp" else int(c[k][i]))
                               for k in _FIELDS}, **stages, backend=str(c["backend"][i]))

    @cached_property
    def ranked(self) -> list[RankedPlan]:
        c = self.costs
        return [RankedPlan(self.plan(i), float(c["total_s"][i]), float(c["total_bytes"][i]),
                           float(c["comm_share"][i]), float(c["bubble_share"][i]))
                for i in self._order]

    @cached_property
    def rejected(self) -> list[tuple[ParallelPlan, tuple[str, ...]]]:
        reasons: dict[int, list[str]] = {}
        for mask, message in self._rules:
            for i in np.flatnonzero(mask):
                reasons.setdefault(int(i), []).append(message(i))
        return [(self.plan(i), tuple(reasons[i])) for i in sorted(reasons)]

    @property
    def best(self) -> RankedPlan | None:
        return self.ranked[0] if self._order.size else None

    def table(self, limit: int | None = None) -> list[dict]:
        """The ranked plans as flat rows (plan fields, step_time_s, memory_per_gpu_gb,
        comm_share, bubble_share), fastest first, at most ``limit`` of them."""
        check_int("limit", limit, 1, optional=True)
        return [r.as_row() for r in self.ranked[:limit]]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def work_balanced_stage_layers(num_layers: int, pp: int, interleave: int = 1, *,
                               first_extra: float = 0.0, last_extra: float = 0.0) -> tuple | None:
    """The layers of each of ``pp`` stages in Megatron-Core's first/last-stage layout (first,
    k x (pp - 2), last; every stage a multiple of v, at least v) whose slowest stage is least
    when the first and last stages also do ``first_extra`` / ``last_extra`` layers' worth of
    work (the embedding and LM head: :func:`rlmperf_lite.cost.stage_train_flops`);
    ties: the most even (least sum of squared stage work). None for pp = 1 or no layout.
    Example: 80 layers, pp = 8, last_extra 1.36 (Qwen2.5-72B's head) -> (11, 10 x 6, 9).

    Raises:
        ValueError: sizes not ints >= 1, extras not numbers >= 0.
    """
    for label, x in (("num_layers", num_layers), ("pp", pp), ("interleave", interleave)):
        check_int(label, x, 1)
    for label, x in (("first_extra", first_extra), ("last_extra", last_extra)):
        check_number(label, x, low=0)
    L, p, v = num_layers, pp, interleave
    if p == 1:
        return None
    f = np.arange(v, L + 1, v, dtype=np.float64)[:, None]                # (F, 1) first
    la = f.T                                                             # (1, F) last
    rest = L - f - la                                                    # for the middle
    if p == 2:
        ok, mid = rest == 0, np.zeros_like(rest)
    else:
        ok = (rest > 0) & (np.mod(rest, (p - 2) * v) == 0)
        mid = rest / (p - 2)
    work = np.stack(np.broadcast_arrays(f + first_extra, mid, la + last_extra))   # (3, F, F)
    top = np.where(ok, work.max(axis=0), np.inf)
    spread = (work[0] ** 2 + (p - 2) * work[1] ** 2 + work[2] ** 2)
    if not ok.any():
        return None
    i = np.lexsort((spread[ok], top[ok]))[0]                            # least top, then spread
    a, k, b = (int(round(x[ok][i])) for x in np.broadcast_arrays(f, mid, la))
    return (a,) + (k,) * (p - 2) + (b,)


def _stage_layouts(cols: dict, model: ModelConfig, seq_len: int, uneven: bool = True) -> dict:
    """Set each plan's first/last stage layers (0 = even): with ``uneven``, the balanced layout
    where pp x v does not divide L (none found: left even, and the rules reject the plan); and,
    with ``uneven``, append a copy of each pipelined plan with a layer-balanced layout whose
    :func:`rlmperf_lite.cost.work_balanced_stage_layers` (the LM head's work on the last
    stage, for the plan's recompute mode) differs, carrying that layout. Returns the (possibly
    longer) columns."""
    L = model.num_hidden_layers
    pp, v, rc = cols["pp"], cols["interleave"], cols["recompute"]
    first, last = np.zeros_like(pp), np.zeros_like(pp)
    for p, w in {(int(a), int(b)) for a, b in zip(pp, v) if uneven and a > 1 and L % (a * b)}:
        layout = balanced_stage_layers(L, p, w)
        if layout is not None:
            sel = (pp == p) & (v == w)
            first[sel], last[sel] = layout[0], layout[-1]
    cols["first_stage_layers"], cols["last_stage_layers"] = first, last
    if not uneven:
        return cols
    extra_first, extra_last, rows = [], [], []
    for p, w, r in {(int(a), int(b), int(c)) for a, b, c in zip(pp, v, rc) if a > 1}:
        base = balanced_stage_layers(L, p, w)
        f = stage_train_flops(model, seq_len, RECOMPUTE[r])
        layout = work_balanced_stage_layers(L, p, w, first_extra=f["embedding"] / f["layer"],
                                            last_extra=f["lm_head"] / f["layer"])
        if base is None or layout is None or layout == base:
            continue
        sel = np.flatnonzero((pp == p) & (v == w) & (rc == r))
        rows.append(sel)
        extra_first.append(np.full(sel.size, layout[0]))
        extra_last.append(np.full(sel.size, layout[-1]))
    if not rows:
        return cols
    idx = np.concatenate(rows)
    out = {k: np.concatenate([a, a[idx]]) for k, a in cols.items()}
    out["first_stage_layers"][len(pp):] = np.concatenate(extra_first)
    out["last_stage_layers"][len(pp):] = np.concatenate(extra_last)
    return out


def _enumerate(model, gpus, workload, zero_stages, recompute, sp, interleave) -> dict:
    base = [(dp, tp, pp, gpus // (dp * tp * pp)) for dp in _divisors(gpus)
            for tp in _divisors(gpus // dp) for pp in _divisors(gpus // (dp * tp))]
    rows = [(*r, ep) for r in base
            for ep in (_divisors(r[0] * r[3]) if model.is_moe else (1,))]
    rows = np.array(rows, dtype=np.int64)                                  # (R, 5)
    combos = np.array(list(itertools.product(zero_stages, sp, interleave,
                                             [RECOMPUTE.index(r) for r in recompute])),
                      dtype=np.int64)                                     # (K, 4)
    r_idx = np.repeat(np.arange(len(rows)), len(combos))
    k_idx = np.tile(np.arange(len(combos)), len(rows))
    cols = {k: rows[r_idx, j] for j, k in enumerate(("dp", "tp", "pp", "cp", "ep"))}
    cols.update(zero_stage=combos[k_idx, 0], sp=combos[k_idx, 1].astype(bool),
                interleave=combos[k_idx, 2], recompute=combos[k_idx, 3])
    keep = (~cols["sp"] | (cols["tp"] > 1)) & ((cols["interleave"] == 1) | (cols["pp"] > 1))
    cols = {k: a[keep] for k, a in cols.items()}
    per_rank = workload.global_batch // (cols["dp"] * workload.micro_batch_size)
    cols["microbatches"] = np.maximum(per_rank, 1)          # the rules reject indivisible ones
    return cols


def _check_options(zero_stages, recompute, sp, interleave) -> None:
    """ValueError naming the option unless each is a non-empty tuple of allowed values."""
    for label, opts, allowed in (("zero_stages", zero_stages, (0, 1, 2, 3)),
                                 ("recompute", recompute, RECOMPUTE),
                                 ("sp", sp, (False, True))):
        if not isinstance(opts, (tuple, list)) or not opts:
            raise ValueError(f"{label} must be a non-empty tuple, got {opts!r}")
        for o in opts:
            check_choice(f"{label} entry", o, allowed)
    if not isinstance(interleave, (tuple, list)) or not interleave:
        raise ValueError(f"interleave must be a non-empty tuple, got {interleave!r}")
    for v in interleave:
        check_int("interleave entry", v, 1)


def search_plans(model: ModelConfig, hardware: HardwareSpec, gpus: int,
                 workload: TrainWorkload, *, zero_stages=(0, 1, 2, 3), recompute=RECOMPUTE,
                 sp=(False, True), interleave=(1, 2), efficiency: float = 1.0,
                 overlap: float = 1.0, memory_fraction: float = 1.0, schedule: str = "1f1b",
                 dtype: str = "bf16", backend: str = DEFAULT_BACKEND,
                 uneven_stages: bool = True) -> PlanSearch:
    """Every layout of ``gpus`` GPUs for ``workload`` (module docstring), costed with
    :func:`rlmperf_lite.cost.train_step_time` and :func:`rlmperf_lite.cost.memory_per_gpu`'s
    model, valid ones ranked by step time (book section :ref:`sec-choose-plan`).

    Args:
        zero_stages, recompute, sp, interleave: the options searched.
        efficiency, overlap, dtype: as in :func:`rlmperf_lite.cost.train_step_time`.
        memory_fraction: share of the HBM a plan may use (1.0: all of it).
        schedule: "1f1b" or "gpipe", for the activation memory.
        backend: the training library whose rules apply ("megatron", "deepspeed", "fsdp2").
        uneven_stages: give pp values that do not divide the layers their balanced uneven
            layout, and search each pipeline also with the layout balancing the LM head's work
            (module docstring); False: even stages only, rejecting the others.
    Returns:
        :class:`PlanSearch`.
    Raises:
        ValueError: bad types, ``gpus`` < 1, empty or unknown options, ``memory_fraction``
            outside (0, 1], an unknown backend, hardware without link bandwidths when gpus > 1.
    """
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    if not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec, got {type(hardware).__name__}")
    if not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")
    check_int("gpus", gpus, 1)
    _check_options(zero_stages, recompute, sp, interleave)
    check_efficiency("efficiency", efficiency)
    check_number("overlap", overlap, low=0, high=1)
    check_number("memory_fraction", memory_fraction, low=0, high=1, low_open=True)
    check_choice("schedule", schedule, SCHEDULES)
    check_bool("uneven_stages", uneven_stages)
    name = training_backend(backend).name
    hardware.peak(dtype)
    if gpus > 1:
        check_links(hardware)
    cols = _enumerate(model, gpus, workload, tuple(zero_stages), tuple(recompute),
                      tuple(bool(x) for x in sp), tuple(interleave))
    cols["backend"] = np.full(len(cols["dp"]), name)
    cols = _stage_layouts(cols, model, workload.seq_len, uneven_stages)
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = train_memory_arrays(model, cols, workload, schedule)
        costs = step_time_arrays(model, hardware, cols, workload, efficiency, overlap, dtype)
        costs["total_bytes"] = mem["total_bytes"]
        exposed = costs["total_s"] - costs["compute_s"] - costs["bubble_s"]
        costs["comm_share"] = exposed / costs["total_s"]
        costs["bubble_share"] = costs["bubble_s"] / costs["total_s"]
    limit = memory_fraction * hardware.hbm_bytes
    total = mem["total_bytes"]
    rules = plan_rules(model, hardware, cols, gpus, workload)
    rules.append((total > limit, lambda i: f"out of memory: {total[i] / 1e9:.1f} GB > "
                                           f"{limit / 1e9:.3g} GB"))
    return PlanSearch(cols, costs, rules)


def _group_spans(plan: ParallelPlan) -> dict:
    """GPUs each parallel axis's group spans in Megatron-Core's rank order (tp innermost; the
    pipeline spans them all), for the axes of size > 1."""
    spans = {"tp": plan.tp, "cp": plan.tp * plan.cp, "ep": plan.tp * plan.ep,
             "dp": plan.tp * plan.cp * plan.dp, "pp": plan.gpus}
    return {k: n for k, n in spans.items() if getattr(plan, k) > 1}


def compare_nvlink_domains(model, workload: TrainWorkload, gpus: int = 64, *,
                           hardware="gb200-nvl72", domains=(8, 72), baseline="h100",
                           **search_kw) -> list[dict]:
    """What a larger NVLink domain changes (book section :ref:`sec-choose-plan`): the best plan
    of :func:`search_plans` for ``model`` on ``gpus`` GPUs of ``baseline`` as shipped, then of
    ``hardware`` with each NVLink domain of ``domains`` GPUs (the same chips; only the set of
    GPUs that reach each other at the NVLink bandwidth changes, so groups up to a domain — TP,
    CP, EP, DP, the pipeline — stay off the network, and tp may reach the domain's size).

    Returns:
        A list with one row per search, each a dict of {"hardware", "nvlink_domain",
        "num_valid", the best plan's :meth:`RankedPlan.as_row`, "on_nvlink" / "on_network":
        the axes whose group fits in / crosses the domain}; a search with no valid plan has
        only the first three and "step_time_s" None.
    Raises:
        ValueError: an unknown model or hardware, a domain that is not a multiple of the
            hardware's gpus_per_node, and as :func:`search_plans`.
    """
    m = resolve_model(model, "model")
    base, hw = resolve_hardware(baseline, "baseline"), resolve_hardware(hardware)
    if not isinstance(domains, (tuple, list)) or not domains:
        raise ValueError(f"domains must be a non-empty tuple of GPU counts, got {domains!r}")
    for d in domains:
        check_int("domains entry", d, 1)
    rows = []
    for spec in [base] + [replace(hw, nvlink_domain_gpus=int(d)) for d in domains]:
        search = search_plans(m, spec, gpus, workload, **search_kw)
        row = {"hardware": spec.name, "nvlink_domain": spec.nvlink_domain,
               "num_valid": search.num_valid, "step_time_s": None}
        if search.best is not None:
            spans = _group_spans(search.best.plan)
            row.update(search.best.as_row(),
                       on_nvlink=tuple(k for k, n in spans.items() if n <= spec.nvlink_domain),
                       on_network=tuple(k for k, n in spans.items() if n > spec.nvlink_domain))
        rows.append(row)
    return rows
