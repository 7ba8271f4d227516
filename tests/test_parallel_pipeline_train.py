"""The GRPO loop with its update on simulated pipeline ranks equals the single-rank loop: the
same rewards over 8 steps for the same seed, losses and weights to float rounding."""
import numpy as np
import pytest

from rlmperf_lite.cost import pipeline_bubble_fraction
from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.parallel.pipeline_train import stage_of_weights, train_grpo_pipeline
from rlmperf_lite.rl import GRPOConfig, train_grpo
from rlmperf_lite.tasks import AdditionTask

CONFIG = GRPOConfig(steps=8, num_prompts=8, group_size=4, seed=0)
# four blocks, so that pp = 2 can interleave v = 2 chunks; a short warm-start keeps it quick
DEEP = GRPOConfig(steps=8, num_prompts=8, group_size=4, seed=0, warmstart_max_steps=60,
                  model=TinyLMConfig(num_layers=4))


@pytest.fixture(scope="module")
def single():
    return train_grpo(CONFIG)


@pytest.fixture(scope="module")
def single_deep():
    return train_grpo(DEEP)


def _assert_same_run(run, single):
    assert [h["reward_mean"] for h in run.history] == [h["reward_mean"] for h in single.history]
    losses = np.array([[h["loss"] for h in r.history] for r in (single, run)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=0, atol=1e-6)      # float32 sums
    for k, v in single.params.items():
        np.testing.assert_allclose(run.params[k], v, rtol=0, atol=1e-6)


@pytest.mark.parametrize("schedule,m", [("gpipe", 2), ("1f1b", 4), ("1f1b", 32)])
def test_pipeline_run_has_the_single_rank_learning_curve(single, schedule, m):
    run = train_grpo_pipeline(CONFIG, pp=2, microbatches=m, schedule=schedule,
                              base_params=single.base_params)
    _assert_same_run(run, single)
    last = run.history[-1]
    assert last["bubble_fraction"] == pipeline_bubble_fraction(2, m)      # (p - 1) / m


@pytest.mark.parametrize("pp,schedule,m,v", [(2, "interleaved", 2, 2), (4, "1f1b", 8, 1),
                                             (2, "interleaved", 4, 2)])
def test_deeper_pipelines_and_interleaving_keep_the_curve(single_deep, pp, schedule, m, v):
    run = train_grpo_pipeline(DEEP, pp=pp, microbatches=m, schedule=schedule, interleave=v,
                              base_params=single_deep.base_params)
    _assert_same_run(run, single_deep)
    assert run.history[0]["bubble_fraction"] == pipeline_bubble_fraction(pp, m, v)


def test_pp_bytes_are_every_activation_and_gradient_across_a_boundary(single):
    """pp = 2: rank 0 sends each activation (n T D float32) forward, rank 1 its gradient back;
    plus the ring all-reduce of the squared norm (one float64: 2 (n - 1) / n x 8 bytes)."""
    run = train_grpo_pipeline(CONFIG, pp=2, microbatches=4, base_params=single.base_params)
    n, D = 8 * 4, CONFIG.model.hidden_size
    for h in run.history:
        T = AdditionTask().prompt_len + h["response_width"]           # this step's tokens
        assert h["pp_bytes"] == n * T * D * 4 + 2 * 1 / 2 * 8


def test_each_rank_holds_its_stages_weights():
    """Embeddings on rank 0, head on the last; v = 2 chunks of pp = 2 over 4 blocks put blocks
    0 and 2 on rank 0, 1 and 3 on rank 1 (Narayanan et al. 2021 §2.2.2)."""
    names = ["wte", "wpe", "h0.wo", "h1.wo", "h2.wo", "h3.wo", "ln_f", "lm_head"]
    owner = stage_of_weights(dict.fromkeys(names), 4, 2, 2)
    assert owner == {"wte": 0, "wpe": 0, "h0.wo": 0, "h1.wo": 1, "h2.wo": 0, "h3.wo": 1,
                     "ln_f": 1, "lm_head": 1}
    assert stage_of_weights(dict.fromkeys(names), 4, 2)["h1.wo"] == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(config=GRPOConfig(micro_batch_size=4)), "micro_batch_size"),
    (dict(config=GRPOConfig.variant("dapo")), "dynamic_sampling"),
    (dict(config={}), "GRPOConfig"),
    (dict(pp=3), "pp=3"),
    (dict(microbatches=5), "microbatches must be an int >= 1 dividing"),
    (dict(schedule="zb"), "schedule must be one of"),
    (dict(interleave=2), "interleave=2 needs schedule='interleaved'"),
    (dict(schedule="interleaved", microbatches=1), "must be a multiple of pp=2"),
])
def test_bad_arguments_are_refused_with_the_name(kwargs, match):
    kw = {"config": CONFIG, "pp": 2, "microbatches": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        train_grpo_pipeline(kw.pop("config"), **kw)
