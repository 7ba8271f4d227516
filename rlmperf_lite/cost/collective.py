"""Time and volume of the collectives parallel training runs (book section
:ref:`sec-ring-allreduce`).

Bandwidths follow nccl-tests (NVIDIA/nccl-tests, doc/PERFORMANCE.md). For a collective on a
buffer of S bytes that takes t seconds on n ranks:

    algorithm bandwidth   algbw = S / t
    bus bandwidth         busbw = algbw x factor(op, n)

    op               S is                                   factor(op, n)
    all_reduce       the buffer each rank holds             2 (n - 1) / n
    all_gather       the full, gathered buffer              (n - 1) / n
    reduce_scatter   the full input buffer of each rank     (n - 1) / n
    all_to_all       the buffer each rank sends (and gets)  (n - 1) / n
    broadcast        the buffer                             1

Bus bandwidth is what a link delivers whatever n is, so it is the hardware figure we plug in
(:class:`rlmperf_lite.cost.HardwareSpec` gives per-GPU, one-direction link bandwidths), and

    time = S x factor(op, n) / busbw  (+ latency_s per ring step, the alpha of the alpha-beta
                                        model: 2 (n - 1) steps for a ring all-reduce, n - 1 for
                                        the others; Thakur et al. 2005, "Optimization of
                                        Collective Communication Operations in MPICH", §4)

S x factor(op, n) is also the number of bytes each rank sends in the textbook ring algorithm
(all-reduce = reduce-scatter + all-gather, 2 (n - 1) chunks of S / n), which
:func:`collective_bytes_per_rank` returns. One rank (n = 1) moves nothing and takes 0 s.
The functions below check scalars; the ``_``-prefixed helpers take numpy arrays (the planner).
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import check_choice, check_int, check_number

__all__ = ["COLLECTIVES", "NVLINK_HOP_LATENCY_S", "NET_HOP_LATENCY_S",
           "collective_bytes_per_rank", "collective_time_s", "algorithm_bandwidth",
           "bus_bandwidth"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
#: The latency alpha of one ring step or hop over NVLink, in seconds, from NCCL's tuning model
#: (src/graph/tuning.cc, hwLat[NVLINK][Ring][Simple]); measure your own system's
NVLINK_HOP_LATENCY_S = 3.4e-6
#: ... and hwLat[NET][Ring][Simple] (InfiniBand or RoCE between nodes)
NET_HOP_LATENCY_S = 14.0e-6
_MAX = 1e30         # bytes or bytes/s: beyond any machine, and products of them stay finite


def bus_factor(op: str, n):
    """factor(op, n) of the module docstring; n may be an array (n = 1 gives 0)."""
    n = np.asarray(n, dtype=np.float64)
    if op == "all_reduce":
        f = 2.0 * (n - 1) / n
    elif op == "broadcast":
        f = np.where(n > 1, 1.0, 0.0)
    else:
        f = (n - 1) / n
    return f if f.ndim else float(f)


def _steps(op: str, n):
    """Ring steps, each paying the latency once: 2 (n - 1) for all-reduce, n - 1 otherwise."""
    n = np.asarray(n, dtype=np.float64)
    s = (2.0 if op == "all_reduce" else 1.0) * (n - 1)
    return s if s.ndim else float(s)


def collective_time_s_array(op: str, size_bytes, n, bus_bandwidth_bytes_per_s, latency_s=0.0):
    """Array form of :func:`collective_time_s` (no checks)."""
    return (np.multiply(size_bytes, bus_factor(op, n)) / bus_bandwidth_bytes_per_s
            + latency_s * _steps(op, n))


def _check(op, size_bytes, n):
    check_choice("op", op, COLLECTIVES)
    check_number("size_bytes", size_bytes, low=0, high=_MAX)
    check_int("n", n, 1)


def collective_bytes_per_rank(op: str, size_bytes: float, n: int) -> float:
    """Bytes each rank sends in the ring algorithm: S x factor(op, n) (module docstring), e.g.
    all-reduce 2 (n - 1) / n x S, all-gather (n - 1) / n x S with S the gathered buffer.

    Raises:
        ValueError: an unknown ``op``, a ``size_bytes`` negative or above 1e30, ``n`` < 1.
    """
    _check(op, size_bytes, n)
    return float(size_bytes) * bus_factor(op, n)


def collective_time_s(op: str, size_bytes: float, n: int, bus_bandwidth_bytes_per_s: float,
                      latency_s: float = 0.0) -> float:
    """Seconds of a collective on ``size_bytes`` (S, as nccl-tests defines it per op) over ``n``
    ranks at bus bandwidth ``bus_bandwidth_bytes_per_s``: S x factor(op, n) / busbw, plus
    ``latency_s`` per ring step (nccl-tests doc/PERFORMANCE.md; book section
    :ref:`sec-ring-allreduce`).

    Example: all-reduce of 1 GB on 8 GPUs at 100 GB/s bus bandwidth = 2 x 7/8 x 1e9 / 1e11 s.

    Raises:
        ValueError: an unknown ``op``, a negative size or latency, ``n`` < 1, a non-positive
            bandwidth, a size or bandwidth above 1e30, or inputs whose time overflows to
            infinity (naming all three).
    """
    _check(op, size_bytes, n)
    check_number("bus_bandwidth_bytes_per_s", bus_bandwidth_bytes_per_s, low=0, low_open=True,
                 high=_MAX)
    check_number("latency_s", latency_s, low=0)
    with np.errstate(over="ignore"):
        t = float(collective_time_s_array(op, size_bytes, n, bus_bandwidth_bytes_per_s, latency_s))
    if not math.isfinite(t):
        raise ValueError(f"size_bytes={size_bytes!r}, bus_bandwidth_bytes_per_s="
                         f"{bus_bandwidth_bytes_per_s!r} and latency_s={latency_s!r} give an "
                         f"infinite time: check their units (bytes, bytes/s, seconds)")
    return t


def bus_bandwidth(op: str, algorithm_bandwidth_bytes_per_s: float, n: int) -> float:
    """busbw = algbw x factor(op, n) (nccl-tests doc/PERFORMANCE.md); 0 for n = 1.

    Raises:
        ValueError: an unknown ``op``, a bandwidth negative or above 1e30, ``n`` < 1.
    """
    check_choice("op", op, COLLECTIVES)
    check_number("algorithm_bandwidth_bytes_per_s", algorithm_bandwidth_bytes_per_s, low=0,
                 high=_MAX)
    check_int("n", n, 1)
    return float(algorithm_bandwidth_bytes_per_s) * bus_factor(op, n)


def algorithm_bandwidth(op: str, bus_bandwidth_bytes_per_s: float, n: int) -> float:
    """algbw = busbw / factor(op, n) (nccl-tests doc/PERFORMANCE.md); infinite for n = 1 (no
    data moves, the collective is free).

    Raises:
        ValueError: an unknown ``op``, a bandwidth negative or above 1e30, ``n`` < 1.
    """
    check_choice("op", op, COLLECTIVES)
    check_number("bus_bandwidth_bytes_per_s", bus_bandwidth_bytes_per_s, low=0, high=_MAX)
    check_int("n", n, 1)
    f = bus_factor(op, n)
    return math.inf if f == 0 else float(bus_bandwidth_bytes_per_s) / f
