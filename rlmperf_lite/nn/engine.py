"""A rollout engine whose numerics differ from the trainer's (book section :ref:`sec-grpo`).

Real RL systems sample with an inference engine (vLLM, SGLang) in bf16 or fp8 with their own
kernels, and often with top-k / top-p truncation, while the trainer computes log-probs in fp32
(or bf16 with other kernels). So the engine's log-probs of the sampled tokens differ from the
trainer's even for the very same weights, and the PPO ratio is not 1 before any update (Liu,
Li et al. 2025, "When Speed Kills Stability", the note behind verl's rollout correction). This
module emulates such an engine in numpy: weights rounded once, and every matrix product, norm,
residual sum and the logits rounded to bf16 (or fp16), with softmax and sampling in float32, as
engines do. :func:`rlmperf_lite.nn.generate` takes an :class:`EngineConfig` as ``engine``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number

__all__ = ["ENGINE_DTYPES", "EngineConfig", "round_bf16", "round_fp16", "truncate_logps"]

ENGINE_DTYPES = ("float32", "bfloat16", "float16")


def round_bf16(x) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), returned as float32.

    bfloat16 keeps float32's sign, 8 exponent bits and the top 7 of its 23 mantissa bits: add
    0x7FFF plus the lowest kept bit, then clear the low 16 bits (round to nearest, ties to
    even, the rounding of ``torch.Tensor.to(torch.bfloat16)``). Overflow rounds to +-inf; NaN
    stays NaN. ``x`` any shape; returns the same shape."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)                  # uint64: the add cannot wrap
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    out = u.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)                     # a NaN's low bits would give inf


def round_fp16(x) -> np.ndarray:
    """float32 values rounded to the nearest IEEE float16 (numpy's cast, ties to even),
    returned as float32; beyond 65504 they overflow to +-inf."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


@dataclass(frozen=True)
class EngineConfig:
    """The rollout engine's numerics and sampling truncation.

    Raises:
        ValueError: naming the field, for an unknown ``dtype``, a ``top_k`` that is not an int
            >= 1 or a ``top_p`` outside (0, 1].
    """

    dtype: str = "bfloat16"
    """The compute dtype emulated, ``"bfloat16"``, ``"float16"`` or ``"float32"`` (the trainer's
    numerics, only the truncation differs)."""
    top_k: int | None = None
    """Sample among the k most likely tokens only (None = no limit; vLLM's ``top_k``)."""
    top_p: float | None = None
    """Sample from the smallest set of tokens whose probability reaches p (nucleus sampling,
    Holtzman et al. 2020; None = 1, no truncation; vLLM's ``top_p``)."""

    def __post_init__(self):
        check_choice("EngineConfig.dtype", self.dtype, ENGINE_DTYPES)
        check_int("EngineConfig.top_k", self.top_k, 1, optional=True)
        if self.top_p is not None:
            check_number("EngineConfig.top_p", self.top_p, low=0, high=1, low_open=True)

    def cast(self, x) -> np.ndarray:
        """``x`` rounded to the engine's dtype (float32 storage)."""
        if self.dtype == "bfloat16":
            return round_bf16(x)
        if self.dtype == "float16":
            return round_fp16(x)
        return x

    def params(self, params: dict) -> dict:
        """The weights as the engine holds them: each rounded to its dtype (a new dict)."""
        return {k: self.cast(v) for k, v in params.items()}


def truncate_logps(logp, top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """Log-probs (n, V) restricted to the top-k, then the top-p nucleus, and renormalised;
    -inf outside (temperature first, then top-k, then top-p, vLLM's order).

    The nucleus is the smallest set of most likely tokens whose probability reaches ``top_p``
    (the most likely token is always kept; ties broken by token id). With both None, returns
    ``logp`` unchanged. Raises ValueError for a bad ``top_k`` or ``top_p`` (as
    :class:`EngineConfig`) or ``logp`` not 2-D."""
    check_int("top_k", top_k, 1, optional=True)
    if top_p is not None:
        check_number("top_p", top_p, low=0, high=1, low_open=True)
    logp = np.asarray(logp)
    if logp.ndim != 2:
        raise ValueError(f"logp must be (n, V) log-probs, got shape {logp.shape}")
    if top_k is None and top_p is None:
        return logp
    order = np.argsort(-logp, axis=-1, kind="stable")                      # (n, V) best first
    ranked = np.take_along_axis(logp, order, axis=-1)
    keep = np.ones(logp.shape, dtype=bool)
    if top_k is not None:
        keep &= np.arange(logp.shape[1]) < top_k
    if top_p is not None:
        p = np.where(keep, np.exp(ranked), 0.0)
        before = np.cumsum(p, axis=-1) - p                       # mass of the better tokens
        keep &= before < top_p * p.sum(axis=-1, keepdims=True)   # of the top-k mass
    kept = np.zeros(logp.shape, dtype=bool)
    np.put_along_axis(kept, order, keep, axis=-1)
    z = np.where(kept, logp, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)                     # the best token is always kept
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
