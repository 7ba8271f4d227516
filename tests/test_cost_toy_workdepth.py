"""The toy's GRPO step in the work-depth model from per-op costs measured on this CPU (book
section sec-workdepth-your-machine): the composition against a hand count, the FLOPs against
the loop's own counter, the bracket against a measured step of a tiny run, bad input."""
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.cost.toy_workdepth import (ToyOpCosts, best_of_s, measure_toy_op_costs,
                                             measured_step_s, toy_step_prediction,
                                             toy_step_workdepth)
from rlmperf_lite.nn import TinyLMConfig, init_params
from rlmperf_lite.rl import GRPOConfig, PPOConfig, train_grpo
from rlmperf_lite.tasks import AdditionTask

MS = 1e-3
# injected per-op costs in ms, round numbers: a hand count needs no timing
COSTS = ToyOpCosts(
    response_width=5, prefill_batch_s=2 * MS, prefill_one_s=0.5 * MS,
    decode_step_batch_s=1 * MS, decode_step_one_s=0.25 * MS,
    reward_batch_s=0.4 * MS, reward_one_s=0.01 * MS,
    ref_logprobs_batch_s=3 * MS, ref_logprobs_one_s=0.5 * MS,
    advantages_batch_s=0.05 * MS, advantages_group_s=0.02 * MS,
    micro_batch_s=(4 * MS, 4 * MS, 2 * MS), micro_batch_one_s=0.6 * MS,
    loss_s=0.1 * MS, optimizer_s=0.3 * MS,
    flops={"prefill": 1e6, "decode_step": 2e5, "ref_logprobs": 3e6, "update": 9e6})
# a tiny model and batch, no warm-start: the smoke runs take well under a second
TINY = GRPOConfig(steps=6, seed=0, num_prompts=4, group_size=2, lr_warmup_steps=0,
                  model=TinyLMConfig(hidden_size=32, intermediate_size=64, num_heads=2))


def _tiny_params(config=TINY):
    return init_params(config.model, np.random.default_rng(0))


def test_composition_is_the_hand_count():
    """By hand, R = 5 (4 decode steps), three micro-batches, a KL term:
    W = 2 + 4 x 1 + 0.4 + 3 + 0.05 + (4 + 4 + 2) + 0.1 + 0.3 = 19.85 ms,
    D = 0.5 + 4 x 0.25 + 0.01 + 0.5 + 0.02 + 0.6 + 0.3 = 2.93 ms."""
    wd = toy_step_workdepth(COSTS, measured_s=21 * MS)
    by_hand = {"rollout_prefill": (2, 0.5), "rollout_decode": (4, 1.0), "reward": (0.4, 0.01),
               "ref_logprobs": (3, 0.5), "advantages": (0.05, 0.02),
               "actor_update": (10.4, 0.9)}
    assert [p.name for p in wd.phases] == list(by_hand)
    for name, (w, d) in by_hand.items():
        assert wd.phase(name).work_gpu_s == pytest.approx(w * MS, rel=1e-12), name
        assert wd.phase(name).depth_s == pytest.approx(d * MS, rel=1e-12), name
    assert wd.work_gpu_s == pytest.approx(19.85 * MS, rel=1e-12)
    assert wd.depth_s == pytest.approx(2.93 * MS, rel=1e-12)
    assert wd.processors == 1 and all(p.processors == 1 for p in wd.phases)
    assert wd.brent_lower_s == pytest.approx(19.85 * MS) and wd.brent_upper_s == pytest.approx(
        22.78 * MS)
    assert wd.predicted_s == wd.work_gpu_s                   # one core: the loop takes W
    assert wd.error == pytest.approx((21 - 19.85) / 21, rel=1e-12)
    assert wd.brackets() and wd.parallelism == pytest.approx(19.85 / 2.93)
    assert wd.phase("rollout_decode").work_flops == 4 * 2e5
    assert wd.work_flops == 1e6 + 8e5 + 3e6 + 9e6


def test_more_processors_divide_the_work_and_leave_the_depth():
    """p = 4: each phase's lower bound is max(W_i / 4, D_i), the upper W_i / 4 + D_i; the
    loop's own schedule (one core) still takes W, above the 4-core upper bound."""
    wd = toy_step_workdepth(COSTS, processors=4, measured_s=20 * MS)
    lower = (0.5 + 1.0 + 0.1 + 0.75 + 0.02 + 2.6) * MS      # max(W_i / 4, D_i), phase by phase
    assert wd.brent_lower_s == pytest.approx(lower, rel=1e-12)
    assert wd.brent_upper_s == pytest.approx((19.85 / 4 + 2.93) * MS, rel=1e-12)
    assert wd.predicted_s == pytest.approx(19.85 * MS)
    assert wd.predicted_s > wd.brent_upper_s
    assert not wd.brackets(0.25)                            # the loop does not use 4 cores


def test_no_kl_no_reference_pass_and_width_one_no_decode():
    no_ref = replace(COSTS, ref_logprobs_batch_s=0.0, ref_logprobs_one_s=0.0, response_width=1)
    names = [p.name for p in toy_step_workdepth(no_ref).phases]
    assert names == ["rollout_prefill", "reward", "advantages", "actor_update"]


def test_best_of_takes_the_least_of_the_rounds():
    calls = []
    t = best_of_s({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3)
    assert calls == ["a", "b"] + ["a", "b"] * 3             # a warm-up, then turns
    assert set(t) == {"a", "b"} and all(0 <= v < 0.01 for v in t.values())


def test_op_flops_are_the_loops_own_counted_flops():
    """The FLOPs of the measured ops, composed for a step of width R, equal what the loop's
    counter (rlmperf_lite.nn.COUNTER, in each history row) counted for a step of that width:
    prefill, decode, and the update's forward and backward, micro-batches summed."""
    config = replace(TINY, micro_batch_size=3, steps=3)     # 8 rows: micro-batches 3, 3, 2
    run = train_grpo(config, base_params=_tiny_params())
    row = run.history[-1]
    costs = measure_toy_op_costs(config, run.params, response_width=row["response_width"],
                                 repeats=1)
    assert len(costs.micro_batch_s) == 3
    wd = toy_step_workdepth(costs)
    assert wd.phase("rollout_prefill").work_flops == row["prefill_flops"]
    if row["response_width"] > 1:
        assert wd.phase("rollout_decode").work_flops == row["decode_flops"]
    assert wd.phase("actor_update").work_flops == pytest.approx(
        row["train_forward_flops"] + row["train_backward_flops"], rel=1e-12)


def test_bracket_holds_for_a_measured_tiny_run():
    """Smoke run: a tiny GRPO run with a KL term, its fastest step of the median width against
    Brent's bounds from the per-op costs measured right after. Loose: timing on a shared
    machine, and at about a millisecond a step the untimed glue of the loop weighs more."""
    config = replace(TINY, kl_coef=0.01)
    run = train_grpo(config, base_params=_tiny_params())
    wd = toy_step_prediction(config, run.history, run.params, repeats=5)
    assert wd.processors == 1 and "ref_logprobs" in [p.name for p in wd.phases]
    assert 0 < wd.depth_s < wd.work_gpu_s                    # one core: the depth never binds
    for p in wd.phases:
        assert p.depth_s <= p.work_gpu_s * 1.5, p            # alone costs at most the batch's
    assert wd.brackets(tolerance=0.5), (wd.brent_lower_s, wd.measured_s, wd.brent_upper_s)
    assert abs(wd.error) < 0.5


@pytest.mark.parametrize("change,match", [
    ({"prefill_batch_s": -1.0}, "prefill_batch_s"),
    ({"decode_step_one_s": float("nan")}, "decode_step_one_s"),
    ({"micro_batch_s": ()}, "micro_batch_s"),
    ({"micro_batch_s": [1e-3]}, "micro_batch_s"),
    ({"micro_batch_s": (1e-3, -1e-3)}, "micro_batch_s"),
    ({"response_width": 0}, "response_width"),
])
def test_bad_costs_raise(change, match):
    with pytest.raises(ValueError, match=match):
        replace(COSTS, **change)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="costs must be a ToyOpCosts"):
        toy_step_workdepth({"prefill_batch_s": 1.0})
    with pytest.raises(ValueError, match="processors"):
        toy_step_workdepth(COSTS, processors=0)
    with pytest.raises(ValueError, match="measured_s"):
        toy_step_workdepth(COSTS, measured_s=-1.0)
    with pytest.raises(ValueError, match="measured_s is None"):
        toy_step_workdepth(COSTS).error
    with pytest.raises(ValueError, match="tolerance"):
        toy_step_workdepth(COSTS, measured_s=1.0).brackets(-0.1)
    params = _tiny_params()
    with pytest.raises(ValueError, match="GRPOConfig"):
        measure_toy_op_costs(PPOConfig(), params)
    with pytest.raises(ValueError, match="dynamic_sampling"):
        measure_toy_op_costs(replace(TINY, dynamic_sampling=True), params)
    with pytest.raises(ValueError, match="response_width"):
        measure_toy_op_costs(TINY, params, response_width=TINY.max_new_tokens + 1)
    with pytest.raises(ValueError, match="repeats"):
        measure_toy_op_costs(TINY, params, repeats=0)
    with pytest.raises(ValueError, match="lacks"):
        measure_toy_op_costs(TINY, {"wte": params["wte"]}, task=AdditionTask())
    with pytest.raises(ValueError, match="history"):
        measured_step_s([])
    with pytest.raises(ValueError, match="history"):
        measured_step_s([{"step_s": 1.0}])
    with pytest.raises(ValueError, match="no step .* response_width=3"):
        measured_step_s([{"step_s": 1.0, "response_width": 4}], response_width=3)
