"""Held-out evaluation: greedy accuracy of a policy on a split of the task (book section
:ref:`sec-toy-task`)."""
from __future__ import annotations

import numpy as np

from ..nn import TinyLMConfig, generate
from ..tasks import AdditionTask

__all__ = ["evaluate"]


def evaluate(params: dict, cfg: TinyLMConfig, task: AdditionTask, split: str = "eval",
             max_new_tokens: int = 5) -> float:
    """Accuracy of greedy decoding on every pair of ``split`` (1,000 held-out pairs by default)."""
    pairs = task.pairs(split)
    rollout = generate(params, task.encode_prompts(pairs), cfg, max_new_tokens=max_new_tokens,
                       eos_id=task.eos_id, pad_id=task.pad_id, temperature=0.0)
    rewards = task.reward(pairs, rollout.tokens[:, rollout.prompt_len:])
    return float(rewards.mean(dtype=np.float64))
