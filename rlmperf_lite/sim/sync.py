"""The synchronous RL step on any placement: generate the batch, run the phases after it,
sync the weights, repeat (book section :ref:`sec-placements`).

Generation: group g goes to replica g mod R (a prompt's G samples share one engine, as with
vLLM's ``n``); on its replica samples take free slots in order and decode under continuous
batching (:class:`~rlmperf_lite.sim.replica.Replica`). A step's generation ends with its
longest-running sample — the straggler the timeline shows.
"""
from __future__ import annotations

import numpy as np

from .phases import Interval, PoolClock, run_train_phases
from .replica import Replica
from .system import RLSystem
from .workload import Workload

__all__ = ["generate_batch", "generation_s", "simulate_sync"]


def generate_batch(system: RLSystem, lengths: np.ndarray, first_group: int,
                   start_s: float) -> tuple:
    """Start and end (s) of every sample of a batch released at ``start_s``, and its replica;
    each replica decodes its share as in :class:`~rlmperf_lite.sim.replica.Replica`.

    Args:
        lengths: response lengths, shape (B, G).
        first_group: index of the batch's first group in the stream (sets the replica deal).

    Returns:
        (start_s, end_s, replica), each of shape (B, G).
    """
    reps = system.replicas
    B, G = lengths.shape
    replica = ((first_group + np.arange(B)) % reps)[:, None].repeat(G, 1)  # (B, G)
    start, end = np.empty(B * G), np.empty(B * G)
    flat_rep, flat_len = replica.reshape(-1), lengths.reshape(-1)
    for r in np.unique(flat_rep):
        mine = np.flatnonzero(flat_rep == r)
        s, e = Replica(system.engine, start_s).run_alone(mine, flat_len[mine])
        start[mine] = [s[j] for j in mine]
        end[mine] = [e[j] for j in mine]
    return start.reshape(B, G), end.reshape(B, G), replica


def generation_s(system: RLSystem, workload: Workload, batches: int = 2) -> float:
    """Seconds to generate one step's batch on ``system``'s rollout pool alone, the mean over
    the stream's first ``batches`` batches (``generate_batch`` released at 0)."""
    B, G = workload.prompts, workload.group_size
    lengths = workload.response_lengths(batches * B).reshape(batches, B, G)
    return float(np.mean([generate_batch(system, lengths[k], k * B, 0.0)[1].max()
                          for k in range(batches)]))


def simulate_sync(system: RLSystem, workload: Workload, steps: int):
    """Run ``steps`` synchronous steps; returns a :class:`~rlmperf_lite.sim.SimResult`."""
    from .result import SimResult
    B, G = workload.prompts, workload.group_size
    lengths = workload.response_lengths(steps * B).reshape(steps, B, G)
    clock = PoolClock(system)
    rollout_pool, actor_pool = system.placement["rollout"], system.placement["actor"]
    reward = system.costs.get("reward")
    reward_pool = system.placement.get("reward")
    cols = {k: np.empty((steps, B, G)) for k in ("start_s", "end_s", "replica", "ready_s")}
    syncs, step_end = [], np.empty(steps)
    weights_in_engine = 0.0
    for s in range(steps):
        release = max(weights_in_engine, clock.free_s[rollout_pool])
        if clock.holds[rollout_pool] not in (None, "rollout") and system.switch_s > 0:
            clock.intervals.append(Interval(rollout_pool, rollout_pool, "switch", release,
                                            release + system.switch_s, s))
            release += system.switch_s
        clock.holds[rollout_pool] = "rollout"
        start, end, rep = generate_batch(system, lengths[s], s * B, release)
        clock.free_s[rollout_pool] = float(end.max())
        tokens_g = (workload.prompt_len + lengths[s]).sum(axis=1)           # (B,)
        ready = end.max(axis=1)                                             # (B,) group done
        if system.overlap_reward and reward is not None:
            for b in np.argsort(ready, kind="stable"):      # score groups as they complete
                ready[b] = clock.run(reward_pool, "reward", "reward", ready[b],
                                     reward.time_s(tokens_g[b], system.pools[reward_pool]), s)
        cols["start_s"][s], cols["end_s"][s], cols["replica"][s] = start, end, rep
        cols["ready_s"][s] = ready[:, None]
        overlap = system.overlap_reward and reward is not None
        new_weights, _ = run_train_phases(clock, float(end.max()), float(tokens_g.sum()), s,
                                          skip_reward=system.overlap_reward,
                                          rewards_ready_s=float(ready.max()) if overlap else None)
        t0 = max(new_weights, clock.free_s[rollout_pool], clock.free_s[actor_pool])
        t1 = t0 + system.weight_sync_s
        for pool in {rollout_pool, actor_pool}:
            clock.free_s[pool] = t1
        syncs.append((t0, t1))
        weights_in_engine = step_end[s] = t1
    samples = {k: v.reshape(-1) for k, v in cols.items()}
    step_idx = np.repeat(np.arange(steps), B * G)
    samples.update(response_len=lengths.reshape(-1).astype(float), consumed_step=step_idx,
                   version_start=step_idx, version_end=step_idx,
                   group=np.repeat(np.arange(steps * B), G))
    return SimResult(system=system, workload=workload, steps=steps, samples=samples,
                     step_end_s=step_end, sync_windows=syncs, rollout_pauses=[],
                     intervals=clock.intervals)
