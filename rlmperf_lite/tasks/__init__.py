"""Verifiable toy tasks: prompts, answer format and the reward function (book section
:ref:`sec-toy-task`)."""
from typing import Protocol, runtime_checkable

import numpy as np

from .addition import AdditionTask
from .cot import COT_DEFAULTS, CoTTask

__all__ = ["AdditionTask", "CoTTask", "COT_DEFAULTS", "Task"]


@runtime_checkable
class Task(Protocol):
    """What the RL loops need of a task: the token ids, the lengths, the fixed problem sets, a
    prompt sampler, the verifier and the warm-start's data and stop rule. A problem is one row
    of an (n, ...) int array (addition: the two operands; CoT: the digits)."""

    vocab_size: int
    prompt_len: int
    max_answer_len: int
    eos_id: int
    pad_id: int

    @property
    def eval_max_new_tokens(self) -> int: ...

    def problems(self, split: str) -> np.ndarray: ...

    def encode_prompts(self, problems) -> np.ndarray: ...

    def sample_prompts(self, rng: np.random.Generator, num_prompts: int,
                       split: str = "train") -> tuple: ...

    def reward(self, problems, completions) -> np.ndarray: ...

    def uses_chain(self, completions) -> np.ndarray: ...

    def warmstart_batch(self, rng: np.random.Generator, batch_size: int) -> tuple: ...

    def warmstart_checks(self) -> list: ...

    def decode(self, ids) -> str: ...
