"""Work and depth in seconds of any simulated RL system's step: the frameworks' presets, the
guidelines' splits, staleness bounds and group sizes (book sections
:ref:`sec-frameworks-workdepth` and :ref:`sec-guidelines-workdepth`).

The definition of :ref:`sec-workdepth-seconds` (:mod:`rlmperf_lite.cost.workdepth_s`) with the
simulator's task costs:

- decode: a task is one decode step of one sequence, iteration_s(b) / b on the replica's tp
  GPUs at the batch b = min(slots, ceil(groups in flight / replicas) G) the layout gives a
  replica (B groups in flight synchronously, floor((1 + s) B) with staleness s); alone,
  iteration_s(1). W_gen = tp sum_i R_i iteration_s(b) / b.
- a phase after generation: a task is one sequence's pass, (P + R_i) ``gpu_s_per_token``.
- the weight sync: a collective both pools wait for, W = 0, D = ``weight_sync_s``.

p is every GPU of the system. The depth is the chain a version must wait for. With the update
training its own batch (synchronous, or ``consume="batch"``) that is the batch's longest
response: D_gen = R_max iteration_s(1), Chapter 13's depth bound. With streaming consumption
(``consume="ready"``) the update takes whichever groups are ready, and the chain holds only
the c-th quickest of the n groups it may take (c, n and k from the admission rule,
:func:`chain_window`). Per version, D_k = max(D_train, (D_gen + D_tail) / (k + 1)): the
recurrence of :func:`~rlmperf_lite.workdepth.per_version_depth` (:ref:`sec-async-workdepth`), with
D_tail, the pass, update and sync after the chain's group, in place of the trainer's chain
D_train (they are equal for one update per version). Shape letters: B prompts, G group size,
P prompt length, R response length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_int
from ..cost import PhaseWorkDepth
from ..workdepth import per_version_depth
from .async_engine import admission_cap
from .system import CPU, TRAIN_PHASES, RLSystem
from .workload import Workload

__all__ = ["BoundedPhase", "SystemWorkDepth", "chain_window", "generation_workdepth",
           "system_workdepth"]

_BEFORE_UPDATE = ("reward", "old_logp", "ref_logp", "values")      # independent of each other


@dataclass(frozen=True)
class BoundedPhase(PhaseWorkDepth):
    """A phase (or a weight version) on p GPUs whose upper bound is not W / p + D: the tasks
    may run only on their pools' GPUs, so ``upper_s`` is Brent's bound over those pools."""

    upper_s: float = math.inf

    @property
    def brent_upper_s(self) -> float:
        return self.upper_s


def chain_window(system: RLSystem, prompts: int, version: int) -> tuple:
    """(lo, hi, c, k): update ``version`` + 1 must have trained c of the groups lo .. hi - 1,
    all started after version ``version`` - k reached the engine. Group g needs version u once
    g >= floor((u + s) B) (the admission rule, :func:`~rlmperf_lite.sim.admission_cap`).

    Synchronous: batch v itself (c = B, k = 0). ``consume="batch"``: batch v, k = ceil(s).
    ``consume="ready"``: k = floor(s); of the (v + 1) B groups trained, at most
    lo = floor((v - k + s) B) precede the window, so c = (v + 1) B - lo.
    """
    B, v = prompts, version
    if system.mode == "sync" or system.consume == "batch":
        k = 0 if system.mode == "sync" else math.ceil(system.staleness)
        return v * B, (v + 1) * B, B, k
    k = math.floor(system.staleness + 1e-9)
    lo = max(0, admission_cap(v - k - 1, system.staleness, B))
    return lo, admission_cap(v, system.staleness, B), (v + 1) * B - lo, k


def _steady_versions(system: RLSystem, steps: int) -> range:
    """The versions of the simulator's steady window for ``steps`` steps
    (:attr:`~rlmperf_lite.sim.SimResult.warmup_steps`)."""
    head = math.ceil(system.staleness) + 1 if system.mode == "async" else 0
    return range(min(max(steps // 2, head), steps - 1), steps)


def generation_workdepth(system: RLSystem, workload: Workload, versions) -> dict:
    """W_gen (GPU-s) of one batch at the batch the layout gives a replica, and the chain's
    generation depth D_gen (s), means over ``versions`` (ints >= 0).

    Returns:
        dict of ``work_gpu_s``, ``depth_s``, ``straggler_s`` (R_max iteration_s(1), whatever
        the consumption), ``chain_len`` (R of the group on the chain), ``batch_per_replica``,
        ``k``, ``pool_gpus``.
    """
    B, G, eng = workload.prompts, workload.group_size, system.engine
    versions = list(versions)
    in_flight = B if system.mode == "sync" else admission_cap(0, system.staleness, B)
    b = min(eng.slots, math.ceil(in_flight / system.replicas) * G)
    top = max(max(chain_window(system, B, v)[1] for v in versions), (max(versions) + 1) * B)
    group_len = workload.response_lengths(top)                        # (groups, G)
    batches = group_len[:(max(versions) + 1) * B].reshape(-1, B * G)[versions]   # (n, B G)
    chain = []
    for v in versions:
        lo, hi, c, k = chain_window(system, B, v)
        chain.append(np.sort(group_len[lo:hi].max(axis=1))[c - 1])   # c-th quickest group
    alone = float(eng.iteration_s(1))
    return {"work_gpu_s": eng.tp * float(batches.sum(axis=1).mean()) * float(
                eng.iteration_s(b)) / b,
            "depth_s": float(np.mean(chain)) * alone,
            "straggler_s": float(batches.max(axis=1).mean()) * alone,
            "chain_len": float(np.mean(chain)), "batch_per_replica": b, "k": k,
            "pool_gpus": system.replicas * eng.tp}


def _pool_gpus(system: RLSystem, phase: str) -> int:
    pool = system.placement[TRAIN_PHASES[phase]]
    return 1 if pool == CPU else system.pools[pool]


def _train(system: RLSystem, workload: Workload, versions, chain_len: float) -> dict:
    """The phases after generation of one batch (means over ``versions``): W (GPU-s) per pool;
    the trainer's own chain per version, m updates of B / m groups each at least its longest
    pass (synchronous or ``"batch"``: the sum of every (B / m)-th sorted group maximum, the
    least any split can give; streaming: m passes of the shortest sequence); the tail after the
    chain's group (its passes, one update, the sync); Brent's upper bound of the phases run one
    after another on their pools."""
    B, G, P = workload.prompts, workload.group_size, workload.prompt_len
    m = system.minibatches if system.mode == "async" else 1
    lengths = workload.response_lengths((max(versions) + 1) * B).reshape(-1, B, G)[versions]
    tokens = float((P + lengths).sum(axis=(1, 2)).mean())             # per batch
    longest = P + float(lengths.max(axis=(1, 2)).mean())
    if system.mode == "async" and system.consume == "ready":          # which groups: unknown
        chunks = m * (P + float(lengths.min(axis=(1, 2)).mean()))
    else:
        group_max = np.sort(lengths.max(axis=2), axis=1)              # (n, B)
        chunks = m * P + float(group_max[:, B // m - 1::B // m].sum(axis=1).mean())
    pools, upper, before, update = {}, 0.0, 0.0, None
    for phase, cost in system.costs.items():
        pool = system.placement[TRAIN_PHASES[phase]]
        runs = m if phase.endswith("_update") else 1
        if pool != CPU:
            pools[pool] = pools.get(pool, 0.0) + tokens * cost.gpu_s_per_token
        upper += tokens * cost.gpu_s_per_token / _pool_gpus(system, phase) + \
            runs * (cost.fixed_s + longest * cost.gpu_s_per_token)
        if phase in _BEFORE_UPDATE:
            before = max(before, cost.fixed_s + (P + chain_len) * cost.gpu_s_per_token)
        elif update is None or cost.gpu_s_per_token > update.gpu_s_per_token:
            update = cost                                             # the longer update
    sync = system.weight_sync_s
    return {"pool_work": pools, "upper_s": upper + sync, "before_s": before,
            "chain_s": m * update.fixed_s + chunks * update.gpu_s_per_token + sync,
            "tail_s": before + update.fixed_s + (P + chain_len) * update.gpu_s_per_token + sync}


@dataclass(frozen=True)
class SystemWorkDepth:
    """W, D and Brent's bounds of a system's steady step: ``phases`` (synchronous: generation,
    training, weight_sync, one after another; asynchronous: one weight version), summed."""

    name: str
    phases: tuple
    generation: dict
    """:func:`generation_workdepth` of the steady window."""
    train: dict
    """W per pool (``pool_work``), the trainer's chain ``chain_s``, the tail ``tail_s``."""
    pool_gpus: dict
    weight_sync_s: float
    mode: str

    work_gpu_s = property(lambda self: float(sum(p.work_gpu_s for p in self.phases)))
    depth_s = property(lambda self: float(sum(p.depth_s for p in self.phases)))
    lower_s = property(lambda self: float(sum(p.brent_lower_s for p in self.phases)))
    upper_s = property(lambda self: float(sum(p.brent_upper_s for p in self.phases)))
    processors = property(lambda self: self.phases[0].processors)

    @property
    def work_per_processor_s(self) -> float:
        """The step if its work were spread over every GPU, W / p."""
        return self.work_gpu_s / self.processors

    @property
    def pool_lower_s(self) -> float:
        """The lower bound on the layout's own pools, each pool's work on its GPUs
        (synchronous: generation, then the busiest training pool, then the sync; asynchronous:
        the busiest pool plus the sync that stops both), and never below ``lower_s``."""
        gen = self.generation["work_gpu_s"] / self.generation["pool_gpus"]
        train = max((w / self.pool_gpus[p] for p, w in self.train["pool_work"].items()),
                    default=0.0)
        if self.mode == "sync":
            g, t, _ = self.phases
            floor = max(gen, g.depth_s) + max(train, t.depth_s) + self.weight_sync_s
        else:
            floor = max(gen, train) + self.weight_sync_s
        return max(floor, self.lower_s)

    def brackets(self, step_s: float) -> bool:
        """True when ``step_s`` lies in [``lower_s``, ``upper_s``] (1e-9 slack)."""
        return self.lower_s * (1 - 1e-9) <= step_s <= self.upper_s * (1 + 1e-9)


def system_workdepth(system: RLSystem, workload: Workload, *, steps: int = 8) -> SystemWorkDepth:
    """W (GPU-s), D (s) and Brent's bounds of ``system``'s steady step on ``workload``: means
    over the versions of the simulator's steady window for ``steps`` steps (module docstring).

    Synchronous: generation (upper W_gen / p_gen + D_gen), training (D its chain, upper the
    phases one after another on their pools), weight_sync. Asynchronous, bound s: one version,
    W at floor((1 + s) B) groups in flight, D_k = max(D_train, (D_gen + D_tail) / (k + 1)), and
    above the same recurrence of the pools' Brent bounds (k = 0 when drained: the drain waits
    for the straggler every version), or the engine's work per version if that is longer.

    The records' ``work_flops`` are 0: the simulator holds times, not models.

    Raises:
        ValueError: naming ``system``, ``workload`` or ``steps`` (an int >= 2), or
            ``RLSystem.minibatches`` not dividing ``Workload.prompts``.
    """
    if not isinstance(system, RLSystem):
        raise ValueError(f"system must be an RLSystem, got {type(system).__name__}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    check_int("steps", steps, 2)
    B, p = workload.prompts, system.gpus
    if system.mode == "async" and B % system.minibatches:
        raise ValueError(f"RLSystem.minibatches = {system.minibatches} must divide "
                         f"Workload.prompts = {B}")
    versions = list(_steady_versions(system, steps))
    gen = generation_workdepth(system, workload, versions)
    train = _train(system, workload, versions, gen["chain_len"])
    sync_s, w_train = system.weight_sync_s, sum(train["pool_work"].values())
    pools = {k: v for k, v in system.pools.items() if k != CPU}
    if system.mode == "sync":
        g_upper = gen["work_gpu_s"] / gen["pool_gpus"] + gen["depth_s"]
        phases = (BoundedPhase("generation", 0.0, gen["work_gpu_s"], gen["depth_s"], p,
                               upper_s=g_upper),
                  BoundedPhase("training", 0.0, w_train, train["tail_s"] - sync_s, p,
                               upper_s=train["upper_s"] - sync_s),
                  PhaseWorkDepth("weight_sync", 0.0, 0.0, sync_s, p))
        return SystemWorkDepth(system.name, phases, gen, train, pools, sync_s, "sync")
    one = generation_workdepth(replace(system, mode="sync"), workload, versions)
    k, k_up = gen["k"], math.floor(system.staleness + 1e-9) if system.partial_rollout else 0
    depth = max(train["chain_s"], (gen["depth_s"] + train["tail_s"]) / (k + 1))
    gen_upper = one["work_gpu_s"] / one["pool_gpus"] + one["straggler_s"]
    upper = max(per_version_depth(gen_upper, train["upper_s"], k_up),
                one["work_gpu_s"] / one["pool_gpus"] + sync_s)
    version = BoundedPhase(f"version, k = {k}", 0.0, gen["work_gpu_s"] + w_train, depth, p,
                           upper_s=max(upper, depth))
    return SystemWorkDepth(system.name, (version,), gen, train, pools, sync_s, "async")
