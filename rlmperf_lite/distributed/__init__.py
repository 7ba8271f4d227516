"""The toy GRPO system running as Ray actors: local by default, a cluster when given its address
(book chapter "A mini RL system on Ray").

:func:`~rlmperf_lite.distributed.init_ray` starts a small local Ray (or joins a cluster);
:func:`~rlmperf_lite.distributed.train_ray` and :class:`~rlmperf_lite.distributed.Controller`
run GRPO with rollout, reference/reward and learner actors driven by one controller in the modes
:data:`~rlmperf_lite.distributed.MODES`, and return the per-step history with a timeline of
every actor's phases in the simulator's format. Dead rollout workers are replaced
(:class:`~rlmperf_lite.distributed.RolloutPool`); a run checkpoints and resumes
(:func:`~rlmperf_lite.distributed.save_checkpoint`,
:func:`~rlmperf_lite.distributed.load_checkpoint`).
"""
from .checkpoint import Checkpoint, check_resume, load_checkpoint, save_checkpoint
from .controller import Controller, train_ray
from .faults import RolloutPool
from .modes import MODE_STALENESS, MODES, Placement, place_actors, run_config
from .result import PHASE_TIMES, RayRunResult, phase_times, to_intervals
from .runtime import init_ray, local_num_cpus, shutdown_ray
from .workers import (ColocatedWorker, Learner, PhaseLog, RefRewardWorker, RoleHandle,
                      RolloutWorker)

__all__ = ["Controller", "train_ray", "MODES", "MODE_STALENESS", "run_config", "Placement",
           "place_actors", "RayRunResult", "PHASE_TIMES", "phase_times", "to_intervals",
           "init_ray", "shutdown_ray", "local_num_cpus", "RolloutWorker", "RefRewardWorker",
           "Learner", "ColocatedWorker", "RoleHandle", "PhaseLog", "RolloutPool", "Checkpoint",
           "save_checkpoint", "load_checkpoint", "check_resume"]
