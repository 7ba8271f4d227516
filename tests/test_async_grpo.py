"""Asynchronous GRPO with bounded staleness k (book Chapter 11): k = 0 is train_grpo exactly, the
sampler lags k versions, the decoupled objective (AReaL, arXiv 2505.24298, Eq. 5) and its
gradient, config checks, determinism."""
import numpy as np
import pytest

import rlmperf_lite.rl.async_grpo as async_grpo
from rlmperf_lite.nn import TinyLMConfig, init_params, logps_backward, logps_forward
from rlmperf_lite.rl import GRPOConfig, train_grpo
from rlmperf_lite.rl.async_grpo import (AsyncGRPOConfig, behav_importance_weights,
                                        objective_inputs, train_async_grpo)
from rlmperf_lite.rl.losses import (grpo_loss, grpo_loss_grad, loss_norms, policy_loss,
                                    policy_loss_grad)

# a warm-start long enough that some groups have mixed rewards (non-zero advantages)
SHORT = dict(steps=5, warmstart_max_steps=60, seed=1, num_prompts=16)


@pytest.fixture(scope="module")
def sync_run():
    """train_grpo's run of SHORT, warm-start included."""
    return train_grpo(GRPOConfig(**SHORT))


def _no_timings(row):
    return {k: v for k, v in row.items() if not k.endswith("_s")}


@pytest.mark.parametrize("objective", ["decoupled", "naive", "behaviour"])
def test_staleness_zero_is_train_grpo_exactly(sync_run, objective):
    """k = 0: behaviour = proximal = old policy, importance weight exactly 1, so every objective
    gives train_grpo's history (every metric train_grpo logs) and weights, bit for bit; the
    batches did move the weights (the equality is not vacuous)."""
    run = train_async_grpo(AsyncGRPOConfig(objective=objective, **SHORT),
                           base_params=sync_run.base_params)
    for a, b in zip(sync_run.history, run.history, strict=True):
        assert _no_timings(a) == {k: b[k] for k in _no_timings(a)}
        assert b["staleness"] == 0
        assert b["importance_weight_mean"] == b["importance_weight_max"] == 1.0
    for k, v in sync_run.params.items():
        np.testing.assert_array_equal(run.params[k], v)
    assert any(r["grad_norm"] > 0 for r in run.history)
    assert any(not np.array_equal(run.params[k], run.base_params[k]) for k in run.params)


def test_staleness_zero_with_its_own_warm_start_is_train_grpo(sync_run):
    """Without base_params the async loop warm-starts from the same generator as train_grpo."""
    run = train_async_grpo(AsyncGRPOConfig(**SHORT))
    assert [_no_timings(r)["reward_mean"] for r in run.history] == \
        [r["reward_mean"] for r in sync_run.history]
    for k, v in sync_run.params.items():
        np.testing.assert_array_equal(run.params[k], v)


@pytest.mark.parametrize("k", [1, 3])
def test_sampler_uses_the_weights_of_version_t_minus_k(sync_run, monkeypatch, k):
    """The definition of staleness k: the batch of step t is sampled with exactly the weights
    after max(0, t - k) updates, and the history records staleness min(t, k)."""
    versions, sampled = [], []
    snapshot, sample = async_grpo._snapshot, async_grpo.sample_and_score
    monkeypatch.setattr(async_grpo, "_snapshot",
                        lambda p: versions.append(snapshot(p)) or versions[-1])
    monkeypatch.setattr(async_grpo, "sample_and_score",
                        lambda p, *a: sampled.append(snapshot(p)) or sample(p, *a))
    run = train_async_grpo(AsyncGRPOConfig(staleness=k, **SHORT),
                           base_params=sync_run.base_params)
    assert [r["staleness"] for r in run.history] == [min(t, k) for t in range(SHORT["steps"])]
    assert len(versions) == SHORT["steps"] + 1                    # version 0, then one per step
    for t, weights in enumerate(sampled):
        for name, v in versions[max(0, t - k)].items():
            np.testing.assert_array_equal(weights[name], v)


def test_batches_within_k_steps_come_from_the_base_weights(sync_run):
    """For t <= k the sampler still holds version 0: the same prompts and completions whatever
    the objective or learning rate, so the logged rewards agree; the trainer's weights do not."""
    runs = [train_async_grpo(AsyncGRPOConfig(staleness=SHORT["steps"], objective=o, lr=lr,
                                             **SHORT), base_params=sync_run.base_params)
            for o, lr in (("decoupled", 1e-3), ("behaviour", 3e-3))]
    assert [r["reward_mean"] for r in runs[0].history] == \
        [r["reward_mean"] for r in runs[1].history]
    assert not np.array_equal(runs[0].params["lm_head"], runs[1].params["lm_head"])


def test_importance_weight_is_one_when_fresh_and_not_when_stale(sync_run):
    """w = pi_prox / pi_behav is exactly 1 on a fresh batch (step 0) and differs from 1 once the
    sampler lags (k = 2); the recompute of the proximal log-probs is one forward of the batch
    (its counted FLOPs equal the training forward's) and is skipped on fresh batches."""
    rows = train_async_grpo(AsyncGRPOConfig(staleness=2, **SHORT),
                            base_params=sync_run.base_params).history
    assert rows[0]["importance_weight_mean"] == rows[0]["importance_weight_max"] == 1.0
    assert "prox_logps_flops" not in rows[0]
    for r in rows[1:]:
        assert r["importance_weight_max"] > 1.0 and r["importance_weight_mean"] != 1.0
        assert r["prox_logps_flops"] == r["train_forward_flops"]
        assert r["approx_kl"] > 0


def _batch(rng, n=6, R=5):
    """Random float64 log-probs of the current, proximal and behaviour policies, far enough apart
    that the clip binds on some tokens, group advantages and a ragged mask."""
    logps = np.log(rng.uniform(0.05, 0.95, (n, R)))
    prox = logps + 0.3 * rng.standard_normal((n, R))
    behav = prox + 0.5 * rng.standard_normal((n, R))
    adv = rng.standard_normal(n)
    mask = (np.arange(R) < rng.integers(1, R + 1, n)[:, None]).astype(np.float64)
    return logps, prox, behav, adv, mask


def test_decoupled_loss_is_the_weighted_clipped_surrogate_and_its_gradient():
    """AReaL Eq. 5: loss_t = -w_t min(r A, clip(r) A), r = pi/pi_prox, w = pi_prox/pi_behav a
    constant. Folding w into the advantage gives the same per-token loss and the gradient
    w * policy_loss_grad(logp, prox, A) (w > 0 keeps the clip decision); both hold."""
    logps, prox, behav, adv, mask = _batch(np.random.default_rng(0))
    w = np.exp((prox - behav) * mask)
    old, wadv = objective_inputs("decoupled", adv, behav, prox, mask)
    loss, metrics = policy_loss(logps, old, wadv, mask)
    assert metrics["clipfrac"] > 0                                   # the clip binds somewhere
    np.testing.assert_allclose(loss, w * policy_loss(logps, prox, adv, mask)[0], rtol=1e-12)
    np.testing.assert_allclose(policy_loss_grad(logps, old, wadv, mask),
                               w * policy_loss_grad(logps, prox, adv, mask), rtol=1e-12)
    assert objective_inputs("naive", adv, behav, prox, mask)[0] is prox
    assert objective_inputs("behaviour", adv, behav, prox, mask)[0] is behav


def test_decoupled_gradient_matches_finite_differences():
    """The loop's dLoss/dlogps (grpo_loss_grad on objective_inputs, token-mean, clip-higher)
    equals central differences of the aggregated decoupled loss, per token, in float64."""
    logps, prox, behav, adv, mask = _batch(np.random.default_rng(1))
    c = AsyncGRPOConfig(clip_eps_high=0.28)
    old, wadv = objective_inputs("decoupled", adv, behav, prox, mask)
    norms = loss_norms(mask, c)
    grad = grpo_loss_grad(logps, old, wadv, mask, c, norms)
    fd, h = np.zeros_like(logps), 1e-6
    for i in np.ndindex(logps.shape):
        up, down = logps.copy(), logps.copy()
        up[i] += h
        down[i] -= h
        fd[i] = (grpo_loss(up, old, wadv, mask, c, norms)[0]
                 - grpo_loss(down, old, wadv, mask, c, norms)[0]) / (2 * h)
    np.testing.assert_allclose(grad, fd, atol=1e-8)
    assert np.count_nonzero(grad) < mask.sum()                # clipped tokens get no gradient


def test_decoupled_gradient_through_the_tiny_model_matches_finite_differences():
    """End to end on a tiny float64 model: the weight gradient of the decoupled loss
    (logps_backward of grpo_loss_grad) equals the directional finite difference of the loss."""
    rng = np.random.default_rng(2)
    cfg = TinyLMConfig(vocab_size=7, max_seq_len=8, hidden_size=8, num_layers=1, num_heads=2,
                       intermediate_size=16)
    params = init_params(cfg, rng, dtype=np.float64)
    P, R, n = 3, 5, 6
    tokens = rng.integers(0, cfg.vocab_size, (n, P + R))
    logps_all, cache = logps_forward(params, tokens, cfg)
    _, _, behav, adv, mask = _batch(rng, n, R)
    prox = logps_all[:, P - 1:] + 0.2 * rng.standard_normal((n, R))   # ratios away from 1
    c = AsyncGRPOConfig(max_new_tokens=R)
    old, wadv = objective_inputs("decoupled", adv, behav, prox, mask)
    norms = loss_norms(mask, c)

    def loss(p):
        return grpo_loss(logps_forward(p, tokens, cfg)[0][:, P - 1:], old, wadv, mask,
                                 c, norms)[0]

    dlogps = np.zeros_like(logps_all)
    dlogps[:, P - 1:] = grpo_loss_grad(logps_all[:, P - 1:], old, wadv, mask, c, norms)
    grads = logps_backward(dlogps, cache)
    direction = {k: rng.standard_normal(v.shape) for k, v in params.items()}
    h = 1e-6
    up = {k: v + h * direction[k] for k, v in params.items()}
    down = {k: v - h * direction[k] for k, v in params.items()}
    analytic = sum(float(np.vdot(grads[k], direction[k])) for k in params)
    np.testing.assert_allclose((loss(up) - loss(down)) / (2 * h), analytic, rtol=1e-6)


def test_importance_weight_cap_filters_tokens():
    """AReaL's behav_imp_weight_cap: tokens with w above the cap get weight 0 (not clamped);
    masked positions weigh 1."""
    prox = np.log([[0.5, 0.9, 0.2]])
    behav = np.log([[0.5, 0.1, 0.4]])
    mask = np.array([[1.0, 1.0, 0.0]])
    np.testing.assert_allclose(behav_importance_weights(prox, behav, mask), [[1.0, 9.0, 1.0]])
    np.testing.assert_allclose(behav_importance_weights(prox, behav, mask, cap=5.0),
                               [[1.0, 0.0, 1.0]])


@pytest.mark.parametrize("field,value", [
    ("staleness", -1), ("staleness", 1.5), ("staleness", True), ("objective", "ppo"),
    ("num_minibatches", 0), ("num_minibatches", 64), ("behav_imp_weight_cap", 1.0),
    ("behav_imp_weight_cap", float("nan"))])
def test_bad_config_values_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"AsyncGRPOConfig.{field}"):
        AsyncGRPOConfig(**{field: value})


def test_importance_weight_cap_is_for_the_decoupled_objective_only():
    with pytest.raises(ValueError, match="AsyncGRPOConfig.behav_imp_weight_cap"):
        AsyncGRPOConfig(objective="naive", behav_imp_weight_cap=5.0)
    assert AsyncGRPOConfig(behav_imp_weight_cap=5.0).behav_imp_weight_cap == 5.0


@pytest.mark.parametrize("kwargs,name", [
    ({"eval_every": -1}, "eval_every"), ({"on_step": 3}, "on_step"),
    ({"progress": "yes"}, "progress"), ({"task": "addition"}, "task"),
    ({"base_params": {"wte": np.zeros((2, 2))}}, "base_params")])
def test_bad_run_arguments_raise_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        train_async_grpo(AsyncGRPOConfig(steps=1, warmstart_max_steps=0), **kwargs)


def test_wrong_config_type_and_unknown_objective_raise():
    with pytest.raises(ValueError, match="config must be an AsyncGRPOConfig"):
        train_async_grpo(GRPOConfig())
    with pytest.raises(ValueError, match="objective"):
        objective_inputs("ppo", np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)))


def test_short_run_is_deterministic_for_a_seed(sync_run):
    """Same config and seed, same numbers (stale sampling, several minibatches); another seed's
    prompts and samples differ."""
    c = AsyncGRPOConfig(staleness=2, num_minibatches=2, **SHORT)
    a, b = (train_async_grpo(c, base_params=sync_run.base_params) for _ in range(2))
    assert [_no_timings(r) for r in a.history] == [_no_timings(r) for r in b.history]
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    other = train_async_grpo(AsyncGRPOConfig(staleness=2, num_minibatches=2,
                                             **{**SHORT, "seed": 2}),
                             base_params=sync_run.base_params)
    assert [r["reward_mean"] for r in other.history] != [r["reward_mean"] for r in a.history]
