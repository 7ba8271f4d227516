"""Every backward of rlmperf_lite.nn checked by float64 central finite differences.

The fake loss is ``(out * dout).sum()`` for a random ``dout`` (llm.c, doc/layernorm/layernorm.py),
whose gradient with respect to the layer's output is ``dout``.
"""
import numpy as np
import pytest

from rlmperf_lite.nn import TinyLMConfig, init_params, layers, logps_backward, logps_forward

RTOL = 1e-6


def numgrad(f, x, eps=1e-6):
    """Central differences of scalar f() with respect to every entry of array x (in place)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        fp = f()
        x[i] = old - eps
        fm = f()
        x[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


def assert_close(analytic, numeric, name):
    err = np.abs(analytic - numeric).max() / max(np.abs(numeric).max(), 1e-8)
    assert err < RTOL, f"{name}: relative error {err:.2e}"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_rmsnorm_backward_matches_finite_differences(rng):
    x, g = rng.standard_normal((3, 4, 6)), rng.standard_normal(6)
    dout = rng.standard_normal((3, 4, 6))
    loss = lambda: (layers.rmsnorm_forward(x, g, 1e-5)[0] * dout).sum()
    dx, dg = layers.rmsnorm_backward(dout, layers.rmsnorm_forward(x, g, 1e-5)[1])
    assert_close(dx, numgrad(loss, x), "dx")
    assert_close(dg, numgrad(loss, g), "dg")


@pytest.mark.parametrize("kind", ["relu", "gelu"])
def test_activation_backward_matches_finite_differences(rng, kind):
    x = rng.standard_normal((5, 7))
    x[np.abs(x) < 1e-3] = 0.5                       # keep ReLU away from its kink
    dout = rng.standard_normal((5, 7))
    loss = lambda: (layers.activation_forward(x, kind)[0] * dout).sum()
    dx = layers.activation_backward(dout, layers.activation_forward(x, kind)[1], kind)
    assert_close(dx, numgrad(loss, x), f"{kind} dx")


def test_gelu_matches_the_tanh_formula():
    x = np.linspace(-4, 4, 101)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(layers.activation_forward(x, "gelu")[0], ref, rtol=1e-12)


def test_attention_backward_matches_finite_differences(rng):
    N, T, D, H = 2, 5, 8, 2
    x = rng.standard_normal((N, T, D))
    wqkv, wo = rng.standard_normal((D, 3 * D)) * 0.3, rng.standard_normal((D, D)) * 0.3
    dout = rng.standard_normal((N, T, D))
    loss = lambda: (layers.attention_forward(x, wqkv, wo, H)[0] * dout).sum()
    dx, dwqkv, dwo = layers.attention_backward(dout, layers.attention_forward(x, wqkv, wo, H)[1])
    assert_close(dx, numgrad(loss, x), "dx")
    assert_close(dwqkv, numgrad(loss, wqkv), "dwqkv")
    assert_close(dwo, numgrad(loss, wo), "dwo")


def test_attention_is_causal(rng):
    """Changing a later token never changes an earlier output."""
    x = rng.standard_normal((1, 6, 8))
    wqkv, wo = rng.standard_normal((8, 24)), rng.standard_normal((8, 8))
    out1 = layers.attention_forward(x, wqkv, wo, 2)[0]
    x[0, 4:] += 1.0
    out2 = layers.attention_forward(x, wqkv, wo, 2)[0]
    np.testing.assert_array_equal(out1[0, :4], out2[0, :4])
    assert not np.allclose(out1[0, 4:], out2[0, 4:])


def test_embedding_backward_matches_finite_differences(rng):
    wte, wpe = rng.standard_normal((5, 3)), rng.standard_normal((7, 3))
    tokens = rng.integers(0, 5, (2, 4))
    dout = rng.standard_normal((2, 4, 3))
    loss = lambda: (layers.embedding_forward(wte, wpe, tokens)[0] * dout).sum()
    dwte, dwpe = layers.embedding_backward(dout, layers.embedding_forward(wte, wpe, tokens)[1])
    assert_close(dwte, numgrad(loss, wte), "dwte")
    assert_close(dwpe, numgrad(loss, wpe), "dwpe")


@pytest.mark.parametrize("activation,temperature", [("relu", 1.0), ("gelu", 0.7)])
def test_whole_model_logps_backward_matches_finite_differences(rng, activation, temperature):
    """d(sum(w * per_token_logps)) / d(every parameter) of a 2-layer model, in float64."""
    cfg = TinyLMConfig(vocab_size=7, max_seq_len=6, hidden_size=8, num_layers=2, num_heads=2,
                       intermediate_size=12, activation=activation, init_std=0.3)
    params = init_params(cfg, rng, dtype=np.float64)
    tokens = rng.integers(0, 7, (3, 5))
    w = rng.standard_normal((3, 4))
    loss = lambda: float((logps_forward(params, tokens, cfg, temperature)[0] * w).sum())
    grads = logps_backward(w, logps_forward(params, tokens, cfg, temperature)[1])
    assert set(grads) == set(params)
    for name, p in params.items():
        assert grads[name].shape == p.shape, name
        assert_close(grads[name], numgrad(loss, p), name)


def test_logps_are_normalised_and_default_dtype_is_float32(rng):
    cfg = TinyLMConfig()
    params = init_params(cfg, rng)
    assert all(p.dtype == np.float32 for p in params.values())
    tokens = rng.integers(0, cfg.vocab_size, (4, 9))
    logps, cache = logps_forward(params, tokens, cfg)
    assert logps.shape == (4, 8) and logps.dtype == np.float32
    np.testing.assert_allclose(np.exp(cache[1][1]).sum(-1), 1.0, rtol=1e-5)


def test_value_model_backward_matches_finite_differences(rng):
    """The critic: trunk + scalar head, d(sum(w * values)) / d(every parameter), float64."""
    from rlmperf_lite.nn import init_value_params, values_backward, values_forward
    cfg = TinyLMConfig(vocab_size=7, max_seq_len=6, hidden_size=8, num_layers=1, num_heads=2,
                       intermediate_size=12, init_std=0.3)
    params = init_value_params(cfg, rng, dtype=np.float64)
    params["v_head"] = rng.standard_normal((8, 1))
    params["v_bias"] = rng.standard_normal(1)
    tokens = rng.integers(0, 7, (3, 5))
    w = rng.standard_normal((3, 5))
    loss = lambda: float((values_forward(params, tokens, cfg)[0] * w).sum())
    grads = values_backward(w, values_forward(params, tokens, cfg)[1])
    assert set(grads) == set(params) and "lm_head" not in params
    for name, p in params.items():
        assert_close(grads[name], numgrad(loss, p), name)
