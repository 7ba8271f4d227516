"""Two-number addition with the answer written least-significant digit first (book section
:ref:`sec-toy-task`).

A prompt is ``ab+cd=`` with two zero-padded 2-digit numbers (0-99), P = 6 tokens. The answer is
the sum's digits in reverse order (least-significant first: 47 + 85 = 132 is answered ``231``)
followed by the end token, 2 to 4 tokens. Reversed digits make each digit depend only on digits
already seen (the carry flows left to right), which a 2-layer model can learn.

The verifier gives 1.0 for exactly the right digits followed by the end token and 0.0 otherwise:
no partial credit, so a random model scores near zero.

Reversed digits follow Lee et al. 2023 ("Teaching arithmetic to small transformers",
arXiv 2307.03381), who found the reversed order much easier for small transformers to learn.

The 10,000 ordered pairs are split once, from a fixed seed, into 1,000 held-out evaluation
pairs and 9,000 training pairs; the supervised warm-start uses a fixed 10% subset (900) of the
training pairs and RL samples from all 9,000. Held-out pairs are never seen in either.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["AdditionTask"]

_CHARS = "0123456789+="


@dataclass(frozen=True)
class AdditionTask:
    """Token ids: digits 0-9 are ids 0-9, then ``+`` (10), ``=`` (11), end (12), pad (13)."""

    num_eval: int = 1000
    """Held-out evaluation pairs."""
    warmstart_fraction: float = 0.1
    """Fraction of the training pairs used by the supervised warm-start."""
    split_seed: int = 1234
    """Seed of the fixed train/eval/warm-start split (not the run's seed)."""
    vocab_size: int = 14
    plus_id: int = 10
    equals_id: int = 11
    eos_id: int = 12
    pad_id: int = 13
    prompt_len: int = 6
    max_answer_len: int = 4
    """Longest correct answer, 3 digits + end token."""
    _split: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.num_eval, (int, np.integer)) or not 0 < self.num_eval < 10_000:
            raise ValueError(f"num_eval must be in (0, 10000), got {self.num_eval!r}")
        if not 0 < self.warmstart_fraction <= 1:
            raise ValueError(f"warmstart_fraction must be in (0, 1], got "
                             f"{self.warmstart_fraction!r}")
        perm = np.random.default_rng(self.split_seed).permutation(10_000)
        pairs = np.stack([perm // 100, perm % 100], axis=1)                  # (10000, 2)
        train = pairs[self.num_eval:]
        n_warm = max(1, int(round(self.warmstart_fraction * len(train))))
        object.__setattr__(self, "_split", {"eval": pairs[:self.num_eval], "train": train,
                                            "warmstart": train[:n_warm]})

    def pairs(self, split: str) -> np.ndarray:
        """(n, 2) int operand pairs of ``split``: "train", "eval" or "warmstart"."""
        if split not in self._split:
            raise ValueError(f"split must be one of {sorted(self._split)}, got {split!r}")
        return self._split[split]

    def encode_prompts(self, pairs) -> np.ndarray:
        """pairs (n, 2) in 0..99 -> prompt ids (n, 6): ``a1 a0 + b1 b0 =``."""
        pairs = self._check_pairs(pairs)
        a, b = pairs[:, 0], pairs[:, 1]
        n = len(pairs)
        return np.stack([a // 10, a % 10, np.full(n, self.plus_id), b // 10, b % 10,
                         np.full(n, self.equals_id)], axis=1).astype(np.int64)

    @staticmethod
    def _check_pairs(pairs) -> np.ndarray:
        pairs = np.asarray(pairs)
        if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer) \
                or (pairs.size and (pairs.min() < 0 or pairs.max() > 99)):
            raise ValueError(f"pairs must be an (n, 2) integer array with values in 0..99, got "
                             f"shape {pairs.shape} and dtype {pairs.dtype}")
        return pairs

    def answer_tokens(self, pairs) -> list[list[int]]:
        """Correct completions: reversed digits of a + b, then the end token."""
        return [[int(c) for c in str(int(a) + int(b))[::-1]] + [self.eos_id]
                for a, b in self._check_pairs(pairs)]

    def sample_prompts(self, rng: np.random.Generator, num_prompts: int,
                       split: str = "train"):
        """Draw ``num_prompts`` pairs uniformly (with replacement) -> (prompt ids, pairs)."""
        if not isinstance(num_prompts, (int, np.integer)) or num_prompts < 1:
            raise ValueError(f"num_prompts must be an int >= 1, got {num_prompts!r}")
        pool = self.pairs(split)
        pairs = pool[rng.integers(0, len(pool), size=num_prompts)]
        return self.encode_prompts(pairs), pairs

    def reward(self, pairs, completions) -> np.ndarray:
        """The verifier: 1.0 where a completion is exactly the answer then the end token, else 0.0.

        Args:
            pairs: (N, 2) operands of each completion's prompt.
            completions: (N, R) int completion ids (anything after the end token is ignored).
        Returns:
            rewards (N,) float32 in {0.0, 1.0}.
        Raises:
            ValueError: if ``completions`` is not 2-D or its length differs from ``pairs``'.
        """
        completions = np.asarray(completions)
        answers = self.answer_tokens(pairs)
        if completions.ndim != 2 or len(completions) != len(answers):
            raise ValueError(f"completions must be 2-D with one row per pair ({len(answers)}), "
                             f"got shape {completions.shape}")
        out = np.zeros(len(completions), dtype=np.float32)
        for i, (ans, row) in enumerate(zip(answers, completions)):
            out[i] = float(len(row) >= len(ans) and list(row[:len(ans)]) == ans)
        return out

    def sft_batch(self, pairs) -> tuple[np.ndarray, np.ndarray]:
        """Prompt + answer sequences for supervised warm-start.

        Returns:
            tokens (n, 6 + 4) padded with ``pad_id``, and loss_mask (n, 9) over the per-token
            log-prob positions that predict answer tokens.
        """
        prompts = self.encode_prompts(pairs)
        n, P, A = len(prompts), self.prompt_len, self.max_answer_len
        tokens = np.full((n, P + A), self.pad_id, dtype=np.int64)
        tokens[:, :P] = prompts
        loss_mask = np.zeros((n, P + A - 1), dtype=np.float32)
        for i, ans in enumerate(self.answer_tokens(pairs)):
            tokens[i, P:P + len(ans)] = ans
            loss_mask[i, P - 1:P - 1 + len(ans)] = 1.0
        return tokens, loss_mask

    def decode(self, ids) -> str:
        """Readable text of a sequence of ids (end shown as ``$``, pad as ``.``)."""
        return "".join(_CHARS[i] if i < 12 else ("$" if i == self.eos_id else ".") for i in ids)
