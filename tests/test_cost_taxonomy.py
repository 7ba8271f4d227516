"""The taxonomy table of Part III (rlmperf_lite.cost.taxonomy): each row against a published
value or a peer's formula, and against the chapter function it calls."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmperf_lite.cost import ModelConfig, ParallelPlan, TrainWorkload, memory_per_gpu
from rlmperf_lite.cost.collective import NVLINK_HOP_LATENCY_S
from rlmperf_lite.cost.dp_workdepth import dp_update_workdepth
from rlmperf_lite.cost.pp_workdepth import moe_layer_workdepth_s, pipeline_workdepth_s
from rlmperf_lite.cost.taxonomy import taxonomy_table
from rlmperf_lite.cost.tp_workdepth import tp_train_workdepth
from rlmperf_lite.cost.workdepth_s import rl_step_workdepth_s
from rlmperf_lite.cost import per_version_depth

AXES = ["DP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "TP", "SP", "CP", "PP (1F1B)", "EP",
        "colocated", "disaggregated", "fused", "hybrid", "async (k = 1)"]
QWEN = ModelConfig.preset("qwen2.5-7b")
N, L, H = QWEN.num_params(), QWEN.num_hidden_layers, QWEN.hidden_size
n, B, T = 4, 32, 4608                                  # the defaults: degree, batch, tokens
STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64, kl_coef=0.001, train_efficiency=1.0)


@pytest.fixture(scope="module")
def rows():
    return {r.axis: r for r in taxonomy_table()}


def test_every_axis_once(rows):
    assert list(rows) == AXES


def _zero_paper_gb(psi, nd, stage, K=12):
    """ZeRO paper (Rajbhandari et al. 2020) Fig. 1: bytes per GPU of each stage."""
    return {0: (2 + 2 + K) * psi, 1: 4 * psi + K * psi / nd, 2: 2 * psi + (2 + K) * psi / nd,
            3: (2 + 2 + K) * psi / nd}[stage] / 1e9


def test_zero_memory_is_the_zero_papers(rows):
    # the peer formula reproduces Fig. 1 (7.5B on 64 GPUs: 120, 31.4, 16.6, 1.9 GB) ...
    assert [round(_zero_paper_gb(7.5e9, 64, s), 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]
    # ... and the rows differ by it: activations are the same at every stage
    act = rows["DP"].memory_bytes_per_gpu - _zero_paper_gb(N, n, 0) * 1e9
    for s, axis in enumerate(AXES[:4]):
        assert math.isclose(rows[axis].memory_bytes_per_gpu - act, _zero_paper_gb(N, n, s) * 1e9,
                            rel_tol=1e-12)


def test_dp_all_reduce_sends_nccl_tests_bus_factor(rows):
    # nccl-tests PERFORMANCE.md: a ring all-reduce of S bytes sends 2 (n - 1) / n S per rank
    assert math.isclose(rows["DP"].comm_bytes_per_gpu, 2 * (n - 1) / n * 2 * N, rel_tol=1e-12)
    # ZeRO-1: reduce-scatter + all-gather, (n - 1) / n S each: the same bytes (ZeRO paper §7)
    assert math.isclose(rows["ZeRO-1"].comm_bytes_per_gpu, rows["DP"].comm_bytes_per_gpu,
                        rel_tol=1e-12)
    # ZeRO-3: 1.5 x DP's per micro-batch (ZeRO paper §7.2.2: 3 Psi against 2 Psi)
    assert math.isclose(rows["ZeRO-3 / FSDP"].comm_bytes_per_gpu,
                        1.5 * (B // n) * rows["DP"].comm_bytes_per_gpu, rel_tol=1e-12)


def test_tp_four_all_reduces_of_bsh_per_layer(rows):
    # Megatron-LM (Shoeybi et al. 2019 §3): 2 all-reduces forward, 2 backward, of b s h values
    per_layer = 4 * 2 * (n - 1) / n * (1 * T * H * 2)
    assert math.isclose(rows["TP"].comm_bytes_per_gpu, B * L * per_layer, rel_tol=1e-12)


def test_sp_moves_tp_bytes_and_keeps_less(rows):
    # Korthikanti et al. 2022 §4.2.2: reduce-scatter + all-gather = one all-reduce's bytes
    tp, sp = rows["TP"], rows["SP"]
    assert math.isclose(sp.comm_bytes_per_gpu, tp.comm_bytes_per_gpu, rel_tol=1e-12)
    assert math.isclose(sp.comm_s, tp.comm_s, rel_tol=1e-12)
    # ... and shards the layer's unsharded 8 s b h (Table 2's 10 less its two dropout masks:
    # norm, QKV and MLP inputs) and the LM head's 4 s b h (Megatron-LM's estimator) by n
    saved = (L * 8 + 4) * T * H * (1 - 1 / n)
    assert math.isclose(tp.memory_bytes_per_gpu - sp.memory_bytes_per_gpu, saved, rel_tol=1e-9)


def test_pp_bubble_is_p_minus_one_over_m(rows):
    # Narayanan et al. 2021 §2.2.1: the 1F1B bubble is (p - 1) / m of the ideal time
    r = pipeline_workdepth_s("qwen2.5-7b", "h100", pp=n, microbatches=B, seq_len=T,
                             link="intra", latency_s=NVLINK_HOP_LATENCY_S)
    pp = rows["PP (1F1B)"]
    compute_d = pp.depth_s - r.sends_on_path * r.hop_s
    assert math.isclose(compute_d / (pp.work_gpu_s / n) - 1, (n - 1) / B, rel_tol=1e-9)
    assert pp.work_change_gpu_s == pytest.approx(0.0, abs=1e-12)   # idling is not work


def test_ep_two_all_to_alls_each_way_per_moe_layer(rows):
    # Megatron-Core's dispatcher: dispatch + combine forward, the same two backward; each
    # all-to-all sends (n - 1) / n of the b T k rows of h values a GPU holds
    moe = ModelConfig.preset("qwen3-30b-a3b")
    rows_sent = T * moe.num_experts_per_tok * moe.hidden_size * 2
    per_layer = 2 * 2 * (n - 1) / n * rows_sent
    assert math.isclose(rows["EP"].comm_bytes_per_gpu,
                        moe.num_moe_layers * (B // n) * per_layer, rel_tol=1e-12)


def test_rows_equal_the_chapter_functions(rows):
    kw = dict(seq_len=T, recompute="selective", latency_s=NVLINK_HOP_LATENCY_S)
    for s, axis in enumerate(AXES[:4]):
        wd = dp_update_workdepth(QWEN, "h100", dp=n, zero_stage=s, microbatches=B // n, **kw)
        assert rows[axis].depth_s == sum(p.depth_s for p in wd.phases)
        assert rows[axis].comm_s == wd.comm_s
    wl = TrainWorkload(B, T)
    tp = tp_train_workdepth(QWEN, "h100", ParallelPlan(tp=n, microbatches=B,
                                                       recompute="selective"), wl,
                            latency_s=NVLINK_HOP_LATENCY_S)
    assert (rows["TP"].work_gpu_s, rows["TP"].depth_s) == (tp.work_gpu_s, tp.depth_s)
    assert rows["PP (1F1B)"].memory_bytes_per_gpu == memory_per_gpu(
        QWEN, ParallelPlan(pp=n, microbatches=B, recompute="selective"), wl).total_bytes
    moe = moe_layer_workdepth_s("qwen3-30b-a3b", "h100", ep=n, tokens_per_rank=T,
                                latency_s=NVLINK_HOP_LATENCY_S)
    assert math.isclose(rows["EP"].comm_s, 4 * 48 * (B // n) * moe.all_to_all_s, rel_tol=1e-12)
    col = rl_step_workdepth_s("grpo", **STEP)
    assert (rows["colocated"].work_gpu_s, rows["colocated"].depth_s) == (col.work_gpu_s,
                                                                         col.depth_s)
    old = col.phase("old_logprobs")
    assert rows["fused"].work_change_gpu_s == pytest.approx(-old.work_gpu_s, rel=1e-12)
    assert rows["fused"].depth_change_s == pytest.approx(-old.depth_s, rel=1e-12)


def test_system_rows_relations(rows):
    dis, k1 = rows["disaggregated"], rows["async (k = 1)"]
    d_gen = sum(p.depth_s for p in rl_step_workdepth_s("grpo", **{**STEP, "gpus": 16}).phases
                if p.name.startswith("rollout"))
    assert k1.depth_s == pytest.approx(per_version_depth(d_gen, dis.depth_s - d_gen, 1))
    assert k1.work_gpu_s == dis.work_gpu_s and k1.depth_s < dis.depth_s
    # 32 sequences per rollout GPU instead of 8: fuller decode batches share the weight reads
    assert dis.work_change_gpu_s < 0
    # hybrid: the reference's pass beside the old log-probs, -min(D_old, D_ref) plus the sync
    col = rl_step_workdepth_s("grpo", **STEP)
    ref48 = rl_step_workdepth_s("grpo", **{**STEP, "gpus": 48})
    expect = -col.phase("ref_logprobs").depth_s + ref48.phase("weight_sync").depth_s - \
        col.phase("weight_sync").depth_s
    assert rows["hybrid"].depth_change_s == pytest.approx(expect, rel=1e-9)
    # the disaggregated sync ships the whole bf16 weights to each rollout GPU
    assert dis.comm_bytes_per_gpu == pytest.approx(2 * N)


@pytest.mark.parametrize("kwargs, name", [
    (dict(degree=1), "degree"), (dict(degree=16), "degree"),
    (dict(global_batch=30), "global_batch"),
    (dict(kl_coef=0.0), "kl_coef"), (dict(rollout_gpus=64), "rollout_gpus"),
    (dict(moe_model="qwen2.5-7b"), "moe_model"), (dict(algo="ppo"), "algo"),
    (dict(staleness=-1), "staleness")])
def test_bad_input_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        taxonomy_table(**kwargs)


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["qwen2.5-7b", "llama-3.1-8b"]),
       recompute=st.sampled_from(["selective", "full"]), seq_len=st.sampled_from([1024, 4608]))
def test_memory_per_gpu_never_grows_with_the_degree(model, recompute, seq_len):
    degrees = (2, 4) if model == "qwen2.5-7b" else (2, 4, 8)        # tp divides the KV heads
    tables = [taxonomy_table(model, degree=d, global_batch=16, seq_len=seq_len,
                             recompute=recompute) for d in degrees]
    for small, large in zip(tables, tables[1:]):
        for a, b in zip(small[:9], large[:9]):
            assert b.memory_bytes_per_gpu <= a.memory_bytes_per_gpu * (1 + 1e-12), a.axis
