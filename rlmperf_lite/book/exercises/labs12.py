"""Answers to the exercises of Lab 12 (RL frameworks through the taxonomy): each expected value
is computed by the library at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

from ._answer import Answer

__all__ = ["ANSWERS", "LAB12_STEPS"]

LAB12_STEPS = 12
"""Steps every Lab 12 simulation runs (the steady state is the mean of the last 6)."""

def _step_s(name: str, steps: int | None = LAB12_STEPS, **kw) -> float:
    """Steady-state step time of preset ``name`` on the presets' default workload (Lab 12:
    Qwen2.5-7B, 64 H100, 128 prompts x 16 responses), simulated for ``steps`` steps (None: the
    steady window, ``steady_steps`` of the system)."""
    from ...sim import simulate, steady_steps
    from ...sim.frameworks import DEFAULT_WORKLOAD, framework_system
    system = framework_system(name, **kw)
    n = steady_steps(system) if steps is None else steps
    return simulate(system, DEFAULT_WORKLOAD, steps=n).step_time_s


EIGHTHS = tuple(k / 8 for k in range(1, 8))
"""The rollout shares of Lab 12's split sweeps."""


def _best_share(name: str) -> tuple[float, float]:
    """(rollout share, step time) of the fastest split of preset ``name`` over :data:`EIGHTHS`."""
    times = {share: _step_s(name, rollout_share=share) for share in EIGHTHS}
    best = min(times, key=times.get)
    return best, times[best]


def _generation_share_32b() -> float:
    """Share of verl's colocated step of Qwen2.5-32B spent generating only (Lab 12, ex. 4)."""
    from ...sim import simulate
    from ...sim.breakdown import step_breakdown
    from ...sim.frameworks import DEFAULT_WORKLOAD, framework_system
    b = step_breakdown(simulate(framework_system("verl", actor="qwen2.5-32b"), DEFAULT_WORKLOAD,
                                steps=LAB12_STEPS))
    return b["generation_only_s"] / b["step_time_s"]


def _gpu_s_speedup(model: str) -> float:
    from ...sim.frameworks import published_speedups
    return published_speedups()[model]["gpu_s_speedup"]


ANSWERS: dict[str, Answer] = {
    "ch12.1a": Answer(lambda: _step_s("verl-one-step-off", partial_rollout=True),
                      "step time (s) of verl-one-step-off with partial rollout",
                      "framework_system('verl-one-step-off', partial_rollout=True), simulated "
                      "for 12 steps on DEFAULT_WORKLOAD"),
    "ch12.1b": Answer(lambda: _step_s("verl-one-step-off", rollout_share=0.5),
                      "step time (s) of verl-one-step-off with half the GPUs generating",
                      "framework_system('verl-one-step-off', rollout_share=0.5)"),
    "ch12.2a": Answer(lambda: _step_s("areal", None, rollout_share=3 / 8, staleness=1.0)
                      / _step_s("areal", None, rollout_share=3 / 8),
                      "AReaL preset at rollout share 3/8: step time at eta = 1 over eta = 4",
                      "framework_system('areal', rollout_share=3/8, staleness=1.0), against "
                      "the preset's own staleness 4, each simulated for steady_steps(system) "
                      "steps"),
    "ch12.2b": Answer(lambda: _step_s("areal", None, rollout_share=3 / 8, staleness=16.0)
                      / _step_s("areal", None, rollout_share=3 / 8),
                      "AReaL preset at rollout share 3/8: step time at eta = 16 over eta = 4",
                      "staleness=16.0 against the preset's 4, each for the steady window"),
    "ch12.3a": Answer(lambda: _best_share("slime")[0],
                      "rollout share of the fastest synchronous slime split (eighths)",
                      "sweep framework_system('slime', rollout_share=k/8) for k = 1..7"),
    "ch12.3b": Answer(lambda: _best_share("slime")[1] / _step_s("verl"),
                      "its step time over verl's colocated step time",
                      "the best slime step time divided by framework_system('verl')'s"),
    "ch12.4a": Answer(lambda: _step_s("verl", actor="qwen2.5-32b")
                      / _step_s("pipelinerl", actor="qwen2.5-32b"),
                      "Qwen2.5-32B on 64 H100: verl colocated step over PipelineRL's",
                      "framework_system(name, actor='qwen2.5-32b') for 'verl' and "
                      "'pipelinerl'"),
    "ch12.4b": Answer(_generation_share_32b,
                      "share of verl's colocated 32B step spent generating only",
                      "step_breakdown(result)['generation_only_s'] / ['step_time_s']"),
    "ch12.5": Answer(lambda: _gpu_s_speedup("Qwen3-235B"),
                     "NeMo-RL Qwen3-235B: one-step-off speed-up per GPU-second",
                     "published_speedups()['Qwen3-235B']['gpu_s_speedup']: (506 s x 128) / "
                     "(241 s x 256)"),
}
