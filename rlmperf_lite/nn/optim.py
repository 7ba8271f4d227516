"""AdamW and global-norm gradient clipping over a dict of parameters (book section
:ref:`sec-tiny-model`).

AdamW: Loshchilov & Hutter 2019, Algorithm 2 (decoupled weight decay), with PyTorch's bias
correction. Clipping: Pascanu et al. 2013, the global L2 norm over all gradients.
"""
from __future__ import annotations

import numpy as np

__all__ = ["AdamW", "clip_grad_norm"]


def clip_grad_norm(grads: dict, max_norm: float, *, norm: float | None = None) -> float:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``.

    ``norm``: the global norm when it was computed elsewhere — a rank holding only a shard of
    the gradients gets it from an all-reduce of the squared norms (ZeRO, tensor parallelism:
    book sections :ref:`sec-zero-fsdp` and :ref:`sec-tensor-parallel`); by default it is computed
    from ``grads``. Returns the norm before clipping. A non-finite norm raises ValueError (a NaN
    would otherwise reach every weight).
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm!r}")
    if norm is None:
        norm = float(np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values())))
    norm = float(norm)
    if not np.isfinite(norm):
        raise ValueError(f"gradient norm is {norm}: a NaN or inf reached the gradients; "
                         "check the rewards and the learning rate")
    if norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale
    return norm


class AdamW:
    """AdamW over a parameter dict; state ``m``, ``v`` and step count ``t`` are plain attributes."""

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}
        self.t = 0

    def step(self, params: dict, grads: dict) -> None:
        """Update ``params`` in place from ``grads`` (same keys)."""
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for k, p in params.items():
            g, m, v = grads[k], self.m[k], self.v[k]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            if self.weight_decay:
                p *= 1 - self.lr * self.weight_decay
            p -= (self.lr / c1) * m / (np.sqrt(v / c2) + self.eps)
