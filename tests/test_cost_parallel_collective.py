"""Collective time and volume against nccl-tests' definitions (doc/PERFORMANCE.md) and against
a simulated ring (book Chapter 7)."""
import numpy as np
import pytest

from rlmperf_lite.cost import (COLLECTIVES, algorithm_bandwidth, bus_bandwidth,
                               collective_bytes_per_rank, collective_time_s)


def test_all_reduce_time_from_bus_bandwidth():
    """nccl-tests: busbw = algbw x 2(n-1)/n for all-reduce, so 1 GB on 8 ranks at 100 GB/s bus
    bandwidth takes 2 x 7/8 x 1e9 / 1e11 = 17.5 ms."""
    assert collective_time_s("all_reduce", 1e9, 8, 1e11) == pytest.approx(2 * 7 / 8 * 1e9 / 1e11)


@pytest.mark.parametrize("op, factor", [("all_gather", 7 / 8), ("reduce_scatter", 7 / 8),
                                        ("all_to_all", 7 / 8), ("broadcast", 1.0)])
def test_bus_bandwidth_factors(op, factor):
    """nccl-tests: (n-1)/n for all-gather, reduce-scatter, all-to-all; 1 for broadcast."""
    assert collective_time_s(op, 1e9, 8, 1e11) == pytest.approx(factor * 1e9 / 1e11)
    assert bus_bandwidth(op, 1e11, 8) == pytest.approx(factor * 1e11)
    assert algorithm_bandwidth(op, bus_bandwidth(op, 1e11, 8), 8) == pytest.approx(1e11)


def test_one_rank_is_free_and_latency_counts_ring_steps():
    for op in COLLECTIVES:
        assert collective_time_s(op, 1e9, 1, 1e11, latency_s=1e-5) == 0.0
        assert collective_bytes_per_rank(op, 1e9, 1) == 0.0
    assert algorithm_bandwidth("all_reduce", 1e11, 1) == float("inf")
    # alpha-beta ring (Thakur et al. 2005): 2(n-1) steps for all-reduce, n-1 for all-gather
    assert collective_time_s("all_reduce", 0, 8, 1e11, latency_s=1e-5) == pytest.approx(14e-5)
    assert collective_time_s("all_gather", 0, 8, 1e11, latency_s=1e-5) == pytest.approx(7e-5)


def _ring_all_reduce(data):
    """Ring reduce-scatter then ring all-gather over len(data) ranks, one chunk per rank per
    step; returns the reduced buffers and the bytes each rank sent."""
    n = len(data)
    chunks = [list(np.array_split(d.copy(), n)) for d in data]
    sent = np.zeros(n)
    for step in range(n - 1):                            # reduce-scatter
        msgs = [(r, (r - step) % n, chunks[r][(r - step) % n].copy()) for r in range(n)]
        for r, c, x in msgs:
            chunks[(r + 1) % n][c] += x
            sent[r] += x.nbytes
    for step in range(n - 1):                            # all-gather of the reduced chunks
        msgs = [(r, (r + 1 - step) % n, chunks[r][(r + 1 - step) % n].copy()) for r in range(n)]
        for r, c, x in msgs:
            chunks[(r + 1) % n][c] = x
            sent[r] += x.nbytes
    return [np.concatenate(c) for c in chunks], sent


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_bytes_per_rank_match_a_simulated_ring(n):
    """Textbook ring all-reduce: each rank sends 2(n-1)/n x S bytes (= S x nccl's busbw
    factor); the simulation also checks the reduction is right."""
    rng = np.random.default_rng(n)
    data = [rng.standard_normal(8 * 3 * 5) for _ in range(n)]       # S = 960 bytes
    out, sent = _ring_all_reduce(data)
    for o in out:
        np.testing.assert_allclose(o, np.sum(data, axis=0))
    S = data[0].nbytes
    np.testing.assert_allclose(sent, collective_bytes_per_rank("all_reduce", S, n))
    # all-reduce = reduce-scatter + all-gather, each (n-1)/n S
    assert collective_bytes_per_rank("all_reduce", S, n) == pytest.approx(
        collective_bytes_per_rank("reduce_scatter", S, n)
        + collective_bytes_per_rank("all_gather", S, n))
    # all-to-all: each rank keeps its own 1/n and sends the other n-1 pieces of S / n
    assert collective_bytes_per_rank("all_to_all", S, n) == pytest.approx((n - 1) * S / n)


@pytest.mark.parametrize("kwargs, name", [
    (dict(op="allreduce", size_bytes=1, n=2, bus_bandwidth_bytes_per_s=1), "op"),
    (dict(op="all_reduce", size_bytes=-1, n=2, bus_bandwidth_bytes_per_s=1), "size_bytes"),
    (dict(op="all_reduce", size_bytes=1, n=0, bus_bandwidth_bytes_per_s=1), "n"),
    (dict(op="all_reduce", size_bytes=1, n=2, bus_bandwidth_bytes_per_s=0),
     "bus_bandwidth_bytes_per_s"),
    (dict(op="all_reduce", size_bytes=1, n=2, bus_bandwidth_bytes_per_s=1, latency_s=-1),
     "latency_s"),
])
def test_bad_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        collective_time_s(**kwargs)
