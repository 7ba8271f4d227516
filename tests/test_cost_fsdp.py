"""FSDP2's reshard_after_forward and HSDP on a data-parallel step (rlmperf_lite.cost.fsdp),
against the library's ZeRO-3 model (train_step_time) and the ring formulas."""
import pytest

from rlmperf_lite.book.dp_views import dp_plan_results
from rlmperf_lite.cost import (collective_time_s, fsdp_step_comm, hardware_preset,
                               model_state_bytes_per_gpu)
from rlmperf_lite.cost import ModelConfig

N = ModelConfig.preset("qwen2.5-7b").num_params()


def test_the_defaults_are_zero3_of_lab_7_exercise_4():
    # Qwen2.5-7B, dp = 16 on H100s, 32 micro-batches per rank: ZeRO-3's 27.4 s of DP traffic
    _, step, _ = dp_plan_results("qwen2.5-7b", "h100", 16, 3)
    r = fsdp_step_comm("qwen2.5-7b", "h100", 16, 32)
    assert r["total_s"] == pytest.approx(step.comm_s["dp"], rel=1e-12)
    assert r["all_gathers"] == 64 and r["replicate_all_reduce_s"] == 0.0
    assert r["model_state_bytes_per_gpu"] == model_state_bytes_per_gpu(N, 16, 3)


def test_reshard_after_forward_false_drops_the_backward_gathers_and_keeps_the_weights():
    on = fsdp_step_comm("qwen2.5-7b", "h100", 16, 32)
    off = fsdp_step_comm("qwen2.5-7b", "h100", 16, 32, reshard_after_forward=False)
    inter = hardware_preset("h100").inter_node_bandwidth_bytes_per_s
    one_gather = collective_time_s("all_gather", 2 * N, 16, inter)
    assert off["all_gathers"] == 32                              # the 32 re-gathers are gone
    assert on["total_s"] - off["total_s"] == pytest.approx(32 * one_gather, rel=1e-12)
    assert off["reduce_scatter_s"] == on["reduce_scatter_s"]
    assert off["unsharded_weight_bytes"] == pytest.approx(15 / 16 * 2 * N)
    assert on["unsharded_weight_bytes"] == 0.0


def test_hsdp_shards_within_a_node_and_all_reduces_the_shard_across_nodes():
    hw = hardware_preset("h100")
    r = fsdp_step_comm("qwen2.5-7b", "h100", 16, 32, shard_size=8)
    nvl, net = hw.intra_node_bandwidth_bytes_per_s, hw.inter_node_bandwidth_bytes_per_s
    assert r["all_gather_s"] == pytest.approx(64 * collective_time_s("all_gather", 2 * N, 8, nvl))
    assert r["replicate_all_reduce_s"] == pytest.approx(
        32 * collective_time_s("all_reduce", 2 * N / 8, 2, net))
    assert r["model_state_bytes_per_gpu"] == model_state_bytes_per_gpu(N, 8, 3)   # twice FSDP's
    assert r["total_s"] < fsdp_step_comm("qwen2.5-7b", "h100", 16, 32)["total_s"] / 5
    assert fsdp_step_comm("qwen2.5-7b", "h100", 16, 32, shard_size=16) == \
        fsdp_step_comm("qwen2.5-7b", "h100", 16, 32)


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="shard_size = 3 must divide dp = 16"):
        fsdp_step_comm("qwen2.5-7b", "h100", 16, 32, shard_size=3)
    with pytest.raises(ValueError, match="reshard_after_forward"):
        fsdp_step_comm("qwen2.5-7b", "h100", 16, 32, reshard_after_forward=1)
    with pytest.raises(ValueError, match="microbatches"):
        fsdp_step_comm("qwen2.5-7b", "h100", 16, 0)
