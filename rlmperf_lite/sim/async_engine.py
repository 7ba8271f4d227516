"""Asynchronous RL on a disaggregated cluster: a discrete-event simulation of the rollout
engine running ahead of the trainer (book section :ref:`sec-async-modes`).

Events, in time order: a sample ends (its slot takes the next queued sample; the last of a
group makes the group ready for training, and with ``overlap_reward`` sends it to be scored
while generation goes on — an update waits for its groups' scores), an update ends, a weight
sync ends. The rules:

- Admission (freshness control): holding version v, the engine may take groups
  g < floor((v + 1 + staleness) B) — verl's ``staleness_threshold`` (its rollout count per
  sync is (1 + staleness) B minus the stale samples already made), AReaL's bound on
  off-policyness when ``staleness`` is an integer; 0 is on-policy, 1 one-step-off.
- Streaming training: update u of a version trains the next B / ``minibatches`` ready groups,
  oldest-ready first (of any batch, or with ``consume="batch"`` of its own batch only), as
  soon as they are ready; after ``minibatches`` updates the version is
  published and the weights synced (``weight_sync_s``, both pools busy).
- Weight sync with ``partial_rollout``: running samples pause for the sync and finish with the
  new weights (their version span grows); without it, the engine stops starting samples and
  the sync waits until the running ones end.

With ``staleness`` 0 and one mini-batch this is the synchronous schedule of
:func:`~rlmperf_lite.sim.sync.simulate_sync`, event for event (tested).
"""
from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from ..checks import check_int, check_number
from .phases import PoolClock, run_train_phases
from .system import RLSystem
from .replica import Replica
from .workload import Workload

__all__ = ["admission_cap", "simulate_async"]


def admission_cap(version: int, staleness: float, prompts: int) -> int:
    """Groups the engine may have taken once it holds ``version``: floor((v + 1 + s) B).

    ``version`` may be below 0 down to -(1 + s) (a window looking k versions back, as the
    work-depth model's ``chain_window`` does); the cap is never negative.

    Raises:
        ValueError: ``version`` not an int in [-(1 + staleness), 2**52], ``staleness`` not a
            finite number in [0, 1000] (as ``RLSystem.staleness``), ``prompts`` not an int in
            [1, 2**52] (2**52: exact in float64).
    """
    check_number("staleness", staleness, low=0, high=1000)
    check_int("prompts", prompts, 1)
    check_int("version", version, math.ceil(-1 - staleness - 1e-9))
    for name, value in (("version", version), ("prompts", prompts)):
        if value > 2**52:
            raise ValueError(f"{name} must be an int <= 2**52, got {value!r}")
    return _cap(version, staleness, prompts)


def _cap(version, staleness, prompts) -> int:
    """:func:`admission_cap` without its checks, for the event loop (validated inputs, called
    once per event)."""
    return max(0, math.floor((version + 1 + staleness) * prompts + 1e-9))


class _Run:
    """State of one asynchronous simulation (see the module docstring for the rules)."""

    def __init__(self, system: RLSystem, workload: Workload, steps: int):
        self.sys, self.wl, self.steps = system, workload, steps
        B, G = workload.prompts, workload.group_size
        if B % system.minibatches:
            raise ValueError(f"RLSystem.minibatches = {system.minibatches} must divide "
                             f"Workload.prompts = {B}")
        self.chunk = B // system.minibatches
        self.n_groups = admission_cap(steps, system.staleness, B)
        self.lengths = workload.response_lengths(self.n_groups)             # (n, G)
        self.flat_len = self.lengths.reshape(-1)
        n = self.n_groups * G
        self.col = {k: np.full(n, np.nan) for k in
                    ("start_s", "end_s", "replica", "ready_s", "version_start", "version_end",
                     "consumed_step")}
        self.clock = PoolClock(system)
        self.rollout_pool = system.placement["rollout"]
        self.reps = [Replica(system.engine) for _ in range(system.replicas)]
        self.n_running = 0
        self.left_in_group = np.full(self.n_groups, G)
        self.scored_s: dict[int, float] = {}                  # overlap_reward: group -> scored
        self.ready = deque()                                  # consume="ready"
        self.ready_in_batch = [deque() for _ in range(steps + 1)]  # consume="batch"
        self.events, self.seq = [], 0
        self.v_engine = self.v_train = self.updates = self.admitted = 0
        self.in_sync = self.draining = self.training = False
        self.step_end = np.full(steps, np.nan)
        self.syncs, self.pauses = [], []

    def push(self, t, kind, data=None):
        heapq.heappush(self.events, (t, self.seq, kind, data))
        self.seq += 1

    def schedule(self, r):
        t_end = self.reps[r].next_end_s()
        if t_end is not None:
            self.push(t_end, "end", (r, self.reps[r].epoch))

    def fill(self, t, replicas):
        if self.in_sync or self.draining:
            return
        for r in replicas:
            started = self.reps[r].fill(t)
            if started:
                self.col["start_s"][started] = t
                self.col["version_start"][started] = self.v_engine
                self.n_running += len(started)
                self.schedule(r)

    def admit_and_start(self, t, replicas=()):
        G, reps = self.wl.group_size, self.sys.replicas
        cap = min(_cap(self.v_engine, self.sys.staleness, self.wl.prompts),
                  self.n_groups)
        touched = set(replicas)
        while self.admitted < cap:
            g = self.admitted
            r = g % reps
            js = range(g * G, (g + 1) * G)
            self.reps[r].queue.extend(zip(js, self.flat_len[g * G:(g + 1) * G]))
            self.col["replica"][g * G:(g + 1) * G] = r
            touched.add(r)
            self.admitted += 1
        self.fill(t, sorted(touched))

    def on_end(self, t, data):
        r, epoch = data
        rep = self.reps[r]
        if epoch != rep.epoch:          # superseded: the replica changed since it was planned
            return
        j = rep.pop_end(t)
        self.n_running -= 1
        self.col["end_s"][j], self.col["version_end"][j] = t, self.v_engine
        g = j // self.wl.group_size
        self.left_in_group[g] -= 1
        if self.left_in_group[g] == 0:
            reward = self.sys.costs.get("reward")
            if self.sys.overlap_reward and reward is not None:   # scored while others run
                pool = self.sys.placement["reward"]
                tokens = float((self.wl.prompt_len + self.lengths[g]).sum())
                self.scored_s[g] = self.clock.run(pool, "reward", "reward", t, reward.time_s(
                    tokens, self.sys.pools[pool]), self.v_train)
            self.on_ready(t, g)
        if self.draining and not self.n_running:
            self.begin_sync(t)
        self.fill(t, [r])
        self.schedule(r)
        self.try_train(t)

    def on_ready(self, t, g):
        G = self.wl.group_size
        self.col["ready_s"][g * G:(g + 1) * G] = self.scored_s.get(g, t)
        if self.sys.consume == "batch":
            if g // self.wl.prompts <= self.steps:
                self.ready_in_batch[g // self.wl.prompts].append(g)
        else:
            self.ready.append(g)
        self.try_train(t)

    def try_train(self, t):
        if self.training or self.in_sync or self.draining or self.v_train >= self.steps:
            return
        queue = (self.ready_in_batch[self.v_train] if self.sys.consume == "batch"
                 else self.ready)
        if len(queue) < self.chunk:
            return
        groups = [queue.popleft() for _ in range(self.chunk)]
        G = self.wl.group_size
        for g in groups:
            self.col["consumed_step"][g * G:(g + 1) * G] = self.v_train
        tokens = float((self.wl.prompt_len + self.lengths[groups]).sum())
        scored = [self.scored_s[g] for g in groups if g in self.scored_s]
        weights, _ = run_train_phases(self.clock, t, tokens, self.v_train,
                                      skip_reward=self.sys.overlap_reward,
                                      rewards_ready_s=max(scored) if scored else None)
        self.training = True
        self.push(max(weights, self.clock.free_s[self.sys.placement["actor"]]), "trained")

    def on_trained(self, t):
        self.training = False
        self.updates += 1
        if self.updates % self.sys.minibatches:
            self.try_train(t)
            return
        self.v_train += 1
        if self.sys.partial_rollout or not self.n_running:
            self.begin_sync(t)
        else:
            self.draining = True

    def begin_sync(self, t):
        self.draining, self.in_sync = False, True
        actor_pool = self.sys.placement["actor"]          # both pools take part in the sync
        t0 = max(t, self.clock.free_s[self.rollout_pool], self.clock.free_s[actor_pool])
        t1 = t0 + self.sys.weight_sync_s
        if self.n_running and self.sys.weight_sync_s > 0:
            self.pauses.append((t0, t1))
            for rep in self.reps:
                rep.pause(t0)
        for pool in {self.rollout_pool, self.sys.placement["actor"]}:
            self.clock.free_s[pool] = max(self.clock.free_s[pool], t1)
        self.syncs.append((t0, t1))
        self.push(t1, "synced")

    def on_synced(self, t):
        self.in_sync = False
        self.v_engine = self.v_train
        self.step_end[self.v_train - 1] = t
        if self.v_engine >= self.steps:       # the run ends with its last sync
            return
        for r, rep in enumerate(self.reps):
            if rep.paused:
                rep.resume(t)
                self.schedule(r)
        self.admit_and_start(t, range(self.sys.replicas))
        self.try_train(t)

    def run(self):
        self.admit_and_start(0.0, range(self.sys.replicas))
        while self.events and self.v_engine < self.steps:
            t, _, kind, data = heapq.heappop(self.events)
            if kind == "end":
                self.on_end(t, data)
            elif kind == "trained":
                self.on_trained(t)
            else:
                self.on_synced(t)
        return self


def simulate_async(system: RLSystem, workload: Workload, steps: int):
    """Run the asynchronous system until ``steps`` versions are trained and synced; returns a
    :class:`~rlmperf_lite.sim.SimResult` holding every sample the engine started (those not
    trained on by then have ``consumed_step`` -1; those still running end with the run)."""
    from .result import SimResult
    run = _Run(system, workload, steps).run()
    G = workload.group_size
    keep = ~np.isnan(run.col["start_s"])            # every sample the engine started
    samples = {k: v[keep] for k, v in run.col.items()}
    samples["consumed_step"] = np.nan_to_num(samples["consumed_step"], nan=-1.0)
    samples["end_s"] = np.nan_to_num(samples["end_s"], nan=float(run.step_end[-1]))  # running
    samples["response_len"] = run.lengths.reshape(-1)[keep].astype(float)
    samples["group"] = np.repeat(np.arange(run.n_groups), G)[keep]
    return SimResult(system=system, workload=workload, steps=steps, samples=samples,
                     step_end_s=run.step_end, sync_windows=run.syncs,
                     rollout_pauses=run.pauses, intervals=run.clock.intervals)
