"""One phase of an RL step as the cost model sees it (book section :ref:`sec-anatomy-phases`)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PhaseEstimate", "PhaseSequence"]


class PhaseSequence:
    """A step's phases (``self.phases``), run one after another: its totals are sums over them.
    The base of every per-step record of the cost and work-depth models."""

    def total(self, attr: str) -> float:
        """The sum of ``attr`` over the phases."""
        return float(sum(getattr(p, attr) for p in self.phases))

    def phase(self, name: str):
        """The phase called ``name``; KeyError naming the phases there are."""
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(f"no phase {name!r}; phases are {[p.name for p in self.phases]}")


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
