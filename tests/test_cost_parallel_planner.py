"""The plan search: vectorised costs equal the scalar functions plan by plan, rejections carry
their reasons, and the best plan behaves sensibly as GPUs are added (book Chapter 9)."""
import numpy as np
import pytest

from rlmperf_lite.cost import (ParallelPlan, TrainWorkload, hardware_preset, memory_per_gpu,
                               model_preset, search_plans, train_step_time)

H100 = hardware_preset("h100")
QWEN72 = model_preset("qwen2.5-72b")
WORK = TrainWorkload(global_batch=512, seq_len=4096)


@pytest.fixture(scope="module")
def dense():
    return search_plans(QWEN72, H100, 256, WORK)


@pytest.fixture(scope="module")
def moe():
    return search_plans(model_preset("qwen3-30b-a3b"), H100, 64,
                        TrainWorkload(global_batch=256, seq_len=4096))


def test_ranked_and_rejected_partition_the_candidates(dense):
    assert dense.num_valid == len(dense.ranked) > 0
    assert dense.num_valid + len(dense.rejected) == dense.num_enumerated
    times = [r.step_time_s for r in dense.ranked]
    assert times == sorted(times)
    assert dense.best is dense.ranked[0]
    row = dense.table(limit=3)[0]
    assert set(row) >= {"dp", "tp", "pp", "cp", "ep", "sp", "zero_stage", "microbatches",
                        "interleave", "recompute", "step_time_s", "memory_per_gpu_gb",
                        "comm_share", "bubble_share"}
    assert len(dense.table(limit=3)) == 3


@pytest.mark.parametrize("which", ["dense", "moe"])
def test_vectorised_costs_equal_the_scalar_functions(which, request):
    """Every sampled valid plan: step time and memory from the arrays = train_step_time and
    memory_per_gpu called on that plan alone."""
    search = request.getfixturevalue(which)
    model = QWEN72 if which == "dense" else model_preset("qwen3-30b-a3b")
    work = WORK if which == "dense" else TrainWorkload(global_batch=256, seq_len=4096)
    rng = np.random.default_rng(0)
    for k in rng.choice(len(search.ranked), size=min(40, len(search.ranked)), replace=False):
        r = search.ranked[k]
        t = train_step_time(model, H100, r.plan, work)
        assert r.step_time_s == pytest.approx(t.total_s, rel=1e-12)
        assert r.comm_share == pytest.approx(t.comm_share, rel=1e-9, abs=1e-15)
        assert r.bubble_share == pytest.approx(t.bubble_share, rel=1e-9, abs=1e-15)
        assert r.memory_per_gpu_bytes == pytest.approx(
            memory_per_gpu(model, r.plan, work).total_bytes, rel=1e-12)
        assert r.memory_per_gpu_bytes <= H100.hbm_bytes


def test_rejections_carry_their_reasons(dense):
    """One plan out of memory (72B on pure data parallelism: 16 bytes x 72.7e9 per GPU), one
    invalid split (tp = 16 breaks two rules), each with its reason(s)."""
    reasons = {plan: why for plan, why in dense.rejected}
    oom = reasons[ParallelPlan(dp=256, microbatches=2)]
    assert len(oom) == 1 and oom[0].startswith("out of memory: ")
    gb = float(oom[0].split()[3])
    assert gb > 16 * QWEN72.num_params() / 1e9 and oom[0].endswith("GB > 80 GB")
    split = reasons[ParallelPlan(dp=16, tp=16, microbatches=32)]
    assert "tp=16 exceeds nvlink_domain_gpus=8 (a TP group must fit in an NVLink domain)" in split
    assert any("does not divide num_key_value_heads=8" in r for r in split)
    for plan, why in dense.rejected:
        assert why and plan.gpus == 256


def test_more_gpus_never_slow_the_best_plan():
    """What we test: for a fixed global batch, the best predicted step time does not grow as
    the GPUs double (checked on these grids; not a theorem of the model — the divisibility
    rules could in principle remove every good plan at some size)."""
    for name, batch, sizes in [("qwen2.5-7b", 256, (8, 16, 32, 64, 128, 256)),
                               ("qwen3-30b-a3b", 256, (8, 16, 32, 64, 128))]:
        m, work = model_preset(name), TrainWorkload(global_batch=batch, seq_len=4096)
        best = [search_plans(m, H100, g, work).best.step_time_s for g in sizes]
        assert all(b2 <= b1 for b1, b2 in zip(best, best[1:])), (name, best)


def test_less_memory_only_removes_plans(dense):
    """Lowering memory_fraction rejects more plans and never finds a faster best plan."""
    tight = search_plans(QWEN72, H100, 256, WORK, memory_fraction=0.5)
    assert tight.num_valid < dense.num_valid
    assert tight.best.step_time_s >= dense.best.step_time_s
    assert all(r.memory_per_gpu_bytes <= 0.5 * H100.hbm_bytes for r in tight.ranked)


def test_options_and_bad_inputs():
    only = search_plans(QWEN72, H100, 64, WORK, zero_stages=(1,), recompute=("full",),
                        sp=(True,), interleave=(1,))
    assert {(r.plan.zero_stage, r.plan.recompute, r.plan.interleave) for r in only.ranked} == \
        {(1, "full", 1)}
    with pytest.raises(ValueError, match="zero_stages"):
        search_plans(QWEN72, H100, 64, WORK, zero_stages=(5,))
    with pytest.raises(ValueError, match="memory_fraction"):
        search_plans(QWEN72, H100, 64, WORK, memory_fraction=0)
    with pytest.raises(ValueError, match="gpus"):
        search_plans(QWEN72, H100, 0, WORK)
    with pytest.raises(ValueError, match="workload"):
        search_plans(QWEN72, H100, 64, (512, 4096))
