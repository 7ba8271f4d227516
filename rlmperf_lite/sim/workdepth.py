"""Work and depth in seconds of a simulated RL system's steady step, any layout: the
placements, the staleness bounds, the framework presets and the guidelines' splits (book
sections :ref:`sec-placement-workdepth`, :ref:`sec-async-workdepth`,
:ref:`sec-frameworks-workdepth` and :ref:`sec-guidelines-workdepth`).

The definition of :ref:`sec-workdepth-seconds` (:mod:`rlmperf_lite.cost.workdepth_s`) with the
simulator's task costs, so that the bounds hold the simulator's step:

- decode: a task is one decode step of one sequence, iteration_s(b) / b on the replica's tp
  GPUs at the batch b = min(slots, ceil(groups in flight / replicas) G) the layout gives a
  replica (B groups in flight synchronously, floor((1 + s) B) with staleness s); alone,
  iteration_s(1). W_gen = tp sum_i R_i iteration_s(b) / b.
- a phase after generation: a task is one sequence's pass, (P + R_i) ``gpu_s_per_token``.
- the weight sync: a collective both pools wait for, W = 0, D = ``weight_sync_s``.
- a model switch (synchronous mode): a task on its pool's chain, ``switch_s`` on all the
  pool's GPUs, as many per step as the pool changes model
  (:func:`~rlmperf_lite.sim.phases.switches_per_step`). All count in the work, in Brent's
  upper bound and in their pool's seconds; those of the rollout and actor pools lie on the
  chain (the pool runs its phases one at a time on all its GPUs, so the longest sequence's
  chain crosses every switch between them) and count in the training depth.

p is every GPU of the system, so the gap between W / p and the step is the time GPUs idle. The
depth is the chain a version must wait for. With the update training its own batch
(synchronous, or ``consume="batch"``) that is the batch's longest response: D_gen = R_max
iteration_s(1). With streaming consumption (``consume="ready"``) the update takes whichever
groups are ready, and the chain holds only the c-th quickest of the n groups it may take (c, n
and k from the admission rule, :func:`chain_window`). Per version, D_k = max(D_train, (D_gen +
D_tail) / (k + 1)): the recurrence of :func:`~rlmperf_lite.cost.per_version_depth`, with
D_tail, the passes, update and sync after the chain's group, in place of the trainer's chain
D_train (equal for one update per version, in batch order). Upper bounds count each phase on
its own pool's GPUs (Brent's greedy schedule on the GPUs that may take its tasks).

Not covered (refused): ``switch_s`` > 0 in asynchronous mode, ``fuse_logps``,
``overlap_reward``. Shape letters: B
prompts, G group size, P prompt length, R response length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_int, check_number
from ..cost import PhaseWorkDepth
from ..cost.phase import PhaseSequence
from ..cost.workdepth_s import per_version_depth
from .async_engine import admission_cap
from .from_cost import system_from_cost
from .phases import switches_per_step
from .result import warmup_steps_for
from .system import CPU, TRAIN_PHASES, RLSystem
from .workload import Workload

__all__ = ["BoundedPhase", "SystemWorkDepth", "chain_window", "generation_workdepth",
           "system_workdepth", "layout_workdepth"]

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
    return range(warmup_steps_for(system, steps), steps)


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


def _before_sync(system: RLSystem, phase: str) -> bool:
    """Whether a synchronous step's sync waits for ``phase``: it waits for the update and what
    the update needs, and for the rollout and actor pools to be free (a critic update on a pool
    of its own may run into the next generation)."""
    pool = system.placement[TRAIN_PHASES[phase]]
    return phase in _BEFORE_UPDATE or pool in (system.placement["rollout"],
                                               system.placement["actor"])


def _train(system: RLSystem, workload: Workload, versions, chain_len: float) -> dict:
    """The phases after generation of one batch (means over ``versions``): W (GPU-s) per pool
    (``pool_work``) and the seconds each pool must spend per version (``pool_s``: its fixed
    costs plus its work over its GPUs; synchronously only what the sync waits for); the
    trainer's own chain per version, m updates of B / m groups each at least its longest pass
    (synchronous or ``"batch"``: the sum of every (B / m)-th sorted group maximum, the least any
    split can give; streaming: m passes of the shortest sequence); the tail after the chain's
    group (its passes, one update, the sync); Brent's upper bound of the phases run one after
    another on their pools."""
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
    pools, floor, fixed, upper, before, update = {}, {}, {}, 0.0, 0.0, None
    for phase, cost in system.costs.items():
        pool = system.placement[TRAIN_PHASES[phase]]
        runs = m if phase.endswith("_update") else 1
        if pool != CPU:
            pools[pool] = pools.get(pool, 0.0) + tokens * cost.gpu_s_per_token
            if system.mode == "async" or _before_sync(system, phase):     # every chunk pays
                floor[pool] = floor.get(pool, 0.0) + tokens * cost.gpu_s_per_token
                fixed[pool] = fixed.get(pool, 0.0) + m * cost.fixed_s
        upper += tokens * cost.gpu_s_per_token / _pool_gpus(system, phase) + \
            runs * (cost.fixed_s + longest * cost.gpu_s_per_token)
        if phase in _BEFORE_UPDATE:
            before = max(before, cost.fixed_s + (P + chain_len) * cost.gpu_s_per_token)
        elif update is None or cost.gpu_s_per_token > update.gpu_s_per_token:
            update = cost                                             # the longer update
    sync, pool_s = system.weight_sync_s, {p: fixed[p] + w / system.pools[p]
                                          for p, w in floor.items()}
    switch = _switches(system, pools, pool_s)
    return {"pool_work": pools, "upper_s": upper + sync + switch["all_s"], "before_s": before,
            "pool_s": pool_s, "switch_chain_s": switch["chain_s"],
            "chain_s": m * update.fixed_s + chunks * update.gpu_s_per_token + sync,
            "tail_s": before + update.fixed_s + (P + chain_len) * update.gpu_s_per_token + sync}


def _switches(system: RLSystem, pool_work: dict, pool_s: dict) -> dict:
    """Charge the steady step's model switches (synchronous mode; module docstring): their
    GPU-seconds into ``pool_work``, and those of the rollout and actor pools (on the chain)
    into ``pool_s``, in place; returns the seconds of all switches (``all_s``) and of those
    on the chain (``chain_s``)."""
    counts = switches_per_step(system) if system.switch_s > 0 else {}
    chain_pools = {system.placement["rollout"], system.placement["actor"]}
    all_s = chain_s = 0.0
    for pool, n in counts.items():
        if not n:
            continue
        s = n * system.switch_s
        pool_work[pool] = pool_work.get(pool, 0.0) + s * system.pools[pool]
        all_s += s
        if pool in chain_pools:         # a critic pool's may fall outside the step's chain
            pool_s[pool] = pool_s.get(pool, 0.0) + s
            chain_s += s
    return {"all_s": all_s, "chain_s": chain_s}


@dataclass(frozen=True)
class SystemWorkDepth(PhaseSequence):
    """W, D and Brent's bounds of a system's steady step: ``phases`` (synchronous: generation,
    training, weight_sync, one after another; asynchronous: one weight version), summed, for
    ``system`` on ``workload`` over the steady window of ``steps`` simulated steps."""

    phases: tuple
    generation: dict
    """:func:`generation_workdepth` of the steady window."""
    train: dict
    """W per pool (``pool_work``), each pool's seconds per version (``pool_s``), the
    trainer's chain ``chain_s``, the tail ``tail_s``."""
    system: RLSystem
    workload: Workload
    steps: int

    work_gpu_s = property(lambda self: self.total("work_gpu_s"))
    depth_s = property(lambda self: self.total("depth_s"))
    lower_s = property(lambda self: self.total("brent_lower_s"))
    upper_s = property(lambda self: self.total("brent_upper_s"))
    processors = property(lambda self: self.phases[0].processors)
    name = property(lambda self: self.system.name)
    mode = property(lambda self: self.system.mode)
    weight_sync_s = property(lambda self: self.system.weight_sync_s)

    @property
    def pool_gpus(self) -> dict:
        """GPUs per pool (the CPU workers left out)."""
        return {k: v for k, v in self.system.pools.items() if k != CPU}

    @property
    def batch_per_replica(self) -> int:
        """Sequences per replica at which decode is charged (larger asynchronously)."""
        return self.generation["batch_per_replica"]

    @property
    def sequences_per_gpu(self) -> float:
        """Sequences per rollout GPU in decode (the batch per replica / tp)."""
        return self.batch_per_replica / self.system.engine.tp

    @property
    def work_per_processor_s(self) -> float:
        """The step if its work were spread over every GPU, W / p."""
        return self.work_gpu_s / self.processors

    @property
    def gen_floor_s(self) -> float:
        """The engine's work per version on its own GPUs, W_gen / p_gen (s)."""
        return self.generation["work_gpu_s"] / self.generation["pool_gpus"]

    @property
    def train_floor_s(self) -> float:
        """The busiest training pool's seconds per version, its fixed costs plus its work over
        its GPUs (synchronously, of the phases the sync waits for)."""
        return max(self.train["pool_s"].values(), default=0.0)

    @property
    def pool_lower_s(self) -> float:
        """The lower bound on the layout's own pools, each pool's work on its GPUs
        (synchronous: generation, then the busiest training pool, then the sync; asynchronous:
        the busiest pool plus the sync that stops both), and never below ``lower_s``."""
        gen, train = self.gen_floor_s, self.train_floor_s
        if self.mode == "sync":
            g, t, _ = self.phases
            floor = max(gen, g.depth_s) + max(train, t.depth_s) + self.weight_sync_s
        else:
            floor = max(gen, train) + self.weight_sync_s
        return max(floor, self.lower_s)

    def brackets(self, step_s: float) -> bool:
        """True when ``step_s`` lies in [``lower_s``, ``upper_s``] (1e-9 slack)."""
        return self.lower_s * (1 - 1e-9) <= step_s <= self.upper_s * (1 + 1e-9)

    def simulate(self):
        """The simulator's run of the same system, workload and steps (a
        :class:`~rlmperf_lite.sim.SimResult`; its ``step_time_s`` is the steady step)."""
        from . import simulate
        return simulate(self.system, self.workload, self.steps)


def _check(system: RLSystem, workload: Workload, steps: int) -> None:
    if not isinstance(system, RLSystem):
        raise ValueError(f"system must be an RLSystem, got {type(system).__name__}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    check_int("steps", steps, 2)
    for flag in ("fuse_logps", "overlap_reward"):
        if getattr(system, flag):
            raise ValueError(f"RLSystem.{flag} is not covered by the work-depth model: set it "
                             "to False")
    if system.switch_s > 0 and system.mode == "async":
        raise ValueError(f"RLSystem.switch_s = {system.switch_s} in asynchronous mode is not "
                         "covered by the work-depth model (where a switch falls depends on the "
                         "schedule): set it to 0 or use mode='sync'")
    if not any(p.endswith("_update") for p in system.costs):
        raise ValueError("RLSystem.costs has no actor_update or critic_update: the work-depth "
                         "model needs the update that ends a version")
    if system.mode == "async" and workload.prompts % system.minibatches:
        raise ValueError(f"RLSystem.minibatches = {system.minibatches} must divide "
                         f"Workload.prompts = {workload.prompts}")


def _version(system: RLSystem, workload: Workload, versions: list, gen: dict,
             train: dict) -> BoundedPhase:
    """The record of one weight version (:func:`system_workdepth`, asynchronous; book section
    :ref:`sec-async-workdepth`)."""
    one = generation_workdepth(replace(system, mode="sync"), workload, versions)
    k, k_up = gen["k"], math.floor(system.staleness + 1e-9) if system.partial_rollout else 0
    depth = max(train["chain_s"], (gen["depth_s"] + train["tail_s"]) / (k + 1))
    gen_upper = one["work_gpu_s"] / one["pool_gpus"] + one["straggler_s"]
    upper = max(per_version_depth(gen_upper, train["upper_s"], k_up),
                one["work_gpu_s"] / one["pool_gpus"] + system.weight_sync_s)
    return BoundedPhase(f"version, k = {k}", 0.0,
                        gen["work_gpu_s"] + sum(train["pool_work"].values()), depth,
                        system.gpus, upper_s=max(upper, depth))


def system_workdepth(system: RLSystem, workload: Workload, *, steps: int = 8) -> SystemWorkDepth:
    """W (GPU-s), D (s) and Brent's bounds of ``system``'s steady step on ``workload``: means
    over the versions of the simulator's steady window for ``steps`` steps (module docstring).

    Synchronous: generation (upper W_gen / p_gen + D_gen), training (D its chain, upper the
    phases one after another on their pools), weight_sync. Asynchronous, bound s: one weight
    version, W at floor((1 + s) B) groups in flight, D_k = max(D_train, (D_gen + D_tail) /
    (k + 1)), and above the same recurrence of the pools' Brent bounds (k = 0 when drained:
    the drain waits for the straggler every version), or the engine's work per version plus
    the sync if that is longer. The records' ``work_flops`` are 0: the simulator holds times,
    not models.

    Raises:
        ValueError: naming ``system``, ``workload`` or ``steps`` (an int >= 2),
            ``RLSystem.minibatches`` not dividing ``Workload.prompts``, or a layout the model
            does not cover (``switch_s`` > 0 asynchronously, ``fuse_logps``,
            ``overlap_reward``, no update).
    """
    _check(system, workload, steps)
    p, sync_s = system.gpus, system.weight_sync_s
    versions = list(_steady_versions(system, steps))
    gen = generation_workdepth(system, workload, versions)
    train = _train(system, workload, versions, gen["chain_len"])
    if system.mode == "async":
        phases = (_version(system, workload, versions, gen, train),)
    else:
        g_upper = gen["work_gpu_s"] / gen["pool_gpus"] + gen["depth_s"]
        phases = (BoundedPhase("generation", 0.0, gen["work_gpu_s"], gen["depth_s"], p,
                               upper_s=g_upper),
                  BoundedPhase("training", 0.0, sum(train["pool_work"].values()),
                               train["tail_s"] - sync_s + train["switch_chain_s"], p,
                               upper_s=train["upper_s"] - sync_s),
                  PhaseWorkDepth("weight_sync", 0.0, 0.0, sync_s, p))
    return SystemWorkDepth(phases, gen, train, system, workload, steps)


def layout_workdepth(actor, hardware, workload: Workload, *, placement: str = "colocated",
                     gpus: int = 8, rollout_gpus: int | None = None,
                     staleness: float | None = None, minibatches: int = 1, steps: int = 8,
                     **system_kw) -> SystemWorkDepth:
    """:func:`system_workdepth` of the system
    :func:`~rlmperf_lite.sim.from_cost.system_from_cost` builds (:ref:`sec-placement-workdepth`,
    :ref:`sec-async-workdepth`): ``"colocated"`` on ``gpus``, or ``"disaggregated"`` with
    ``rollout_gpus`` generating; synchronous when ``staleness`` is None, else asynchronous with
    bound ``staleness`` and ``minibatches`` streaming updates per version. ``system_kw`` go to
    :func:`~rlmperf_lite.sim.from_cost.system_from_cost` (algo, kl_coef, reward_model,
    partial_rollout, consume, ...).

    Raises:
        ValueError: naming the argument, from :func:`system_workdepth` or
            :func:`~rlmperf_lite.sim.from_cost.system_from_cost`.
    """
    if staleness is not None:
        check_number("staleness", staleness, low=0)
    mode = {} if staleness is None else dict(mode="async", staleness=staleness,
                                             minibatches=minibatches)
    system = system_from_cost(actor, hardware, workload, placement=placement, gpus=gpus,
                              rollout_gpus=rollout_gpus, **mode, **system_kw)
    return system_workdepth(system, workload, steps=steps)
