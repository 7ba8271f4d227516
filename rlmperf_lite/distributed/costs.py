"""What each phase of the toy GRPO system costs per step, measured on Ray or assumed, and the
work and depth of one step with those costs (book chapter "A mini RL system on Ray").

A run's timeline (:class:`~rlmperf_lite.distributed.RayRunResult`) says how long every actor
spent in every phase. :func:`measured_costs` turns it into per-step costs (device-seconds per
step, summed over the actors of a role, averaged over the steps after the first), a
:class:`ToyCosts`; :func:`predict_run` feeds them to the simulator, and
:func:`controller_workdepth` to the work-depth model of :ref:`sec-workdepth-seconds`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number
from ..tasks import AdditionTask
from ..cost.workdepth_s import per_version_depth
from .modes import run_config
from .result import RayRunResult

__all__ = ["SIM_PHASE", "ToyCosts", "REFERENCE_COSTS", "result_config", "measured_costs",
           "SYNC_MODELS", "ControllerWorkDepth", "controller_workdepth"]


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
            non-finite time, or no ``generate`` / ``actor_update`` or a zero one (every step
            decodes and updates, and the work-depth ratios divide by them).
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
            if self.phase_s[phase] == 0:
                raise ValueError(f"ToyCosts.phase_s[{phase!r}] must be > 0 (every step runs "
                                 f"it), got 0; measure it over steps that ran it")

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


def _steady(result: RayRunResult, skip_steps: int, keys=("step", "response_width")) -> list:
    if not isinstance(result, RayRunResult) or not result.history or not result.timeline:
        raise ValueError("result must be a RayRunResult with a history and a timeline (from "
                         "rlmperf_lite.distributed.train_ray)")
    check_int("skip_steps", skip_steps, 0)
    if skip_steps >= len(result.history):
        raise ValueError(f"skip_steps={skip_steps} leaves none of the run's "
                         f"{len(result.history)} steps")
    for row in result.history:
        if not isinstance(row, dict) or any(k not in row for k in keys):
            raise ValueError(f"result.history rows need the keys {keys} (as train_ray "
                             f"writes them), got {row!r}")
    return result.history[skip_steps:]


def result_config(result: RayRunResult, config=None):
    """The AsyncGRPOConfig ``result``'s run ran: ``result.config``, or ``config`` (with the
    run's mode applied, :func:`~rlmperf_lite.distributed.run_config`) for a result made
    without one.

    Raises:
        ValueError: naming ``config`` when it is missing, or differs from the run's own.
    """
    own = getattr(result, "config", None)
    if config is None:
        if own is None:
            raise ValueError("config must be given: this result does not carry the run's "
                             "config")
        return own
    c = run_config(config, result.mode)
    if own is not None and c != own:
        raise ValueError("config differs from the config the run ran (result.config); leave "
                         "it out to use the run's own")
    return c


def measured_costs(result: RayRunResult, config=None, *, task: AdditionTask | None = None,
                   skip_steps: int = 1) -> ToyCosts:
    """The :class:`ToyCosts` of a run: each phase's bars summed per step over the actors,
    averaged over the steps after the first ``skip_steps`` (the first calls warm caches);
    R = the mean ``response_width`` of those steps, rounded. ``config``: the run's
    (default ``result.config``, :func:`result_config`).

    Raises:
        ValueError: naming ``result``, ``skip_steps`` or ``config``.
    """
    rows = _steady(result, skip_steps)
    c = result_config(result, config)
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


SYNC_MODELS = ("broadcast", "pull")
"""Where a weight sync sits in the step's dataflow: ``"broadcast"`` holds the trainer and the
engine both (an NCCL broadcast; the simulator's model), ``"pull"`` only the rollout worker,
which fetches the new version from Ray's object store while the learner goes on (the toy's)."""


@dataclass(frozen=True)
class ControllerWorkDepth:
    """Work and depth of one step of the toy's dataflow, in seconds (the model of
    :ref:`sec-workdepth-seconds`, with the measured phase times as the durations of its
    operations; book section :ref:`sec-ray-workdepth`).

    A step's latency, from its weight sync to its update, is the depth D; with generation
    running k versions ahead, a step per version takes :attr:`per_version_s`. The controller of
    :mod:`rlmperf_lite.distributed` submits the proximal log-probs before it waits for the
    scores, so the two branches are side by side in D_train; one that waited for the scores
    first puts them on one chain (``prox_beside_scoring=False`` of
    :func:`controller_workdepth`)."""

    work_s: float
    """The work W, every phase of the step summed (device-seconds)."""
    generate_s: float
    """The generation side's depth D_gen, generation on W rollout workers (after the weight
    sync when it is a ``"pull"``)."""
    train_depth_s: float
    """The training side's depth D_train, made of the weight sync when it is a
    ``"broadcast"``, then (reference pass, reward, advantages) and the proximal log-probs —
    side by side, or one after the other — then the update (on L learners)."""
    staleness: int
    """How many versions k the generation may run ahead."""

    @property
    def depth_s(self) -> float:
        """D = D_gen + D_train, the longest chain of one step (its latency)."""
        return self.generate_s + self.train_depth_s

    @property
    def parallelism(self) -> float:
        """W / D."""
        return self.work_s / self.depth_s

    @property
    def per_version_s(self) -> float:
        """The depth per version, max(D_train, D / (k + 1)), when generation runs k versions
        ahead (:func:`rlmperf_lite.cost.per_version_depth`, book section
        :ref:`sec-async-workdepth`): the step time a schedule can reach."""
        return per_version_depth(self.generate_s, self.train_depth_s, self.staleness)


def controller_workdepth(costs: ToyCosts, *, staleness: int = 0, num_rollout_workers: int = 1,
                         num_learners: int = 1, sync: str = "broadcast",
                         prox_beside_scoring: bool = True,
                         num_scorers: int = 1) -> ControllerWorkDepth:
    """:class:`ControllerWorkDepth` of a step with W rollout workers, L learners and
    ``num_scorers`` reference/reward workers splitting their phases evenly (colocated, the
    scoring runs on the L actors: ``num_scorers=L``); the proximal log-probs count from
    ``staleness`` 1 (the reference pass's cost when the costs lack them, as in
    :func:`toy_system`). ``sync``: one of
    :data:`SYNC_MODELS` (the default is the simulator's, so
    :attr:`ControllerWorkDepth.per_version_s` equals :func:`predict_run`'s step);
    ``prox_beside_scoring`` False: a controller that asks for the proximal log-probs only once
    the scores are back.

    Raises:
        ValueError: naming ``costs``, ``staleness``, ``num_rollout_workers``,
            ``num_learners``, ``num_scorers``, ``sync`` or ``prox_beside_scoring``.
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts, got {type(costs).__name__}")
    check_int("staleness", staleness, 0)
    check_int("num_rollout_workers", num_rollout_workers, 1)
    check_int("num_learners", num_learners, 1)
    check_int("num_scorers", num_scorers, 1)
    check_choice("sync", sync, SYNC_MODELS)
    if not isinstance(prox_beside_scoring, bool):
        raise ValueError(f"prox_beside_scoring must be True or False, got "
                         f"{prox_beside_scoring!r}")
    s = costs.sim_phase_s
    get = lambda p: s.get(p, 0.0)
    old = s.get("old_logp", get("ref_logp")) if staleness > 0 else 0.0
    score = get("ref_logp") + get("reward")
    branches = (max(score / num_scorers, old / num_learners) if prox_beside_scoring
                else score / num_scorers + old / num_learners)
    pulled = get("weight_sync") if sync == "pull" else 0.0
    return ControllerWorkDepth(
        work_s=get("weight_sync") + get("generate") + score + old + get("actor_update"),
        generate_s=pulled + get("generate") / num_rollout_workers,
        train_depth_s=get("weight_sync") - pulled + branches
        + get("actor_update") / num_learners,
        staleness=staleness)
