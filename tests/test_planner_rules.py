"""The planner's rules as one library's rules: uneven pipeline stages (Megatron-Core's first/last
stage flags), the training backend's ZeRO x pipeline rules (Megatron, DeepSpeed, TorchTitan
FSDP2), and TP groups bounded by the NVLink domain, not the node (GB200 NVL72)."""
import itertools
import math
import re
from dataclasses import replace

import pytest

from rlmperf_lite.cost import (ParallelPlan, TrainWorkload, activation_bytes_per_layer,
                               collective_time_s, hardware_preset, memory_per_gpu, model_preset,
                               search_plans, train_step_time)
from rlmperf_lite.cost.backends import TRAINING_BACKENDS, training_backend
from rlmperf_lite.cost.dp_workdepth import dp_update_workdepth
from rlmperf_lite.cost.parallel_memory import stage_param_arrays
from rlmperf_lite.cost.parallel_plan import balanced_stage_layers
from rlmperf_lite.cost.parallel_step import stage_train_flops
from rlmperf_lite.cost.planner import compare_nvlink_domains, work_balanced_stage_layers
from rlmperf_lite.cost.rollout import rollout_tp

H100 = hardware_preset("h100")
NVL72 = hardware_preset("gb200-nvl72")
QWEN72 = model_preset("qwen2.5-72b")          # 80 layers, 8 KV heads, dense
QWEN3 = model_preset("qwen3-235b-a22b")       # 94 layers, 4 KV heads, 128 experts
DSV3 = model_preset("deepseek-v3")            # 61 layers, 128 (latent) heads
WORK = TrainWorkload(global_batch=512, seq_len=512 + 4096)        # Chapter 9's RL update


# ---- uneven pipeline stages -----------------------------------------------------------------
@pytest.mark.parametrize("pp, first, last, layout", [
    # the example: 61 layers at pp = 4 with only the last stage set
    (4, None, 13, (16, 16, 16, 13)),
    # volcengine/verl examples/grpo_trainer/run_deepseek671b_math_megatron.sh (commit 2811a72):
    # PP=16, num_layers_in_first_pipeline_stage=3, num_layers_in_last_pipeline_stage=2
    (16, 3, 2, (3,) + (4,) * 14 + (2,)),
    # ... _megatron_80gb.sh (commit 2e67e21): PP=16, first 4, last 1 (256 H100)
    (16, 4, 1, (4,) + (4,) * 14 + (1,)),
    # ... _megatron_96gb.sh (commit 6e7fdc2): PP=12, LAST_LAYER=6 (96 H20)
    (12, None, 6, (5,) * 11 + (6,)),
])
def test_deepseek_v3_public_layouts(pp, first, last, layout):
    """DeepSeek-V3's 61 layers in the public Megatron recipes' uneven layouts: the first/last
    flags fix those stages and the rest split evenly (Megatron-Core TransformerConfig)."""
    plan = ParallelPlan(pp=pp, dp=1, microbatches=512, first_stage_layers=first,
                        last_stage_layers=last)
    assert plan.stage_layers(DSV3) == layout and sum(layout) == DSV3.num_hidden_layers == 61
    assert plan.check(DSV3, None, pp, WORK) == []


@pytest.mark.parametrize("kw, rule", [
    (dict(pp=4, first_stage_layers=20, last_stage_layers=20), "the 21 middle layers do not "
                                                                "split evenly over 2"),
    (dict(pp=4, first_stage_layers=40, last_stage_layers=30), "leave -9 of "),
    (dict(pp=2, first_stage_layers=30, last_stage_layers=30), "leave 1 of .* for 0 middle"),
    (dict(pp=1, first_stage_layers=61), "need pp > 1"),
    (dict(pp=4, interleave=2, first_stage_layers=15, last_stage_layers=14),
     "interleave=2 does not divide every stage's layers"),
    (dict(pp=4), "pp=4 does not divide num_hidden_layers=61 \\(set first_stage_layers"),
])
def test_megatron_uneven_stage_rules(kw, rule):
    """Megatron-Core's "Uneven PP" checks: middle layers split evenly over the middle stages,
    none left iff no middle stage, each stage's layers divisible by the interleave."""
    plan = ParallelPlan(dp=1, microbatches=512, **kw)
    broken = plan.check(DSV3, None, None, WORK)
    assert any(re.search(rule, b) for b in broken), broken
    with pytest.raises(ValueError, match=rule):
        plan.stage_layers(DSV3)


def _best_flag_layout(L, pp, v):
    """Brute force over Megatron's flags: the least max stage of any (first, c x (pp - 2),
    last) layout obeying its rules (each stage >= v and divisible by v)."""
    best = None
    for first, last in itertools.product(range(v, L + 1, v), repeat=2):
        rest = L - first - last
        if pp == 2 and rest == 0 or pp > 2 and rest > 0 and rest % ((pp - 2) * v) == 0:
            top = max(first, last, rest // (pp - 2) if pp > 2 else 0)
            best = top if best is None else min(best, top)
    return best


@pytest.mark.parametrize("L, pp, v", [(94, 4, 1), (94, 8, 1), (94, 32, 1), (61, 4, 1),
                                      (126, 8, 1), (94, 4, 2), (94, 2, 2), (61, 12, 1)])
def test_balanced_layout_is_the_least_max_stage(L, pp, v):
    """The planner's layout reaches ceil's bound c and is as good as the best flag layout a
    brute-force search finds; Chapter 9's 94 layers at pp = 4 split 23/24/24/23."""
    layout = balanced_stage_layers(L, pp, v)
    assert sum(layout) == L and len(layout) == pp and all(n % v == 0 for n in layout)
    assert max(layout) == _best_flag_layout(L, pp, v) == -(-L // (pp * v)) * v
    assert layout[0] >= layout[-1]                         # the LM head's stage holds fewer
    assert balanced_stage_layers(94, 4) == (23, 24, 24, 23)
    assert balanced_stage_layers(80, 8) == (10,) * 8        # divisible: even
    assert balanced_stage_layers(80, 32) is None            # no flag layout reaches 3 layers


def test_uneven_stage_memory_is_the_busiest_stages():
    """Qwen3-235B-A22B, pp = 8 as 11/12x6/11, 1F1B, m = 512: the worst stage is the second (12
    layers, 7 micro-batches in flight: min(p - 1, m), Narayanan et al. 2021 §2.2.1); its bf16
    weights are 2 bytes x (12 layers' dense parameters + their routed experts / ep)."""
    plan = ParallelPlan(dp=1, pp=8, cp=8, ep=8, zero_stage=1, microbatches=512,
                        first_stage_layers=11, last_stage_layers=11)
    mem = memory_per_gpu(QWEN3, plan, WORK)
    b, L = QWEN3.param_breakdown(), QWEN3.num_hidden_layers
    norm = b["norms"] / (2 * L + 1)
    dense = 12 / L * (b["attention"] + b["router"] + 2 * L * norm)
    assert mem.stage == "middle"
    assert mem.weights_bytes == pytest.approx(2 * (dense + 12 / L * b["routed_experts"] / 8))
    per_layer = activation_bytes_per_layer(QWEN3, WORK.seq_len, 1) / 8          # / cp
    assert mem.activation_bytes == pytest.approx(per_layer * 12 * 7)


def test_uneven_stages_hold_every_parameter():
    """Counted: first + (p - 2) middle + last stage parameters = the model's, 94 as 23/24/24/23
    (routed experts included)."""
    p = stage_param_arrays(QWEN3, 4, 23, 24, 23)
    total = p["first"] + 2 * p["middle"] + p["last"]
    experts = p["expert_first"] + 2 * p["expert_middle"] + p["expert_last"]
    assert total + experts == pytest.approx(QWEN3.num_params(), rel=1e-12)


def test_the_slowest_stage_sets_the_pace():
    """pp = 2, one GPU per stage (no TP/CP/EP/DP traffic): each microbatch slot lasts the
    slower stage's time. Even 47/47 puts the LM head (h = 2.39 layers, stage_train_flops) on
    the last stage, so the slot is 47 + h layers; 48/46 moves a layer off it (48 vs 46 + h: the
    last still slower), 49/45 too many (the first's 49 layers set the pace)."""
    f = stage_train_flops(QWEN3, WORK.seq_len)
    h = f["lm_head"] / f["layer"]
    even = ParallelPlan(pp=2, microbatches=512)
    a = train_step_time(QWEN3, H100, even, WORK)
    assert a.compute_s == pytest.approx(512 * (47 * f["layer"] + f["lm_head"])
                                        / H100.peak("bf16"), rel=1e-12)
    for first, last, slot in ((48, 46, 46 + h), (49, 45, 49)):
        tilted = ParallelPlan(pp=2, microbatches=512, first_stage_layers=first,
                              last_stage_layers=last)
        b = train_step_time(QWEN3, H100, tilted, WORK)
        assert b.compute_s == pytest.approx(a.compute_s * slot / (47 + h), rel=1e-12)
        assert b.bubble_s == pytest.approx(a.bubble_s * slot / (47 + h), rel=1e-12)
        assert b.comm_s["pp"] == a.comm_s["pp"]
    # the flags set to the even split change nothing
    same = ParallelPlan(pp=2, microbatches=512, first_stage_layers=47, last_stage_layers=47)
    assert train_step_time(QWEN3, H100, same, WORK) == a
    assert memory_per_gpu(QWEN3, same, WORK) == memory_per_gpu(QWEN3, even, WORK)


def _best_work_layout(L, pp, v, last_extra):
    """Brute force over Megatron's flags: the least slowest-stage work of any layout, the last
    stage doing ``last_extra`` layers' worth more."""
    best = None
    for first, last in itertools.product(range(v, L + 1, v), repeat=2):
        rest = L - first - last
        if pp == 2 and rest == 0 or pp > 2 and rest > 0 and rest % ((pp - 2) * v) == 0:
            top = max(first, last + last_extra, rest // (pp - 2) if pp > 2 else 0)
            best = top if best is None else min(best, top)
    return best


@pytest.mark.parametrize("L, pp, v, model", [(94, 4, 1, QWEN3), (94, 8, 1, QWEN3),
                                             (94, 32, 1, QWEN3), (94, 4, 2, QWEN3),
                                             (80, 8, 1, QWEN72), (80, 4, 2, QWEN72),
                                             (61, 16, 1, DSV3), (94, 2, 1, QWEN3)])
def test_work_balanced_layout_is_the_least_slowest_stage(L, pp, v, model):
    """With the LM head's h layers of work on the last stage, the planner's second layout
    reaches the brute-force least slowest stage over Megatron's flags; it never loses to the
    layer-balanced layout, and without extras it ties with it."""
    f = stage_train_flops(model, WORK.seq_len)
    h = f["lm_head"] / f["layer"]
    layout = work_balanced_stage_layers(L, pp, v, last_extra=h)
    assert sum(layout) == L and len(layout) == pp and all(n % v == 0 for n in layout)
    assert len(set(layout[1:-1])) <= 1                                # middle stages equal
    top = max(max(layout[:-1]), layout[-1] + h)
    assert top == pytest.approx(_best_work_layout(L, pp, v, h), rel=1e-12)
    base = balanced_stage_layers(L, pp, v)
    assert top <= max(max(base[:-1]), base[-1] + h)
    assert max(work_balanced_stage_layers(L, pp, v)) == max(base)


def test_work_balanced_layouts_of_the_chapter():
    """Chapter 9's models at T = 4,608: Qwen2.5-72B's head is 1.36 layers, so 80 layers at pp = 8
    go 11/10 x 6/9 (slot 11 layers, not 10 + 1.36); Qwen3-235B-A22B's is 2.39: 94 layers at
    pp = 4 go 24/24/24/22, at pp = 32 3/3 x 30/1 (slot 3.39, not 2 + 2.39 = 4.39)."""
    h = {m.name: stage_train_flops(m, WORK.seq_len) for m in (QWEN72, QWEN3)}
    h = {k: f["lm_head"] / f["layer"] for k, f in h.items()}
    assert round(h[QWEN72.name], 2) == 1.36 and round(h[QWEN3.name], 2) == 2.39
    assert work_balanced_stage_layers(80, 8, last_extra=h[QWEN72.name]) == (11,) + (10,) * 6 + (9,)
    assert work_balanced_stage_layers(94, 4, last_extra=h[QWEN3.name]) == (24, 24, 24, 22)
    assert work_balanced_stage_layers(94, 32, last_extra=h[QWEN3.name]) == (3,) * 31 + (1,)
    assert work_balanced_stage_layers(94, 1) is None
    # the same plan with the head-balanced layout is faster than with even stages
    kw = dict(dp=1, pp=8, cp=8, zero_stage=1, microbatches=512)
    even = train_step_time(QWEN72, H100, ParallelPlan(**kw), WORK)
    head = train_step_time(QWEN72, H100, ParallelPlan(**kw, first_stage_layers=11,
                                                      last_stage_layers=9), WORK)
    assert head.total_s < even.total_s
    assert head.compute_s / even.compute_s == pytest.approx(11 / (10 + h[QWEN72.name]),
                                                            rel=1e-12)


def test_the_search_adds_the_work_balanced_layout_as_a_second_candidate():
    """Qwen2.5-72B on 64 H100s: every pipelined combination whose head-balanced layout differs
    from its layer-balanced one is searched with both; with uneven_stages=False neither."""
    new = search_plans(QWEN72, H100, 64, WORK)
    old = search_plans(QWEN72, H100, 64, WORK, uneven_stages=False)
    assert new.num_enumerated > old.num_enumerated
    layouts = {r.plan.stage_layers(QWEN72) for r in new.ranked if r.plan.pp == 8
               and r.plan.interleave == 1}
    assert {(10,) * 8, (11,) + (10,) * 6 + (9,)} <= layouts
    assert not any(r.plan.first_stage_layers for r in old.ranked)
    assert new.best.step_time_s < old.best.step_time_s


def test_a_94_layer_model_now_admits_pp_4_and_the_search_only_gains():
    """Chapter 9's MoE example on 64 H100s: with even stages only, 94 = 2 x 47 allows pp in
    {1, 2}; with Megatron's uneven stages pp = 4, 8, ... are searched too, every old plan
    keeps its cost, so the best plan can only get faster."""
    old = search_plans(QWEN3, H100, 64, WORK, uneven_stages=False)
    new = search_plans(QWEN3, H100, 64, WORK)
    assert {r.plan.pp for r in old.ranked} <= {1, 2}
    assert {4, 8} <= {r.plan.pp for r in new.ranked}
    assert new.num_enumerated > old.num_enumerated and new.num_valid > old.num_valid
    four = {r.plan.stage_layers(QWEN3) for r in new.ranked if r.plan.pp == 4
            and r.plan.interleave == 1}
    assert four == {(23, 24, 24, 23), (24, 24, 24, 22)}     # layer- and work-balanced
    assert new.best.step_time_s <= old.best.step_time_s
    assert new.best.plan.pp not in (1, 2)                  # the new best uses uneven stages
    times = {r.plan: r.step_time_s for r in new.ranked}
    assert all(times[r.plan] == r.step_time_s for r in old.ranked)


# ---- training backends ----------------------------------------------------------------------
def test_deepspeed_refuses_zero3_with_a_pipeline_and_fsdp2_accepts():
    """DeepSpeed's PipelineEngine asserts ZeRO < 2; TorchTitan runs FSDP2 (ZeRO-3) with PP;
    Megatron's ZeRO-3 (Megatron-FSDP) is not documented with PP."""
    kw = dict(dp=2, pp=2, zero_stage=3, microbatches=256)
    ds = ParallelPlan(**kw, backend="deepspeed").check(QWEN72, H100, 4, WORK)
    assert ds == ["deepspeed does not support zero_stage=3 with pp=2 (its PipelineEngine: "
                  "'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism')"]
    assert ParallelPlan(**kw, backend="fsdp2").check(QWEN72, H100, 4, WORK) == []
    assert ParallelPlan(**kw, backend="torchtitan").check(QWEN72, H100, 4, WORK) == []
    mega = ParallelPlan(**kw).check(QWEN72, H100, 4, WORK)
    assert len(mega) == 1 and mega[0].startswith("megatron does not support zero_stage=3 with "
                                                 "pp=2")
    assert ParallelPlan(dp=4, zero_stage=3, microbatches=128, backend="deepspeed").check(
        QWEN72, H100, 4, WORK) == []                       # without a pipeline: fine


@pytest.mark.parametrize("kw, backend, rule", [
    (dict(dp=2, pp=2, interleave=2, microbatches=256), "deepspeed",
     "deepspeed does not support interleave=2"),
    (dict(dp=4, zero_stage=1, microbatches=128), "fsdp2", "fsdp2 does not support zero_stage=1"),
    (dict(dp=2, tp=2, zero_stage=0, microbatches=256), "fsdp2",
     "fsdp2 does not support zero_stage=0 \\(DDP\\) with dp=2 and tp\\*pp\\*cp=2"),
])
def test_each_backend_names_itself_in_its_rules(kw, backend, rule):
    plan = ParallelPlan(**kw, backend=backend)
    with pytest.raises(ValueError, match=rule):
        plan.validate(QWEN72, H100, None, WORK)


def test_default_backend_is_megatron_and_deepspeed_differs_only_by_interleaving():
    """The default backend keeps the rules applied before backends were named (Megatron's
    ZeRO x PP table equals DeepSpeed's); DeepSpeed's valid plans are Megatron's minus the
    interleaved ones; FSDP2 adds ZeRO-2/3 with pipelines."""
    model, work = model_preset("qwen2.5-7b"), TrainWorkload(global_batch=64, seq_len=4096)
    by = {b: search_plans(model, H100, 16, work, backend=b) for b in TRAINING_BACKENDS}
    assert TRAINING_BACKENDS["megatron"].zero_stages_with_pp == \
        TRAINING_BACKENDS["deepspeed"].zero_stages_with_pp == (0, 1)
    default = search_plans(model, H100, 16, work)
    assert [r.plan for r in default.ranked] == [r.plan for r in by["megatron"].ranked]
    strip = {b: {replace(r.plan, backend="megatron") for r in s.ranked} for b, s in by.items()}
    assert strip["deepspeed"] == {p for p in strip["megatron"] if p.interleave == 1}
    assert not any(p.zero_stage >= 2 and p.pp > 1 for p in strip["megatron"])
    assert any(p.zero_stage == 3 and p.pp > 1 for p in strip["fsdp2"])
    assert not any(p.zero_stage == 1 for p in strip["fsdp2"])


# ---- NVLink domain --------------------------------------------------------------------------
def test_nvl72_preset_against_nvidias_rack_figures():
    """NVIDIA GB200 NVL72 page: per 72-GPU rack FP16/BF16 360 PFLOPS with sparsity (dense is
    half), 13.4 TB HBM3E at 576 TB/s, NVLink 130 TB/s; per 2-GPU Superchip 372 GB at 16 TB/s,
    NVLink 3.6 TB/s (both directions); 4-GPU compute trays."""
    assert NVL72.peak("bf16") == 360e15 / 2 / 72
    assert (NVL72.hbm_bytes, NVL72.hbm_bandwidth_bytes_per_s) == (372e9 / 2, 16e12 / 2)
    assert NVL72.hbm_bytes == pytest.approx(13.4e12 / 72, rel=2e-3)      # the rack's rounding
    assert NVL72.hbm_bandwidth_bytes_per_s == 576e12 / 72
    assert NVL72.intra_node_bandwidth_bytes_per_s == 3.6e12 / 2 / 2
    assert NVL72.intra_node_bandwidth_bytes_per_s == pytest.approx(130e12 / 72 / 2, rel=1e-2)
    assert (NVL72.gpus_per_node, NVL72.nvlink_domain) == (4, 72)
    assert H100.nvlink_domain == H100.gpus_per_node == 8 and H100.nvlink_domain_gpus is None
    assert "ASSUMPTION" in NVL72.sources["inter_node_bandwidth_bytes_per_s"]


def test_tp16_refused_on_h100_accepted_on_nvl72():
    """A TP group must fit in an NVLink domain: 8 GPUs on an HGX H100, 72 on an NVL72 rack
    (DeepSeek-V3's 128 heads let tp reach 16)."""
    plan = ParallelPlan(dp=4, tp=16, sp=True, ep=4, zero_stage=1, microbatches=128)
    assert plan.check(DSV3, H100, 64, WORK) == [
        "tp=16 exceeds nvlink_domain_gpus=8 (a TP group must fit in an NVLink domain)"]
    assert plan.check(DSV3, NVL72, 64, WORK) == []
    assert ParallelPlan(tp=128, sp=True, microbatches=512).check(DSV3, NVL72, None, WORK) == [
        "tp=128 exceeds nvlink_domain_gpus=72 (a TP group must fit in an NVLink domain)"]


def test_groups_inside_the_domain_run_at_nvlink_bandwidth():
    """tp x cp = 4 x 8 = 32 GPUs: one NVL72 domain, so the CP ring runs at NVLink's 900 GB/s;
    the same rack cut into 4-GPU domains sends it over the 50 GB/s network."""
    plan = ParallelPlan(dp=2, tp=4, cp=8, sp=True, ep=2, zero_stage=1, microbatches=256)
    cut = replace(NVL72, nvlink_domain_gpus=None)                 # one 4-GPU tray per domain
    a, b = (train_step_time(QWEN3, hw, plan, WORK).comm_s["cp"] for hw in (NVL72, cut))
    per = WORK.seq_len * 2 * QWEN3.kv_heads * QWEN3.head_size * 2 / 4          # K/V / tp
    ring = (collective_time_s("all_gather", per, 8, 900e9),
            collective_time_s("all_gather", per, 8, 50e9))
    layers = QWEN3.num_hidden_layers * 256 * 3                    # 3 passes per layer and mb
    assert (a, b) == pytest.approx((layers * ring[0], layers * ring[1]), rel=1e-12)


def test_every_node_rule_now_reads_the_nvlink_domain():
    """The rollout TP cap, the data-parallel NVLink ring and the reshard link follow the
    domain: DeepSeek-V3's 1.34 TB of bf16 weights need tp = 16 to leave 30% of 186 GB for the
    KV cache, possible in a 72-GPU domain, capped at the 4-GPU tray otherwise."""
    assert rollout_tp(DSV3, NVL72, 64) == 16
    assert rollout_tp(DSV3, replace(NVL72, nvlink_domain_gpus=None), 64) == 4
    kw = dict(seq_len=4096, micro_batch_size=1, microbatches=1, zero_stage=1)
    dp_update_workdepth("qwen2.5-7b", NVL72, dp=16, link="nvlink", **kw)       # 16 <= 72
    with pytest.raises(ValueError, match="nvlink_domain_gpus=8"):
        dp_update_workdepth("qwen2.5-7b", H100, dp=16, link="nvlink", **kw)


def test_a_larger_domain_never_slows_the_best_plan():
    """Only links change between the 8- and the 72-GPU domain (same chips): every plan's traffic
    runs at least as fast, so the best step can only shrink; on DeepSeek-V3, 64 GPUs, the
    larger domain also admits tp = 16, 32, 64."""
    rows = compare_nvlink_domains(DSV3, WORK, 64)
    assert [r["nvlink_domain"] for r in rows] == [8, 8, 72]
    h100, small, big = rows
    assert h100["hardware"] == H100.name and h100["step_time_s"] is None     # nothing fits
    assert big["step_time_s"] <= small["step_time_s"] and big["num_valid"] > small["num_valid"]
    assert big["on_network"] == () and set(big["on_nvlink"]) >= {"dp", "ep"}
    assert math.isclose(big["memory_per_gpu_gb"] * 1e9, memory_per_gpu(
        DSV3, ParallelPlan(**{k: big[k] for k in ParallelPlan.__dataclass_fields__}),
        WORK).total_bytes, rel_tol=1e-12)


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: ParallelPlan(first_stage_layers=0), "ParallelPlan.first_stage_layers"),
    (lambda: ParallelPlan(last_stage_layers=2.0), "ParallelPlan.last_stage_layers"),
    (lambda: ParallelPlan(backend="colossalai"), "ParallelPlan.backend must be one of"),
    (lambda: training_backend("colossalai"), "backend must be one of"),
    (lambda: search_plans(QWEN72, H100, 8, WORK, backend="x"), "backend must be one of"),
    (lambda: search_plans(QWEN72, H100, 8, WORK, uneven_stages="yes"), "uneven_stages"),
    (lambda: balanced_stage_layers(0, 4), "num_layers"),
    (lambda: balanced_stage_layers(94, 4, interleave=0), "interleave"),
    (lambda: work_balanced_stage_layers(94, 4, last_extra=-1), "last_extra"),
    (lambda: work_balanced_stage_layers(94, 0), "pp"),
    (lambda: ParallelPlan(pp=4).stage_layers(0), "num_hidden_layers"),
    (lambda: replace(H100, nvlink_domain_gpus=12), "nvlink_domain_gpus=12 must be a multiple"),
    (lambda: replace(H100, nvlink_domain_gpus=0), "HardwareSpec.nvlink_domain_gpus"),
    (lambda: compare_nvlink_domains(QWEN72, WORK, 8, domains=()), "domains"),
    (lambda: compare_nvlink_domains(QWEN72, WORK, 8, domains=(6,)), "multiple of"),  # 4-GPU trays
    (lambda: compare_nvlink_domains(QWEN72, WORK, 8, baseline="tpu"), "unknown hardware"),
])
def test_bad_inputs_name_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
