"""Group-relative advantages (GRPO), book section :ref:`sec-grpo`.

GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, Sec. 4.1.2) samples G completions per
prompt and scores each against its own group: ``A_i = (r_i - mean(r)) / (std(r) + eps)``, the
same advantage for every token of completion i (outcome supervision).
"""
from __future__ import annotations

import numpy as np

from ..checks import check_choice, check_number
from .inputs import check_completion_mask, check_fits_float32, check_per_token_array

__all__ = ["grpo_advantages", "check_rewards", "reinforce_pp_baseline_advantages"]


def check_rewards(rewards, group_size: int, *, min_group_size: int = 2) -> np.ndarray:
    """Validate rewards laid out group by group; returns them as float64 of shape (B, G).

    Raises:
        ValueError: ``group_size`` not an int >= ``min_group_size`` (2: one sample has no group
            baseline and its unbiased std is NaN), rewards that are not a non-empty 1-D array of
            real numbers (complex, strings), a length not divisible by ``group_size``, or a
            NaN/inf reward (naming the sample).
    """
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size < min_group_size:
        why = (": with one sample per prompt the group baseline is the sample itself"
               if min_group_size == 2 else "")
        raise ValueError(f"group_size must be an int >= {min_group_size}, got {group_size!r}"
                         f"{why}")
    try:
        r = np.asarray(rewards)
    except (ValueError, TypeError):                                  # ragged lists
        r = np.asarray(None)
    if r.dtype.kind not in "biuf" or r.ndim != 1 or r.size == 0 or r.size % group_size:
        raise ValueError(f"rewards must be a non-empty 1-D array of real numbers with a length "
                         f"divisible by group_size={group_size} (B*G laid out group by group), "
                         f"got shape {r.shape} and dtype {r.dtype}")
    r = r.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise ValueError(f"reward of sample {int(bad[0])} (group {int(bad[0]) // group_size}) is "
                         f"{r[bad[0]]}; every sample needs a finite reward")
    return r.reshape(-1, group_size)


def _pow2_scale(abs_max) -> np.ndarray:
    """Powers of two s with abs_max / s in [1, 2) (0 for 0): dividing by s is exact in floating point (the
    advantages' bits do not change) and keeps squares and sums of huge or subnormal rewards in
    range."""
    return np.ldexp(1.0, np.frexp(abs_max)[1] - 1)


def grpo_advantages(rewards, group_size: int, *, scale: str = "group",
                    eps: float = 1e-6) -> np.ndarray:
    """Group-relative advantages of B*G rewards.

    Args:
        rewards: (B*G,) laid out group by group (rows b*G .. b*G+G-1 share prompt b).
        group_size: G >= 2.
        scale: ``"group"`` divides by each group's std (GRPO), ``"batch"`` by the std of all the
            batch's rewards (after group centring), ``"none"`` only subtracts the group mean
            (Dr. GRPO, arXiv 2503.20783, Sec. 3.1).
        eps: added to the std, finite and >= 0.
    Returns:
        advantages (B*G,) float32.

    The std is the unbiased one (ddof=1), as ``torch.std`` in TRL's and verl's GRPO. It is
    computed in two passes, ``sqrt(sum((r - mean)^2) / (G - 1))``, and a group whose rewards are
    all equal gets advantages of exactly 0 (never NaN, never a residue of ``mean`` rounding).
    Rewards are first divided by a power of two near their largest magnitude (exact), so any
    finite rewards give the right advantages (``[1e308, -1e308]``: +-0.7071; they gave 0).

    Raises:
        ValueError: see :func:`check_rewards`; an unknown ``scale``, a negative or non-finite
            ``eps``, or (``scale="none"``) advantages beyond float32's range.
    """
    check_choice("scale", scale, ("group", "batch", "none"))
    check_number("eps", eps, low=0)
    r = check_rewards(rewards, group_size)                                   # (B, G)
    abs_max = np.abs(r).max(axis=1, keepdims=True)                           # (B, 1)
    s = _pow2_scale(abs_max.max() if scale == "batch" else abs_max)
    r_s = r / s                                                              # |r_s| < 2
    centered = r_s - r_s.mean(axis=1, keepdims=True)
    centered[r.max(axis=1) == r.min(axis=1)] = 0.0                          # all-equal group
    if scale == "none":
        return check_fits_float32("advantages of these rewards", (centered * s).reshape(-1),
                                  "rescale the rewards")
    if scale == "group":
        std = np.sqrt((centered * centered).sum(axis=1, keepdims=True) / (group_size - 1))
    else:
        flat = r_s.ravel() - r_s.mean()
        std = np.full((len(r), 1), np.sqrt((flat * flat).sum() / max(flat.size - 1, 1)))
    with np.errstate(over="ignore"):        # eps / s = inf for tiny rewards: A is 0 then
        denom = std + eps / s               # 0 / 0 stays 0 for all-equal groups even at eps=0
    centered = np.divide(centered, denom, out=np.zeros_like(centered), where=denom > 0)
    return centered.reshape(-1).astype(np.float32)


def rloo_advantages(rewards, group_size: int) -> np.ndarray:
    """REINFORCE leave-one-out advantages: each sample's baseline is the mean of the *other*
    G - 1 rewards of its group (Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740, Eq. 6):
    ``A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean(r))``.

    Args:
        rewards: (B*G,) laid out group by group.
        group_size: G >= 2.
    Returns:
        advantages (B*G,) float32; exactly 0 for a group whose rewards are all equal.
    Raises:
        ValueError: see :func:`check_rewards`; advantages beyond float32's range (3.4e38).
    """
    r = check_rewards(rewards, group_size)                                   # (B, G)
    s = _pow2_scale(np.abs(r).max(axis=1, keepdims=True))       # exact; keeps the sum finite
    r_s = r / s
    with np.errstate(over="ignore"):                           # checked by check_fits_float32
        loo = (r_s - (r_s.sum(axis=1, keepdims=True) - r_s) / (group_size - 1)) * s
    loo[r.max(axis=1) == r.min(axis=1)] = 0.0
    return check_fits_float32("rloo advantages of these rewards", loo.reshape(-1),
                              "rescale the rewards")


def reinforce_pp_advantages(rewards, completion_mask, *, per_token_kl=None, kl_coef: float = 0.0,
                            eps: float = 1e-8) -> np.ndarray:
    """REINFORCE++ advantages (Hu 2025, arXiv 2501.03262, Sec. 2): no critic and no group
    baseline; the outcome reward sits on the last completion token, a token-level KL penalty
    ``-kl_coef * KL_t`` on every token, the advantage of a token is its return-to-go (gamma 1),
    and the advantages are normalised over all tokens of the batch (mean 0, std 1).

    Args:
        rewards: (B*G,) outcome rewards.
        completion_mask: (B*G, R) of 0/1, ones then zeros per row, none empty.
        per_token_kl: (B*G, R) per-token KL estimates (e.g. k1 = logp - ref_logp), needed
            when ``kl_coef`` > 0.
        kl_coef, eps: finite and >= 0.
    Returns:
        advantages (B*G, R) float32, 0 on masked positions.
    Raises:
        ValueError: naming the argument for mismatched shapes, non-finite values, a mask that
            is not 0/1 ones-then-zeros or has an empty row, a negative or non-finite
            ``kl_coef`` or ``eps``, or a missing ``per_token_kl`` with ``kl_coef`` > 0.
    """
    mask = check_completion_mask(completion_mask, prefix=True, nonempty=True).astype(np.float64)
    r = check_rewards(rewards, 1, min_group_size=1).ravel()
    if r.shape != (mask.shape[0],):
        raise ValueError(f"rewards must be (B*G,) and completion_mask (B*G, R) with the same "
                         f"B*G, got {r.shape} and {mask.shape}")
    check_number("kl_coef", kl_coef, low=0)
    check_number("eps", eps, low=0)
    if kl_coef and per_token_kl is None:
        raise ValueError("per_token_kl of shape (B*G, R) is needed when kl_coef > 0")
    penalty = 0.0
    if per_token_kl is not None:
        kl = check_per_token_array("per_token_kl", per_token_kl, mask.shape).astype(np.float64)
        with np.errstate(over="ignore"):
            penalty = kl_coef * kl * mask
        if not np.isfinite(penalty).all():
            raise ValueError(f"kl_coef * per_token_kl overflows float64 (kl_coef={kl_coef!r}, "
                             f"|per_token_kl| up to {np.abs(kl).max():.4g}); lower kl_coef")
    s = _pow2_scale(max(np.abs(r).max(), np.max(np.abs(penalty))))  # exact; sums stay < 2 R
    token_rewards = np.zeros_like(mask)
    token_rewards[np.arange(len(r)), mask.sum(axis=1).astype(int) - 1] = r / s
    token_rewards -= penalty / s
    returns = np.cumsum(token_rewards[:, ::-1], axis=1)[:, ::-1] * mask     # return-to-go
    n = mask.sum()
    mean = returns.sum() / n
    std = np.sqrt((((returns - mean) * mask) ** 2).sum() / n)
    with np.errstate(over="ignore"):                       # inf for tiny rewards: A is 0
        denom = std + eps / s                              # 0 / 0 (all returns equal) is 0
    adv = np.divide(returns - mean, denom, out=np.zeros_like(returns), where=denom > 0)
    return (adv * mask).astype(np.float32)


def reinforce_pp_baseline_advantages(rewards, completion_mask, group_size: int, *,
                                     eps: float = 1e-8) -> np.ndarray:
    """REINFORCE++-baseline advantages (Hu 2025, arXiv 2501.03262; as verl's
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``, volcengine/verl
    ``verl/trainer/ppo/core_algos.py`` at commit 012be9d9): subtract the group's mean reward,
    give every token of a completion its value, then whiten over all the batch's valid tokens
    (verl's ``masked_whiten``): ``A_t = (x_t - mu) / sqrt(var + eps)``, with mu the mean over
    valid tokens (a long completion weighs more) and var their unbiased variance
    (sum (x_t - mu)^2 / (N - 1), N valid tokens).

    Args:
        rewards: (B*G,) laid out group by group.
        completion_mask: (B*G, R) of 0/1.
        group_size: G >= 2.
        eps: added to the variance (verl's 1e-8), finite and >= 0.
    Returns:
        advantages (B*G, R) float32, 0 on masked positions and where all tokens agree.
    Raises:
        ValueError: see :func:`check_rewards`; a mask of another B*G or with fewer than 2 valid
            tokens (the unbiased variance needs 2), a negative or non-finite ``eps``.
    """
    check_number("eps", eps, low=0)
    r = check_rewards(rewards, group_size)                                   # (B, G)
    mask = check_completion_mask(completion_mask).astype(np.float64)         # (B*G, R)
    if mask.shape[0] != r.size:
        raise ValueError(f"completion_mask must have B*G = {r.size} rows (one per reward), got "
                         f"{mask.shape}")
    n = mask.sum()
    if n < 2:
        raise ValueError(f"completion_mask must hold at least 2 valid tokens (the unbiased "
                         f"variance divides by N - 1), got {int(n)}")
    s = _pow2_scale(np.abs(r).max())                          # exact; squares stay in range
    r_s = r / s
    centered = r_s - r_s.mean(axis=1, keepdims=True)
    centered[r.max(axis=1) == r.min(axis=1)] = 0.0                          # all-equal group
    x = centered.reshape(-1, 1) * mask                                       # (B*G, R)
    mu = x.sum() / n
    var = (((x - mu) * mask) ** 2).sum() / (n - 1)
    with np.errstate(over="ignore", divide="ignore"):  # eps / s^2 = inf for tiny rewards: A is 0
        denom = np.sqrt(var + eps / (s * s))
    adv = np.divide(x - mu, denom, out=np.zeros_like(x), where=(denom > 0) & (var > 0))
    return (adv * mask).astype(np.float32)
