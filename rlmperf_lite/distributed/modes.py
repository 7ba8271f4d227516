"""The four ways the toy GRPO system runs on Ray, and where each puts its roles (book chapter "A
mini RL system on Ray").

A mode fixes two things: the placement of the roles on actors, and how far the rollout may run
ahead of the learners (the staleness k of :class:`rlmperf_lite.rl.AsyncGRPOConfig`).

========================  ======================================================  ==========
mode                      placement                                               staleness
========================  ======================================================  ==========
``"colocated"``           L actors, each rollout + reference/reward + learner       0
``"sync"``                W rollout, 1 reference/reward, L learner actors           0
``"one_step_off"``        as sync; rollout of t+1 starts with step t                1
``"async"``               as sync; rollout up to k batches ahead                    k
========================  ======================================================  ==========

Colocated is verl's hybrid engine (HybridFlow, Sheng et al. 2024, arXiv 2409.19256, §5); the
disaggregated modes are verl's one-step-off recipe and AReaL's bounded staleness (Fu et al.
2025, arXiv 2505.24298, Sec. 5.1). On a cluster, :data:`PLACEMENTS` says on which nodes the
actors go (book section sec-ray-multinode).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import ray
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..checks import check_choice, check_int
from ..rl.async_grpo import AsyncGRPOConfig
from ..rl.grpo import GRPOConfig
from .runtime import alive_node_ids
from .workers import ColocatedWorker, Learner, RefRewardWorker, RoleHandle, RolloutWorker

__all__ = ["MODES", "MODE_STALENESS", "PLACEMENTS", "mode_staleness", "run_config",
           "mode_config", "check_layout", "check_cpus", "Placement", "place_actors",
           "spread_order", "least_loaded_node"]

MODES = ("colocated", "sync", "one_step_off", "async")
MODE_STALENESS = {"colocated": 0, "sync": 0, "one_step_off": 1}
"""The staleness each mode implies (``"async"`` takes ``config.staleness``)."""
PLACEMENTS = ("default", "spread")
"""Where a run's actors go on the Ray nodes. ``"default"``: where Ray's scheduler puts them (on
one machine, all on it). ``"spread"``: dealt in turn over the alive nodes, the driver's first,
in the order of :func:`spread_order`, each pinned there with Ray's
``NodeAffinitySchedulingStrategy`` (hard: its soft form moved actors off their node even with
room on it); a replacement goes to the :func:`least_loaded_node`."""
_REMOTE = {}


def run_config(config, mode: str) -> AsyncGRPOConfig:
    """The AsyncGRPOConfig that ``mode`` runs: a GRPOConfig gets the mode's staleness; an
    AsyncGRPOConfig must already have it (``"async"``: any).

    Raises:
        ValueError: naming ``mode``, ``config``, ``config.staleness`` or
            ``config.dynamic_sampling`` (DAPO's resampling is not supported on Ray), or a
            rollout-engine or correction field (see ``GRPOConfig.check_train_grpo_only``).
    """
    check_choice("mode", mode, MODES)
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig or AsyncGRPOConfig, got "
                         f"{type(config).__name__}")
    if config.dynamic_sampling:
        raise ValueError("config.dynamic_sampling (DAPO's resampling) is not supported on Ray "
                         "yet; set it to False")
    config.check_train_grpo_only("train_ray")
    if not isinstance(config, AsyncGRPOConfig):
        if mode == "async":
            raise ValueError("mode='async' takes its bound from config.staleness: pass an "
                             "AsyncGRPOConfig")
        base = {f.name: getattr(config, f.name) for f in fields(GRPOConfig)}
        return AsyncGRPOConfig(**base, staleness=MODE_STALENESS[mode])
    if mode != "async" and config.staleness != MODE_STALENESS[mode]:
        raise ValueError(f"config.staleness={config.staleness} conflicts with mode={mode!r} "
                         f"(staleness {MODE_STALENESS[mode]}); use mode='async'")
    return config


def mode_staleness(mode: str, staleness, default: int | None = None) -> int:
    """The staleness k ``mode`` runs: its own (:data:`MODE_STALENESS`), or ``staleness`` (else
    ``default``) for ``"async"``.

    Raises:
        ValueError: naming ``mode``, or ``staleness`` (negative, or other than the mode's own).
    """
    check_choice("mode", mode, MODES)
    if mode == "async":
        k = default if staleness is None else staleness
        check_int("staleness", k, 0)
        return k
    if staleness not in (None, MODE_STALENESS[mode]):
        raise ValueError(f"staleness={staleness!r} conflicts with mode={mode!r} "
                         f"(staleness {MODE_STALENESS[mode]}); use mode='async'")
    return MODE_STALENESS[mode]


def mode_config(config, mode: str, *, staleness: int | None = None, **changes) -> AsyncGRPOConfig:
    """``config``'s GRPO settings (a GRPOConfig or AsyncGRPOConfig), with ``changes``, as the
    AsyncGRPOConfig that ``mode`` runs: the mode's staleness, or ``staleness`` for
    ``"async"`` (default: ``config``'s own).

    Raises:
        ValueError: naming ``config``, ``mode``, ``staleness`` or a changed field.
    """
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig or AsyncGRPOConfig, got "
                         f"{type(config).__name__}")
    k = mode_staleness(mode, staleness, getattr(config, "staleness", None))
    base = {f.name: getattr(config, f.name) for f in dataclasses.fields(GRPOConfig)}
    extra = {} if not isinstance(config, AsyncGRPOConfig) else {
        f.name: getattr(config, f.name) for f in dataclasses.fields(AsyncGRPOConfig)
        if f.name not in base}
    return AsyncGRPOConfig(**{**base, **extra, **changes, "staleness": k})


def check_layout(mode: str, num_prompts: int, num_rollout_workers: int, num_learners: int,
                 groups_per_minibatch: int | None = None) -> None:
    """Check that W rollout workers and L learners can run ``mode`` on ``num_prompts`` prompts
    per step: W, L >= 1; W = L when colocated (each actor hosts one of each); W, L at most B;
    with ``groups_per_minibatch``, L at most that (every learner needs a group of each
    minibatch).

    Raises:
        ValueError: naming ``num_rollout_workers`` or ``num_learners``.
    """
    W, L = num_rollout_workers, num_learners
    check_int("num_rollout_workers", W, 1)
    check_int("num_learners", L, 1)
    if mode == "colocated" and W != L:
        raise ValueError(f"num_rollout_workers={W} must equal num_learners={L} in colocated "
                         f"mode (each actor hosts one of each)")
    for name, n in (("num_rollout_workers", W), ("num_learners", L)):
        if n > num_prompts:
            raise ValueError(f"{name}={n} exceeds num_prompts={num_prompts}")
    if groups_per_minibatch is not None and L > groups_per_minibatch:
        raise ValueError(f"num_learners={L} exceeds the {groups_per_minibatch} groups of a "
                         f"minibatch; every learner needs one")


def check_cpus(mode: str, num_rollout_workers: int, num_learners: int,
               cpus_per_actor: float, free_cpus: float | None = None) -> None:
    """Refuse actors that would reserve more CPUs than Ray has free (``free_cpus``; None: ask
    the running Ray): Ray would keep them waiting for resources forever.

    Raises:
        ValueError: naming ``cpus_per_actor``.
    """
    n = num_learners if mode == "colocated" else num_rollout_workers + 1 + num_learners
    free = ray.available_resources().get("CPU", 0.0) if free_cpus is None else free_cpus
    if cpus_per_actor * n > free + 1e-9:
        raise ValueError(f"cpus_per_actor={cpus_per_actor:g} x {n} actors needs "
                         f"{cpus_per_actor * n:g} CPUs, but Ray has {free:g} free: lower "
                         f"cpus_per_actor (0 lets the actors share cores) or add nodes")


def spread_order(mode: str, num_rollout_workers: int, num_learners: int) -> list:
    """The lanes of ``mode``'s actors in the order ``"spread"`` deals them over the nodes:
    learners, then rollout workers, then the reference/reward worker (colocated: its L actors).
    Node k of n gets the actors at positions k, k + n, ...: the first learner on the driver's
    node, the first rollout worker on the next."""
    if mode == "colocated":
        return [f"colocated/r{r}" for r in range(num_learners)]
    return ([f"learner/r{r}" for r in range(num_learners)]
            + [f"rollout/r{k}" for k in range(num_rollout_workers)] + ["ref_reward/r0"])


def least_loaded_node(handles: list) -> str:
    """The alive node (id) running the fewest of ``handles``' actors (ties: the first in
    :func:`~rlmperf_lite.distributed.alive_node_ids` order): where ``"spread"`` starts
    a replacement."""
    alive = alive_node_ids()
    load = {node: sum(h.node_id == node for h in handles) for node in alive}
    return min(alive, key=lambda node: (load[node], alive.index(node)))


@dataclass
class Placement:
    """The handles of one run's roles, and the actors behind them."""

    rollout: list
    """W :class:`~rlmperf_lite.distributed.RoleHandle`, lanes ``rollout/rK`` or
    ``colocated/rK``."""
    ref: list
    """The reference and reward handles — one worker, or every colocated actor (each scores a
    share)."""
    learners: list
    """L learner handles, rank order."""
    actors: list
    """Every actor started (to kill at the end); replacements are appended."""
    make_worker: object = None
    """``make_worker(k, rng_state) -> RoleHandle`` starting a new rollout worker k; None when
    colocated (the actor also holds a learner)."""
    handles: list = dataclasses.field(default_factory=list)
    """One :class:`~rlmperf_lite.distributed.RoleHandle` per actor started, in start order, with
    its node once it is ready; replacements are appended."""


def place_actors(mode: str, config: AsyncGRPOConfig, *, num_rollout_workers: int,
                 num_learners: int, params_ref, base_ref, rng_states: list, task,
                 cpus_per_actor: float = 0.0, placement: str = "default",
                 ready_timeout_s: float = 300.0) -> Placement:
    """Start the actors of ``mode`` (Ray must be up) on the nodes ``placement`` picks (one of
    :data:`PLACEMENTS`); ``params_ref`` / ``base_ref`` are ObjectRefs of the initial and
    reference weights, ``rng_states`` each rollout worker's sampling-stream state. Returns once
    every actor has started, with the node of each.

    Raises:
        ValueError: naming ``placement`` when it is not one of PLACEMENTS, or
            ``cpus_per_actor`` when the actors would reserve more CPUs than Ray has free (they
            would wait for them forever).
        RuntimeError: an actor did not start within ``ready_timeout_s``.
    """
    check_choice("placement", placement, PLACEMENTS)
    check_cpus(mode, num_rollout_workers, num_learners, cpus_per_actor)
    out = Placement(rollout=[], ref=[], learners=[], actors=[])
    nodes = alive_node_ids() if placement == "spread" else []
    target = {lane: nodes[i % len(nodes)] for i, lane in
              enumerate(spread_order(mode, num_rollout_workers, num_learners))} if nodes else {}

    def start(cls, lane, *args, role=None, node=None, **kwargs) -> RoleHandle:
        options = {"num_cpus": cpus_per_actor}
        if placement == "spread":
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                node or target[lane], soft=False)
        remote = _REMOTE.setdefault(cls, ray.remote(cls))
        out.actors.append(remote.options(**options).remote(*args, lane=lane, **kwargs))
        out.handles.append(RoleHandle(out.actors[-1], lane, role))
        return out.handles[-1]

    if mode == "colocated":
        for r in range(num_learners):
            h = start(ColocatedWorker, f"colocated/r{r}", config, params_ref, base_ref,
                      rng_states[r], rank=r, task=task, role="learner")
            out.learners.append(h)
            out.rollout.append(RoleHandle(h.actor, h.lane, "rollout"))
            out.ref.append(RoleHandle(h.actor, h.lane, "ref_reward"))
    else:
        def make_worker(k, rng_state):
            node = least_loaded_node(out.handles) if placement == "spread" else None
            return start(RolloutWorker, f"rollout/r{k}", config, rng_state, task=task,
                         node=node)

        out.learners = [start(Learner, f"learner/r{r}", config, params_ref, rank=r)
                        for r in range(num_learners)]
        out.rollout = [start(RolloutWorker, f"rollout/r{k}", config, rng_states[k], task=task)
                       for k in range(num_rollout_workers)]
        out.ref = [start(RefRewardWorker, "ref_reward/r0", config, base_ref, task=task)]
        out.make_worker = make_worker
    _await_ready(out, mode, ready_timeout_s)
    for trio in zip(out.learners, out.rollout, out.ref) if mode == "colocated" else ():
        for h in trio[1:]:                      # the other roles of the same actor
            h.node_id, h.ready_s = trio[0].node_id, trio[0].ready_s
    return out


def _await_ready(placement: Placement, mode: str, timeout_s: float) -> None:
    """Wait for every actor's ``ready`` and note its node; kill them all if one is late."""
    try:
        infos = ray.get([h.call("ready") for h in placement.handles], timeout=timeout_s)
    except GetTimeoutError:
        for actor in placement.actors:
            ray.kill(actor, no_restart=True)
        raise RuntimeError(f"the {mode} actors did not start within {timeout_s:g} s "
                           f"(is the cluster short of resources? ray.available_resources() "
                           f"says what is free)") from None
    for h, info in zip(placement.handles, infos):
        h.note_ready(info)
