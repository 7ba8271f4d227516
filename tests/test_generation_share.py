"""Generation's share of the toy's step (book section sec-workdepth-your-machine): the
prediction's pieces against an independent sum of the measured op costs, on the chain-of-thought
task; the measured share from a history by hand; the sweep's rows and bad input; the addition
path unchanged; the CPU-against-GPU chart's data against the library's estimate."""
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.book.share_views import (GPU_SHARE_STEP, gpu_share_rows,
                                           share_by_batch_chart, share_rows)
from rlmperf_lite.cost import (estimate_rl_step, generation_share_sweep,
                               measure_toy_op_costs, measured_generation_share,
                               toy_step_workdepth)
from rlmperf_lite.nn import init_params
from rlmperf_lite.rl import GRPOConfig, train_grpo
from rlmperf_lite.tasks import AdditionTask, CoTTask

MS = 1e-3
# a few steps of the chain-of-thought design from random weights: no warm-start, well under 1 s
COT = GRPOConfig.for_cot(steps=3, seed=0, num_prompts=2)


def _cot_params():
    return init_params(COT.model, np.random.default_rng(0))


def _independent_work_s(c) -> float:
    """W of the module docstring, summed field by field from the costs (c a ToyOpCosts)."""
    return (c.prefill_batch_s + (c.response_width - 1) * c.decode_step_batch_s
            + c.reward_batch_s + c.ref_logprobs_batch_s + c.advantages_batch_s
            + sum(c.micro_batch_s) + c.loss_s + c.optimizer_s)


def test_cot_work_is_the_sum_of_its_op_costs_and_the_share_its_generation_part():
    task = CoTTask()
    costs = measure_toy_op_costs(COT, _cot_params(), task=task, response_width=12, repeats=1)
    wd = toy_step_workdepth(costs)
    W = _independent_work_s(costs)
    assert wd.work_gpu_s == pytest.approx(W, rel=1e-12)
    gen = costs.prefill_batch_s + 11 * costs.decode_step_batch_s
    assert wd.predicted_generation_share == pytest.approx(gen / W, rel=1e-12)
    assert 0 < wd.predicted_generation_share < 1
    assert wd.measured_generation_share is None


def test_cot_op_flops_are_the_loops_own_counted_flops():
    """On the chain-of-thought task the measured ops are the loop's: their FLOPs at the width
    of a step equal what the loop's counter counted for that step (prompts of 7 tokens)."""
    task = CoTTask()
    run = train_grpo(COT, task=task, base_params=_cot_params())
    row = run.history[-1]
    wd = toy_step_workdepth(measure_toy_op_costs(COT, run.params, task=task, repeats=1,
                                                 response_width=row["response_width"]))
    assert wd.phase("rollout_prefill").work_flops == row["prefill_flops"]
    assert wd.phase("rollout_decode").work_flops == row["decode_flops"]
    assert wd.phase("actor_update").work_flops == pytest.approx(
        row["train_forward_flops"] + row["train_backward_flops"], rel=1e-12)


def test_addition_path_unchanged():
    """No task is the addition task: the same op FLOPs as passing it, and the addition
    prompts' shape (6 tokens) in the prefill's FLOPs, not the CoT task's (7)."""
    config = GRPOConfig(steps=2, seed=0, num_prompts=4, group_size=2)
    params = init_params(config.model, np.random.default_rng(0))
    default = measure_toy_op_costs(config, params, response_width=3, repeats=1)
    explicit = measure_toy_op_costs(config, params, task=AdditionTask(), response_width=3,
                                    repeats=1)
    assert default.flops == explicit.flops and default.response_width == 3
    run = train_grpo(config, base_params=params)
    assert run.history[0]["prefill_flops"] == default.flops["prefill"]


def test_measured_share_is_the_median_rollout_share_at_the_width():
    rows = [{"step_s": 10.0, "rollout_s": 4.0, "response_width": 5},
            {"step_s": 8.0, "rollout_s": 2.0, "response_width": 5},
            {"step_s": 9.0, "rollout_s": 3.0, "response_width": 5},
            {"step_s": 1.0, "rollout_s": 0.9, "response_width": 3}]
    assert measured_generation_share(rows) == pytest.approx(1 / 3)      # 0.4, 0.25, 1/3
    assert measured_generation_share(rows, response_width=3) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="response_width=4"):
        measured_generation_share(rows, response_width=4)
    with pytest.raises(ValueError, match="rollout_s"):
        measured_generation_share([{"step_s": 1.0, "response_width": 2}])
    with pytest.raises(ValueError, match="measured_generation_share"):
        toy_step_workdepth(measure_toy_op_costs(COT, _cot_params(), task=CoTTask(),
                                                response_width=2, repeats=1),
                           measured_generation_share=1.5)


def test_sweep_rows_from_a_shared_start():
    """Two batches from one start: each row's pieces in range, R a width the loop ran. No
    comparison of the two shares: on a loaded machine a few steps' share and a few rounds'
    op costs swing by 2x (measured); bench/run.py --share sets them side by side."""
    rows = generation_share_sweep([8, 32], config=COT, steps=3, repeats=2,
                                  base_params=_cot_params())
    assert [r["sequences"] for r in rows] == [8, 32]
    for r in rows:
        assert 0 < r["predicted_share"] < 1 and 0 < r["measured_share"] < 1
        assert 0 < r["verifier_share"] < r["predicted_share"]
        assert 1 <= r["response_width"] <= COT.max_new_tokens
        assert r["predicted_s"] > 0 and r["measured_s"] > 0


@pytest.mark.parametrize("kwargs,match", [
    ({"sequences": []}, "sequences must be a non-empty list"),
    ({"sequences": 16}, "sequences must be a non-empty list"),
    ({"sequences": [16, 18]}, "not a multiple of group_size=4"),
    ({"sequences": [2]}, "sequences"),
    ({"sequences": [16.0]}, "sequences"),
    ({"steps": 0}, "steps"),
    ({"repeats": 0}, "repeats"),
    ({"config": {"num_prompts": 4}}, "config must be a GRPOConfig"),
])
def test_sweep_bad_input_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generation_share_sweep(**{"sequences": [16], **kwargs})


def test_sweep_refuses_dynamic_sampling():
    with pytest.raises(ValueError, match="dynamic_sampling"):
        generation_share_sweep([8], config=replace(COT, dynamic_sampling=True), steps=1,
                               repeats=1, base_params=_cot_params())


def test_gpu_rows_are_the_library_estimate_and_fall_with_the_batch():
    """At 8 sequences per GPU (Lab 6's 32 prompts x 16 on 64 GPUs) the profile's lower bound is
    the estimate's step, so its share is the estimate's generation_time_share."""
    rows = gpu_share_rows()
    by_s = {r["sequences"]: r["share"] for r in rows}
    est = estimate_rl_step("grpo", prompts=32, **GPU_SHARE_STEP)
    assert by_s[8] == pytest.approx(est.generation_time_share, abs=1e-9)
    shares = [r["share"] for r in rows]
    assert shares == sorted(shares, reverse=True) and 0 < shares[-1] < 0.5 < shares[0] < 1
    assert {r["machine"] for r in rows} == {"GPU (h100), qwen2.5-7b"}
    with pytest.raises(ValueError, match="sequences_per_gpu"):
        gpu_share_rows([])
    with pytest.raises(ValueError, match="sequences_per_gpu"):
        gpu_share_rows([0])


def test_chart_data_holds_both_machines_and_every_point():
    cpu = [{"sequences": 16, "predicted_share": 0.4, "measured_share": 0.42},
           {"sequences": 64, "predicted_share": 0.3, "measured_share": 0.33}]
    gpu = gpu_share_rows([8, 128])
    data = share_rows(cpu, gpu)
    assert len(data) == 2 * len(cpu) + len(gpu)
    assert {(d["machine"], d["series"]) for d in data} == {
        ("CPU (this machine), toy", "predicted"), ("CPU (this machine), toy", "measured"),
        ("GPU (h100), qwen2.5-7b", "library")}
    assert [d["share"] for d in data if d["series"] == "measured"] == [0.42, 0.33]
    spec = share_by_batch_chart(cpu, gpu).to_dict()
    assert spec["facet"]["column"]["field"] == "machine"
    assert spec["data"]["values"] == data
    with pytest.raises(ValueError, match="cpu_rows"):
        share_rows([{"sequences": 16, "predicted_share": 0.4}], gpu)
    with pytest.raises(ValueError, match="gpu_rows"):
        share_rows(cpu, [])
