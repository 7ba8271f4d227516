"""The engine–trainer mismatch: how far apart the two log-probs are, and the corrections for it
(book sections :ref:`sec-grpo` and
:ref:`sec-mismatch`).

The rollout engine samples a completion and records its log-probs ``rollout_per_token_logps``;
the trainer's log-probs of the same tokens (``old_per_token_logps``, the old-log-prob pass)
differ (bf16 kernels, top-k / top-p truncation: :mod:`rlmperf_lite.nn.engine`). The token
ratio ``rho_t = exp(old_logp_t - rollout_logp_t)`` measures it. verl's rollout correction
(``algorithm.rollout_correction``, rollout IS since verl 0.6, names as in verl's
docs/algo/rollout_corr.md of late 2025, later spelt token_k1 / seq_sum_k1 / seq_mean_k1;
Liu, Li et al. 2025, "When Speed Kills Stability") corrects with truncated importance weights ``rollout_is``
(``min(rho, rollout_is_threshold)``, per token or per sequence) and rejection ``rollout_rs``
(drop tokens or whole sequences whose ratio leaves a band); TRL's counterpart is
``vllm_importance_sampling_correction`` with ``vllm_importance_sampling_cap``. Arrays are
(B*G, R) and every statistic is over ``completion_mask``.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_choice, check_number
from .inputs import check_completion_mask, check_per_token_array

__all__ = ["mismatch_metrics", "token_kl", "rollout_is_weights", "rollout_rs_mask",
           "ROLLOUT_IS_LEVELS", "ROLLOUT_RS_LEVELS", "SAFETY_BOUND"]

ROLLOUT_IS_LEVELS = ("token", "sequence")
ROLLOUT_RS_LEVELS = ("token", "sequence", "geometric")
SAFETY_BOUND = 20.0
"""Log-ratios are clipped to [-20, 20] before exp (weights in [2e-9, 4.9e8]), as verl does, so a
sequence's product of ratios cannot overflow."""


def _log_ratio(old_per_token_logps, rollout_per_token_logps, completion_mask):
    """(log rho (B*G, R), 0 where masked; mask float64)."""
    old = check_per_token_array("old_per_token_logps", old_per_token_logps)
    roll = check_per_token_array("rollout_per_token_logps", rollout_per_token_logps, old.shape)
    mask = check_completion_mask(completion_mask, old.shape).astype(np.float64)
    if mask.sum() == 0:
        raise ValueError("completion_mask holds no token; the mismatch needs at least one")
    return np.where(mask > 0, old.astype(np.float64) - roll, 0.0), mask


def mismatch_metrics(old_per_token_logps, rollout_per_token_logps, completion_mask, *,
                     quantiles=(0.01, 0.1, 0.5, 0.9, 0.99)) -> dict:
    """How far the engine's log-probs are from the trainer's, over the sampled tokens.

    With ``log rho = old_logp - rollout_logp`` (tokens sampled by the engine): ``mismatch_kl``
    = mean(-log rho) and ``mismatch_k3_kl`` = mean(rho - 1 - log rho) (>= 0 token by token), two
    estimates of KL(engine || trainer) (Schulman 2020; verl logs both as ``rollout_corr/kl`` and
    ``rollout_corr/k3_kl``). Both are unbiased when the engine can sample every token the trainer
    can; under top-k / top-p truncation E[rho] < 1 and k3 underestimates the KL, while k1 stays
    unbiased (the lab of :ref:`sec-mismatch` measures both); ``mismatch_ratio_mean``, ``_max``,
    ``_min`` and ``_p{q}`` the quantiles of rho in percent (``mismatch_ratio_p50``...); and
    ``mismatch_seq_ratio_max``, the largest product of a sequence's ratios.

    Raises:
        ValueError: naming the argument, for mismatched shapes, non-finite log-probs, a mask
            that is not 0/1 or is empty, or a quantile outside [0, 1].
    """
    d, mask = _log_ratio(old_per_token_logps, rollout_per_token_logps, completion_mask)
    for q in quantiles:
        check_number("quantiles[i]", q, low=0, high=1)
    n = mask.sum()
    rho = np.exp(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND))
    kept = rho[mask > 0]
    out = {"mismatch_kl": float(-(d * mask).sum() / n),
           "mismatch_k3_kl": float(((rho - 1 - d) * mask).sum() / n),
           "mismatch_ratio_mean": float(kept.mean()), "mismatch_ratio_max": float(kept.max()),
           "mismatch_ratio_min": float(kept.min())}
    for q in quantiles:
        out[f"mismatch_ratio_p{100 * q:g}"] = float(np.quantile(kept, q))
    out["mismatch_seq_ratio_max"] = float(np.exp(min(d.sum(axis=1).max(), SAFETY_BOUND)))
    return out


def token_kl(rollout_logprobs, trainer_logprobs, completion_mask) -> float:
    """Exact token-level KL(engine || trainer), mean over ``completion_mask``:
    ``sum_v q(v) (log q(v) - log p(v))`` per position, with q the engine's and p the trainer's
    next-token distributions, each (B*G, R, V) log-probs (q may be -inf outside a top-k / top-p
    set, where its terms are 0). 0 when the two are equal; > 0 otherwise.

    Raises:
        ValueError: shapes that differ or are not (B*G, R, V) with a (B*G, R) mask, a NaN or
            +inf log-prob, a trainer log-prob of -inf where the engine's is finite (infinite
            KL), or an empty mask.
    """
    q, p = np.asarray(rollout_logprobs, np.float64), np.asarray(trainer_logprobs, np.float64)
    if q.ndim != 3 or q.shape != p.shape:
        raise ValueError(f"rollout_logprobs and trainer_logprobs must both be (B*G, R, V), got "
                         f"{q.shape} and {p.shape}")
    mask = check_completion_mask(completion_mask, q.shape[:2])
    if mask.sum() == 0:
        raise ValueError("completion_mask holds no token; the KL needs at least one")
    if np.isnan(q).any() or np.isnan(p).any() or (q == np.inf).any() or (p == np.inf).any():
        raise ValueError("rollout_logprobs and trainer_logprobs must be log-probs (<= 0, -inf "
                         "allowed for excluded tokens), got NaN or +inf")
    support = q > -np.inf
    if (support & (p == -np.inf)).any():
        raise ValueError("trainer_logprobs is -inf where the engine samples: the KL is infinite")
    q0, p0 = np.where(support, q, 0.0), np.where(support, p, 0.0)   # no inf - inf off support
    terms = np.where(support, np.exp(q0) * (q0 - p0), 0.0)
    return float((terms.sum(axis=-1) * mask).sum() / mask.sum())


def rollout_is_weights(old_per_token_logps, rollout_per_token_logps, completion_mask, *,
                       level: str = "token", threshold: float = 2.0):
    """Truncated importance weights (verl's ``rollout_is`` with ``rollout_is_threshold``; TIS).

    ``"token"``: ``w_t = min(rho_t, threshold)``; ``"sequence"``: one weight per sequence,
    ``min(prod_t rho_t, threshold)``, on each of its tokens. 0 on masked positions. Returns
    (weights (B*G, R), metrics ``rollout_is_mean`` (over tokens) and
    ``rollout_is_ratio_fraction_high``, the share of tokens whose ratio was truncated).

    Raises:
        ValueError: naming the argument, for an unknown ``level``, a ``threshold`` that is not
            a number > 0, or as :func:`mismatch_metrics`.
    """
    check_choice("level", level, ROLLOUT_IS_LEVELS)
    check_number("threshold", threshold, low=0, low_open=True)
    d, mask = _log_ratio(old_per_token_logps, rollout_per_token_logps, completion_mask)
    if level == "sequence":
        d = np.broadcast_to(d.sum(axis=1, keepdims=True), d.shape)
    rho = np.exp(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND))
    w = np.minimum(rho, threshold) * mask
    n = mask.sum()
    return w.astype(np.float32), {
        "rollout_is_mean": float(w.sum() / n),
        "rollout_is_ratio_fraction_high": float(((rho > threshold) * mask).sum() / n)}


def rollout_rs_mask(old_per_token_logps, rollout_per_token_logps, completion_mask, *,
                    level: str = "geometric", threshold: float = 2.0,
                    threshold_lower: float | None = None):
    """Rejection outside a band (verl's ``rollout_rs``, ``rollout_rs_threshold``,
    ``rollout_rs_threshold_lower``): a kept-token mask, ``completion_mask`` with the rejected
    tokens set to 0.

    The statistic is rho_t per token (``"token"``), the sequence's product ``prod_t rho_t``
    (``"sequence"``) or its geometric mean ``exp(mean_t log rho_t)`` (``"geometric"``, the
    length-fair one); a token or sequence is kept when ``threshold_lower <= stat <=
    threshold`` (lower default ``1 / threshold``). Returns (mask (B*G, R) float32, metrics
    ``rollout_rs_masked_fraction`` (share of tokens rejected) and
    ``rollout_rs_seq_masked_fraction`` (share of sequences with a rejected token)).

    Raises:
        ValueError: naming the argument, for an unknown ``level``, a band that does not hold
            1 (``threshold`` >= 1 >= ``threshold_lower`` > 0), or as :func:`mismatch_metrics`.
    """
    check_choice("level", level, ROLLOUT_RS_LEVELS)
    check_number("threshold", threshold, low=1)
    lower = 1.0 / threshold if threshold_lower is None else threshold_lower
    check_number("threshold_lower", lower, low=0, high=1, low_open=True)
    d, mask = _log_ratio(old_per_token_logps, rollout_per_token_logps, completion_mask)
    if level == "sequence":
        d = np.broadcast_to(d.sum(axis=1, keepdims=True), d.shape)
    elif level == "geometric":
        d = np.broadcast_to(d.sum(axis=1, keepdims=True)
                            / np.maximum(mask.sum(axis=1, keepdims=True), 1.0), d.shape)
    # compare in log space: a product of ratios may overflow, its log does not
    keep = (d >= np.log(lower)) & (d <= np.log(threshold))
    out = mask * keep
    rejected = mask - out
    return out.astype(np.float32), {
        "rollout_rs_masked_fraction": float(rejected.sum() / mask.sum()),
        "rollout_rs_seq_masked_fraction": float(np.mean(rejected.sum(axis=1) > 0))}
