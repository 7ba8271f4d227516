"""The registry's entry type and the settings several labs share (see
:mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Answer", "LLAMA2_7B_SHAPE", "QWEN_STEP"]

LLAMA2_7B_SHAPE = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
                       intermediate_size=11008, mlp="swiglu")
"""Llama-2-7B's shape for the work–depth calculator (Labs 1–3)."""

QWEN_STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
                 response_len=4096, gpus=64, kl_coef=0.001)
"""The GRPO step of Labs 4–6: Qwen2.5-7B, 32 prompts x 16 samples, 512 + 4,096 tokens, 64 H100."""


@dataclass(frozen=True)
class Answer:
    """One registered answer: how to compute it, what it is, and how close is right."""

    compute: Callable[[], float]
    """Computes the expected value with the library (called at each check)."""
    what: str
    """The quantity, in a few words."""
    hint: str
    """Shown with a wrong answer."""
    rtol: float = 0.01
    """Relative tolerance; 0 for an exact (integer) answer."""
    atol: float = 0.0
    """Absolute tolerance, for answers that may be 0."""
