"""Counting the FLOPs of the tiny model's own matrix products, per phase.

Every matrix product of :mod:`rlmperf_lite.nn` goes through :func:`mm`, which adds
``2 * m * k * n`` FLOPs (one multiply and one add per term, the convention of Kaplan et al. 2020
and of every FLOP count in this book) to the counter's current phase. Elementwise work (norms,
activations, softmax) is not counted, exactly as the analytical formulas of :ref:`sec-step-phases`
(:mod:`rlmperf_lite.cost.workdepth`) do not count it; the lab puts "counted" beside "predicted".

Phases used by the library: ``"prefill"`` and ``"decode"`` (set by the sampler), ``"forward"``
(default of a full-sequence pass), ``"backward"``; callers rename a pass with
``COUNTER.phase("reference")`` and the like. Used in book section :ref:`sec-step-phases` (lab:
counted vs predicted).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

__all__ = ["FlopCounter", "COUNTER", "mm"]


class FlopCounter:
    """FLOPs of matrix products, summed per phase name (a plain dict ``counts``)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.current = "forward"

    def add(self, flops: float) -> None:
        self.counts[self.current] = self.counts.get(self.current, 0.0) + flops

    @contextmanager
    def phase(self, name: str):
        """Count the products made inside the ``with`` block under ``name``."""
        before, self.current = self.current, name
        try:
            yield self
        finally:
            self.current = before

    def reset(self) -> None:
        self.counts = {}



COUNTER = FlopCounter()


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (batched like ``np.matmul``) that also counts ``2 * batch * m * k * n`` FLOPs."""
    out = a @ b
    COUNTER.add(2.0 * out.size * a.shape[-1])
    return out
