"""Bad input to the RL functions, configs and loops ends in a ValueError that names the argument
and says how to fix it, and extreme but valid input gets the right number (issue 18, "bad
input"): the cases a fresh user found, one test each."""
import re
import warnings

import numpy as np
import pytest

from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.rl import (AsyncGRPOConfig, GRPOConfig, PPOConfig, aggregate_loss,
                             aggregate_weights, behav_importance_weights, check_completion_mask,
                             gae, gae_loop, gae_scan, grpo_advantages, kl_estimate, loss_norms,
                             policy_loss, policy_loss_grad, reinforce_pp_advantages,
                             rloo_advantages, train_async_grpo, train_grpo, train_ppo, value_loss)
from rlmperf_lite.tasks import AdditionTask

ONES = np.ones((2, 3))


# 1. REINFORCE++ ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(per_token_kl=np.full((2, 3), np.nan), kl_coef=0.1), re.escape("per_token_kl[0, 0] is nan")),
    (dict(per_token_kl=np.zeros((2, 3)), kl_coef=float("nan")), "kl_coef must be a finite number"),
    (dict(per_token_kl=np.zeros((2, 3)), kl_coef=-0.1), re.escape("kl_coef must be a finite number in [0, inf)")),
    (dict(eps=-1.0), re.escape("eps must be a finite number in [0, inf)")),
    (dict(completion_mask=[[1, 2, 0], [1, 1, 1]]), re.escape("completion_mask[0, 1] is 2.0")),
    (dict(completion_mask=[[1, np.nan, 0], [1, 1, 1]]), re.escape("completion_mask[0, 1] is nan")),
    (dict(completion_mask=[[1, 0, 1], [1, 1, 1]]), re.escape("completion_mask row 0 is [1, 0, 1]")),
    (dict(completion_mask=[[0, 0, 0], [1, 1, 1]]), "completion_mask row 0 is empty"),
])
def test_reinforce_pp_refuses_bad_kl_eps_and_masks(kwargs, match):
    """Before: NaN KL or kl_coef gave all-NaN advantages, a negative kl_coef/eps was used, a 2
    or NaN in the mask raised IndexError (or silently counted), and [1, 0, 1] put the reward on
    a masked position."""
    args = {"rewards": [1.0, 0.0], "completion_mask": ONES, **kwargs}
    with pytest.raises(ValueError, match=match):
        reinforce_pp_advantages(**args)


def test_reinforce_pp_of_huge_rewards_is_that_of_rescaled_ones():
    """The normalisation makes REINFORCE++ scale-invariant: rewards 1e300 apart give the
    advantages of rewards 1 apart (they overflowed in the squares before)."""
    mask = (np.arange(4)[None, :] < np.array([[3], [1], [4]])).astype(float)
    small = reinforce_pp_advantages([1.0, 0.0, 1.0], mask, eps=0.0)
    np.testing.assert_allclose(reinforce_pp_advantages([1e300, 0.0, 1e300], mask), small,
                               rtol=1e-6)


# 2. masks: one check, everywhere -----------------------------------------------------------

@pytest.mark.parametrize("fn", [gae, gae_loop, gae_scan])
def test_gae_refuses_a_gap_inside_a_response(fn):
    """verl skips masked tokens, carrying the next value and advantage over the gap; this
    recurrence would restart there and silently differ: a gap is refused, naming the row."""
    r, v = np.array([[0.0, 0.0, 1.0]]), np.full((1, 3), 0.5)
    with pytest.raises(ValueError, match=re.escape("completion_mask row 0 is [1, 0, 1]") +
                       ".*not supported"):
        fn(r, v, [[1, 0, 1]])
    with pytest.raises(ValueError, match=re.escape("completion_mask[0, 1] is 2.0")):
        fn(r, v, [[1, 2, 1]])


def _verl_gae(rewards, values, mask, gamma, lam):
    """verl's compute_gae_advantage_return (trainer/ppo/core_algos.py), in numpy."""
    next_v, last, out = 0.0, 0.0, []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last_ = delta + gamma * lam * last
        next_v = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_v
        last = last_ * mask[:, t] + (1 - mask[:, t]) * last
        out.append(last)
    adv = np.stack(out[::-1], axis=1)
    return adv, adv + values


def test_gae_equals_verls_on_the_masks_it_accepts():
    rng = np.random.default_rng(0)
    mask = (np.arange(6)[None, :] < np.array([[6], [2], [4]])).astype(float)
    r, v = rng.standard_normal((3, 6)) * mask, rng.standard_normal((3, 6))
    want_adv, want_ret = _verl_gae(r, v, mask, 0.9, 0.95)
    for fn in (gae, gae_loop, gae_scan):
        adv, ret = fn(r, v, mask, 0.9, 0.95)
        np.testing.assert_allclose(adv, want_adv * mask, atol=1e-6)
        np.testing.assert_allclose(ret, want_ret * mask, atol=1e-6)


@pytest.mark.parametrize("call", [
    lambda m: policy_loss(np.zeros((1, 3)), np.zeros((1, 3)), [1.0], m),
    lambda m: policy_loss_grad(np.zeros((1, 3)), np.zeros((1, 3)), [1.0], m),
    lambda m: aggregate_weights(m),
    lambda m: aggregate_loss(np.zeros((1, 3)), m),
    lambda m: value_loss(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3)), m),
    lambda m: loss_norms(m, GRPOConfig()),
    lambda m: behav_importance_weights(np.zeros((1, 3)), np.zeros((1, 3)), m),
])
def test_every_mask_taker_refuses_values_other_than_0_and_1(call):
    """Before, a 2 in the mask doubled a token's loss (policy_loss gave -2) and aggregation
    took it as a weight; NaN passed too."""
    for bad, shown in (([[1, 2, 0]], "2.0"), ([[1, np.nan, 0]], "nan"), ([[1, 0.5, 0]], "0.5")):
        with pytest.raises(ValueError, match=re.escape(f"completion_mask[0, 1] is {shown}")):
            call(np.array(bad, dtype=float))


def test_token_level_losses_accept_a_mask_with_gaps():
    """A 0 inside a response (a tool's output, masked) is fine for per-token losses."""
    loss, _ = policy_loss(np.zeros((1, 3)), np.zeros((1, 3)), [2.0], [[1, 0, 1]])
    np.testing.assert_array_equal(loss, [[-2.0, 0.0, -2.0]])
    assert aggregate_loss(loss, [[1, 0, 1]]) == -2.0
    assert check_completion_mask([[True, False]]).dtype == np.float64


# 3. policy_loss ----------------------------------------------------------------------------

def test_policy_loss_refuses_bad_clip_ranges():
    """clip_eps_low=-1 made the clip interval [2, 1.2] (wrong loss and clipfrac); a NaN
    clip_eps_high made every loss NaN."""
    args = (np.zeros((1, 2)), np.zeros((1, 2)), [-1.0], np.ones((1, 2)))
    for fn in (policy_loss, policy_loss_grad):
        with pytest.raises(ValueError, match=re.escape("clip_eps_low must be a finite number "
                                                       "in [0, 1], got -1")):
            fn(*args, clip_eps_low=-1)
        with pytest.raises(ValueError, match="clip_eps_high must be a finite number"):
            fn(*args, clip_eps_high=float("nan"))


def test_float16_log_probs_are_upcast():
    """A log-ratio of 12 overflows float16 (exp(12) = 162755 > 65504): the loss was inf and the
    gradient NaN. Upcast to float32, both are exp(12) for A = -1 (the unclipped branch)."""
    logps, old = np.array([[12.0]], dtype=np.float16), np.zeros((1, 1), dtype=np.float16)
    loss, metrics = policy_loss(logps, old, [-1.0], np.ones((1, 1)))
    assert loss.dtype == np.float32 and loss[0, 0] == pytest.approx(np.exp(12.0), rel=1e-6)
    assert metrics["ratio_max"] == pytest.approx(np.exp(12.0), rel=1e-6)
    grad = policy_loss_grad(logps, old, [-1.0], np.ones((1, 1)))
    assert grad[0, 0] == pytest.approx(np.exp(12.0), rel=1e-6)
    assert kl_estimate(old, logps, "k3")[0, 0] == pytest.approx(np.exp(12.0) - 13, rel=1e-6)


def test_a_loss_that_overflows_names_the_log_ratio():
    """exp(100) overflows float32: refused, naming the log-ratio, instead of an inf loss."""
    with pytest.raises(ValueError, match="policy_loss overflows float32: the log-ratio "
                                         "per_token_logps - old_per_token_logps reaches 100"):
        policy_loss(np.full((1, 1), 100.0, dtype=np.float32), np.zeros((1, 1), np.float32),
                    [-1.0], np.ones((1, 1)))


# 4. huge rewards ---------------------------------------------------------------------------

def test_grpo_advantages_of_huge_rewards_are_exact():
    """[1e308, -1e308]: mean 0, unbiased std sqrt(2) 1e308, so A = +-1/sqrt(2) (it was 0: the
    squares overflowed for any reward above ~1.3e154). Batch std of [1e308, -1e308, 0, 0] is
    1e308 sqrt(2/3): A = +-sqrt(3/2)."""
    np.testing.assert_allclose(grpo_advantages([1e308, -1e308, 0, 0], 2),
                               [2 ** -0.5, -(2 ** -0.5), 0, 0], rtol=1e-6)
    np.testing.assert_allclose(grpo_advantages([1e308, -1e308, 0, 0], 2, scale="batch"),
                               [1.5 ** 0.5, -(1.5 ** 0.5), 0, 0], rtol=1e-6)
    np.testing.assert_allclose(grpo_advantages([1e200, 0, 0, 0], 4, eps=0.0),
                               [1.5, -0.5, -0.5, -0.5], rtol=1e-6)


def test_power_of_two_rescaling_leaves_the_bits_unchanged():
    """The rewards are divided by a power of two (exact), so rewards 2**600 times larger give
    the very same float32 advantages at eps = 0."""
    r = np.random.default_rng(0).standard_normal(12)
    for scale in ("group", "batch", "none"):
        small = grpo_advantages(r, 4, scale=scale, eps=0.0)
        big = grpo_advantages(r * 2.0 ** 100, 4, scale=scale, eps=0.0)
        np.testing.assert_array_equal(small * (2.0 ** 100 if scale == "none" else 1), big)
    np.testing.assert_array_equal(rloo_advantages(r * 2.0 ** 60, 4),
                                  rloo_advantages(r, 4) * np.float32(2.0 ** 60))


def test_rloo_of_huge_rewards_is_exact_or_refused():
    """RLOO keeps the rewards' scale: 1e30 is exact in float32; [1e308, -1e308] gave +-inf
    (their true advantages, 2e308, exist in no float format) and is now refused."""
    np.testing.assert_allclose(rloo_advantages([1e30, 0, 0, 0], 4),
                               [1e30, -1e30 / 3, -1e30 / 3, -1e30 / 3], rtol=1e-6)
    with pytest.raises(ValueError, match="rloo advantages of these rewards overflow float32"
                                         ".*rescale the rewards"):
        rloo_advantages([1e308, -1e308, 0, 1], 2)


@pytest.mark.parametrize("fn", [grpo_advantages, rloo_advantages])
def test_non_finite_and_complex_rewards_are_refused(fn):
    with pytest.raises(ValueError, match="reward of sample 1 .* is inf"):
        fn([0.0, np.inf], 2)
    with pytest.raises(ValueError, match="rewards must be .* real numbers.*complex128"):
        fn([1 + 1j, 0, 0, 1], 2)
    with pytest.raises(ValueError, match="rewards must be a non-empty"):
        fn([], 2)


# 6. configs and loops ----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(adam_betas=None), re.escape("GRPOConfig.adam_betas must be a pair (beta1, beta2)")),
    (dict(adam_betas=(0.9, "x")), "GRPOConfig.adam_betas must be a finite number"),
    (dict(model="tiny"), "GRPOConfig.model must be a TinyLMConfig, e.g. TinyLMConfig"),
    (dict(dynamic_sampling="yes"), "GRPOConfig.dynamic_sampling must be True or False"),
    (dict(temperature=1e-300), re.escape("GRPOConfig.temperature must be a finite number in "
                                         "[1e-06, inf)")),
])
def test_grpoconfig_refuses_wrong_types_by_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_ppoconfig_refuses_a_non_bool_norm_adv():
    with pytest.raises(ValueError, match="PPOConfig.norm_adv must be True or False"):
        PPOConfig(norm_adv="no")


@pytest.mark.parametrize("call, match", [
    (lambda: train_grpo(PPOConfig()), "config must be a GRPOConfig, got PPOConfig"),
    (lambda: train_grpo({}), "config must be a GRPOConfig, got dict"),
    (lambda: train_ppo(GRPOConfig()), "config must be a PPOConfig, got GRPOConfig"),
    (lambda: train_async_grpo(GRPOConfig()), "config must be an AsyncGRPOConfig, got GRPOConfig"),
    (lambda: train_grpo(GRPOConfig(steps=1), eval_every=1, stop_at_accuracy="0.5"),
     "stop_at_accuracy must be a finite number in \\[0, 1\\], got '0.5'"),
    (lambda: train_grpo(GRPOConfig(steps=1), task="addition"), "task must be None or an "
                                                               "AdditionTask"),
    (lambda: train_ppo(PPOConfig(steps=1), progress="yes"), "progress must be True or False"),
    (lambda: train_ppo(PPOConfig(steps=1), on_step=3), "on_step must be None or a callable"),
    (lambda: train_grpo(GRPOConfig(steps=1), eval_every=True), "eval_every must be an int"),
])
def test_loops_refuse_wrong_arguments_by_name(call, match):
    """Before: AttributeError ('PPOConfig' object has no attribute 'group_size') or TypeError."""
    with pytest.raises(ValueError, match=match):
        call()


# 7. divergence -----------------------------------------------------------------------------

@pytest.mark.parametrize("train, config, match", [
    (train_grpo, GRPOConfig(lr=1e10, steps=3, warmstart_max_steps=100, seed=1,
                            lr_warmup_steps=0), "lr=1e\\+10 is too high: lower it"),
    (train_async_grpo, AsyncGRPOConfig(lr=1e10, steps=3, warmstart_max_steps=100, seed=1,
                                       lr_warmup_steps=0, staleness=1),
     "lr=1e\\+10 is too high: lower it"),
    (train_ppo, PPOConfig(lr=1e10, steps=3, warmstart_max_steps=30, num_prompts=32),
     "lr=1e\\+10 is too high: lower it"),
    (train_ppo, PPOConfig(critic_lr=1e10, steps=3, warmstart_max_steps=30, num_prompts=32),
     "critic_lr=1e\\+10 is too high: lower it"),
])
def test_a_diverged_run_names_the_step_and_the_learning_rate(train, config, match):
    """lr=1e10 failed with 'per_token_logps[0, 0] is nan', naming neither the step nor lr."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # the error, not numpy's overflows
        with pytest.raises(ValueError, match=r"training diverged at step \d+: .* became "
                                             r"non-finite; " + match):
            train(config)


# the task ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: AdditionTask(warmstart_fraction="0.5"), "AdditionTask.warmstart_fraction"),
    (lambda: AdditionTask(split_seed=None), "AdditionTask.split_seed must be an int >= 0"),
    (lambda: AdditionTask(eos_id=3), "AdditionTask.eos_id is fixed at 12"),
    (lambda: AdditionTask().sample_prompts(None, 3), "rng must be a np.random.Generator"),
    (lambda: AdditionTask().reward([[1, 2]], [[3.0, 12.0]]), "completions must be a 2-D integer"),
    (lambda: AdditionTask().decode([-1, 3]), re.escape("ids must be a 1-D sequence of int "
                                                       "token ids in [0, 14)")),
    (lambda: AdditionTask().pairs(["eval"]), "split must be one of"),
])
def test_the_task_refuses_bad_input_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_tinylmconfig_is_the_only_model_a_config_takes():
    assert GRPOConfig(model=TinyLMConfig(hidden_size=32)).model.hidden_size == 32
