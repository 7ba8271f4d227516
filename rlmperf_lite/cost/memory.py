"""Memory of training and generation: model states, activations, KV cache (book section
:ref:`sec-memory`).

- Model states with mixed-precision Adam: 16 bytes per trainable parameter — 2 (bf16 weights)
  + 2 (bf16 gradients) + 12 (fp32 master weights, momentum, variance) (Rajbhandari et al. 2020,
  ZeRO, arXiv 1910.02054, §3.1 and Fig. 1: 7.5B parameters -> 120 GB).
- Activations kept for the backward pass, per transformer layer, in bytes, for sequence length
  s, micro-batch b, hidden size h, a attention heads, tensor-parallel size t. The bookkeeping is
  Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
  arXiv 2205.05198, §4.1, Table 2); the rows below are for a GPT layer (MHA, 4h GELU MLP,
  16-bit values). Default, ``attention="flash"``: the attention kernel keeps Q, K, V, its output
  and one fp32 logsumexp per query row and head, 4 a s b bytes, and never stores the s x s
  scores (Dao et al. 2022, FlashAttention, arXiv 2205.14135, Alg. 2; Dao 2023, FlashAttention-2,
  arXiv 2307.08691, Alg. 1-2); no dropout (Llama's and Qwen's configs set none)::

      flash (default)          no dropout                 (dropout masks: + 2 unsharded)
      no parallelism           s b h (32 + 4 a / h)       s b h (34 + 4 a / h)
      tensor parallel          s b h (8 + 24 / t + 4 a / (h t))
      tensor + sequence par.   s b h (32 / t + 4 a / (h t))
      + selective recompute    the 4 a / h term dropped
      full recompute           2 s b h, 2 s b h / t with sequence parallelism (the layer input)

      eager, Korthikanti Table 2 (history: stored scores, dropout masks)
      no parallelism           s b h (34 + 5 a s / h)
      tensor parallel          s b h (10 + 24 / t + 5 a s / (h t))
      tensor + sequence par.   s b h (34 / t + 5 a s / (h t))
      + selective recompute    s b h (10 + 24 / t), s b h (34 / t)
      full recompute           2 s b h

  For other shapes the count is derived from the :class:`ModelConfig` (see
  :func:`activation_bytes_per_layer`): SwiGLU keeps 3 f-wide arrays (6 f / h units of s b h),
  grouped-query attention shrinks K and V to 4 n_kv / a units, MoE keeps its top-k experts'.
  Megatron-LM's estimator (``theoretical_memory_usage.py``) uses 18 + 4 f / h, the GELU count.
- LM head: fp32 logits 4 s b V / t, or one chunk of them in a fused chunked kernel
  (``lm_head_activation_bytes``).
- KV cache: per token, keys and values of every layer: 2 L KV_heads head_dim x bytes per value
  (Kwon et al. 2023, vLLM, arXiv 2309.06180, §3: OPT-13B in fp16, 800 KB per token); multi-head
  latent attention caches one compressed vector of kv_lora_rank + qk_rope_head_dim per layer. A
  sliding-window layer keeps only its last W tokens (Mistral's rolling buffer cache, Jiang et
  al. 2023, arXiv 2310.06825, §2; vLLM frees the blocks that slid out), so a sequence of c
  tokens holds kv_per_token x (1/L) sum_l min(c, W_l) bytes (``kv_cache_bytes``).
"""
from __future__ import annotations

import math

from ..checks import check_bool, check_choice, check_int, check_number, check_real_array
from .flops import attended_keys
from .hardware import HardwareSpec
from .model import MAX_PARAMS, MAX_POSITIONS, ModelConfig

__all__ = ["BYTES_PER_PARAM_ADAM", "ATTENTION", "LOGITS", "model_state_bytes",
           "activation_bytes_per_layer", "lm_head_activation_bytes", "kv_cache_bytes_per_token",
           "kv_cache_bytes", "max_kv_sequences"]

BYTES_PER_PARAM_ADAM = 16
ATTENTION = ("flash", "eager")      # attention kernels: FlashAttention; stored scores (history)
LOGITS = ("fp32", "chunked")        # LM-head outputs: whole fp32 logits; one chunk at a time
STAT_BYTES = 4                      # softmax and norm statistics are kept in (at least) fp32


def _model(model) -> ModelConfig:
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    return model


def model_state_bytes(num_params: float, *, trainable: bool = True,
                      weight_bytes: int = 2) -> float:
    """Bytes of a model's states: 16 per parameter when trained with mixed-precision Adam,
    ``weight_bytes`` per parameter when frozen (a reference model, an inference engine).

    Raises:
        ValueError: ``num_params`` negative or above 1e15, a non-positive ``weight_bytes``.
    """
    check_number("num_params", num_params, low=0, high=MAX_PARAMS)
    check_int("weight_bytes", weight_bytes, 1)
    return float(num_params) * (BYTES_PER_PARAM_ADAM if trainable else weight_bytes)


def _attention_per_token(m: ModelConfig, vb: int, stat: int) -> tuple:
    """(replicated over tp without SP, split by tp) bytes per token that attention keeps
    besides its input and the core kernel's own (units in comments: s b h at 2 bytes)."""
    H, KV = m.num_attention_heads, m.kv_heads
    if m.is_mla:
        # Assumed (DeepSeek-V3 layout): each latent kept twice, as its norm's input and its up
        # projection's input, the shared rope key once (after RoPE); the down projections are
        # not split by tp. Up-projected per-head Q, K (nope + rope), V and the output O.
        q_lat = m.q_lora_rank or 0
        rep = vb * (2 * q_lat + 2 * m.kv_lora_rank + m.qk_rope_head_dim) \
            + stat * (2 if q_lat else 1)
        return rep, vb * H * (2 * m.head_size + 2 * m.v_head_dim)
    hd = m.head_size
    split = vb * (H * hd              # Q after RoPE, kept by the attention kernel: 2 units
                  + 2 * KV * hd       # K and V: 4 n_kv / a units (GQA), 4 for MHA
                  + H * hd)           # O, the attention output = out projection's input: 2
    if m.qk_norm:                     # Q and K before their per-head RMSNorms (Qwen3)
        split += vb * (H + KV) * hd + stat * (H + KV)
    return 0.0, split


def _mlp_per_token(m: ModelConfig, vb: int, mlp_arrays: int | None) -> tuple:
    """(replicated, split by tp) bytes per token the MLP keeps besides its input, averaged
    over the layers (a MoE model's dense first layers included)."""
    # f-wide arrays kept, Korthikanti's bookkeeping: GELU keeps its input and its output (the
    # down projection's input), 2 x 2f/h = 4f/h units, 16 at f = 4h (Table 2's 8 + 8). A fused
    # SwiGLU (Megatron-Core's bias_swiglu, Liger's) keeps the gate and up outputs, which it
    # reads, and their product silu(gate) * up, the down projection's input: 3 arrays,
    # 6f/h (Gemma's GeGLU alike). Unfused PyTorch also keeps silu(gate): pass mlp_arrays=4.
    n = mlp_arrays or m.mlp_matrices
    dense = n * vb * m.intermediate_size
    if not m.is_moe:
        return 0.0, dense
    D, k, fe = m.hidden_size, m.num_experts_per_tok, m.moe_intermediate_size
    # assumed: balanced routing; each of a token's k routed copies keeps its dispatched input,
    # its expert's f-wide arrays and its output (the weighted combine's backward reads it);
    # shared experts read the MLP input, counted once; router scores 4 bytes per expert
    moe = k * vb * (2 * D + n * fe) + m.num_shared_experts * n * vb * m.shared_expert_size
    L, Lm = m.num_hidden_layers, m.num_moe_layers
    return 4.0 * m.num_experts * Lm / L, (dense * (L - Lm) + moe * Lm) / L


def _layer_per_token(m: ModelConfig, s: int, recompute: str, attention: str, dropout: bool,
                     norm_stats: bool, vb: int, mlp_arrays: int | None) -> tuple:
    """(replicated over tp without SP, split by tp) bytes one layer keeps per token."""
    D, a = m.hidden_size, m.num_attention_heads
    stat_bytes = max(STAT_BYTES, vb)        # statistics in fp32, or wider if the values are
    stat = stat_bytes * (1 if m.norm == "rmsnorm" else 2) if norm_stats else 0     # + mean
    att_rep, att_split = _attention_per_token(m, vb, stat_bytes if norm_stats else 0)
    mlp_rep, mlp_split = _mlp_per_token(m, vb, mlp_arrays)
    rep = (m.norms_per_layer * (vb * D + stat)      # the norms' inputs: 4 units for two
           + 2 * vb * D                     # the QKV and the MLP projections' inputs: 2 + 2
           + (2 * D if dropout else 0)      # dropout masks after attention and MLP: 1 + 1
           + att_rep + mlp_rep)
    if recompute == "selective":
        core = 0.0
    elif attention == "flash":              # per query row and head, one fp32 logsumexp
        core = stat_bytes * a
    else:                                   # softmax output, with dropout its mask and output
        core = a * s * (vb + (1 + vb if dropout else 0))
    return rep, att_split + mlp_split + core


def activation_bytes_per_layer(model: ModelConfig, seq_len: int, micro_batch: int, *,
                               tp: int = 1, sp: bool = False, recompute: str = "none",
                               attention: str = "flash", dropout: bool = False,
                               norm_stats: bool = False, value_bytes: int = 2,
                               mlp_arrays: int | None = None) -> float:
    """Activation bytes one transformer layer keeps for its backward pass, per GPU (module
    docstring: Korthikanti et al. 2022 §4.1 and Table 2, with the attention kernel's terms;
    a MoE model's mean over its layers, dense first layers included).

    Args:
        seq_len, micro_batch: s and b. tp: tensor-parallel size t (must divide the heads).
        sp: sequence parallelism (shards the norm, dropout and projection inputs by t too).
        recompute: ``"none"``, ``"selective"`` (recompute the attention core: drops its s^2
            scores, or the flash logsumexp) or ``"full"`` (keep only the layer's input).
        attention: ``"flash"`` (4 a s b bytes of fp32 logsumexp, no scores) or ``"eager"``
            (Korthikanti's stored softmax, plus its dropout mask and output with ``dropout``).
        dropout: 1-byte dropout masks after attention and after the MLP (Korthikanti's).
        norm_stats: count each norm's fp32 statistics (rstd; and mean for LayerNorm).
        value_bytes: bytes per kept activation value (2 = bf16, 4 for the fp32 toy model).
        mlp_arrays: f-wide arrays the MLP keeps; None = 2 for GELU/ReLU, 3 for (fused) SwiGLU.
    Raises:
        ValueError: naming a bad size, a ``tp`` that does not divide the heads, ``sp`` without
            ``tp`` > 1, or an unknown ``recompute`` or ``attention``.
    """
    m = _model(model)
    for label, v in (("seq_len", seq_len), ("micro_batch", micro_batch), ("tp", tp),
                     ("value_bytes", value_bytes)):
        check_int(label, v, 1)
    check_int("mlp_arrays", mlp_arrays, 1, optional=True)
    for label, v in (("sp", sp), ("dropout", dropout), ("norm_stats", norm_stats)):
        check_bool(label, v)
    check_choice("recompute", recompute, ("none", "selective", "full"))
    check_choice("attention", attention, ATTENTION)
    if m.num_attention_heads % tp:
        raise ValueError(f"tp={tp} must divide num_attention_heads={m.num_attention_heads}")
    if sp and tp == 1:
        raise ValueError("sp=True needs tp > 1 (sequence parallelism shards along the "
                         "tensor-parallel group)")
    tokens, seq_shards = float(seq_len) * micro_batch, tp if sp else 1
    if recompute == "full":                 # the layer's input; its s/t slice under SP
        return value_bytes * tokens * m.hidden_size / seq_shards
    rep, split = _layer_per_token(m, seq_len, recompute, attention, dropout, norm_stats,
                                  value_bytes, mlp_arrays)
    return tokens * (rep / seq_shards + split / tp)


def lm_head_activation_bytes(model: ModelConfig, seq_len: int, micro_batch: int, *,
                             tp: int = 1, cp: int = 1, sp: bool = False, logits: str = "fp32",
                             chunk_tokens: int = 512, value_bytes: int = 2) -> float:
    """Bytes the final norm and a vocabulary-parallel LM head keep for the backward on one
    GPU, for n = s b / cp tokens: 2 value_bytes n h / (t if sp) of inputs, plus ``"fp32"``:
    4 n V / t + 4 n (the fp32 logits and a logsumexp per token), or ``"chunked"``:
    4 min(chunk_tokens, n) V / t (one chunk's fp32 logits at a time).

    Raises:
        ValueError: a bad size or an unknown ``logits``.
    """
    m = _model(model)
    for label, v in (("seq_len", seq_len), ("micro_batch", micro_batch), ("tp", tp),
                     ("cp", cp), ("chunk_tokens", chunk_tokens), ("value_bytes", value_bytes)):
        check_int(label, v, 1)
    check_bool("sp", sp)
    check_choice("logits", logits, LOGITS)
    tokens = float(seq_len) * micro_batch / cp
    # the final norm's input and the head's input (Megatron-LM's estimator: 4 s b h / t)
    hidden = 2.0 * value_bytes * tokens * m.hidden_size / (tp if sp else 1)
    if logits == "fp32":
        # per the verl source (dp_actor, use_fused_kernels off, the default) the logits are
        # materialised; logprobs_from_logits then runs flash-attn's cross-entropy, which keeps
        # them and a logsumexp per row and writes the gradient in place. Megatron-LM's estimator
        # counts 4 s b V / t. Not counted: an unfused log_softmax's own fp32 output, the
        # softmax an entropy bonus keeps (verl: entropy_checkpointing recomputes it).
        return hidden + 4.0 * tokens * m.vocab_size / tp + STAT_BYTES * tokens
    # verl's FusedLinearForPPO (use_fused_kernels, torch backend): 512-token chunks, logits
    # recomputed chunk by chunk in the backward from the saved hidden states; Liger-Kernel's
    # LigerFusedLinearCrossEntropy: chunks of about n h / V tokens, in place, keeping its
    # input's gradient (the size of the head's input) instead of the input
    return hidden + 4.0 * min(chunk_tokens, tokens) * m.vocab_size / tp


def kv_cache_bytes_per_token(model: ModelConfig, dtype_bytes: int = 2) -> int:
    """Bytes the KV cache holds per token of context: 2 L KV_heads head_dim dtype_bytes (MLA:
    L (kv_lora_rank + qk_rope_head_dim) dtype_bytes) — every layer's share, i.e. per token
    while the context is within every sliding window (beyond it: ``kv_cache_bytes``).

    Raises:
        ValueError: a non-ModelConfig model or a non-positive ``dtype_bytes``.
    """
    m = _model(model)
    check_int("dtype_bytes", dtype_bytes, 1)
    if m.is_mla:
        return m.num_hidden_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * dtype_bytes
    return 2 * m.num_hidden_layers * m.kv_heads * m.head_size * dtype_bytes


def kv_cache_bytes(model: ModelConfig, context, dtype_bytes: int = 2):
    """Bytes one sequence's KV cache holds at ``context`` tokens (an int or an array, one per
    sequence): kv_cache_bytes_per_token x (1/L) sum_l min(c, W_l), a sliding-window layer
    keeping its last W tokens; = kv_cache_bytes_per_token x context (the same type) without
    windows.

    Raises:
        ValueError: a non-ModelConfig model, a non-positive ``dtype_bytes``, a ``context``
            not of real numbers in [0, 1e8].
    """
    c = check_real_array("context", context, max_ndim=2, low=0, high=MAX_POSITIONS)
    if isinstance(context, (list, tuple)):          # an array, not a repeated list
        context = c
    return kv_cache_bytes_per_token(model, dtype_bytes) * attended_keys(model, context)


def kv_cache_split(m: ModelConfig, tp: int) -> int:
    """Ways ``tp`` GPUs split a replica's KV cache: min(tp, KV heads), as the heads are
    split (Shoeybi et al. 2019 §3); 1 for a latent (MLA) cache, which every rank holds whole."""
    return 1 if m.is_mla else min(tp, m.kv_heads)


def max_kv_sequences(model: ModelConfig, hw: HardwareSpec, context, *, memory_utilization: float,
                     tp: int = 1) -> int:
    """The most sequences of ``context`` tokens whose bf16 KV cache fits on an engine replica
    of ``tp`` GPUs beside its bf16 weights: floor((u HBM - 2 N / tp) / (kv(c) / s)), u =
    ``memory_utilization`` (vLLM's ``gpu_memory_utilization``: 0.9 in v0.10's CacheConfig,
    0.92 in later releases), kv(c) = :func:`kv_cache_bytes`, s = min(tp, KV heads) the ways
    the heads split (1 for a latent cache). 0 when the weights alone take the budget. The
    activations' workspace and CUDA graphs, which vLLM profiles out of the same budget, are
    left out: an upper bound.

    Raises:
        ValueError: a non-ModelConfig model, ``hw`` not a HardwareSpec, ``context`` not a
            number of tokens >= 1, ``memory_utilization`` outside (0, 1], ``tp`` < 1.
    """
    m = _model(model)
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hw must be a HardwareSpec (hardware_preset('h100')), got {hw!r}")
    check_number("context", context, low=1, high=MAX_POSITIONS)
    check_number("memory_utilization", memory_utilization, low=0, high=1, low_open=True)
    check_int("tp", tp, 1)
    free_bytes = memory_utilization * hw.hbm_bytes - 2.0 * m.num_params() / tp
    per_sequence_bytes = float(kv_cache_bytes(m, context)) / kv_cache_split(m, tp)
    return max(0, math.floor(free_bytes / per_sequence_bytes))
