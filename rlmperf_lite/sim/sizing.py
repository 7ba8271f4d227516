"""Sizing an RL system with the simulator: colocate or disaggregate, how to split the GPUs
between rollout and training, how much staleness to allow, which group size, and when the
weight sync matters (the guidelines of book section :ref:`sec-example-system` on).

Every function simulates (:func:`~rlmperf_lite.sim.simulate`) systems that
:func:`~rlmperf_lite.sim.from_cost.system_from_cost` builds for a real model on real hardware,
and returns the numbers a guideline rests on; none prints. The quantities:

- steady-state step time and throughput (verl's ``perf/throughput``), and each pool's idle
  share, the simulator's analogue of verl's ``rollouter/idle_ratio`` and ``trainer/idle_ratio``;
- a split's *rollout time*, one step's batch generated on the rollout pool with the pool to
  itself, and its *train time*, the phases after generation of one step on the training pool.
  verl's fully-async guide asks for a split that makes them close: "The ideal resource
  allocation should make the rollout time and train time close, thereby minimizing pipeline
  bubbles" (verl docs/advance/fully_async.md, Parameter Tuning Recommendations);
- Brent's bounds on a step's generation (book section :ref:`sec-workdepth-seconds`): no schedule
  generates a batch faster than its work at the engine's best per-token rate, nor faster than
  its longest response decoding alone (its depth);
- the wait of a group of G samples, the expected longest of G lengths
  (:func:`~rlmperf_lite.cost.expected_max_length`).

The engine's replica size is a lever too (``engine_tp`` of
:func:`~rlmperf_lite.sim.from_cost.system_from_cost`, swept by :func:`engine_tp_sweep`):
generation is depth-bound, and a larger tp shortens every decode iteration.

A split is ``rollout_gpus`` GPUs generating and ``gpus - rollout_gpus`` training, with the
rollout GPUs a multiple of the engine's tensor-parallel size and a training pool that
:func:`~rlmperf_lite.sim.from_cost.system_from_cost` accepts (it refuses one that cannot hold
the trained models' ZeRO-3 states, 16 bytes per trained parameter: one model with GRPO, two
with PPO; :func:`min_train_gpus` is that floor for one model).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..checks import check_choice, check_int, check_number
from ..cost import (expected_max_length, model_state_bytes_per_gpu, resolve_hardware,
                    resolve_model)
from ..cost.weight_sync import VERL_SYNC_ROWS, verl_sync_model_s
from ..cost.rollout import rollout_tp
from .from_cost import engine_tp_choices, system_from_cost
from .phases import PoolClock, run_train_phases
from .result import SimResult
from .sync import generation_s
from .system import RLSystem
from .workdepth import generation_workdepth
from .workload import Workload

__all__ = ["EXAMPLE", "example_workload", "PlacementResult", "SplitSearch", "GroupSizePoint",
           "min_train_gpus", "split_candidates", "generation_bounds", "simulate_placement",
           "placement_comparison", "engine_tp_sweep", "best_split", "placement_gain_sweep",
           "crossover_value", "staleness_sweep", "staleness_knee", "expected_group_wait",
           "group_max_mean",
           "group_size_sweep", "weight_sync_comparison", "VERL_WEIGHT_SYNC",
           "weight_sync_against_verl"]

STEPS = 8
"""Steps simulated per system (the steady state is the mean of the last half)."""

EXAMPLE = dict(actor="qwen2.5-7b", hardware="h20", gpus=32, train_efficiency=0.5,
               decode_efficiency=0.6)
"""The book's example system (:ref:`sec-example-system`), Qwen2.5-7B on 32 H20s (GRPO without a KL
term), with the efficiencies of :mod:`rlmperf_lite.sim.reproduce` — a scaled-down version of verl's
fully-async experiment (Qwen2.5-Math-7B on 32 to 128 H20s)."""


def example_workload(length_sigma: float = 1.0, **overrides) -> Workload:
    """The example's step: 128 prompts x 16 responses, 512-token prompts, responses log-normal
    with mean 1,500 tokens and spread ``length_sigma``, cut at 16,384 (``overrides`` replace any
    :class:`~rlmperf_lite.sim.Workload` field)."""
    base = dict(prompts=128, group_size=16, prompt_len=512, mean_response_len=1500.0,
                max_response_len=16384, length_sigma=length_sigma, seed=0)
    return Workload(**{**base, **overrides})


# ---- one simulated system ---------------------------------------------------------------------

@dataclass(frozen=True)
class PlacementResult:
    """One simulated system, in the numbers the guidelines use."""

    name: str
    placement: str
    """``"colocated"`` or ``"disaggregated"``."""
    mode: str
    """``"sync"`` or ``"async"``."""
    staleness: float
    rollout_gpus: int
    """GPUs generating (all of them when colocated)."""
    train_gpus: int
    """GPUs training (all of them when colocated)."""
    gpus: int
    step_time_s: float
    """Steady-state seconds per step (per weight version)."""
    throughput_tokens_per_s_per_gpu: float
    rollout_idle: float
    """Idle share of the rollout pool's GPU-seconds (verl ``rollouter/idle_ratio``)."""
    train_idle: float
    """Idle share of the training pool's GPU-seconds (verl ``trainer/idle_ratio``)."""
    mean_staleness: float
    """Mean versions between a consumed sample's start and the update that used it."""
    max_staleness: int
    train_time_s: float
    """The phases after generation of one step on the training pool (their DAG's makespan)."""
    weight_sync_s: float
    generation_work_s: float
    """Brent's work bound on one batch's generation (mean over the first two batches)."""
    generation_depth_s: float
    """Brent's depth bound, the batch's longest response decoded alone (mean)."""
    system: RLSystem = field(repr=False, compare=False)
    workload: Workload = field(repr=False, compare=False)

    @cached_property
    def rollout_time_s(self) -> float:
        """One step's batch generated on the rollout pool alone, the mean over the stream's
        first two batches (computed when first read: it generates them)."""
        return generation_s(self.system, self.workload, 2)

    @property
    def balance(self) -> float:
        """The ratio of rollout time to train time (1 is verl's ideal split)."""
        return self.rollout_time_s / self.train_time_s

    @property
    def trainer_bound_s(self) -> float:
        """Seconds per version if the trainer never waited, train time plus weight sync."""
        return self.train_time_s + self.weight_sync_s

    @property
    def sync_share(self) -> float:
        """Share of the step spent in the weight sync."""
        return self.weight_sync_s / self.step_time_s

    @property
    def engine_tp(self) -> int:
        """GPUs per rollout replica."""
        return self.system.engine.tp

    @property
    def replicas(self) -> int:
        """Rollout replicas, rollout GPUs // engine_tp."""
        return self.system.replicas

    def as_dict(self) -> dict:
        """The fields (without the system and workload) and the derived quantities."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__
                   if k not in ("system", "workload")},
                "rollout_time_s": self.rollout_time_s, "balance": self.balance,
                "sync_share": self.sync_share, "engine_tp": self.engine_tp,
                "replicas": self.replicas}


def generation_bounds(system: RLSystem, workload: Workload, batches: int = 2) -> tuple:
    """Brent's bounds (book section :ref:`sec-workdepth-seconds`) on generating one step's batch on
    ``system``'s rollout pool, in seconds, as the mean over the stream's first ``batches`` batches:

    - work: response tokens / replicas x iteration_s(n) / n, the best per-token time of a
      replica, at n = min(slots, ceil(B / replicas) G), the most sequences it can run at once
      (iteration_s(n) / n falls with n): W_gen / p_gen of
      :func:`~rlmperf_lite.sim.workdepth.generation_workdepth`;
    - depth: the batch's longest response R_max x iteration_s(1): a sequence gains one token
      per iteration and an iteration is never shorter than with one sequence.

    Returns:
        (work_s, depth_s).
    Raises:
        ValueError: naming ``batches`` if it is not an int >= 1.
    """
    check_int("batches", batches, 1)
    gen = generation_workdepth(replace(system, mode="sync"), workload, range(batches))
    return gen["work_gpu_s"] / gen["pool_gpus"], gen["depth_s"]     # W_gen / p_gen, D_gen


def _result(system: RLSystem, workload: Workload, r: SimResult) -> PlacementResult:
    u = r.utilisation()
    rollout_pool, train_pool = system.placement["rollout"], system.placement["actor"]
    _, train_s = run_train_phases(PoolClock(system), 0.0, r.tokens_per_step, 0)
    work_s, depth_s = generation_bounds(system, workload)
    return PlacementResult(
        name=system.name, placement="colocated" if rollout_pool == train_pool else
        "disaggregated", mode=system.mode, staleness=float(system.staleness),
        rollout_gpus=system.pools[rollout_pool], train_gpus=system.pools[train_pool],
        gpus=system.gpus, step_time_s=r.step_time_s,
        throughput_tokens_per_s_per_gpu=r.throughput_tokens_per_s_per_gpu,
        rollout_idle=float(u[rollout_pool]["idle"]), train_idle=float(u[train_pool]["idle"]),
        mean_staleness=float(r.staleness.mean()), max_staleness=int(r.staleness.max()),
        train_time_s=float(train_s), weight_sync_s=system.weight_sync_s,
        generation_work_s=work_s, generation_depth_s=depth_s, system=system, workload=workload)


def min_train_gpus(actor, hardware) -> int:
    """Fewest GPUs whose HBM holds one trained model's ZeRO-3 states, 16 bytes per parameter
    (bf16 weights and gradients, fp32 Adam states; ZeRO paper §5) split evenly — the smallest
    training pool :func:`~rlmperf_lite.sim.from_cost.system_from_cost` accepts for GRPO (PPO
    trains a critic too and needs twice the states). Activations, a reference model and
    buffers come on top, so this is a floor, not a fit; :func:`split_candidates` asks the
    library itself.

    Raises:
        ValueError: an unknown preset or a bad type.
    """
    m, hw = resolve_model(actor, "actor"), resolve_hardware(hardware)
    t = 1
    while model_state_bytes_per_gpu(m.num_params(), t, 3) > hw.hbm_bytes:
        t += 1
    return t


def _thin(splits: tuple, count: int | None) -> tuple:
    """At most ``count`` of ``splits``, evenly spaced, first and last included."""
    if count is None or count >= len(splits):
        return splits
    picks = np.unique(np.round(np.linspace(0, len(splits) - 1, count)).astype(int))
    return tuple(splits[i] for i in picks)


def split_candidates(actor, hardware, gpus: int, *, count: int | None = None,
                     stride: int | None = None, max_rollout_share: float = 1.0,
                     workload: Workload | None = None, **system_kw) -> tuple:
    """Rollout pool sizes to try on ``gpus``: the multiples of the engine's tensor-parallel
    size tp (``rlmperf_lite.cost.rollout.rollout_tp`` on a full node, or an int ``engine_tp``
    of ``system_kw``) whose disaggregated
    system :func:`~rlmperf_lite.sim.from_cost.system_from_cost` builds — it refuses a
    training pool that cannot hold the trained models' states — for ``workload`` (default
    :func:`example_workload`) and ``system_kw`` (``algo``, ``reward_model``, ...); with
    ``stride``, only the multiples of lcm(tp, stride); at most ``max_rollout_share`` of the
    GPUs; with ``count``, at most that many of them, evenly spaced, first and last included.

    Raises:
        ValueError: naming ``gpus`` when no split leaves room for both pools (with the
            library's reason), or ``count``, ``stride`` or ``max_rollout_share``.
    """
    check_int("gpus", gpus, 2)
    check_int("count", count, 2, optional=True)
    check_int("stride", stride, 1, optional=True)
    check_number("max_rollout_share", max_rollout_share, low=0, high=1, low_open=True)
    m, hw = resolve_model(actor, "actor"), resolve_hardware(hardware)
    fixed = system_kw.get("engine_tp")
    tp = fixed if isinstance(fixed, (int, np.integer)) else rollout_tp(m, hw, gpus)
    step = math.lcm(tp, stride or tp)
    top = min(gpus - 1, math.floor(max_rollout_share * gpus))
    wl = workload or example_workload()
    splits, refusal = [], None
    for rg in range(step, top + 1, step):
        try:
            system_from_cost(m, hw, wl, placement="disaggregated", gpus=gpus, rollout_gpus=rg,
                             **system_kw)
        except ValueError as err:            # the library's refusal (a training pool too small)
            refusal = err
            continue
        splits.append(rg)
    if not splits:
        why = f": {refusal}" if refusal is not None else ""
        raise ValueError(f"gpus={gpus} leaves no split: {m.name} needs a multiple of {step} "
                         f"rollout GPUs (tp {tp}), at most {max_rollout_share:g} of the GPUs, "
                         f"and a training pool the library accepts{why}") from refusal
    return _thin(tuple(splits), count)


def simulate_placement(actor, hardware, workload: Workload, gpus: int, *,
                       rollout_gpus: int | None = None, mode: str = "sync",
                       staleness: float = 0.0, minibatches: int = 1, steps: int = STEPS,
                       **system_kw) -> PlacementResult:
    """Simulate ``actor`` on ``gpus`` GPUs of ``hardware``: colocated when ``rollout_gpus`` is
    None (synchronous), else disaggregated with ``rollout_gpus`` generating, in ``mode`` with
    ``staleness`` and ``minibatches`` streaming updates per version (async only).
    ``system_kw`` go to :func:`~rlmperf_lite.sim.from_cost.system_from_cost` (algo,
    train_efficiency, ``engine_tp`` — None, an int or "best" —, ...).

    Raises:
        ValueError: from :func:`~rlmperf_lite.sim.from_cost.system_from_cost`,
            :class:`~rlmperf_lite.sim.RLSystem` or :func:`~rlmperf_lite.sim.simulate`.
    """
    if rollout_gpus is None:
        if mode != "sync":
            raise ValueError(f"mode must be 'sync' for a colocated system (a time-shared pool "
                             f"runs synchronously), got {mode!r}")
        system = system_from_cost(actor, hardware, workload, placement="colocated", gpus=gpus,
                                  name=f"colocated {gpus}", **system_kw)
    else:
        label = f"{rollout_gpus}:{gpus - rollout_gpus} " + (
            "sync" if mode == "sync" else f"async, staleness {staleness:g}")
        extra = dict(staleness=staleness, minibatches=minibatches) if mode == "async" else {}
        system = system_from_cost(actor, hardware, workload, placement="disaggregated",
                                  gpus=gpus, rollout_gpus=rollout_gpus, mode=mode,
                                  name=label, **extra, **system_kw)
    from . import simulate          # the package's entry point (imported late: no cycle)
    return _result(system, workload, simulate(system, workload, steps))


def placement_comparison(actor, hardware, workload: Workload, gpus: int, *,
                         rollout_gpus=None, staleness: float = 0.5, minibatches: int = 4,
                         steps: int = STEPS, **system_kw) -> list:
    """The colocated synchronous system, then for each split of ``rollout_gpus`` (default
    :func:`split_candidates` with ``count=7``) the disaggregated system synchronous and
    asynchronous (``staleness``, ``minibatches`` streaming updates per version).

    Returns:
        list of :class:`PlacementResult`: colocated first, then (sync, async) per split.
    """
    splits = rollout_gpus or split_candidates(actor, hardware, gpus, count=7,
                                              workload=workload, **system_kw)
    common = dict(steps=steps, **system_kw)
    out = [simulate_placement(actor, hardware, workload, gpus, **common)]
    for rg in splits:
        out.append(simulate_placement(actor, hardware, workload, gpus, rollout_gpus=rg,
                                      **common))
        out.append(simulate_placement(actor, hardware, workload, gpus, rollout_gpus=rg,
                                      mode="async", staleness=staleness,
                                      minibatches=minibatches, **common))
    return out


def engine_tp_sweep(actor, hardware, workload: Workload, gpus: int, *,
                    placement: str = "colocated", rollout_gpus: int | None = None, tps=None,
                    steps: int = STEPS, **kw) -> list:
    """:func:`simulate_placement` at each engine replica size of ``tps`` (default every one of
    :func:`~rlmperf_lite.sim.from_cost.engine_tp_choices` on the rollout pool), colocated on
    ``gpus`` or disaggregated with ``rollout_gpus`` generating; ``kw`` go to
    :func:`simulate_placement` (mode, staleness, algo, ...). Each row carries ``engine_tp``,
    ``replicas``, the step time and throughput, and Brent's bounds on generation
    (``generation_work_s`` W/p, ``generation_depth_s`` D): a larger tp shortens D (every
    iteration reads 1/tp of the weights per GPU) until the all-reduces' latency catches up.

    Returns:
        list of :class:`PlacementResult`, one per tp, in the order of ``tps``.
    Raises:
        ValueError: naming ``placement``, ``rollout_gpus`` (given when colocated, missing
            when disaggregated), ``engine_tp`` (a tp of ``tps`` not allowed), or from
            :func:`simulate_placement`.
    """
    check_choice("placement", placement, ("colocated", "disaggregated"))
    if (placement == "colocated") != (rollout_gpus is None):
        raise ValueError(f"rollout_gpus must be None when colocated and an int when "
                         f"disaggregated; got {rollout_gpus!r} for {placement!r}")
    if "engine_tp" in kw:
        raise ValueError("engine_tp_sweep sweeps the engine's tp: give the sizes as tps, not "
                         "engine_tp")
    if rollout_gpus is not None:
        check_int("rollout_gpus", rollout_gpus, 1)
    pool = gpus if rollout_gpus is None else rollout_gpus
    if tps is None:
        tps = engine_tp_choices(actor, hardware, pool)
    elif isinstance(tps, (str, bytes)) or not isinstance(tps, (list, tuple, range)) or not tps:
        raise ValueError(f"tps must be a non-empty list or tuple of engine tp sizes (or None "
                         f"for every allowed one), got {tps!r}")
    if not tps:
        raise ValueError(f"engine_tp_sweep finds no allowed engine tp on {pool} GPUs: none is a "
                         f"power of two dividing the pool and the heads within the NVLink domain")
    return [simulate_placement(actor, hardware, workload, gpus, rollout_gpus=rollout_gpus,
                               steps=steps, engine_tp=tp, **kw) for tp in tps]


# ---- the split ----------------------------------------------------------------------------

@dataclass(frozen=True)
class SplitSearch:
    """The disaggregated splits simulated for one setting, and the colocated system."""

    points: tuple
    """:class:`PlacementResult` of every split tried, by rollout GPUs."""
    colocated: PlacementResult | None

    @property
    def best(self) -> PlacementResult:
        """The split with the shortest step (the smaller rollout pool on a tie)."""
        return min(self.points, key=lambda p: (p.step_time_s, p.rollout_gpus))

    @property
    def balanced(self) -> PlacementResult:
        """The split of verl's rule, whose rollout and train times are closest (smallest
        absolute log of the balance)."""
        return min(self.points, key=lambda p: (abs(math.log(p.balance)), p.rollout_gpus))

    @property
    def gain(self) -> float:
        """Colocated step time over the best split's (above 1 when disaggregating pays).

        Raises:
            ValueError: the search ran without the colocated system.
        """
        if self.colocated is None:
            raise ValueError("this search has no colocated system (colocated=False)")
        return self.colocated.step_time_s / self.best.step_time_s


def best_split(actor, hardware, workload: Workload, gpus: int, *, mode: str = "async",
               staleness: float = 0.5, minibatches: int = 4, steps: int = STEPS,
               count: int | None = 8, colocated: bool = True, **system_kw) -> SplitSearch:
    """Search the rollout/training split of ``gpus`` that minimises the step time (for a fixed
    number of GPUs, the same split maximises throughput per GPU).

    With ``count`` None every candidate of :func:`split_candidates` is simulated; otherwise
    ``count`` evenly spaced ones, then the search halves the stride around the best split
    (best +- stride, down to the engine's tensor-parallel size). The step time is close to
    unimodal in the split, not exactly (random lengths): the coarse search returns the best
    split it found.

    Raises:
        ValueError: from :func:`split_candidates` or :func:`simulate_placement`.
    """
    check_choice("mode", mode, ("sync", "async"))
    check_int("count", count, 2, optional=True)
    splits = split_candidates(actor, hardware, gpus, workload=workload, **system_kw)
    coarse = _thin(splits, count)
    tp = splits[0]
    kw = dict(mode=mode, staleness=staleness, minibatches=minibatches, steps=steps,
              **system_kw)
    seen = {rg: simulate_placement(actor, hardware, workload, gpus, rollout_gpus=rg, **kw)
            for rg in coarse}
    if len(coarse) < len(splits):
        stride = max(b - a for a, b in zip(coarse, coarse[1:])) // 2 // tp * tp
        while stride >= tp:
            best = min(seen.values(), key=lambda p: (p.step_time_s, p.rollout_gpus))
            for rg in (best.rollout_gpus - stride, best.rollout_gpus + stride):
                if rg in splits and rg not in seen:
                    seen[rg] = simulate_placement(actor, hardware, workload, gpus,
                                                  rollout_gpus=rg, **kw)
            stride = stride // 2 // tp * tp
    colo = simulate_placement(actor, hardware, workload, gpus, steps=steps,
                              **system_kw) if colocated else None
    return SplitSearch(points=tuple(seen[k] for k in sorted(seen)), colocated=colo)


SWEEP_PARAMS = ("length_sigma", "mean_response_len", "max_response_len", "gpus", "actor",
                "hardware", "staleness")


def placement_gain_sweep(param: str, values, *, actor, hardware, workload: Workload, gpus: int,
                         staleness: float = 0.5, minibatches: int = 4, steps: int = STEPS,
                         count: int | None = 8, **system_kw) -> list:
    """:func:`best_split` (asynchronous, with the colocated system) for each of ``values`` of
    ``param`` — a :class:`~rlmperf_lite.sim.Workload` length field (``length_sigma``,
    ``mean_response_len``, ``max_response_len``), ``gpus``, ``actor``, ``hardware`` or
    ``staleness`` — the others fixed.

    Returns:
        list of :class:`SplitSearch`, one per value.
    Raises:
        ValueError: naming ``param``, or from the searches.
    """
    check_choice("param", param, SWEEP_PARAMS)
    out = []
    for v in values:
        args = dict(actor=actor, hardware=hardware, workload=workload, gpus=gpus,
                    staleness=staleness)
        if param in ("length_sigma", "mean_response_len", "max_response_len"):
            args["workload"] = replace(workload, **{param: v})
        else:
            args[param] = v
        out.append(best_split(args.pop("actor"), args.pop("hardware"), args.pop("workload"),
                              args.pop("gpus"), minibatches=minibatches, steps=steps,
                              count=count, **args, **system_kw))
    return out


def crossover_value(values, searches) -> object:
    """The first of ``values`` (in order) from which disaggregating pays — the best split is
    faster than colocated (:attr:`SplitSearch.gain` > 1) for it and every later value — or None
    when it does not pay at the last value.

    Raises:
        ValueError: naming ``searches`` if its length differs from ``values``'.
    """
    values, searches = list(values), list(searches)
    if len(values) != len(searches):
        raise ValueError(f"searches must have one entry per value ({len(values)}), got "
                         f"{len(searches)}")
    found = None
    for v, s in zip(values, searches):
        if s.gain > 1:
            found = v if found is None else found
        else:
            found = None
    return found


# ---- staleness ----------------------------------------------------------------------------

def staleness_sweep(actor, hardware, workload: Workload, gpus: int, *, rollout_gpus: int,
                    stalenesses=(0.0, 0.1, 0.25, 0.5, 1.0, 2.0), minibatches: int = 4,
                    steps: int = STEPS, **system_kw) -> list:
    """The asynchronous system of split ``rollout_gpus`` at each staleness bound.

    Returns:
        list of :class:`PlacementResult`, one per staleness.
    """
    return [simulate_placement(actor, hardware, workload, gpus, rollout_gpus=rollout_gpus,
                               mode="async", staleness=float(s), minibatches=minibatches,
                               steps=steps, **system_kw) for s in stalenesses]


def staleness_knee(points, tolerance: float = 0.05) -> PlacementResult:
    """The smallest staleness bound whose step time is within ``tolerance`` (a share) of the
    shortest of ``points``: beyond it more staleness buys little speed and costs freshness.

    Raises:
        ValueError: empty ``points`` or a bad ``tolerance``.
    """
    check_number("tolerance", tolerance, low=0, high=1)
    points = list(points)
    if not points:
        raise ValueError("points is empty: pass staleness_sweep()'s result")
    fastest = min(p.step_time_s for p in points)
    return min((p for p in points if p.step_time_s <= (1 + tolerance) * fastest),
               key=lambda p: p.staleness)


# ---- group size -----------------------------------------------------------------------------

def expected_group_wait(workload: Workload, group_size: int, draws: int = 1 << 16) -> float:
    """Expected longest response of a group of ``group_size`` (tokens): E[max of G] over the
    empirical distribution of ``draws`` lengths of ``workload``'s stream
    (:func:`~rlmperf_lite.cost.expected_max_length`; independent draws).

    Raises:
        ValueError: naming ``group_size`` or ``draws``.
    """
    check_int("group_size", group_size, 1)
    check_int("draws", draws, 1)
    lengths = replace(workload, group_size=1).response_lengths(draws).reshape(-1)    # (draws,)
    return expected_max_length(lengths, group_size)


def group_max_mean(lengths, group_size: int) -> float:
    """Mean over groups of their longest length: the measured wait of groups of
    ``group_size`` consecutive samples of ``lengths`` (shape (n G,), n >= 1).

    Raises:
        ValueError: naming ``lengths`` (not 1-D, empty, not a multiple of the group size) or
            ``group_size``.
    """
    check_int("group_size", group_size, 1)
    x = np.asarray(lengths, dtype=float)
    if x.ndim != 1 or x.size == 0 or x.size % group_size:
        raise ValueError(f"lengths must be a 1-D array of n x {group_size} lengths, got shape "
                         f"{x.shape}")
    return float(x.reshape(-1, group_size).max(axis=1).mean())


@dataclass(frozen=True)
class GroupSizePoint:
    """One group size at a fixed number of samples per step."""

    group_size: int
    prompts: int
    expected_wait_tokens: float
    """E[longest of G response lengths] (:func:`expected_group_wait`)."""
    results: dict
    """``"colocated sync"``, ``"disaggregated sync"``, ``"disaggregated async"`` ->
    :class:`PlacementResult`."""


def group_size_sweep(actor, hardware, workload: Workload, gpus: int, *, group_sizes,
                     rollout_gpus: int, staleness: float = 0.5, minibatches: int = 4,
                     steps: int = STEPS, **system_kw) -> list:
    """Each group size G at the workload's samples per step S (B = S / G prompts): the
    colocated synchronous system and the split ``rollout_gpus`` synchronous and asynchronous.
    The same seed gives every G the same stream of lengths (common random numbers).

    Raises:
        ValueError: naming ``group_sizes`` when a G does not divide S into a number of prompts
            that ``minibatches`` divides.
    """
    S = workload.samples_per_step
    out = []
    for G in group_sizes:
        check_int("group_sizes entry", G, 2)
        if S % G or (S // G) % minibatches:
            raise ValueError(f"group_sizes: G={G} must divide the {S} samples per step into a "
                             f"number of prompts divisible by minibatches={minibatches}")
        wl = replace(workload, prompts=S // G, group_size=G)
        common = dict(steps=steps, **system_kw)
        results = {
            "colocated sync": simulate_placement(actor, hardware, wl, gpus, **common),
            "disaggregated sync": simulate_placement(actor, hardware, wl, gpus,
                                                     rollout_gpus=rollout_gpus, **common),
            "disaggregated async": simulate_placement(
                actor, hardware, wl, gpus, rollout_gpus=rollout_gpus, mode="async",
                staleness=staleness, minibatches=minibatches, **common)}
        out.append(GroupSizePoint(G, S // G, expected_group_wait(workload, G), results))
    return out


# ---- weight sync -----------------------------------------------------------------------------

def weight_sync_comparison(actor, hardware, workload: Workload, gpus: int, *,
                           rollout_gpus: int, **system_kw) -> dict:
    """Seconds of one weight sync and of one model switch as the simulator charges them
    (:func:`~rlmperf_lite.sim.from_cost.system_from_cost`: the mechanism model
    :func:`~rlmperf_lite.cost.weight_sync_time_s` from a ZeRO-3 trainer to the engine's tp
    by default, ``weight_sync="bandwidth"`` for the bandwidth bound), colocated on ``gpus``
    and disaggregated with ``rollout_gpus`` generating.

    Returns:
        dict of seconds under the keys ``"colocated"``, ``"disaggregated"`` (the syncs) and
        ``"colocated_switch"`` (a switch; disaggregated pools do not switch).
    """
    colo = system_from_cost(actor, hardware, workload, placement="colocated", gpus=gpus,
                            **system_kw)
    dis = system_from_cost(actor, hardware, workload, placement="disaggregated", gpus=gpus,
                           rollout_gpus=rollout_gpus, **system_kw)
    return {"colocated": colo.weight_sync_s, "disaggregated": dis.weight_sync_s,
            "colocated_switch": colo.switch_s}


VERL_WEIGHT_SYNC = VERL_SYNC_ROWS
"""Measured single-step weight syncs on H20s with a Megatron trainer, as tuples (model, preset
of the same shape, trainer ranks, rollout ranks, seconds without and with the checkpoint
engine), from verl docs/advance/fully_async.md, "checkpoint-engine Ablation Experiment"
(kept in ``rlmperf_lite/cost/data/weight_sync.json``,
:data:`rlmperf_lite.cost.VERL_SYNC_ROWS`). Qwen2.5-Math-7B has Qwen2.5-7B's shape."""


def weight_sync_against_verl(workload: Workload | None = None, **system_kw) -> list:
    """The simulator's disaggregated weight sync (:func:`weight_sync_comparison` on H20s, the
    rollout and trainer ranks of each run) next to verl's measurements
    (:data:`VERL_WEIGHT_SYNC`): the bandwidth bound the chapters used (``bandwidth_s``), and
    the mechanism model with verl's Megatron trainer (its assumed layout,
    :func:`~rlmperf_lite.cost.verl_megatron_plan`) without and with the checkpoint
    engine (``modelled_s``, ``modelled_checkpoint_engine_s``).

    Returns:
        dicts ``model``, ``trainer_ranks``, ``rollout_ranks``, ``bandwidth_s``, ``modelled_s``,
        ``modelled_checkpoint_engine_s``, ``measured_s``, ``measured_checkpoint_engine_s``.
    """
    wl = workload or example_workload()
    hw = resolve_hardware("h20")
    rows = []
    for model, preset, train, rollout, without, with_engine in VERL_WEIGHT_SYNC:
        bound = weight_sync_comparison(preset, hw, wl, train + rollout, rollout_gpus=rollout,
                                       weight_sync="bandwidth",
                                       **system_kw)["disaggregated"]
        mech = [verl_sync_model_s(preset, train, rollout, hw, bucketed=b) for b in (False, True)]
        rows.append({"model": model, "trainer_ranks": train, "rollout_ranks": rollout,
                     "bandwidth_s": bound, "modelled_s": mech[0],
                     "modelled_checkpoint_engine_s": mech[1], "measured_s": without,
                     "measured_checkpoint_engine_s": with_engine})
    return rows
