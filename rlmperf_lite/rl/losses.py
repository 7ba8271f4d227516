"""The PPO-clipped policy loss (optionally dual-clipped), the KL estimators and loss aggregation,
with their gradients.

Book section :ref:`sec-grpo`. numpy has no autograd, so each loss has a ``*_grad`` twin giving the
derivative of the per-token loss with respect to ``per_token_logps``; tests check each twin by
finite differences. All arrays are (B*G, R): B*G completions, R completion positions.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_choice, check_number, check_real_array
from .inputs import check_completion_mask, check_fits_float32, check_per_token_array

__all__ = ["policy_loss", "policy_loss_grad", "kl_estimate", "kl_estimate_grad",
           "KL_ESTIMATORS", "aggregate_weights", "aggregate_loss", "value_loss", "value_loss_grad",
           "overlong_penalty", "AGG_MODES", "loss_norms", "grpo_loss", "grpo_loss_grad"]


def _loss_inputs(per_token_logps, old_per_token_logps, advantages, completion_mask,
                 clip_eps_low, clip_eps_high, clip_ratio_c=None):
    check_number("clip_eps_low", clip_eps_low, low=0, high=1)
    check_number("clip_eps_high", clip_eps_high, low=0)
    if clip_ratio_c is not None:               # verl asserts > 1: a cap below 1 + eps bites first
        check_number("clip_ratio_c", clip_ratio_c, low=1, low_open=True)
    logps = check_per_token_array("per_token_logps", per_token_logps)
    old = check_per_token_array("old_per_token_logps", old_per_token_logps, logps.shape)
    dtype = np.result_type(logps.dtype, np.float32)     # float16: exp(12) would overflow
    logps = logps.astype(dtype, copy=False)
    mask = check_completion_mask(completion_mask, logps.shape).astype(dtype)
    try:
        adv = np.asarray(advantages)
    except (ValueError, TypeError):                          # ragged lists
        adv = np.asarray(None)
    if adv.dtype.kind not in "biuf" or not np.isfinite(adv).all():
        raise ValueError(f"advantages must be finite real numbers, got dtype {adv.dtype}; "
                         "check the rewards")
    if adv.ndim == 1:
        adv = adv[:, None]
    if adv.shape not in ((logps.shape[0], 1), logps.shape):
        raise ValueError(f"advantages must have shape ({logps.shape[0]},) or {logps.shape}, "
                         f"got {np.shape(advantages)}")
    adv = check_fits_float32("advantages", adv, "rescale the rewards") if dtype == np.float32 \
        else adv.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):      # checked by _check_loss
        log_ratio = np.where(mask > 0, logps - old, 0)
    return logps, old, adv, mask, log_ratio


def _check_loss(name, x, log_ratio, adv):
    """Raise ValueError if the loss ``x`` (or a metric) is not finite: the ratio overflowed."""
    if not np.isfinite(x).all():
        i = np.unravel_index(np.argmax(np.abs(log_ratio)), log_ratio.shape)
        raise ValueError(f"{name} overflows {log_ratio.dtype}: the log-ratio per_token_logps - "
                         f"old_per_token_logps reaches {log_ratio[i]:.4g} at {list(map(int, i))} "
                         f"and |advantages| {np.abs(adv).max():.4g}; log-probs are <= 0 and "
                         "stay near the old ones unless the policy diverged (lower lr)")


def policy_loss(per_token_logps, old_per_token_logps, advantages, completion_mask, *,
                clip_eps_low: float = 0.2, clip_eps_high: float = 0.2,
                clip_ratio_c: float | None = None):
    """PPO clipped surrogate (Schulman et al. 2017, Eq. 7), negated to be a loss.

    ``ratio = exp(logp - old_logp)``;
    ``loss_t = -min(ratio * A, clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * A)``.
    With ``clip_ratio_c`` = c (dual clip, Ye et al. 2020, arXiv 1912.09729, Eq. 5), a token with
    A < 0 has its loss capped at ``-c * A`` = c abs(A): ``loss_t = min(loss_t, -c * A)``, so a
    huge ratio on a bad token cannot blow up the step. As verl's ``compute_policy_loss_vanilla``
    (volcengine/verl ``verl/trainer/ppo/core_algos.py`` at commit 012be9d9;
    ``clip_ratio_c`` default 3.0 there, off here).

    Args:
        per_token_logps, old_per_token_logps: (B*G, R) current and behaviour log-probs.
        advantages: (B*G,) one per completion, or (B*G, R) per token.
        completion_mask: (B*G, R), 1 for real completion tokens.
        clip_ratio_c: None (off) or a number > 1.
    Returns:
        per_token_loss (B*G, R) (0 where masked) and metrics ``approx_kl`` (k3 of old vs new,
        as in cleanrl's ppo.py), ``clipfrac`` (share of tokens whose clipped branch is active),
        ``ratio_mean``, ``ratio_max``, all means over unmasked tokens; with ``clip_ratio_c``
        also ``clipfrac_lower`` (verl's ``pg_clipfrac_lower``: share of tokens with A < 0 whose
        loss the cap lowered).
    Raises:
        ValueError: naming the argument, for mismatched shapes, non-finite values, a mask
            that is not 0/1, ``clip_eps_low`` outside [0, 1] or ``clip_eps_high`` negative or
            non-finite, ``clip_ratio_c`` not a finite number > 1, or a loss that overflows (a
            huge log-ratio). Float16 log-probs are upcast to float32 (exp(12) overflows float16).
    """
    logps, old, adv, mask, log_ratio = _loss_inputs(
        per_token_logps, old_per_token_logps, advantages, completion_mask, clip_eps_low,
        clip_eps_high, clip_ratio_c)
    with np.errstate(over="ignore", invalid="ignore"):      # checked by _check_loss
        ratio = np.exp(log_ratio)
        surr1 = ratio * adv
        surr2 = np.clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * adv
        per_token_loss = -np.minimum(surr1, surr2) * mask
        n = max(float(mask.sum()), 1.0)
        metrics = {
            "approx_kl": float((((ratio - 1) - log_ratio) * mask).sum() / n),
            "clipfrac": float(((surr2 < surr1) * mask).sum() / n),
            "ratio_mean": float((ratio * mask).sum() / n),
            "ratio_max": float(np.where(mask > 0, ratio, -np.inf).max(initial=1.0)),
        }
        if clip_ratio_c is not None:
            capped = (adv < 0) & (per_token_loss > -clip_ratio_c * adv)     # (B*G, R)
            per_token_loss = np.where(capped, -clip_ratio_c * adv, per_token_loss) * mask
            metrics["clipfrac_lower"] = float((capped * mask).sum() / n)
    _check_loss("policy_loss", [per_token_loss.sum(), *metrics.values()], log_ratio, adv)
    return per_token_loss, metrics


def policy_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask, *,
                     clip_eps_low: float = 0.2, clip_eps_high: float = 0.2,
                     clip_ratio_c: float | None = None) -> np.ndarray:
    """d per_token_loss / d per_token_logps, (B*G, R): ``-A * ratio`` where the unclipped branch
    is the minimum, 0 where the clipped or the dual-clip cap (constant) is. Errors as
    :func:`policy_loss`."""
    logps, old, adv, mask, log_ratio = _loss_inputs(
        per_token_logps, old_per_token_logps, advantages, completion_mask, clip_eps_low,
        clip_eps_high, clip_ratio_c)
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = np.exp(log_ratio)
        clipped = np.clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * adv
        unclipped = ratio * adv <= clipped
        if clip_ratio_c is not None:                   # the cap -c A is constant in logp
            unclipped &= ~((adv < 0) & (-np.minimum(ratio * adv, clipped) > -clip_ratio_c * adv))
        grad = -adv * np.where(unclipped, ratio, 0) * mask
    _check_loss("policy_loss_grad", grad, log_ratio, adv)
    return grad


KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
"""The per-token KL estimators :func:`kl_estimate` knows, by verl's names (``kl_penalty``)."""


def _kl_inputs(per_token_logps, ref_per_token_logps, kind):
    check_choice("kind", kind, KL_ESTIMATORS)
    logps = check_per_token_array("per_token_logps", per_token_logps)
    logps = logps.astype(np.result_type(logps.dtype, np.float32), copy=False)   # as policy_loss
    ref = check_per_token_array("ref_per_token_logps", ref_per_token_logps, logps.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        return ref - logps


def _check_kl(name, x, d):
    if not np.isfinite(x).all():
        raise ValueError(f"{name} overflows {x.dtype}: ref_per_token_logps - per_token_logps "
                         f"reaches {d.flat[np.argmax(np.abs(d))]:.4g}; log-probs are <= 0 and "
                         "the policy stays near the reference unless it diverged (lower lr)")
    return x


def kl_estimate(per_token_logps, ref_per_token_logps, kind: str = "k3") -> np.ndarray:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman 2020, "Approximating
    KL divergence"): with ``d = ref_logp - logp`` (log r, r = pi_ref / pi), k1 = -d,
    k2 = d^2 / 2, k3 = exp(d) - d - 1 (the one GRPO uses, DeepSeekMath Eq. 4), and abs = abs(d)
    (verl's ``kl_penalty="abs"``, core_algos.py at commit 012be9d9; biased, an L1 distance of the
    log-probs, not an unbiased KL). Shapes (B*G, R); ValueError naming the argument for
    mismatched shapes, non-finite values, an unknown ``kind`` or an estimate that overflows."""
    d = _kl_inputs(per_token_logps, ref_per_token_logps, kind)
    with np.errstate(over="ignore", invalid="ignore"):
        est = {"k1": lambda: -d, "k2": lambda: 0.5 * d * d, "k3": lambda: np.exp(d) - d - 1,
               "abs": lambda: np.abs(d)}
        return _check_kl("kl_estimate", est[kind](), d)


def kl_estimate_grad(per_token_logps, ref_per_token_logps, kind: str = "k3") -> np.ndarray:
    """d kl_estimate / d per_token_logps, (B*G, R); for "abs" ``-sign(d)`` (0 at d = 0, the
    subgradient torch's ``abs`` backward takes); errors as :func:`kl_estimate`."""
    d = _kl_inputs(per_token_logps, ref_per_token_logps, kind)
    with np.errstate(over="ignore", invalid="ignore"):
        grad = {"k1": lambda: np.ones_like(d), "k2": lambda: -d, "k3": lambda: 1 - np.exp(d),
                "abs": lambda: -np.sign(d)}
        return _check_kl("kl_estimate_grad", grad[kind](), d)


AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def aggregate_weights(completion_mask, mode: str = "token-mean", *, max_len: int | None = None,
                      num_tokens: float | None = None, num_seqs: int | None = None) -> np.ndarray:
    """Weights w (B*G, R) with ``loss = sum(w * per_token_loss)`` for an aggregation mode.

    - ``"token-mean"``: each unmasked token weighs 1 / (tokens in the batch) (DAPO,
      arXiv 2503.14476, Eq. 12; verl's default).
    - ``"seq-mean-token-mean"``: mean over each sequence's tokens, then over sequences (the
      original GRPO objective, DeepSeekMath Eq. 3): a token of a short answer weighs more.
    - ``"seq-mean-token-sum"``: sum over each sequence's tokens, mean over sequences.
    - ``"seq-mean-token-sum-norm"``: sum over tokens divided by the constant ``max_len`` (default
      R), mean over sequences (Dr. GRPO, arXiv 2503.20783, Sec. 3.1): no length bias. verl's
      mode of this name sums over the whole batch without the mean over sequences (a constant
      factor of the batch size, which the learning rate absorbs).

    For micro-batches, pass the whole batch's ``num_tokens`` (token-mean) or ``num_seqs`` (the
    seq-mean modes): summing the micro-batch losses then gives exactly the batch loss, where a
    mean of micro-batch means would not (verl issue #5625).

    Raises:
        ValueError: a mask that is not 2-D 0/1, an unknown mode, or a ``max_len``,
            ``num_tokens`` or ``num_seqs`` that is not a finite number >= 1 (they count tokens
            and sequences).
    """
    mask = check_completion_mask(completion_mask).astype(np.float32)
    check_choice("mode", mode, AGG_MODES)
    for name, v in (("max_len", max_len), ("num_tokens", num_tokens), ("num_seqs", num_seqs)):
        if v is not None:                          # counts: below 1 the weights overflow
            check_number(name, v, low=1)
    if mode == "token-mean":
        return mask / (num_tokens if num_tokens is not None else max(float(mask.sum()), 1.0))
    n_seq = num_seqs if num_seqs is not None else mask.shape[0]
    if mode == "seq-mean-token-mean":
        return mask / np.maximum(mask.sum(axis=1, keepdims=True), 1.0) / n_seq
    if mode == "seq-mean-token-sum":
        return mask / n_seq
    return mask / (max_len if max_len is not None else mask.shape[1]) / n_seq


def aggregate_loss(per_token_loss, completion_mask, mode: str = "token-mean", *,
                   max_len: int | None = None, num_tokens: float | None = None,
                   num_seqs: int | None = None) -> float:
    """Scalar loss from per-token losses (B*G, R); see :func:`aggregate_weights`. Raises
    ValueError as it does, for a bad ``per_token_loss`` or a sum that overflows."""
    weights = aggregate_weights(completion_mask, mode, max_len=max_len, num_tokens=num_tokens,
                                num_seqs=num_seqs)
    loss = check_per_token_array("per_token_loss", per_token_loss, weights.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        total = float((weights * loss).sum())
    if not np.isfinite(total):
        raise ValueError(f"the aggregated loss overflows: per_token_loss reaches "
                         f"{np.abs(loss).max():.4g}; rescale the loss")
    return total


def _value_inputs(values, old_values, returns, completion_mask, clip_eps):
    check_number("clip_eps", clip_eps, low=0)
    v = check_per_token_array("values", values)
    old = check_per_token_array("old_values", old_values, v.shape)
    ret = check_per_token_array("returns", returns, v.shape)
    return v, old, ret, check_completion_mask(completion_mask, v.shape).astype(v.dtype)


def _check_value(x, v, ret):
    if not np.isfinite(x).all():
        raise ValueError(f"the value loss overflows {v.dtype}: values reach "
                         f"{np.abs(v).max():.4g} and returns {np.abs(ret).max():.4g}; rescale "
                         "the rewards (or lower critic_lr if the critic diverged)")


def value_loss(values, old_values, returns, completion_mask, *, clip_eps: float = 0.2):
    """Clipped value loss of PPO's critic (as in OpenAI baselines / cleanrl ppo.py):
    ``0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2)`` per token.

    Args:
        values, old_values, returns: (B*G, R) current and rollout-time values, GAE returns.
    Returns:
        per_token_loss (B*G, R) (0 where masked) and metrics ``vf_clipfrac`` (share of tokens where
        the clipped term is the larger one) and ``explained_variance`` of the returns (NaN when
        the returns do not vary).
    Raises:
        ValueError: naming the argument for mismatched shapes, non-finite values, a mask that
            is not 0/1, a negative or non-finite ``clip_eps``, or a loss that overflows.
    """
    v, old, ret, mask = _value_inputs(values, old_values, returns, completion_mask, clip_eps)
    with np.errstate(over="ignore", invalid="ignore"):      # checked below
        clipped = old + np.clip(v - old, -clip_eps, clip_eps)
        unclipped_sq, clipped_sq = (v - ret) ** 2, (clipped - ret) ** 2
        per_token_loss = 0.5 * np.maximum(unclipped_sq, clipped_sq) * mask
        n = max(float(mask.sum()), 1.0)
        ret_var = float((((ret - (ret * mask).sum() / n) * mask) ** 2).sum() / n)
        err_var = float(((((ret - v) - ((ret - v) * mask).sum() / n) * mask) ** 2).sum() / n)
    _check_value([per_token_loss.sum(), ret_var, err_var], v, ret)
    return per_token_loss, {
        "vf_clipfrac": float(((clipped_sq > unclipped_sq) * mask).sum() / n),
        "explained_variance": 1.0 - err_var / ret_var if ret_var > 0 else float("nan"),
    }


def value_loss_grad(values, old_values, returns, completion_mask, *,
                    clip_eps: float = 0.2) -> np.ndarray:
    """d per_token_loss / d values of :func:`value_loss`, (B*G, R); errors as it."""
    v, old, ret, mask = _value_inputs(values, old_values, returns, completion_mask, clip_eps)
    with np.errstate(over="ignore", invalid="ignore"):
        inside = np.abs(v - old) < clip_eps                  # clip passes the gradient through
        clipped = old + np.clip(v - old, -clip_eps, clip_eps)
        use_clipped = (clipped - ret) ** 2 > (v - ret) ** 2
        grad = np.where(use_clipped, (clipped - ret) * inside, v - ret) * mask
    _check_value(grad, v, ret)
    return grad


def overlong_penalty(lengths, max_len: int, buffer_len: int, factor: float = 1.0) -> np.ndarray:
    """DAPO's soft overlong punishment (arXiv 2503.14476, Eq. 13), added to the reward:
    0 up to ``max_len - buffer_len`` tokens, then falling linearly to ``-factor`` at ``max_len``,
    and ``-factor`` beyond.

    Args:
        lengths: (B*G,) completion lengths in tokens.
        max_len, buffer_len: L_max > L_cache > 0.
    Returns:
        penalties (B*G,) float32 in [-factor, 0].
    Raises:
        ValueError: ``max_len`` or ``buffer_len`` not finite numbers with
            0 < buffer_len < max_len, lengths that are not finite and >= 0, or a negative or
            non-finite factor.
    """
    check_number("max_len", max_len, low=0, low_open=True)
    check_number("buffer_len", buffer_len, low=0, low_open=True)
    if not buffer_len < max_len:
        raise ValueError(f"buffer_len must be in (0, max_len={max_len}), got {buffer_len!r}")
    check_number("factor", factor, low=0)
    n = check_real_array("lengths", lengths, low=0)
    if n.ndim != 1:
        raise ValueError(f"lengths must be a 1-D array of non-negative lengths, got {n.shape}")
    soft = ((max_len - buffer_len) - n) / buffer_len
    return (factor * np.clip(soft, -1.0, 0.0)).astype(np.float32)


def loss_norms(completion_mask, config) -> dict:
    """The whole batch's normalisers of the loss aggregation (``max_len``, ``num_tokens``,
    ``num_seqs`` of :func:`aggregate_weights`), for a (B*G, R) ``completion_mask`` and a
    :class:`~rlmperf_lite.rl.GRPOConfig` (its ``max_new_tokens``)."""
    # once per batch, passed to every micro-batch and data-parallel rank, so that their summed
    # gradients equal the whole batch's (verl #5625; book section sec-loss-aggregation)
    check_completion_mask(completion_mask)
    return {"max_len": config.max_new_tokens,
            "num_tokens": max(float(np.sum(completion_mask)), 1.0),
            "num_seqs": int(np.shape(completion_mask)[0])}


def grpo_loss(per_token_logps, old_per_token_logps, advantages, completion_mask, config,
              norms: dict, *, ref_per_token_logps=None, rollout_is_weights=None):
    """GRPO's loss, sum(w * (rho * clipped surrogate + kl_coef * KL)), and the metrics the field
    logs.

    Shao et al. 2024, Eq. 3, with the aggregation weights w of ``config.loss_agg_mode`` and the
    whole batch's ``norms`` (:func:`loss_norms`), so micro-batches' and ranks' terms add up to the
    batch's loss. The KL estimator is ``config.kl_estimator`` (k3 by default) and the dual clip
    ``config.clip_ratio_c`` (off by default); rho, when given, are the engine-to-trainer
    importance weights (rows, R) of :func:`rlmperf_lite.rl.rollout_is_weights`, on the surrogate
    only (as verl). Arrays (rows, R); advantages (rows,) or
    (rows, R); ``config`` a :class:`~rlmperf_lite.rl.GRPOConfig`. Returns (loss, metrics):
    ``approx_kl``, ``clipfrac``, ... of :func:`policy_loss`, plus ``kl_ref`` with a reference.
    Raises ValueError on bad shapes.
    """
    c, mask = config, completion_mask
    per_token_loss, metrics = policy_loss(per_token_logps, old_per_token_logps, advantages,
                                          mask, clip_eps_low=c.clip_eps,
                                          clip_eps_high=c.clip_eps_high or c.clip_eps,
                                          clip_ratio_c=c.clip_ratio_c)
    if rollout_is_weights is not None:
        per_token_loss = per_token_loss * check_per_token_array(
            "rollout_is_weights", rollout_is_weights, per_token_loss.shape)
    if ref_per_token_logps is not None:                       # the KL term is in the loss
        kl = kl_estimate(per_token_logps, ref_per_token_logps, c.kl_estimator) * mask
        per_token_loss = per_token_loss + c.kl_coef * kl
        metrics["kl_ref"] = float(kl.sum() / max(mask.sum(), 1.0))
    weights = aggregate_weights(mask, c.loss_agg_mode, **norms)
    return float((weights * per_token_loss).sum()), metrics


def grpo_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask, config,
                   norms: dict, *, ref_per_token_logps=None,
                   rollout_is_weights=None) -> np.ndarray:
    """d :func:`grpo_loss` / d per_token_logps, (rows, R): the one place the loop, its
    micro-batches and Part III's simulated ranks take the loss gradient from. Arguments and
    errors as :func:`grpo_loss`."""
    c = config
    dloss = policy_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask,
                             clip_eps_low=c.clip_eps, clip_eps_high=c.clip_eps_high or c.clip_eps,
                             clip_ratio_c=c.clip_ratio_c)
    if rollout_is_weights is not None:                  # constants: they scale the gradient
        dloss = dloss * check_per_token_array("rollout_is_weights", rollout_is_weights,
                                              dloss.shape)
    if ref_per_token_logps is not None:
        dloss = dloss + c.kl_coef * kl_estimate_grad(
            per_token_logps, ref_per_token_logps, c.kl_estimator) * completion_mask
    return aggregate_weights(completion_mask, c.loss_agg_mode, **norms) * dloss
