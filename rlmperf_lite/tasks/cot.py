"""Summing k digits, with or without a chain of thought (book section :ref:`sec-toy-task`).

A prompt is K = 6 digit slots then ``=`` (P = 7 tokens): the k active digits (k = 2..6) fill the
slots from the left and the unused slots hold a blank token. Two answers earn the reward:

* direct: ``;`` + the sum as 2 reversed digits + end (4 tokens), e.g. 3,5,2,7 -> ``;71$``;
* chain of thought: every partial sum as 2 reversed digits, separated by ``,``, then ``;``, the
  answer and end, 3 k + 3 tokens (9 to 21): ``30,80,01,71;71$``.

The verifier reads only what follows the FIRST ``;`` (``answer_after="first"``): 1.0 if it is
exactly the answer then end, else 0.0, so a chain that is wrong but ends in the right answer
still scores, and a model cannot hedge with several answers. ``answer_after="last"`` reads after
the last ``;`` before the end token, which a policy can exploit by writing guesses separated by
``;`` (the reward hack of issue 19).

A 2-layer model cannot add six digits in one step, but each chain step adds one digit to a
number it has just written, which it can: the chain is what makes the long problems solvable.

Held-out problems are a deterministic 20% of each k's 10^k problems, chosen by a hash of
(k, digits); training and warm-start problems are drawn from the other 80%.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checks import check_choice, check_int, check_number

__all__ = ["CoTTask", "COT_DEFAULTS"]

COT_DEFAULTS = json.loads((Path(__file__).parent / "data" / "cot.json").read_text())
"""The design's defaults (issue 19, section 1) from ``tasks/data/cot.json``, with keys task,
model and grpo."""

_CHARS = "0123456789_=,;$."
_TOKENS = {"vocab_size": 16, "blank_id": 10, "equals_id": 11, "comma_id": 12, "semicolon_id": 13,
           "eos_id": 14, "pad_id": 15, "prompt_len": 7, "max_answer_len": 21}   # fixed
_D = COT_DEFAULTS["task"]


def _heldout_hash(problems: np.ndarray) -> np.ndarray:
    """splitmix64 of the code k * 10^6 + digits (digits as a base-10 number) -> (n,) uint64."""
    k = (problems >= 0).sum(axis=1)
    digits = np.where(problems >= 0, problems, 0)
    code = k.astype(np.uint64) * np.uint64(10**6)
    for j in range(problems.shape[1]):
        code = code + digits[:, j].astype(np.uint64) * np.uint64(10 ** (problems.shape[1] - 1 - j))
    z = code + np.uint64(0x9E3779B97F4A7C15)                   # uint64 arithmetic wraps
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class CoTTask:
    """Token ids: digits 0-9 are ids 0-9, then blank (10), ``=`` (11), ``,`` (12), ``;`` (13),
    end (14), pad (15). A problem is a row of K = 6 ints: its digits from the left, -1 in the
    unused slots.

    Raises:
        ValueError: naming the field, for ``k_weights`` not 5 non-negative numbers (k = 2..6)
            with a positive sum, ``answer_after`` not "first" or "last", ``num_eval`` not an int
            >= 1, a fraction outside (0, 1), or a token id or length other than the encoding's.
    """

    k_weights: tuple = tuple(_D["k_weights"][str(k)] for k in range(2, 7))
    """Probability of k = 2, 3, 4, 5, 6 digits in training and evaluation prompts."""
    answer_after: str = "first"
    """Which ``;`` the verifier reads the answer after: "first" or "last" (hackable)."""
    heldout_fraction: float = _D["heldout_fraction"]
    """Share of each k's problems held out (by hash)."""
    num_eval: int = _D["num_eval"]
    """Held-out problems in the fixed evaluation set (k drawn by ``k_weights``)."""
    warmstart_cot_fraction: float = _D["warmstart_cot_fraction"]
    """Share of warm-start examples written with the chain (the rest direct)."""
    warmstart_check_per_k: int = _D["warmstart_check_per_k"]
    """Training problems per k on which the warm-start's stop rule is measured."""
    split_seed: int = 1234
    """Seed of the fixed evaluation and warm-start-check sets (not the run's seed)."""
    num_slots: int = 6
    vocab_size: int = 16
    blank_id: int = 10
    equals_id: int = 11
    comma_id: int = 12
    semicolon_id: int = 13
    eos_id: int = 14
    pad_id: int = 15
    prompt_len: int = 7
    max_answer_len: int = 21
    """Longest correct answer, the chain of 6 digits (3 k + 3 tokens)."""
    _sets: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        w = self.k_weights
        if not isinstance(w, (tuple, list)) or len(w) != 5 or any(
                isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 0 for x in w) \
                or not sum(w) > 0:
            raise ValueError(f"CoTTask.k_weights must be 5 numbers >= 0 (k = 2..6) with a positive "
                             f"sum, e.g. (0.32, 0.27, 0.18, 0.13, 0.10); got {w!r}")
        check_choice("CoTTask.answer_after", self.answer_after, ("first", "last"))
        for name in ("heldout_fraction", "warmstart_cot_fraction"):
            check_number(f"CoTTask.{name}", getattr(self, name), low=0, high=1, low_open=True,
                         high_open=True)
        check_int("CoTTask.num_eval", self.num_eval, 1, high=100_000)
        check_int("CoTTask.warmstart_check_per_k", self.warmstart_check_per_k, 1, high=10_000)
        check_int("CoTTask.split_seed", self.split_seed, 0)
        if self.num_slots != 6:
            raise ValueError(f"CoTTask.num_slots is fixed at 6 by the encoding; leave it unset, "
                             f"got {self.num_slots!r}")
        for name, fixed in _TOKENS.items():
            if getattr(self, name) != fixed:
                raise ValueError(f"CoTTask.{name} is fixed at {fixed} by the task's encoding; "
                                 f"leave it unset, got {getattr(self, name)!r}")
        rng = np.random.default_rng(self.split_seed)
        check = np.concatenate([self._draw(rng, np.full(self.warmstart_check_per_k, k), "train")
                                for k in range(2, 7)])
        object.__setattr__(self, "_sets", {"eval": self._draw(rng, self._ks(rng, self.num_eval),
                                                              "eval"), "warmstart_check": check})

    # ---- problems ------------------------------------------------------------------------------
    def is_heldout(self, problems) -> np.ndarray:
        """(n,) bool: whether each problem is in the held-out share (hash of k and digits)."""
        h = _heldout_hash(self._check_problems(problems))
        return h % np.uint64(1 << 20) < np.uint64(round(self.heldout_fraction * (1 << 20)))

    def _ks(self, rng, n: int) -> np.ndarray:
        p = np.asarray(self.k_weights, dtype=np.float64)
        return rng.choice(np.arange(2, 7), size=n, p=p / p.sum())

    def _draw(self, rng, ks: np.ndarray, split: str) -> np.ndarray:
        """One problem per entry of ``ks``, uniform over that k's problems of ``split``
        (rejection: redraw those on the wrong side of the hash)."""
        out = np.full((len(ks), self.num_slots), -1, dtype=np.int64)
        todo = np.arange(len(ks))
        while len(todo):
            digits = rng.integers(0, 10, size=(len(todo), self.num_slots))
            out[todo] = np.where(np.arange(self.num_slots) < ks[todo, None], digits, -1)
            todo = todo[self.is_heldout(out[todo]) != (split == "eval")]
        return out

    def problems(self, split: str) -> np.ndarray:
        """The fixed set of ``split``: "eval" (``num_eval`` held-out problems) or
        "warmstart_check" (``warmstart_check_per_k`` training problems per k)."""
        check_choice("split", split, sorted(self._sets))
        return self._sets[split]

    def _check_problems(self, problems) -> np.ndarray:
        p = np.asarray(problems)
        ok = p.ndim == 2 and p.shape[1] == self.num_slots and (
            p.size == 0 or (p.dtype.kind in "iu" and p.min() >= -1 and p.max() <= 9))
        if ok and p.size:
            k = (p >= 0).sum(axis=1)
            ok = k.min() >= 2 and bool(((p >= 0) == (np.arange(self.num_slots) < k[:, None]))
                                       .all())
        if not ok:
            raise ValueError(f"problems must be an (n, 6) integer array: 2 to 6 digits 0-9 from "
                             f"the left, -1 in the unused slots; got shape {p.shape}, dtype "
                             f"{p.dtype}")
        return p.astype(np.int64)

    def sample_prompts(self, rng: np.random.Generator, num_prompts: int, split: str = "train"):
        """Draw ``num_prompts`` problems (k by ``k_weights``, digits uniform) from "train" or
        "eval" -> (prompt ids (n, 7), problems (n, 6)). ValueError for ``rng`` not a
        ``np.random.Generator`` or ``num_prompts`` not an int >= 1."""
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a np.random.Generator (np.random.default_rng(seed)), "
                             f"got {type(rng).__name__}")
        check_int("num_prompts", num_prompts, 1)
        check_choice("split", split, ("train", "eval"))
        problems = self._draw(rng, self._ks(rng, num_prompts), split)
        return self.encode_prompts(problems), problems

    # ---- encoding ------------------------------------------------------------------------------
    def encode_prompts(self, problems) -> np.ndarray:
        """problems (n, 6) -> prompt ids (n, 7): the digits, blanks, ``=``."""
        p = self._check_problems(problems)
        return np.concatenate([np.where(p >= 0, p, self.blank_id),
                               np.full((len(p), 1), self.equals_id)], axis=1)

    def answer_tokens(self, problems, cot=False) -> list[list[int]]:
        """Correct completions; ``cot`` (a bool or one per problem) picks the chain form."""
        p = self._check_problems(problems)
        cot = np.broadcast_to(np.asarray(cot, dtype=bool), (len(p),))
        out = []
        for row, chain in zip(p, cot):
            sums = np.cumsum(row[row >= 0])
            two = [[int(s % 10), int(s // 10)] for s in sums]             # reversed digits
            head = sum(([self.comma_id] * bool(i) + t for i, t in enumerate(two)), []) \
                if chain else []
            out.append(head + [self.semicolon_id] + two[-1] + [self.eos_id])
        return out

    def uses_chain(self, completions) -> np.ndarray:
        """(N,) bool: whether a completion writes something before its first ``;``."""
        c = np.asarray(completions)
        if c.ndim != 2:
            raise ValueError(f"completions must be a 2-D array of token ids, got shape {c.shape}")
        return c[:, 0] != self.semicolon_id if c.shape[1] else np.zeros(len(c), dtype=bool)

    def reward(self, problems, completions) -> np.ndarray:
        """The verifier: 1.0 where the text after the first (``answer_after="last"``: the last
        before the end token) ``;`` is exactly the 2 answer digits then end, else 0.0.

        Args:
            problems: (N, 6) problems of each completion's prompt.
            completions: (N, R) int completion ids.
        Returns:
            rewards (N,) float32 in {0.0, 1.0}.
        Raises:
            ValueError: if ``completions`` is not a 2-D integer array with one row per problem.
        """
        completions = np.asarray(completions)
        answers = [a[-3:] for a in self.answer_tokens(problems)]           # d0 d1 end
        if completions.ndim != 2 or len(completions) != len(answers) \
                or (completions.size and completions.dtype.kind not in "iu"):
            raise ValueError(f"completions must be a 2-D integer array of token ids with one row "
                             f"per problem ({len(answers)}), got shape {completions.shape} and "
                             f"dtype {completions.dtype}")
        out = np.zeros(len(completions), dtype=np.float32)
        for i, (ans, row) in enumerate(zip(answers, completions.tolist())):
            end = row.index(self.eos_id) if self.eos_id in row else len(row)
            semis = [j for j, t in enumerate(row[:end]) if t == self.semicolon_id]
            if semis:
                j = semis[0] if self.answer_after == "first" else semis[-1]
                out[i] = float(row[j + 1:j + 4] == ans)
        return out

    def sft_batch(self, problems, cot=False) -> tuple[np.ndarray, np.ndarray]:
        """Prompt + answer sequences for supervised warm-start: tokens (n, 7 + 21) padded with
        ``pad_id`` and loss_mask (n, 27) over the log-prob positions predicting answer tokens."""
        prompts = self.encode_prompts(problems)
        n, P, A = len(prompts), self.prompt_len, self.max_answer_len
        tokens = np.full((n, P + A), self.pad_id, dtype=np.int64)
        tokens[:, :P] = prompts
        loss_mask = np.zeros((n, P + A - 1), dtype=np.float32)
        for i, ans in enumerate(self.answer_tokens(problems, cot)):
            tokens[i, P:P + len(ans)] = ans
            loss_mask[i, P - 1:P - 1 + len(ans)] = 1.0
        return tokens, loss_mask

    def warmstart_batch(self, rng: np.random.Generator, batch_size: int):
        """A warm-start batch: k uniform over 2..6, training problems, ``warmstart_cot_fraction``
        of them written with the chain -> ``sft_batch``'s (tokens, loss_mask)."""
        problems = self._draw(rng, rng.integers(2, 7, size=batch_size), "train")
        return self.sft_batch(problems, rng.random(batch_size) < self.warmstart_cot_fraction)

    def warmstart_checks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The warm-start's stop rule, one (problems, forced prefix) per k: greedy accuracy with
        the chain forced (the chain's first token given), whose worst k must reach the target."""
        p = self.problems("warmstart_check")
        k = (p >= 0).sum(axis=1)
        return [(p[k == j], p[k == j][:, :1]) for j in range(2, 7)]

    @property
    def eval_max_new_tokens(self) -> int:
        """The tokens evaluation decodes, the longest answer (21) plus 2."""
        return self.max_answer_len + 2

    def decode(self, ids) -> str:
        """Readable text of ids (blank ``_``, end ``$``, pad ``.``); ValueError unless every id is
        an int in [0, 16)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0
                                           or ids.max() >= self.vocab_size)):
            raise ValueError(f"ids must be a 1-D sequence of int token ids in [0, "
                             f"{self.vocab_size}), got {ids.tolist()!r}")
        return "".join(_CHARS[i] for i in ids)
