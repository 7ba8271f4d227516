"""Argument checks shared by the configs and calculators: each raises a ValueError that names the
argument (``label``, e.g. ``"GRPOConfig.lr"``) and says what is allowed."""
from __future__ import annotations

import difflib
import math

import numpy as np

__all__ = ["check_int", "check_number", "check_choice", "check_real_array", "check_bool",
           "check_efficiency", "MIN_EFFICIENCY", "did_you_mean", "progress_bar"]

INT64_MAX = 2**63 - 1
MIN_EFFICIENCY = 1e-6
"""The smallest efficiency (a share of a peak) the calculators accept. Below it a time says
nothing about a real run (1e-300 of an H100's peak gives 1e300-second steps)."""


def check_int(label: str, value, low: int = 1, *, optional: bool = False,
              high: int | None = None) -> None:
    """An int (numpy ints too, bools not) >= ``low`` and <= ``high`` (default 2^63 - 1, the
    largest int64, so that no argument overflows a numpy integer); None allowed when
    ``optional``."""
    if optional and value is None:
        return
    high = INT64_MAX if high is None else high
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low \
            or value > high:
        none = "None or " if optional else ""
        above = not isinstance(value, bool) and isinstance(value, (int, np.integer)) \
            and value > high
        within = f"in [{low}, {high:,}]" if above else f">= {low}"
        raise ValueError(f"{label} must be {none}an int {within}, got {_shown(value)}")


def _shown(value) -> str:
    """``repr(value)``, but an int of over 30 digits by its size (repr of one of over 4,300
    digits raises)."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"an int of about 10^{int(math.log10(abs(value)))}"
    return repr(value)


def check_number(label: str, value, *, low=None, high=None, low_open: bool = False,
                 high_open: bool = False) -> None:
    """A finite real number within the bounds (closed unless ``*_open``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
    try:
        ok = ok and math.isfinite(value)
    except OverflowError:                           # an int too large for a float
        ok = False
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else f"{'(' if low_open else '['}{low}, "
        hi = "" if high is None else f"{high}{')' if high_open else ']'}"
        where = f" in {lo or '(-inf, '}{hi or 'inf)'}" if (low, high) != (None, None) else ""
        raise ValueError(f"{label} must be a finite number{where}, got {_shown(value)}")


def check_choice(label: str, value, choices) -> None:
    """One of ``choices``."""
    try:
        ok = value in choices
    except TypeError:                               # unhashable (a list) in a set or dict
        ok = False
    if not ok:
        raise ValueError(f"{label} must be one of {tuple(choices)}, got {_shown(value)}")


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
        raise ValueError(f"{label} must be {shape} of real numbers, got {_shown(value)}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)) or (low is not None and np.any(a < low)) or \
            (high is not None and np.any(a > high)):
        raise ValueError(f"{label} must be finite and within [{low}, {high}], got {value!r}")
    return a


def check_bool(label: str, value) -> None:
    """True or False (numpy bools too), not a string or a number that merely looks like one."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{label} must be True or False, got {value!r}")


def progress_bar(iterable, progress, *, desc: str, unit: str):
    """``iterable`` wrapped in a text tqdm bar when ``progress`` is True (a text bar, unlike
    tqdm's notebook widget, also shows in a notebook saved to HTML), else itself.

    Raises:
        ValueError: ``progress`` not a bool.
    """
    check_bool("progress", progress)
    if not progress:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, unit=unit, mininterval=1.0, ascii=True)


def check_efficiency(label: str, value) -> None:
    """A share of a device's peak in [:data:`rlmperf_lite.checks.MIN_EFFICIENCY`, 1] (an MFU, a
    share of the memory bandwidth or of a link's)."""
    check_number(label, value, low=0, high=1, low_open=True)
    if value < MIN_EFFICIENCY:
        raise ValueError(f"{label}={value!r} is below {MIN_EFFICIENCY:g} of the peak, which no "
                         f"real run is: use a realistic fraction (e.g. 0.3-1)")


def did_you_mean(name, choices) -> str:
    """`` (did you mean 'x'?)`` naming the up to three ``choices`` closest to ``name``
    (case-insensitive, ``difflib.get_close_matches``), or "" when none is close: for the
    "unknown name" errors of preset lookups."""
    if not isinstance(name, str):
        return ""
    lower = {str(c).lower(): str(c) for c in choices}
    close = [repr(lower[c]) for c in difflib.get_close_matches(name.lower(), list(lower), n=3)]
    if not close:
        return ""
    listed = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" (did you mean {listed}?)"
