"""The toy GRPO system running as Ray actors: local by default, a cluster when given its address
(book chapter "A mini RL system on Ray").

:func:`~rlmperf_lite.distributed.init_ray` starts a small local Ray (or joins a cluster);
:func:`~rlmperf_lite.distributed.train_ray` and :class:`~rlmperf_lite.distributed.Controller`
run GRPO with rollout, reference/reward and learner actors driven by one controller in the modes
:data:`~rlmperf_lite.distributed.MODES`, and return the per-step history with a timeline of
every actor's phases in the simulator's format. Dead rollout workers are replaced
(:class:`~rlmperf_lite.distributed.RolloutPool`); a run checkpoints and resumes
(:func:`~rlmperf_lite.distributed.save_checkpoint`,
:func:`~rlmperf_lite.distributed.load_checkpoint`). :func:`~rlmperf_lite.distributed.compare_run`
sets a run next to the simulator's prediction from its own measured phase costs. On several
nodes (:class:`~rlmperf_lite.distributed.LocalCluster` starts them on one machine) the actors
can be spread over them (:data:`~rlmperf_lite.distributed.PLACEMENTS`), and a run survives the
loss of a node (:func:`~rlmperf_lite.distributed.run_with_node_loss`).
"""
from .checkpoint import Checkpoint, check_resume, load_checkpoint, save_checkpoint
from .controller import Controller, train_ray
from .costs import (REFERENCE_COSTS, SIM_PHASE, SYNC_MODELS, ControllerWorkDepth, ToyCosts,
                    controller_workdepth, measured_costs, result_config)
from .faults import RolloutPool, WorkerLost, get_or_report, raise_if_dead
from .modes import (MODE_STALENESS, MODES, PLACEMENTS, Placement, check_cpus, check_layout,
                    least_loaded_node, mode_config, mode_staleness, place_actors, run_config,
                    spread_order)
from .multinode import (RECORD_KEYS, RECORDED_RUNS, load_run_records, run_record,
                        run_with_node_loss)
from .predict import (PoolShare, RunComparison, compare_run, measured_compute, predict_run,
                      toy_system, toy_workload)
from .result import (PHASE_TIMES, RayRunResult, phase_overlap_s, phase_times, timeline_nodes,
                     to_intervals)
from .runtime import LocalCluster, alive_node_ids, init_ray, local_num_cpus, shutdown_ray
from .workers import (ColocatedWorker, Learner, PhaseLog, RefRewardWorker, RoleHandle,
                      RolloutWorker)

__all__ = ["Controller", "train_ray", "MODES", "MODE_STALENESS", "run_config", "Placement",
           "place_actors", "RayRunResult", "PHASE_TIMES", "phase_times", "phase_overlap_s",
           "to_intervals", "init_ray", "shutdown_ray", "local_num_cpus", "RolloutWorker",
           "RefRewardWorker", "Learner", "ColocatedWorker", "RoleHandle", "PhaseLog", "RolloutPool",
           "get_or_report", "raise_if_dead", "Checkpoint", "save_checkpoint", "load_checkpoint",
           "check_resume", "mode_config", "check_layout", "check_cpus", "mode_staleness",
           "SIM_PHASE", "ToyCosts", "REFERENCE_COSTS", "result_config", "measured_costs",
           "SYNC_MODELS", "ControllerWorkDepth", "controller_workdepth", "toy_workload",
           "toy_system", "predict_run", "measured_compute", "PoolShare", "RunComparison",
           "compare_run", "PLACEMENTS", "spread_order", "least_loaded_node", "WorkerLost",
           "timeline_nodes", "LocalCluster", "alive_node_ids", "run_with_node_loss",
           "run_record", "RECORD_KEYS", "RECORDED_RUNS", "load_run_records"]
