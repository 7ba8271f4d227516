"""A discrete-event simulator of RL post-training systems (book Chapters 10 and 11): GPU pools,
models placed on them, the phases of a step with costs from the cost models, per-sample
generation with long-tailed lengths, weight syncs, and synchronous or asynchronous execution.

    from rlmperf_lite.sim import Engine, PhaseCost, RLSystem, Workload, simulate
    result = simulate(system, Workload(prompts=32, group_size=16), steps=8)
    result.step_time_s, result.utilisation(), result.staleness_counts()
"""
from ..checks import check_int
from .async_engine import admission_cap, simulate_async
from .phases import Interval
from .result import SimResult
from .sync import generate_batch, simulate_sync
from .system import ROLES, TRAIN_PHASES, Engine, PhaseCost, RLSystem
from .workload import Workload

__all__ = ["ROLES", "TRAIN_PHASES", "Engine", "PhaseCost", "RLSystem", "Workload", "Interval",
           "SimResult", "simulate", "simulate_sync", "simulate_async", "generate_batch",
           "admission_cap"]


def simulate(system: RLSystem, workload: Workload, steps: int = 8) -> SimResult:
    """Simulate ``steps`` RL steps of ``system`` on ``workload``, in the system's mode.

    Raises:
        ValueError: naming ``system``, ``workload`` or ``steps`` if one is of the wrong type or
            ``steps`` < 1; from :class:`RLSystem` for an impossible layout.
    """
    if not isinstance(system, RLSystem):
        raise ValueError(f"system must be an RLSystem, got {type(system).__name__}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    check_int("steps", steps, 1)
    run = simulate_async if system.mode == "async" else simulate_sync
    return run(system, workload, steps)
