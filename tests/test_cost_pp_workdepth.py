"""Work and depth in seconds of a pipelined pass and of an expert-parallel MoE layer (book
section sec-pp-workdepth): the bubble of Narayanan et al. 2021 (§2.2.1: (p - 1) / m; §2.2.2:
(p - 1) / (v m)) as the depth beyond the work, the closed-form depth against the schedule
simulator's makespan, the 72B estimate by hand, and the MoE layer's depth as its load
imbalance."""
import itertools

import numpy as np
import pytest

from rlmperf_lite.cost import hardware_preset, model_preset, pipeline_bubble_fraction
from rlmperf_lite.cost.collective import NET_HOP_LATENCY_S
from rlmperf_lite.cost.pp_workdepth import (moe_layer_workdepth_s,
                                            pipeline_depth_slots, pipeline_workdepth_s,
                                            skewed_routing)
from rlmperf_lite.parallel import expert_load, make_schedule, schedule_timeline

H100 = hardware_preset("h100")
CASES = [(s, p, m, v) for s, p, m, v in itertools.product(
    ("gpipe", "1f1b", "interleaved"), (1, 2, 4, 8), (8, 16, 32), (1, 2, 4))
    if (s == "interleaved" or v == 1) and not (v > 1 and p == 1)]


@pytest.mark.parametrize("schedule,pp,m,v", CASES)
@pytest.mark.parametrize("t_f,t_b", [(1.0, 2.0), (1.0, 1.0), (0.3, 1.1)])
def test_closed_form_depth_is_the_simulated_makespan(schedule, pp, m, v, t_f, t_b):
    """m + (p - 1) / v slots of t_f + t_b, whatever the ratio t_b / t_f."""
    tl = schedule_timeline(make_schedule(schedule, pp, m, v), t_f, t_b)
    assert tl.makespan == pytest.approx(pipeline_depth_slots(pp, m, v) * (t_f + t_b),
                                        rel=1e-12)


@pytest.mark.parametrize("schedule,pp,m,v", CASES)
def test_bubble_of_narayanan_is_depth_over_work_per_gpu_minus_one(schedule, pp, m, v):
    """Narayanan et al. 2021: (p - 1) / m for GPipe and 1F1B (§2.2.1), (p - 1) / (v m)
    interleaved (§2.2.2). Here it is D / (W / p) - 1, and T = max(W / p, D) = D."""
    r = pipeline_workdepth_s("gpt3-175b", pp=pp, microbatches=m, schedule=schedule,
                             interleave=v)                 # 96 layers: pp v divides them
    c = r.compute
    assert c.work_gpu_s == pytest.approx(m * pp * (r.forward_s + r.backward_s), rel=1e-12)
    assert c.depth_s >= c.work_per_processor_s and c.brent_lower_s == c.depth_s
    assert r.bubble_fraction == pytest.approx((pp - 1) / (v * m), rel=1e-12, abs=1e-15)
    assert r.bubble_fraction == pytest.approx(pipeline_bubble_fraction(pp, m, v), abs=1e-12)
    tl = schedule_timeline(make_schedule(schedule, pp, m, v), r.forward_s, r.backward_s)
    assert tl.bubble_fraction == pytest.approx(r.bubble_fraction, abs=1e-12)


def test_megatron_example_p8_m32():
    """p = 8, m = 32: 7/32 = 0.21875 of the ideal time; v = 2 halves it (Narayanan §2.2.2)."""
    assert pipeline_workdepth_s("qwen2.5-72b", pp=8, microbatches=32).bubble_fraction == \
        pytest.approx(7 / 32, rel=1e-12)
    r = pipeline_workdepth_s("qwen2.5-72b", pp=8, microbatches=32, schedule="interleaved",
                             interleave=2)
    assert r.bubble_fraction == pytest.approx(7 / 64, rel=1e-12)


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                        ("interleaved", 4)])
def test_simulated_pass_with_blocking_sends_is_the_lower_bound(schedule, v):
    """Each op followed by its send: the simulator's makespan is D (compute + 2 (v m + p - 1)
    hops), inside [max(W/p, D), W/p + D]."""
    r = pipeline_workdepth_s("gpt3-175b", pp=8, microbatches=32, schedule=schedule,
                             interleave=v)
    assert r.sends_on_path == 2 * (v * 32 + 8 - 1)
    assert r.phases[1].depth_s == pytest.approx(r.sends_on_path * r.hop_s, rel=1e-12)
    assert r.phases[1].work_gpu_s == 0
    assert r.makespan_s == pytest.approx(r.brent_lower_s, rel=1e-12)
    assert r.brent_lower_s <= r.makespan_s * (1 + 1e-12) <= r.brent_upper_s * (1 + 1e-12)


def test_72b_by_hand():
    """Qwen2.5-72B (72,706,203,648 parameters, model card; D = 8192) at pp = 8, m = 32, one
    sequence of 4,608 tokens per micro-batch on H100s (989.5 TFLOP/s dense bf16, 50 GB/s per
    GPU between nodes): t_f + t_b within 10% of 6 N T / (p peak) (Kaplan et al. 2020's 6 N per
    token; attention and the LM head add the rest), the hop 4608 x 8192 x 2 bytes / 50 GB/s
    plus NCCL's 14 us."""
    N, T, p, peak = 72_706_203_648, 4608, 8, 989.5e12
    assert model_preset("qwen2.5-72b").num_params() == N
    r = pipeline_workdepth_s("qwen2.5-72b", pp=p, microbatches=32)
    assert r.forward_s + r.backward_s == pytest.approx(6 * N * T / (p * peak), rel=0.10)
    assert r.backward_s == pytest.approx(2 * r.forward_s, rel=1e-12)
    assert r.hop_s == pytest.approx(4608 * 8192 * 2 / 50e9 + 14e-6, rel=1e-12)
    assert NET_HOP_LATENCY_S == 14e-6
    assert r.compute.depth_s == pytest.approx(39 * (r.forward_s + r.backward_s), rel=1e-12)
    assert r.compute.work_per_processor_s == pytest.approx(32 * (r.forward_s + r.backward_s))


def test_one_stage_has_no_bubble_and_no_sends():
    r = pipeline_workdepth_s("qwen2.5-7b", pp=1, microbatches=8)
    assert r.bubble_fraction == 0 and r.sends_on_path == 0 and r.phases[1].depth_s == 0
    assert r.compute.depth_s == pytest.approx(r.compute.work_per_processor_s, rel=1e-12)


def test_intra_node_hop_is_nvlink():
    r = pipeline_workdepth_s("qwen2.5-72b", pp=8, microbatches=32, link="intra")
    assert r.hop_s == pytest.approx(4608 * 8192 * 2 / 450e9 + 3.4e-6, rel=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(schedule="1f1b", interleave=2), "interleave=2 needs schedule='interleaved'"),
    (dict(schedule="zb"), "schedule must be one of"),
    (dict(pp=3), "must divide num_hidden_layers=80"),
    (dict(schedule="interleaved", interleave=2, microbatches=12), "divisible by pp"),
    (dict(microbatches=0), "microbatches must be an int >= 1"),
    (dict(link="pcie"), "link must be one of"),
    (dict(efficiency=0), "efficiency"),
    (dict(latency_s=-1e-6), "latency_s"),
])
def test_pipeline_bad_inputs_name_the_argument(kwargs, match):
    kw = {"pp": 8, "microbatches": 32, **kwargs}
    with pytest.raises(ValueError, match=match):
        pipeline_workdepth_s("qwen2.5-72b", **kw)


# ---- expert parallelism ----------------------------------------------------------------------
def test_balanced_moe_layer_has_depth_equal_to_work_per_gpu():
    """Qwen3-235B-A22B (128 experts, top-8, D = 4096) on ep = 8 GPUs of a node, 4,608 tokens
    each: every GPU gets N k = 36,864 pairs; the all-to-all is nccl-tests' (n - 1)/n x S / busbw
    plus NCCL's NVLink alpha per step."""
    r = moe_layer_workdepth_s("qwen3-235b-a22b", ep=8)
    assert r.rank_pairs.tolist() == [4608 * 8] * 8 and r.imbalance == 1
    assert r.experts.depth_s == pytest.approx(r.experts.work_per_processor_s, rel=1e-12)
    S = 4608 * 8 * 4096 * 2
    assert r.all_to_all_bytes == S
    assert r.all_to_all_s == pytest.approx(7 / 8 * S / 450e9 + 7 * 3.4e-6, rel=1e-12)
    assert r.phases[0].depth_s == pytest.approx(4 * r.all_to_all_s, rel=1e-12)
    assert r.layer_s == pytest.approx(r.phases[0].depth_s + r.experts.depth_s, rel=1e-12)


def test_imbalance_is_the_experts_depth_over_their_work_per_gpu():
    """The busiest GPU sets the layer's time: D / (W/p) of the experts = max / mean pairs
    (compute-bound), from expert_load of a skewed routing."""
    m = model_preset("qwen3-235b-a22b")
    routing = skewed_routing(8 * 4608, m.num_experts, m.num_experts_per_tok, skew=1.0)
    load = expert_load(routing, m.num_experts)
    r = moe_layer_workdepth_s(m, ep=8, expert_tokens=load)
    assert r.rank_pairs.tolist() == load.reshape(8, 16).sum(axis=1).tolist()
    assert r.imbalance == pytest.approx(load.reshape(8, 16).sum(1).max() / (4608 * 8))
    assert r.imbalance > 1.2
    assert r.experts.depth_s / r.experts.work_per_processor_s == pytest.approx(r.imbalance,
                                                                               rel=1e-12)
    assert r.all_to_all_bytes == r.rank_pairs.max() * 4096 * 2      # the busiest receiver
    same = moe_layer_workdepth_s(m, ep=8, routing=routing)
    assert same.layer_s == r.layer_s


def test_one_gpu_has_no_all_to_all():
    r = moe_layer_workdepth_s("qwen3-30b-a3b", ep=1)
    assert r.all_to_all_s == 0 and r.experts.depth_s == r.experts.work_gpu_s


def test_skewed_routing_draws_distinct_experts_with_the_stated_weights():
    """k distinct experts per token; with k = 1 the share of expert e is w_e / sum(w) (the
    exponential race of Efraimidis and Spirakis 2006), w = (rank + 1)^-skew."""
    r = skewed_routing(2000, 16, 4, skew=1.0, seed=1)
    assert r.shape == (2000, 4) and all(len(set(row)) == 4 for row in r.tolist())
    one = skewed_routing(200_000, 8, 1, skew=1.0, seed=2)
    share = np.bincount(one.ravel(), minlength=8) / 200_000
    rank = np.random.default_rng(2).permutation(8)              # the routing's own order
    w = (1.0 + rank) ** -1.0
    np.testing.assert_allclose(share, w / w.sum(), atol=0.005)
    uniform = expert_load(skewed_routing(100_000, 8, 2, skew=0.0), 8)
    assert uniform.max() / uniform.mean() < 1.02


@pytest.mark.parametrize("kwargs,match", [
    (dict(model="qwen2.5-72b"), "has no experts"),
    (dict(ep=3), "ep=3 must divide the model's 128 experts"),
    (dict(expert_tokens=np.ones(128)), "summing to"),
    (dict(expert_tokens=np.ones(128), routing=np.zeros((8, 8), int)), "not both"),
    (dict(tokens_per_rank=0), "tokens_per_rank"),
])
def test_moe_bad_inputs_name_the_argument(kwargs, match):
    kw = {"model": "qwen3-235b-a22b", "ep": 8, **kwargs}
    with pytest.raises(ValueError, match=match):
        moe_layer_workdepth_s(kw.pop("model"), **kw)
