"""The pipeline bubble (book section :ref:`sec-pp-stages`).

With p pipeline stages, m microbatches per step and v model chunks per stage (interleaved
schedule; v = 1 is plain 1F1B or GPipe), a step's idle time at each stage is (p - 1) / v
forward-backward slots out of m of useful work (Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", arXiv 2104.04473, §2.2.1 and
§2.2.2):

    bubble / ideal compute time   = (p - 1) / (v m)
    bubble / total time           = (p - 1) / (v m + p - 1)

Megatron-LM's interleaved schedule needs m divisible by p (its schedules.py raises "number of
microbatches is not divisible by pipeline-model-parallel-size when using interleaved
schedule").
"""
from __future__ import annotations

from ..checks import check_choice, check_int

__all__ = ["pipeline_bubble_fraction"]


def pipeline_bubble_fraction(pp: int, microbatches: int, interleave: int = 1,
                             of: str = "ideal") -> float:
    """Pipeline bubble (p - 1) / (v m) of the ideal compute time (``of="ideal"``), or
    (p - 1) / (v m + p - 1) of the step's total time (``of="total"``), Narayanan et al. 2021
    §2.2. Example: p = 8, m = 32 -> 7/32 = 0.21875; with v = 2 -> 0.109375.

    Args:
        pp: pipeline stages p.
        microbatches: m per step (per data-parallel rank).
        interleave: model chunks per stage v (virtual pipeline size; 1 = no interleaving).
    Raises:
        ValueError: sizes < 1, an unknown ``of``, or ``interleave`` > 1 with ``pp`` = 1 or with
            ``microbatches`` not divisible by ``pp`` (Megatron-LM's rule for interleaving).
    """
    check_int("pp", pp, 1)
    check_int("microbatches", microbatches, 1)
    check_int("interleave", interleave, 1)
    check_choice("of", of, ("ideal", "total"))
    if interleave > 1 and pp == 1:
        raise ValueError(f"interleave={interleave} needs pp > 1 (a single stage has nothing to "
                         f"interleave)")
    if interleave > 1 and microbatches % pp:
        raise ValueError(f"interleave={interleave} needs microbatches divisible by pp "
                         f"(Megatron-LM's interleaved schedule); got microbatches="
                         f"{microbatches}, pp={pp}")
    idle, work = pp - 1, interleave * microbatches
    return idle / work if of == "ideal" else idle / (work + idle)
