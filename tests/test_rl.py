"""Advantages, the clipped policy loss, KL estimators and aggregation (book section 1.5)."""
import numpy as np
import pytest

from rlmperf_lite.rl import (
    aggregate_loss,
    aggregate_weights,
    grpo_advantages,
    kl_estimate,
    kl_estimate_grad,
    policy_loss,
    policy_loss_grad,
)


def test_all_equal_group_gets_exactly_zero_advantages():
    """A group whose rewards are all equal carries no signal: advantages exactly 0, never NaN."""
    for value in (0.0, 1.0, 0.1, 1e8 + 0.1):
        adv = grpo_advantages(np.full(6, value), group_size=3)
        assert (adv == 0).all(), value


def test_one_correct_of_four_known_values():
    """r = [1,0,0,0]: mean 1/4, unbiased std sqrt(0.75/3) = 1/2 -> A = [1.5, -0.5, -0.5, -0.5]."""
    adv = grpo_advantages([1, 0, 0, 0, 0, 0, 0, 0], group_size=4, eps=0.0)
    np.testing.assert_allclose(adv, [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0], rtol=1e-6)


def test_scale_none_only_centres_dr_grpo():
    adv = grpo_advantages([1, 0, 0, 0], group_size=4, scale="none")
    np.testing.assert_allclose(adv, [0.75, -0.25, -0.25, -0.25])


def test_group_size_one_and_bad_rewards_raise():
    with pytest.raises(ValueError, match="group_size"):
        grpo_advantages([1.0, 0.0], group_size=1)
    with pytest.raises(ValueError, match="sample 2"):
        grpo_advantages([1.0, 0.0, np.nan, 0.0], group_size=2)
    with pytest.raises(ValueError, match="divisible"):
        grpo_advantages([1.0, 0.0, 1.0], group_size=2)
    with pytest.raises(ValueError, match="scale"):
        grpo_advantages([1.0, 0.0], group_size=2, scale="tokens")


def _loss_inputs(rng, N=4, R=5):
    logps = -rng.random((N, R)) * 2
    old = logps + rng.standard_normal((N, R)) * 0.3
    adv = rng.standard_normal(N)
    mask = (rng.random((N, R)) > 0.2).astype(float)
    return logps, old, adv, mask


def numgrad_elementwise(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp)[i] - f(xm)[i]) / (2 * eps)
    return g


def test_policy_loss_grad_matches_finite_differences():
    logps, old, adv, mask = _loss_inputs(np.random.default_rng(0))
    f = lambda lp: policy_loss(lp, old, adv, mask)[0]
    np.testing.assert_allclose(policy_loss_grad(logps, old, adv, mask),
                               numgrad_elementwise(f, logps), atol=1e-6)


def test_policy_loss_at_ratio_one_is_minus_advantage_and_metrics():
    """On-policy (ratio 1): loss = -A per token, nothing clipped, approx_kl 0."""
    logps = np.log(np.full((2, 3), 0.5))
    loss, m = policy_loss(logps, logps, np.array([2.0, -1.0]), np.ones((2, 3)))
    np.testing.assert_allclose(loss, [[-2] * 3, [1] * 3])
    assert m["clipfrac"] == 0 and m["approx_kl"] == 0 and m["ratio_mean"] == 1


def test_policy_loss_clips_beyond_eps():
    """ratio 1.5 with A > 0 and eps 0.2: the clipped branch 1.2 * A is the minimum."""
    old = np.zeros((1, 1))
    loss, m = policy_loss(np.log(np.full((1, 1), 1.5)), old, np.array([1.0]), np.ones((1, 1)))
    assert loss[0, 0] == pytest.approx(-1.2) and m["clipfrac"] == 1.0


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimators_grad_and_k3_nonnegative(kind):
    logps, ref, _, _ = _loss_inputs(np.random.default_rng(1))
    f = lambda lp: kl_estimate(lp, ref, kind)
    np.testing.assert_allclose(kl_estimate_grad(logps, ref, kind),
                               numgrad_elementwise(f, logps), atol=1e-6)
    if kind == "k3":
        assert (kl_estimate(logps, ref, "k3") >= 0).all()


def test_kl_estimators_are_unbiased_for_kl_of_categoricals():
    """k1 and k3 are unbiased estimates of KL(p || q) (Schulman 2020): exact expectation."""
    p, q = np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.5, 0.3]])
    exact = float((p * np.log(p / q)).sum())
    for kind in ("k1", "k3"):
        est = float((p * kl_estimate(np.log(p), np.log(q), kind)).sum())
        assert est == pytest.approx(exact, rel=1e-12)


def test_token_mean_equals_mean_over_unmasked_tokens():
    rng = np.random.default_rng(2)
    loss, mask = rng.standard_normal((4, 5)), (rng.random((4, 5)) > 0.3).astype(float)
    assert aggregate_loss(loss, mask, "token-mean") == pytest.approx(loss[mask > 0].mean())
    per_seq = [loss[i][mask[i] > 0].mean() for i in range(4) if mask[i].sum()]
    if all(mask.sum(1)):
        assert aggregate_loss(loss, mask, "seq-mean-token-mean") == pytest.approx(np.mean(per_seq))
    with pytest.raises(ValueError, match="mode"):
        aggregate_weights(mask, "sum")


@pytest.mark.parametrize("bad,name", [
    ({"per_token_logps": np.full((2, 3), np.nan)}, "per_token_logps"),
    ({"old_per_token_logps": np.zeros((2, 4))}, "old_per_token_logps"),
    ({"advantages": np.zeros(3)}, "advantages"),
    ({"advantages": np.array([np.nan, 0.0])}, "advantages"),
    ({"completion_mask": np.ones(6)}, "completion_mask"),
])
def test_policy_loss_rejects_bad_inputs_naming_them(bad, name):
    args = {"per_token_logps": np.zeros((2, 3)), "old_per_token_logps": np.zeros((2, 3)),
            "advantages": np.zeros(2), "completion_mask": np.ones((2, 3))}
    args.update(bad)
    for fn in (policy_loss, policy_loss_grad):
        with pytest.raises(ValueError, match=name):
            fn(**args)
    with pytest.raises(ValueError, match="ref_per_token_logps"):
        kl_estimate(np.zeros((2, 3)), np.zeros((3, 2)))


def test_lr_factor_refuses_steps_past_the_schedule():
    """Past the last step a linear schedule would make the learning rate negative (gradient
    ascent, silently): a reviewer's case through zero_step. Steps must be ints in [0, steps)."""
    from rlmperf_lite.rl import GRPOConfig
    from rlmperf_lite.rl.common import lr_factor
    c = GRPOConfig(steps=10, lr_warmup_steps=2, lr_schedule="linear")
    assert lr_factor(9, c) > 0
    for bad, match in ((10, "past the schedule of steps=10"), (-1, "step must be an int >= 0"),
                       (1.5, "step must be an int")):
        with pytest.raises(ValueError, match=match):
            lr_factor(bad, c)
