"""Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438, Eq. 16), book Part I.

With TD errors ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V_{t+1} = 0`` after the last
token), the advantage is ``A_t = sum_k (gamma * lam)^k * delta_{t+k}`` and the critic's target
is ``A_t + V_t``. :func:`gae` computes it in one vectorised step, a (T, T) matrix of discounts
applied to all rows at once; :func:`gae_loop` is the plain reversed loop of the papers and of
cleanrl's ppo.py, kept as the reference the tests compare against.
"""
from __future__ import annotations

import numpy as np

__all__ = ["gae", "gae_loop"]


def _check(rewards, values, completion_mask, gamma, lam):
    r, v, m = (np.asarray(a, dtype=np.float64) for a in (rewards, values, completion_mask))
    if r.ndim != 2 or v.shape != r.shape or m.shape != r.shape:
        raise ValueError(f"rewards, values and completion_mask must share one (B, T) shape, got "
                         f"{r.shape}, {v.shape} and {m.shape}")
    for name, a in (("rewards", r), ("values", v)):
        if not np.isfinite(a).all():
            raise ValueError(f"{name} hold a NaN or inf")
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not 0 <= x <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    return r * m, v * m, m


def gae(rewards, values, completion_mask, gamma: float = 1.0, lam: float = 0.95):
    """GAE for every token of a batch at once.

    Args:
        rewards: (B, T) per-token rewards (an outcome reward sits on the last token).
        values: (B, T) critic values V(s_t).
        completion_mask: (B, T), ones then zeros per row.
        gamma, lam: discount and GAE lambda, in [0, 1].
    Returns:
        (advantages, returns), both (B, T) float32 and 0 on masked positions.
    Raises:
        ValueError: mismatched shapes, non-finite inputs, gamma or lam outside [0, 1].
    """
    r, v, m = _check(rewards, values, completion_mask, gamma, lam)
    T = r.shape[1]
    next_v = np.concatenate([v[:, 1:], np.zeros((len(v), 1))], axis=1)     # 0 after the end
    delta = (r + gamma * next_v - v) * m                                    # (B, T)
    k = np.arange(T)
    offsets = k[None, :] - k[:, None]                                       # (T, T): k - t
    discount = np.where(offsets >= 0, (gamma * lam) ** np.maximum(offsets, 0), 0.0)
    adv = delta @ discount.T * m                                            # (B, T)
    return adv.astype(np.float32), ((adv + v) * m).astype(np.float32)


def gae_loop(rewards, values, completion_mask, gamma: float = 1.0, lam: float = 0.95):
    """The reversed loop of GAE; same arguments and results as :func:`gae`."""
    r, v, m = _check(rewards, values, completion_mask, gamma, lam)
    B, T = r.shape
    adv = np.zeros((B, T))
    last = np.zeros(B)
    for t in reversed(range(T)):
        next_v = v[:, t + 1] if t + 1 < T else np.zeros(B)
        delta = r[:, t] + gamma * next_v - v[:, t]
        last = (delta + gamma * lam * last) * m[:, t]
        adv[:, t] = last
    return adv.astype(np.float32), ((adv + v) * m).astype(np.float32)
