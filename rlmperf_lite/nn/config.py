"""Configuration of the tiny decoder-only transformer (book section :ref:`sec-tiny-model`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_choice, check_int, check_number

__all__ = ["TinyLMConfig"]

_ACTIVATIONS = ("gelu", "relu")


@dataclass(frozen=True)
class TinyLMConfig:
    """Shape of the tiny LM: a GPT-style pre-norm decoder.

    Token + learned position embeddings, ``num_layers`` blocks of (RMSNorm, multi-head causal
    self-attention, residual, RMSNorm, MLP, residual), a final RMSNorm and an untied LM head.
    Linear layers have no biases (as in Llama). Shape letters: V vocabulary, D width, H heads,
    Dh = D / H head width, L layers, T context.

    Raises:
        ValueError: naming the field, for an impossible shape (e.g. ``hidden_size`` not divisible
            by ``num_heads``) or an unknown ``activation``.
    """

    vocab_size: int = 14
    """V, number of token ids (the default matches :class:`rlmperf_lite.tasks.AdditionTask`)."""
    max_seq_len: int = 16
    """Longest sequence (prompt + response) the position table covers."""
    hidden_size: int = 64
    """D, residual stream width."""
    num_layers: int = 2
    """L, number of transformer blocks."""
    num_heads: int = 4
    """H, attention heads; must divide ``hidden_size``."""
    intermediate_size: int = 256
    """F, MLP hidden width (4 D by default)."""
    activation: str = "relu"
    """MLP non-linearity, ``"relu"`` (the default, cheapest on a CPU) or ``"gelu"`` (tanh form)."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation (GPT-2's value)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "hidden_size", "num_layers", "num_heads",
                     "intermediate_size"):
            check_int(f"TinyLMConfig.{name}", getattr(self, name), 1)
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"TinyLMConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_heads={self.num_heads}; pick num_heads among the divisors of hidden_size")
        check_choice("TinyLMConfig.activation", self.activation, _ACTIVATIONS)
        check_number("TinyLMConfig.norm_eps", self.norm_eps, low=0, low_open=True)
        check_number("TinyLMConfig.init_std", self.init_std, low=0, low_open=True)

    @property
    def head_dim(self) -> int:
        """Dh = D / H."""
        return self.hidden_size // self.num_heads

    def workdepth_kwargs(self) -> dict:
        """The shape keywords of :func:`rlmperf_lite.cost.grpo_step_workdepth`."""
        return {"num_layers": self.num_layers, "hidden_size": self.hidden_size,
                "num_heads": self.num_heads, "vocab_size": self.vocab_size,
                "intermediate_size": self.intermediate_size, "mlp": self.activation}

    def num_params(self) -> int:
        """Exact number of weights: embeddings, L blocks, final norm and LM head."""
        V, D, F, L, T = (self.vocab_size, self.hidden_size, self.intermediate_size,
                         self.num_layers, self.max_seq_len)
        per_layer = 2 * D + 3 * D * D + D * D + 2 * D * F
        return V * D + T * D + L * per_layer + D + D * V
