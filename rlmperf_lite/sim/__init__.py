"""A discrete-event simulator of RL post-training systems (book sections :ref:`sec-simulator` and
:ref:`sec-async-modes`): GPU pools,
models placed on them, the phases of a step with costs from the cost models, per-sample
generation with long-tailed lengths, weight syncs, and synchronous or asynchronous execution.

    from rlmperf_lite.sim import Engine, PhaseCost, RLSystem, Workload, simulate
    result = simulate(system, Workload(prompts=32, group_size=16), steps=8)
    result.step_time_s, result.utilisation(), result.staleness_counts()
"""
import math

from ..checks import check_int
from .async_engine import admission_cap, simulate_async
from .phases import Interval
from .result import (STEADY_WARMUP_STEPS, STEADY_WINDOW_STEPS, SimResult, steady_step_time_s,
                     steady_steps, warmup_steps_for)
from .sync import generate_batch, simulate_sync
from .system import ROLES, TRAIN_PHASES, Engine, PhaseCost, RLSystem
from .workload import Workload

__all__ = ["ROLES", "TRAIN_PHASES", "Engine", "PhaseCost", "RLSystem", "Workload", "Interval",
           "SimResult", "simulate", "simulate_sync", "simulate_async", "generate_batch",
           "admission_cap", "MAX_SAMPLES", "steady_steps", "steady_step_time_s",
           "warmup_steps_for", "STEADY_WARMUP_STEPS", "STEADY_WINDOW_STEPS"]

MAX_SAMPLES = 20_000_000
"""Most samples one simulation may generate (about 1 GB of per-sample records)."""


def simulate(system: RLSystem, workload: Workload, steps: int = 8) -> SimResult:
    """Simulate ``steps`` RL steps of ``system`` on ``workload``, in the system's mode.

    Raises:
        ValueError: naming ``system``, ``workload`` or ``steps`` if one is of the wrong type,
            ``steps`` < 1, or the run would generate more than :data:`MAX_SAMPLES` samples;
            from :class:`RLSystem` for an impossible layout.
    """
    if not isinstance(system, RLSystem):
        raise ValueError(f"system must be an RLSystem, got {type(system).__name__}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    check_int("steps", steps, 1)
    versions = steps + (math.ceil(system.staleness) + 1 if system.mode == "async" else 0)
    if versions * workload.samples_per_step > MAX_SAMPLES:
        raise ValueError(f"steps = {steps} (plus the engine's head start of "
                         f"{versions - steps} versions) x {workload.samples_per_step} samples per "
                         f"step is more than {MAX_SAMPLES:,} samples to simulate: use fewer steps, "
                         f"a smaller staleness or a smaller Workload")
    run = simulate_async if system.mode == "async" else simulate_sync
    return run(system, workload, steps)
