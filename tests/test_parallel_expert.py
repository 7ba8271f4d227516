"""Expert parallelism (GShard arXiv 2006.16668 §2.2-2.3; Switch arXiv 2101.03961; book Chapter
8): the dense MoE reference passes a finite-difference check in float64, the expert-parallel
layer (two all-to-alls each way) equals it in outputs and every gradient for ep in (1, 2, 4), and
the counted all-to-all bytes equal the off-rank (token, choice) assignments times D * 8 bytes."""
import numpy as np
import pytest

from rlmperf_lite.parallel.collectives import ProcessGroup
from rlmperf_lite.parallel.expert import (
    ep_moe_backward,
    ep_moe_forward,
    expert_load,
    init_moe_params,
    moe_backward,
    moe_forward,
    router_forward,
    shard_experts,
)

RTOL, ATOL = 1e-10, 1e-12


def test_gates_are_the_softmax_renormalised_over_the_top_k():
    """Gates = softmax(logits)[top-k] / its sum (GShard Algorithm 1 for k = 2), and y is the
    gate-weighted sum of the chosen experts, checked token by token."""
    params = init_moe_params(D=6, F=5, E=4, seed=1)
    x = np.random.default_rng(1).standard_normal((7, 6))
    y, cache = moe_forward(x, params, top_k=2)
    logits = x @ params["w_router"]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)                                         # softmax over all E
    for t in range(7):
        top = np.argsort(-logits[t])[:2]
        np.testing.assert_array_equal(cache["experts"][t], top)
        g = p[t, top] / p[t, top].sum()
        np.testing.assert_allclose(cache["gates"][t], g, rtol=RTOL)
        want = sum(g[j] * np.maximum(x[t] @ params["w_up"][e], 0) @ params["w_down"][e]
                   for j, e in enumerate(top))
        np.testing.assert_allclose(y[t], want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_dense_moe_backward_matches_finite_differences(top_k, renormalize):
    """Central differences of L = sum(y * dy), h = 1e-6, for x, the router and every expert."""
    N, D, F, E = 6, 4, 5, 4
    params = init_moe_params(D, F, E, seed=2)
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((N, D)), rng.standard_normal((N, D))
    y, cache = moe_forward(x, params, top_k, renormalize)
    dx, grads = moe_backward(dy, cache)

    def loss(x_, p_):
        y_, c_ = moe_forward(x_, p_, top_k, renormalize)
        assert np.array_equal(c_["experts"], cache["experts"])            # same routing
        return float((y_ * dy).sum())

    h = 1e-6
    for name, arr, got in [("x", x, dx)] + [(k, params[k], grads[k]) for k in params]:
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + h
            up = loss(x, params)
            arr[i] = old - h
            down = loss(x, params)
            arr[i] = old
            num[i] = (up - down) / (2 * h)
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-8, err_msg=name)
    # renormalised top-1 gates are always 1: the router learns nothing (why Switch §2.1 keeps
    # the un-renormalised p_i(x)); otherwise the gates carry a gradient to the router
    assert np.all(grads["w_router"] == 0) == (renormalize and top_k == 1)


def _setup(ep, E=8, top_k=2, D=6, F=5, seed=3):
    params = init_moe_params(D, F, E, seed=seed)
    rng = np.random.default_rng(seed)
    sizes = [5 + 2 * r for r in range(ep)]                               # ranks' N_r differ
    xs = [rng.standard_normal((n, D)) for n in sizes]
    dys = [rng.standard_normal((n, D)) for n in sizes]
    return params, xs, dys


@pytest.mark.parametrize("ep", [1, 2, 4])
@pytest.mark.parametrize("top_k,renormalize", [(1, False), (2, True), (3, False)])
def test_expert_parallel_equals_the_dense_layer_outputs_and_all_gradients(ep, top_k,
                                                                          renormalize):
    params, xs, dys = _setup(ep, top_k=top_k)
    y, cache = moe_forward(np.concatenate(xs), params, top_k, renormalize)
    dx, grads = moe_backward(np.concatenate(dys), cache)

    g = ProcessGroup(ep)
    ys, ep_cache = ep_moe_forward(xs, shard_experts(params, ep), top_k, g, renormalize)
    np.testing.assert_allclose(np.concatenate(ys), y, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(np.concatenate(ep_cache["experts"]), cache["experts"])
    dxs, dparams = ep_moe_backward(dys, ep_cache, g)
    np.testing.assert_allclose(np.concatenate(dxs), dx, rtol=RTOL, atol=ATOL)
    for r in range(ep):                        # the replicated router: all-reduced on every rank
        np.testing.assert_allclose(dparams[r]["w_router"], grads["w_router"], rtol=RTOL,
                                   atol=ATOL)
    for name in ("w_up", "w_down"):            # rank r holds experts r E/ep .. (r+1) E/ep - 1
        np.testing.assert_allclose(np.concatenate([p[name] for p in dparams]), grads[name],
                                   rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_all_to_all_bytes_are_the_off_rank_assignments_times_D_itemsize(ep):
    """Dispatch: rank r sends its (token, choice) pairs whose expert lives elsewhere, out_r * D * 8
    bytes; combine: rank r sends back the rows it computed for other ranks, in_r * D * 8. The
    backward's two all-to-alls move the same volumes. The routing metadata (tokens per local
    expert, (E/ep,) int64 to each other rank) is one more small all-to-all in the forward."""
    E, top_k, D = 8, 2, 6
    params, xs, dys = _setup(ep, E=E, top_k=top_k, D=D)
    g = ProcessGroup(ep)
    _, cache = ep_moe_forward(xs, shard_experts(params, ep), top_k, g)
    owner = [e // (E // ep) for e in cache["experts"]]                   # (N_r, k) owner ranks
    out_r = np.array([(o != r).sum() for r, o in enumerate(owner)])      # leave rank r
    in_r = np.array([sum((o == r).sum() for s, o in enumerate(owner) if s != r)
                     for r in range(ep)])                                # arrive at rank r
    assert out_r.sum() == in_r.sum()
    row_bytes = D * xs[0].itemsize
    counts, dispatch, combine = (c["bytes_per_rank"] for c in g.log.calls)
    np.testing.assert_array_equal(counts, (ep - 1) * (E // ep) * 8)
    np.testing.assert_array_equal(dispatch, out_r * row_bytes)
    np.testing.assert_array_equal(combine, in_r * row_bytes)

    g.log.reset()
    ep_moe_backward(dys, cache, g)
    by_op = g.log.bytes_by_op()
    np.testing.assert_array_equal(by_op["all_to_all"], (out_r + in_r) * row_bytes)
    if ep > 1:                                 # router grads: one all-reduce of (D, E) float64
        np.testing.assert_allclose(by_op["all_reduce"], 2 * (ep - 1) / ep * D * E * 8)


def test_expert_load_counts_assignments_and_shows_imbalance():
    N, D, E, top_k = 40, 6, 4, 2
    params = init_moe_params(D, 5, E, seed=4)
    x = np.random.default_rng(4).standard_normal((N, D))
    _, cache = moe_forward(x, params, top_k)
    load = expert_load(cache["experts"], E)
    assert load.sum() == N * top_k and load.shape == (E,)
    np.testing.assert_array_equal(load, [(cache["experts"] == e).sum() for e in range(E)])
    params["w_router"][:, 0] = 10.0            # with x >= 0, expert 0's logit dominates:
    (experts, _), _ = router_forward(np.abs(x), params["w_router"], top_k)
    load = expert_load(experts, E)
    assert load[0] == N and load.max() / (N * top_k / E) == 2.0          # twice the fair share


def test_bad_input_names_the_parameter():
    params = init_moe_params(D=4, F=3, E=6)
    with pytest.raises(ValueError, match="E=6.*ep=4"):
        shard_experts(params, 4)
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="top_k"):
        moe_forward(x, params, top_k=7)
    with pytest.raises(ValueError, match="top_k"):
        moe_forward(x, params, top_k=0)
    with pytest.raises(ValueError, match="ep=3"):                         # sharded for ep = 2
        ep_moe_forward([x] * 3, shard_experts(params, 2) + [params], 2, ProcessGroup(3))
    with pytest.raises(ValueError, match="top_k"):
        ep_moe_forward([x, x], shard_experts(params, 2), 7, ProcessGroup(2))


_P = init_moe_params(8, 16, 4)                                          # D = 8, E = 4


@pytest.mark.parametrize("bad, match", [
    (lambda: moe_forward(np.arange(40).reshape(5, 8) % 3, _P, 2), "x must be a floating.*int64"),
    (lambda: moe_forward(np.ones((5, 7)), _P, 2), "x must be .* D=8"),
    (lambda: moe_forward(np.ones(8), _P, 2), "x must be .*shape \\(8,\\)"),
    (lambda: moe_forward(np.ones((5, 8)), _P, 2, renormalize=1), "renormalize must be True"),
    (lambda: moe_forward(np.ones((5, 8)), {"x": 1}, 2), "params must be a dict"),
    (lambda: router_forward(np.ones((5, 8), int), _P["w_router"], 2), "x must be a floating"),
    (lambda: ep_moe_forward([np.ones((3, 8), int)] * 2, shard_experts(_P, 2), 2,
                            ProcessGroup(2)), "x_per_rank\\[0\\] must be a floating"),
    (lambda: ep_moe_forward([np.ones((3, 8))] * 2, shard_experts(_P, 2), 2, ProcessGroup(2),
                            renormalize="yes"), "renormalize must be True"),
    (lambda: ep_moe_forward([np.ones((3, 8))] * 2, shard_experts(_P, 2), 2, 2),
     "group must be a ProcessGroup"),
    (lambda: expert_load(np.array([[0, 5]]), 4), "routing must hold int expert ids in \\[0, E=4"),
    (lambda: expert_load(np.array([[0, -1]]), 4), "routing"),
    (lambda: expert_load(np.array([0.0, 1.0]), 4), "routing"),
])
def test_bad_tokens_flags_and_routing_raise_naming_them(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
