"""Measure against predict: the simulator of Chapters 10 and 11 fed with a Ray run's own measured
phase costs, and its predicted step time and utilisation next to the measured ones (book
chapter "A mini RL system on Ray").

A run's timeline (:class:`~rlmperf_lite.distributed.RayRunResult`) says how long every actor
spent in every phase. :func:`measured_costs` turns it into per-step costs (device-seconds per
step, summed over the actors of a role, averaged over the steps after the first); then
:func:`toy_system` lays the toy out as the run did — one pool per role, an actor per device —
and :func:`~rlmperf_lite.sim.simulate` runs the same mode, so :func:`compare_run` can set the
predicted step time and compute shares beside the measured ones.

The simulator sees only the phases. What happens between them — the controller submitting a
call, Ray scheduling it, arguments and results pickled and copied through the object store, the
driver waking up on ``ray.get``, Python in the controller — is in the measured step and not in
the prediction; :attr:`RunComparison.unexplained_s` is that remainder.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_choice, check_int, check_number
from ..rl.async_grpo import AsyncGRPOConfig
from ..rl.grpo import GRPOConfig
from ..sim import Engine, PhaseCost, RLSystem, SimResult, Workload, simulate
from ..sim.result import _union_s
from ..tasks import AdditionTask
from .modes import MODE_STALENESS, MODES, run_config
from .result import RayRunResult

__all__ = ["mode_config", "SIM_PHASE", "ToyCosts", "REFERENCE_COSTS", "measured_costs",
           "toy_workload", "toy_system", "predict_run", "measured_compute", "PoolShare",
           "RunComparison", "compare_run", "ControllerWorkDepth", "controller_workdepth"]


def _staleness(mode: str, staleness, default: int | None = None) -> int:
    """The staleness k ``mode`` runs: its own, or ``staleness`` (else ``default``) for
    ``"async"``."""
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
    k = _staleness(mode, staleness, getattr(config, "staleness", None))
    base = {f.name: getattr(config, f.name) for f in dataclasses.fields(GRPOConfig)}
    extra = {} if not isinstance(config, AsyncGRPOConfig) else {
        f.name: getattr(config, f.name) for f in dataclasses.fields(AsyncGRPOConfig)
        if f.name not in base}
    return AsyncGRPOConfig(**{**base, **extra, **changes, "staleness": k})


SIM_PHASE = {"generate": "generate", "weight_sync": "weight_sync", "ref_logp": "ref_logp",
             "reward": "reward", "advantages": "reward", "old_logp": "old_logp",
             "actor_update": "actor_update", "grad_allreduce": "actor_update"}
"""What the simulator charges each measured phase as — the engine (``generate``), the weight
sync, or a phase after generation. The controller's ``advantages`` ride with the reward (both come
before the update) and the learners' ``grad_allreduce`` with the update."""


@dataclass(frozen=True)
class ToyCosts:
    """Per-step costs of the toy GRPO system's phases, as measured (or assumed).

    Raises:
        ValueError: naming the field, for a non-positive size, an unknown phase, a negative or
            non-finite time, or no ``generate`` / ``actor_update``.
    """

    num_prompts: int
    """B, prompts per step."""
    group_size: int
    """G, samples per prompt."""
    prompt_len: int
    """P, prompt tokens."""
    response_len: int
    """R, positions decoded per sequence (the sampler runs every row to the step's width)."""
    phase_s: dict
    """Phase (keys of :data:`SIM_PHASE`) -> device-seconds per step: summed over the actors that
    ran it, averaged over the steps in which it ran."""

    def __post_init__(self):
        for name in ("num_prompts", "group_size", "prompt_len", "response_len"):
            check_int(f"ToyCosts.{name}", getattr(self, name), 1)
        if not isinstance(self.phase_s, dict):
            raise ValueError(f"ToyCosts.phase_s must be a dict phase -> seconds, got "
                             f"{self.phase_s!r}")
        for phase, s in self.phase_s.items():
            check_choice("ToyCosts.phase_s key", phase, tuple(SIM_PHASE))
            check_number(f"ToyCosts.phase_s[{phase!r}]", s, low=0)
        for phase in ("generate", "actor_update"):
            if phase not in self.phase_s:
                raise ValueError(f"ToyCosts.phase_s needs {phase!r} (every step runs it)")

    @property
    def sequences(self) -> int:
        """The B G sequences of a step."""
        return self.num_prompts * self.group_size

    @property
    def tokens(self) -> int:
        """The B G (P + R) tokens every phase after generation processes."""
        return self.sequences * (self.prompt_len + self.response_len)

    @property
    def sim_phase_s(self) -> dict:
        """Device-seconds per step by the simulator's phase (:data:`SIM_PHASE`)."""
        out = {}
        for phase, s in self.phase_s.items():
            out[SIM_PHASE[phase]] = out.get(SIM_PHASE[phase], 0.0) + float(s)
        return out

    @property
    def generate_s_per_token(self) -> float:
        """The seconds per sequence per decoded position, generate / (B G R)."""
        return float(self.phase_s["generate"]) / (self.sequences * self.response_len)


REFERENCE_COSTS = ToyCosts(
    num_prompts=8, group_size=4, prompt_len=AdditionTask().prompt_len, response_len=4,
    phase_s={"weight_sync": 2.0e-3, "generate": 2.0e-3, "ref_logp": 3.0e-3, "reward": 0.15e-3,
             "advantages": 0.15e-3, "old_logp": 3.0e-3, "actor_update": 6.0e-3,
             "grad_allreduce": 0.4e-3})
"""The device-seconds per step for B = 8, G = 4, R = 4 with one actor per role — round numbers
of the order the chapter's lab measures on the book's 2-core build machine (sync and one-step-off
runs). Inputs, not results: they let the no-kernel calculator and the lab's exercises give the
same answers on every machine and every run."""


def _steady(result: RayRunResult, skip_steps: int) -> list:
    if not isinstance(result, RayRunResult) or not result.history or not result.timeline:
        raise ValueError("result must be a RayRunResult with a history and a timeline (from "
                         "rlmperf_lite.distributed.train_ray)")
    check_int("skip_steps", skip_steps, 0)
    if skip_steps >= len(result.history):
        raise ValueError(f"skip_steps={skip_steps} leaves none of the run's "
                         f"{len(result.history)} steps")
    return result.history[skip_steps:]


def measured_costs(result: RayRunResult, config, *, task: AdditionTask | None = None,
                   skip_steps: int = 1) -> ToyCosts:
    """The :class:`ToyCosts` of a run: each phase's bars summed per step over the actors,
    averaged over the steps after the first ``skip_steps`` (the first calls warm caches);
    R = the mean ``response_width`` of those steps, rounded. ``config`` is the run's.

    Raises:
        ValueError: naming ``result``, ``skip_steps`` or ``config``.
    """
    rows = _steady(result, skip_steps)
    c = run_config(config, result.mode)
    steps = {row["step"] for row in rows}
    per_step = {}                                     # phase -> {step: seconds}
    for iv in result.timeline:
        if iv.step in steps and iv.phase in SIM_PHASE:
            by_step = per_step.setdefault(iv.phase, {})
            by_step[iv.step] = by_step.get(iv.step, 0.0) + (iv.end_s - iv.start_s)
    width = max(1, int(round(float(np.mean([row["response_width"] for row in rows])))))
    return ToyCosts(num_prompts=c.num_prompts, group_size=c.group_size,
                    prompt_len=(task or AdditionTask()).prompt_len, response_len=width,
                    phase_s={p: float(np.mean(list(s.values()))) for p, s in per_step.items()})


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
    k = _staleness(mode, staleness)
    W, L = num_rollout_workers, num_learners
    check_int("num_rollout_workers", W, 1)
    check_int("num_learners", L, 1)
    for name, n in (("num_rollout_workers", W), ("num_learners", L)):
        if n > costs.num_prompts:
            raise ValueError(f"{name}={n} exceeds num_prompts={costs.num_prompts}")
    if mode == "colocated" and W != L:
        raise ValueError(f"num_rollout_workers={W} must equal num_learners={L} in colocated "
                         f"mode (each actor hosts one of each)")
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
    return {pool: sum(_union_s(spans, lo, hi) for spans in by_lane.values())
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


def compare_run(result: RayRunResult, config, *, task: AdditionTask | None = None,
                skip_steps: int = 1) -> RunComparison:
    """Predict ``result``'s run (same mode, staleness, workers, learners and steps) from its
    :func:`measured_costs`, and compare: the mean step time and each pool's compute share over
    the steps the simulator counts as steady (:attr:`~rlmperf_lite.sim.SimResult.warmup_steps`
    onwards), measured from the history's ``step_s`` and the timeline.

    Raises:
        ValueError: naming ``result``, ``config`` or ``skip_steps``.
    """
    costs = measured_costs(result, config, task=task, skip_steps=skip_steps)
    k = run_config(config, result.mode).staleness
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


@dataclass(frozen=True)
class ControllerWorkDepth:
    """Work and depth of one step of the toy's dataflow, in seconds (book Chapter 5's model,
    with the measured phase times as the durations of its operations). The controller of
    :mod:`rlmperf_lite.distributed` waits for each call before it makes the next, so as
    written its step is one chain as long as the work."""

    work_s: float
    """The work W, every phase of the step summed (device-seconds)."""
    generate_s: float
    """The generation's depth D_gen, on W rollout workers."""
    train_depth_s: float
    """The training side's depth D_train — the weight sync, then the longer of (reference
    pass, reward, advantages) and the proximal log-probs, then the update (on L learners)."""
    staleness: int
    """How many versions k the generation may run ahead."""

    @property
    def depth_s(self) -> float:
        """D = D_gen + D_train, the longest chain of one synchronous step."""
        return self.generate_s + self.train_depth_s

    @property
    def parallelism(self) -> float:
        """W / D."""
        return self.work_s / self.depth_s

    @property
    def per_version_s(self) -> float:
        """The depth per version, max(D_train, D / (k + 1)), when generation runs k versions
        ahead (derived in book section 11.5)."""
        return max(self.train_depth_s, self.depth_s / (self.staleness + 1))


def controller_workdepth(costs: ToyCosts, *, staleness: int = 0, num_rollout_workers: int = 1,
                         num_learners: int = 1) -> ControllerWorkDepth:
    """:class:`ControllerWorkDepth` of a step with W rollout workers and L learners splitting
    their phases evenly; the proximal log-probs count from ``staleness`` 1 (the reference
    pass's cost when the costs lack them, as in :func:`toy_system`).

    Raises:
        ValueError: naming ``costs``, ``staleness``, ``num_rollout_workers`` or
            ``num_learners``.
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts, got {type(costs).__name__}")
    check_int("staleness", staleness, 0)
    check_int("num_rollout_workers", num_rollout_workers, 1)
    check_int("num_learners", num_learners, 1)
    s = costs.sim_phase_s
    get = lambda p: s.get(p, 0.0)
    old = s.get("old_logp", get("ref_logp")) if staleness > 0 else 0.0
    score = get("ref_logp") + get("reward")
    return ControllerWorkDepth(
        work_s=get("weight_sync") + get("generate") + score + old + get("actor_update"),
        generate_s=get("generate") / num_rollout_workers,
        train_depth_s=get("weight_sync") + max(score, old / num_learners)
        + get("actor_update") / num_learners,
        staleness=staleness)
