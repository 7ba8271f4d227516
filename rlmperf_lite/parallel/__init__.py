"""Parallelism executed exactly on simulated ranks in one process (book sections
:ref:`sec-data-parallel`, :ref:`sec-tensor-parallel` and :ref:`sec-pp-stages`): collectives that
count the bytes they move, data parallelism and ZeRO, tensor, sequence, context,
pipeline and expert parallelism, each equal to the unsharded computation."""
from .collectives import CommLog, DeviceMesh, ProcessGroup
from .batch import GRPOBatch, local_grads, loss_forward, make_grpo_batch, reference_grpo_step
from .data import FlatLayout, dp_grads, split_groups
from .context import (chunk_positions, cp_attention_backward, cp_attention_forward,
                      merge_sequence, ring_attention_backward, ring_attention_forward,
                      ring_attention_work, split_sequence)
from .expert import (ep_moe_backward, ep_moe_forward, expert_load, init_moe_params, moe_backward,
                     moe_forward, router_backward, router_forward, shard_experts)
from .pipeline import SCHEDULES, pipeline_grads, stage_layers
from .zero import ZeroState, resident_bytes, zero_init, zero_params, zero_step
from .tensor import (check_tp, is_tp_sharded, resident_activation_bytes, sequence_shards,
                     shard_params_tp, tp_block_backward, tp_block_forward, unshard_grads_tp)
from .tp_model import tp_logps_backward, tp_logps_forward
from .grpo_step import full_params, init_parallel_state, parallel_grpo_step
from .train import train_grpo_mesh
from .pipeline_train import stage_of_weights, train_grpo_pipeline
from .zero_train import train_grpo_zero
from .schedules import (PipelineTimeline, gpipe_schedule, interleaved_schedule, make_schedule,
                        one_f_one_b_schedule, schedule_timeline)

__all__ = ["CommLog", "DeviceMesh", "ProcessGroup",
           "GRPOBatch", "make_grpo_batch", "FlatLayout", "split_groups", "loss_forward",
           "local_grads", "reference_grpo_step", "dp_grads", "ZeroState", "zero_init",
           "zero_step", "zero_params", "resident_bytes",
           "chunk_positions", "split_sequence", "merge_sequence", "ring_attention_work",
           "ring_attention_forward", "ring_attention_backward", "cp_attention_forward",
           "cp_attention_backward",
           "init_moe_params", "router_forward", "router_backward", "moe_forward", "moe_backward",
           "shard_experts", "ep_moe_forward", "ep_moe_backward", "expert_load",
           "gpipe_schedule", "one_f_one_b_schedule", "interleaved_schedule", "make_schedule",
           "schedule_timeline",
           "PipelineTimeline", "pipeline_grads", "stage_layers", "SCHEDULES",
           "check_tp", "is_tp_sharded", "shard_params_tp", "unshard_grads_tp", "sequence_shards",
           "tp_block_forward", "tp_block_backward", "resident_activation_bytes",
           "tp_logps_forward", "tp_logps_backward", "parallel_grpo_step", "init_parallel_state",
           "full_params", "train_grpo_mesh", "train_grpo_pipeline", "stage_of_weights",
           "train_grpo_zero"]
