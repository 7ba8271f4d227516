"""The system builders in one place: an :class:`~rlmperf_lite.sim.RLSystem` for a layout, with
the costs of the cost models (:ref:`sec-simulator`).

- :func:`~rlmperf_lite.sim.from_cost.system_from_cost`: a placement (colocated, disaggregated,
  hybrid) of a model on ``gpus`` GPUs, every cost from :mod:`rlmperf_lite.cost` (defined in
  :mod:`rlmperf_lite.sim.from_cost`, beside the engine and phase costs it assembles);
- :func:`placement_system`: the same at the book's KL weight (0.001), named for the charts
  ("disaggregated 8+24");
- :func:`async_system`: the disaggregated system in an execution mode ("async 16+16, k=2, ...");
- :func:`~rlmperf_lite.sim.frameworks.framework_system`: a framework's preset layout and mode
  (defined in :mod:`rlmperf_lite.sim.frameworks`, beside the facts and presets it reads).

For example::

    from rlmperf_lite.sim.layouts import async_system, placement_system
    system = placement_system("disaggregated", actor="qwen2.5-7b", hardware="h100-sxm",
                              workload=Workload(), gpus=32, rollout_gpus=8)
"""
from __future__ import annotations

import dataclasses

from ..checks import check_choice
from .frameworks import framework_system
from .from_cost import PLACEMENTS, system_from_cost
from .system import RLSystem
from .workload import Workload

__all__ = ["PLACEMENTS", "system_from_cost", "placement_system", "async_system",
           "framework_system"]


def placement_system(placement: str, *, actor, hardware, workload: Workload, gpus: int,
                     rollout_gpus: int | None = None, algo: str = "grpo", reward_model=None,
                     kl_coef: float = 0.001, name: str = "", **system_kw) -> RLSystem:
    """:func:`~rlmperf_lite.sim.from_cost.system_from_cost` of ``placement`` (one of
    ``PLACEMENTS``) at KL weight ``kl_coef``, named
    "colocated 32", "disaggregated 8+24" or "hybrid 8+24" unless ``name`` is given
    (:ref:`sec-placements`); ``system_kw`` go to it.

    Raises:
        ValueError: naming the argument, from
            :func:`~rlmperf_lite.sim.from_cost.system_from_cost`.
    """
    system = system_from_cost(actor, hardware, workload, placement=placement, gpus=gpus,
                              rollout_gpus=rollout_gpus, algo=algo, reward_model=reward_model,
                              kl_coef=kl_coef, name=name, **system_kw)
    if name:
        return system
    sizes = f"{gpus}" if placement == "colocated" else f"{rollout_gpus}+{gpus - rollout_gpus}"
    return dataclasses.replace(system, name=f"{placement} {sizes}")   # inputs checked: name it


def async_system(*, actor, hardware, workload: Workload, gpus: int, rollout_gpus: int,
                 mode: str = "async", staleness: float = 0.0, partial_rollout: bool = True,
                 minibatches: int = 1, consume: str = "ready", kl_coef: float = 0.001,
                 **system_kw) -> RLSystem:
    """The disaggregated :func:`~rlmperf_lite.sim.from_cost.system_from_cost` on
    ``rollout_gpus`` of ``gpus`` GPUs in execution ``mode`` ("sync" or "async"; the
    asynchronous knobs are :class:`~rlmperf_lite.sim.RLSystem`'s), named "sync 16+16" or
    "async 16+16, k=2, partial, ready, 4 updates/version" unless ``name`` is given
    (:ref:`sec-async-modes`).

    Raises:
        ValueError: naming the argument, from
            :func:`~rlmperf_lite.sim.from_cost.system_from_cost`.
    """
    check_choice("mode", mode, ("sync", "async"))
    knobs = {} if mode == "sync" else dict(staleness=staleness, partial_rollout=partial_rollout,
                                           minibatches=minibatches, consume=consume)
    name = system_kw.pop("name", "")
    system = system_from_cost(actor, hardware, workload, placement="disaggregated", gpus=gpus,
                              rollout_gpus=rollout_gpus, kl_coef=kl_coef, mode=mode, name=name,
                              **knobs, **system_kw)
    if name:
        return system
    label = f"{mode} {rollout_gpus}+{gpus - rollout_gpus}"
    if mode == "async":
        label += (f", k={staleness:g}, {'partial' if partial_rollout else 'drained'}, {consume}"
                  + (f", {minibatches} updates/version" if minibatches != 1 else ""))
    return dataclasses.replace(system, name=label)
