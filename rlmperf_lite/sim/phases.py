"""The phases after generation as a small DAG on pools, shared by the synchronous and the
asynchronous simulators (book section :ref:`sec-placements`).

Dependencies: ``reward``, ``old_logp``, ``ref_logp`` and ``values`` need the samples;
``actor_update`` needs all four (advantages are free); ``critic_update`` needs the reward and
the values. A pool runs its phases one at a time in :data:`~rlmperf_lite.sim.TRAIN_PHASES`
order, each on all its GPUs; a pool that changes model between two phases first spends
``switch_s`` swapping them. With ``fuse_logps`` the old and reference passes sharing a pool run
as one phase ``logps`` (one fixed cost, one switch).
"""
from __future__ import annotations

from dataclasses import dataclass

from .system import CPU, TRAIN_PHASES, PhaseCost, RLSystem

__all__ = ["Interval", "PoolClock", "run_train_phases", "switches_per_step"]

_DEPS = {"reward": (), "old_logp": (), "ref_logp": (), "logps": (), "values": (),
         "actor_update": ("reward", "old_logp", "ref_logp", "logps", "values"),
         "critic_update": ("reward", "values")}


@dataclass(frozen=True)
class Interval:
    """One bar of the timeline: ``phase`` on ``lane`` (a pool, or ``pool/rK`` for rollout
    replica K) of ``pool`` from ``start_s`` to ``end_s``, for RL step ``step`` (-1: none)."""

    pool: str
    lane: str
    phase: str
    start_s: float
    end_s: float
    step: int = -1


class PoolClock:
    """When each pool is next free, and which model it holds (for switch costs)."""

    def __init__(self, system: RLSystem):
        self.system = system
        self.free_s = {p: 0.0 for p in system.pools}
        self.holds = {p: None for p in system.pools}
        self.intervals: list[Interval] = []

    def run(self, pool: str, role: str, phase: str, ready_s: float, duration_s: float,
            step: int) -> float:
        """Run ``phase`` of ``role`` on all of ``pool`` once ``ready_s`` has passed and the pool
        is free, paying a switch first if the pool holds another model; returns the end."""
        start = max(ready_s, self.free_s[pool])
        if pool != CPU and self.holds[pool] not in (None, role) and self.system.switch_s > 0:
            self.intervals.append(Interval(pool, pool, "switch", start,
                                           start + self.system.switch_s, step))
            start += self.system.switch_s
        self.holds[pool] = role
        end = start + duration_s
        if duration_s > 0:
            self.intervals.append(Interval(pool, pool, phase, start, end, step))
        self.free_s[pool] = end
        return end


def _phases(system: RLSystem, skip_reward: bool) -> list:
    """(phase, role, cost) in execution order, the log-prob passes fused when asked."""
    costs, place = system.costs, system.placement
    out = [(p, TRAIN_PHASES[p], c) for p, c in costs.items()]
    out.sort(key=lambda x: list(TRAIN_PHASES).index(x[0]))
    if skip_reward:
        out = [x for x in out if x[0] != "reward"]
    if system.fuse_logps and "old_logp" in costs and "ref_logp" in costs and \
            place["actor"] == place["ref"]:
        old, ref = costs["old_logp"], costs["ref_logp"]
        fused = PhaseCost(old.gpu_s_per_token + ref.gpu_s_per_token, max(old.fixed_s, ref.fixed_s))
        out = [x for x in out if x[0] not in ("old_logp", "ref_logp")]
        out.insert(0 if skip_reward or "reward" not in costs else 1, ("logps", "actor", fused))
    return out


def run_train_phases(clock: PoolClock, ready_s: float, tokens: float, step: int, *,
                     skip_reward: bool = False,
                     rewards_ready_s: float | None = None) -> tuple[float, float]:
    """Schedule the phases after generation for samples of ``tokens`` tokens available at
    ``ready_s``; returns (actor_update end = new weights ready, end of the last phase). With
    ``skip_reward`` the rewards were computed elsewhere (overlapped with generation) and are
    all in at ``rewards_ready_s``: only the updates wait for them."""
    system = clock.system
    done = {} if rewards_ready_s is None else {"reward": rewards_ready_s}
    for phase, role, cost in _phases(system, skip_reward):
        ready = max([ready_s] + [done[d] for d in _DEPS[phase] if d in done])
        pool = system.placement[role]
        done[phase] = clock.run(pool, role, phase, ready, cost.time_s(tokens, system.pools[pool]),
                                step)
    weights = done.get("actor_update", max(done.values(), default=ready_s))
    return weights, max(done.values(), default=ready_s)


def switches_per_step(system: RLSystem) -> dict:
    """{pool: model switches per steady synchronous step}: the changes of model, cyclically
    (the next step's generation follows this step's last phase), in the order the pool runs
    the rollout and the phases after it (the CPU pool never switches). A colocated GRPO step
    without reference: rollout -> actor -> rollout, 2."""
    roles = {p: [] for p in system.pools if p != CPU}
    roles[system.placement["rollout"]].append("rollout")
    for _, role, _ in _phases(system, skip_reward=system.overlap_reward):
        pool = system.placement[role]
        if pool != CPU:
            roles[pool].append(role)
    return {p: sum(r[i] != r[i - 1] for i in range(len(r))) if len(set(r)) > 1 else 0
            for p, r in roles.items()}
