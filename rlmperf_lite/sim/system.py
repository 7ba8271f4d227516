"""An RL system laid out on a cluster: GPU pools, which model runs where, what each phase costs,
and how the steps follow each other (book section :ref:`sec-simulator`).

Roles: ``rollout`` (the inference engine), ``actor`` (the policy's trainer), ``ref`` (reference
log-probs), ``critic`` (values and critic update, PPO) and ``reward`` (a reward model, or
``"cpu"`` for a rule-based verifier off the GPUs). ``placement`` maps each role to a pool.

- colocated: every role on one pool, time-shared (verl's hybrid engine, DeepSpeed-Chat);
- disaggregated: the rollout on its own pool, training on another (AReaL, slime, StreamRL);
- hybrid / split: any other mapping (NeMo-Aligner puts the critic and reward model apart).

Modes: ``"sync"`` — generate a batch, train on it, sync weights, repeat; ``"async"`` — the
rollout runs ahead of the trainer by at most ``staleness`` versions (0 gives the synchronous
schedule back; 1 is one-step-off; fractions as in verl's ``staleness_threshold``), with
``minibatches`` streaming updates per version and, with ``partial_rollout``, in-flight samples
paused across a weight sync instead of drained before it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..checks import check_bool, check_choice, check_int, check_number

__all__ = ["ROLES", "TRAIN_PHASES", "Engine", "PhaseCost", "RLSystem"]

ROLES = ("rollout", "actor", "ref", "critic", "reward")
TRAIN_PHASES = {"reward": "reward", "old_logp": "actor", "ref_logp": "ref", "values": "critic",
                "actor_update": "actor", "critic_update": "critic"}
"""Phase after generation -> the role (model) that runs it, in execution order on a pool."""
CPU = "cpu"


@dataclass(frozen=True)
class Engine:
    """The rollout engine: replicas of ``tp`` GPUs, each running up to ``slots`` sequences at
    once (continuous batching, one token per running sequence per iteration). An iteration over
    n sequences takes max(n ``decode_compute_per_seq_s``, ``decode_base_s`` + n
    ``decode_per_seq_s``) + ``iteration_latency_s`` + n ``comm_per_seq_s`` — the roofline of a
    decode step (the weights read once, each sequence's KV cache read, each sequence's
    arithmetic), then the tensor-parallel all-reduces that follow it
    (:func:`~rlmperf_lite.cost.rollout.decode_tp_comm`). So a straggler left alone runs
    faster than in a full batch, and a fuller engine makes every sequence slower. Prefill is
    left out (a few hundred prompt tokens, compute-bound, next to thousands of decode steps).

    Raises:
        ValueError: naming the field.
    """

    decode_base_s: float
    """Seconds an iteration spends reading the weights (independent of the batch)."""
    decode_per_seq_s: float = 0.0
    """Memory time an iteration adds per running sequence (its KV cache, at a mean context)."""
    decode_compute_per_seq_s: float = 0.0
    """Compute time an iteration needs per running sequence."""
    tp: int = 1
    """GPUs per replica."""
    slots: int = 256
    """Concurrent sequences per replica (KV-cache bound; vLLM's ``max_num_seqs``)."""
    iteration_latency_s: float = 0.0
    """The latency of the tp all-reduces, the seconds an iteration pays whatever the batch."""
    comm_per_seq_s: float = 0.0
    """Link time an iteration adds per running sequence (its activations in the all-reduces)."""

    def __post_init__(self):
        check_number("Engine.decode_base_s", self.decode_base_s, low=0, low_open=True)
        check_number("Engine.decode_per_seq_s", self.decode_per_seq_s, low=0)
        check_number("Engine.decode_compute_per_seq_s", self.decode_compute_per_seq_s, low=0)
        check_int("Engine.tp", self.tp, 1)
        check_int("Engine.slots", self.slots, 1)
        check_number("Engine.iteration_latency_s", self.iteration_latency_s, low=0)
        check_number("Engine.comm_per_seq_s", self.comm_per_seq_s, low=0)

    def iteration_s(self, n):
        """Seconds of one decode iteration over ``n`` running sequences (int or array)."""
        # the all-reduces sit between dependent products: they add to the roofline, not overlap
        if isinstance(n, int):          # the replicas' hot path: the same sums in plain floats
            return (max(n * self.decode_compute_per_seq_s,
                        self.decode_base_s + n * self.decode_per_seq_s)
                    + self.iteration_latency_s + n * self.comm_per_seq_s)
        return (np.maximum(n * self.decode_compute_per_seq_s,
                           self.decode_base_s + n * self.decode_per_seq_s)
                + self.iteration_latency_s + n * self.comm_per_seq_s)


@dataclass(frozen=True)
class PhaseCost:
    """A phase after generation: ``fixed_s`` + tokens x ``gpu_s_per_token`` / GPUs of its pool
    (tokens = prompt + response tokens of the samples it processes)."""

    gpu_s_per_token: float
    fixed_s: float = 0.0

    def __post_init__(self):
        check_number("PhaseCost.gpu_s_per_token", self.gpu_s_per_token, low=0)
        check_number("PhaseCost.fixed_s", self.fixed_s, low=0)

    def time_s(self, tokens: float, gpus: int) -> float:
        return self.fixed_s + tokens * self.gpu_s_per_token / gpus


@dataclass(frozen=True)
class RLSystem:
    """Pools, placement, costs and execution mode of an RL system.

    Attributes are documented inline; :meth:`colocated` and :meth:`disaggregated` build the two
    common layouts.

    Raises:
        ValueError: naming the field — an unknown pool or role, a phase whose role is not
            placed, a pool too small for one rollout replica, ``minibatches`` not dividing the
            prompts (checked by the simulator), asynchronous execution with a training role on
            the rollout pool, or ``overlap_reward`` with the reward model on the rollout pool.
    """

    pools: dict
    """Pool name -> GPUs (``"cpu"`` holds CPU workers, counted in no GPU total)."""
    placement: dict
    """Role -> pool name, for ``rollout``, ``actor`` and every role a phase of ``costs`` uses."""
    engine: Engine
    costs: dict
    """Phase name (keys of :data:`TRAIN_PHASES`) -> :class:`PhaseCost`; absent = not run
    (GRPO has no ``values``/``critic_update``; ``ref_logp`` is skipped when the KL weight is 0;
    ``old_logp`` is skipped when the engine's log-probs are used)."""
    weight_sync_s: float = 0.0
    """Time in seconds to move the actor's weights into the engine (a reshard on a shared pool,
    a transfer between pools); both pools are busy for it."""
    switch_s: float = 0.0
    """Seconds a pool spends swapping one model for another (offload/onload) when consecutive
    phases run different models on it."""
    mode: str = "sync"
    staleness: float = 0.0
    """In async mode the engine may start group g once it holds version v with
    g < floor((v + 1 + staleness) B); 0 = on-policy, 1 = one-step-off."""
    partial_rollout: bool = True
    """In async mode, pause in-flight samples across a weight sync (they finish with the new
    weights) instead of draining them before it."""
    minibatches: int = 1
    """In async mode, updates per version, each on B / minibatches groups once they are ready."""
    consume: str = "ready"
    """In async mode, which ready groups an update takes — ``"ready"``, the first ready whatever
    batch they were sampled for (streaming, as verl fully async and AReaL), or ``"batch"``, only
    those of its own batch (batch b = groups b B .. (b + 1) B - 1, as verl's one-step-off)."""
    fuse_logps: bool = False
    """Run the old and reference log-prob passes as one phase (one fixed cost, one switch) when
    they share a pool."""
    overlap_reward: bool = False
    """Score each group as soon as it is complete, during generation, instead of after it."""
    name: str = field(default="", compare=False)

    def __post_init__(self):
        if not isinstance(self.pools, dict) or not self.pools:
            raise ValueError(f"RLSystem.pools must be a non-empty dict name -> GPUs, got "
                             f"{self.pools!r}")
        for pool, gpus in self.pools.items():
            check_int(f"RLSystem.pools[{pool!r}]", gpus, 1)
        if not isinstance(self.placement, dict):
            raise ValueError(f"RLSystem.placement must be a dict role -> pool, got "
                             f"{self.placement!r}")
        if not isinstance(self.engine, Engine):
            raise ValueError(f"RLSystem.engine must be an Engine, got {self.engine!r}")
        if not isinstance(self.costs, dict):
            raise ValueError(f"RLSystem.costs must be a dict phase -> PhaseCost, got "
                             f"{self.costs!r}")
        for phase, cost in self.costs.items():
            check_choice("RLSystem.costs key", phase, tuple(TRAIN_PHASES))
            if not isinstance(cost, PhaseCost):
                raise ValueError(f"RLSystem.costs[{phase!r}] must be a PhaseCost, got {cost!r}")
        for role in ("rollout", "actor", *(TRAIN_PHASES[p] for p in self.costs)):
            if role not in self.placement:
                raise ValueError(f"RLSystem.placement has no pool for role {role!r}; add "
                                 f"placement[{role!r}] = one of {sorted(self.pools)}")
        for role, pool in self.placement.items():
            check_choice("RLSystem.placement role", role, ROLES)
            if pool not in self.pools:
                raise ValueError(f"RLSystem.placement[{role!r}] = {pool!r} is not a pool; "
                                 f"pools are {sorted(self.pools)}")
            if pool == CPU and role != "reward":
                raise ValueError(f"RLSystem.placement[{role!r}] cannot be 'cpu': only a "
                                 f"rule-based reward runs off the GPUs")
        if self.pools[self.placement["rollout"]] < self.engine.tp:
            raise ValueError(f"RLSystem.pools[{self.placement['rollout']!r}] has "
                             f"{self.pools[self.placement['rollout']]} GPUs, fewer than one "
                             f"rollout replica (Engine.tp = {self.engine.tp})")
        for name in ("weight_sync_s", "switch_s"):
            check_number(f"RLSystem.{name}", getattr(self, name), low=0)
        check_number("RLSystem.staleness", self.staleness, low=0, high=1000)
        check_choice("RLSystem.mode", self.mode, ("sync", "async"))
        check_int("RLSystem.minibatches", self.minibatches, 1)
        check_choice("RLSystem.consume", self.consume, ("ready", "batch"))
        for name in ("partial_rollout", "fuse_logps", "overlap_reward"):
            check_bool(f"RLSystem.{name}", getattr(self, name))
        rollout_pool = self.placement["rollout"]
        if self.mode == "async":
            shared = [r for r in self.roles if r != "rollout" and self.placement[r] == rollout_pool]
            if shared:
                raise ValueError(f"RLSystem.mode='async' needs the rollout on a pool of its own, "
                                 f"but {shared} share pool {rollout_pool!r}; a time-shared pool "
                                 f"runs synchronously (use mode='sync')")
        if self.overlap_reward and "reward" in self.costs and \
                self.placement["reward"] == rollout_pool:
            raise ValueError("RLSystem.overlap_reward needs the reward off the rollout pool "
                             f"(placement['reward'] is {rollout_pool!r}, the rollout's pool)")

    @property
    def roles(self) -> tuple:
        """The roles that run (rollout, actor and those of the phases in ``costs``)."""
        used = {"rollout", "actor", *(TRAIN_PHASES[p] for p in self.costs)}
        return tuple(r for r in ROLES if r in used)

    @property
    def gpus(self) -> int:
        """GPUs in all pools (CPU workers excluded)."""
        return sum(n for p, n in self.pools.items() if p != CPU)

    @property
    def replicas(self) -> int:
        """The number of rollout replicas, the rollout pool's GPUs // Engine.tp."""
        return self.pools[self.placement["rollout"]] // self.engine.tp

    @classmethod
    def colocated(cls, gpus: int, *, engine: Engine, costs: dict, reward_on_cpu: bool = True,
                  **kw) -> RLSystem:
        """Every model on one pool of ``gpus``, time-shared (synchronous)."""
        pools = {"all": gpus, **({CPU: 1} if reward_on_cpu else {})}
        placement = {r: "all" for r in ROLES}
        placement["reward"] = CPU if reward_on_cpu else "all"
        return cls(pools=pools, placement=placement, engine=engine, costs=costs, **kw)

    @classmethod
    def disaggregated(cls, rollout_gpus: int, train_gpus: int, *, engine: Engine, costs: dict,
                      reward_on_cpu: bool = True, **kw) -> RLSystem:
        """The engine on ``rollout_gpus``; actor, reference, critic (and a reward model) on
        ``train_gpus``."""
        pools = {"rollout": rollout_gpus, "train": train_gpus,
                 **({CPU: 1} if reward_on_cpu else {})}
        placement = {r: "train" for r in ROLES}
        placement["rollout"] = "rollout"
        placement["reward"] = CPU if reward_on_cpu else "train"
        return cls(pools=pools, placement=placement, engine=engine, costs=costs, **kw)
