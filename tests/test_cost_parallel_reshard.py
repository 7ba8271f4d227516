"""Resharding weights from the training layout to the rollout layout (HybridFlow, arXiv
2409.19256, §5; book Chapter 9)."""
import pytest

from rlmperf_lite.cost import (ParallelPlan, hardware_preset, model_preset,
                               reshard_bytes_per_gpu, reshard_time_s)

H100 = hardware_preset("h100")
QWEN7 = model_preset("qwen2.5-7b")
W = 2.0 * QWEN7.num_params()                        # bf16 weights


def test_equal_layouts_move_nothing():
    """Same TP and PP, weights not ZeRO-3-sharded: every GPU already holds its shard."""
    for plan, tp, pp in [(ParallelPlan(dp=2, tp=4, microbatches=4), 4, 1),
                         (ParallelPlan(dp=2, tp=2, pp=2, zero_stage=1, microbatches=4), 2, 2)]:
        assert reshard_bytes_per_gpu(QWEN7, plan, tp, pp) == 0
        assert reshard_time_s(QWEN7, H100, plan, tp, pp) == 0


def test_fsdp_to_tensor_parallel():
    """Train with ZeRO-3 over 8 GPUs (each holds W / 8, spread over all weights), generate with
    TP = 4: a GPU needs W / 4 and holds W / 32 of it, an all-gather over 8 GPUs in a node."""
    plan = ParallelPlan(dp=8, zero_stage=3, microbatches=1)
    got = reshard_bytes_per_gpu(QWEN7, plan, 4)
    assert got == pytest.approx(W / 4 - W / 32)
    assert reshard_time_s(QWEN7, H100, plan, 4) == pytest.approx(
        got / H100.intra_node_bandwidth_bytes_per_s)
    # replicated inference (TP = 1) gathers the other 7/8 of the weights
    assert reshard_bytes_per_gpu(QWEN7, plan, 1) == pytest.approx(W * 7 / 8)


def test_coarser_and_finer_tp():
    """3D-HybridEngine grouping (HybridFlow §5): TP 2 -> 4, the training slice (W / 2) contains
    the inference slice (W / 4), nothing to receive; TP 4 -> 2, a GPU keeps its W / 4 and
    receives the other W / 4 of its new slice. Sizes that do not nest (4 and 7) are refused."""
    assert reshard_bytes_per_gpu(QWEN7, ParallelPlan(dp=4, tp=2, microbatches=1), 4) == 0
    assert reshard_bytes_per_gpu(QWEN7, ParallelPlan(dp=2, tp=4, microbatches=1), 2) == \
        pytest.approx(W / 2 - W / 4)
    with pytest.raises(ValueError, match="must divide one another"):
        reshard_bytes_per_gpu(QWEN7, ParallelPlan(dp=7, tp=4, microbatches=1), 7)


def test_disaggregated_receives_the_whole_shard_over_the_network():
    plan = ParallelPlan(dp=8, microbatches=1)
    got = reshard_bytes_per_gpu(QWEN7, plan, 4, mode="disaggregated")
    assert got == pytest.approx(W / 4)
    assert reshard_time_s(QWEN7, H100, plan, 4, mode="disaggregated") == pytest.approx(
        got / H100.inter_node_bandwidth_bytes_per_s)


def test_bad_inputs():
    plan = ParallelPlan(dp=8, microbatches=1)
    with pytest.raises(ValueError, match="mode"):
        reshard_bytes_per_gpu(QWEN7, plan, 4, mode="both")
    with pytest.raises(ValueError, match="infer_tp=3 must divide"):
        reshard_bytes_per_gpu(QWEN7, plan, 3)
    with pytest.raises(ValueError, match="must divide the training GPUs"):
        reshard_bytes_per_gpu(QWEN7, ParallelPlan(dp=2, microbatches=1), 4)
    with pytest.raises(ValueError, match="needs a MoE model"):
        reshard_bytes_per_gpu(QWEN7, ParallelPlan(dp=8, ep=2, microbatches=1), 4)


def test_moe_experts_split_over_ep():
    """Qwen3-30B-A3B trained with ep = 8 (each GPU holds 1/8 of the routed experts, all other
    weights whole): generating with TP = 4 needs 1/4 of the experts, so a GPU receives the
    other 1/8 of them and nothing else."""
    moe = model_preset("qwen3-30b-a3b")
    experts = 2.0 * moe.param_breakdown()["routed_experts"]
    plan = ParallelPlan(dp=8, ep=8, microbatches=1)
    assert reshard_bytes_per_gpu(moe, plan, 4) == pytest.approx(experts / 4 - experts / 8)
    assert reshard_bytes_per_gpu(moe, plan, 8) == 0


def test_merging_pipeline_stages_crosses_nodes():
    """Megatron-Core places pipeline stages tp cp dp ranks apart (tp-cp-ep-dp-pp): with tp 4,
    dp 8, pp 2 the two stages of a layer are 32 ranks apart, so gathering them for a tp-4
    rollout engine runs over the network, while tp 2 -> tp 4 stays in a node."""
    from rlmperf_lite.cost import ParallelPlan, hardware_preset, model_preset, reshard_time_s
    from rlmperf_lite.cost import reshard_bytes_per_gpu
    m, h100 = model_preset("qwen2.5-7b"), hardware_preset("h100")
    pp2 = ParallelPlan(tp=4, pp=2, dp=8, microbatches=2)
    assert reshard_time_s(m, h100, pp2, 4) == pytest.approx(
        reshard_bytes_per_gpu(m, pp2, 4) / h100.inter_node_bandwidth_bytes_per_s)
    tp2 = ParallelPlan(tp=2, dp=8)
    assert reshard_time_s(m, h100, tp2, 4) == pytest.approx(
        reshard_bytes_per_gpu(m, tp2, 4) / h100.intra_node_bandwidth_bytes_per_s)


def test_expert_shards_are_gathered_over_the_ep_ranks():
    """Routed experts are split over tp x ep in training: with tp 4, ep 8 the gather spans 32
    ranks (4 nodes of 8), so it runs over the network (a reviewer's case)."""
    from rlmperf_lite.cost import ParallelPlan, hardware_preset, model_preset, reshard_time_s
    from rlmperf_lite.cost import reshard_bytes_per_gpu
    moe, h100 = model_preset("qwen3-235b-a22b"), hardware_preset("h100")
    plan = ParallelPlan(dp=8, tp=4, ep=8, sp=True, zero_stage=1, microbatches=64)
    assert reshard_time_s(moe, h100, plan, 8) == pytest.approx(
        reshard_bytes_per_gpu(moe, plan, 8) / h100.inter_node_bandwidth_bytes_per_s)
