"""Checks of the arrays the RL functions take: one home for the completion mask's rules and for
per-token arrays (book section :ref:`sec-grpo`).

A completion mask is (B*G, R): 1 on a completion's tokens, 0 on padding. Token-level losses
accept any 0/1 pattern; functions that find a completion's last token or carry a value from
token to token (REINFORCE++, GAE) need each row as ones then zeros.
"""
from __future__ import annotations

import numpy as np

__all__ = ["check_completion_mask", "check_per_token_array", "check_fits_float32"]


def _as_2d(name: str, x, shape, kind: str) -> np.ndarray:
    """``x`` as a numeric 2-D array (of ``shape`` when given), or a ValueError naming ``name``."""
    try:
        x = np.asarray(x)
    except (ValueError, TypeError):                 # ragged lists
        x = np.asarray(None)
    if x.dtype.kind not in "biuf" or x.ndim != 2 or (shape is not None and x.shape != shape):
        want = f"shape {tuple(shape)}" if shape is not None else "a 2-D (B*G, R) shape"
        raise ValueError(f"{name} must be {kind} of {want}, got shape {x.shape} and dtype "
                         f"{x.dtype}")
    return x


def check_per_token_array(name: str, x, shape=None) -> np.ndarray:
    """``x`` as a 2-D (of ``shape`` when given) array of finite real numbers: float arrays keep
    their dtype, bool and int arrays become float64.

    Raises:
        ValueError: naming ``name``, for a non-numeric (complex, string, object) or wrongly
            shaped array, or a NaN/inf entry.
    """
    x = _as_2d(name, x, shape, "a real numeric array")
    if not np.isfinite(x).all():
        i = tuple(int(v) for v in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(f"{name}{list(i)} is {x[i]}; every entry must be finite")
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def check_completion_mask(completion_mask, shape=None, *, prefix: bool = False,
                          nonempty: bool = False, name: str = "completion_mask") -> np.ndarray:
    """``completion_mask`` as an array of 0s and 1s, 2-D (of ``shape`` when given); a float mask
    keeps its dtype, a bool or int one becomes float64.

    With ``prefix``, each row must be ones then zeros (a completion, then padding); with
    ``nonempty``, each row must hold at least one 1.

    Raises:
        ValueError: naming ``name``, for a non-numeric or wrongly shaped array, an entry other
            than 0 or 1 (NaN, 2, 0.5, ...), a row with a 0 before a 1 when ``prefix``, or an
            all-zero row when ``nonempty``.
    """
    m = _as_2d(name, completion_mask, shape, "a numeric 0/1 array")
    m = m if m.dtype.kind == "f" else m.astype(np.float64)
    bad = np.argwhere((m != 0) & (m != 1))                       # NaN is caught here too
    if bad.size:
        i = tuple(int(v) for v in bad[0])
        raise ValueError(f"{name}{list(i)} is {m[i]}; a mask holds only 0 (padding) and "
                         "1 (completion token)")
    rises = m[:, 1:] > m[:, :-1]                                 # a 1 after a 0
    if prefix and rises.any():
        row = int(np.flatnonzero(rises.any(axis=1))[0])
        raise ValueError(f"{name} row {row} is {m[row].astype(int).tolist()}: this function "
                         "needs each row as ones then zeros (a completion, then padding); "
                         "masks with gaps inside a response are not supported")
    if nonempty and (m.sum(axis=1) == 0).any():
        row = int(np.flatnonzero(m.sum(axis=1) == 0)[0])
        raise ValueError(f"{name} row {row} is empty; every completion needs at least one "
                         "token")
    return m


def check_fits_float32(what: str, x, fix: str) -> np.ndarray:
    """``x`` as float32, or a ValueError saying ``what`` overflows float32 (``abs(x) > 3.4e38``,
    or a NaN/inf reached it) and how to ``fix`` it."""
    x = np.asarray(x)
    with np.errstate(over="ignore", invalid="ignore"):
        out = x.astype(np.float32)
    if not np.isfinite(out).all():
        worst = f"{np.max(np.abs(x)):.4g}"
        raise ValueError(f"{what} overflow float32 (they reach {worst}, beyond "
                         f"{float(np.finfo(np.float32).max):.3g}); {fix}")
    return out
