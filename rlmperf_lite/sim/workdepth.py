"""Work and depth in seconds of a simulated RL system, by layout (book sections
:ref:`sec-placement-workdepth` and :ref:`sec-async-workdepth`).

The definition of :mod:`rlmperf_lite.cost.workdepth_s`, with the simulator's own task costs, so
the bounds hold the simulator's step:

- decode: a task is one decode step of one sequence. At the batch b the layout gives a replica,
  b = min(slots, ceil(groups in flight / replicas) G), it costs iteration_s(b) / b on the
  replica's tp GPUs; alone, iteration_s(1). So W_gen = tp sum_i R_i iteration_s(b) / b and
  D_gen = max_i R_i iteration_s(1) (the engine has no prefill; each token is an iteration).
- a phase after generation: a task is one sequence's pass, (P + R_i) ``gpu_s_per_token``
  GPU-seconds; W = their sum, D = ``fixed_s`` + the longest sequence's pass on one GPU.
- the weight sync: a collective both pools wait for, W = 0, D = ``weight_sync_s``.

p is every GPU of the system, so the gap between W / p and the step is the time GPUs idle (a
pool waiting for the other, replicas waiting for their stragglers). Synchronous, the phases run
one after another and the step's bounds are the sums of the phases': max(W / p, D) below, and
W / p_pool + D above, Brent's greedy schedule on the p_pool GPUs that may run the phase (a
replica's continuous batching is greedy; over all p, with one pool idle, it is not). Asynchronous
with bound k, a weight version is one :class:`VersionWorkDepth`: W = W_gen + W_train, D_k =
:func:`~rlmperf_lite.workdepth.per_version_depth` (D_gen, D_train + sync, k), derived for
batch-ordered consumption; streaming consumption may pass a batch's straggler over.

Shape letters: B prompts, G group size, P prompt length, R response length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import check_int
from ..cost import PhaseWorkDepth, decode_step_flops, forward_flops, resolve_model
from ..workdepth import per_version_depth
from .async_engine import admission_cap
from .from_cost import system_from_cost
from .system import TRAIN_PHASES, RLSystem
from .workload import Workload

__all__ = ["PoolPhaseWorkDepth", "VersionWorkDepth", "LayoutWorkDepth", "system_workdepth",
           "layout_workdepth"]

# phase -> (forward passes, LM head): its FLOPs are passes x forward_flops (+ AdamW's 12 N for
# an update), as in estimate_rl_step
_PASSES = {"reward": (1, "none"), "old_logp": (1, "all"), "ref_logp": (1, "all"),
           "values": (1, "none"), "actor_update": (3, "all"), "critic_update": (3, "none")}


@dataclass(frozen=True)
class PoolPhaseWorkDepth(PhaseWorkDepth):
    """A phase whose tasks may run on ``pool_gpus`` of the system's p GPUs (``processors``):
    W / p and the lower bound max(W / p, D) over all p, the upper bound over the pool,
    W / pool_gpus + D (a greedy schedule on the GPUs that may take the tasks)."""

    pool_gpus: int = 0

    def __post_init__(self):
        check_int("pool_gpus", self.pool_gpus, 1)
        if self.pool_gpus > self.processors:
            raise ValueError(f"pool_gpus = {self.pool_gpus} exceeds the system's "
                             f"processors = {self.processors}")

    @property
    def brent_upper_s(self) -> float:
        """W / pool_gpus + D (Brent 1974 on the pool)."""
        return self.work_gpu_s / self.pool_gpus + self.depth_s

    def as_dict(self) -> dict:
        return {**super().as_dict(), "pool_gpus": self.pool_gpus}


@dataclass(frozen=True)
class VersionWorkDepth(PhaseWorkDepth):
    """One weight version of an asynchronous run with staleness bound k: W = W_gen + W_train
    (GPU-s), D_k = max(D_train, (D_gen + D_train) / (k + 1)) (s) on p GPUs. The upper bound is
    the same recurrence over U_train = W_train / p_train + D_train and U_gen = W_gen / p_gen +
    the longest response decoded at the fullest batch the bound lets a replica hold (batches
    generated together slow one another): checked on the simulator, not proven (book section
    :ref:`sec-async-workdepth`). ``gen_floor_s``, ``train_floor_s``: each pool's work per
    version on its own GPUs, plus the sync that stops both."""

    staleness: int = 0
    gen_upper_s: float = 0.0
    train_upper_s: float = 0.0
    gen_floor_s: float = 0.0
    train_floor_s: float = 0.0
    drained: bool = False
    """The engine drains its running samples before each sync (no partial rollout)."""

    @property
    def brent_upper_s(self) -> float:
        """max(U_train, (U_gen + U_train) / (k + 1)); drained, U_gen + U_train, since every
        sync waits for the running samples and generation cannot pipeline across it."""
        if self.drained:
            return self.gen_upper_s + self.train_upper_s
        return per_version_depth(self.gen_upper_s, self.train_upper_s, self.staleness)

    @property
    def pool_lower_s(self) -> float:
        """The lower bound when the pools' work must run on their own GPUs,
        max(W / p, D_k, W_gen / p_gen + sync, W_train / p_train + sync) (book section :ref:`sec-async-workdepth`)."""
        return max(self.brent_lower_s, self.gen_floor_s, self.train_floor_s)

    def as_dict(self) -> dict:
        return {**super().as_dict(), "staleness": self.staleness,
                "pool_lower_s": self.pool_lower_s, "gen_floor_s": self.gen_floor_s,
                "train_floor_s": self.train_floor_s}


@dataclass(frozen=True)
class LayoutWorkDepth:
    """W, D and Brent's bounds of one layout's steady step (synchronous: the phases, summed) or
    weight version (asynchronous: one :class:`VersionWorkDepth`), over the batches of the
    simulator's steady window for ``steps`` steps."""

    phases: tuple
    system: RLSystem
    workload: Workload
    steps: int
    generation: PoolPhaseWorkDepth
    """Generation of one batch at the batch the synchronous schedule gives a replica."""
    batch_per_replica: int
    """Sequences per replica at which decode is charged (larger asynchronously)."""

    lower_s = property(lambda self: float(sum(p.brent_lower_s for p in self.phases)))
    upper_s = property(lambda self: float(sum(p.brent_upper_s for p in self.phases)))
    work_gpu_s = property(lambda self: float(sum(p.work_gpu_s for p in self.phases)))

    @property
    def pool_lower_s(self) -> float:
        """For an asynchronous system ``VersionWorkDepth.pool_lower_s``, for a synchronous one ``lower_s``."""
        return max(self.lower_s, *(getattr(p, "pool_lower_s", 0.0) for p in self.phases))

    @property
    def sequences_per_gpu(self) -> float:
        """Sequences per rollout GPU in decode (the batch per replica / tp)."""
        return self.batch_per_replica / self.system.engine.tp

    def brackets(self, step_s: float) -> bool:
        """True when ``step_s`` lies in [``lower_s``, ``upper_s``] (1e-9 slack)."""
        return self.lower_s * (1 - 1e-9) <= step_s <= self.upper_s * (1 + 1e-9)

    def simulate(self):
        """The simulator's run of the same system, workload and steps (a
        :class:`~rlmperf_lite.sim.SimResult`; its ``step_time_s`` is the steady step)."""
        from . import simulate
        return simulate(self.system, self.workload, self.steps)


def _steady_batches(system: RLSystem, workload: Workload, steps: int) -> np.ndarray:
    """Response lengths of the batches of the steady window, shape (n, B, G): the steps after
    :attr:`~rlmperf_lite.sim.SimResult.warmup_steps` (batch s = groups s B .. (s + 1) B - 1)."""
    head = math.ceil(system.staleness) + 1 if system.mode == "async" else 0
    warm = min(max(steps // 2, head), steps - 1)
    B, G = workload.prompts, workload.group_size
    return workload.response_lengths(steps * B).reshape(steps, B, G)[warm:]


def _generation(system, lengths, P, actor, groups) -> tuple:
    """(record, b): decode of one batch (mean over the batches of ``lengths``, shape
    (n, B, G)) charged at b sequences per replica, b from the ``groups`` in flight."""
    eng, reps = system.engine, system.replicas
    b = min(eng.slots, math.ceil(groups / reps) * lengths.shape[2])
    tokens = float(lengths.sum(axis=(1, 2)).mean())                   # sum_i R_i
    ctx = int(P + lengths.mean() / 2)                                  # the engine's context
    record = PoolPhaseWorkDepth(
        "generation", tokens * decode_step_flops(actor, 1, ctx),
        eng.tp * tokens * float(eng.iteration_s(b)) / b,
        float(lengths.max(axis=(1, 2)).mean()) * float(eng.iteration_s(1)),
        system.gpus, pool_gpus=reps * eng.tp)
    return record, b


def _train_phases(system, lengths, P, models, minibatches) -> list:
    """The phases after generation of one batch (mean over ``lengths``, shape (n, B, G)), in
    the simulator's order on the training pool; with ``minibatches`` m, a version's m updates
    are chained (each pays ``fixed_s`` and its longest sequence's pass)."""
    n, B, G = lengths.shape
    seqs = P + lengths.reshape(n, B * G)                               # (n, B G) tokens
    chunks = P + lengths.reshape(n, minibatches, -1).max(axis=2)       # (n, m) longest
    pool = system.placement["actor"]
    out = []
    for phase in (p for p in TRAIN_PHASES if p in system.costs):
        cost, role = system.costs[phase], TRAIN_PHASES[phase]
        passes, head = _PASSES[phase]
        m = models[role]
        flops = np.mean([passes * forward_flops(m, s, lm_head=head) for s in seqs])
        if phase.endswith("_update"):
            flops += minibatches * 12.0 * m.num_params()               # AdamW, per update
        out.append(PoolPhaseWorkDepth(
            phase, float(flops), float(seqs.sum(axis=1).mean()) * cost.gpu_s_per_token,
            minibatches * cost.fixed_s + float(chunks.sum(axis=1).mean()) *
            cost.gpu_s_per_token, system.gpus, pool_gpus=system.pools[pool]))
    return out


def _check_layout(system: RLSystem) -> None:
    """What the work-depth model covers: generation on one pool, every phase after it on the
    actor's pool, no switch costs, no fusing, no overlapped reward."""
    pool = system.placement["actor"]
    apart = [p for p in system.costs if system.placement[TRAIN_PHASES[p]] != pool]
    if apart:
        raise ValueError(f"phases {apart} run off the actor's pool {pool!r}: the work-depth "
                         "model takes every phase after generation on one pool (colocated "
                         "or disaggregated); a hybrid or CPU-scored phase is not covered")
    for flag in ("fuse_logps", "overlap_reward"):
        if getattr(system, flag):
            raise ValueError(f"RLSystem.{flag} is not covered by the work-depth model: set it "
                             "to False")
    if system.switch_s > 0:
        raise ValueError(f"RLSystem.switch_s = {system.switch_s} is not covered by the "
                         "work-depth model (a switch is on the critical path): set it to 0")


def system_workdepth(system: RLSystem, workload: Workload, actor, *, steps: int = 8,
                     reward_model=None) -> LayoutWorkDepth:
    """W (GPU-s), D (s) and Brent's bounds of ``system``'s steady step on ``workload``, over
    the batches the simulator's steady window for ``steps`` steps consumes (see the module
    docstring); ``actor`` (and ``reward_model``) give the FLOPs.

    Synchronous: phases generation, the phases after it, weight_sync, summed. Asynchronous
    (bound k an int): one :class:`VersionWorkDepth`, decode charged at the batch of the
    floor((1 + k) B) groups the engine may hold.

    Raises:
        ValueError: naming ``steps``, a layout the model does not cover (a phase off the
            actor's pool, ``switch_s`` > 0, ``fuse_logps``, ``overlap_reward``), a
            non-integer staleness, or from the cost models.
    """
    if not isinstance(system, RLSystem):
        raise ValueError(f"system must be an RLSystem, got {type(system).__name__}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    check_int("steps", steps, 1)
    _check_layout(system)
    actor = resolve_model(actor, "actor")
    models = {"actor": actor, "ref": actor, "critic": actor,
              "reward": actor if reward_model is None else resolve_model(reward_model, "reward")}
    P, B = workload.prompt_len, workload.prompts
    lengths = _steady_batches(system, workload, steps)                 # (n, B, G)
    gen, b = _generation(system, lengths, P, actor, B)
    sync = PoolPhaseWorkDepth("weight_sync", 0.0, 0.0, system.weight_sync_s, system.gpus,
                              pool_gpus=system.gpus)
    if system.mode == "sync":
        phases = (gen, *_train_phases(system, lengths, P, models, 1), sync)
        return LayoutWorkDepth(phases, system, workload, steps, gen, b)
    k = system.staleness
    if float(k) != int(k):
        raise ValueError(f"RLSystem.staleness = {k} must be an integer for the work-depth "
                         "model (D_k is derived for whole versions)")
    k = int(k)
    if B % system.minibatches:
        raise ValueError(f"RLSystem.minibatches = {system.minibatches} must divide "
                         f"Workload.prompts = {B}")
    train = _train_phases(system, lengths, P, models, system.minibatches)
    gen_k, b_k = _generation(system, lengths, P, actor, admission_cap(0, k, B))
    d_train = sum(p.depth_s for p in train) + system.weight_sync_s
    w_train = sum(p.work_gpu_s for p in train)
    n_train = system.pools[system.placement["actor"]]
    fixed = system.minibatches * sum(c.fixed_s for c in system.costs.values())
    eng = system.engine     # k >= 1: batches overlap, the longest response at the batch b_k
    slowed = float(eng.iteration_s(b_k)) / float(eng.iteration_s(1)) if k else 1.0
    version = VersionWorkDepth(
        f"version, k = {k}", gen_k.work_flops + sum(p.work_flops for p in train),
        gen_k.work_gpu_s + w_train, per_version_depth(gen.depth_s, d_train, k), system.gpus,
        staleness=k, gen_upper_s=gen.work_gpu_s / gen.pool_gpus + gen.depth_s * slowed,
        train_upper_s=sum(p.brent_upper_s for p in train) + system.weight_sync_s,
        gen_floor_s=gen_k.work_gpu_s / gen_k.pool_gpus + system.weight_sync_s,
        train_floor_s=w_train / n_train + fixed + system.weight_sync_s,
        drained=not system.partial_rollout)
    return LayoutWorkDepth((version,), system, workload, steps, gen, b_k)


def layout_workdepth(actor, hardware, workload: Workload, *, placement: str = "colocated",
                     gpus: int = 8, rollout_gpus: int | None = None,
                     staleness: int | None = None, minibatches: int = 1, steps: int = 8,
                     **system_kw) -> LayoutWorkDepth:
    """:func:`system_workdepth` of the system :func:`~rlmperf_lite.sim.from_cost.system_from_cost`
    builds: ``"colocated"`` on ``gpus``, or ``"disaggregated"`` with ``rollout_gpus``
    generating; synchronous when ``staleness`` is None, else asynchronous with bound
    ``staleness`` (an int) and ``minibatches`` streaming updates per version. ``system_kw`` go to
    :func:`~rlmperf_lite.sim.from_cost.system_from_cost` (algo, kl_coef, reward_model,
    partial_rollout, consume, ...).

    Raises:
        ValueError: naming the argument, from :func:`system_workdepth` or
            :func:`~rlmperf_lite.sim.from_cost.system_from_cost`.
    """
    check_int("staleness", staleness, 0, optional=True)
    mode = {} if staleness is None else dict(mode="async", staleness=staleness,
                                             minibatches=minibatches)
    system = system_from_cost(actor, hardware, workload, placement=placement, gpus=gpus,
                              rollout_gpus=rollout_gpus, **mode, **system_kw)
    return system_workdepth(system, workload, actor, steps=steps,
                            reward_model=system_kw.get("reward_model"))
