"""Step time under a parallel plan, part by part against hand computations from the formulas
the module docstring cites (Narayanan et al. 2021, Korthikanti et al. 2022, ZeRO §7; book
Chapters 7-9)."""
import pytest

from rlmperf_lite.cost import (HardwareSpec, ParallelPlan, TrainWorkload, collective_time_s,
                               forward_flops, hardware_preset, model_preset,
                               pipeline_bubble_fraction, train_flops, train_step_time)
from rlmperf_lite.cost.parallel_step import stage_train_flops

H100 = hardware_preset("h100")         # 989.5 TFLOP/s bf16, NVLink 450 GB/s, network 50 GB/s
NVLINK, NET = H100.intra_node_bandwidth_bytes_per_s, H100.inter_node_bandwidth_bytes_per_s
QWEN7 = model_preset("qwen2.5-7b")
WORK = TrainWorkload(global_batch=64, seq_len=2048)


def test_data_parallel_step_by_hand():
    """dp = 8 in one node: compute = B x train FLOPs / (8 x peak); one all-reduce of the bf16
    gradients (2N bytes) per step at NVLink bus bandwidth; with overlap = 0 nothing hides."""
    plan = ParallelPlan(dp=8, microbatches=8)
    n = QWEN7.num_params()
    compute = 64 * train_flops(QWEN7, 2048) / (8 * H100.peak("bf16"))
    dp = collective_time_s("all_reduce", 2 * n, 8, NVLINK)
    t = train_step_time(QWEN7, H100, plan, WORK, overlap=0.0)
    assert t.compute_s == pytest.approx(compute)
    assert t.comm_s["dp"] == pytest.approx(dp)
    assert t.comm_bytes_per_gpu["dp"] == pytest.approx(2 * 7 / 8 * 2 * n)
    assert t.total_s == pytest.approx(compute + dp)
    assert t.bubble_s == 0 and t.comm_s["tp"] == t.comm_s["pp"] == 0
    # overlap = 1: a once-per-step all-reduce hides behind the last microbatch's backward
    backward = compute * (1 - 64 * forward_flops(QWEN7, 2048) / (64 * train_flops(QWEN7, 2048)))
    hidden = train_step_time(QWEN7, H100, plan, WORK, overlap=1.0)
    assert hidden.dp_exposed_s == pytest.approx(dp - min(dp, backward / 8))
    # half the efficiency, twice the compute time
    assert train_step_time(QWEN7, H100, plan, WORK, efficiency=0.5).compute_s == \
        pytest.approx(2 * compute)


def test_weight_all_gather_after_the_optimizer_hides_only_behind_the_next_forward():
    """ZeRO-1/2 gather the updated weights after the optimizer step, so that all-gather cannot
    hide behind this step's backward, only behind the next step's first microbatch forward
    (Megatron --overlap-param-gather); the gradients' reduce-scatter hides behind the backward.
    With one microbatch stages 1 and 2 send the same collectives at the same times, so they take
    the same time (a stage-2 advantage here would be an artefact)."""
    work = TrainWorkload(global_batch=512, seq_len=2048)
    plan = dict(dp=512, microbatches=1)
    z1 = train_step_time(QWEN7, H100, ParallelPlan(**plan, zero_stage=1), work)
    z2 = train_step_time(QWEN7, H100, ParallelPlan(**plan, zero_stage=2), work)
    assert z1.total_s == pytest.approx(z2.total_s)
    n = QWEN7.num_params()
    rs = collective_time_s("reduce_scatter", 2 * n, 512, NET)
    ag = collective_time_s("all_gather", 2 * n, 512, NET)
    backward = z1.compute_s * (1 - forward_flops(QWEN7, 2048) / train_flops(QWEN7, 2048))
    forward = z1.compute_s - backward
    assert z1.dp_exposed_s == pytest.approx(rs - min(rs, backward) + ag - min(ag, forward))


def test_dp_across_nodes_uses_the_network():
    plan = ParallelPlan(dp=16, microbatches=4)
    t = train_step_time(QWEN7, H100, plan, WORK, overlap=0.0)
    assert t.comm_s["dp"] == pytest.approx(
        collective_time_s("all_reduce", 2 * QWEN7.num_params(), 16, NET))


def test_zero3_moves_one_and_a_half_times_the_bytes():
    """ZeRO §7.2.2: stage 3 sends 3 Psi (reduce-scatter + 2 all-gathers) against 2 Psi for an
    all-reduce, per pass (m = 1 here)."""
    work = TrainWorkload(global_batch=8, seq_len=2048)
    z0 = train_step_time(QWEN7, H100, ParallelPlan(dp=8, zero_stage=0), work)
    z3 = train_step_time(QWEN7, H100, ParallelPlan(dp=8, zero_stage=3), work)
    assert z3.comm_bytes_per_gpu["dp"] == pytest.approx(1.5 * z0.comm_bytes_per_gpu["dp"])


def test_tensor_parallel_all_reduces():
    """Narayanan et al. 2021 §2.3, Fig. 5: 2 all-reduces forward and 2 backward per layer of the
    T b D bf16 activations; sequence parallelism swaps each for an all-gather and a
    reduce-scatter, the same time (Korthikanti et al. 2022 §4.2.2)."""
    plan = ParallelPlan(dp=2, tp=4, microbatches=32)
    D, L = QWEN7.hidden_size, QWEN7.num_hidden_layers
    one = collective_time_s("all_reduce", 2048 * D * 2, 4, NVLINK)
    t = train_step_time(QWEN7, H100, plan, WORK)
    assert t.comm_s["tp"] == pytest.approx(32 * L * 4 * one)
    sp = train_step_time(QWEN7, H100, ParallelPlan(dp=2, tp=4, sp=True, microbatches=32), WORK)
    assert sp.comm_s["tp"] == pytest.approx(t.comm_s["tp"])
    full = train_step_time(QWEN7, H100, ParallelPlan(dp=2, tp=4, microbatches=32,
                                                     recompute="full"), WORK)
    assert full.comm_s["tp"] == pytest.approx(32 * L * 6 * one)        # forward recomputed


def test_pipeline_bubble_and_p2p():
    """Bubble = (p - 1) / (v m) of the per-microbatch work (Narayanan et al. 2021 §2.2), and
    each microbatch sends its activation forward and its gradient back."""
    plan = ParallelPlan(dp=4, pp=2, microbatches=16, interleave=2)    # 28 layers = 2 x 2 x 7
    t = train_step_time(QWEN7, H100, plan, WORK)
    frac = pipeline_bubble_fraction(2, 16, 2)
    assert t.bubble_s == pytest.approx(frac * t.compute_s)            # no TP/CP/EP traffic
    assert t.comm_bytes_per_gpu["pp"] == pytest.approx(2 * 16 * 2 * 2048 * QWEN7.hidden_size * 2)
    assert t.comm_s["pp"] == pytest.approx(t.comm_bytes_per_gpu["pp"] / NVLINK)
    assert t.bubble_share == pytest.approx(t.bubble_s / t.total_s)


def test_stage_flops_add_up_to_the_step():
    """L layers plus the head's 3 x 2 V D T are train_flops, for every recompute mode; the
    embedding is a lookup (0 matmul FLOPs); Qwen3-235B-A22B's head at T = 4,608 is 2.39 layers
    (the stage_train_flops docstring)."""
    s, L = 2048, QWEN7.num_hidden_layers
    f = stage_train_flops(QWEN7, s)
    head = 3 * 2 * QWEN7.vocab_size * QWEN7.hidden_size * s
    assert f["lm_head"] == pytest.approx(head, rel=1e-12) and f["embedding"] == 0
    assert L * f["layer"] + f["lm_head"] == pytest.approx(train_flops(QWEN7, s), rel=1e-12)
    full = stage_train_flops(QWEN7, s, "full")
    assert L * full["layer"] + full["lm_head"] == pytest.approx(
        train_flops(QWEN7, s, recompute=True), rel=1e-12)
    sel = stage_train_flops(QWEN7, s, "selective")
    assert f["layer"] < sel["layer"] < full["layer"]
    qwen3 = stage_train_flops(model_preset("qwen3-235b-a22b"), 4608)
    assert round(qwen3["lm_head"] / qwen3["layer"], 2) == 2.39
    with pytest.raises(ValueError, match="recompute"):
        stage_train_flops(QWEN7, s, "some")


def test_the_lm_head_runs_on_the_last_stage():
    """pp = 2, one GPU per stage, Qwen2.5-7B (28 layers): the last stage runs 14 layers and the
    head, the first 14 layers, so each microbatch slot lasts (14 + h) layers' time, h = the
    head's FLOPs / one layer's (2.27 here): compute = B (14 layer + head) / peak, by hand.
    Megatron's fewer layers on the last stage then pay: 15/13 takes max(15, 13 + h) layers."""
    f = stage_train_flops(QWEN7, 2048)
    h = f["lm_head"] / f["layer"]
    assert round(h, 2) == 2.27
    peak = H100.peak("bf16")
    even = train_step_time(QWEN7, H100, ParallelPlan(pp=2, microbatches=64), WORK)
    assert even.compute_s == pytest.approx(64 * (14 * f["layer"] + f["lm_head"]) / peak,
                                           rel=1e-12)
    assert even.bubble_s == pytest.approx(pipeline_bubble_fraction(2, 64) * even.compute_s)
    # the last stage is slower than the first by h layers
    first_only = 64 * 14 * f["layer"] / peak
    assert even.compute_s / first_only == pytest.approx((14 + h) / 14, rel=1e-12)
    tilted = train_step_time(QWEN7, H100, ParallelPlan(pp=2, microbatches=64,
                                                       first_stage_layers=15,
                                                       last_stage_layers=13), WORK)
    assert tilted.compute_s / even.compute_s == pytest.approx(max(15, 13 + h) / (14 + h),
                                                              rel=1e-12)
    assert tilted.total_s < even.total_s
    # the step's FLOPs spread over two GPUs would be (14 + h / 2) layers: the old, even model
    spread = 64 * train_flops(QWEN7, 2048) / (2 * peak)
    assert spread == pytest.approx(64 * (14 + h / 2) * f["layer"] / peak, rel=1e-12)
    assert even.compute_s > spread


def test_expert_parallel_all_to_alls():
    """Per MoE layer and microbatch 2 all-to-alls forward and 2 backward of the GPU's tokens x
    top-k x D (Qwen3-30B-A3B: 48 MoE layers, top-8, D = 2048)."""
    moe = model_preset("qwen3-30b-a3b")
    work = TrainWorkload(global_batch=16, seq_len=2048)
    t = train_step_time(moe, H100, ParallelPlan(dp=8, ep=8, microbatches=2), work)
    one = collective_time_s("all_to_all", 2048 * 8 * moe.hidden_size * 2, 8, NVLINK)
    assert t.comm_s["ep"] == pytest.approx(2 * moe.num_moe_layers * 4 * one)


def test_bad_inputs():
    with pytest.raises(ValueError, match="efficiency"):
        train_step_time(QWEN7, H100, ParallelPlan(dp=8, microbatches=8), WORK, efficiency=0)
    with pytest.raises(ValueError, match="overlap"):
        train_step_time(QWEN7, H100, ParallelPlan(dp=8, microbatches=8), WORK, overlap=2)
    with pytest.raises(ValueError, match="tp=16 exceeds nvlink_domain_gpus=8"):
        train_step_time(model_preset("qwen2.5-72b"), H100,
                        ParallelPlan(tp=16, microbatches=64), WORK)
    no_links = HardwareSpec(name="box", peak_flops={"bf16": 1e15}, hbm_bytes=8e10,
                            hbm_bandwidth_bytes_per_s=3e12, gpus_per_node=8)
    with pytest.raises(ValueError, match="link bandwidths"):
        train_step_time(QWEN7, no_links, ParallelPlan(dp=8, microbatches=8), WORK)
    one = train_step_time(QWEN7, no_links, ParallelPlan(microbatches=64), WORK)
    assert one.total_s == one.compute_s                               # one GPU: no traffic
