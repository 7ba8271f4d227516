"""Argument checks shared by the configs and calculators: each raises a ValueError that names the
argument (``label``, e.g. ``"GRPOConfig.lr"``) and says what is allowed."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["check_int", "check_number", "check_choice", "check_real_array", "check_bool"]


def check_int(label: str, value, low: int = 1, *, optional: bool = False) -> None:
    """An int (numpy ints too, bools not) >= ``low``; None allowed when ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        none = "None or " if optional else ""
        raise ValueError(f"{label} must be {none}an int >= {low}, got {value!r}")


def check_number(label: str, value, *, low=None, high=None, low_open: bool = False,
                 high_open: bool = False) -> None:
    """A finite real number within the bounds (closed unless ``*_open``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
    ok = ok and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else f"{'(' if low_open else '['}{low}, "
        hi = "" if high is None else f"{high}{')' if high_open else ']'}"
        where = f" in {lo or '(-inf, '}{hi or 'inf)'}" if (low, high) != (None, None) else ""
        raise ValueError(f"{label} must be a finite number{where}, got {value!r}")


def check_choice(label: str, value, choices) -> None:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{label} must be one of {tuple(choices)}, got {value!r}")


def check_real_array(label: str, value, *, max_ndim: int = 1, low=None, high=None) -> np.ndarray:
    """A non-empty scalar or array (at most ``max_ndim`` dimensions) of finite real numbers
    (no bools, strings or complex numbers), each within [low, high] when given; returned as a
    float64 array."""
    bad = isinstance(value, (str, bytes, bool, dict, set))
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):
        bad = True
    if bad or a.dtype.kind not in "iuf" or a.ndim > max_ndim or a.size == 0:
        shape = "a number" if max_ndim == 0 else f"a non-empty array of <= {max_ndim} dims"
        raise ValueError(f"{label} must be {shape} of real numbers, got {value!r}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)) or (low is not None and np.any(a < low)) or \
            (high is not None and np.any(a > high)):
        raise ValueError(f"{label} must be finite and within [{low}, {high}], got {value!r}")
    return a


def check_bool(label: str, value) -> None:
    """True or False (numpy bools too), not a string or a number that merely looks like one."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{label} must be True or False, got {value!r}")
