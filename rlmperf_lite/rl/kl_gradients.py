"""Exact expected gradients of the KL estimators used as losses, on one categorical policy
(book section :ref:`sec-kl-estimators`; Tang & Munos 2025, "On a few pitfalls in KL divergence
gradient estimation for RL", arXiv 2506.09477).

GRPO adds ``kl_coef * k(x)`` to the loss, with k one of Schulman's estimators of KL(pi || ref)
evaluated on tokens x sampled from pi, and differentiates through log pi(x) only (the sample is
not differentiated). Here the policy is a softmax over a few actions, so the expectation over x is
an exact sum and the gradient of each estimator-as-a-loss can be compared with the true gradients
of both directions of the KL:

    E_x~pi[ dk/dlog pi(x) * d log pi(x)/d logits ],  d log pi(x)/d logits = onehot(x) - pi.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_real_array
from .losses import kl_estimate_grad

__all__ = ["categorical_kl_gradients"]


def categorical_kl_gradients(logits, ref_probs) -> dict:
    """Gradients with respect to ``logits`` of pi = softmax(logits).

    Args:
        logits: (A,) finite, A >= 2 actions.
        ref_probs: (A,) the reference policy, positive, summing to 1.
    Returns:
        dict of (A,) arrays — ``"k1"``, ``"k2"``, ``"k3"`` (expected gradient of each estimator
        used as a loss), ``"kl_pi_ref"`` (exact gradient of KL(pi || ref), what a KL penalty is
        meant to follow), ``"kl_ref_pi"`` (exact gradient of KL(ref || pi) = pi - ref), and
        ``"k1_reward"``: k1 used as a (negative) reward instead, i.e. the score-function
        gradient E[k1(x) d log pi(x)], as PPO-style RLHF and REINFORCE++ put the KL in the reward.
        Expected (tested): k1 -> 0; k2 -> kl_pi_ref; k3 -> kl_ref_pi; k1_reward -> kl_pi_ref.
    Raises:
        ValueError: naming ``logits`` (shape, non-finite, spread > 600) or ``ref_probs`` (not
            a positive distribution of the same size).
    """
    z = check_real_array("logits", logits)
    ref = check_real_array("ref_probs", ref_probs, low=0, high=1)
    if z.ndim != 1 or z.size < 2:
        raise ValueError(f"logits must be a 1-D array of >= 2 actions, got {logits!r}")
    if ref.shape != z.shape or not np.all(ref > 0) or abs(ref.sum() - 1) > 1e-9:
        raise ValueError(f"ref_probs must be {z.shape[0]} positive probabilities summing to 1, "
                         f"got {ref_probs!r}")
    if np.ptp(z) > 600:
        raise ValueError(f"logits must lie within 600 of each other (else a probability "
                         f"underflows and k3's expectation overflows), got a spread of "
                         f"{np.ptp(z):.4g}")
    shifted = z - z.max()
    logpi = shifted - np.log(np.exp(shifted).sum())            # log-softmax: no log(0)
    pi, logref = np.exp(logpi), np.log(ref)
    dlogpi = np.eye(z.size) - pi                      # row x: d log pi(x) / d logits
    out = {kind: (pi * kl_estimate_grad(logpi[None], logref[None], kind)[0]) @ dlogpi
           for kind in ("k1", "k2", "k3")}
    out["k1_reward"] = (pi * (logpi - logref)) @ dlogpi
    kl = float(pi @ (logpi - logref))
    out["kl_pi_ref"] = pi * (logpi - logref - kl)
    out["kl_ref_pi"] = pi - ref
    return out
