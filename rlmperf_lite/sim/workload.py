"""What the RL system is asked to do: prompts per step, group size, prompt length and the
distribution of response lengths (book section :ref:`sec-simulator`).

Response lengths of reasoning models have a long tail: most answers are short, a few run to the
length budget. The simulator draws them from a log-normal of a given mean and spread, cut at the
budget (the cut samples are the "overlong" ones); the same seed gives the same stream of samples
whatever the placement or mode, so two systems are compared on the same work (common random
numbers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """One RL step's batch and the length distribution of its responses.

    Raises:
        ValueError: naming the field, for a non-positive size or a mean above the budget.
    """

    prompts: int = 32
    """B, prompts (groups) per step."""
    group_size: int = 16
    """G, responses per prompt."""
    prompt_len: int = 512
    """P, tokens per prompt."""
    mean_response_len: float = 2048.0
    """Mean response length in tokens, before the cut at ``max_response_len``."""
    max_response_len: int = 8192
    """Response budget R_max; longer draws are cut to it."""
    length_sigma: float = 1.0
    """Spread of log-length (log-normal sigma); 0 = every response has the mean length."""
    dist: str = "lognormal"
    """``"lognormal"`` or ``"fixed"`` (every response ``mean_response_len`` tokens)."""
    seed: int = 0
    """Seeds the length stream."""

    def __post_init__(self):
        for name in ("prompts", "group_size", "prompt_len", "max_response_len"):
            check_int(f"Workload.{name}", getattr(self, name), 1)
        check_int("Workload.seed", self.seed, 0)
        check_choice("Workload.dist", self.dist, ("lognormal", "fixed"))
        check_number("Workload.mean_response_len", self.mean_response_len, low=1,
                     high=self.max_response_len)
        check_number("Workload.length_sigma", self.length_sigma, low=0, high=4)
        if self.prompts * self.group_size > 10**7:
            raise ValueError(f"Workload.prompts x group_size = {self.prompts * self.group_size:,}"
                             f" samples per step exceeds 10,000,000; use fewer prompts")

    @property
    def samples_per_step(self) -> int:
        """B G responses per step."""
        return self.prompts * self.group_size

    def response_lengths(self, n_groups: int) -> np.ndarray:
        """Integer response lengths of the first ``n_groups`` groups of the stream, shape
        (n_groups, G); group g of step s is row s B + g. Log-normal with the configured mean
        (mu = ln(mean) - sigma^2 / 2), rounded, in [1, max_response_len].

        Raises:
            ValueError: naming ``n_groups`` if it is not an int >= 1.
        """
        check_int("n_groups", n_groups, 1)
        shape = (n_groups, self.group_size)
        if self.dist == "fixed" or self.length_sigma == 0:
            return np.full(shape, int(round(self.mean_response_len)), dtype=np.int64)
        rng = np.random.default_rng(self.seed)
        mu = np.log(self.mean_response_len) - self.length_sigma ** 2 / 2
        draws = rng.lognormal(mu, self.length_sigma, size=shape)          # (n_groups, G)
        return np.clip(np.round(draws), 1, self.max_response_len).astype(np.int64)

    def length_pmf(self) -> tuple:
        """(lengths, probabilities) of the distribution ``response_lengths`` draws from:
        the log-normal rounded to whole tokens and cut to [1, max_response_len], so
        P(n) = F(n + 1/2) - F(n - 1/2) inside, with the tails piled on 1 and on the budget
        (F the log-normal's CDF, Phi((ln x - mu) / sigma)); one point for a fixed length.
        Shapes (n,), (n,); the probabilities sum to 1."""
        if self.dist == "fixed" or self.length_sigma == 0:
            return np.array([int(round(self.mean_response_len))]), np.ones(1)
        mu = np.log(self.mean_response_len) - self.length_sigma ** 2 / 2
        edges = np.arange(1, self.max_response_len) + 0.5                # (n - 1,) n + 1/2
        z = (np.log(edges) - mu) / (self.length_sigma * math.sqrt(2.0))
        cdf = 0.5 * (1.0 + np.frompyfunc(math.erf, 1, 1)(z).astype(np.float64))
        probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))             # (n,)
        return np.arange(1, self.max_response_len + 1), probs
