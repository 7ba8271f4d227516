"""The GRPO family's building blocks: RLOO, REINFORCE++, GAE, aggregation modes, value loss,
DAPO's overlong penalty, and what each KL estimator's gradient is (issue: Part I)."""
import numpy as np
import pytest

from rlmperf_lite.rl import (aggregate_loss, aggregate_weights, gae, gae_loop, kl_estimate_grad,
                             overlong_penalty, reinforce_pp_advantages, rloo_advantages,
                             value_loss, value_loss_grad)


def _mask(lengths, R):
    return (np.arange(R)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)


def test_rloo_one_correct_of_four():
    """Ahmadian et al. 2024, Eq. 6: baseline = mean of the other three -> [1, -1/3, -1/3, -1/3]."""
    adv = rloo_advantages([1, 0, 0, 0, 1, 1, 1, 1], group_size=4)
    np.testing.assert_allclose(adv, [1, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0], rtol=1e-6)
    with pytest.raises(ValueError, match="group_size"):
        rloo_advantages([1, 0], group_size=1)


def test_reinforce_pp_normalises_over_all_tokens():
    """Hu 2025 (REINFORCE++): return-to-go of the outcome reward, normalised over the batch."""
    mask = _mask([3, 1, 2, 4], 4)
    adv = reinforce_pp_advantages([1.0, 0.0, 0.0, 1.0], mask)
    vals = adv[mask > 0]
    assert vals.mean() == pytest.approx(0, abs=1e-6) and vals.std() == pytest.approx(1, rel=1e-5)
    assert (adv[mask == 0] == 0).all()
    assert len(set(np.round(adv[0, :3], 6))) == 1            # no KL: one value per sequence
    kl = np.full((4, 4), 0.5)
    with_kl = reinforce_pp_advantages([1.0, 0.0, 0.0, 1.0], mask, per_token_kl=kl, kl_coef=0.1)
    assert with_kl[0, 0] < with_kl[0, 2]                      # earlier tokens carry more KL cost
    with pytest.raises(ValueError, match="per_token_kl"):
        reinforce_pp_advantages([1.0, 0.0, 0.0, 1.0], mask, kl_coef=0.1)


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.95), (0.9, 0.8), (0.0, 0.5)])
def test_gae_vectorised_equals_reversed_loop(gamma, lam):
    """Schulman et al. 2016, Eq. 16, computed two ways."""
    rng = np.random.default_rng(0)
    mask = _mask([7, 3, 1, 5], 7)
    r, v = rng.standard_normal((4, 7)), rng.standard_normal((4, 7))
    for a, b in zip(gae(r, v, mask, gamma, lam), gae_loop(r, v, mask, gamma, lam)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_gae_with_gamma_lam_one_and_terminal_reward_is_return_minus_value():
    mask = _mask([4, 2], 4)
    rewards = np.zeros((2, 4))
    rewards[0, 3], rewards[1, 1] = 1.0, -2.0                 # outcome reward on the last token
    values = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, -0.5, 9.0, 9.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv[0], 1.0 - values[0], rtol=1e-6)
    np.testing.assert_allclose(adv[1, :2], -2.0 - values[1, :2], rtol=1e-6)
    np.testing.assert_allclose(ret * mask, np.array([[1, 1, 1, 1], [-2, -2, 0, 0]]), atol=1e-6)
    with pytest.raises(ValueError, match="lam"):
        gae(rewards, values, mask, gamma=1.0, lam=1.5)


def test_token_mean_over_micro_batches_equals_the_batch_token_mean():
    """Accumulating micro-batches must use the batch's token count, not a mean of micro-batch
    means (verl issue #5625)."""
    rng = np.random.default_rng(1)
    loss, mask = rng.standard_normal((8, 6)), _mask([6, 1, 3, 2, 5, 6, 1, 4], 6)
    full = aggregate_loss(loss, mask, "token-mean")
    n = mask.sum()
    parts = [aggregate_loss(loss[i:i + 2], mask[i:i + 2], "token-mean", num_tokens=n)
             for i in range(0, 8, 2)]
    assert sum(parts) == pytest.approx(full, rel=1e-6)
    naive = np.mean([aggregate_loss(loss[i:i + 2], mask[i:i + 2]) for i in range(0, 8, 2)])
    assert abs(naive - full) > 1e-3                           # the pitfall is real here
    for mode in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        parts = [aggregate_loss(loss[i:i + 2], mask[i:i + 2], mode, num_seqs=8, max_len=6)
                 for i in range(0, 8, 2)]
        assert sum(parts) == pytest.approx(aggregate_loss(loss, mask, mode, max_len=6), rel=1e-6)


def test_length_bias_of_each_aggregation_mode():
    """Liu et al. 2025 (Dr. GRPO), Sec. 3.1: with seq-mean-token-mean a token of a short wrong
    answer weighs more than a token of a long one, so long wrong answers are penalised less per
    token; token-mean and the constant normaliser weigh every token alike."""
    mask = _mask([2, 8], 8)                                   # two wrong answers, lengths 2 and 8
    w = {m: aggregate_weights(mask, m, max_len=8) for m in
         ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}
    assert w["seq-mean-token-mean"][0, 0] == pytest.approx(4 * w["seq-mean-token-mean"][1, 0])
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        assert w[mode][0, 0] == pytest.approx(w[mode][1, 0]), mode
    assert w["token-mean"][0, 0] == pytest.approx(1 / 10)
    assert w["seq-mean-token-sum-norm"][0, 0] == pytest.approx(1 / 16)


def test_kl_estimators_as_losses_on_a_two_action_softmax():
    """Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation for RL": used as
    a loss on samples of pi (gradient through log pi only), k1's expected gradient is 0, k2's is
    the gradient of KL(pi || ref), and k3's is the gradient of the *other* direction,
    KL(ref || pi)."""
    theta, ref = 2.0, np.array([0.1, 0.9])
    pi = np.exp([theta, 0.0]) / np.exp([theta, 0.0]).sum()
    dlogpi = np.array([1 - pi[0], -pi[0]])                    # d log pi(a) / d theta
    lp, lref = np.log(pi), np.log(ref)

    def kl(p, q):
        return float((p * np.log(p / q)).sum())

    def exact_grad(f, eps=1e-6):                              # d/dtheta by central differences
        def at(t):
            p = np.exp([t, 0.0]) / np.exp([t, 0.0]).sum()
            return f(p)
        return (at(theta + eps) - at(theta - eps)) / (2 * eps)

    def expected(kind):
        return float((pi * kl_estimate_grad(lp[None], lref[None], kind)[0] * dlogpi).sum())

    assert expected("k1") == pytest.approx(0, abs=1e-12)
    assert expected("k2") == pytest.approx(exact_grad(lambda p: kl(p, ref)), rel=1e-6)
    assert expected("k3") == pytest.approx(exact_grad(lambda p: kl(ref, p)), rel=1e-6)
    assert abs(expected("k3") - exact_grad(lambda p: kl(p, ref))) > 0.1


def test_value_loss_clipping_and_gradient():
    old, ret = np.array([[0.0, 0.0]]), np.array([[1.0, -1.0]])
    v = np.array([[0.5, 0.5]])                                # clip range 0.2 around 0
    loss, m = value_loss(v, old, ret, np.ones((1, 2)), clip_eps=0.2)
    # token 0: unclipped (0.5-1)^2 = .25, clipped (0.2-1)^2 = .64 -> max .64 -> loss .32
    # token 1: unclipped (0.5+1)^2 = 2.25, clipped (0.2+1)^2 = 1.44 -> max 2.25 -> loss 1.125
    np.testing.assert_allclose(loss, [[0.32, 1.125]])
    assert m["vf_clipfrac"] == 0.5
    rng = np.random.default_rng(3)
    v, old, ret = (rng.standard_normal((3, 4)) for _ in range(3))
    mask = _mask([4, 2, 3], 4)
    g = value_loss_grad(v, old, ret, mask)
    for i in np.ndindex(v.shape):
        vp, vm = v.copy(), v.copy()
        vp[i] += 1e-6
        vm[i] -= 1e-6
        num = (value_loss(vp, old, ret, mask)[0][i] - value_loss(vm, old, ret, mask)[0][i]) / 2e-6
        assert g[i] == pytest.approx(num, abs=1e-5)


def test_dapo_overlong_penalty():
    """DAPO Eq. 13 with L_max = 20480 and L_cache = 4096, the paper's setting."""
    pen = overlong_penalty([100, 16384, 18432, 20480, 25000], max_len=20480, buffer_len=4096)
    np.testing.assert_allclose(pen, [0, 0, -0.5, -1, -1])
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty([1], max_len=10, buffer_len=10)
