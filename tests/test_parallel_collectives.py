"""Simulated collectives: results equal the direct computation and the counted bytes equal the
textbook per-rank volumes (nccl-tests doc/PERFORMANCE.md; book Chapter 7)."""
import numpy as np
import pytest

from rlmperf_lite.parallel import DeviceMesh, ProcessGroup


def _arrays(n, size, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(size) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_ring_all_reduce_equals_the_sum_and_moves_2_n_minus_1_over_n_S(n):
    xs = _arrays(n, 8 * 24)                       # S = 192 float64 = 1536 bytes, divisible by n
    g = ProcessGroup(n)
    out = g.all_reduce(xs)
    for o in out:
        np.testing.assert_allclose(o, np.sum(xs, axis=0), rtol=1e-12, atol=1e-12)
    S = xs[0].nbytes
    np.testing.assert_allclose(g.log.sent_bytes, 2 * (n - 1) / n * S)
    assert [c["op"] for c in g.log.calls] == (["all_reduce"] if n > 1 else [])


def test_all_reduce_keeps_the_shape():
    xs = [np.full((3, 4), float(r)) for r in range(4)]
    out = ProcessGroup(4).all_reduce(xs)
    assert out[2].shape == (3, 4) and np.all(out[2] == 6.0)


@pytest.mark.parametrize("n", [2, 4, 5])
def test_reduce_scatter_gives_rank_r_chunk_r_of_the_sum(n):
    xs = _arrays(n, 10 * n, seed=1)
    g = ProcessGroup(n)
    out = g.reduce_scatter(xs)
    full = np.sum(xs, axis=0)
    for r in range(n):
        np.testing.assert_allclose(out[r], np.array_split(full, n)[r], rtol=1e-12)
    np.testing.assert_allclose(g.log.sent_bytes, (n - 1) / n * xs[0].nbytes)


@pytest.mark.parametrize("n", [2, 4, 5])
def test_all_gather_concatenates_and_moves_n_minus_1_over_n_S(n):
    chunks = _arrays(n, 6, seed=2)
    g = ProcessGroup(n)
    out = g.all_gather(chunks)
    for o in out:
        np.testing.assert_array_equal(o, np.concatenate(chunks))
    np.testing.assert_allclose(g.log.sent_bytes, (n - 1) / n * (6 * n * 8))


def test_all_to_all_transposes_and_sends_all_but_the_own_block():
    n = 4
    xs = [[np.full(5, 10 * s + d, dtype=np.float32) for d in range(n)] for s in range(n)]
    g = ProcessGroup(n)
    ys = g.all_to_all(xs)
    assert all(np.all(ys[d][s] == 10 * s + d) for s in range(n) for d in range(n))
    S = n * 5 * 4                                   # each rank's send buffer, bytes
    np.testing.assert_allclose(g.log.sent_bytes, (n - 1) / n * S)


def test_send_and_broadcast_volumes():
    g = ProcessGroup(3)
    x = np.ones(10)
    np.testing.assert_array_equal(g.send(x, 0, 2), x)
    assert list(g.log.sent_bytes) == [80, 0, 0]
    out = g.broadcast(np.arange(4.0), root=1)
    assert all(np.array_equal(o, np.arange(4.0)) for o in out)
    assert list(g.log.sent_bytes) == [80, 32, 32]            # chain 1 -> 2 -> 0: 0 is last


def test_mesh_places_tp_innermost_and_shares_one_log():
    mesh = DeviceMesh(dp=2, tp=2)
    assert [g.ranks for g in mesh.groups("tp")] == [[0, 1], [2, 3]]
    assert [g.ranks for g in mesh.groups("dp")] == [[0, 2], [1, 3]]
    assert mesh.rank(dp=1, tp=0) == 2 and mesh.coords(3) == {"dp": 1, "tp": 1}
    mesh.group_of("dp", 1).all_reduce([np.ones(4), np.ones(4)])
    assert list(mesh.log.sent_bytes) == [0, 32, 0, 32]
    assert set(mesh.log.bytes_by_op()) == {"all_reduce"}


@pytest.mark.parametrize("bad, match", [
    (lambda g: g.all_reduce([np.ones(2)]), "list of 2 per-rank arrays"),
    (lambda g: g.all_reduce([np.ones(2), np.ones(3)]), "same shape"),
    (lambda g: g.send(np.ones(2), 0, 5), "dst=5 is not a rank"),
    (lambda g: g.broadcast(np.ones(2), root=-1), "root must be"),
])
def test_bad_input_names_the_problem(bad, match):
    with pytest.raises(ValueError, match=match):
        bad(ProcessGroup(2))


def test_mesh_rejects_bad_degrees():
    with pytest.raises(ValueError, match="tp must be an int >= 1"):
        DeviceMesh(dp=2, tp=0)


@pytest.mark.parametrize("bad, match", [
    (lambda g: g.all_reduce([np.ones(2, np.float32), np.ones(2)]), "same dtype.*float32"),
    (lambda g: g.all_gather([np.ones(2, np.float32), np.ones(2)]), "same dtype"),
    (lambda g: g.all_reduce([np.array(["a", "b"])] * 2), "numeric"),
    (lambda g: g.all_reduce([np.array([None, None])] * 2), "numeric"),
    (lambda g: g.all_reduce([np.array(["a0", "a1"], dtype=object)] * 2), "numeric"),
    (lambda g: g.reduce_scatter([np.array(["a", "b"])] * 2), "numeric"),
    (lambda g: g.reduce_scatter([np.array(["a", "b"], dtype=object), np.ones(2)]), "same dtype"),
    (lambda g: g.all_gather([np.array(["a"])] * 2), "numeric"),
    (lambda g: g.all_to_all([[np.array(["a"])] * 2] * 2), "numeric"),
    (lambda g: g.all_to_all([[np.ones(1), np.ones(1, int)]] * 2), "same dtype"),
    (lambda g: ProcessGroup(ranks=[0, 0]), "distinct"),
    (lambda g: ProcessGroup(ranks=[-1, 0]), "ranks"),
    (lambda g: ProcessGroup(ranks=[]), "non-empty"),
    (lambda g: ProcessGroup(ranks=[0, 5], log=g.log), "ranks.*world_size"),
    (lambda g: DeviceMesh(dp=2, tp=2).rank(dp=1), "one coordinate per axis"),
    (lambda g: DeviceMesh(dp=2, tp=2).rank(dp=2, tp=0), "dp=2 is out of range"),
    (lambda g: DeviceMesh(dp=2, tp=2).rank(dp=0, tp=-1), "tp must be an int >= 0"),
    (lambda g: DeviceMesh(dp=2, tp=2).coords(9), "rank=9 is out of range"),
    (lambda g: DeviceMesh(dp=2, tp=2).group_of("tp", 4), "rank=4 is out of range"),
])
def test_bad_dtypes_ranks_and_coordinates_raise_naming_them(bad, match):
    with pytest.raises(ValueError, match=match):
        bad(ProcessGroup(2))


def test_object_labels_still_pass_through_reduce_scatter_and_all_gather():
    # Lab 7's ring-order demo: "adding" string labels records the order of the ring
    g = ProcessGroup(2)
    out = g.all_gather(g.reduce_scatter([np.array(["a0", "a1"], dtype=object),
                                         np.array(["b0", "b1"], dtype=object)]))
    assert list(out[0]) == ["a0b0", "b1a1"]
