"""Tensor (Megatron-LM) and sequence parallelism on simulated ranks equal the unsharded tiny LM,
in float64, and move the bytes the papers give (Shoeybi et al. 2019 section 3, Fig. 3;
Korthikanti et al. 2022 section 4.2.2, Fig. 5; book Chapter 8)."""
import numpy as np
import pytest

from rlmperf_lite.nn import (TinyLMConfig, block_backward, block_forward, init_params,
                             logps_backward, logps_forward)
from rlmperf_lite.nn.layers import attention_backward, attention_forward
from rlmperf_lite.parallel import ProcessGroup
from rlmperf_lite.parallel.tensor import (is_tp_sharded, resident_activation_bytes,
                                          shard_params_tp, sequence_shards, tp_block_backward,
                                          tp_block_forward, unshard_grads_tp)
from rlmperf_lite.parallel.tp_model import tp_logps_backward, tp_logps_forward

CFG = TinyLMConfig(vocab_size=11, max_seq_len=8, hidden_size=16, num_layers=2, num_heads=4,
                   intermediate_size=32, activation="gelu")
N, T, B8 = 3, 8, 8                                  # sequences, positions, float64 bytes
S = N * T * CFG.hidden_size * B8                    # one (n, T, D) activation, bytes


def _params(seed=0):
    """float64 weights with non-trivial norm weights (init sets them to 1)."""
    rng = np.random.default_rng(seed)
    p = init_params(CFG, rng, dtype=np.float64)
    return {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in p.items()}


def _close(actual, expected, err_msg=""):
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-14, err_msg=err_msg)


def test_shards_have_megatron_shapes_and_unshard_inverts_them():
    """wqkv (D, 3D/tp) holds the rank's heads of q, k and v; wo and w_down split by rows, w_up by
    columns; the rest replicated; unshard(shard(p)) == p exactly."""
    p, D, Dh = _params(), CFG.hidden_size, CFG.head_dim
    shards = shard_params_tp(p, CFG, 2)
    s1 = shards[1]
    assert s1["h0.wqkv"].shape == (D, 3 * D // 2) and s1["h0.wo"].shape == (D // 2, D)
    assert s1["h0.w_up"].shape == (D, 16) and s1["h0.w_down"].shape == (16, D)
    # rank 1 holds heads 2, 3: columns 2Dh:4Dh of q, of k (offset D) and of v (offset 2D)
    for j in range(3):
        np.testing.assert_array_equal(s1["h0.wqkv"][:, j * 2 * Dh:(j + 1) * 2 * Dh],
                                      p["h0.wqkv"][:, j * D + 2 * Dh:j * D + 4 * Dh])
    for k in ("wte", "h1.ln2", "lm_head"):
        assert not is_tp_sharded(k)
        np.testing.assert_array_equal(s1[k], p[k])
    for tp in (1, 2, 4):
        back = unshard_grads_tp(shard_params_tp(p, CFG, tp), CFG)
        assert all(np.array_equal(back[k], p[k]) for k in p)


def test_attention_on_a_head_shard_passes_a_finite_difference_check():
    """layers.attention_backward on a head shard (2 of 4 heads: D = 16, wqkv (16, 24),
    wo (8, 16)) against central
    differences of the fake loss sum(out * dout) (llm.c style), float64."""
    rng = np.random.default_rng(3)
    x, dout = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 5, 16))
    w = {"wqkv": rng.standard_normal((16, 24)) * 0.3, "wo": rng.standard_normal((8, 16)) * 0.3}
    out, cache = attention_forward(x, w["wqkv"], w["wo"], 2)
    dx, dwqkv, dwo = attention_backward(dout, cache)

    def loss():
        return float((attention_forward(x, w["wqkv"], w["wo"], 2)[0] * dout).sum())

    for arr, grad in ((x, dx), (w["wqkv"], dwqkv), (w["wo"], dwo)):
        corners = [(0,) * arr.ndim, tuple(s - 1 for s in arr.shape),
                   tuple(s // 2 for s in arr.shape)]
        for idx in corners:
            old = arr[idx]
            arr[idx] = old + 1e-6
            up = loss()
            arr[idx] = old - 1e-6
            down = loss()
            arr[idx] = old
            assert grad[idx] == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-9)


def _block_run(tp, sp, seed=1):
    """One block (i = 1) forward and backward on tp ranks; returns outputs, grads, the group and
    the cache, all per rank, plus the unsharded reference."""
    rng = np.random.default_rng(seed)
    p = _params()
    x, dy = rng.standard_normal((N, T, CFG.hidden_size)), rng.standard_normal((N, T, 16))
    y_ref, c_ref = block_forward(p, 1, x, CFG)
    dx_ref, g_ref = block_backward(dy, c_ref)
    group = ProcessGroup(tp)
    xs = sequence_shards(x, tp) if sp else [x] * tp
    dys = sequence_shards(dy, tp) if sp else [dy] * tp
    ys, cache = tp_block_forward(xs, shard_params_tp(p, CFG, tp), 1, CFG, group, sp=sp)
    dxs, grads = tp_block_backward(dys, cache)
    return (y_ref, dx_ref, g_ref), (ys, dxs, grads), group, cache


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tp_block_equals_the_unsharded_block(tp, sp):
    """Output, input gradient and every weight gradient of block 1 equal nn.block_forward /
    block_backward (rtol 1e-10); with sp, rank r's positions concatenate to the full arrays."""
    (y_ref, dx_ref, g_ref), (ys, dxs, grads), _, _ = _block_run(tp, sp)
    join = (lambda a: np.concatenate(a, axis=1)) if sp else (lambda a: a[0])
    _close(join(ys), y_ref, "output")
    _close(join(dxs), dx_ref, "dx")
    full = unshard_grads_tp(grads, CFG)
    for k in g_ref:
        _close(full[k], g_ref[k], k)
    if not sp:                                   # outputs replicated bit for bit on every rank
        assert all(np.array_equal(y, ys[0]) for y in ys)


@pytest.mark.parametrize("sp", [False, True])
def test_norm_weight_grads_are_equal_on_every_rank(sp):
    """Plain TP: the norms see replicated inputs, so ln1/ln2 gradients are identical on every
    rank with no communication (no all-reduce is logged in the block backward beyond the two f's).
    SP: each rank sees T/tp positions; after Megatron's all-reduce they are identical too."""
    _, (_, _, grads), group, _ = _block_run(4, sp)
    for k in ("h1.ln1", "h1.ln2"):
        assert all(np.array_equal(g[k], grads[0][k]) for g in grads)
    ops = [c["op"] for c in group.log.calls]
    assert ops.count("all_reduce") == (2 if sp else 4)   # SP: the 2 norm-grad all-reduces


@pytest.mark.parametrize("tp", [2, 4])
def test_block_bytes_per_rank_match_megatron_and_sp_moves_the_same(tp):
    """Per block, per rank: TP 4 all-reduces (2 forward, 2 backward) of S = n T D x 8 bytes,
    4 x 2 (tp-1)/tp S. SP: 4 all-gathers + 4 reduce-scatters, (tp-1)/tp S each: the same bytes,
    plus 2 all-reduces of the (D,) norm-weight gradients."""
    *_, group, _ = _block_run(tp, sp=False)
    tp_bytes = 4 * 2 * (tp - 1) / tp * S
    np.testing.assert_array_equal(group.log.bytes_by_op()["all_reduce"], tp_bytes)
    *_, group_sp, _ = _block_run(tp, sp=True)
    by_op = group_sp.log.bytes_by_op()
    np.testing.assert_array_equal(by_op["all_gather"] + by_op["reduce_scatter"], tp_bytes)
    np.testing.assert_array_equal(by_op["all_gather"], by_op["reduce_scatter"])
    np.testing.assert_array_equal(by_op["all_reduce"], 2 * 2 * (tp - 1) / tp * 16 * B8)


@pytest.mark.parametrize("tp", [2, 4])
def test_sp_keeps_one_tp_th_of_the_norm_region_activations(tp):
    """Korthikanti et al. 2022 section 4.2.2: per rank, the norm regions' saved arrays (two
    RMSNorms' normalised input (n, T, D) and inverse rms (n, T, 1)) shrink by tp under SP; the
    tensor-parallel region's arrays (gathered inputs, the rank's heads and MLP columns) do not."""
    *_, cache = _block_run(tp, sp=False)
    *_, cache_sp = _block_run(tp, sp=True)
    plain, seq = resident_activation_bytes(cache), resident_activation_bytes(cache_sp, rank=tp - 1)
    assert plain["norm_region_bytes"] == 2 * (N * T * 16 + N * T) * B8
    assert seq["norm_region_bytes"] * tp == plain["norm_region_bytes"]
    assert seq["tp_region_bytes"] == plain["tp_region_bytes"]
    assert plain["total_bytes"] == plain["norm_region_bytes"] + plain["tp_region_bytes"]


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tp_model_equals_logps_forward_and_backward(tp, sp):
    """Per-token log-probs and every weight gradient of the whole model (2 layers, 4 heads, GELU,
    temperature 0.7) equal nn.logps_forward / logps_backward at rtol 1e-10; the replicated
    weights' gradients are identical on every rank."""
    rng = np.random.default_rng(2)
    p = _params()
    tokens = rng.integers(0, CFG.vocab_size, (N, T))
    ref, cache = logps_forward(p, tokens, CFG, 0.7)
    dlogps = rng.standard_normal(ref.shape)
    g_ref = logps_backward(dlogps, cache)
    logps, tcache = tp_logps_forward(shard_params_tp(p, CFG, tp), tokens, CFG, ProcessGroup(tp),
                                     0.7, sp=sp)
    grads = tp_logps_backward([dlogps] * tp, tcache)
    for lp in logps:
        _close(lp, ref, "logps")
    full = unshard_grads_tp(grads, CFG)
    assert full.keys() == g_ref.keys()
    for k in g_ref:
        _close(full[k], g_ref[k], k)
        if not is_tp_sharded(k):
            assert all(np.array_equal(g[k], grads[0][k]) for g in grads), k


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_model_bytes_per_rank(tp):
    """Whole model forward + backward, per rank: TP 4 L x 2 (tp-1)/tp S all-reduce bytes and
    nothing else (embeddings, ln_f and lm_head replicated). SP: the same in all-gathers and
    reduce-scatters plus 2 (tp-1)/tp S (gathers at ln_f and at the embedding backward), and
    2 L all-reduces of (D,) norm gradients."""
    tokens = np.random.default_rng(4).integers(0, CFG.vocab_size, (N, T))
    L, ar = CFG.num_layers, 2 * (tp - 1) / tp
    for sp in (False, True):
        group = ProcessGroup(tp)
        logps, cache = tp_logps_forward(shard_params_tp(_params(), CFG, tp), tokens, CFG, group,
                                        sp=sp)
        tp_logps_backward([np.ones_like(logps[0])] * tp, cache)
        by_op = group.log.bytes_by_op()
        if not sp:
            assert by_op.keys() == {"all_reduce"}
            np.testing.assert_array_equal(by_op["all_reduce"], 4 * L * ar * S)
        else:
            np.testing.assert_array_equal(by_op["all_gather"] + by_op["reduce_scatter"],
                                          4 * L * ar * S + 2 * (tp - 1) / tp * S)
            np.testing.assert_array_equal(by_op["all_reduce"], 2 * L * ar * 16 * B8)


def test_bad_input_names_the_parameter():
    """tp must divide num_heads and intermediate_size (and T under SP); one shard per rank."""
    p = _params()
    with pytest.raises(ValueError, match="tp=3 must divide num_heads"):
        shard_params_tp(p, CFG, 3)
    cfg_f = TinyLMConfig(vocab_size=11, max_seq_len=8, hidden_size=16, num_heads=4,
                         intermediate_size=30)
    with pytest.raises(ValueError, match="intermediate_size"):
        shard_params_tp(init_params(cfg_f, np.random.default_rng(0)), cfg_f, 4)
    with pytest.raises(ValueError, match="tp must be"):
        shard_params_tp(p, CFG, 0)
    tokens = np.zeros((2, 6), dtype=int)               # T = 6 is not divisible by tp = 4
    with pytest.raises(ValueError, match="tp=4 must divide the sequence length"):
        tp_logps_forward(shard_params_tp(p, CFG, 4), tokens, CFG, ProcessGroup(4), sp=True)
    with pytest.raises(ValueError, match="shards_per_rank"):
        tp_logps_forward(shard_params_tp(p, CFG, 2), tokens, CFG, ProcessGroup(4))
    with pytest.raises(ValueError, match="shards_per_rank"):
        tp_block_forward([np.zeros((2, 6, 16))] * 2, shard_params_tp(p, CFG, 2), 0, CFG,
                         ProcessGroup(4))
