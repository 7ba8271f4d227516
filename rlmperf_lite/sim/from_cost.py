"""Simulator inputs from the cost models (:mod:`rlmperf_lite.cost`): a real model on real hardware
(book section :ref:`sec-placement-cost`).

- Phases after generation: :func:`~rlmperf_lite.cost.estimate_rl_step`'s time of each phase
  for the workload's mean lengths, turned into GPU-seconds per token (its roofline time x GPUs
  / tokens; attention's growth with length is averaged out).
- Engine: replicas of ``rollout_tp`` GPUs (the rollout model of :mod:`rlmperf_lite.cost`),
  or of a chosen ``engine_tp`` (:func:`engine_tp_choices`; ``"best"``: :func:`best_engine_tp`),
  each iteration paying the tp all-reduces (:func:`~rlmperf_lite.cost.rollout.decode_tp_comm`);
  ``slots`` = the sequences whose KV cache (at prompt + mean response tokens each) fits next
  to the weights in ``kv_memory_share`` of HBM, capped at ``max_num_seqs``. A decode
  iteration's roofline
  (:func:`~rlmperf_lite.cost.decode_step_bytes`, ``decode_step_flops``): the weights read
  once (for MoE, the experts the replica's expected batch touches), each sequence's KV cache
  at the time-averaged context of a running sequence under the workload's length
  distribution, P + (E[R^2] / E[R] - 1) / 2 — length-biased, as long responses run longer
  (``mean_decode_context``; capped by sliding windows) — and
  each sequence's FLOPs at that context.
- Weight sync: the mechanism model :func:`~rlmperf_lite.cost.weight_sync_time_s` (gather,
  convert, transfer, load; :ref:`sec-weight-sync-mechanism`) from an FSDP (ZeRO-3) trainer over
  the training GPUs (or a Megatron one, tp = the engine's) to the engine's tp, colocated or
  disaggregated; ``weight_sync="bandwidth"`` gives the bandwidth bound
  :func:`~rlmperf_lite.cost.reshard_time_s` the chapters used before.
- Model switches: on a time-shared pool (colocated, hybrid)
  :func:`~rlmperf_lite.cost.switch_time_s` — engine sleep/wake (vLLM level 1) and, with
  ``trainer_offload``, the trainer's states over the host link; 0 disaggregated and with
  ``weight_sync="bandwidth"`` (the old model charged none).
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import check_bool, check_choice, check_int, check_number
from ..cost import (ParallelPlan, decode_step_bytes, estimate_rl_step, kv_cache_bytes_per_token,
                    matmul_weights_per_token, model_state_bytes, resolve_hardware,
                    resolve_model, switch_time_s, weight_sync_time_s)
from ..cost.flops import attention_flops_per_pair
from ..cost.memory import kv_cache_bytes, kv_cache_split
from ..cost.rollout import (check_rollout_tp, decode_tp_comm, mean_decode_context, rollout_tp,
                            rollout_tp_choices)
from .phases import switches_per_step
from .sync import generation_s
from .system import CPU, ROLES, Engine, PhaseCost, RLSystem
from .workload import Workload

__all__ = ["PLACEMENTS", "engine_tp_choices", "engine_from_cost", "costs_from_cost",
           "sync_and_switch_s", "system_from_cost", "best_engine_tp"]

_PHASES = {"old_logprobs": "old_logp", "ref_logprobs": "ref_logp", "reward": "reward",
           "critic_values": "values", "actor_update": "actor_update",
           "critic_update": "critic_update"}


def _inputs(actor, hardware, workload):
    """(HardwareSpec, ModelConfig) from presets or objects, checking all three arguments."""
    hw, actor = resolve_hardware(hardware), resolve_model(actor, "actor")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    return hw, actor


def engine_tp_choices(actor, hardware, gpus: int) -> tuple:
    """The engine's replica sizes on a pool of ``gpus`` GPUs, smallest first: powers of two
    from the smallest that fits (``rollout_tp``) up to min(NVLink domain, gpus) that divide
    ``gpus`` and the heads (:func:`~rlmperf_lite.cost.rollout.rollout_tp_choices`).

    Raises:
        ValueError: an unknown preset, or ``gpus`` < 1.
    """
    return rollout_tp_choices(resolve_model(actor, "actor"), resolve_hardware(hardware), gpus)


def engine_from_cost(actor, hardware, workload: Workload, rollout_gpus: int, *,
                     max_num_seqs: int = 256, kv_memory_share: float = 0.9,
                     decode_efficiency: float = 0.6, train_efficiency: float = 0.4,
                     tp: int | None = None) -> Engine:
    """The rollout :class:`~rlmperf_lite.sim.Engine` of ``actor`` on ``rollout_gpus`` GPUs of
    ``hardware`` (see the module docstring), in replicas of ``tp`` GPUs (None: the smallest
    that fits, ``rollout_tp``; an int: one of :func:`engine_tp_choices`), whose iterations add
    the tp all-reduces (:func:`~rlmperf_lite.cost.rollout.decode_tp_comm`).

    Raises:
        ValueError: naming a bad argument (``tp`` with the rule it breaks), or when the weights
            leave no room for one sequence's KV cache.
    """
    hw, actor = _inputs(actor, hardware, workload)
    check_int("rollout_gpus", rollout_gpus, 1)
    check_int("max_num_seqs", max_num_seqs, 1)
    for label, v in (("decode_efficiency", decode_efficiency),
                     ("train_efficiency", train_efficiency)):
        check_number(label, v, low=0, high=1, low_open=True)
    check_number("kv_memory_share", kv_memory_share, low=0, high=1, low_open=True)
    if tp is None:
        tp = rollout_tp(actor, hw, rollout_gpus)
        if rollout_gpus % tp:           # replicas of tp GPUs must tile the pool
            raise ValueError(f"the engine's {rollout_gpus} GPUs are not a multiple of the "
                             f"smallest replica that holds {actor.name}, tp={tp}: give it a "
                             f"multiple of {tp} GPUs")
    else:
        check_rollout_tp("tp", tp, actor, hw, rollout_gpus)
    kv_seq = kv_cache_bytes(actor, workload.prompt_len + workload.mean_response_len)
    room = kv_memory_share * hw.hbm_bytes * tp - 2.0 * actor.num_params()
    if kv_cache_split(actor, tp) < tp:      # KV heads replicated beyond their count (or MLA)
        room = (kv_memory_share * hw.hbm_bytes - 2.0 * actor.num_params() / tp) * \
            kv_cache_split(actor, tp)
    if room < kv_seq:
        raise ValueError(f"{actor.name} on {tp} x {hw.name} leaves no KV room for one sequence "
                         f"of {workload.prompt_len + workload.mean_response_len:.0f} tokens; "
                         f"raise kv_memory_share or use a larger hardware")
    slots = max(1, min(max_num_seqs, int(room // kv_seq)))
    batch = min(slots, math.ceil(workload.samples_per_step / (rollout_gpus // tp)))
    # time-averaged over running sequences: cached tokens, and keys the new token attends
    lengths, probs = workload.length_pmf()
    held = mean_decode_context(workload.prompt_len, lengths, probs, model=actor)
    keys = mean_decode_context(workload.prompt_len + 1, lengths, probs, model=actor)
    bw = hw.hbm_bandwidth_bytes_per_s * tp * decode_efficiency
    weights = decode_step_bytes(actor, batch, 0)        # MoE: the experts that batch touches
    kv = kv_cache_bytes_per_token(actor) * held         # decode_step_bytes' KV term per sequence
    flops = 2.0 * matmul_weights_per_token(actor) + attention_flops_per_pair(actor) * keys
    comm = decode_tp_comm(actor, hw, tp)                # 2 L all-reduces per iteration
    return Engine(decode_base_s=weights / bw, decode_per_seq_s=kv / bw,
                  decode_compute_per_seq_s=flops / (hw.peak("bf16") * tp * train_efficiency),
                  tp=tp, slots=slots, iteration_latency_s=comm.latency_s,
                  comm_per_seq_s=comm.per_seq_s)


def costs_from_cost(algo: str, actor, hardware, workload: Workload, *, kl_coef: float = 0.0,
                    recompute_old_logprobs: bool = True, reward=None, critic=None,
                    train_efficiency: float = 0.4) -> dict:
    """{phase: PhaseCost} of the phases after generation, in GPU-seconds per token, from
    :func:`~rlmperf_lite.cost.estimate_rl_step` at the workload's mean response length."""
    probe_gpus = rollout_tp(resolve_model(actor, "actor"), resolve_hardware(hardware), 8) or 1
    est = estimate_rl_step(algo, actor=actor, hardware=hardware, prompts=workload.prompts,
                           group_size=workload.group_size, prompt_len=workload.prompt_len,
                           response_len=int(round(workload.mean_response_len)),
                           gpus=probe_gpus, kl_coef=kl_coef, reward=reward, critic=critic,
                           recompute_old_logprobs=recompute_old_logprobs,
                           train_efficiency=train_efficiency)
    tokens = workload.samples_per_step * (workload.prompt_len + workload.mean_response_len)
    return {_PHASES[p.name]: PhaseCost(p.time_s * probe_gpus / tokens)
            for p in est.phases if p.name in _PHASES}


PLACEMENTS = ("colocated", "disaggregated", "hybrid")


def _check_layout(placement: str, gpus: int, rollout_gpus, algo: str, reward_model) -> None:
    """ValueError naming ``rollout_gpus`` unless a split layout leaves GPUs on both sides, or
    naming ``algo`` / ``reward_model`` when a hybrid has nothing to put apart."""
    if placement != "colocated":
        if not isinstance(rollout_gpus, (int, np.integer)) or isinstance(rollout_gpus, bool) \
                or not 0 < rollout_gpus < gpus:
            raise ValueError(f"rollout_gpus must be an int in [1, gpus - 1] = [1, {gpus - 1}] "
                             f"for a {placement} placement, got {rollout_gpus!r}")
    if placement == "hybrid" and algo != "ppo" and reward_model is None:
        raise ValueError("a hybrid placement puts the critic and the reward model on their own "
                         "GPUs: use algo='ppo' or give a reward_model")


def _check_states_fit(actor, hw, placement: str, algo: str, gpus: int, rollout_gpus,
                      train_gpus: int) -> None:
    """ValueError unless the trained models' states (16 bytes per parameter, ZeRO-3-sharded
    over the pool that trains them) fit a GPU of ``hw``."""
    one = model_state_bytes(actor.num_params())
    if placement == "hybrid":               # actor on the actor pool, critic (PPO) apart
        trained_on = {"actor": (1, rollout_gpus),
                      "critic": (int(algo == "ppo"), gpus - rollout_gpus)}
    else:
        trained_on = {"training": (2 if algo == "ppo" else 1, train_gpus)}
    for pool, (n, pool_gpus) in trained_on.items():
        if n and n * one / pool_gpus > hw.hbm_bytes:
            per_gpu = n * one / pool_gpus
            raise ValueError(f"{n} trained {actor.name} model(s) need {per_gpu / 1e9:.0f} GB "
                             f"of states per GPU on the {pool_gpus} GPUs of the {pool} pool "
                             f"(ZeRO-3, 16 bytes per parameter); {hw.name} has "
                             f"{hw.hbm_bytes / 1e9:.0f} GB: give training more GPUs")


def _pools_and_placement(placement: str, gpus: int, rollout_gpus, train_gpus: int,
                         reward_model) -> tuple:
    """(pools: name -> GPUs, placement: role -> pool) of a layout; a rule reward on the CPU."""
    cpu = {CPU: 1} if reward_model is None else {}
    if placement == "colocated":
        pools = {"all": gpus, **cpu}
        where = {r: "all" for r in ROLES}
    elif placement == "disaggregated":
        pools = {"rollout": rollout_gpus, "train": train_gpus, **cpu}
        where = {**{r: "train" for r in ROLES}, "rollout": "rollout"}
    else:
        pools = {"actor": rollout_gpus, "critic": gpus - rollout_gpus, **cpu}
        where = {"rollout": "actor", "actor": "actor", "ref": "actor", "critic": "critic",
                 "reward": "critic"}
    if reward_model is None:
        where["reward"] = CPU
    return pools, where


def sync_and_switch_s(actor, hw, engine_tp: int, placement: str, train_gpus: int,
                      gen_gpus: int, *, algo: str = "grpo", weight_sync: str = "mechanism",
                      sync_backend: str = "fsdp", sync_bucketed: bool = False,
                      trainer_offload: bool = False, sleep_level: int = 1) -> tuple:
    """(weight sync s, switch s) of a layout (module docstring): the trainer ZeRO-3 over
    ``train_gpus`` (``sync_backend="fsdp"``) or Megatron with tp = ``engine_tp``, the engine's
    tp ``engine_tp`` on ``gen_gpus``; a switch on a time-shared pool of ``gen_gpus``.

    Raises:
        ValueError: naming ``weight_sync``, ``sync_backend`` (Megatron at a tp that does not
            divide ``train_gpus``), ``sync_bucketed``, ``trainer_offload``, ``sleep_level``,
            or from the cost models.
    """
    check_choice("weight_sync", weight_sync, ("mechanism", "bandwidth"))
    check_choice("sync_backend", sync_backend, ("fsdp", "megatron"))
    check_bool("sync_bucketed", sync_bucketed)
    check_bool("trainer_offload", trainer_offload)
    check_int("sleep_level", sleep_level, 1)
    check_choice("sleep_level", sleep_level, (1, 2))
    mode = "disaggregated" if placement == "disaggregated" else "colocated"
    plan = ParallelPlan(dp=train_gpus, zero_stage=3)
    if sync_backend == "megatron":
        if train_gpus % engine_tp:      # a Megatron trainer at the engine's tp must fit the pool
            raise ValueError(f"sync_backend='megatron' trains at the engine's tp={engine_tp}, "
                             f"which does not divide the {train_gpus} training GPUs: give "
                             f"training a multiple of {engine_tp} GPUs or use sync_backend='fsdp'")
        plan = ParallelPlan(dp=train_gpus // engine_tp, tp=engine_tp, sp=engine_tp > 1,
                            zero_stage=1)
    if weight_sync == "bandwidth":     # the bandwidth bound from a ZeRO-3 trainer, no switches
        return weight_sync_time_s(actor, hw, ParallelPlan(dp=train_gpus, zero_stage=3),
                                  engine_tp, mode=mode, method="bandwidth"), 0.0
    sync = weight_sync_time_s(actor, hw, plan, engine_tp, mode=mode, backend=sync_backend,
                              bucketed=sync_bucketed,
                              rollout_gpus=gen_gpus if mode == "disaggregated" else None)
    switch = 0.0 if placement == "disaggregated" else switch_time_s(
        actor, hw, gen_gpus, engine_tp, trainer_offload=trainer_offload,
        sleep_level=sleep_level, trained_models=2 if algo == "ppo" and placement == "colocated"
        else 1)
    return sync, switch


def system_from_cost(actor, hardware, workload: Workload, *, placement: str = "colocated",
                     gpus: int = 8, rollout_gpus: int | None = None, algo: str = "grpo",
                     kl_coef: float = 0.0, recompute_old_logprobs: bool = True,
                     reward_model=None, train_efficiency: float = 0.4,
                     decode_efficiency: float = 0.6, max_num_seqs: int = 256,
                     weight_sync_s: float | None = None, switch_s: float | None = None,
                     weight_sync: str = "mechanism", sync_backend: str = "fsdp",
                     sync_bucketed: bool = False, trainer_offload: bool = False,
                     sleep_level: int = 1, name: str = "",
                     engine_tp: int | str | None = None, **system_kw) -> RLSystem:
    """An :class:`~rlmperf_lite.sim.RLSystem` of ``actor`` on ``gpus`` GPUs of ``hardware``:

    - ``"colocated"``: every model on the ``gpus``, time-shared;
    - ``"disaggregated"``: the engine on ``rollout_gpus``, all training on the rest;
    - ``"hybrid"``: the engine, actor and reference time-share ``rollout_gpus`` GPUs, and the
      critic and reward model the rest (NeMo-Aligner's split; needs PPO or a reward model).

    A reward model (``reward_model``) runs with the trainer (hybrid: apart); without one the
    reward is a rule on the CPU. The weight sync and the model switches come from
    :func:`sync_and_switch_s` (``weight_sync``, ``sync_backend``, ``sync_bucketed``,
    ``trainer_offload``, ``sleep_level``); ``weight_sync_s`` and ``switch_s`` replace them by
    measured or assumed seconds. ``engine_tp`` is the engine's replica size: None, the
    smallest that fits; an int of :func:`engine_tp_choices`; ``"best"``, the choice whose
    step would be shortest (:func:`best_engine_tp`). ``system_kw`` go to
    :class:`~rlmperf_lite.sim.RLSystem` (mode, staleness, minibatches, ...).

    Raises:
        ValueError: naming the argument — an unknown placement, ``rollout_gpus`` missing or not
            leaving training GPUs, ``engine_tp`` not None, "best" or an allowed int (with the
            rule it breaks), training states (16 bytes per trained parameter, sharded over the
            training GPUs) beyond a GPU's memory, a hybrid with nothing to put apart, or from
            the cost models and :class:`~rlmperf_lite.sim.RLSystem`.
    """
    check_choice("placement", placement, PLACEMENTS)
    check_int("gpus", gpus, 1)
    hw, actor = _inputs(actor, hardware, workload)
    _check_layout(placement, gpus, rollout_gpus, algo, reward_model)
    gen_gpus = gpus if placement == "colocated" else rollout_gpus
    train_gpus = gpus - rollout_gpus if placement == "disaggregated" else gen_gpus
    engines = [engine_from_cost(actor, hw, workload, gen_gpus, max_num_seqs=max_num_seqs,
                                decode_efficiency=decode_efficiency,
                                train_efficiency=train_efficiency, tp=tp)
               for tp in _engine_tps(engine_tp, actor, hw, gen_gpus)]
    costs = costs_from_cost(algo, actor, hw, workload, kl_coef=kl_coef, reward=reward_model,
                            recompute_old_logprobs=recompute_old_logprobs,
                            train_efficiency=train_efficiency)
    _check_states_fit(actor, hw, placement, algo, gpus, rollout_gpus, train_gpus)
    pools, where = _pools_and_placement(placement, gpus, rollout_gpus, train_gpus, reward_model)
    sizes = "+".join(str(n) for p, n in pools.items() if p != CPU)
    sync_kw = dict(algo=algo, weight_sync=weight_sync, sync_backend=sync_backend,
                   sync_bucketed=sync_bucketed, trainer_offload=trainer_offload)
    systems = []
    for e in engines:       # the sync and switches depend on the engine's tp
        sync_s, sw_s = sync_and_switch_s(actor, hw, e.tp, placement, train_gpus, gen_gpus,
                                         sleep_level=sleep_level, **sync_kw)
        systems.append(RLSystem(pools=pools, placement=where, engine=e, costs=costs,
                                weight_sync_s=sync_s if weight_sync_s is None else weight_sync_s,
                                switch_s=sw_s if switch_s is None else switch_s,
                                name=name or f"{actor.name} {placement} {sizes}", **system_kw))
    return systems[0] if engine_tp != "best" else best_engine_tp(systems, workload)


def _engine_tps(engine_tp, actor, hw, gen_gpus: int) -> tuple:
    """The replica sizes ``system_from_cost`` builds for ``engine_tp`` (None: the default's
    None; "best": every choice), or a ValueError naming ``engine_tp``."""
    if engine_tp is None:
        return (None,)
    if isinstance(engine_tp, str):
        check_choice("engine_tp", engine_tp, ("best",))
        tps = rollout_tp_choices(actor, hw, gen_gpus)
        if not tps:
            raise ValueError(f"engine_tp='best' finds no replica size for {actor.name} on "
                             f"{gen_gpus} x {hw.name}: none is a power of two dividing the "
                             f"pool and the heads")
        return tps
    check_rollout_tp("engine_tp", engine_tp, actor, hw, gen_gpus)
    return (engine_tp,)


def best_engine_tp(systems, workload: Workload) -> RLSystem:
    """Of ``systems`` that differ in their engine's tp, the one whose generation of one step's
    batch (:func:`~rlmperf_lite.sim.sync.generation_s`, simulated) plus weight sync and
    model switches (both depend on the tp) is shortest, the smaller tp on a tie. Those are the
    parts of a step the tp changes: the phases after generation do not depend on it. A
    simulation of one batch (milliseconds) rather than Brent's lower bound max(W/p, D), which
    leaves out the queueing for slots and, between the bounds, how far a schedule sits from
    either.

    Raises:
        ValueError: naming ``systems`` (empty, or not RLSystems) or ``workload``.
    """
    if isinstance(systems, RLSystem) or not isinstance(systems, (list, tuple)) or not systems \
            or not all(isinstance(s, RLSystem) for s in systems):
        raise ValueError(f"systems must be a non-empty list of RLSystems, got {systems!r}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    return min(systems, key=lambda s: (generation_s(s, workload) + s.weight_sync_s
                                       + max(switches_per_step(s).values(), default=0) * s.switch_s,
                                       s.engine.tp))
