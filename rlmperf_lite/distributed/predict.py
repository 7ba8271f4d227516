"""Measure against predict: the simulator (:ref:`sec-simulator`) fed with a Ray run's own measured
phase costs, and its predicted step time and utilisation next to the measured ones (book
chapter "A mini RL system on Ray").

:func:`~rlmperf_lite.distributed.measured_costs` turns a run's timeline into per-step costs;
:func:`toy_system` lays the toy out as the run did — one pool per role, an actor per device —
and :func:`~rlmperf_lite.sim.simulate` runs the same mode, so :func:`compare_run` can set the
predicted step time and compute shares beside the measured ones.

The simulator sees only the phases. What happens between them — the controller submitting a
call, Ray scheduling it, arguments and results pickled and copied through the object store, the
driver waking up on ``ray.get``, Python in the controller — is in the measured step and not in
the prediction; :attr:`RunComparison.unexplained_s` is that remainder.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_int, check_number
from ..sim import Engine, PhaseCost, RLSystem, SimResult, Workload, simulate
from ..sim.result import union_s
from ..tasks import AdditionTask
from .costs import ToyCosts, measured_costs, result_config
from .modes import check_layout, mode_staleness
from .result import RayRunResult

__all__ = ["toy_workload", "toy_system", "predict_run", "measured_compute", "PoolShare",
           "RunComparison", "compare_run"]


def toy_workload(costs: ToyCosts) -> Workload:
    """B prompts x G samples of P prompt tokens and exactly R decoded positions."""
    return Workload(prompts=costs.num_prompts, group_size=costs.group_size,
                    prompt_len=costs.prompt_len, mean_response_len=costs.response_len,
                    max_response_len=costs.response_len, dist="fixed")


def toy_system(costs: ToyCosts, mode: str, *, staleness: int | None = None,
               num_rollout_workers: int = 1, num_learners: int = 1,
               weight_sync_s: float | None = None) -> RLSystem:
    """The toy laid out as :func:`~rlmperf_lite.distributed.place_actors` runs ``mode``.

    - ``"colocated"``: one pool ``colocated`` of L devices holding every role, synchronous.
    - otherwise pools ``rollout`` (W), ``ref_reward`` (1) and ``learner`` (L); ``"sync"`` is
      synchronous, ``"one_step_off"`` and ``"async"`` run ahead by the staleness k (1, or
      ``staleness``) with the batch-ordered consumption and draining of the Ray controller (a
      rollout worker samples a whole batch with one weight version). From k >= 1 the learner
      computes the proximal log-probs (``old_logp``); costs without them (a synchronous run)
      charge the reference pass's cost instead, the same forward over the same tokens.

    The engine: one replica per rollout worker with a slot per sequence of its share, each
    decode iteration over n sequences costing n x :attr:`ToyCosts.generate_s_per_token` (the
    CPU does one sequence's arithmetic after another). Phases after generation: their
    device-seconds per token of B G (P + R), split over their pool. ``weight_sync_s``
    replaces the measured sync.

    Raises:
        ValueError: naming the argument (``staleness`` is needed with ``"async"`` only;
            colocated needs W = L; W and L at most B).
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts, got {type(costs).__name__}")
    k = mode_staleness(mode, staleness)
    W, L = num_rollout_workers, num_learners
    check_layout(mode, costs.num_prompts, W, L)
    s = costs.sim_phase_s
    sync_s = s.get("weight_sync", 0.0) if weight_sync_s is None else weight_sync_s
    check_number("weight_sync_s", sync_s, low=0)
    per_token = {p: s[p] / costs.tokens for p in ("ref_logp", "reward", "actor_update") if p in s}
    if k > 0:
        per_token["old_logp"] = s.get("old_logp", s.get("ref_logp", 0.0)) / costs.tokens
    phase_costs = {p: PhaseCost(v) for p, v in per_token.items()}
    c = costs.generate_s_per_token
    engine = Engine(decode_base_s=c, decode_compute_per_seq_s=c,
                    slots=math.ceil(costs.num_prompts / W) * costs.group_size)
    common = dict(engine=engine, costs=phase_costs, weight_sync_s=sync_s,
                  name=mode if mode != "async" else f"async k={k}")
    if mode == "colocated":
        roles = ("rollout", "actor", "ref", "reward")
        return RLSystem(pools={"colocated": L}, placement=dict.fromkeys(roles, "colocated"),
                        **common)
    placement = {"rollout": "rollout", "actor": "learner", "ref": "ref_reward",
                 "reward": "ref_reward"}
    pools = {"rollout": W, "ref_reward": 1, "learner": L}
    if k == 0:
        return RLSystem(pools=pools, placement=placement, **common)
    return RLSystem(pools=pools, placement=placement, mode="async", staleness=k,
                    consume="batch", partial_rollout=False, **common)


def predict_run(costs: ToyCosts, mode: str, steps: int, **system_kw) -> SimResult:
    """Simulate ``steps`` steps of :func:`toy_system` (``system_kw``: its keywords)."""
    check_int("steps", steps, 1)
    return simulate(toy_system(costs, mode, **system_kw), toy_workload(costs), steps)


def measured_compute(result: RayRunResult, window: tuple) -> dict:
    """{pool: share of its actors' time in ``window`` (seconds since the run's start) spent in
    a phase other than the weight sync}, for every pool of the timeline but the controller's:
    each actor's bars merged, summed over the pool's actors, over (window x actors)."""
    lo, hi = window
    lanes = {}
    for iv in result.timeline:
        if iv.pool != "controller" and iv.phase != "weight_sync":
            lanes.setdefault(iv.pool, {}).setdefault(iv.lane, []).append((iv.start_s, iv.end_s))
    return {pool: sum(union_s(spans, lo, hi) for spans in by_lane.values())
            / ((hi - lo) * len(by_lane)) for pool, by_lane in lanes.items()}


@dataclass(frozen=True)
class PoolShare:
    """A pool's compute share over the steady steps, measured and predicted."""

    pool: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted / self.measured - 1.0 if self.measured else math.inf


@dataclass(frozen=True)
class RunComparison:
    """One Ray run next to the simulator's prediction from its own measured costs."""

    mode: str
    staleness: int
    num_rollout_workers: int
    num_learners: int
    costs: ToyCosts
    predicted: SimResult = field(repr=False)
    measured_step_s: float
    """Mean measured ``step_s`` over the steps the simulator counts as steady."""
    predicted_step_s: float
    """The simulator's :attr:`~rlmperf_lite.sim.SimResult.step_time_s`."""
    pools: tuple
    """:class:`PoolShare` per pool of the simulated system."""

    @property
    def step_error(self) -> float:
        """Relative error of the predicted step time, predicted / measured - 1."""
        return self.predicted_step_s / self.measured_step_s - 1.0

    @property
    def unexplained_s(self) -> float:
        """The measured minus the predicted step time — what the phases do not account for."""
        return self.measured_step_s - self.predicted_step_s

    def rows(self) -> list[dict]:
        """One dict per pool: mode, pool, measured and predicted compute share, error; plus
        the step's measured and predicted seconds and error on every row."""
        step = {"mode": self.predicted.system.name, "measured_step_s": self.measured_step_s,
                "predicted_step_s": self.predicted_step_s, "step_error": self.step_error}
        return [{**step, "pool": p.pool, "measured_compute": p.measured,
                 "predicted_compute": p.predicted, "compute_error": p.error}
                for p in self.pools]


_MIN_STEPS = 2
# the fewest steps compare_run compares: the simulator counts from SimResult.warmup_steps (the
# first half, at least one step, at most all but one), so one warm-up step and one steady step


def compare_run(result: RayRunResult, config=None, *, task: AdditionTask | None = None,
                skip_steps: int = 1) -> RunComparison:
    """Predict ``result``'s run (same mode, staleness, workers, learners and steps) from its
    :func:`measured_costs`, and compare: the mean step time and each pool's compute share over
    the steps the simulator counts as steady (:attr:`~rlmperf_lite.sim.SimResult.warmup_steps`
    onwards), measured from the history's ``step_s`` and the timeline. ``config``: the run's
    (default ``result.config``).

    Raises:
        ValueError: naming ``result``, ``config`` or ``skip_steps``; ``result`` when the run
            has fewer than 2 steps (one warm-up, one steady) or a step's ``step_s`` is not a
            positive number.
    """
    if isinstance(result, RayRunResult) and 0 < len(result.history) < _MIN_STEPS:
        raise ValueError(f"result has {len(result.history)} step(s); compare_run needs at least "
                         f"{_MIN_STEPS} (the simulator leaves the first half of a run, at "
                         f"least one step, out as warm-up, SimResult.warmup_steps): run more "
                         f"steps")
    costs = measured_costs(result, config, task=task, skip_steps=skip_steps)
    for row in result.history:
        if "step_s" not in row:
            raise ValueError(f"result.history rows need 'step_s' (as train_ray writes them), "
                             f"got {row!r}")
        check_number(f"result.history[{row['step']}]['step_s']", row["step_s"], low=0,
                     low_open=True)
    k = result_config(result, config).staleness
    actors = {}
    for iv in result.timeline:
        if iv.phase in ("generate", "actor_update"):
            actors.setdefault(iv.phase, set()).add(iv.lane)
    W, L = len(actors["generate"]), len(actors["actor_update"])
    steps = len(result.history)
    predicted = predict_run(costs, result.mode, steps, staleness=k if result.mode == "async"
                            else None, num_rollout_workers=W, num_learners=L)
    warm = predicted.warmup_steps
    step_s = np.array([row["step_s"] for row in result.history])
    ends = np.cumsum(step_s)                                # since the run's start
    window = (float(ends[warm - 1]), float(ends[-1]))
    pend = predicted.step_end_s
    shares = predicted.utilisation((float(pend[warm - 1]), float(pend[-1])))
    measured = measured_compute(result, window)
    pools = tuple(PoolShare(p, float(measured.get(p, 0.0)), float(shares[p]["compute"]))
                  for p in predicted.system.pools)
    return RunComparison(mode=result.mode, staleness=k, num_rollout_workers=W, num_learners=L,
                         costs=costs, predicted=predicted,
                         measured_step_s=float(step_s[warm:].mean()),
                         predicted_step_s=predicted.step_time_s, pools=pools)
