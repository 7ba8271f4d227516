"""Work and depth of a real RL step; the expected longest of G responses (stragglers)."""
import math

import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, estimate_rl_step, expected_max_length, forward_depth,
                               rl_step_workdepth)
from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.cost.workdepth import ShapeCosts

BASE = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64)


def test_expected_max_of_exponentials_is_the_harmonic_number():
    """The maximum of G independent Exp(1) draws has mean H_G = 1 + 1/2 + ... + 1/G (Rényi
    1953): the straggler of a group grows like log G for an exponential tail."""
    n = 200_000
    x = -np.log(1 - (np.arange(n) + 0.5) / n)            # Exp(1) quantiles
    for G in (1, 2, 4, 16, 64):
        harmonic = sum(1 / k for k in range(1, G + 1))
        assert expected_max_length(x, G) == pytest.approx(harmonic, rel=2e-3)
    assert expected_max_length([5, 5, 5], 8) == 5
    grid = x.reshape(1000, 200)                          # a 2-D array is its flattened sample
    assert expected_max_length(grid, 16) == expected_max_length(x, 16)
    with pytest.raises(ValueError, match="lengths"):
        expected_max_length([], 4)
    with pytest.raises(ValueError, match="lengths"):
        expected_max_length(np.ones((2, 2, 2)), 4)


def test_toy_forward_depth_matches_the_chapter_1_calculator():
    cfg = TinyLMConfig()
    old = ShapeCosts(**{**cfg.workdepth_kwargs()}, attention="dense")
    m = ModelConfig.from_tiny_lm(cfg)
    for n in (1, 6, 11, 16):
        assert forward_depth(m, n) == old.fwd_depth(n) + old.sample_d


def test_decode_depth_grows_with_response_and_layers_not_with_processors():
    short = rl_step_workdepth("grpo", **{**BASE, "response_len": 1024})
    long = rl_step_workdepth("grpo", **BASE)
    ratio = long.phase("rollout_decode").depth_rounds / short.phase("rollout_decode").depth_rounds
    assert 3.9 < ratio < 4.1                               # ~ R
    many = rl_step_workdepth("grpo", processors=10**12, **BASE)
    assert many.phase("rollout_decode").depth_rounds == long.phase("rollout_decode").depth_rounds
    assert many.phase("rollout_decode").lower_rounds == many.phase("rollout_decode").depth_rounds
    for ph in many.phases:                               # Brent's two terms, W/p and D
        assert ph.work_rounds == ph.work_flops / 10**12
        assert ph.brent_rounds == ph.work_rounds + ph.depth_rounds
    # decode: little of the work, most of the depth; training: the reverse
    assert long.phase("rollout_decode").depth_rounds > 0.9 * long.depth_rounds
    assert long.phase("actor_update").work_flops > long.phase("rollout_decode").work_flops
    est = estimate_rl_step("grpo", **BASE)
    assert long.work_flops == pytest.approx(est.flops)


def test_moe_layers_add_routing_depth():
    dense = forward_depth(ModelConfig(vocab_size=1000, hidden_size=512, num_hidden_layers=4,
                                      num_attention_heads=8, intermediate_size=2048), 128)
    moe = forward_depth(ModelConfig(vocab_size=1000, hidden_size=512, num_hidden_layers=4,
                                    num_attention_heads=8, intermediate_size=2048, num_experts=64,
                                    num_experts_per_tok=8, moe_intermediate_size=256), 128)
    assert moe > dense
    assert math.isfinite(moe)


def test_an_estimate_gives_its_work_and_depth():
    est = estimate_rl_step("ppo", kl_coef=0.01, **BASE)
    wd = est.workdepth(processors=64)
    assert wd == rl_step_workdepth("ppo", processors=64, kl_coef=0.01, **BASE)
    assert [p.name for p in wd.phases] == [p.name for p in est.phases]
    assert [p.work_flops for p in wd.phases] == [p.flops for p in est.phases]
