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


# ---- dual clip (verl's clip_ratio_c), the abs KL estimator, REINFORCE++-baseline --------------
def _dual_clip_peer(logps, old, adv, mask, eps=0.2, c=3.0):
    """The dual-clip loss as verl's compute_policy_loss writes it (Ye et al. 2020, Eq. 5):
    max of the two PPO losses, then for A < 0 the min with -c A; clipfrac_lower as verl's
    pg_clipfrac_lower."""
    r = np.exp(logps - old)
    a = np.broadcast_to(adv[:, None], r.shape)
    pg1, pg2 = -a * r, -a * np.clip(r, 1 - eps, 1 + eps)
    clip1 = np.maximum(pg1, pg2)
    pg3 = -a * c
    loss = np.where(a < 0, np.minimum(pg3, clip1), clip1) * mask
    lower = (((clip1 > pg3) & (a < 0)) * mask).sum() / mask.sum()
    return loss, lower


def test_dual_clip_matches_the_peer_formula_and_its_clipfrac():
    rng = np.random.default_rng(5)
    old = np.log(rng.uniform(0.05, 1, (16, 6)))
    logps = old + rng.normal(0, 1.5, old.shape)                  # ratios up to ~100
    adv, mask = rng.normal(size=16), (rng.uniform(size=(16, 6)) < 0.8).astype(float)
    loss, m = policy_loss(logps, old, adv, mask, clip_ratio_c=3.0)
    want, lower = _dual_clip_peer(logps, old, adv, mask)
    np.testing.assert_allclose(loss, want, rtol=1e-12)
    assert m["clipfrac_lower"] == pytest.approx(lower) and lower > 0
    np.testing.assert_allclose(policy_loss(logps, old, adv, mask)[0][adv > 0],
                               loss[adv > 0])                   # A > 0: PPO's loss unchanged


def test_dual_clip_grad_matches_finite_differences_and_is_zero_where_it_binds():
    rng = np.random.default_rng(6)
    old = np.log(rng.uniform(0.05, 1, (6, 5)))
    logps = old + rng.normal(0, 1.0, old.shape)
    adv, mask = rng.normal(size=6), np.ones((6, 5))
    f = lambda lp: policy_loss(lp, old, adv, mask, clip_ratio_c=3.0)[0]
    g = policy_loss_grad(logps, old, adv, mask, clip_ratio_c=3.0)
    np.testing.assert_allclose(g, numgrad_elementwise(f, logps), atol=1e-6)
    binds = (adv[:, None] < 0) & (np.exp(logps - old) > 3.0)
    assert binds.any() and (g[binds] == 0).all()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(logps, old, adv, mask, clip_ratio_c=1.0)


def test_abs_kl_estimator_values_and_gradient():
    """abs = |ref_logp - logp| (verl's kl_loss_type="abs"); its gradient is -sign(d)."""
    logps = np.log(np.array([[0.5, 0.2, 0.3]]))
    ref = np.log(np.array([[0.25, 0.4, 0.3]]))
    np.testing.assert_allclose(kl_estimate(logps, ref, "abs"), [[np.log(2), np.log(2), 0]])
    lp, rf, _, _ = _loss_inputs(np.random.default_rng(7))
    f = lambda x: kl_estimate(x, rf, "abs")
    np.testing.assert_allclose(kl_estimate_grad(lp, rf, "abs"), numgrad_elementwise(f, lp),
                               atol=1e-6)
    np.testing.assert_array_equal(kl_estimate_grad(logps, ref, "abs"), [[1, -1, 0]])


def _rpp_baseline_loop(rewards, mask, G, eps=1e-8):
    """REINFORCE++-baseline written with plain loops (verl's
    compute_reinforce_plus_plus_baseline_outcome_advantage, read, not copied)."""
    rows, R = mask.shape
    x = [[0.0] * R for _ in range(rows)]
    for b in range(rows // G):
        mean = sum(rewards[b * G:(b + 1) * G]) / G
        for i in range(b * G, (b + 1) * G):
            for t in range(R):
                x[i][t] = (rewards[i] - mean) * mask[i][t]
    vals = [x[i][t] for i in range(rows) for t in range(R) if mask[i][t]]
    mu = sum(vals) / len(vals)
    var = sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
    return np.array([[(x[i][t] - mu) / np.sqrt(var + eps) * mask[i][t] for t in range(R)]
                     for i in range(rows)])


def test_reinforce_pp_baseline_matches_an_independent_loop():
    from rlmperf_lite.rl import reinforce_pp_baseline_advantages
    rng = np.random.default_rng(8)
    rewards = rng.integers(0, 2, 12).astype(float)
    mask = (np.arange(5) < rng.integers(1, 6, (12, 1))).astype(float)
    got = reinforce_pp_baseline_advantages(rewards, mask, 4)
    np.testing.assert_allclose(got, _rpp_baseline_loop(rewards, mask, 4), rtol=1e-5, atol=1e-6)
    assert got[mask > 0].mean() == pytest.approx(0, abs=1e-6)
    assert (got[mask == 0] == 0).all()
    with pytest.raises(ValueError, match="completion_mask"):
        reinforce_pp_baseline_advantages(rewards, mask[:8], 4)
    with pytest.raises(ValueError, match="group_size"):
        reinforce_pp_baseline_advantages(rewards, mask, 1)
