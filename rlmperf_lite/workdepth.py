"""Work and depth of one GRPO step, phase by phase, and Brent's bound (book section 1.4).

The work-depth model (Blelloch 1996, "Programming parallel algorithms", CACM 39(3)): a
computation is a DAG of unit operations; its **work** W is the number of operations and its
**depth** (written 𝒟 in the book, ``depth_rounds`` here, not the width D) the length of the
longest dependent chain. With p processors each doing one operation per round, a greedy schedule
finishes in t_p rounds with (Brent 1974)

    max(W / p, depth) <= t_p <= W / p + depth.

Here W counts FLOPs of matrix products (2 per multiply-add, Kaplan et al. 2020 — the count the
toy model's :data:`rlmperf_lite.nn.COUNTER` measures, so the lab puts the two side by side);
reward and advantage phases count their arithmetic operations. Depth counts rounds on a PRAM with
binary-tree reductions: a dot product of length k takes 1 + ceil(log2 k) rounds, a softmax over
n keys 2 ceil(log2 n) + 3, an RMSNorm over D features ceil(log2 D) + 5 (square, tree sum,
mean + eps, rsqrt, scale; the gain multiply overlaps), residual adds 1 (stated in book
section 1.4). Tokens of one sequence run in parallel in prefill and training; decode runs
one token after another, which is why its depth grows with R while its work stays small.

Shape letters: B prompts, G group size, P prompt length, R response length, T = P + R,
D width, F MLP width, L layers, V vocabulary, N parameters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["PhaseCost", "WorkDepth", "grpo_step_workdepth"]

_ACT_DEPTH = {"relu": 1, "gelu": 7, "swiglu": 5}     # dependent elementwise rounds
_MLP_MATS = {"relu": 2, "gelu": 2, "swiglu": 3}      # weight matrices of D x F in the MLP
_ADAMW_FLOPS_PER_PARAM = 12                          # m, v updates, sqrt, divide, decay, step
_ADAMW_DEPTH = 8


def _lg(k: float) -> int:
    return math.ceil(math.log2(k)) if k > 1 else 0


def _d_mm(k: float) -> int:
    """Rounds of a dot product of length k: one multiply, then a binary tree of adds."""
    return 1 + _lg(k)


@dataclass(frozen=True)
class PhaseCost:
    """One phase: work (FLOPs), depth (rounds) and Brent's bounds for ``processors``."""

    name: str
    work_flops: float
    depth_rounds: float
    processors: int

    @property
    def parallelism(self) -> float:
        """W / depth: the most processors the phase can keep busy on average."""
        return self.work_flops / self.depth_rounds if self.depth_rounds else math.inf

    @property
    def lower_rounds(self) -> float:
        """max(W / p, depth): no schedule on p processors is faster."""
        return max(self.work_flops / self.processors, self.depth_rounds)

    @property
    def brent_rounds(self) -> float:
        """W / p + depth: a greedy schedule on p processors is this fast or faster (Brent)."""
        return self.work_flops / self.processors + self.depth_rounds

    def as_dict(self) -> dict:
        return {"phase": self.name, "work_flops": self.work_flops,
                "depth_rounds": self.depth_rounds, "parallelism": self.parallelism,
                "lower_rounds": self.lower_rounds, "brent_rounds": self.brent_rounds}


@dataclass(frozen=True)
class WorkDepth:
    """Phases of one step in execution order; phases run one after another."""

    phases: tuple
    processors: int

    @property
    def work_flops(self) -> float:
        return float(sum(p.work_flops for p in self.phases))

    @property
    def depth_rounds(self) -> float:
        return float(sum(p.depth_rounds for p in self.phases))

    @property
    def brent_rounds(self) -> float:
        """Sum of the phases' Brent bounds (each phase waits for the previous one)."""
        return float(sum(p.brent_rounds for p in self.phases))

    def phase(self, name: str) -> PhaseCost:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(f"no phase {name!r}; phases are {[p.name for p in self.phases]}")

    def as_dict(self) -> dict:
        return {"processors": self.processors, "work_flops": self.work_flops,
                "depth_rounds": self.depth_rounds, "brent_rounds": self.brent_rounds,
                "phases": [p.as_dict() for p in self.phases]}


def _positive_int(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def grpo_step_workdepth(*, num_layers: int, hidden_size: int, num_heads: int, vocab_size: int,
                        intermediate_size: int | None = None, mlp: str = "gelu",
                        num_prompts: int, group_size: int, prompt_len: int, response_len: int,
                        kl_coef: float = 0.0, processors: int = 1, attention: str = "causal",
                        share_prefill: bool = True, num_params: int | None = None) -> WorkDepth:
    """Work and depth of each phase of one GRPO step with one update per batch.

    Args:
        num_layers, hidden_size, num_heads, vocab_size, intermediate_size: L, D, H, V, F
            (F defaults to 4 D); H must divide D.
        mlp: ``"relu"`` or ``"gelu"`` (two D x F matrices) or ``"swiglu"`` (three, Llama).
        num_prompts, group_size, prompt_len, response_len: B, G, P, R (R tokens generated per
            completion: one from the prefill's logits, then R - 1 decode steps).
        kl_coef: > 0 adds the reference model's forward pass.
        processors: p in Brent's bound.
        attention: ``"causal"`` counts the T(T+1)/2 query-key pairs a causal mask keeps;
            ``"dense"`` counts all T^2, as an implementation that masks a full score matrix
            computes (the toy model does, in prefill and training).
        share_prefill: prefill each prompt once for its G samples (as inference engines do with
            ``n`` samples; the toy sampler does) rather than B * G times.
        num_params: N for the optimizer's work; defaults to the weights of the matrices and the
            token embedding.
    Returns:
        :class:`WorkDepth` with phases prefill, decode, [reference], reward, advantages,
        train_forward, train_backward, optimizer.
    Raises:
        ValueError: naming a non-positive size, an unknown ``mlp`` or ``attention``, or a
            negative ``kl_coef``.
    """
    for name, v in (("num_layers", num_layers), ("hidden_size", hidden_size),
                    ("num_heads", num_heads),
                    ("vocab_size", vocab_size), ("num_prompts", num_prompts),
                    ("group_size", group_size), ("prompt_len", prompt_len),
                    ("response_len", response_len), ("processors", processors)):
        _positive_int(name, v)
    F = 4 * hidden_size if intermediate_size is None else intermediate_size
    _positive_int("intermediate_size", F)
    if hidden_size % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide hidden_size={hidden_size}")
    if mlp not in _MLP_MATS:
        raise ValueError(f"mlp must be one of {sorted(_MLP_MATS)}, got {mlp!r}")
    if attention not in ("causal", "dense"):
        raise ValueError(f"attention must be 'causal' or 'dense', got {attention!r}")
    if isinstance(kl_coef, bool) or not isinstance(kl_coef, (int, float)) or not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    L, D, H, V, B, G, P, R = (num_layers, hidden_size, num_heads, vocab_size, num_prompts,
                              group_size, prompt_len, response_len)
    T, N_seq = P + R, B * G
    dense_per_tok = L * (2 * D * 3 * D + 2 * D * D + _MLP_MATS[mlp] * 2 * D * F)  # weights
    head = 2 * D * V

    def pairs(n):                   # query-key pairs of a full pass over n positions
        return n * n if attention == "dense" else n * (n + 1) / 2

    def seq_flops(n, head_positions):  # forward of one sequence of n positions
        return n * dense_per_tok + L * 4 * D * pairs(n) + head_positions * head

    norm_d = _lg(D) + 5
    act_d = _ACT_DEPTH[mlp]

    def layer_depth(n):             # one block, context n
        return (norm_d + _d_mm(D) + _d_mm(D // H) + 1 + (2 * _lg(n) + 3) + _d_mm(n)  # attention
                + _d_mm(D) + 1                                                      # proj, add
                + norm_d + _d_mm(D) + act_d + _d_mm(F) + 1)                         # MLP, add

    sample_d = 2 * _lg(V) + 3                       # log-softmax / pick over V
    head_d = norm_d + _d_mm(D)

    def fwd_depth(n):
        return L * layer_depth(n) + head_d

    phases = []
    n_prefill = B if share_prefill else N_seq
    phases.append(("prefill", n_prefill * seq_flops(P, 1), fwd_depth(P)))
    decode_w = sum(N_seq * (dense_per_tok + L * 4 * D * (P + j) + head) for j in range(1, R))
    decode_d = R * sample_d + sum(fwd_depth(P + j) for j in range(1, R))
    phases.append(("decode", float(decode_w), float(decode_d)))
    train_fwd_w = N_seq * seq_flops(T, T)
    train_fwd_d = fwd_depth(T) + sample_d
    if kl_coef > 0:
        phases.append(("reference", train_fwd_w, train_fwd_d))
    phases.append(("reward", float(N_seq * R), 1 + _lg(R)))
    phases.append(("advantages", float(6 * N_seq), 2 * _lg(G) + 6))
    phases.append(("train_forward", train_fwd_w, train_fwd_d))
    phases.append(("train_backward", 2 * train_fwd_w, train_fwd_d + _d_mm(N_seq * T)))
    n_params = (L * (4 * D * D + _MLP_MATS[mlp] * D * F) + 2 * V * D
                if num_params is None else num_params)
    _positive_int("num_params", n_params)
    phases.append(("optimizer", float(_ADAMW_FLOPS_PER_PARAM * n_params),
                   _ADAMW_DEPTH + _d_mm(n_params) + 3))
    return WorkDepth(tuple(PhaseCost(n, float(w), float(d), processors) for n, w, d in phases),
                     processors)
