"""Answers to the exercises of Lab 10 (Part III (b), RL systems: placing many models): each
expected value is computed by the simulator at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ._answer import Answer

__all__ = ["ANSWERS", "SIM_STEP", "SIM_WORKLOAD", "SIM_STEPS", "SPLITS"]

SIM_STEP = dict(actor="qwen2.5-7b", hardware="h100-sxm", gpus=32, kl_coef=0.001)
"""Lab 10's RL system: GRPO of Qwen2.5-7B on 32 H100s, k3 KL penalty (a reference pass)."""

SIM_WORKLOAD = dict(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
                    max_response_len=8192, length_sigma=1.0, seed=0)
"""Lab 10's batch: 32 prompts x 16 responses, log-normal lengths of mean 2,048 cut at 8,192."""

SIM_STEPS = 8
"""Simulated steps per run (the step time is the mean of the last four)."""

SPLITS = tuple(range(2, 32, 2))
"""Rollout GPUs of the disaggregated systems Lab 10 compares (of 32)."""


def _workload(**overrides):
    from ...sim import Workload
    return Workload(**{**SIM_WORKLOAD, **overrides})


def _run(wl, placement: str = "colocated", rollout_gpus: int | None = None, **kw):
    """Simulate Lab 10's system for workload ``wl``; ``kw`` override SIM_STEP or go to
    RLSystem."""
    from ...sim import simulate
    from ...sim.from_cost import system_from_cost
    args = {**SIM_STEP, **kw}
    actor, hardware = args.pop("actor"), args.pop("hardware")
    system = system_from_cost(actor, hardware, wl, placement=placement,
                              rollout_gpus=rollout_gpus, **args)
    return simulate(system, wl, SIM_STEPS)


def _best_split(wl, **kw) -> int:
    times = {rg: _run(wl, "disaggregated", rg, **kw).step_time_s for rg in SPLITS}
    return min(times, key=times.get)


def _replicas_used(result) -> int:
    """Distinct replicas that generate samples of the run's last step."""
    s = result.samples
    return len(np.unique(s["replica"][s["consumed_step"] == result.steps - 1]))


def _hybrid_ppo(actor_gpus: int):
    """PPO with a Qwen2.5-7B critic and reward model: engine, actor and reference on
    ``actor_gpus`` GPUs, critic and reward model on the rest of the 32 (NeMo-Aligner's split),
    log-prob passes fused, reward scored during generation."""
    from ...sim import simulate
    from ...sim.from_cost import system_from_cost
    wl = _workload()
    split = system_from_cost("qwen2.5-7b", "h100-sxm", wl, placement="hybrid", gpus=32,
                             rollout_gpus=actor_gpus, algo="ppo", reward_model="qwen2.5-7b",
                             kl_coef=0.001, fuse_logps=True, overlap_reward=True)
    return simulate(split, wl, SIM_STEPS)


def _best_hybrid() -> tuple[int, float]:
    """(actor GPUs, step time over the colocated PPO system's) of the fastest hybrid."""
    times = {a: _hybrid_ppo(a).step_time_s for a in range(4, 32, 4)}
    best = min(times, key=times.get)
    colocated = _run(_workload(), algo="ppo", reward_model="qwen2.5-7b", fuse_logps=True)
    return best, times[best] / colocated.step_time_s


def _unit_engine_iterations(slots: int) -> int:
    """Decode iterations replica 0 of the colocated system runs in step 0 when every iteration
    takes 1 s whatever the batch and each replica holds ``slots`` sequences."""
    from ...sim import Engine, generate_batch
    from ...sim.from_cost import system_from_cost
    wl = _workload()
    args = {k: v for k, v in SIM_STEP.items() if k not in ("actor", "hardware")}
    system = system_from_cost(SIM_STEP["actor"], SIM_STEP["hardware"], wl, **args)
    unit = dataclasses.replace(system, engine=Engine(decode_base_s=1.0, slots=slots))
    lengths = wl.response_lengths(wl.prompts)                              # (B, G)
    _, end, replica = generate_batch(unit, lengths, 0, 0.0)
    return int(round(float(end[replica == 0].max())))


def _tp_steps(actor: str) -> dict:
    """{engine tp: colocated step time (s)} of Lab 10's system with ``actor`` as the policy,
    at every tp the engine allows (:func:`~rlmperf_lite.sim.sizing.engine_tp_sweep`)."""
    from ...sim.sizing import engine_tp_sweep
    args = {**SIM_STEP, "actor": actor}
    rows = engine_tp_sweep(args.pop("actor"), args.pop("hardware"), _workload(),
                           args.pop("gpus"), steps=SIM_STEPS, **args)
    return {r.engine_tp: r.step_time_s for r in rows}


def _best_tp(actor: str) -> tuple[int, float]:
    """(fastest engine tp, its step time over tp 1's) of Lab 10's colocated system."""
    steps = _tp_steps(actor)
    best = min(steps, key=steps.get)
    return best, steps[best] / steps[1]


ANSWERS: dict[str, Answer] = {
    "ch10.1a": Answer(lambda: _run(_workload(mean_response_len=4096.0,
                                             max_response_len=16384)).step_time_s,
                      "colocated step time (s), responses of mean 4,096 cut at 16,384",
                      "simulate the colocated system on Workload(mean_response_len=4096, "
                      "max_response_len=16384) and read step_time_s"),
    "ch10.1b": Answer(lambda: _best_split(_workload(mean_response_len=4096.0,
                                                    max_response_len=16384)),
                      "rollout GPUs of the fastest disaggregated split, longer responses",
                      "sweep rollout_gpus over 2, 4, ..., 30 and take the smallest step time",
                      rtol=0),
    "ch10.2a": Answer(lambda: _replicas_used(_run(_workload(prompts=8, group_size=64))),
                      "colocated replicas that generate in a step, 8 prompts x 64",
                      "a group goes whole to one replica (group g to replica g mod R): count "
                      "the distinct result.samples['replica'] of one consumed_step", rtol=0),
    "ch10.2b": Answer(lambda: _run(_workload(prompts=8, group_size=64)).step_time_s,
                      "colocated step time (s), 8 prompts x 64",
                      "simulate the colocated system on Workload(prompts=8, group_size=64)"),
    "ch10.3a": Answer(lambda: _best_hybrid()[0],
                      "actor GPUs of the fastest hybrid PPO split",
                      "sweep the actor pool over 4, 8, ..., 28 GPUs (the critic pool gets the "
                      "rest) and take the smallest step time", rtol=0),
    "ch10.3b": Answer(lambda: _best_hybrid()[1],
                      "the best hybrid's step time over the colocated PPO system's",
                      "divide the two step_time_s (colocated with fuse_logps=True)"),
    "ch10.4a": Answer(lambda: _run(_workload(), max_num_seqs=4).step_time_s,
                      "colocated step time (s) with 4 slots per replica",
                      "system_from_cost(..., max_num_seqs=4) caps the engine's slots"),
    "ch10.4b": Answer(lambda: _unit_engine_iterations(4),
                      "iterations of replica 0 in step 0, unit-time engine, 4 slots",
                      "generate_batch on the system with Engine(decode_base_s=1.0, slots=4); "
                      "the largest end time of replica 0's samples", rtol=0),
    "ch10.5a": Answer(lambda: _best_tp("llama-3.1-8b")[0],
                      "engine tp of the fastest colocated step, Llama-3.1-8B as the policy",
                      "engine_tp_sweep('llama-3.1-8b', 'h100-sxm', WL, 32, kl_coef=0.001) and "
                      "take the row with the smallest step_time_s", rtol=0),
    "ch10.5b": Answer(lambda: _best_tp("llama-3.1-8b")[1],
                      "that step time over the step at tp 1 (Llama-3.1-8B)",
                      "divide the best row's step_time_s by the tp 1 row's"),
}
