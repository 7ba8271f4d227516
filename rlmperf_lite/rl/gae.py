"""Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438, Eq. 16), book
section :ref:`sec-critic-gae`.

With TD errors ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V_{t+1} = 0`` after the last
token), the advantage is ``A_t = sum_k (gamma * lam)^k * delta_{t+k}`` and the critic's target
is ``A_t + V_t``. Three ways to compute it, equal to rounding (tested), with per row of T
tokens the work W (multiply-adds) and depth D (dependent steps) of the work-depth model:

- :func:`gae_loop`, the reversed loop of the papers and of cleanrl's ppo.py: W ~ T, D = T.
- :func:`gae`, a (T, T) matrix of discounts applied to all rows at once: W = T^2, and
  D = 1 + ceil(log2 T) with the sums as trees; more work buys a shallow chain.
- :func:`gae_scan`, the recurrence A_t = a_t A_{t+1} + b_t as a Blelloch scan (Blelloch 1990,
  "Prefix sums and their applications", CMU-CS-90-190) of affine maps: W ~ 4T (2 (n - 1) combines of
  2 multiply-adds, n = T rounded up to a power of two), D = 2 log2 n + 1. Both at once.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import check_int, check_number
from .inputs import check_completion_mask, check_fits_float32, check_per_token_array

__all__ = ["gae", "gae_loop", "gae_scan", "gae_workdepth"]


def _check(rewards, values, completion_mask, gamma, lam):
    r = check_per_token_array("rewards", rewards).astype(np.float64)
    v = check_per_token_array("values", values, r.shape).astype(np.float64)
    m = check_completion_mask(completion_mask, r.shape, prefix=True).astype(np.float64)
    check_number("gamma", gamma, low=0, high=1)
    check_number("lam", lam, low=0, high=1)
    return r * m, v * m, m


def _finish(adv, v, m):
    """(advantages, returns) as float32, 0 on masked positions; ValueError on an overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        ret = (adv + v) * m
    fix = "rescale the rewards and values"
    return (check_fits_float32("GAE advantages of these rewards and values", adv, fix),
            check_fits_float32("GAE returns of these rewards and values", ret, fix))


def gae(rewards, values, completion_mask, gamma: float = 1.0, lam: float = 0.95):
    """GAE for every token of a batch at once.

    Args:
        rewards: (B, T) per-token rewards (an outcome reward sits on the last token).
        values: (B, T) critic values V(s_t).
        completion_mask: (B, T) of 0/1, ones then zeros per row (a zero inside a response is
            refused: verl carries the value over such a gap, this recurrence would restart).
        gamma, lam: discount and GAE lambda, in [0, 1].
    Returns:
        (advantages, returns), both (B, T) float32 and 0 on masked positions.
    Raises:
        ValueError: naming the argument, for mismatched shapes, non-finite inputs, a mask that
            is not 0/1 ones-then-zeros, gamma or lam outside [0, 1], or results beyond
            float32's range.
    """
    r, v, m = _check(rewards, values, completion_mask, gamma, lam)
    T = r.shape[1]
    next_v = np.concatenate([v[:, 1:], np.zeros((len(v), 1))], axis=1)     # 0 after the end
    delta = (r + gamma * next_v - v) * m                                    # (B, T)
    k = np.arange(T)
    offsets = k[None, :] - k[:, None]                                       # (T, T): k - t
    discount = np.where(offsets >= 0, (gamma * lam) ** np.maximum(offsets, 0), 0.0)
    adv = delta @ discount.T * m                                            # (B, T)
    return _finish(adv, v, m)


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
    return _finish(adv, v, m)


def _combine(first, then):
    """The affine map x -> a x + b of ``first`` followed by ``then``, as (a, b) arrays."""
    (a1, b1), (a2, b2) = first, then
    return a2 * a1, a2 * b1 + b2


def gae_scan(rewards, values, completion_mask, gamma: float = 1.0, lam: float = 0.95):
    """GAE as a work-efficient parallel scan; same arguments and results as :func:`gae`.

    A_t = m_t (delta_t + gamma lam A_{t+1}) is the affine map f_t(x) = a_t x + b_t of A_{t+1},
    a_t = gamma lam m_t, b_t = m_t delta_t, so A_t = (f_t o ... o f_{T-1})(0): a scan of the maps
    from the last token back. Blelloch's up-sweep and down-sweep give every prefix in
    2 log2 n levels of independent combines (n = T rounded up to a power of two, padded with
    the identity map), vectorised here over the batch and over each level.
    """
    r, v, m = _check(rewards, values, completion_mask, gamma, lam)
    B, T = r.shape
    next_v = np.concatenate([v[:, 1:], np.zeros((B, 1))], axis=1)
    a = (gamma * lam * m)[:, ::-1]                       # (B, T): the maps, last token first
    b = ((r + gamma * next_v - v) * m)[:, ::-1]
    n = 1 << max(T - 1, 0).bit_length()                  # a power of two >= T
    sa = np.concatenate([a, np.ones((B, n - T))], axis=1)
    sb = np.concatenate([b, np.zeros((B, n - T))], axis=1)
    step = 1
    while step < n:                                      # up-sweep: sums of blocks of 2 step
        right = np.arange(2 * step - 1, n, 2 * step)
        sa[:, right], sb[:, right] = _combine((sa[:, right - step], sb[:, right - step]),
                                              (sa[:, right], sb[:, right]))
        step *= 2
    sa[:, n - 1], sb[:, n - 1] = 1.0, 0.0                # identity: the exclusive scan
    step = n // 2
    while step >= 1:                                     # down-sweep: each block's prefix
        right = np.arange(2 * step - 1, n, 2 * step)
        left = (sa[:, right - step].copy(), sb[:, right - step].copy())
        sa[:, right - step], sb[:, right - step] = sa[:, right], sb[:, right]
        sa[:, right], sb[:, right] = _combine((sa[:, right], sb[:, right]), left)
        step //= 2
    adv = (a * sb[:, :T] + b)[:, ::-1]                   # inclusive: apply f_t, at x = 0
    return _finish(adv, v, m)


def gae_workdepth(T: int) -> dict:
    """{form: (work, depth)} per row of T tokens, in multiply-adds and dependent steps (rounds):
    ``"loop"`` (T, T), ``"matrix"`` (T^2, 1 + ceil(log2 T): the dot products as trees) and
    ``"scan"`` (2 (2 (n - 1)) + T, 2 log2 n + 1 with n = T rounded up to a power of two: two
    sweeps of n - 1 combines of 2 multiply-adds each, then one per token). Raises ValueError
    unless T is an int >= 1."""
    check_int("T", T, 1)
    n = 1 << max(T - 1, 0).bit_length()
    log_n, log_t = n.bit_length() - 1, math.ceil(math.log2(T)) if T > 1 else 0
    return {"loop": (T, T), "matrix": (T * T, 1 + log_t), "scan": (4 * (n - 1) + T, 2 * log_n + 1)}
