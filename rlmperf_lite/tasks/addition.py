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

from ..checks import check_choice, check_int, check_number

__all__ = ["AdditionTask"]

_CHARS = "0123456789+="
_TOKENIZER = {"vocab_size": 14, "plus_id": 10, "equals_id": 11, "eos_id": 12, "pad_id": 13,
              "prompt_len": 6, "max_answer_len": 4}     # fixed by the encoding: not settable


@dataclass(frozen=True)
class AdditionTask:
    """Token ids: digits 0-9 are ids 0-9, then ``+`` (10), ``=`` (11), end (12), pad (13).

    Raises:
        ValueError: naming the field, for ``num_eval`` not an int in [1, 9999],
            ``warmstart_fraction`` not a number in (0, 1], ``split_seed`` not an int >= 0, or
            a token id or length other than the encoding's (those fields are fixed).
    """

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
        check_int("AdditionTask.num_eval", self.num_eval, 1)
        if self.num_eval >= 10_000:
            raise ValueError(f"AdditionTask.num_eval must be in (0, 10000) (10,000 pairs in all, "
                             f"some left to train on), got {self.num_eval!r}")
        check_number("AdditionTask.warmstart_fraction", self.warmstart_fraction, low=0, high=1,
                     low_open=True)
        check_int("AdditionTask.split_seed", self.split_seed, 0)
        for name, fixed in _TOKENIZER.items():
            if getattr(self, name) != fixed:
                raise ValueError(f"AdditionTask.{name} is fixed at {fixed} by the task's "
                                 f"encoding; leave it unset, got {getattr(self, name)!r}")
        perm = np.random.default_rng(self.split_seed).permutation(10_000)
        pairs = np.stack([perm // 100, perm % 100], axis=1)                  # (10000, 2)
        train = pairs[self.num_eval:]
        n_warm = max(1, int(round(self.warmstart_fraction * len(train))))
        object.__setattr__(self, "_split", {"eval": pairs[:self.num_eval], "train": train,
                                            "warmstart": train[:n_warm]})

    def pairs(self, split: str) -> np.ndarray:
        """(n, 2) int operand pairs of ``split``: "train", "eval" or "warmstart"."""
        check_choice("split", split, sorted(self._split))
        return self._split[split]

    def problems(self, split: str) -> np.ndarray:
        """The same as :meth:`pairs` (the name every task shares, :class:`~rlmperf_lite.tasks.Task`)."""
        return self.pairs(split)

    @property
    def eval_max_new_tokens(self) -> int:
        """The tokens evaluation decodes, the longest answer (4) plus 1."""
        return self.max_answer_len + 1

    def warmstart_batch(self, rng: np.random.Generator, batch_size: int):
        """A warm-start batch: ``batch_size`` pairs drawn with replacement from the warm-start
        split -> :meth:`sft_batch`'s (tokens, loss_mask)."""
        pool = self.pairs("warmstart")
        return self.sft_batch(pool[rng.integers(0, len(pool), size=batch_size)])

    def warmstart_checks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The warm-start's stop rule: greedy accuracy on the warm-start pairs, with no forced
        prefix (one (problems, prefix) entry)."""
        pairs = self.pairs("warmstart")
        return [(pairs, np.zeros((len(pairs), 0), dtype=np.int64))]

    @staticmethod
    def uses_chain(completions) -> np.ndarray:
        """(N,) all False: addition has no chain-of-thought form."""
        return np.zeros(len(np.asarray(completions)), dtype=bool)

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
        """Draw ``num_prompts`` pairs uniformly (with replacement) -> (prompt ids, pairs).
        ValueError for ``rng`` not a ``np.random.Generator`` or ``num_prompts`` not an int >= 1."""
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a np.random.Generator (np.random.default_rng(seed)), "
                             f"got {type(rng).__name__}")
        check_int("num_prompts", num_prompts, 1)
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
            ValueError: if ``completions`` is not a 2-D integer array or its length differs
                from ``pairs``'.
        """
        completions = np.asarray(completions)
        answers = self.answer_tokens(pairs)
        if completions.ndim != 2 or len(completions) != len(answers) \
                or (completions.size and completions.dtype.kind not in "iu"):
            raise ValueError(f"completions must be a 2-D integer array of token ids with one row "
                             f"per pair ({len(answers)}), got shape {completions.shape} and "
                             f"dtype {completions.dtype}")
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
        """Readable text of a sequence of ids (end shown as ``$``, pad as ``.``); ValueError
        unless every id is an int in [0, vocab_size)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0
                                           or ids.max() >= self.vocab_size)):
            raise ValueError(f"ids must be a 1-D sequence of int token ids in [0, "
                             f"{self.vocab_size}), got {ids.tolist()!r}")
        return "".join(_CHARS[i] if i < 12 else ("$" if i == self.eos_id else ".") for i in ids)
