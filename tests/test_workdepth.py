"""The work-depth calculator: counted vs predicted FLOPs, limiting cases, units, bad inputs."""
import math

import numpy as np
import pytest

from rlmperf_lite.nn import (
    COUNTER,
    TinyLMConfig,
    generate,
    init_params,
    logps_backward,
    logps_forward,
)
from rlmperf_lite.tasks import AdditionTask
from rlmperf_lite.cost import grpo_step_workdepth

TOY = dict(num_layers=2, hidden_size=64, num_heads=4, vocab_size=14, intermediate_size=256,
           mlp="relu")
LLAMA2_7B = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
                 intermediate_size=11008, mlp="swiglu")   # meta-llama/Llama-2-7b-hf config.json


def test_predicted_work_equals_the_toy_models_counted_flops():
    """Every matrix product the numpy model runs is predicted exactly (dense causal attention)."""
    cfg, task = TinyLMConfig(), AdditionTask()
    rng = np.random.default_rng(0)
    params = init_params(cfg, rng)
    prompts, _ = task.sample_prompts(rng, 8)
    COUNTER.reset()
    out = generate(params, prompts, cfg, max_new_tokens=5, eos_id=task.eos_id,
                   pad_id=task.pad_id, group_size=4, rng=rng)
    for phase in ("reference", "train_forward"):
        with COUNTER.phase(phase):
            logps, cache = logps_forward(params, out.tokens, cfg)
    with COUNTER.phase("train_backward"):
        logps_backward(np.ones_like(logps), cache)
    R = out.tokens.shape[1] - out.prompt_len
    assert out.num_decode_steps == R - 1
    wd = grpo_step_workdepth(**TOY, num_prompts=8, group_size=4, prompt_len=6, response_len=R,
                             kl_coef=0.1, attention="dense")
    for phase, counted in COUNTER.counts.items():
        assert wd.phase(phase).work_flops == counted, phase


def test_training_flops_per_token_is_about_6n_for_a_7b_model():
    """Kaplan et al. 2020, Sec. 2.1: training costs ~6N FLOPs per token (2N forward, 4N backward)
    when the context is short relative to the width; attention adds the rest."""
    B, G, P, R = 4, 2, 256, 256
    wd = grpo_step_workdepth(**LLAMA2_7B, num_prompts=B, group_size=G, prompt_len=P,
                             response_len=R)
    n_matmul = 32 * (4 * 4096 ** 2 + 3 * 4096 * 11008) + 4096 * 32000   # 6.607e9, no embedding
    per_token = (wd.phase("train_forward").work_flops + wd.phase("train_backward").work_flops) \
        / (B * G * (P + R))
    assert 1.0 < per_token / (6 * n_matmul) < 1.05
    assert wd.phase("train_backward").work_flops == 2 * wd.phase("train_forward").work_flops


def test_decode_is_little_work_but_most_of_the_depth_for_long_responses():
    wd = grpo_step_workdepth(**LLAMA2_7B, num_prompts=32, group_size=16, prompt_len=512,
                             response_len=4096)
    decode = wd.phase("decode")
    assert decode.work_flops < 0.5 * wd.work_flops
    assert decode.depth_rounds > 0.9 * wd.depth_rounds
    # decode depth grows linearly in R; training depth only through log terms
    wd2 = grpo_step_workdepth(**LLAMA2_7B, num_prompts=32, group_size=16, prompt_len=512,
                              response_len=8192)
    assert 1.9 < wd2.phase("decode").depth_rounds / decode.depth_rounds < 2.1
    assert wd2.phase("train_forward").depth_rounds - wd.phase("train_forward").depth_rounds < 100


def test_brent_limits():
    """p = 1: T_1 = W + D >= W; p -> infinity: the bound tends to D; always max(W/p, D) <= bound."""
    kw = dict(**TOY, num_prompts=32, group_size=4, prompt_len=6, response_len=5)
    one = grpo_step_workdepth(**kw, processors=1)
    huge = grpo_step_workdepth(**kw, processors=10 ** 15)
    for p1, pinf in zip(one.phases, huge.phases):
        assert p1.brent_rounds == p1.work_flops + p1.depth_rounds
        assert pinf.brent_rounds == pytest.approx(pinf.depth_rounds, rel=1e-6)
        assert p1.lower_rounds <= p1.brent_rounds and pinf.lower_rounds <= pinf.brent_rounds
        assert p1.parallelism == pytest.approx(p1.work_flops / p1.depth_rounds)


def test_one_token_responses_need_no_decode_step():
    wd = grpo_step_workdepth(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=1)
    assert wd.phase("decode").work_flops == 0
    assert wd.phase("decode").depth_rounds == 2 * math.ceil(math.log2(14)) + 3   # one sampling


def test_reference_phase_only_with_kl():
    kw = dict(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3)
    names = [p.name for p in grpo_step_workdepth(**kw).phases]
    assert "reference" not in names
    assert "reference" in [p.name for p in grpo_step_workdepth(**kw, kl_coef=0.04).phases]


def test_causal_counts_fewer_pairs_than_dense():
    kw = dict(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3)
    causal, dense = grpo_step_workdepth(**kw), grpo_step_workdepth(**kw, attention="dense")
    T, L, D, N = 9, 2, 64, 4
    diff = dense.phase("train_forward").work_flops - causal.phase("train_forward").work_flops
    assert diff == N * L * 4 * D * (T * T - T * (T + 1) / 2)


@pytest.mark.parametrize("bad,name", [
    ({"num_layers": 0}, "num_layers"), ({"processors": 0}, "processors"),
    ({"num_heads": 5}, "num_heads"), ({"mlp": "moe"}, "mlp"),
    ({"attention": "sparse"}, "attention"),
    ({"kl_coef": -1.0}, "kl_coef"), ({"response_len": 2.5}, "response_len"),
])
def test_bad_inputs_raise_valueerror_naming_the_parameter(bad, name):
    kw = dict(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3)
    kw.update(bad)
    with pytest.raises(ValueError, match=name):
        grpo_step_workdepth(**kw)


def test_ppo_predicted_work_equals_the_toy_ppo_runs_counted_flops():
    """Every matrix product of a PPO step (policy and critic, all epochs) is predicted exactly."""
    from rlmperf_lite.rl import PPOConfig, train_ppo
    from rlmperf_lite.cost import ppo_step_workdepth
    c = PPOConfig(steps=2, warmstart_max_steps=30, num_prompts=16, ppo_epochs=2,
                  num_minibatches=2)
    row = train_ppo(c).history[-1]
    wd = ppo_step_workdepth(**TinyLMConfig().workdepth_kwargs(), num_prompts=16, prompt_len=6,
                            response_len=row["response_width"], ppo_epochs=2, num_minibatches=2,
                            attention="dense")
    for phase in ("prefill", "decode", "values", "train_forward", "train_backward",
                  "critic_forward", "critic_backward"):
        assert wd.phase(phase).work_flops == row[f"{phase}_flops"], phase


def test_ppo_adds_a_critic_and_sequential_updates():
    """What the critic costs (Ch. 2): an extra forward at rollout and a forward+backward per
    update; four sequential updates multiply the update depth by four, not the work."""
    from rlmperf_lite.cost import ppo_step_workdepth
    kw = dict(**LLAMA2_7B, num_prompts=64, prompt_len=512, response_len=1024)
    one = ppo_step_workdepth(**kw)
    four = ppo_step_workdepth(**kw, ppo_epochs=2, num_minibatches=2)
    grpo = grpo_step_workdepth(**kw, group_size=1)
    extra = sum(one.phase(p).work_flops for p in ("values", "critic_forward", "critic_backward"))
    assert one.work_flops - grpo.work_flops == pytest.approx(
        extra + one.phase("critic_optimizer").work_flops
        + one.phase("advantages").work_flops - grpo.phase("advantages").work_flops)
    assert four.phase("train_forward").work_flops == 2 * one.phase("train_forward").work_flops
    assert four.phase("train_forward").depth_rounds == 4 * one.phase("train_forward").depth_rounds


def test_per_version_depth_is_the_trainer_or_the_pipelined_chain():
    """Book section 11.5: k = 0 is the whole chain; a larger bound divides it by k + 1 until
    the trainer's chain is the floor. (Lab 11 checks the simulator against it over 15 cases.)"""
    from rlmperf_lite.cost import per_version_depth
    assert per_version_depth(10, 3, 0) == 13
    assert per_version_depth(10, 3, 1) == 6.5 and per_version_depth(10, 3, 4) == 3
    assert per_version_depth(4, 10, 1) == 10
    for kwargs, name in (({"gen_depth": -1}, "gen_depth"), ({"train_depth": -1}, "train_depth"),
                         ({"staleness": 1.5}, "staleness")):
        args = {"gen_depth": 1, "train_depth": 1, "staleness": 0, **kwargs}
        with pytest.raises(ValueError, match=name):
            per_version_depth(**args)
