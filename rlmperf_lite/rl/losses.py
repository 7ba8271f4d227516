"""The PPO-clipped policy loss, the k3 KL estimator and loss aggregation, with their gradients.

Book section 1.5. numpy has no autograd, so each loss has a ``*_grad`` twin giving the derivative
of the per-token loss with respect to ``per_token_logps``; tests check each twin by finite
differences. All arrays are (B*G, R): B*G completions, R completion positions.
"""
from __future__ import annotations

import numpy as np

__all__ = ["policy_loss", "policy_loss_grad", "kl_estimate", "kl_estimate_grad",
           "aggregate_weights", "aggregate_loss"]


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
        per_token_loss (B*G, R) (0 where masked) and metrics: ``approx_kl`` (k3 of old vs new,
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


def aggregate_weights(completion_mask, mode: str = "token-mean") -> np.ndarray:
    """Weights w (B*G, R) with ``loss = sum(w * per_token_loss)`` for an aggregation mode.

    ``"token-mean"``: every unmasked token of the batch weighs 1 / (tokens in batch) (DAPO,
    arXiv 2503.14476, Eq. 12). ``"seq-mean-token-mean"``: mean over each sequence's tokens, then
    over sequences (the original GRPO objective, DeepSeekMath Eq. 3).
    """
    mask = _as_2d("completion_mask", completion_mask).astype(np.float32)
    if mode == "token-mean":
        return mask / max(float(mask.sum()), 1.0)
    if mode == "seq-mean-token-mean":
        lengths = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        return mask / lengths / mask.shape[0]
    raise ValueError(f"mode must be 'token-mean' or 'seq-mean-token-mean', got {mode!r}")


def aggregate_loss(per_token_loss, completion_mask, mode: str = "token-mean") -> float:
    """Scalar loss from per-token losses (B*G, R); see :func:`aggregate_weights`."""
    return float((aggregate_weights(completion_mask, mode) * per_token_loss).sum())
