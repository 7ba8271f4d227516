"""Work and depth in seconds under tensor, sequence and context parallelism (book section
sec-tp-workdepth): the communication counts against Megatron's and Korthikanti's, the
collectives' factors against nccl-tests', TP's comm-to-compute ratio and its threshold against
a numeric search with the library's own step time, decode's chain against a hand count."""
import math
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, ParallelPlan, TrainWorkload, forward_flops,
                               hardware_preset, matmul_weights_per_token, model_preset,
                               train_step_time)
from rlmperf_lite.cost.collective import NVLINK_HOP_LATENCY_S
from rlmperf_lite.cost.tp_workdepth import (ALL_REDUCES_PER_LAYER, RING_PASSES_PER_LAYER,
                                            cp_overlap_min_chunk_tokens,
                                            decode_tp_floor, tp_comm_compute_ratio,
                                            tp_comm_constant, tp_comm_threshold,
                                            tp_decode_workdepth, tp_train_workdepth)

H100 = hardware_preset("h100")
LLAMA70 = model_preset("llama-3.1-70b")


def _plan(tp, sp, cp=1, gpus=64, batch=512, b=1, recompute="selective"):
    dp = gpus // (tp * cp)
    return ParallelPlan(dp=dp, tp=tp, cp=cp, sp=sp, zero_stage=1, recompute=recompute,
                        microbatches=batch // (dp * b))


@pytest.mark.parametrize("recompute,n_ar", [("none", 4), ("selective", 4), ("full", 6)])
def test_megatron_counts_all_reduces_per_layer(recompute, n_ar):
    """Shoeybi et al. 2019 §3 (Fig. 4): g after each row-parallel product forward, f before each
    column-parallel one backward, 2 + 2 per layer; full recompute repeats the forward's 2
    (Korthikanti et al. 2022 §5). Each all-reduce of S bytes sends 2 (tp - 1)/tp S per rank
    (nccl-tests PERFORMANCE.md), S = T b h x 2 bytes."""
    assert ALL_REDUCES_PER_LAYER[recompute] == n_ar
    T, tp = 4096, 8
    wl = TrainWorkload(512, T)
    plan = _plan(tp, False, recompute=recompute)
    step = train_step_time(LLAMA70, H100, plan, wl)
    S = T * 8192 * 2
    per_layer = n_ar * 2 * (tp - 1) / tp * S
    assert step.comm_bytes_per_gpu["tp"] == pytest.approx(
        plan.microbatches * 80 * per_layer, rel=1e-12)
    r = tp_train_workdepth(LLAMA70, H100, plan, wl)
    assert r.layer_comm_s == pytest.approx(per_layer / 450e9, rel=1e-12)   # NVLink 450 GB/s
    assert r.phase("tp_collectives").work_gpu_s / 64 == pytest.approx(step.comm_s["tp"],
                                                                       rel=1e-12)


def test_sequence_parallelism_moves_the_same_bytes_as_reduce_scatter_plus_all_gather():
    """Korthikanti et al. 2022 §4.2.2: each all-reduce becomes a reduce-scatter and an
    all-gather, (tp - 1)/tp S each (nccl-tests' factors), so the chain is as long."""
    wl = TrainWorkload(512, 4096)
    plain = tp_train_workdepth(LLAMA70, H100, _plan(8, False), wl)
    sp = tp_train_workdepth(LLAMA70, H100, _plan(8, True), wl)
    assert sp.layer_comm_s == pytest.approx(plain.layer_comm_s, rel=1e-12)
    assert sp.phase("tp_collectives").depth_s == pytest.approx(
        plain.phase("tp_collectives").depth_s, rel=1e-12)
    assert sp.memory_bytes_per_gpu < plain.memory_bytes_per_gpu     # what SP buys: memory
    alpha = 5e-6                                                     # 2 (tp - 1) ring steps
    lat = tp_train_workdepth(LLAMA70, H100, _plan(8, True), wl, latency_s=alpha)
    assert lat.layer_comm_s - sp.layer_comm_s == pytest.approx(4 * 2 * 7 * alpha, rel=1e-9)


def test_depth_is_the_layers_compute_over_tp_plus_their_collectives():
    """D = L (compute / tp + n_ar x (alpha steps + bytes / bw)) for one micro-batch."""
    wl = TrainWorkload(512, 4608)
    one = tp_train_workdepth(LLAMA70, H100, _plan(1, False), wl)
    for tp in (2, 4, 8):
        r = tp_train_workdepth(LLAMA70, H100, _plan(tp, True), wl, latency_s=NVLINK_HOP_LATENCY_S)
        assert r.phase("layers").depth_s == pytest.approx(one.phase("layers").depth_s / tp,
                                                          rel=1e-12)
        S = 4608 * 8192 * 2
        by_hand = 80 * 4 * (2 * (tp - 1) * NVLINK_HOP_LATENCY_S + 2 * (tp - 1) / tp * S / 450e9)
        assert r.phase("tp_collectives").depth_s == pytest.approx(by_hand, rel=1e-12)


def test_brent_bounds_hold_the_step_time_and_training_is_work_bound():
    """W/p of every phase is the step time's part, so max(W/p, D) sums to the step; the
    micro-batches (64 per rank at tp = 8) make W/p far longer than one chain."""
    wl = TrainWorkload(512, 4608)
    for tp, cp in ((1, 1), (2, 1), (8, 1), (8, 2), (4, 4)):
        r = tp_train_workdepth(LLAMA70, H100, _plan(tp, tp > 1, cp), replace(wl, seq_len=8192))
        assert r.brent_lower_s == pytest.approx(r.measured_s, rel=1e-12)
        assert r.measured_s <= r.brent_upper_s
        assert all(p.work_per_processor_s >= p.depth_s for p in r.phases if p.work_gpu_s)
    once = tp_train_workdepth(LLAMA70, H100, _plan(8, True, batch=8), TrainWorkload(8, 4608))
    layers = once.phase("layers")                       # one micro-batch per group: W/p = D
    assert layers.work_per_processor_s == pytest.approx(layers.depth_s, rel=1e-12)


def test_kappa_is_two_ninths_for_a_layer_of_twelve_h_squared():
    """Narayanan et al. 2021 §3.3: a GPT layer does 24 T h^2 FLOPs forward (12 h^2 weights:
    qkv 3, out 1, MLP 8), 72 T h^2 with backward; its 4 all-reduces send 2 x 2 T h bytes each:
    16 T h (tp - 1)/tp over 72 T h^2 / tp gives kappa = 16/72 = 2/9. A short sequence and a
    2-token vocabulary leave attention and the LM head out."""
    gpt = ModelConfig(vocab_size=2, hidden_size=4096, num_hidden_layers=4, num_attention_heads=32,
                      intermediate_size=16384, mlp="gelu", norm="layernorm", position="learned")
    assert matmul_weights_per_token(gpt, lm_head=False) == 4 * 12 * 4096**2
    assert tp_comm_constant(gpt, 2, recompute="none") == pytest.approx(2 / 9, rel=1e-4)
    assert tp_comm_constant(gpt, 2, recompute="full") == pytest.approx(6 * 2 * 2 / (8 * 12),
                                                                       rel=1e-4)


@pytest.mark.parametrize("model,tp,cp,b,recompute,sp", [
    ("llama-3.1-70b", 8, 1, 1, "selective", True), ("llama-3.1-70b", 4, 2, 2, "none", False),
    ("qwen2.5-7b", 2, 4, 1, "full", True), ("qwen2.5-32b", 8, 2, 4, "selective", False)])
def test_closed_form_ratio_is_the_step_times_tp_over_compute(model, tp, cp, b, recompute, sp):
    """kappa (tp - 1) / h x peak / bw = train_step_time's TP seconds / compute seconds, for
    any cp, micro-batch and dp (they cancel)."""
    wl = TrainWorkload(512, 8192, micro_batch_size=b)
    step = train_step_time(model_preset(model), H100, _plan(tp, sp, cp, b=b, recompute=recompute),
                           wl)
    ratio = tp_comm_compute_ratio(model, H100, tp, 8192, recompute=recompute)
    assert ratio == pytest.approx(step.comm_s["tp"] / step.compute_s, rel=1e-12)


def test_threshold_equals_a_bisection_on_the_link_bandwidth():
    """For each tp, the NVLink bandwidth at which train_step_time's TP time equals its compute,
    found by bisection, is kappa (tp - 1) / h x peak: the closed form's threshold."""
    wl = TrainWorkload(64, 4608)
    kappa = tp_comm_constant(LLAMA70, 4608)
    for tp in (2, 4, 8):
        def excess(bw):
            step = train_step_time(LLAMA70, replace(H100, intra_node_bandwidth_bytes_per_s=bw),
                                   _plan(tp, True, gpus=64, batch=64), wl)
            return step.comm_s["tp"] - step.compute_s
        lo, hi = 1e9, 1e13
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
        assert lo == pytest.approx(kappa * (tp - 1) / 8192 * 989.5e12, rel=1e-9)
        # and the tp threshold at that bandwidth is this tp
        hw = replace(H100, intra_node_bandwidth_bytes_per_s=lo)
        assert tp_comm_threshold(LLAMA70, hw, 4608) == pytest.approx(tp, rel=1e-9)


def test_threshold_brackets_the_first_tp_whose_traffic_dominates():
    """GPT-3 175B (96 heads) on a hypothetical 96-GPU 'node' linked at the network's 50 GB/s
    (TP across nodes): a search over every tp that divides 96 with train_step_time finds the
    first tp whose TP time exceeds compute right after the closed form's tp*, about 3.9."""
    gpt3 = model_preset("gpt3-175b")
    hw = replace(H100, gpus_per_node=96, intra_node_bandwidth_bytes_per_s=50e9)
    t_star = tp_comm_threshold(gpt3, hw, 4608)
    over = {}
    for tp in (1, 2, 3, 4, 6, 8):
        wl = TrainWorkload(1, 4608)
        st = train_step_time(gpt3, hw, ParallelPlan(tp=tp, sp=tp > 1, recompute="selective"), wl)
        over[tp] = st.comm_s["tp"] > st.compute_s
    first = min(tp for tp, o in over.items() if o)
    last_below = max(tp for tp, o in over.items() if not o)
    assert (last_below, first) == (3, 4) and last_below < t_star < first
    assert t_star == pytest.approx(3.9, abs=0.1)


def test_seventy_b_on_nvlink_stays_below_its_threshold_inside_a_node():
    """Llama-3.1-70B, 4,608 tokens: TP's traffic is 37% of compute at tp = 8 on NVLink and
    would reach compute near tp = 20, beyond a node; on the network, near tp = 3."""
    assert tp_comm_compute_ratio(LLAMA70, H100, 8, 4608) == pytest.approx(0.366, abs=0.001)
    assert tp_comm_threshold(LLAMA70, H100, 4608) == pytest.approx(20.1, abs=0.1)
    assert tp_comm_threshold(LLAMA70, H100, 4608, bandwidth_bytes_per_s=50e9) == \
        pytest.approx(3.13, abs=0.01)


def test_cp_ring_is_the_step_times_and_hides_from_the_closed_form_chunk():
    """The ring's chain times the micro-batches is train_step_time's CP time (3 K/V all-gathers
    a layer, 1 forward, 2 backward). Per ring step a rank sends one chunk's K/V and computes a
    1/cp^2 share of the causal scores (the library's attention FLOPs): the transfer hides once
    (T + 1)/cp passes cp_overlap_min_chunk_tokens."""
    assert RING_PASSES_PER_LAYER == {"none": 3, "selective": 3, "full": 4}
    cp, tp = 4, 8
    for T in (4096, 32768):
        wl = TrainWorkload(512, T)
        r = tp_train_workdepth(LLAMA70, H100, _plan(tp, True, cp), wl)
        step = r.inputs["step"]
        assert r.phase("cp_ring").work_gpu_s / 64 == pytest.approx(step.comm_s["cp"], rel=1e-12)
        bw = r.inputs["cp_bandwidth_bytes_per_s"]
        assert bw == 50e9                                     # tp x cp = 32 GPUs cross nodes
        # one chunk's K/V, one layer: 256 micro-batches x 80 layers x 3 all-gathers of cp - 1
        transfer = step.comm_s["cp"] / (256 * 80 * 3 * (cp - 1))
        attn = (forward_flops(LLAMA70, T, lm_head="none")
                - 2 * matmul_weights_per_token(LLAMA70, lm_head=False) * T) / 80
        compute = attn / (tp * cp * cp * 989.5e12)           # one rank's share of one step
        chunk = r.inputs["cp_min_chunk_tokens"]
        assert chunk == pytest.approx(4947.5, rel=1e-9)      # 2 x 4,096 B / 32,768 x 19,790
        assert (compute >= transfer) == ((T + 1) / cp >= chunk)
        assert compute / transfer == pytest.approx((T + 1) / cp / chunk, rel=1e-9)


def test_decode_step_by_hand_from_the_model_card():
    """Llama-3.1-70B: 70,553,706,496 parameters, 327,680 bytes of KV per token (80 layers x 8 KV
    heads x 128 x 2 x 2 bytes), h = 8,192; H100: 3.35 TB/s HBM, 450 GB/s NVLink. A step at
    batch 1 reads (2 N + kv c) / tp bytes per GPU, then runs 160 all-reduces of h x 2 bytes:
    2 (tp - 1) alpha + 2 (tp - 1)/tp x 16,384 / 450e9 each."""
    N, kv, alpha, R = 70_553_706_496, 327_680, 5e-6, 64
    assert LLAMA70.num_params() == N
    ctx = 512 + np.arange(1, R)
    for tp in (1, 2, 4, 8):
        r = tp_decode_workdepth(LLAMA70, H100, tp, response_len=R, latency_s=alpha)
        steps = float(((2 * N + kv * ctx) / (tp * 3.35e12)).sum())
        ar = 160 * (2 * (tp - 1) * alpha + 2 * (tp - 1) / tp * 8192 * 2 / 450e9)
        assert r.phase("decode").depth_s == pytest.approx(steps, rel=1e-12)
        assert r.depth_s == pytest.approx(steps + (R - 1) * ar, rel=1e-12)


def test_decode_chain_falls_with_tp_until_the_all_reduce_latency_stops_it():
    """With no latency the chain halves with each doubling of tp (the bytes term is tiny);
    at 5 us a ring step it stops falling between tp = 4 and 8, as decode_tp_floor says
    (sqrt(42 ms / (4 x 80 x 5 us)) ~ 5.1)."""
    d0 = {tp: tp_decode_workdepth(LLAMA70, H100, tp, response_len=256, latency_s=0).depth_s
          for tp in (1, 2, 4, 8)}
    assert all(d0[tp] == pytest.approx(d0[1] / tp, rel=2e-3) for tp in d0)
    d = {tp: tp_decode_workdepth(LLAMA70, H100, tp, response_len=256, latency_s=5e-6).depth_s
         for tp in (1, 2, 4, 8)}
    assert d[1] > d[2] > d[4] < d[8]
    floor = decode_tp_floor(LLAMA70, H100, response_len=256, latency_s=5e-6)
    assert 4 < floor < 8 and floor == pytest.approx(5.1, abs=0.1)
    nccl = decode_tp_floor(LLAMA70, H100, response_len=256)        # NCCL's 3.4 us over NVLink
    assert nccl == pytest.approx(floor * (5e-6 / NVLINK_HOP_LATENCY_S) ** 0.5, rel=1e-12)
    assert decode_tp_floor(LLAMA70, H100, response_len=256, latency_s=0) == math.inf


def test_decode_floor_is_the_minimum_of_the_library_chain():
    """A 60-head model (tp any divisor of 60) on a 64-GPU node: the chain's minimum over the
    valid tp is at one of the two divisors either side of tp*."""
    m = ModelConfig(vocab_size=32000, hidden_size=7680, num_hidden_layers=40,
                    num_attention_heads=60, intermediate_size=20480)
    hw = replace(H100, gpus_per_node=64)
    alpha = 2e-6
    star = decode_tp_floor(m, hw, response_len=128, latency_s=alpha)
    tps = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60)
    depth = {tp: tp_decode_workdepth(m, hw, tp, gpus=60, sequences=60, response_len=128,
                                     latency_s=alpha).depth_s for tp in tps}
    best = min(depth, key=depth.get)
    below, above = max(t for t in tps if t <= star), min(t for t in tps if t >= star)
    assert best in (below, above) and 5 < star < 15


def test_decode_work_is_the_replicas_steps_and_one_sequence_a_replica_makes_it_the_depth():
    r = tp_decode_workdepth(LLAMA70, H100, 8, response_len=128)
    dec = r.phase("decode")
    assert r.inputs["batch_per_replica"] == 64 and dec.work_per_processor_s > dec.depth_s
    one = tp_decode_workdepth(LLAMA70, H100, 8, sequences=8, response_len=128)
    assert one.inputs["batch_per_replica"] == 1
    assert one.brent_lower_s == pytest.approx(one.depth_s, rel=1e-12)
    assert one.work_gpu_s / 64 == pytest.approx(one.depth_s, rel=1e-12)


def test_bad_input_is_a_value_error_naming_the_argument():
    wl = TrainWorkload(512, 4096)
    with pytest.raises(ValueError, match="pp=2"):
        tp_train_workdepth(LLAMA70, H100, replace(_plan(8, True), dp=4, pp=2), wl)
    with pytest.raises(ValueError, match="latency_s"):
        tp_train_workdepth(LLAMA70, H100, _plan(8, True), wl, latency_s=-1)
    with pytest.raises(ValueError, match="latent attention"):
        cp_overlap_min_chunk_tokens("deepseek-v3", H100, bandwidth_bytes_per_s=50e9)
    with pytest.raises(ValueError, match="ratio"):
        tp_comm_threshold(LLAMA70, H100, 4096, ratio=0)
    with pytest.raises(ValueError, match="tp=16 must fit in an NVLink domain"):
        tp_decode_workdepth(LLAMA70, H100, 16)
    with pytest.raises(ValueError, match="response_len"):
        tp_decode_workdepth(LLAMA70, H100, 8, response_len=1)
    with pytest.raises(ValueError, match="plan must be a ParallelPlan"):
        tp_train_workdepth(LLAMA70, H100, {}, wl)
    with pytest.raises(ValueError, match="tp=3 must divide num_attention_heads"):
        tp_decode_workdepth(LLAMA70, H100, 3, gpus=63)
