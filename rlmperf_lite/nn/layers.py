"""Forward/backward pairs of the tiny transformer's layers (book section :ref:`sec-tiny-model`).

Each layer is a pair ``<name>_forward(...) -> (out, cache)`` and
``<name>_backward(dout, cache) -> grads``, in the style of llm.c's ``layernorm.py``; gradients
are named ``d<name>``. Arrays are float32 unless the inputs are float64 (the gradient checks in
``tests/test_nn_grad.py`` run everything in float64). Shape letters: n sequences, T positions,
D width, H heads, Dh head width, F MLP width, V vocabulary. Every matrix product goes through
:func:`rlmperf_lite.nn.flops.mm` so that it is counted.
"""
from __future__ import annotations

import numpy as np

from .flops import mm

_GELU_C = float(np.sqrt(2.0 / np.pi))   # a Python float: a np.float64 would promote fp32 to fp64


# ---- embeddings: x = wte[tokens] + wpe[:T] ----------------------------------------------------
def embedding_forward(wte, wpe, tokens):
    """tokens (n, T) int -> x (n, T, D). The gather is not a matrix product: no FLOPs counted."""
    T = tokens.shape[1]
    return wte[tokens] + wpe[:T], (tokens, wte.shape[0], wpe.shape)


def embedding_backward(dx, cache):
    """dx (n, T, D) -> (dwte (V, D), dwpe (T_max, D)).

    The scatter-add ``dwte[tokens] += dx`` is done as ``onehot.T @ dx`` (one BLAS call, much
    faster in numpy than ``np.add.at``); frameworks do it as a scatter, so it is not counted.
    """
    tokens, V, wpe_shape = cache
    n, T, D = dx.shape
    dx2 = dx.reshape(n * T, D)
    onehot = (tokens.reshape(-1, 1) == np.arange(V)).astype(dx.dtype)   # (NT, V)
    dwte = onehot.T @ dx2                                                # (V, D)
    dwpe = np.zeros(wpe_shape, dtype=dx.dtype)
    dwpe[:T] = dx.sum(axis=0)                                            # (T, D)
    return dwte, dwpe


# ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019, Eq. 4) -----------------
def rmsnorm_forward(x, g, eps):
    """x (..., D), g (D,) -> y (..., D)."""
    r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)        # (..., 1)
    xhat = x * r                                                         # (..., D)
    return xhat * g, (xhat, r, g)


def rmsnorm_backward(dy, cache):
    """dy (..., D) -> (dx (..., D), dg (D,))."""
    xhat, r, g = cache
    dg = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)
    dxhat = dy * g
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, dg


# ---- linear (no bias): y = x @ w ---------------------------------------------------------------
def linear_forward(x, w):
    """x (M, K), w (K, Nout) -> y (M, Nout)."""
    return mm(x, w), (x, w)


def linear_backward(dy, cache):
    """dy (M, Nout) -> (dx (M, K), dw (K, Nout))."""
    x, w = cache
    return mm(dy, w.T), mm(x.T, dy)


# ---- activations --------------------------------------------------------------------------------
def activation_forward(x, kind):
    """Elementwise ReLU, or GELU in its tanh form (Hendrycks & Gimpel 2016, Eq. 2)."""
    if kind == "relu":
        return np.maximum(x, 0), x
    u = _GELU_C * x * (1 + 0.044715 * x * x)                             # x*x*x, not x**3
    t = np.tanh(u)
    return 0.5 * x * (1 + t), (x, t)


def activation_backward(dy, cache, kind):
    """dy (..., F) -> dx (..., F) for the activation ``kind`` of :func:`activation_forward`."""
    if kind == "relu":
        return dy * (cache > 0)
    x, t = cache
    du_dx = _GELU_C * (1 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du_dx)


# ---- multi-head causal self-attention (Vaswani et al. 2017, Eq. 1) -----------------------------
def attention_forward(x, wqkv, wo, num_heads):
    """x (n, T, D) -> out (n, T, D_out); wqkv (D, 3 H Dh), wo (H Dh, D_out).

    The head width is read from the weights, Dh = wqkv.shape[1] / (3 H): the whole layer has
    H Dh = D, and a tensor-parallel rank runs the same function on its H/tp heads (book
    section :ref:`sec-tensor-parallel`). Scores are computed for all T x T pairs and the upper
    triangle masked (dense causal attention: the counted FLOPs include the masked half, see the
    calculator option ``attention`` of book section :ref:`sec-step-phases`).
    """
    n, T, D = x.shape
    H, Dh = num_heads, wqkv.shape[1] // (3 * num_heads)
    qkv = mm(x.reshape(n * T, D), wqkv)                                  # (NT, 3 H Dh)
    q, k, v = qkv.reshape(n, T, 3, H, Dh).transpose(2, 0, 3, 1, 4)      # 3 x (n, H, T, Dh)
    s = mm(q, k.transpose(0, 1, 3, 2))                                   # (n, H, T, T)
    s *= 1.0 / np.sqrt(Dh)
    s += np.triu(np.full((T, T), -np.inf, dtype=s.dtype), k=1)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)                                   # (n, H, T, T)
    y = mm(p, v).transpose(0, 2, 1, 3).reshape(n * T, H * Dh)            # (NT, H Dh)
    out = mm(y, wo).reshape(n, T, wo.shape[1])                           # (n, T, D_out)
    return out, (x, wqkv, wo, q, k, v, p, y, H)


def attention_backward(dout, cache):
    """dout (n, T, D_out) -> (dx (n, T, D), dwqkv (D, 3 H Dh), dwo (H Dh, D_out))."""
    x, wqkv, wo, q, k, v, p, y, H = cache
    n, T, D = x.shape
    Dh = q.shape[-1]
    dout2 = dout.reshape(n * T, -1)
    dwo = mm(y.T, dout2)                                                 # (H Dh, D_out)
    dy = mm(dout2, wo.T).reshape(n, T, H, Dh).transpose(0, 2, 1, 3)      # (n, H, T, Dh)
    dp = mm(dy, v.transpose(0, 1, 3, 2))                                 # (n, H, T, T)
    dv = mm(p.transpose(0, 1, 3, 2), dy)                                 # (n, H, T, Dh)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))                 # softmax backward
    ds *= 1.0 / np.sqrt(Dh)
    dq = mm(ds, k)                                                       # (n, H, T, Dh)
    dk = mm(ds.transpose(0, 1, 3, 2), q)                                 # (n, H, T, Dh)
    dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(n * T, 3 * H * Dh)
    x2 = x.reshape(n * T, D)
    dwqkv = mm(x2.T, dqkv)                                               # (D, 3D)
    dx = mm(dqkv, wqkv.T).reshape(n, T, D)
    return dx, dwqkv, dwo
