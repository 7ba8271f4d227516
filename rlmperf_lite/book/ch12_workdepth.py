"""The work-depth calculator of Chapter 12: a framework preset's steady step in seconds (W, D,
W/p and Brent's bounds, :func:`~rlmperf_lite.sim.workdepth.system_workdepth`) with
the simulator's step per version set against them, live and with no kernel from one
definition (:class:`~rlmperf_lite.book.WorkDepthCalculator`)."""
from __future__ import annotations

from ..sim import simulate
from ..sim.frameworks import DEFAULT_WORKLOAD, framework_names, framework_system
from ..sim.workdepth import system_workdepth
from .workdepth_calc import WorkDepthCalculator

__all__ = ["FRAMEWORK_WD_OPTIONS", "FRAMEWORK_WD_STATIC", "FRAMEWORK_WD_STEPS",
           "framework_workdepth_calculator", "framework_workdepth_widget",
           "framework_workdepth_static"]

FRAMEWORK_WD_OPTIONS = {"preset": tuple(framework_names()),
                        "actor": ("qwen2.5-7b", "qwen2.5-32b"), "gpus": (16, 32, 64, 128)}
FRAMEWORK_WD_STATIC = {**FRAMEWORK_WD_OPTIONS, "actor": ("qwen2.5-7b",), "gpus": (64,)}
"""The no-kernel twin's grid, every preset on the chapter's workload (Qwen2.5-7B, 64 H100)."""
FRAMEWORK_WD_STEPS = 12
"""Steps simulated per setting, as in the chapter's lab."""
_LABELS = {"preset": "preset", "actor": "model", "gpus": "GPUs p"}


def _note(wd, system) -> str:
    gen, pools = wd.generation, {k: v for k, v in system.pools.items() if k != "cpu"}
    chain = (f"straggler {gen['depth_s']:.1f} s" if system.mode == "sync" or
             system.consume == "batch" else
             f"quickest group it may wait for {gen['depth_s']:.1f} s (straggler "
             f"{gen['straggler_s']:.1f} s)")
    return (f"{system.name}: {system.mode}, pools {pools}, k = {gen['k']}; decode at "
            f"{gen['batch_per_replica']} sequences per replica; generation's chain: {chain}; "
            f"the pools' own lower bound {wd.pool_lower_s:.1f} s")


def framework_workdepth_calculator(*, results: dict | None = None,
                                   steps: int = FRAMEWORK_WD_STEPS,
                                   hardware: str = "h100-sxm") -> WorkDepthCalculator:
    """W (GPU-s), D (s) and Brent's bounds of a preset's steady step on ``gpus`` GPUs of
    ``hardware`` with :data:`~rlmperf_lite.sim.frameworks.DEFAULT_WORKLOAD`, and the simulator's
    step per version (``steps`` steps). ``results``: {preset: SimResult} already simulated;
    one is reused only when its system, workload and steps are the setting's.

    Raises:
        ValueError: from :func:`~rlmperf_lite.sim.frameworks.framework_system` (e.g. training
            states that do not fit the pool) or the simulator, shown as a message.
    """
    cache = dict(results or {})

    def compute(preset, actor, gpus):
        system = framework_system(preset, actor=actor, gpus=gpus, hardware=hardware)
        r = cache.get(preset)
        if r is None or r.system != system or r.workload != DEFAULT_WORKLOAD or r.steps != steps:
            r = simulate(system, DEFAULT_WORKLOAD, steps)
        wd = system_workdepth(system, DEFAULT_WORKLOAD, steps=steps)
        return wd.phases, _note(wd, system), r.step_time_s

    return WorkDepthCalculator(
        compute=compute, options=FRAMEWORK_WD_OPTIONS, static_options=FRAMEWORK_WD_STATIC,
        title="A framework's steady step: W/p and D", labels=_LABELS,
        start={"preset": "verl", "actor": "qwen2.5-7b", "gpus": 64},
        measured_label="simulated step")


def framework_workdepth_widget(**kwargs):
    """The live panel of :func:`framework_workdepth_calculator` (same arguments)."""
    return framework_workdepth_calculator(**kwargs).widget()


def framework_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`framework_workdepth_calculator` (same arguments)."""
    return framework_workdepth_calculator(**kwargs).static()
