"""Cost models of real models and hardware (book Part II): model shapes and exact parameter
counts, accelerator presets, FLOPs, bytes, memory and time of each phase of an RL step; and of
parallel layouts (Part III): collectives, pipeline bubble, memory and step time per plan, the
plan search and weight resharding."""
from .estimate import ALGOS, GENERATION_PHASES, PhaseEstimate, RLStepEstimate, estimate_rl_step
from .phase import PhaseSequence
from .flops import (ADAMW_FLOPS_PER_PARAM, decode_flops, forward_flops, matmul_weights_per_token,
                    mtp_flops, prefill_flops, train_flops)
from .hardware import (HardwareSpec, hardware_preset, hardware_presets, measure_cpu,
                       resolve_hardware)
from .hf import from_hf_config
from .memory import (BYTES_PER_PARAM_ADAM, activation_bytes_per_layer, kv_cache_bytes_per_token,
                     kv_cache_bytes, lm_head_activation_bytes, max_kv_sequences,
                     model_state_bytes)
from .model import ModelConfig
from .roofline import decode_step_bytes, decode_step_flops, mfu, roofline_time
from .rollout import mean_decode_context
from .workdepth import (PhaseRounds, WorkDepth, expected_max_length, forward_depth,
                        grpo_step_workdepth, ppo_step_workdepth, rl_step_workdepth)
from .workdepth_s import (H100_CLOCK_HZ, PhaseWorkDepth, StepTotals, StepWorkDepth,
                          back_of_envelope, per_version_depth, pram_processors,
                          rl_step_workdepth_s)
from .variants import (RESAMPLED_PHASES, VARIANT_KL, VariantCost, VariantWorkDepth,
                       compare_variants, dynamic_sampling_rounds, informative_fraction,
                       informative_fraction_beta,
                       variant_step_cost, variant_step_workdepth_s)
from .profiles import (LOOP_PHASES, MeasuredPhase, MeasuredProfile, cpu_as_fp32_device,
                       generation_share, measured_profile, profile_step_workdepth_s,
                       toy_step_kwargs)
from .presets import model_preset, model_presets, preset_record, resolve_model
from .toy_workdepth import (ToyOpCosts, ToyStepWorkDepth, best_of_s,
                            generation_share_sweep, measure_batching, measure_toy_op_costs,
                            measured_generation_share, measured_step_s, toy_step_prediction,
                            toy_step_workdepth)
from .collective import (COLLECTIVES, algorithm_bandwidth, bus_bandwidth,
                         collective_bytes_per_rank, collective_time_s, tree_all_reduce_time_s,
                         tree_ring_crossover_bytes)
from .pipeline import pipeline_bubble_fraction
from .fsdp import fsdp_step_comm
from .dp_workdepth import (ADAM_STEP_BYTES_PER_PARAM, DP_LINKS, DPCollective, DPUpdateWorkDepth,
                           OverlapThreshold, OverlapWindow, dp_update_workdepth,
                           overlap_threshold_search, overlap_threshold_tokens)
from .tp_workdepth import (TPWorkDepth, cp_overlap_min_chunk_tokens, decode_tp_floor,
                           tp_comm_compute_ratio, tp_comm_constant, tp_comm_threshold,
                           tp_decode_workdepth, tp_train_workdepth)
from .pp_workdepth import (MoEWorkDepth, PipelineWorkDepth, moe_layer_workdepth_s,
                           pipeline_depth_slots, pipeline_workdepth_s, skewed_routing)
from .backends import DEFAULT_BACKEND, TRAINING_BACKENDS, TrainingBackend, training_backend
from .parallel_plan import RECOMPUTE, ParallelPlan, TrainWorkload, balanced_stage_layers
from .parallel_memory import (InferenceMemory, TrainMemory, inference_memory_per_gpu,
                              memory_per_gpu, model_state_breakdown, model_state_bytes_per_gpu)
from .parallel_step import TrainStepTime, train_step_time, stage_train_flops
from .planner import (PlanSearch, RankedPlan, compare_nvlink_domains, search_plans,
                      work_balanced_stage_layers)
from .reshard import RESHARD_MODES, reshard_bytes_per_gpu, reshard_time_s
from .weight_sync import (SYNC_BACKENDS, SYNC_METHODS, SYNC_MODES, VERL_SYNC_ROWS,
                          StageBreakdown, calibrate_weight_sync, num_weight_tensors,
                          switch_breakdown, switch_time_s, verl_megatron_plan, verl_sync_model_s,
                          weight_sync_breakdown, weight_sync_constants, weight_sync_sources,
                          weight_sync_time_s)

__all__ = ["ModelConfig", "from_hf_config", "model_preset", "model_presets", "preset_record",
           "resolve_model", "HardwareSpec", "hardware_preset", "hardware_presets",
           "resolve_hardware", "measure_cpu",
           "matmul_weights_per_token", "forward_flops", "prefill_flops", "decode_flops",
           "train_flops", "mtp_flops", "ADAMW_FLOPS_PER_PARAM", "BYTES_PER_PARAM_ADAM",
           "model_state_bytes",
           "activation_bytes_per_layer", "lm_head_activation_bytes", "kv_cache_bytes_per_token", "kv_cache_bytes", "max_kv_sequences",
           "mean_decode_context", "roofline_time",
           "decode_step_bytes", "decode_step_flops", "mfu", "ALGOS", "PhaseEstimate",
           "PhaseSequence",
           "RLStepEstimate", "estimate_rl_step", "expected_max_length", "forward_depth",
           "rl_step_workdepth", "PhaseWorkDepth", "StepTotals", "StepWorkDepth",
           "rl_step_workdepth_s",
           "back_of_envelope", "pram_processors", "H100_CLOCK_HZ",
           "variant_step_workdepth_s", "VariantWorkDepth", "RESAMPLED_PHASES",
           "PhaseRounds", "WorkDepth", "grpo_step_workdepth", "ppo_step_workdepth",
           "per_version_depth", "VARIANT_KL", "VariantCost", "compare_variants",
           "dynamic_sampling_rounds", "informative_fraction", "informative_fraction_beta",
           "variant_step_cost",
           "profile_step_workdepth_s", "generation_share", "cpu_as_fp32_device",
           "toy_step_kwargs", "measured_profile", "MeasuredProfile", "MeasuredPhase",
           "LOOP_PHASES", "ToyOpCosts", "ToyStepWorkDepth", "best_of_s", "measure_toy_op_costs",
           "measured_step_s", "toy_step_prediction", "toy_step_workdepth",
           "measured_generation_share", "generation_share_sweep", "measure_batching",
           "GENERATION_PHASES",
           # parallelism: book sections sec-dp-workdepth, sec-tp-workdepth, sec-pp-workdepth
           "COLLECTIVES", "collective_time_s", "collective_bytes_per_rank",
           "algorithm_bandwidth", "bus_bandwidth", "tree_all_reduce_time_s",
           "tree_ring_crossover_bytes", "fsdp_step_comm", "pipeline_bubble_fraction",
           "ADAM_STEP_BYTES_PER_PARAM", "DP_LINKS", "DPCollective", "DPUpdateWorkDepth",
           "OverlapThreshold", "OverlapWindow", "dp_update_workdepth",
           "overlap_threshold_search", "overlap_threshold_tokens",
           "TPWorkDepth", "tp_train_workdepth", "tp_decode_workdepth", "tp_comm_constant",
           "tp_comm_compute_ratio", "tp_comm_threshold", "cp_overlap_min_chunk_tokens",
           "decode_tp_floor",
           "pipeline_workdepth_s", "PipelineWorkDepth", "pipeline_depth_slots",
           "moe_layer_workdepth_s", "MoEWorkDepth", "skewed_routing", "RECOMPUTE",
           "ParallelPlan", "TrainWorkload", "model_state_breakdown", "model_state_bytes_per_gpu",
           "TrainMemory", "memory_per_gpu", "InferenceMemory", "inference_memory_per_gpu",
           "TrainStepTime", "train_step_time", "PlanSearch", "RankedPlan", "search_plans",
           "RESHARD_MODES", "reshard_bytes_per_gpu", "reshard_time_s",
           "SYNC_MODES", "SYNC_BACKENDS", "SYNC_METHODS", "VERL_SYNC_ROWS", "StageBreakdown",
           "weight_sync_constants", "weight_sync_sources", "num_weight_tensors",
           "weight_sync_breakdown", "weight_sync_time_s", "switch_breakdown", "switch_time_s",
           "verl_megatron_plan", "verl_sync_model_s", "calibrate_weight_sync", "DEFAULT_BACKEND",
           "TRAINING_BACKENDS",
           "TrainingBackend", "training_backend", "balanced_stage_layers",
           "compare_nvlink_domains", "work_balanced_stage_layers", "stage_train_flops"]
