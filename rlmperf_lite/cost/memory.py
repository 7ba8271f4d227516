"""Memory of training and generation: model states, activations, KV cache (book section
:ref:`sec-memory`).

- Model states with mixed-precision Adam: 16 bytes per trainable parameter — 2 (bf16 weights)
  + 2 (bf16 gradients) + 12 (fp32 master weights, momentum, variance) (Rajbhandari et al. 2020,
  ZeRO, arXiv 1910.02054, §3.1 and Fig. 1: 7.5B parameters -> 120 GB).
- Activations kept for the backward pass, per transformer layer, in bytes, for sequence length
  s, micro-batch b, hidden size h, a attention heads, tensor-parallel size t (Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198,
  Table 2; 16-bit activations, dropout masks included):

      no parallelism                           s b h (34 + 5 a s / h)
      tensor parallel                          s b h (10 + 24 / t + 5 a s / (h t))
      tensor + sequence parallel               s b h (34 / t + 5 a s / (h t))
      tensor parallel + selective recompute    s b h (10 + 24 / t)
      tensor + sequence + selective            s b h (34 / t)
      full recompute                           2 s b h (only each layer's input)

  The formulas are for a GPT layer (MHA, 4h MLP); for other shapes they are the paper's
  approximation.
- KV cache: per token, keys and values of every layer: 2 L KV_heads head_dim x bytes per value
  (Kwon et
  al. 2023, vLLM, arXiv 2309.06180, §3: OPT-13B in fp16, 800 KB per token); multi-head latent
  attention caches one compressed vector of kv_lora_rank + qk_rope_head_dim per layer.
"""
from __future__ import annotations

from ..checks import check_bool, check_choice, check_int, check_number
from .model import ModelConfig

__all__ = ["BYTES_PER_PARAM_ADAM", "model_state_bytes", "activation_bytes_per_layer",
           "kv_cache_bytes_per_token"]

BYTES_PER_PARAM_ADAM = 16


def _model(model) -> ModelConfig:
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    return model


def model_state_bytes(num_params: float, *, trainable: bool = True,
                      weight_bytes: int = 2) -> float:
    """Bytes of a model's states: 16 per parameter when trained with mixed-precision Adam,
    ``weight_bytes`` per parameter when frozen (a reference model, an inference engine).

    Raises:
        ValueError: negative ``num_params`` or a non-positive ``weight_bytes``.
    """
    check_number("num_params", num_params, low=0)
    check_int("weight_bytes", weight_bytes, 1)
    return float(num_params) * (BYTES_PER_PARAM_ADAM if trainable else weight_bytes)


def activation_bytes_per_layer(model: ModelConfig, seq_len: int, micro_batch: int, *,
                               tp: int = 1, sp: bool = False,
                               recompute: str = "none") -> float:
    """Activation bytes one transformer layer keeps for its backward pass (Korthikanti et al.
    2022, Table 2; see the module docstring).

    Args:
        seq_len, micro_batch: s and b.
        tp: tensor-parallel size t (must divide the heads).
        sp: sequence parallelism (shards the norm and dropout activations by t too).
        recompute: ``"none"``, ``"selective"`` (recompute the attention scores, softmax and
            dropout: drops the 5 a s / h term) or ``"full"`` (keep only the layer's input).
    Raises:
        ValueError: naming a bad size, a ``tp`` that does not divide the heads, ``sp`` without
            ``tp`` > 1, or an unknown ``recompute``.
    """
    m = _model(model)
    check_int("seq_len", seq_len, 1)
    check_int("micro_batch", micro_batch, 1)
    check_int("tp", tp, 1)
    check_bool("sp", sp)
    check_choice("recompute", recompute, ("none", "selective", "full"))
    a, h = m.num_attention_heads, m.hidden_size
    if a % tp:
        raise ValueError(f"tp={tp} must divide num_attention_heads={a}")
    if sp and tp == 1:
        raise ValueError("sp=True needs tp > 1 (sequence parallelism shards along the "
                         "tensor-parallel group)")
    sbh = float(seq_len) * micro_batch * h
    if recompute == "full":
        return 2.0 * sbh
    scores = 0.0 if recompute == "selective" else 5.0 * a * seq_len / (h * tp)
    rest = 34.0 / tp if sp else 10.0 + 24.0 / tp
    return sbh * (rest + scores)


def kv_cache_bytes_per_token(model: ModelConfig, dtype_bytes: int = 2) -> int:
    """Bytes the KV cache holds per token of context: 2 L KV_heads head_dim dtype_bytes (MLA:
    L (kv_lora_rank + qk_rope_head_dim) dtype_bytes).

    Raises:
        ValueError: a non-ModelConfig model or a non-positive ``dtype_bytes``.
    """
    m = _model(model)
    check_int("dtype_bytes", dtype_bytes, 1)
    if m.is_mla:
        return m.num_hidden_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * dtype_bytes
    return 2 * m.num_hidden_layers * m.kv_heads * m.head_size * dtype_bytes


def kv_cache_split(m: ModelConfig, tp: int) -> int:
    """Ways ``tp`` GPUs split a replica's KV cache: min(tp, KV heads), as the heads are
    split (Shoeybi et al. 2019 §3); 1 for a latent (MLA) cache, which every rank holds whole."""
    return 1 if m.is_mla else min(tp, m.kv_heads)
