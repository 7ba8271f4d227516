"""FLOPs of forward, prefill, decode and training passes of a real model (book section
:ref:`sec-flops`).

A FLOP is one multiply or one add: a matrix product of (m, k) by (k, n) costs 2 m k n (Kaplan et
al. 2020). Only matrix products are counted — the weights' products and attention's two
products per layer (scores Q K^T and the weighted sum of V) — as the field's formulas do; norms,
softmax and activations are a few FLOPs per element and left out. Per token a forward pass
therefore costs 2 x (the matrix weights it goes through) plus attention, which for a query that
sees c keys costs 2 H (d_qk + d_v) c per layer.

Causal attention (``causal=True``) counts the n (n + 1) / 2 query-key pairs a mask keeps, as a
fused kernel computes; ``causal=False`` counts all n^2, as Megatron-LM's formula does and as a
kernel that masks a full score matrix computes. A backward pass costs twice its forward;
``recompute=True`` (full activation recomputation) runs the layers' forward once more, not the
LM head, as Narayanan et al. 2021 (arXiv 2104.04473) count in Eq. 3, which
``tests/test_cost_flops.py`` reproduces exactly.

A sliding-window layer (``ModelConfig.sliding_window``, Mistral, Gemma's local layers) lets
position i attend min(i + 1, W) keys, so a causal pass over n > W positions has W (W + 1) / 2 +
(n - W) W pairs in it (``causal_pairs``), averaged over the layers' pattern by
``attention_pairs``; ``causal=False`` ignores windows (every pair).

Multi-head latent attention (DeepSeek-V3) is counted in its training form (keys and values
decompressed per head); inference engines that absorb the decompression into the queries do
less arithmetic per decode step than counted here. DeepSeek-V3's multi-token-prediction module
adds training FLOPs only when ``ModelConfig.mtp_trained`` (``mtp_flops``); prefill, decode and
the KV cache never count it (its use as a speculative-decoding draft is not modelled).

Shapes: ``seq_lens``, ``prompt_lens``, ``response_lens`` are one int per sequence (or one int
for all); results are FLOPs summed over the batch, as floats.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_bool, check_real_array
from .model import MAX_POSITIONS, ModelConfig

__all__ = ["ADAMW_FLOPS_PER_PARAM", "matmul_weights_per_token", "forward_flops", "prefill_flops",
           "decode_flops", "train_flops", "mtp_flops", "causal_pairs", "attended_keys",
           "attention_pairs"]


#: FLOPs of one AdamW step per parameter: the two moments, the square root, the divide, the
#: weight decay and the update
ADAMW_FLOPS_PER_PARAM = 12


def check_model(model) -> ModelConfig:
    """``model`` if it is a :class:`ModelConfig`, else a ValueError naming the fix."""
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig (e.g. ModelConfig.preset('llama-2-7b')), "
                         f"got {type(model).__name__}")
    return model


def _lengths(label: str, value, low: int = 1) -> np.ndarray:
    a = check_real_array(label, value, low=low, high=MAX_POSITIONS).reshape(-1)
    if np.any(a != np.round(a)):
        raise ValueError(f"{label} must be whole numbers of tokens, got {value!r}")
    return a


def _layer_weights(m: ModelConfig, moe: bool) -> int:
    """Matrix weights one token goes through in one layer (biases and norms excluded)."""
    d = m.hidden_size
    if m.is_mla:
        H, qk, r_kv = m.num_attention_heads, m.head_size, m.kv_lora_rank
        q = d * H * qk if m.q_lora_rank is None else m.q_lora_rank * (d + H * qk)
        attn = (q + d * (r_kv + m.qk_rope_head_dim)
                + r_kv * H * (m.qk_nope_head_dim + m.v_head_dim) + H * m.v_head_dim * d)
    else:
        H, KV, hd = m.num_attention_heads, m.kv_heads, m.head_size
        attn = 2 * d * H * hd + 2 * d * KV * hd
    mats = m.mlp_matrices
    if moe:                 # router, top-k routed experts, shared experts (and their D -> 1 gate)
        mlp = (d * m.num_experts + m.num_experts_per_tok * mats * d * m.moe_intermediate_size
               + m.num_shared_experts * mats * d * m.shared_expert_size
               + (d if m.shared_expert_gate else 0))
    else:
        mlp = mats * d * m.intermediate_size
    return attn + mlp


def matmul_weights_per_token(model: ModelConfig, *, lm_head: bool = True) -> int:
    """Matrix weights one token's forward pass multiplies by: every layer's projections and
    MLP (for MoE: the router, ``num_experts_per_tok`` routed and the shared experts), plus the
    LM head (V x D, whether or not it is tied to the embedding). Embedding lookups, norms and
    biases are not matrix products and are left out.

    Raises:
        ValueError: ``model`` is not a :class:`ModelConfig`."""
    m = check_model(model)
    n_moe = m.num_moe_layers
    w = (m.num_hidden_layers - n_moe) * _layer_weights(m, False)
    if n_moe:
        w += n_moe * _layer_weights(m, True)
    return w + (m.vocab_size * m.hidden_size if lm_head else 0)


def attention_flops_per_pair(m: ModelConfig) -> int:
    """FLOPs of one query-key pair over all layers: 2 H (d_qk + d_v) per layer."""
    d_v = m.v_head_dim if m.is_mla else m.head_size
    return m.num_hidden_layers * 2 * m.num_attention_heads * (m.head_size + d_v)


def _pairs(n: np.ndarray, causal: bool) -> np.ndarray:
    return n * (n + 1) / 2 if causal else n * n


def causal_pairs(n, window: int | None = None):
    """Query-key pairs of a causal pass over ``n`` positions when position i (from 0) attends
    min(i + 1, W) keys: n (n + 1) / 2 for full attention (``window`` None), W (W + 1) / 2 +
    (n - W) W once n > W. ``n`` an int or an array (float64 out); n <= 0 gives 0."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 0.0)
    if window is None:
        return n * (n + 1) / 2
    w = float(window)
    return np.where(n <= w, n * (n + 1) / 2, w * (w + 1) / 2 + (n - w) * w)


def _window_groups(m: ModelConfig) -> list:
    """[(window or None, layers)] of a model, one entry per distinct window."""
    windows = m.layer_windows
    return [(w, windows.count(w)) for w in dict.fromkeys(windows)]


def attended_keys(model: ModelConfig, context):
    """Keys a query attends when its sequence holds ``context`` tokens (itself included),
    averaged over the layers: (1/L) sum_l min(c, W_l). ``context`` itself (same object) for a
    model without sliding windows; so attention_flops_per_pair x this is a query's attention
    FLOPs and kv_cache_bytes_per_token x this its cache, for any layer pattern."""
    m = check_model(model)
    groups = _window_groups(m)
    if groups == [(None, m.num_hidden_layers)]:
        return context
    c = np.asarray(context, dtype=np.float64)
    return sum(n * (c if w is None else np.minimum(c, w)) for w, n in groups) \
        / m.num_hidden_layers


def attention_pairs(model: ModelConfig, seq_lens):
    """Query-key pairs of a causal pass over sequences of ``seq_lens`` positions, per
    sequence, averaged over the layers: (1/L) sum_l ``causal_pairs`` (n, W_l)."""
    m = check_model(model)
    return sum(k * causal_pairs(seq_lens, w) for w, k in _window_groups(m)) \
        / m.num_hidden_layers


def forward_flops(model: ModelConfig, seq_lens, *, causal: bool = True,
                  lm_head: str = "all") -> float:
    """Forward FLOPs of a batch of sequences of the given lengths (causal: a sliding-window
    layer's pairs are ``causal_pairs`` with its window).

    Args:
        lm_head: ``"all"`` (logits at every position, as training and log-prob passes need),
            ``"last"`` (only the last, as a prefill that samples the next token), or ``"none"``.
    Raises:
        ValueError: a non-ModelConfig model, lengths that are not whole numbers in
            [1, 1e8], a non-bool ``causal``, an unknown ``lm_head``.
    """
    m = check_model(model)
    n = _lengths("seq_lens", seq_lens)
    check_bool("causal", causal)
    heads = {"all": n, "last": np.ones_like(n), "none": np.zeros_like(n)}
    if not isinstance(lm_head, str) or lm_head not in heads:
        raise ValueError(f"lm_head must be 'all', 'last' or 'none', got {lm_head!r}")
    layers = 2.0 * matmul_weights_per_token(m, lm_head=False) * n.sum()
    # sliding windows cap a causal pass's pairs; causal=False counts every pair (dense)
    windowed = causal and any(w is not None for w in m.layer_windows)
    pairs = attention_pairs(m, n) if windowed else _pairs(n, causal)
    attention = attention_flops_per_pair(m) * pairs.sum()
    return float(layers + attention + 2.0 * m.vocab_size * m.hidden_size * heads[lm_head].sum())


def prefill_flops(model: ModelConfig, prompt_lens, *, causal: bool = True) -> float:
    """FLOPs of prefilling prompts of the given lengths: a forward pass over each prompt that
    fills the KV cache, with logits at the last position only (to sample the first token).

    Raises:
        ValueError: as :func:`forward_flops`, naming ``prompt_lens``."""
    _lengths("prompt_lens", prompt_lens)
    return forward_flops(model, prompt_lens, causal=causal, lm_head="last")


def decode_flops(model: ModelConfig, prompt_lens, response_lens) -> float:
    """FLOPs of generating ``response_lens`` tokens after prompts of ``prompt_lens``: the first
    token comes from the prefill's logits, then R - 1 decode steps, step j running one token
    through every weight and attending to the P + j cached keys and values (a sliding-window
    layer to min(P + j, W) of them, ``attended_keys``).

    Raises:
        ValueError: lengths that are not whole numbers (prompts >= 1, responses >= 0), or
            arrays of different lengths.
    """
    m = check_model(model)
    P = _lengths("prompt_lens", prompt_lens)
    R = _lengths("response_lens", response_lens, low=0)
    if P.size > 1 and R.size > 1 and P.size != R.size:
        raise ValueError(f"prompt_lens and response_lens have {P.size} and {R.size} entries; "
                         "give one per sequence, or one for all")
    P, R = np.broadcast_arrays(P, R)
    steps = np.maximum(R - 1, 0)
    context = steps * P + steps * (steps + 1) / 2                 # sum_{j=1}^{R-1} (P + j)
    if any(w is not None for w in m.layer_windows):               # sum_j keys(P + j)
        context = attention_pairs(m, P + steps) - attention_pairs(m, P)
    per_token = 2.0 * matmul_weights_per_token(m)
    return float(per_token * steps.sum() + attention_flops_per_pair(m) * context.sum())


def train_flops(model: ModelConfig, seq_lens, *, recompute: bool = False,
                causal: bool = True) -> float:
    """FLOPs of a training step's forward and backward over sequences of the given lengths:
    forward (logits at every position) + backward (twice the forward) + with ``recompute``
    (full activation recomputation) one more forward of the layers, not of the LM head.

    With ``causal=False, recompute=True`` this is Megatron-LM's F = 96 B s l h^2 (1 + s / (6 h) +
    V / (16 l h)) (Narayanan et al. 2021, Eq. 3) for a GPT model of width h and depth l."""
    m = check_model(model)
    check_bool("recompute", recompute)
    fwd = forward_flops(m, seq_lens, causal=causal, lm_head="all")
    extra = forward_flops(m, seq_lens, causal=causal, lm_head="none") if recompute else 0.0
    return 3.0 * fwd + extra + mtp_flops(m, seq_lens, recompute=recompute, causal=causal)


def mtp_flops(model: ModelConfig, seq_lens, *, recompute: bool = False,
              causal: bool = True) -> float:
    """Training FLOPs of the multi-token-prediction modules (``num_nextn_predict_layers``,
    DeepSeek-V3, arXiv 2412.19437, section 2.2) over sequences of the given lengths; 0.0
    unless ``model.mtp_trained``. Per module and token a forward is 2 (2 D^2 + one block's
    matrix weights + V D): ``eh_proj``, the block, the shared LM head; plus the block's
    attention pairs. Training is 3 forwards, with ``recompute`` the block and ``eh_proj`` once
    more. Counted at every position, though the last k of a sequence have no k-th next token
    (an over-count of k / n).

    Raises:
        ValueError: as :func:`rlmperf_lite.cost.forward_flops` for the model and lengths."""
    m = check_model(model)
    n = _lengths("seq_lens", seq_lens)
    check_bool("recompute", recompute)
    check_bool("causal", causal)
    if not m.mtp_trained:
        return 0.0
    d = m.hidden_size
    body = 2.0 * (2 * d * d + _layer_weights(m, m.is_moe)) * n.sum()       # eh_proj, block
    body += attention_flops_per_pair(m) / m.num_hidden_layers * _pairs(n, causal).sum()
    head = 2.0 * m.vocab_size * d * n.sum()
    return float(m.num_nextn_predict_layers * ((4.0 if recompute else 3.0) * body + 3.0 * head))
