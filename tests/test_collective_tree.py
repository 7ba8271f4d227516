"""The pipelined double binary tree all-reduce (NCCL's trees; Sanders, Speck & Traff 2009)
against the limits of its formula, t(k) = (2d - 1 + k)(alpha + b / k) with d = ceil(log2 n)
and b the ring's bytes per rank over the bus bandwidth, and its crossover with the ring."""
import math

import pytest

from rlmperf_lite.cost import (collective_time_s, tree_all_reduce_time_s,
                               tree_ring_crossover_bytes)

BW, ALPHA = 50e9, 5e-6          # Lab 7 exercise 5: the network's 50 GB/s, 5 us per step


def test_an_empty_buffer_pays_2_log2_n_latencies_the_ring_2_n_minus_1():
    for n in (2, 8, 512, 1000):
        d = math.ceil(math.log2(n))
        assert tree_all_reduce_time_s(0, n, BW, ALPHA) == pytest.approx(2 * d * ALPHA)
        assert collective_time_s("all_reduce", 0, n, BW, ALPHA) == pytest.approx(
            2 * (n - 1) * ALPHA)


def test_without_latency_the_tree_moves_the_rings_bytes():
    # two trees, 2 (n - 1) edges, each carrying S / 2 up and S / 2 down: 2 (n - 1) / n S a rank
    for n in (2, 16, 512):
        S = 15.2e9
        assert tree_all_reduce_time_s(S, n, BW) == pytest.approx(
            collective_time_s("all_reduce", S, n, BW), rel=1e-12)
        assert tree_all_reduce_time_s(S, 1, BW, ALPHA) == 0.0


def test_the_best_chunk_count_is_the_formulas_minimum():
    S, n = 1e8, 512
    m, b = 2 * 9 - 1, 2 * 511 / 512 * S / BW
    best = tree_all_reduce_time_s(S, n, BW, ALPHA)
    assert best == pytest.approx(m * ALPHA + b + 2 * math.sqrt(m * ALPHA * b), rel=1e-12)
    k = math.sqrt(m * b / ALPHA)
    for chunks in (1, int(k), int(k) + 1, 10 * int(k)):
        fixed = tree_all_reduce_time_s(S, n, BW, ALPHA, chunks=chunks)
        assert fixed == pytest.approx((m + chunks) * (ALPHA + b / chunks), rel=1e-12)
        assert fixed >= best * (1 - 1e-12)
    # one chunk is the unpipelined tree: 2d hops each carrying the whole per-rank volume
    assert tree_all_reduce_time_s(S, n, BW, ALPHA, chunks=1) == pytest.approx(18 * (ALPHA + b))


def test_a_large_buffer_runs_at_the_rings_bandwidth():
    for S in (1e10, 1e12):
        ratio = tree_all_reduce_time_s(S, 512, BW, ALPHA) / collective_time_s(
            "all_reduce", S, 512, BW, ALPHA)
        assert 1 < ratio < 1.02
    assert tree_all_reduce_time_s(1e14, 512, BW, ALPHA) / collective_time_s(
        "all_reduce", 1e14, 512, BW, ALPHA) < 1.002


@pytest.mark.parametrize("n", [4, 8, 64, 512, 4096])
def test_the_tree_wins_below_the_crossover_and_the_ring_above(n):
    s = tree_ring_crossover_bytes(n, BW, ALPHA)
    ring = lambda S: collective_time_s("all_reduce", S, n, BW, ALPHA)      # noqa: E731
    tree = lambda S: tree_all_reduce_time_s(S, n, BW, ALPHA)                # noqa: E731
    assert tree(s) == pytest.approx(ring(s), rel=1e-9)
    assert tree(0.9 * s) < ring(0.9 * s) and tree(1.1 * s) > ring(1.1 * s)


def test_the_crossover_grows_as_n_squared_over_log_n():
    # b* = (2 (n - 1) - m)^2 alpha / (4 m), S* = b* busbw / (2 (n - 1) / n)
    # -> busbw alpha n^2 / (4 log2 n) for a large n
    s512 = tree_ring_crossover_bytes(512, BW, ALPHA)
    assert 1.8e9 < s512 < 1.9e9                          # 1.86 GB on 512 ranks at 5 us, 50 GB/s
    n = 2 ** 20
    approx = BW * ALPHA * n ** 2 / (4 * math.log2(n))
    assert tree_ring_crossover_bytes(n, BW, ALPHA) == pytest.approx(approx, rel=0.05)
    assert tree_ring_crossover_bytes(2, BW, ALPHA) == tree_ring_crossover_bytes(3, BW, ALPHA) == 0


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="chunks"):
        tree_all_reduce_time_s(1e6, 8, BW, ALPHA, chunks=0)
    with pytest.raises(ValueError, match="bus_bandwidth_bytes_per_s"):
        tree_all_reduce_time_s(1e6, 8, 0.0)
    with pytest.raises(ValueError, match="latency_s"):
        tree_ring_crossover_bytes(8, BW, -1.0)
    with pytest.raises(ValueError, match="n"):
        tree_ring_crossover_bytes(0, BW, ALPHA)
