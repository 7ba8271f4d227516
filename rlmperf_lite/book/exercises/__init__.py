"""Answers to the labs' exercises, computed by the library when asked (book Labs 1–14).

Each lab ends with exercises, each followed by its worked solution (folded in the full edition
of the book, left out of the student edition). Where an answer is a number, the solution ends
with ``check_answer("chNN.k", value)``, and a reader can call it on their own answer:

    >>> from rlmperf_lite.book.exercises import check_answer
    >>> check_answer("ch01.1a", 0.32)
    ✓ ch01.1a: 0.32 matches
    True

Nothing here stores an answer. The registry maps each exercise id to a function that computes
the expected value with the library's own functions at call time, so an answer follows the
library if a formula or a preset changes. Ids are ``"chNN.k"`` for exercise k of chapter NN's
lab, with a letter when one exercise asks for two numbers (``"ch01.1a"``, ``"ch01.1b"``).
"""
from __future__ import annotations

import math

import numpy as np

from ._answer import Answer
from .labs1_3 import ANSWERS as _PART1
from .labs4_6 import ANSWERS as _PART2
from .labs7_9 import ANSWERS as _PART3
from .labs10 import ANSWERS as _LAB10
from .labs11 import ANSWERS as _LAB11
from .labs12 import ANSWERS as _LAB12
from .labs13 import ANSWERS as _LAB13
from .labs14 import ANSWERS as _LAB14

__all__ = ["Answer", "REGISTRY", "answers", "check_answer", "expected_answer"]

REGISTRY: dict[str, Answer] = {**_PART1, **_PART2, **_PART3, **_LAB10, **_LAB11,
                              **_LAB12, **_LAB13, **_LAB14}
"""Exercise id -> :class:`Answer`."""


def answers(prefix: str = "") -> list[str]:
    """The registered exercise ids, in order; with ``prefix`` (e.g. ``"ch04"``) only those that
    start with it.

    Raises:
        ValueError: naming ``prefix`` if it is not a string.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'ch04', got {prefix!r}")
    return [k for k in REGISTRY if k.startswith(prefix)]


def _entry(exercise) -> Answer:
    if not isinstance(exercise, str) or exercise not in REGISTRY:
        raise ValueError(f"exercise must be one of {answers()}, got {exercise!r}")
    return REGISTRY[exercise]


def expected_answer(exercise: str) -> float:
    """The expected value of ``exercise``, computed by the library now.

    Raises:
        ValueError: naming ``exercise`` if it is not a registered id.
    """
    return float(_entry(exercise).compute())


def _digits(rtol: float) -> int:
    """Significant digits that a relative tolerance resolves (at least 2)."""
    return max(2, math.ceil(-math.log10(rtol))) if rtol > 0 else 0


def _fmt(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits (trailing zeros kept); 0 digits: as it is."""
    if digits == 0:                                      # exact answers are whole numbers
        return f"{x:,.0f}" if float(x).is_integer() else f"{x:.6g}"
    return f"{x:#.{digits}g}".rstrip(".")


def check_answer(exercise: str, value, *, rtol: float | None = None) -> bool:
    """Compare ``value`` with the library's answer to ``exercise``; print a one-line verdict.

    Args:
        exercise: an id of :func:`answers`, e.g. ``"ch04.2a"``.
        value: your answer, a finite real number.
        rtol: relative tolerance; None = the exercise's own (1% for most, exact for counts).
    Returns:
        True if ``value`` is within the tolerance of the expected answer.
    Raises:
        ValueError: naming ``exercise`` (not a registered id; the message lists them),
            ``value`` (not a finite real number) or ``rtol`` (outside [0, 1)).
    """
    entry = _entry(exercise)
    ok_type = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    if not ok_type or not math.isfinite(value):
        raise ValueError(f"value must be a finite real number (your answer to {exercise}), "
                         f"got {value!r}")
    if rtol is None:
        rtol = entry.rtol
    elif isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol < 1:
        raise ValueError(f"rtol must be a number in [0, 1), got {rtol!r}")
    expected = expected_answer(exercise)
    value = float(value)
    ok = abs(value - expected) <= max(rtol * abs(expected), entry.atol)
    digits = _digits(rtol)
    if ok:
        print(f"✓ {exercise}: {_fmt(value, 0) if digits == 0 else f'{value:.4g}'} matches")
    else:
        want = (f"expected {_fmt(expected, digits)}" if digits == 0 else
                f"expected about {_fmt(expected, digits)} (to {digits} significant digits)")
        print(f"✗ {exercise}: {want}, got {_fmt(value, digits)} — hint: {entry.hint}")
    return ok
