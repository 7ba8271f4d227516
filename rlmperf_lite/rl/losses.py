"""The PPO-clipped policy loss, the k3 KL estimator and loss aggregation, with their gradients.

Book section :ref:`sec-grpo`. numpy has no autograd, so each loss has a ``*_grad`` twin giving the
derivative of the per-token loss with respect to ``per_token_logps``; tests check each twin by
finite differences. All arrays are (B*G, R): B*G completions, R completion positions.
"""
from __future__ import annotations

import numpy as np

__all__ = ["policy_loss", "policy_loss_grad", "kl_estimate", "kl_estimate_grad",
           "aggregate_weights", "aggregate_loss", "value_loss", "value_loss_grad",
           "overlong_penalty", "AGG_MODES", "loss_norms", "grpo_loss", "grpo_loss_grad"]


def _as_2d(name, x, shape=None):
    """``x`` as a float array of 2-D ``shape`` (or any 2-D shape), with finite values.

    Raises:
        ValueError: naming ``name``, for a wrong shape or a NaN/inf entry.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.number) or x.ndim != 2 or (shape and x.shape != shape):
        want = f"shape {shape}" if shape else "a 2-D (B*G, R) shape"
        raise ValueError(f"{name} must be a numeric array of {want}, got shape {x.shape} "
                         f"and dtype {x.dtype}")
    if not np.isfinite(x).all():
        i = tuple(int(v) for v in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(f"{name}{list(i)} is {x[i]}; every entry must be finite")
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def _loss_inputs(per_token_logps, old_per_token_logps, advantages, completion_mask):
    logps = _as_2d("per_token_logps", per_token_logps)
    old = _as_2d("old_per_token_logps", old_per_token_logps, logps.shape)
    mask = _as_2d("completion_mask", completion_mask, logps.shape).astype(logps.dtype)
    adv = np.asarray(advantages, dtype=logps.dtype)
    if adv.ndim == 1:
        adv = adv[:, None]
    if adv.shape not in ((logps.shape[0], 1), logps.shape):
        raise ValueError(f"advantages must have shape ({logps.shape[0]},) or {logps.shape}, "
                         f"got {np.shape(advantages)}")
    if not np.isfinite(adv).all():
        raise ValueError("advantages hold a NaN or inf; check the rewards")
    return logps, old, adv, mask


def policy_loss(per_token_logps, old_per_token_logps, advantages, completion_mask, *,
                clip_eps_low: float = 0.2, clip_eps_high: float = 0.2):
    """PPO clipped surrogate (Schulman et al. 2017, Eq. 7), negated to be a loss.

    ``ratio = exp(logp - old_logp)``;
    ``loss_t = -min(ratio * A, clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * A)``.

    Args:
        per_token_logps, old_per_token_logps: (B*G, R) current and behaviour log-probs.
        advantages: (B*G,) one per completion, or (B*G, R) per token.
        completion_mask: (B*G, R), 1 for real completion tokens.
    Returns:
        per_token_loss (B*G, R) (0 where masked) and metrics ``approx_kl`` (k3 of old vs new,
        as in cleanrl's ppo.py), ``clipfrac`` (share of tokens whose clipped branch is active),
        ``ratio_mean``, ``ratio_max``, all means over unmasked tokens.
    Raises:
        ValueError: naming the argument, for mismatched shapes or non-finite values.
    """
    per_token_logps, old_per_token_logps, adv, mask = _loss_inputs(
        per_token_logps, old_per_token_logps, advantages, completion_mask)
    log_ratio = (per_token_logps - old_per_token_logps) * mask
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
    return per_token_loss, metrics


def policy_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask, *,
                     clip_eps_low: float = 0.2, clip_eps_high: float = 0.2) -> np.ndarray:
    """d per_token_loss / d per_token_logps, (B*G, R): ``-A * ratio`` where the unclipped branch
    is the minimum, 0 where the clipped (constant) branch is."""
    per_token_logps, old_per_token_logps, adv, mask = _loss_inputs(
        per_token_logps, old_per_token_logps, advantages, completion_mask)
    ratio = np.exp((per_token_logps - old_per_token_logps) * mask)
    unclipped = ratio * adv <= np.clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * adv
    return -adv * ratio * unclipped * mask


def kl_estimate(per_token_logps, ref_per_token_logps, kind: str = "k3") -> np.ndarray:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman 2020, "Approximating
    KL divergence"): with ``d = ref_logp - logp``, k1 = -d, k2 = d^2 / 2, k3 = exp(d) - d - 1
    (the one GRPO uses, DeepSeekMath Eq. 4). Shapes (B*G, R); ValueError for mismatched shapes,
    non-finite values or an unknown ``kind``."""
    logps = _as_2d("per_token_logps", per_token_logps)
    d = _as_2d("ref_per_token_logps", ref_per_token_logps, logps.shape) - logps
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        return np.exp(d) - d - 1
    raise ValueError(f"kind must be 'k1', 'k2' or 'k3', got {kind!r}")


def kl_estimate_grad(per_token_logps, ref_per_token_logps, kind: str = "k3") -> np.ndarray:
    """d kl_estimate / d per_token_logps, (B*G, R)."""
    logps = _as_2d("per_token_logps", per_token_logps)
    d = _as_2d("ref_per_token_logps", ref_per_token_logps, logps.shape) - logps
    if kind == "k1":
        return np.ones_like(d)
    if kind == "k2":
        return -d
    if kind == "k3":
        return 1 - np.exp(d)
    raise ValueError(f"kind must be 'k1', 'k2' or 'k3', got {kind!r}")


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
        ValueError: a bad mask, an unknown mode, or a non-positive ``max_len``, ``num_tokens``
            or ``num_seqs``.
    """
    mask = _as_2d("completion_mask", completion_mask).astype(np.float32)
    if mode not in AGG_MODES:
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    for name, v in (("max_len", max_len), ("num_tokens", num_tokens), ("num_seqs", num_seqs)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
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
    """Scalar loss from per-token losses (B*G, R); see :func:`aggregate_weights`."""
    weights = aggregate_weights(completion_mask, mode, max_len=max_len, num_tokens=num_tokens,
                                num_seqs=num_seqs)
    return float((weights * _as_2d("per_token_loss", per_token_loss, weights.shape)).sum())


def value_loss(values, old_values, returns, completion_mask, *, clip_eps: float = 0.2):
    """Clipped value loss of PPO's critic (as in OpenAI baselines / cleanrl ppo.py):
    ``0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2)`` per token.

    Args:
        values, old_values, returns: (B*G, R) current and rollout-time values, GAE returns.
    Returns:
        per_token_loss (B*G, R) (0 where masked) and metrics ``vf_clipfrac`` (share of tokens where
        the clipped term is the larger one) and ``explained_variance`` of the returns.
    Raises:
        ValueError: naming the argument for mismatched shapes or non-finite values.
    """
    v = _as_2d("values", values)
    old = _as_2d("old_values", old_values, v.shape)
    ret = _as_2d("returns", returns, v.shape)
    mask = _as_2d("completion_mask", completion_mask, v.shape).astype(v.dtype)
    clipped = old + np.clip(v - old, -clip_eps, clip_eps)
    unclipped_sq, clipped_sq = (v - ret) ** 2, (clipped - ret) ** 2
    per_token_loss = 0.5 * np.maximum(unclipped_sq, clipped_sq) * mask
    n = max(float(mask.sum()), 1.0)
    ret_var = float((((ret - (ret * mask).sum() / n) * mask) ** 2).sum() / n)
    err_var = float(((((ret - v) - ((ret - v) * mask).sum() / n) * mask) ** 2).sum() / n)
    return per_token_loss, {
        "vf_clipfrac": float(((clipped_sq > unclipped_sq) * mask).sum() / n),
        "explained_variance": 1.0 - err_var / ret_var if ret_var > 0 else float("nan"),
    }


def value_loss_grad(values, old_values, returns, completion_mask, *,
                    clip_eps: float = 0.2) -> np.ndarray:
    """d per_token_loss / d values of :func:`value_loss`, (B*G, R)."""
    v = _as_2d("values", values)
    old = _as_2d("old_values", old_values, v.shape)
    ret = _as_2d("returns", returns, v.shape)
    mask = _as_2d("completion_mask", completion_mask, v.shape).astype(v.dtype)
    inside = np.abs(v - old) < clip_eps                      # clip passes the gradient through
    clipped = old + np.clip(v - old, -clip_eps, clip_eps)
    use_clipped = (clipped - ret) ** 2 > (v - ret) ** 2
    return np.where(use_clipped, (clipped - ret) * inside, v - ret) * mask


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
        ValueError: ``buffer_len`` not in (0, max_len), negative lengths or factor.
    """
    if not 0 < buffer_len < max_len:
        raise ValueError(f"buffer_len must be in (0, max_len={max_len}), got {buffer_len!r}")
    if not factor >= 0:
        raise ValueError(f"factor must be >= 0, got {factor!r}")
    n = np.asarray(lengths, dtype=np.float64)
    if n.ndim != 1 or (n < 0).any():
        raise ValueError(f"lengths must be a 1-D array of non-negative lengths, got {n.shape}")
    soft = ((max_len - buffer_len) - n) / buffer_len
    return (factor * np.clip(soft, -1.0, 0.0)).astype(np.float32)


def loss_norms(completion_mask, config) -> dict:
    """The whole batch's normalisers of the loss aggregation (``max_len``, ``num_tokens``,
    ``num_seqs`` of :func:`aggregate_weights`), for a (B*G, R) ``completion_mask`` and a
    :class:`~rlmperf_lite.rl.GRPOConfig` (its ``max_new_tokens``)."""
    # once per batch, passed to every micro-batch and data-parallel rank, so that their summed
    # gradients equal the whole batch's (verl #5625; book section sec-loss-aggregation)
    return {"max_len": config.max_new_tokens,
            "num_tokens": max(float(np.sum(completion_mask)), 1.0),
            "num_seqs": int(np.shape(completion_mask)[0])}


def grpo_loss(per_token_logps, old_per_token_logps, advantages, completion_mask, config,
              norms: dict, *, ref_per_token_logps=None):
    """GRPO's loss, sum(w * (clipped surrogate + kl_coef * k3)), and the metrics the field logs.

    Shao et al. 2024, Eq. 3, with the aggregation weights w of ``config.loss_agg_mode`` and the
    whole batch's ``norms`` (:func:`loss_norms`), so micro-batches' and ranks' terms add up to the
    batch's loss. Arrays (rows, R); advantages (rows,) or (rows, R); ``config`` a
    :class:`~rlmperf_lite.rl.GRPOConfig`. Returns (loss, metrics): ``approx_kl``, ``clipfrac``,
    ... of :func:`policy_loss`, plus ``kl_ref`` with a reference. Raises ValueError on bad shapes.
    """
    c, mask = config, completion_mask
    per_token_loss, metrics = policy_loss(per_token_logps, old_per_token_logps, advantages,
                                          mask, clip_eps_low=c.clip_eps,
                                          clip_eps_high=c.clip_eps_high or c.clip_eps)
    if ref_per_token_logps is not None:                       # the KL term is in the loss
        kl = kl_estimate(per_token_logps, ref_per_token_logps) * mask
        per_token_loss = per_token_loss + c.kl_coef * kl
        metrics["kl_ref"] = float(kl.sum() / max(mask.sum(), 1.0))
    weights = aggregate_weights(mask, c.loss_agg_mode, **norms)
    return float((weights * per_token_loss).sum()), metrics


def grpo_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask, config,
                   norms: dict, *, ref_per_token_logps=None) -> np.ndarray:
    """d :func:`grpo_loss` / d per_token_logps, (rows, R): the one place the loop, its
    micro-batches and Part III's simulated ranks take the loss gradient from. Arguments and
    errors as :func:`grpo_loss`."""
    c = config
    dloss = policy_loss_grad(per_token_logps, old_per_token_logps, advantages, completion_mask,
                             clip_eps_low=c.clip_eps, clip_eps_high=c.clip_eps_high or c.clip_eps)
    if ref_per_token_logps is not None:
        dloss = dloss + c.kl_coef * kl_estimate_grad(per_token_logps,
                                                     ref_per_token_logps) * completion_mask
    return aggregate_weights(completion_mask, c.loss_agg_mode, **norms) * dloss
