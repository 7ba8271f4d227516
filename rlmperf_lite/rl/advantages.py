"""Group-relative advantages (GRPO), book section :ref:`sec-grpo`.

GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, Sec. 4.1.2) samples G completions per
prompt and scores each against its own group: ``A_i = (r_i - mean(r)) / (std(r) + eps)``, the
same advantage for every token of completion i (outcome supervision).
"""
from __future__ import annotations

import numpy as np

__all__ = ["grpo_advantages", "check_rewards"]


def check_rewards(rewards, group_size: int) -> np.ndarray:
    """Validate rewards laid out group by group; returns them as float64 of shape (B, G).

    Raises:
        ValueError: ``group_size`` < 2 (one sample has no group baseline and its unbiased std is
            NaN), a length not divisible by ``group_size``, or a NaN/inf reward (naming the sample).
    """
    if not isinstance(group_size, (int, np.integer)) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2 for group-relative advantages, got "
                         f"{group_size!r}: with one sample per prompt the group baseline is the "
                         "sample itself")
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size="
                         f"{group_size} (B*G laid out group by group), got shape {r.shape}")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise ValueError(f"reward of sample {int(bad[0])} (group {int(bad[0]) // group_size}) is "
                         f"{r[bad[0]]}; every sample needs a finite reward")
    return r.reshape(-1, group_size)


def grpo_advantages(rewards, group_size: int, *, scale: str = "group",
                    eps: float = 1e-6) -> np.ndarray:
    """Group-relative advantages of B*G rewards.

    Args:
        rewards: (B*G,) laid out group by group (rows b*G .. b*G+G-1 share prompt b).
        group_size: G >= 2.
        scale: ``"group"`` divides by each group's std (GRPO), ``"batch"`` by the std of all the
            batch's rewards (after group centring), ``"none"`` only subtracts the group mean
            (Dr. GRPO, arXiv 2503.20783, Sec. 3.1).
        eps: added to the std.
    Returns:
        advantages (B*G,) float32.

    The std is the unbiased one (ddof=1), as ``torch.std`` in TRL's and verl's GRPO. It is
    computed in two passes, ``sqrt(sum((r - mean)^2) / (G - 1))``, and a group whose rewards are
    all equal gets advantages of exactly 0 (never NaN, never a residue of ``mean`` rounding).

    Raises:
        ValueError: see :func:`check_rewards`; an unknown ``scale``.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    r = check_rewards(rewards, group_size)                                   # (B, G)
    centered = r - r.mean(axis=1, keepdims=True)
    centered[r.max(axis=1) == r.min(axis=1)] = 0.0                          # all-equal group
    if scale == "group":
        std = np.sqrt((centered * centered).sum(axis=1, keepdims=True) / (group_size - 1))
    elif scale == "batch":
        flat = r.ravel() - r.mean()
        std = np.full((len(r), 1), np.sqrt((flat * flat).sum() / (flat.size - 1)))
    if scale != "none":                     # 0 / 0 stays 0 for all-equal groups even at eps=0
        centered = np.divide(centered, std + eps, out=np.zeros_like(centered),
                             where=(std + eps) > 0)
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
        ValueError: see :func:`check_rewards`.
    """
    r = check_rewards(rewards, group_size)                                   # (B, G)
    loo = r - (r.sum(axis=1, keepdims=True) - r) / (group_size - 1)
    loo[r.max(axis=1) == r.min(axis=1)] = 0.0
    return loo.reshape(-1).astype(np.float32)


def reinforce_pp_advantages(rewards, completion_mask, *, per_token_kl=None, kl_coef: float = 0.0,
                            eps: float = 1e-8) -> np.ndarray:
    """REINFORCE++ advantages (Hu 2025, arXiv 2501.03262, Sec. 2): no critic and no group
    baseline; the outcome reward sits on the last completion token, a token-level KL penalty
    ``-kl_coef * KL_t`` on every token, the advantage of a token is its return-to-go (gamma 1),
    and the advantages are normalised over all tokens of the batch (mean 0, std 1).

    Args:
        rewards: (B*G,) outcome rewards.
        completion_mask: (B*G, R), ones then zeros per row.
        per_token_kl: (B*G, R) per-token KL estimates (e.g. k1 = logp - ref_logp), needed
            when ``kl_coef`` > 0.
    Returns:
        advantages (B*G, R) float32, 0 on masked positions.
    Raises:
        ValueError: naming the argument for mismatched shapes, non-finite values, an empty row,
            or a missing ``per_token_kl`` with ``kl_coef`` > 0.
    """
    mask = np.asarray(completion_mask, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    if mask.ndim != 2 or r.shape != (mask.shape[0],):
        raise ValueError(f"rewards must be (B*G,) and completion_mask (B*G, R) with the same "
                         f"B*G, got {r.shape} and {mask.shape}")
    if not np.isfinite(r).all():
        i = int(np.flatnonzero(~np.isfinite(r))[0])
        raise ValueError(f"reward of sample {i} is {r[i]}; every sample needs a finite reward")
    lengths = mask.sum(axis=1).astype(int)
    if (lengths == 0).any():
        raise ValueError(f"completion_mask row {int(np.argmin(lengths))} is empty")
    token_rewards = np.zeros_like(mask)
    token_rewards[np.arange(len(r)), lengths - 1] = r
    if kl_coef:
        if per_token_kl is None or np.shape(per_token_kl) != mask.shape:
            raise ValueError("per_token_kl of shape (B*G, R) is needed when kl_coef > 0")
        token_rewards -= kl_coef * np.asarray(per_token_kl, dtype=np.float64) * mask
    returns = np.cumsum(token_rewards[:, ::-1], axis=1)[:, ::-1] * mask     # return-to-go
    n = mask.sum()
    mean = returns.sum() / n
    std = np.sqrt((((returns - mean) * mask) ** 2).sum() / n)
    return ((returns - mean) / (std + eps) * mask).astype(np.float32)
