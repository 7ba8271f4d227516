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
           "bus_bandwidth", "tree_all_reduce_time_s", "tree_ring_crossover_bytes"]

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


# ---- the pipelined double binary tree (NCCL's trees) ------------------------------------------

def _tree_terms(size_bytes, n: int, bus_bandwidth_bytes_per_s, latency_s):
    """(m, a, b) of the double binary tree: m = 2 ceil(log2 n) - 1 pipeline stages beyond the
    chunks, a = alpha per stage, b = the ring's bytes per rank 2 (n - 1) / n S over busbw."""
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    return 2 * depth - 1, latency_s, size_bytes * bus_factor("all_reduce", n) \
        / bus_bandwidth_bytes_per_s


def tree_all_reduce_time_s(size_bytes: float, n: int, bus_bandwidth_bytes_per_s: float,
                           latency_s: float = 0.0, *, chunks: int | None = None) -> float:
    """Seconds of a pipelined double-binary-tree all-reduce, NCCL's tree (Sanders, Speck &
    Träff 2009, "Two-tree algorithms for full bandwidth broadcast, reduction and scan"; NCCL
    2.4, Jeaugey 2019; book section :ref:`sec-ring-allreduce`). Two complementary binary trees
    of depth d = ceil(log2 n), each rank interior in at most one, each reduce up and broadcast
    down half the buffer in k pipelined chunks: a chunk crosses 2d hops, so

        t(k) = (2d - 1 + k) (alpha + b / k),   b = 2 (n - 1) / n x S / busbw

    (b: the ring's bytes per rank, since the two trees' 2 (n - 1) edges each carry S / 2 up and
    down). ``chunks`` None takes the best k = sqrt((2d - 1) b / alpha), at least 1:
    t = (2d - 1) alpha + b + 2 sqrt((2d - 1) alpha b). Limits: 2d alpha for an empty buffer (the
    ring: 2 (n - 1) alpha), the ring's b with no latency, t / ring -> 1 for a large S.

    Raises:
        ValueError: a negative size or latency, ``n`` < 1, a non-positive bandwidth, or
            ``chunks`` not an int >= 1.
    """
    _check("all_reduce", size_bytes, n)
    check_number("bus_bandwidth_bytes_per_s", bus_bandwidth_bytes_per_s, low=0, low_open=True)
    check_number("latency_s", latency_s, low=0)
    if chunks is not None:
        check_int("chunks", chunks, 1)
    if n == 1:
        return 0.0
    m, a, b = _tree_terms(float(size_bytes), n, bus_bandwidth_bytes_per_s, latency_s)
    if chunks is None:
        if a == 0.0:                               # no latency: infinitely many chunks
            return b
        chunks = max(1.0, math.sqrt(m * b / a))   # d t / d k = 0; one chunk at the least
    return (m + chunks) * (a + b / chunks)


def tree_ring_crossover_bytes(n: int, bus_bandwidth_bytes_per_s: float,
                              latency_s: float) -> float:
    """Buffer size S* below which :func:`tree_all_reduce_time_s` (best chunks) beats the ring,
    ``collective_time_s("all_reduce", S, n, busbw, latency_s)``: with m = 2 ceil(log2 n) - 1 and
    b = 2 (n - 1) / n S / busbw, m alpha + 2 sqrt(m alpha b) = (2 (n - 1) - m) alpha, so

        b* = (2 (n - 1) - m)^2 alpha / (4 m)

    (the latency the tree saves against its pipeline's fill), S* about busbw alpha n^2 /
    (4 log2 n) for a large n: the crossover grows as n^2 / log n, which is why NCCL keeps
    trees for large jobs' mid-size buffers and rings for the largest (book section
    :ref:`sec-ring-allreduce`). 0 for n <= 2, where the tree never wins.

    Raises:
        ValueError: ``n`` < 1, a non-positive bandwidth or a negative latency.
    """
    check_int("n", n, 1)
    check_number("bus_bandwidth_bytes_per_s", bus_bandwidth_bytes_per_s, low=0, low_open=True)
    check_number("latency_s", latency_s, low=0)
    if n <= 2:
        return 0.0
    m = 2 * math.ceil(math.log2(n)) - 1
    b = (2 * (n - 1) - m) ** 2 * latency_s / (4 * m)
    if m * b < latency_s:                          # the best k would be below 1: k = 1 instead
        b = (2 * (n - 1) - (m + 1)) * latency_s / m     # (m + 1)(a + b) = 2 (n - 1) a + b
    return b * bus_bandwidth_bytes_per_s / bus_factor("all_reduce", n)
