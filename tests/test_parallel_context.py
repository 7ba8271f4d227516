"""Context parallelism by ring attention (Liu et al. 2023, arXiv 2310.01889; book Chapter 8):
outputs and gradients equal the unsharded causal attention of ``layers.attention_forward`` for
cp in (1, 2, 4) and both layouts, in float64; the counted bytes equal (cp - 1) K/V chunks sent
forward by every rank; the zigzag layout evens the causal work."""
import numpy as np
import pytest

from rlmperf_lite.nn.layers import attention_backward, attention_forward
from rlmperf_lite.parallel.collectives import ProcessGroup
from rlmperf_lite.parallel.context import (
    chunk_positions,
    cp_attention_backward,
    cp_attention_forward,
    merge_sequence,
    ring_attention_backward,
    ring_attention_forward,
    ring_attention_work,
    split_sequence,
)

RTOL, ATOL = 1e-10, 1e-12
CASES = [(cp, layout) for cp in (1, 2, 4) for layout in ("contiguous", "zigzag")]


def _qkv_reference(seed=0, D=8, H=2):
    """Dense q, k, v (1, H, T=D, Dh) with their reference out and dq, dk, dv, from the library's
    own attention: with x = I (T = D) and wo = I, qkv = wqkv, out = attention and dwqkv = dqkv."""
    rng = np.random.default_rng(seed)
    Dh = D // H
    wqkv = 0.5 * rng.standard_normal((D, 3 * D))
    x = np.eye(D)[None]                                                  # (1, T=D, D)
    out, cache = attention_forward(x, wqkv, np.eye(D), H)                # (1, T, D)
    dout = rng.standard_normal(out.shape)
    _, dqkv, _ = attention_backward(dout, cache)                         # (T, 3D) = dqkv

    def heads(a):                                                        # (T, D) -> (1, H, T, Dh)
        return a.reshape(1, D, H, Dh).transpose(0, 2, 1, 3)
    q, k, v = (heads(a) for a in np.split(wqkv, 3, axis=1))
    dq, dk, dv = (heads(a) for a in np.split(dqkv, 3, axis=1))
    return (q, k, v), heads(out[0]), heads(dout[0]), (dq, dk, dv)


@pytest.mark.parametrize("cp,layout", CASES)
def test_ring_attention_out_and_dq_dk_dv_equal_dense_causal_attention(cp, layout):
    (q, k, v), out, dout, grads = _qkv_reference()
    g = ProcessGroup(cp)
    outs, cache = ring_attention_forward(*(split_sequence(a, cp, layout) for a in (q, k, v)),
                                         g, causal=True, layout=layout)
    np.testing.assert_allclose(merge_sequence(outs, layout), out, rtol=RTOL, atol=ATOL)
    got = ring_attention_backward(split_sequence(dout, cp, layout), cache, g)
    for name, chunks, want in zip(("dq", "dk", "dv"), got, grads):
        np.testing.assert_allclose(merge_sequence(chunks, layout), want, rtol=RTOL, atol=ATOL,
                                   err_msg=name)


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_ring_attention_without_mask_equals_full_softmax_attention(cp):
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 2, 2, 8, 4))                        # 3 x (n, H, T, Dh)
    s = q @ k.transpose(0, 1, 3, 2) / 2.0                                # sqrt(Dh) = 2
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v                            # (n, H, T, Dh)
    outs, cache = ring_attention_forward(*(split_sequence(a, cp) for a in (q, k, v)),
                                         ProcessGroup(cp), causal=False)
    np.testing.assert_allclose(merge_sequence(outs), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(cache["work"], np.full(cp, cp))        # every block computed


@pytest.mark.parametrize("cp,layout", CASES)
def test_cp_attention_layer_equals_attention_forward_and_backward(cp, layout):
    rng = np.random.default_rng(2)
    n, T, D, H = 2, 16, 8, 2
    x = rng.standard_normal((n, T, D))
    wqkv, wo = 0.3 * rng.standard_normal((D, 3 * D)), 0.3 * rng.standard_normal((D, D))
    out, cache = attention_forward(x, wqkv, wo, H)
    dout = rng.standard_normal(out.shape)
    dx, dwqkv, dwo = attention_backward(dout, cache)

    g = ProcessGroup(cp)
    outs, cp_cache = cp_attention_forward(split_sequence(x, cp, layout, axis=1), wqkv, wo, H, g,
                                          layout=layout)
    np.testing.assert_allclose(merge_sequence(outs, layout, axis=1), out, rtol=RTOL, atol=ATOL)
    dxs, dwqkvs, dwos = cp_attention_backward(split_sequence(dout, cp, layout, axis=1),
                                              cp_cache, g)
    np.testing.assert_allclose(merge_sequence(dxs, layout, axis=1), dx, rtol=RTOL, atol=ATOL)
    for r in range(cp):                        # every rank holds the all-reduced weight grads
        np.testing.assert_allclose(dwqkvs[r], dwqkv, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(dwos[r], dwo, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("cp,layout", CASES)
def test_bytes_each_rank_sends_cp_minus_1_kv_chunks_forward(cp, layout):
    """Forward: (cp - 1) * 2 chunk bytes per rank (K and V, passed cp - 1 times). Backward:
    K, V, dK, dV for cp - 1 hops plus dK, dV's hop home, (cp - 1) * 4 + 2 chunk bytes."""
    (q, k, v), _, dout, _ = _qkv_reference()
    g = ProcessGroup(cp)
    qs, ks, vs = (split_sequence(a, cp, layout) for a in (q, k, v))
    chunk_bytes = ks[0].nbytes                                           # (1, H, T/cp, Dh) float64
    _, cache = ring_attention_forward(qs, ks, vs, g, layout=layout)
    np.testing.assert_array_equal(g.log.sent_bytes, (cp - 1) * 2 * chunk_bytes)
    g.log.reset()
    ring_attention_backward(split_sequence(dout, cp, layout), cache, g)
    np.testing.assert_array_equal(g.log.sent_bytes, ((cp - 1) * 4 + 2 * (cp > 1)) * chunk_bytes)
    assert {c["op"] for c in g.log.calls} <= {"send"}


def test_cp_layer_weight_gradients_are_all_reduced_as_in_data_parallelism():
    """The weights' grads cost one all-reduce each: 2 (cp - 1) / cp of their bytes per rank."""
    cp, n, T, D, H = 4, 1, 8, 8, 2
    rng = np.random.default_rng(3)
    x, wqkv, wo = rng.standard_normal((n, T, D)), rng.standard_normal((D, 3 * D)), np.eye(D)
    g = ProcessGroup(cp)
    outs, cache = cp_attention_forward(split_sequence(x, cp, axis=1), wqkv, wo, H, g)
    g.log.reset()
    cp_attention_backward([np.ones_like(o) for o in outs], cache, g)
    np.testing.assert_allclose(g.log.bytes_by_op()["all_reduce"],
                               2 * (cp - 1) / cp * (wqkv.nbytes + wo.nbytes))


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_contiguous_causal_chunks_are_imbalanced_and_zigzag_evens_them(cp):
    """Contiguous: rank r computes r + 1 blocks (rank 0: 1, rank cp - 1: cp). Zigzag (Llama 3
    §3.3.2): (cp + 1) / 2 blocks on every rank, the same total cp (cp + 1) / 2. The counts are
    measured by the forward pass itself (cache["work"])."""
    n, H, T, Dh = 1, 1, 4 * cp, 2
    q = np.random.default_rng(4).standard_normal((n, H, T, Dh))
    for layout in ("contiguous", "zigzag"):
        chunks = split_sequence(q, cp, layout)
        _, cache = ring_attention_forward(chunks, chunks, chunks, ProcessGroup(cp), layout=layout)
        np.testing.assert_array_equal(cache["work"], ring_attention_work(cp, layout))
        assert cache["work"].sum() == cp * (cp + 1) / 2
    np.testing.assert_array_equal(ring_attention_work(cp, "contiguous"), np.arange(1, cp + 1))
    np.testing.assert_array_equal(ring_attention_work(cp, "zigzag"), np.full(cp, (cp + 1) / 2))


def test_zigzag_rank_r_holds_pieces_r_and_2cp_minus_1_minus_r():
    pos = chunk_positions(8, 2, "zigzag")
    np.testing.assert_array_equal(pos[0], [0, 1, 6, 7])
    np.testing.assert_array_equal(pos[1], [2, 3, 4, 5])
    x = np.arange(24.0).reshape(1, 12, 2)
    for layout in ("contiguous", "zigzag"):                               # a round trip
        np.testing.assert_array_equal(merge_sequence(split_sequence(x, 3, layout, axis=1),
                                                     layout, axis=1), x)


def test_bad_input_names_the_parameter():
    x = np.zeros((1, 1, 6, 2))
    with pytest.raises(ValueError, match="cp"):
        split_sequence(x, 4)                                             # T = 6, cp = 4
    with pytest.raises(ValueError, match="2 \\* cp"):
        split_sequence(x, 2, "zigzag")                                   # T = 6, 2 cp = 4
    uneven = np.array_split(x, 4, axis=2)                                # lengths 2, 2, 1, 1
    with pytest.raises(ValueError, match="cp=4"):
        ring_attention_forward(uneven, uneven, uneven, ProcessGroup(4))
    with pytest.raises(ValueError, match="layout"):
        ring_attention_work(2, "striped")
    with pytest.raises(ValueError, match="q_chunks"):
        ring_attention_forward([x], [x], [x], ProcessGroup(2))


_X = [np.ones((1, 4, 8)), np.ones((1, 4, 8))]                            # cp = 2 x (n, T/cp, D)
_Q, _K = [np.ones((1, 2, 4, 4))] * 2, [np.ones((1, 2, 2, 4))] * 2


@pytest.mark.parametrize("bad, match", [
    (lambda: split_sequence(np.ones(8), 2), "axis=-2 is not an axis of x"),
    (lambda: split_sequence(np.ones((2, 8)), 2, axis=5), "axis=5 is not an axis of x"),
    (lambda: split_sequence(np.ones((2, 8)), 2, axis=1.0), "axis=1.0"),
    (lambda: merge_sequence([np.ones((2, 3)), np.ones((2, 4))]), "same shape"),
    (lambda: merge_sequence([]), "non-empty"),
    (lambda: merge_sequence([np.ones(3)] * 2), "axis=-2 is not an axis of chunks"),
    (lambda: cp_attention_forward(_X, np.ones((8, 24)), np.ones((8, 8)), 3, ProcessGroup(2)),
     "num_heads=3 must divide"),
    (lambda: cp_attention_forward(_X, np.ones((8, 8)), np.ones((8, 8)), 2, ProcessGroup(2)),
     "wqkv must be"),
    (lambda: cp_attention_forward(_X[:1], np.ones((8, 24)), np.ones((8, 8)), 2, ProcessGroup(2)),
     "x_chunks must be cp=2"),
    (lambda: ring_attention_forward(_Q, _K, _Q, ProcessGroup(2)), "k_chunks must have the shape"),
    (lambda: ring_attention_forward(_Q, _Q, _K, ProcessGroup(2)), "v_chunks must have the shape"),
])
def test_bad_axes_heads_and_chunks_raise_naming_them(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
