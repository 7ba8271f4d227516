"""One phase of an RL step as the cost model sees it (book section :ref:`sec-anatomy-phases`)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PhaseEstimate"]


@dataclass(frozen=True)
class PhaseEstimate:
    """One phase: ``flops`` and ``bytes_moved`` summed over all GPUs, ``time_s`` wall time,
    ``bound`` ("compute" / "memory" / "link"), ``memory_parts`` the bytes per GPU it holds
    ({"model states": ..., "weights": ..., "KV cache": ..., "activations": ...})."""

    name: str
    model: str
    flops: float
    bytes_moved: float
    time_s: float
    bound: str
    memory_parts: dict

    @property
    def per_gpu_memory_bytes(self) -> float:
        """Sum of ``memory_parts`` — what one GPU holds during the phase."""
        return float(sum(self.memory_parts.values()))
