"""GRPO learns the chain-of-thought toy (issue 19): with the design's defaults
(``GRPOConfig.for_cot()``, ``tasks/data/cot.json``) one seed goes from a base model that is
right about half the time, answering mostly directly, to held-out greedy accuracy >= 0.95 with
the chain written on every problem. About 1.5 minutes on one core."""
import pytest

from rlmperf_lite.rl import GRPOConfig, evaluate_details, train_grpo
from rlmperf_lite.tasks import CoTTask


@pytest.mark.slow
def test_grpo_learns_to_think_on_the_cot_task():
    c, task = GRPOConfig.for_cot(seed=0), CoTTask()
    result = train_grpo(c, task=task)
    base = evaluate_details(result.base_params, c.model, task)
    after = evaluate_details(result.params, c.model, task)
    # the warm-start stops early: a partial base model that mostly answers directly
    assert 0.2 < base["accuracy"] < 0.8 and base["cot_share"] < 0.5
    assert base["response_len_mean"] < 8
    # RL finds that the chain pays: accuracy, length and chain share all rise
    assert after["accuracy"] >= 0.95
    assert after["cot_share"] >= 0.95
    assert after["response_len_mean"] > 10
