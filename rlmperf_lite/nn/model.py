"""The tiny decoder-only transformer: parameters, forward, per-token log-probs and backward.

Book section :ref:`sec-tiny-model`. Parameters are a flat ``dict[str, np.ndarray]`` (names below),
so the optimizer, the gradient checks and the checkpoint code treat every weight alike:

    wte (V, D), wpe (T_max, D),
    h{i}.ln1 (D,), h{i}.wqkv (D, 3D), h{i}.wo (D, D), h{i}.ln2 (D,), h{i}.w_up (D, F),
    h{i}.w_down (F, D)  for i in range(L),
    ln_f (D,), lm_head (D, V).
"""
from __future__ import annotations

import numpy as np

from .config import TinyLMConfig
from .flops import mm
from .layers import (
    activation_backward,
    activation_forward,
    attention_backward,
    attention_forward,
    embedding_backward,
    embedding_forward,
    linear_backward,
    linear_forward,
    rmsnorm_backward,
    rmsnorm_forward,
)

__all__ = ["init_params", "forward", "backward", "block_forward", "block_backward",
           "lm_head_forward", "lm_head_backward",
           "logps_forward", "logps_backward", "token_logps", "token_entropy", "check_tokens",
           "copy_params"]


def init_params(cfg: TinyLMConfig, rng: np.random.Generator, dtype=np.float32) -> dict:
    """Normal(0, init_std) weights, output projections scaled by 1/sqrt(2L) (GPT-2), unit norms."""
    V, D, F, L, T = (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers,
                     cfg.max_seq_len)
    std, std_out = cfg.init_std, cfg.init_std / np.sqrt(2 * L)

    def normal(shape, s):
        return (rng.standard_normal(shape) * s).astype(dtype)

    params = {"wte": normal((V, D), std), "wpe": normal((T, D), std)}
    for i in range(L):
        params[f"h{i}.ln1"] = np.ones(D, dtype)
        params[f"h{i}.wqkv"] = normal((D, 3 * D), std)
        params[f"h{i}.wo"] = normal((D, D), std_out)
        params[f"h{i}.ln2"] = np.ones(D, dtype)
        params[f"h{i}.w_up"] = normal((D, F), std)
        params[f"h{i}.w_down"] = normal((F, D), std_out)
    params["ln_f"] = np.ones(D, dtype)
    params["lm_head"] = normal((D, V), std)
    return params


def copy_params(params: dict, cfg: TinyLMConfig, name: str = "params") -> dict:
    """A float32 copy of a weights dict after checking it has every weight of ``cfg``'s model
    with the right shape (keys and shapes as :func:`init_params`).

    Raises:
        ValueError: naming ``name`` and the missing, extra, misshapen or non-finite weight.
    """
    if not isinstance(params, dict):
        raise ValueError(f"{name} must be a dict of weights, got {type(params).__name__}")
    expected = {k: v.shape for k, v in init_params(cfg, np.random.default_rng(0)).items()}
    for key in expected.keys() ^ params.keys():
        raise ValueError(f"{name} {'lacks' if key in expected else 'has an unknown'} weight "
                         f"{key!r} for this model config")
    for key, shape in expected.items():
        if np.shape(params[key]) != shape:
            raise ValueError(f"{name}[{key!r}] has shape {np.shape(params[key])}, the model "
                             f"config needs {shape}")
        if not np.all(np.isfinite(params[key])):
            raise ValueError(f"{name}[{key!r}] has non-finite values (NaN or inf)")
    return {k: np.array(v, dtype=np.float32) for k, v in params.items()}


def check_tokens(tokens, cfg: TinyLMConfig, name: str = "tokens") -> np.ndarray:
    """Validate a (n, T) integer array of token ids; returns it as an ndarray.

    Raises:
        ValueError: naming ``name`` if the array is not 2-D integer, longer than
            ``cfg.max_seq_len``, or holds ids outside ``[0, cfg.vocab_size)``.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{name} must be a 2-D integer array (n, T), got shape {tokens.shape} "
                         f"and dtype {tokens.dtype}")
    if tokens.shape[1] > cfg.max_seq_len:
        raise ValueError(f"{name} has T={tokens.shape[1]} positions but the model's max_seq_len "
                         f"is {cfg.max_seq_len}; shorten the sequences or raise max_seq_len")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= cfg.vocab_size):
        raise ValueError(f"{name} holds ids outside [0, {cfg.vocab_size}); check the tokenizer")
    return tokens


def block_forward(params: dict, i: int, x: np.ndarray, cfg: TinyLMConfig):
    """Block ``i``: x (n, T, D) -> x + attn(norm(x)), then + mlp(norm(.)); returns (x, cache).

    Exposed so that the simulated tensor and pipeline parallel code runs the very same block
    (book sections :ref:`sec-tp-grpo-step` and :ref:`sec-pp-gradient`)."""
    n, T, D = x.shape
    h, c_ln1 = rmsnorm_forward(x, params[f"h{i}.ln1"], cfg.norm_eps)          # (n, T, D)
    a, c_att = attention_forward(h, params[f"h{i}.wqkv"], params[f"h{i}.wo"], cfg.num_heads)
    x = x + a
    h, c_ln2 = rmsnorm_forward(x, params[f"h{i}.ln2"], cfg.norm_eps)
    u, c_up = linear_forward(h.reshape(n * T, D), params[f"h{i}.w_up"])       # (NT, F)
    z, c_act = activation_forward(u, cfg.activation)
    m, c_down = linear_forward(z, params[f"h{i}.w_down"])                      # (NT, D)
    x = x + m.reshape(n, T, D)
    return x, (i, c_ln1, c_att, c_ln2, c_up, c_act, c_down, cfg)


def block_backward(dx: np.ndarray, cache):
    """dx (n, T, D), gradient of block ``i``'s output -> (dx of its input, grads of its weights)."""
    i, c_ln1, c_att, c_ln2, c_up, c_act, c_down, cfg = cache
    n, T, D = dx.shape
    grads = {}
    dz, grads[f"h{i}.w_down"] = linear_backward(dx.reshape(n * T, D), c_down)
    du = activation_backward(dz, c_act, cfg.activation)
    dh, grads[f"h{i}.w_up"] = linear_backward(du, c_up)
    dh, grads[f"h{i}.ln2"] = rmsnorm_backward(dh.reshape(n, T, D), c_ln2)
    dx = dx + dh
    da, grads[f"h{i}.wqkv"], grads[f"h{i}.wo"] = attention_backward(dx, c_att)
    dh, grads[f"h{i}.ln1"] = rmsnorm_backward(da, c_ln1)
    return dx + dh, grads


def forward(params: dict, tokens: np.ndarray, cfg: TinyLMConfig):
    """tokens (n, T) -> final normed hidden states (n, T, D) and the cache for :func:`backward`."""
    x, emb_cache = embedding_forward(params["wte"], params["wpe"], tokens)   # (n, T, D)
    blocks = []
    for i in range(cfg.num_layers):
        x, c_block = block_forward(params, i, x, cfg)                          # (n, T, D)
        blocks.append(c_block)
    hf, c_lnf = rmsnorm_forward(x, params["ln_f"], cfg.norm_eps)               # (n, T, D)
    return hf, (emb_cache, blocks, c_lnf, cfg)


def backward(dhf: np.ndarray, cache) -> dict:
    """dhf (n, T, D), gradient of the final normed hidden states -> grads of every parameter."""
    emb_cache, blocks, c_lnf, cfg = cache
    grads = {}
    dx, grads["ln_f"] = rmsnorm_backward(dhf, c_lnf)
    for i in reversed(range(cfg.num_layers)):
        dx, g = block_backward(dx, blocks[i])
        grads.update(g)
    grads["wte"], grads["wpe"] = embedding_backward(dx, emb_cache)
    return grads


def log_softmax(z):
    """log softmax over the last axis, shifted by the max for stability; z (..., V)."""
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def lm_head_forward(hf: np.ndarray, lm_head: np.ndarray, tokens: np.ndarray,
                    temperature: float = 1.0):
    """hf (n, T, D), the final normed hidden states -> per_token_logps (n, T - 1) and a cache:
    ``log softmax(hf @ lm_head / temperature)`` at the next tokens ``tokens[:, 1:]``.

    Shared by :func:`logps_forward` and the last pipeline stage (book section
    :ref:`sec-pp-gradient`)."""
    n, T, D = hf.shape
    hf2 = hf.reshape(n * T, D)
    logits = mm(hf2, lm_head).reshape(n, T, -1)                               # (n, T, V)
    if temperature != 1.0:
        logits = logits / np.asarray(temperature, dtype=logits.dtype)
    logp_all = log_softmax(logits[:, :-1])                                   # (n, T-1, V)
    targets = tokens[:, 1:]
    per_token_logps = np.take_along_axis(logp_all, targets[..., None], axis=-1)[..., 0]
    return per_token_logps, (hf2, logp_all, targets, temperature, lm_head)


def lm_head_backward(dlogps: np.ndarray, hcache):
    """dlogps (n, T - 1) -> (dhf (n, T, D), dlm_head (D, V)) for :func:`lm_head_forward`."""
    hf2, logp_all, targets, temperature, lm_head = hcache
    n, Tm1, V = logp_all.shape
    # d logp[y] / d logits = (onehot(y) - softmax) / temperature
    dlogits = np.zeros((n, Tm1 + 1, V), dtype=logp_all.dtype)
    g = -np.exp(logp_all) * dlogps[..., None]                                 # (n, T-1, V)
    np.put_along_axis(g, targets[..., None],
                      np.take_along_axis(g, targets[..., None], axis=-1) + dlogps[..., None],
                      axis=-1)
    dlogits[:, :-1] = g / temperature if temperature != 1.0 else g
    dlogits2 = dlogits.reshape(n * (Tm1 + 1), V)
    dlm_head = mm(hf2.T, dlogits2)                                            # (D, V)
    dhf = mm(dlogits2, lm_head.T).reshape(n, Tm1 + 1, -1)                     # (n, T, D)
    return dhf, dlm_head


def logps_forward(params: dict, tokens, cfg: TinyLMConfig, temperature: float = 1.0):
    """Per-token log-probs of a batch of sequences under the policy at ``temperature``.

    ``per_token_logps[n, t] = log softmax(logits[n, t] / temperature)[tokens[n, t + 1]]``, the
    log-probability of token t+1 given tokens 0..t. The LM head runs on all T positions (the
    convention of the 2N-FLOPs-per-token count; the last position's logits are unused).

    Args:
        tokens: (n, T) int token ids.
        temperature: > 0; must equal the sampling temperature for ratios to be exact.
    Returns:
        per_token_logps (n, T - 1) and a cache for :func:`logps_backward` / :func:`token_entropy`.
    Raises:
        ValueError: bad ``tokens`` (see :func:`check_tokens`) or ``temperature <= 0``.
    """
    tokens = check_tokens(tokens, cfg)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature!r}")
    hf, cache = forward(params, tokens, cfg)                                  # (n, T, D)
    per_token_logps, hcache = lm_head_forward(hf, params["lm_head"], tokens, temperature)
    return per_token_logps, (cache, hcache)


def logps_backward(dlogps: np.ndarray, lcache) -> dict:
    """dlogps (n, T - 1), dLoss/dper_token_logps -> grads of every parameter (dict)."""
    cache, hcache = lcache
    dhf, dlm_head = lm_head_backward(dlogps, hcache)
    grads = backward(dhf, cache)
    grads["lm_head"] = dlm_head
    return grads


def token_entropy(lcache) -> np.ndarray:
    """Entropy (nats) of the next-token distribution at each position, shape (n, T - 1)."""
    logp_all = lcache[1][1]
    return -(np.exp(logp_all) * logp_all).sum(axis=-1)


def token_logps(params: dict, tokens, cfg: TinyLMConfig, temperature: float = 1.0) -> np.ndarray:
    """Per-token log-probs (n, T - 1) only; see :func:`logps_forward`."""
    return logps_forward(params, tokens, cfg, temperature)[0]
