"""KV-cached sampling: one prefill over the prompts, then one decode step per new token.

Book section :ref:`sec-tiny-model` (and the prefill/decode cost model of :ref:`sec-roofline`). The
prompts of a batch share one length P. Each prompt is prefilled once and its KV cache copied to its
``group_size`` samples (what inference engines do for ``n`` samples of one prompt). The first new
token comes from the prefill's last logits; each later token needs one decode step, a forward of one
position per sequence attending to the cached keys and values. Decoding stops when every sequence
has emitted ``eos_id`` or ``max_new_tokens`` tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import TinyLMConfig
from .flops import COUNTER, mm
from .layers import activation_forward, rmsnorm_forward
from .model import check_tokens, forward, log_softmax

__all__ = ["Rollout", "generate"]


@dataclass
class Rollout:
    """Sequences sampled by :func:`generate`; n = B * group_size, R = decode width used."""

    tokens: np.ndarray
    """(n, P + R) int — prompt then completion, ``pad_id`` after the end token."""
    completion_mask: np.ndarray
    """(n, R) float32 — 1 for generated tokens up to and including the end token."""
    per_token_logps: np.ndarray
    """(n, R) float32 — behaviour log-probs of the sampled tokens at sampling time (0 if masked)."""
    prompt_len: int
    """P."""
    num_decode_steps: int
    """Decode forwards run (R - 1, since the first token comes from the prefill)."""


def _decode_step(params, cfg: TinyLMConfig, tok, pos, kcache, vcache):
    """tok (n,) at position ``pos`` -> logits (n, V); appends its keys/values to the caches."""
    n = tok.shape[0]
    H, Dh = cfg.num_heads, cfg.head_dim
    x = params["wte"][tok] + params["wpe"][pos]                              # (n, D)
    for i in range(cfg.num_layers):
        h, _ = rmsnorm_forward(x, params[f"h{i}.ln1"], cfg.norm_eps)
        qkv = mm(h, params[f"h{i}.wqkv"]).reshape(n, 3, H, Dh)               # (n, 3, H, Dh)
        kcache[i][:, :, pos] = qkv[:, 1]
        vcache[i][:, :, pos] = qkv[:, 2]
        keys, values = kcache[i][:, :, :pos + 1], vcache[i][:, :, :pos + 1]  # (n, H, t, Dh)
        s = mm(qkv[:, 0, :, None, :], keys.transpose(0, 1, 3, 2))           # (n, H, 1, t)
        s *= 1.0 / np.sqrt(Dh)
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        y = mm(p, values).reshape(n, H * Dh)                                 # (n, D)
        x = x + mm(y, params[f"h{i}.wo"])
        h, _ = rmsnorm_forward(x, params[f"h{i}.ln2"], cfg.norm_eps)
        z, _ = activation_forward(mm(h, params[f"h{i}.w_up"]), cfg.activation)
        x = x + mm(z, params[f"h{i}.w_down"])
    hf, _ = rmsnorm_forward(x, params["ln_f"], cfg.norm_eps)
    return mm(hf, params["lm_head"])                                         # (n, V)


def _sample(logits, temperature, rng):
    """logits (n, V) -> (token ids (n,), their log-probs (n,)); greedy when temperature == 0."""
    if temperature == 0:
        tok = logits.argmax(axis=-1)
        logp = log_softmax(logits)
    else:
        logp = log_softmax(logits / np.asarray(temperature, dtype=logits.dtype))
        cdf = np.cumsum(np.exp(logp), axis=-1)                               # (n, V)
        u = rng.random((logits.shape[0], 1)) * cdf[:, -1:]
        tok = np.minimum((cdf < u).sum(axis=-1), logits.shape[1] - 1)
    return tok, np.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]


def generate(params: dict, prompts, cfg: TinyLMConfig, *, max_new_tokens: int, eos_id: int,
             pad_id: int, group_size: int = 1, temperature: float = 1.0,
             rng: np.random.Generator | None = None) -> Rollout:
    """Sample ``group_size`` completions for each of B prompts with a KV cache.

    Args:
        prompts: (B, P) int token ids, all of one length P.
        max_new_tokens: R_max >= 1; ``P + R_max`` must fit in ``cfg.max_seq_len``.
        eos_id, pad_id: end token and the filler written after it.
        group_size: G >= 1 samples per prompt (rows laid out prompt by prompt).
        temperature: 0 for greedy decoding, else > 0.
        rng: a ``np.random.Generator``; required unless ``temperature == 0``.
    Returns:
        :class:`Rollout` with n = B * G rows.
    Raises:
        ValueError: naming the bad argument.
    """
    prompts = _check_generate_args(prompts, cfg, max_new_tokens, eos_id, pad_id, group_size,
                                   temperature, rng)
    B, P = prompts.shape
    n, G, R = B * group_size, group_size, max_new_tokens
    with COUNTER.phase("prefill"):
        hf, cache = forward(params, prompts, cfg)                            # (B, P, D)
        logits = np.repeat(mm(hf[:, -1], params["lm_head"]), G, axis=0)      # (n, V)
    kcache, vcache = _kv_buffers(cache, G, P + R, params["wte"].dtype)
    out = np.full((n, R), pad_id, dtype=np.int64)
    logps = np.zeros((n, R), dtype=params["wte"].dtype)
    mask = np.zeros((n, R), dtype=np.float32)
    finished = np.zeros(n, dtype=bool)
    steps = 0
    with COUNTER.phase("decode"):
        for j in range(R):
            tok, logp = _sample(logits, temperature, rng)
            live = ~finished
            out[live, j], logps[live, j], mask[live, j] = tok[live], logp[live], 1.0
            finished |= live & (tok == eos_id)
            if finished.all() or j == R - 1:
                break
            logits = _decode_step(params, cfg, out[:, j], P + j, kcache, vcache)
            steps += 1
    width = j + 1
    tokens = np.concatenate([np.repeat(prompts, G, axis=0), out[:, :width]], axis=1)
    return Rollout(tokens=tokens, completion_mask=mask[:, :width],
                   per_token_logps=logps[:, :width], prompt_len=P, num_decode_steps=steps)


def _check_generate_args(prompts, cfg, max_new_tokens, eos_id, pad_id, group_size,
                         temperature, rng) -> np.ndarray:
    """The checks of :func:`generate` (ValueError naming the argument); returns the prompts."""
    prompts = check_tokens(prompts, cfg, "prompts")
    B, P = prompts.shape
    if B < 1 or P < 1:
        raise ValueError(f"prompts must hold at least one token in at least one row, got shape "
                         f"{prompts.shape}")
    if isinstance(max_new_tokens, bool) or not (isinstance(max_new_tokens, (int, np.integer))
                                                and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if P + max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt length {P} + max_new_tokens {max_new_tokens} exceeds "
                         f"max_seq_len={cfg.max_seq_len}; lower max_new_tokens")
    if not (isinstance(group_size, (int, np.integer)) and group_size >= 1):
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if temperature > 0 and not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a np.random.Generator when temperature > 0, got {rng!r}")
    for name, value in (("eos_id", eos_id), ("pad_id", pad_id)):
        if not 0 <= value < cfg.vocab_size:
            raise ValueError(f"{name}={value} is not a token id of a vocabulary of "
                             f"{cfg.vocab_size}")
    return prompts


def _kv_buffers(cache, G: int, length: int, dtype) -> tuple:
    """Per layer, K and V buffers (B G, H, length, Dh) holding the prompts' keys and values
    (each prompt's repeated for its G samples), the rest filled by the decode steps."""
    kcache, vcache = [], []
    for block in cache[1]:
        k, v = block[2][4], block[2][5]         # block_forward's attention cache: (B, H, P, Dh)
        B, H, P, Dh = k.shape
        for store, src in ((kcache, k), (vcache, v)):
            buf = np.empty((B * G, H, length, Dh), dtype=dtype)
            buf[:, :, :P] = np.repeat(src, G, axis=0)
            store.append(buf)
    return kcache, vcache
