"""Answers to the exercises of Lab 11 (Part III (b), RL systems: asynchronous RL and
staleness): each expected value is computed by the simulator at call time (see
:mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

import dataclasses

from ._answer import Answer

__all__ = ["ANSWERS", "SIM_STEP", "SIM_WORKLOAD", "SMALL_COSTS", "DRAIN_WORKLOAD"]

SIM_STEP = dict(actor="qwen2.5-7b", hardware="h100-sxm", gpus=32, kl_coef=0.001)
"""The RL system of Lab 11 (Chapter 10's), GRPO of Qwen2.5-7B on 32 H100s with a k3 KL penalty."""

SIM_WORKLOAD = dict(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
                    max_response_len=8192, length_sigma=1.0, seed=0)
"""The batch of Lab 11, 32 prompts x 16 responses of log-normal length (mean 2,048, cut at
8,192)."""

SMALL_COSTS = {"old_logp": (2e-4, 0.5), "ref_logp": (2e-4, 0.5), "actor_update": (6e-4, 1.0),
               "reward": (1e-5, 0.0)}
"""The phases of the small system of Lab 11 §5, as (GPU-seconds per token, fixed seconds)."""

DRAIN_WORKLOAD = dict(prompts=8, group_size=4, prompt_len=64, mean_response_len=300.0,
                      max_response_len=2000, length_sigma=1.2, seed=0)
"""The small batch of Lab 11 §5, 8 prompts x 4 of log-normal length (mean 300, cut at 2,000)."""


def _workload(**overrides):
    from ...sim import Workload
    return Workload(**{**SIM_WORKLOAD, **overrides})


def _run(rollout_gpus: int, weight_sync_s: float | None = None, **kw):
    """Simulate Lab 11's system, disaggregated with ``rollout_gpus`` generating, for the
    steady window (``steady_steps``; its step_time_s is ``steady_step_time_s``); ``kw`` go to
    RLSystem (mode, staleness, ...); ``weight_sync_s`` replaces the computed transfer time."""
    from ...sim import simulate, steady_steps
    from ...sim.from_cost import system_from_cost
    wl = _workload()
    args = dict(SIM_STEP)
    actor, hardware = args.pop("actor"), args.pop("hardware")
    system = system_from_cost(actor, hardware, wl, placement="disaggregated",
                              rollout_gpus=rollout_gpus, **args, **kw)
    if weight_sync_s is not None:
        system = dataclasses.replace(system, weight_sync_s=weight_sync_s)
    return simulate(system, wl, steady_steps(system))


def _colocated(**kw):
    """Simulate Lab 11's system colocated on its 32 GPUs, synchronous, for the steady window;
    ``kw`` go to system_from_cost (``engine_tp``, ...)."""
    from ...sim import simulate, steady_steps
    from ...sim.from_cost import system_from_cost
    wl = _workload()
    args = dict(SIM_STEP)
    actor, hardware = args.pop("actor"), args.pop("hardware")
    system = system_from_cost(actor, hardware, wl, placement="colocated", **args, **kw)
    return simulate(system, wl, steady_steps(system))


def _one_step_off(**kw):
    """verl's one-step-off recipe on 16+16: bound 1, drained before each sync, each version
    trained on its own batch; ``kw`` go to system_from_cost (``engine_tp``, ...)."""
    return _run(16, mode="async", staleness=1, consume="batch", partial_rollout=False, **kw)


def _eta(eta: int):
    """AReaL-style bounded staleness on 16+16: integer bound, streaming consumption, partial
    (interruptible) rollout, one update per version."""
    return _run(16, mode="async", staleness=eta, consume="ready", partial_rollout=True)


def _small_end_s(staleness: float, partial: bool, minibatches: int) -> float:
    """End of 10 versions of §5's small system (2 + 2 devices, batch-ordered consumption)."""
    from ...sim import Engine, PhaseCost, RLSystem, Workload, simulate
    costs = {k: PhaseCost(*v) for k, v in SMALL_COSTS.items()}
    system = RLSystem.disaggregated(2, 2, engine=Engine(decode_base_s=0.01, slots=8),
                                    costs=costs, mode="async", staleness=staleness,
                                    partial_rollout=partial, minibatches=minibatches,
                                    consume="batch")
    return float(simulate(system, Workload(**DRAIN_WORKLOAD), 10).step_end_s[-1])


def _drain_ratio(partial: bool) -> float:
    """End time at staleness 3 over staleness 1, 4 streaming updates per version."""
    return _small_end_s(3, partial, 4) / _small_end_s(1, partial, 4)


ANSWERS: dict[str, Answer] = {
    "ch11.1a": Answer(lambda: _eta(4).step_time_s,
                      "step time (s) of 16+16 with an integer bound 4, partial rollout",
                      "simulate system_from_cost(..., placement='disaggregated', "
                      "rollout_gpus=16, mode='async', staleness=4) for steady_steps(system) "
                      "steps and read steady_step_time_s"),
    "ch11.1b": Answer(lambda: float(_eta(4).staleness.max()),
                      "largest staleness of a trained sample, bound 4",
                      "result.staleness.max(); streaming consumption may train a sample one "
                      "version after its batch", rtol=0),
    "ch11.2a": Answer(lambda: _run(24, mode="async", staleness=8).step_time_s,
                      "step time (s) of 24+8 at staleness 8 (the steady window, 33 steps)",
                      "rollout_gpus=24, mode='async', staleness=8, simulated for "
                      "steady_steps(system) steps"),
    "ch11.2b": Answer(lambda: float(_run(24, mode="async", staleness=8)
                                    .utilisation()["train"]["compute"]),
                      "the training pool's compute share, 24+8 at staleness 8",
                      "result.utilisation()['train']['compute'] of the same run"),
    "ch11.3a": Answer(lambda: _drain_ratio(False),
                      "end time at staleness 3 over staleness 1, drained, 4 updates/version",
                      "simulate §5's small system with minibatches=4, partial_rollout=False, "
                      "for staleness 3 and 1, and divide step_end_s[-1]"),
    "ch11.3b": Answer(lambda: _drain_ratio(True),
                      "the same ratio with partial rollouts",
                      "the same with partial_rollout=True"),
    "ch11.4a": Answer(lambda: _one_step_off(weight_sync_s=10.0).step_time_s,
                      "one-step-off step time (s) with a 10-s weight sync",
                      "dataclasses.replace(system, weight_sync_s=10.0) on the one-step-off "
                      "system of §1"),
    "ch11.4b": Answer(lambda: _run(16, mode="async", staleness=2,
                                   weight_sync_s=10.0).step_time_s,
                      "bounded staleness 2, partial rollout, step time (s) with a 10-s sync",
                      "the same replace on the bounded-staleness system of §1"),
    "ch11.5a": Answer(lambda: _one_step_off(engine_tp="best").step_time_s,
                      "one-step-off step time (s) with the engine's best tp",
                      "the one-step-off system of §1 built with engine_tp='best'; step_time_s"),
    "ch11.5b": Answer(lambda: (_colocated(engine_tp="best").step_time_s
                               / _one_step_off(engine_tp="best").step_time_s),
                      "colocated over one-step-off step time, both at their best engine tp",
                      "the colocated system of §1 with engine_tp='best', its step_time_s over "
                      "the one-step-off one's"),
}
