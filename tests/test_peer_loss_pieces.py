"""The pieces the peer comparison found missing (issue 19, section 4): the ``abs`` KL estimator,
verl's dual clip (``clip_ratio_c``, with ``clipfrac_lower``) and the REINFORCE++-baseline
advantage, each checked against a hand value or an independent implementation in this file."""
import statistics

import numpy as np
import pytest

from rlmperf_lite.rl import (GRPOConfig, KL_ESTIMATORS, grpo_loss, grpo_loss_grad, kl_estimate,
                             kl_estimate_grad, loss_norms, policy_loss, policy_loss_grad,
                             reinforce_pp_baseline_advantages, step_advantages, train_grpo)


def _inputs(rng, rows=6, R=5, spread=0.5):
    logps = np.log(rng.uniform(0.05, 0.95, (rows, R)))
    old = logps + rng.normal(0, spread, (rows, R))
    ref = logps + rng.normal(0, spread, (rows, R))
    adv = rng.normal(0, 1, rows)
    mask = np.ones((rows, R))
    mask[0, 3:] = mask[2, 1:] = 0
    return logps, old, ref, adv, mask


def _fd(f, x, eps=1e-6):
    """Central differences of a scalar f at every entry of x (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


# ---------------------------------------------------------------- the abs KL estimator
def test_abs_estimator_is_the_absolute_log_ratio_and_its_gradient_the_sign():
    """verl's kl_penalty="abs": |logp - ref_logp| = |log r|, r = pi_ref / pi; hand values."""
    logps, ref = np.array([[-1.0, -2.0, -0.5]]), np.array([[-1.5, -1.0, -0.5]])
    np.testing.assert_array_equal(kl_estimate(logps, ref, "abs"), [[0.5, 1.0, 0.0]])
    np.testing.assert_array_equal(kl_estimate_grad(logps, ref, "abs"), [[1.0, -1.0, 0.0]])
    assert KL_ESTIMATORS == ("k1", "k2", "k3", "abs")


def test_abs_estimator_gradient_matches_finite_differences():
    logps, _, ref, _, _ = _inputs(np.random.default_rng(0))
    fd = _fd(lambda lp: float(kl_estimate(lp, ref, "abs").sum()), logps)
    np.testing.assert_allclose(kl_estimate_grad(logps, ref, "abs"), fd, atol=1e-6)


def test_abs_estimator_overestimates_the_kl_of_close_categoricals():
    """E_p|log p/q| >= |E_p log p/q| = KL(p||q) (Jensen), strictly here: a biased estimator."""
    p, q = np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.5, 0.3]])
    exact = float((p * np.log(p / q)).sum())
    est = float((p * kl_estimate(np.log(p), np.log(q), "abs")).sum())
    assert est == pytest.approx(float((p * np.abs(np.log(p / q))).sum()), rel=1e-12)
    assert est > exact


@pytest.mark.parametrize("kind", KL_ESTIMATORS)
def test_grpo_loss_uses_the_config_estimator(kind):
    """grpo_loss = token-mean(policy_loss + kl_coef * kl_estimate(kind)), by hand; its gradient
    matches finite differences of the loss."""
    logps, old, ref, adv, mask = _inputs(np.random.default_rng(1))
    c = GRPOConfig(kl_coef=0.3, kl_estimator=kind)
    norms = loss_norms(mask, c)
    loss, metrics = grpo_loss(logps, old, adv, mask, c, norms, ref_per_token_logps=ref)
    pl = policy_loss(logps, old, adv, mask)[0]
    kl = kl_estimate(logps, ref, kind)
    assert loss == pytest.approx(float(((pl + 0.3 * kl) * mask).sum() / mask.sum()), rel=1e-6)
    assert metrics["kl_ref"] == pytest.approx(float((kl * mask).sum() / mask.sum()), rel=1e-6)
    fd = _fd(lambda lp: grpo_loss(lp, old, adv, mask, c, norms, ref_per_token_logps=ref)[0],
             logps)
    np.testing.assert_allclose(grpo_loss_grad(logps, old, adv, mask, c, norms,
                                              ref_per_token_logps=ref), fd, atol=1e-6)


def test_defaults_leave_the_loss_unchanged():
    """k3 and no dual clip by default: the same loss and metrics as the explicit k3 call."""
    logps, old, ref, adv, mask = _inputs(np.random.default_rng(2), spread=2.0)
    c = GRPOConfig(kl_coef=0.1)
    assert c.kl_estimator == "k3" and c.clip_ratio_c is None
    norms = loss_norms(mask, c)
    loss, metrics = grpo_loss(logps, old, adv, mask, c, norms, ref_per_token_logps=ref)
    pl, pm = policy_loss(logps, old, adv, mask)
    by_hand = ((pl + 0.1 * (np.exp(ref - logps) - (ref - logps) - 1)) * mask).sum() / mask.sum()
    assert loss == pytest.approx(float(by_hand), rel=1e-6)
    assert "clipfrac_lower" not in metrics and set(pm) <= set(metrics)


# ---------------------------------------------------------------- verl's dual clip
def _verl_dual_clip(logps, old, adv, mask, eps, c):
    """Peer formula, as verl's compute_policy_loss_vanilla writes it (max of the two negated
    surrogates, then for A < 0 the min with -A c), with its pg_clipfrac_lower."""
    adv = np.broadcast_to(adv[:, None], logps.shape)
    ratio = np.exp(logps - old)
    l1, l2 = -adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps)
    clip1 = np.maximum(l1, l2)
    l3 = -adv * c
    out = np.where(adv < 0, np.minimum(l3, clip1), clip1)
    lower = ((clip1 > l3) & (adv < 0)).astype(float)
    return out * mask, float((lower * mask).sum() / mask.sum())


def test_dual_clip_hand_values():
    """ratio 5, eps 0.2, c 3: A = -1 gives max(5, 0.8) = 5 capped at 3; A = +1 gives
    -min(5, 1.2) = -1.2, never capped; ratio 2, A = -1: 2 < 3, not capped."""
    old = np.zeros((3, 1))
    logps = np.log([[5.0], [5.0], [2.0]])
    adv = np.array([-1.0, 1.0, -1.0])
    loss, m = policy_loss(logps, old, adv, np.ones((3, 1)), clip_ratio_c=3.0)
    np.testing.assert_allclose(loss[:, 0], [3.0, -1.2, 2.0], rtol=1e-6)
    assert m["clipfrac_lower"] == pytest.approx(1 / 3)
    loss_off, m_off = policy_loss(logps, old, adv, np.ones((3, 1)))
    np.testing.assert_allclose(loss_off[:, 0], [5.0, -1.2, 2.0], rtol=1e-6)
    assert "clipfrac_lower" not in m_off
    grad = policy_loss_grad(logps, old, adv, np.ones((3, 1)), clip_ratio_c=3.0)
    np.testing.assert_allclose(grad[:, 0], [0.0, 0.0, 2.0], rtol=1e-6)   # capped, clipped, -A r


@pytest.mark.parametrize("c", [1.5, 3.0, 10.0])
def test_dual_clip_matches_verl_formula_and_finite_differences(c):
    logps, old, _, adv, mask = _inputs(np.random.default_rng(3), rows=8, R=6, spread=1.5)
    loss, m = policy_loss(logps, old, adv, mask, clip_ratio_c=c)
    peer, peer_lower = _verl_dual_clip(logps, old, adv, mask, 0.2, c)
    np.testing.assert_allclose(loss, peer, rtol=1e-6, atol=1e-12)
    assert m["clipfrac_lower"] == pytest.approx(peer_lower) and (c > 5 or peer_lower > 0)
    fd = _fd(lambda lp: float(policy_loss(lp, old, adv, mask, clip_ratio_c=c)[0].sum()), logps)
    np.testing.assert_allclose(policy_loss_grad(logps, old, adv, mask, clip_ratio_c=c), fd,
                               atol=1e-5)


def test_dual_clip_through_grpo_loss():
    logps, old, ref, adv, mask = _inputs(np.random.default_rng(4), spread=1.5)
    cfg = GRPOConfig(clip_ratio_c=3.0, kl_coef=0.05, kl_estimator="abs")
    norms = loss_norms(mask, cfg)
    loss, m = grpo_loss(logps, old, adv, mask, cfg, norms, ref_per_token_logps=ref)
    peer, peer_lower = _verl_dual_clip(logps, old, adv, mask, 0.2, 3.0)
    kl = np.abs(logps - ref) * mask
    assert loss == pytest.approx(float((peer + 0.05 * kl).sum() / mask.sum()), rel=1e-6)
    assert m["clipfrac_lower"] == pytest.approx(peer_lower)
    fd = _fd(lambda lp: grpo_loss(lp, old, adv, mask, cfg, norms, ref_per_token_logps=ref)[0],
             logps)
    np.testing.assert_allclose(grpo_loss_grad(logps, old, adv, mask, cfg, norms,
                                              ref_per_token_logps=ref), fd, atol=1e-6)


@pytest.mark.parametrize("bad", [1.0, 0.5, float("nan"), float("inf"), "3"])
def test_bad_clip_ratio_c_and_estimator_raise_naming_them(bad):
    z = np.zeros((2, 3))
    for fn in (policy_loss, policy_loss_grad):
        with pytest.raises(ValueError, match="clip_ratio_c"):
            fn(z, z, np.zeros(2), np.ones((2, 3)), clip_ratio_c=bad)
    with pytest.raises(ValueError, match="GRPOConfig.clip_ratio_c"):
        GRPOConfig(clip_ratio_c=bad)
    with pytest.raises(ValueError, match="GRPOConfig.kl_estimator"):
        GRPOConfig(kl_estimator="k4")
    with pytest.raises(ValueError, match="kind"):
        kl_estimate(z, z, "abz")


# ---------------------------------------------------------------- REINFORCE++-baseline
def _rppb_by_hand(rewards, mask, G):
    """Independent: group means with statistics.mean, then each valid token's value whitened
    with statistics.mean / statistics.variance (the unbiased one) over the valid tokens."""
    centred = []
    for b in range(len(rewards) // G):
        group = [float(r) for r in rewards[b * G:(b + 1) * G]]
        centred += [r - statistics.mean(group) for r in group]
    tokens = [centred[i] for i in range(len(centred)) for t in range(mask.shape[1]) if mask[i, t]]
    mu, var = statistics.mean(tokens), statistics.variance(tokens)
    out = np.zeros(mask.shape)
    for i, t in zip(*np.nonzero(mask)):
        out[i, t] = (centred[i] - mu) / np.sqrt(var + 1e-8)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reinforce_pp_baseline_matches_an_independent_implementation(seed):
    rng = np.random.default_rng(seed)
    G, B, R = 4, 3, 6
    rewards = rng.integers(0, 2, B * G).astype(float) + rng.normal(0, 0.1, B * G) * (seed > 0)
    lengths = rng.integers(1, R + 1, B * G)
    mask = (np.arange(R)[None] < lengths[:, None]).astype(float)
    adv = reinforce_pp_baseline_advantages(rewards, mask, G)
    assert adv.dtype == np.float32 and adv.shape == (B * G, R)
    np.testing.assert_allclose(adv, _rppb_by_hand(rewards, mask, G), rtol=1e-5, atol=1e-6)
    assert (adv[mask == 0] == 0).all()
    valid = adv[mask > 0].astype(np.float64)       # whitened over tokens: mean 0, unbiased std 1
    assert abs(valid.mean()) < 1e-6 and valid.std(ddof=1) == pytest.approx(1.0, rel=1e-5)


def test_reinforce_pp_baseline_huge_rewards_and_all_equal_batch():
    mask = np.ones((4, 3))
    big = reinforce_pp_baseline_advantages([1e300, -1e300, 0, 0], mask, 2)
    small = reinforce_pp_baseline_advantages([1.0, -1.0, 0, 0], mask, 2)
    np.testing.assert_allclose(big, small, rtol=1e-6)
    assert (reinforce_pp_baseline_advantages([0.3] * 4, mask, 2) == 0).all()


@pytest.mark.parametrize("kwargs,match", [
    ({"completion_mask": np.ones((3, 3))}, "completion_mask"),
    ({"completion_mask": np.array([[1, 0, 0]] + [[0, 0, 0]] * 3)}, "at least 2 valid tokens"),
    ({"group_size": 1}, "group_size"),
    ({"rewards": [1.0, np.nan, 0, 0]}, "sample 1"),
    ({"eps": -1.0}, "eps"),
])
def test_reinforce_pp_baseline_bad_inputs_raise_naming_them(kwargs, match):
    args = {"rewards": [1.0, 0.0, 0.0, 1.0], "completion_mask": np.ones((4, 3)), "group_size": 2}
    with pytest.raises(ValueError, match=match):
        reinforce_pp_baseline_advantages(**{**args, **kwargs})


def test_reinforce_pp_baseline_is_a_selectable_variant_and_trains():
    """GRPOConfig.variant("reinforce_pp_baseline") routes step_advantages to it; a 3-step run
    with the dual clip and the abs KL logs clipfrac_lower and a finite kl_ref."""
    c = GRPOConfig.variant("reinforce_pp_baseline", steps=3, warmstart_max_steps=30,
                           kl_coef=0.01, kl_estimator="abs", clip_ratio_c=3.0)
    rewards, mask = np.array([1.0, 0, 0, 0, 1, 1, 0, 1]), np.ones((8, 4))
    assert c.group_size == 4
    np.testing.assert_array_equal(step_advantages(c, rewards, mask, None, None),
                                  reinforce_pp_baseline_advantages(rewards, mask, 4))
    rows = train_grpo(c).history
    assert len(rows) == 3 and all(0 <= r["clipfrac_lower"] <= 1 for r in rows)
    assert all(np.isfinite(r["kl_ref"]) and r["kl_ref"] >= 0 for r in rows)
