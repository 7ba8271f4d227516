"""Work and depth of a data-parallel update in seconds (book section sec-dp-workdepth): the
collectives' bytes against nccl-tests' factors and the ZeRO paper's volumes, the step against
train_step_time, the closed-form hiding thresholds against a brute-force search over the tokens
of a micro-batch with train_step_time itself."""
import math
from dataclasses import replace

import pytest

from rlmperf_lite.cost import (ModelConfig, ParallelPlan, TrainWorkload, forward_flops,
                               hardware_preset, model_state_bytes_per_gpu, train_flops,
                               train_step_time)
from rlmperf_lite.cost.dp_workdepth import (ADAM_STEP_BYTES_PER_PARAM, dp_update_workdepth,
                                            overlap_threshold_search, overlap_threshold_tokens)

H100 = hardware_preset("h100")
QWEN = ModelConfig.preset("qwen2.5-7b")
N = QWEN.num_params()


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_collectives_move_the_nccl_tests_bytes_in_their_ring_steps(dp):
    """nccl-tests PERFORMANCE.md: bytes per rank = S x 2(n-1)/n for an all-reduce, S x (n-1)/n
    for an all-gather or reduce-scatter; a ring takes 2(n-1) and n-1 steps (Thakur et al.)."""
    alpha = 5e-6
    for stage in range(4):
        wd = dp_update_workdepth(QWEN, dp=dp, zero_stage=stage, latency_s=alpha)
        bw = wd.bus_bandwidth_bytes_per_s
        assert bw == (H100.intra_node_bandwidth_bytes_per_s if dp <= 8
                      else H100.inter_node_bandwidth_bytes_per_s)
        for c in wd.collectives:
            ar = c.op == "all_reduce"
            assert c.bytes_per_rank == pytest.approx(c.size_bytes * (2 if ar else 1)
                                                     * (dp - 1) / dp, rel=1e-12)
            assert c.ring_steps == (2 if ar else 1) * (dp - 1)
            assert c.time_s == pytest.approx(c.ring_steps * alpha + c.bytes_per_rank / bw,
                                             rel=1e-12)


def test_bytes_per_rank_are_the_zero_papers_volumes():
    """ZeRO paper §7.2: DP and stages 1-2 move 2 Psi per rank per step, stage 3 3 Psi (1.5x),
    Psi the gradient's (= the weights') bf16 bytes, times (n-1)/n for a finite ring;
    with m micro-batches stage 2's reduce-scatter runs m times and stage 3's traffic m times."""
    n, psi = 64, 2 * N
    want = {0: 2, 1: 2, 2: 2, 3: 3}
    for stage, k in want.items():
        wd = dp_update_workdepth(QWEN, dp=n, zero_stage=stage)
        assert wd.comm_bytes_per_rank == pytest.approx(k * (n - 1) / n * psi, rel=1e-12)
    m = 4
    s2 = dp_update_workdepth(QWEN, dp=n, zero_stage=2, microbatches=m)
    s3 = dp_update_workdepth(QWEN, dp=n, zero_stage=3, microbatches=m)
    assert s2.comm_bytes_per_rank == pytest.approx((m + 1) * (n - 1) / n * psi, rel=1e-12)
    assert s3.comm_bytes_per_rank == pytest.approx(3 * m * (n - 1) / n * psi, rel=1e-12)
    layers = {c.calls for c in s3.collectives}                  # FSDP: per-layer calls
    assert layers == {QWEN.num_hidden_layers}


def test_memory_is_the_zero_papers_model_states():
    """ZeRO Fig. 1 (7.5B on 64 GPUs: 120, 31.4, 16.6, 1.9 GB) through the megatron-7.5b shape,
    whose states scale to the figure's 7.5e9 parameters."""
    m = ModelConfig.preset("megatron-7.5b")
    fig1 = [120.0, 31.4, 16.6, 1.9]
    for stage, gb in enumerate(fig1):
        mem = dp_update_workdepth(m, dp=64, zero_stage=stage, seq_len=2048).memory
        states = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
        assert states == pytest.approx(model_state_bytes_per_gpu(m.num_params(), 64, stage))
        assert round(states * 7.5e9 / m.num_params() / 1e9, 1) == gb


@pytest.mark.parametrize("model", ["qwen2.5-7b", "llama-3.1-70b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("link,dp", [("nvlink", 2), ("nvlink", 8), ("network", 8),
                                     ("auto", 16), ("auto", 64)])
def test_step_is_train_step_time_plus_the_optimizer_at_zero_latency(model, link, dp):
    """alpha = 0: the collectives' seconds, bytes and exposed part are train_step_time's; the
    step = its total + the optimizer step; Brent's lower bound is the step, the upper one a
    micro-batch more."""
    for stage in range(4):
        for b, m, rc in ((1, 1, "none"), (2, 3, "full"), (4, 2, "selective")):
            wd = dp_update_workdepth(model, dp=dp, zero_stage=stage, seq_len=1024, link=link,
                                     micro_batch_size=b, microbatches=m, recompute=rc)
            ts = wd.train_step
            assert wd.compute_s == pytest.approx(ts.compute_s, rel=1e-12)
            assert wd.comm_s == pytest.approx(ts.comm_s["dp"], rel=1e-12)
            assert wd.comm_bytes_per_rank == pytest.approx(ts.comm_bytes_per_gpu["dp"],
                                                           rel=1e-12)
            assert wd.exposed_s == pytest.approx(ts.dp_exposed_s, rel=1e-9, abs=1e-12)
            assert wd.step_s == pytest.approx(ts.total_s + wd.optimizer_s, rel=1e-12)
            lower = sum(p.brent_lower_s for p in wd.phases)
            upper = sum(p.brent_upper_s for p in wd.phases)
            assert lower == pytest.approx(wd.step_s, rel=1e-12)
            assert upper == pytest.approx(wd.step_s + wd.microbatch_s + wd.optimizer_s,
                                          rel=1e-12)


def test_phases_are_the_gpu_seconds_of_the_tasks():
    """W = dp m t_mb GPU-s for the compute, D = one micro-batch; the optimizer step reads and
    writes 28 bytes per owned parameter at HBM bandwidth (N, N / dp from stage 1)."""
    wd = dp_update_workdepth(QWEN, dp=8, zero_stage=1, seq_len=1024, micro_batch_size=2,
                             microbatches=3)
    compute, *_, opt = wd.phases
    assert compute.work_gpu_s == pytest.approx(8 * 3 * wd.microbatch_s, rel=1e-12)
    assert compute.depth_s == wd.microbatch_s and compute.processors == 8
    flops = 2 * train_flops(QWEN, 1024) / H100.peak("bf16")
    assert wd.microbatch_s == pytest.approx(flops, rel=1e-12)
    assert opt.depth_s == pytest.approx(ADAM_STEP_BYTES_PER_PARAM * N / 8
                                        / H100.hbm_bandwidth_bytes_per_s, rel=1e-12)
    assert all(p.work_gpu_s == 0 for p in wd.phases[1:-1])     # the links' time, not the GPUs'


def _brute_force_tokens(model, dp, stage, seq_len, hw, recompute="none"):
    """The smallest micro-batch b T whose train_step_time shows no exposed DP time (m = 1)."""
    for b in range(1, 5000):
        plan = ParallelPlan(dp=dp, zero_stage=stage, microbatches=1, recompute=recompute)
        wl = TrainWorkload(global_batch=dp * b, seq_len=seq_len, micro_batch_size=b)
        if train_step_time(model, hw, plan, wl).dp_exposed_s == 0:
            return b * seq_len
    raise AssertionError("never hidden")


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("link,dp", [("nvlink", 8), ("network", 8), ("network", 64)])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_closed_form_threshold_is_the_brute_force_search(stage, link, dp, recompute):
    """Over micro-batches of b = 1, 2, ... sequences of 128 tokens, communication first hides
    at b = ceil(t* / 128), with train_step_time's own overlap rule."""
    T = 128
    # the network within a node's 8 GPUs: one GPU per node; 64 GPUs cross the network anyway
    hw = replace(H100, gpus_per_node=1) if (link, dp) == ("network", 8) else H100
    th = overlap_threshold_tokens(QWEN, dp=dp, zero_stage=stage, seq_len=T, link=link,
                                  recompute=recompute)
    found = _brute_force_tokens(QWEN, dp, stage, T, hw, recompute)
    assert found == th.sequences * T
    assert (found - T) < th.tokens <= found
    assert overlap_threshold_search(QWEN, dp=dp, zero_stage=stage, seq_len=T, link=link,
                                    recompute=recompute) == found


def test_thresholds_are_peak_over_bandwidth_times_params_over_flops():
    """Stage 0: t* = (n-1)/n x peak/beta x 2 gb N / phi_bwd, phi_bwd = (train - forward)
    FLOPs per token; stage 3: (gb + 2 wb) N / phi_train; about (n-1)/n x peak / beta when
    phi_bwd ~ 4 N, phi_train ~ 6 N (the small factor is N over the matmul weights)."""
    T, peak = 4608, H100.peak("bf16")
    fwd, train = forward_flops(QWEN, [T]) / T, train_flops(QWEN, [T]) / T
    for dp, beta in ((8, H100.intra_node_bandwidth_bytes_per_s),
                     (64, H100.inter_node_bandwidth_bytes_per_s)):
        ring = (dp - 1) / dp
        t0 = overlap_threshold_tokens(QWEN, dp=dp, zero_stage=0, seq_len=T)
        t3 = overlap_threshold_tokens(QWEN, dp=dp, zero_stage=3, seq_len=T)
        assert t0.tokens == pytest.approx(ring * peak / beta * 4 * N / (train - fwd), rel=1e-12)
        assert t3.tokens == pytest.approx(ring * peak / beta * 6 * N / train, rel=1e-12)
        assert t0.flops_per_byte == pytest.approx(peak / beta) and t0.ring_factor == ring
        assert 1 < t0.kappa["last backward"] < 1.05                 # N / N' diluted by attention
    full = overlap_threshold_tokens(QWEN, dp=64, zero_stage=0, seq_len=T, recompute="full")
    rc = train_flops(QWEN, [T], recompute=True) / T
    assert full.tokens == pytest.approx(63 / 64 * peak / 50e9 * 4 * N / (rc - fwd), rel=1e-12)
    layers = forward_flops(QWEN, [T], lm_head="none") / T          # recomputed: no LM head
    assert full.tokens / overlap_threshold_tokens(QWEN, dp=64, seq_len=T).tokens == \
        pytest.approx(2 * fwd / (2 * fwd + layers), rel=1e-12)     # about 2/3


def test_latency_raises_the_threshold_by_its_steps():
    """alpha per ring step adds s alpha peak / phi tokens: ZeRO-3's 3 L per-layer calls of
    n - 1 steps; the search with alpha finds the same micro-batch."""
    T, alpha, dp = 256, 5e-6, 64
    th = overlap_threshold_tokens(QWEN, dp=dp, zero_stage=3, seq_len=T, latency_s=alpha)
    phi = train_flops(QWEN, [T]) / T
    steps = 3 * QWEN.num_hidden_layers * (dp - 1)
    assert th.latency_tokens["each micro-batch"] == pytest.approx(
        steps * alpha * H100.peak("bf16") / phi, rel=1e-12)
    assert overlap_threshold_search(QWEN, dp=dp, zero_stage=3, seq_len=T,
                                    latency_s=alpha) == th.sequences * T


def test_worked_estimate_for_qwen_on_h100():
    """The chapter's box: Qwen2.5-7B, sequences of 4,608 tokens, DP within a node about
    1,950 tokens (one sequence hides it), across 64 GPUs about 19,700 (five sequences)."""
    node = overlap_threshold_tokens(QWEN, dp=8, zero_stage=0, seq_len=4608)
    cluster = overlap_threshold_tokens(QWEN, dp=64, zero_stage=0, seq_len=4608)
    assert round(node.tokens, -1) == 1950 and node.sequences == 1
    assert round(cluster.tokens, -2) == 19700 and cluster.sequences == 5
    assert overlap_threshold_tokens(QWEN, dp=64, zero_stage=3, seq_len=4608).tokens == \
        pytest.approx(cluster.tokens, rel=1e-12)           # 6N bytes over 6N FLOPs per token


def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="link='nvlink' needs dp"):
        dp_update_workdepth(QWEN, dp=16, link="nvlink")
    with pytest.raises(ValueError, match="link"):
        dp_update_workdepth(QWEN, dp=8, link="infiniband")
    with pytest.raises(ValueError, match="zero_stage"):
        dp_update_workdepth(QWEN, dp=8, zero_stage=4)
    with pytest.raises(ValueError, match="latency_s"):
        dp_update_workdepth(QWEN, dp=8, latency_s=-1)
    with pytest.raises(ValueError, match="micro_batch_size"):
        dp_update_workdepth(QWEN, dp=8, micro_batch_size=0)
    with pytest.raises(ValueError, match="max_micro_batch_size"):
        overlap_threshold_search(QWEN, dp=64, seq_len=128, max_micro_batch_size=2)
    one = dp_update_workdepth(QWEN, dp=1)
    assert one.collectives == () and one.exposed_s == 0 and math.isinf(
        one.bus_bandwidth_bytes_per_s)
    assert overlap_threshold_tokens(QWEN, dp=1).tokens == 0
