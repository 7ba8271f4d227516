"""ParallelPlan's rules (Megatron-Core, DeepSpeed) each raise a ValueError that names the rule
(book Chapters 7-9)."""
import re

import pytest

from rlmperf_lite.cost import ParallelPlan, TrainWorkload, hardware_preset, model_preset

H100 = hardware_preset("h100")
QWEN72 = model_preset("qwen2.5-72b")              # 64 heads, 8 KV heads, 80 layers, dense
QWEN3_MOE = model_preset("qwen3-235b-a22b")       # 64 heads, 4 KV heads, 94 layers, 128 experts
WORK = TrainWorkload(global_batch=512, seq_len=4096, micro_batch_size=1)


def test_a_valid_plan_has_no_broken_rule():
    plan = ParallelPlan(dp=16, tp=8, pp=8, sp=True, zero_stage=1, microbatches=32,
                        interleave=2, recompute="selective")
    assert plan.gpus == 1024
    assert plan.check(QWEN72, H100, 1024, WORK) == []
    assert plan.validate(QWEN72, H100, 1024, WORK) is plan


@pytest.mark.parametrize("plan, gpus, rule", [
    (ParallelPlan(tp=3, dp=1), None, "tp=3 does not divide num_attention_heads=64"),
    (ParallelPlan(tp=16, dp=2, microbatches=256), 32, "tp=16 does not divide "
                                                       "num_key_value_heads=8"),
    (ParallelPlan(tp=16, dp=2, microbatches=256), 32, "tp=16 exceeds nvlink_domain_gpus=8"),
    (ParallelPlan(pp=3, dp=1, microbatches=512), 3, "pp=3 does not divide num_hidden_layers=80"),
    (ParallelPlan(pp=8, interleave=3, dp=1, microbatches=512), 8,
     "pp\\*interleave=24 does not divide num_hidden_layers=80"),
    (ParallelPlan(dp=8, ep=2, microbatches=64), 8, "ep=2 needs a MoE model"),
    (ParallelPlan(dp=8, tp=2, microbatches=64), 8, "dp\\*tp\\*pp\\*cp=16 != gpus=8"),
    (ParallelPlan(dp=4, tp=1, sp=True, microbatches=128), 4, "sp=True needs tp > 1"),
    (ParallelPlan(dp=2, pp=2, zero_stage=3, microbatches=256), 4, "megatron does not support "
                                                                  "zero_stage=3 with pp=2"),
    (ParallelPlan(dp=2, pp=8, interleave=2, microbatches=256), 16, None),          # valid
    (ParallelPlan(dp=64, pp=8, microbatches=4), 512, "microbatches=4 != global_batch"),
    (ParallelPlan(dp=128, pp=8, microbatches=4), 1024, "microbatches=4 < pp=8"),
    (ParallelPlan(dp=3, microbatches=170), 3, "global_batch=512 is not divisible by "
                                              "dp\\*micro_batch_size=3"),
    (ParallelPlan(dp=1, cp=3, microbatches=512), 3, "seq_len=4096 is not divisible by 2\\*cp=6"),
])
def test_each_rule_raises_a_value_error_naming_it(plan, gpus, rule):
    if rule is None:
        plan.validate(QWEN72, H100, gpus, WORK)
        return
    assert any(re.search(rule, r) for r in plan.check(QWEN72, H100, gpus, WORK))
    with pytest.raises(ValueError, match=rule):
        plan.validate(QWEN72, H100, gpus, WORK)


def test_moe_rules():
    """Megatron-Core: ep divides num_experts and dp*cp; MoE with tp > 1 needs sequence
    parallelism; tp must divide the 4 KV heads of Qwen3-235B-A22B."""
    ok = ParallelPlan(dp=64, tp=4, pp=2, cp=2, ep=32, sp=True, microbatches=8)
    assert ok.check(QWEN3_MOE, H100, 1024, WORK) == []
    for plan, rule in [
        (ParallelPlan(dp=128, tp=4, pp=2, ep=256, sp=True, microbatches=4),
         "ep=256 does not divide num_experts=128"),
        (ParallelPlan(dp=4, ep=8, microbatches=128), "ep=8 does not divide dp\\*cp=4"),
        (ParallelPlan(dp=4, tp=2, microbatches=128), "needs sp=True"),
        (ParallelPlan(dp=1, tp=8, sp=True, microbatches=512), "num_key_value_heads=4"),
    ]:
        with pytest.raises(ValueError, match=rule):
            plan.validate(QWEN3_MOE, H100, None, WORK)


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=0), "ParallelPlan.tp"), (dict(dp=2.0), "ParallelPlan.dp"),
    (dict(zero_stage=4), "ParallelPlan.zero_stage"), (dict(sp=1), "ParallelPlan.sp"),
    (dict(recompute="some"), "ParallelPlan.recompute"), (dict(ep=True), "ParallelPlan.ep"),
])
def test_bad_fields_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ParallelPlan(**kwargs)
    with pytest.raises(ValueError, match="TrainWorkload.seq_len"):
        TrainWorkload(global_batch=8, seq_len=0)


def test_check_rejects_wrong_types():
    with pytest.raises(ValueError, match="model"):
        ParallelPlan().check("qwen2.5-72b", H100)
    with pytest.raises(ValueError, match="workload"):
        ParallelPlan().check(QWEN72, H100, workload=(512, 4096))


def test_microbatches_per_rank():
    """m = B / (dp b): 512 sequences on 16 ranks, 4 per micro-batch -> 8; at least 1."""
    from rlmperf_lite.cost import TrainWorkload
    wl = TrainWorkload(global_batch=512, seq_len=1024, micro_batch_size=4)
    assert wl.microbatches_per_rank(16) == 8 and wl.microbatches_per_rank(1024) == 1
    with pytest.raises(ValueError, match="dp must be an int >= 1"):
        wl.microbatches_per_rank(0)
