"""Work and depth of an RL step in PRAM rounds: the ideal-machine limit of the book's model
(book sections :ref:`sec-workdepth-rounds` and :ref:`sec-workdepth-seconds`).

The work-depth model (Blelloch 1996, "Programming parallel algorithms", CACM 39(3)): a
computation is a DAG of unit operations; its **work** W is the number of operations and its
**depth** (𝒟 in the book, ``depth_rounds`` here) the length of the longest dependent chain. With
p processors each doing one operation per round, a greedy schedule finishes in t_p rounds with
(Brent 1974) max(W / p, depth) <= t_p <= W / p + depth.

W counts FLOPs of matrix products (2 per multiply-add, Kaplan et al. 2020 — what the toy's
:data:`rlmperf_lite.nn.COUNTER` measures); reward and advantage phases their arithmetic
operations. Depth counts rounds with binary-tree reductions: a dot product of length k takes
1 + ceil(log2 k) rounds, a softmax over n keys 2 ceil(log2 n) + 3, an RMSNorm over D features
ceil(log2 D) + 5, residual adds 1. Tokens of one sequence run in parallel in prefill and
training; decode runs one token after another, so its depth grows with R. Two entry points:
:func:`~rlmperf_lite.cost.grpo_step_workdepth` / :func:`~rlmperf_lite.cost.ppo_step_workdepth`
for the toy's shapes, and :func:`~rlmperf_lite.cost.rl_step_workdepth` for a real model
(:func:`~rlmperf_lite.cost.estimate_rl_step`'s FLOPs; grouped-query attention as multi-head,
MoE layers with their router and top-k). The same model
in seconds, on a real machine: :mod:`rlmperf_lite.cost.workdepth_s`.

Shape letters: B prompts, G group size, P prompt length, R response length, T = P + R,
D width, F MLP width, L layers, V vocabulary, N parameters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number, check_real_array
from .estimate import MAX_RESPONSE_LEN, estimate_rl_step, sample_lengths
from .flops import ADAMW_FLOPS_PER_PARAM
from .model import MAX_LAYERS, MAX_PARAMS, MAX_POSITIONS, MAX_SIZE, ModelConfig
from .phase import PhaseSequence
from .presets import resolve_model

__all__ = ["PhaseRounds", "WorkDepth", "grpo_step_workdepth", "ppo_step_workdepth",
           "expected_max_length", "forward_depth", "rl_step_workdepth"]

_ACT_DEPTH = {"relu": 1, "gelu": 7, "swiglu": 5, "geglu": 8}   # dependent elementwise rounds
_MLP_MATS = {"relu": 2, "gelu": 2, "swiglu": 3, "geglu": 3}     # weight matrices of D x F
_ADAMW_DEPTH = 8


def _lg(k: float) -> int:
    return math.ceil(math.log2(k)) if k > 1 else 0


def _lg_sum(a: int, b: int) -> int:
    """sum of _lg(n) for a <= n <= b, by runs: _lg(n) = k for 2^(k-1) < n <= 2^k."""
    total, n = 0, max(a, 1)
    while n <= b:
        k = _lg(n)
        top = min(b, 2 ** k)
        total += k * (top - n + 1)
        n = top + 1
    return total


def _d_mm(k: float) -> int:
    """Rounds of a dot product of length k: one multiply, then a binary tree of adds."""
    return 1 + _lg(k)


@dataclass(frozen=True)
class PhaseRounds:
    """One phase: work (FLOPs), depth (rounds) and Brent's bounds for ``processors``."""

    name: str
    work_flops: float
    depth_rounds: float
    processors: int

    @property
    def parallelism(self) -> float:
        """W / depth — the most processors the phase can keep busy on average."""
        return self.work_flops / self.depth_rounds if self.depth_rounds else math.inf

    @property
    def work_rounds(self) -> float:
        """W / p — the rounds of the work alone, spread evenly over p processors."""
        return self.work_flops / self.processors

    @property
    def lower_rounds(self) -> float:
        """max(W / p, depth) — no schedule on p processors is faster."""
        return max(self.work_rounds, self.depth_rounds)

    @property
    def brent_rounds(self) -> float:
        """W / p + depth — a greedy schedule on p processors is this fast or faster (Brent)."""
        return self.work_rounds + self.depth_rounds

    def as_dict(self) -> dict:
        return {"phase": self.name, "work_flops": self.work_flops,
                "depth_rounds": self.depth_rounds, "parallelism": self.parallelism,
                "lower_rounds": self.lower_rounds, "brent_rounds": self.brent_rounds}


@dataclass(frozen=True)
class WorkDepth(PhaseSequence):
    """Phases of one step in execution order; phases run one after another."""

    phases: tuple
    processors: int

    work_flops = property(lambda self: self.total("work_flops"))
    depth_rounds = property(lambda self: self.total("depth_rounds"))
    # each phase waits for the previous one: the step's Brent bound is the phases' sum
    brent_rounds = property(lambda self: self.total("brent_rounds"))

    def as_dict(self) -> dict:
        return {"processors": self.processors, "work_flops": self.work_flops,
                "depth_rounds": self.depth_rounds, "brent_rounds": self.brent_rounds,
                "phases": [p.as_dict() for p in self.phases]}


# far above any real run, and below which every count stays finite (processors: any int64)
_HIGH = {"num_layers": MAX_LAYERS, "prompt_len": MAX_POSITIONS, "response_len": MAX_RESPONSE_LEN,
         "processors": None, "num_params": MAX_PARAMS}


def _positive_int(name, value):
    check_int(name, value, 1, high=_HIGH.get(name, MAX_SIZE))


class ShapeCosts:
    """Matmul FLOPs and depth of forward passes of one model shape (validated)."""

    def __init__(self, num_layers, hidden_size, num_heads, vocab_size, intermediate_size, mlp,
                 attention):
        for name, v in (("num_layers", num_layers), ("hidden_size", hidden_size),
                        ("num_heads", num_heads), ("vocab_size", vocab_size)):
            _positive_int(name, v)
        F = 4 * hidden_size if intermediate_size is None else intermediate_size
        _positive_int("intermediate_size", F)
        if hidden_size % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide hidden_size={hidden_size}")
        check_choice("mlp", mlp, tuple(_MLP_MATS))
        check_choice("attention", attention, ("causal", "dense"))
        self.L, self.D, self.H, self.V, self.F = num_layers, hidden_size, num_heads, vocab_size, F
        self.mlp, self.attention = mlp, attention
        D, L = hidden_size, num_layers
        self.dense_per_tok = L * (2 * D * 3 * D + 2 * D * D + _MLP_MATS[mlp] * 2 * D * F)
        self.lm_head = 2 * D * vocab_size
        self.value_head = 2 * D                        # the critic's (D, 1) head
        self.n_params = L * (4 * D * D + _MLP_MATS[mlp] * D * F) + 2 * vocab_size * D
        if self.n_params > MAX_PARAMS:
            raise ValueError(f"num_layers={L}, hidden_size={D}, intermediate_size={F} and "
                             f"vocab_size={vocab_size} give {self.n_params:.3g} parameters, "
                             f"above the {MAX_PARAMS:.0e} this cost model accepts")
        norm_d = _lg(D) + 5
        self._norm_d = norm_d
        self.sample_d = 2 * _lg(vocab_size) + 3      # log-softmax / pick over V
        self.head_d = norm_d + _d_mm(D)

    def pairs(self, n):                                # query-key pairs of a pass over n positions
        return n * n if self.attention == "dense" else n * (n + 1) / 2

    def seq_flops(self, n, head_positions, head=None):
        """Forward of one sequence of n positions, the head applied at ``head_positions``."""
        head = self.lm_head if head is None else head
        return n * self.dense_per_tok + self.L * 4 * self.D * self.pairs(n) + head_positions * head

    def token_flops(self, context):                    # one decode position attending to context
        return self.dense_per_tok + self.L * 4 * self.D * context + self.lm_head

    def layer_depth(self, n):                          # one block, context n
        D, nd = self.D, self._norm_d
        return (nd + _d_mm(D) + _d_mm(D // self.H) + 1 + (2 * _lg(n) + 3) + _d_mm(n)  # attention
                + _d_mm(D) + 1                                                      # proj, add
                + nd + _d_mm(D) + _ACT_DEPTH[self.mlp] + _d_mm(self.F) + 1)         # MLP, add

    def fwd_depth(self, n):
        return self.L * self.layer_depth(n) + self.head_d

    def optimizer(self, num_params):
        n = self.n_params if num_params is None else num_params
        _positive_int("num_params", n)
        return float(ADAMW_FLOPS_PER_PARAM * n), _ADAMW_DEPTH + _d_mm(n) + 3

    def rollout(self, n_prompts, group_size, P, R, share_prefill):
        """Phases prefill and decode for n_prompts x group_size sequences."""
        n_seq = n_prompts * group_size
        n_prefill = n_prompts if share_prefill else n_seq
        # sums over the decode steps j = 1 .. R - 1 (context P + j) in closed form, exact ints:
        # token_flops is linear in the context, fwd_depth(n) = fwd_depth(1) + 3 L lg(n)
        steps = R - 1
        decode_w = n_seq * (steps * (self.dense_per_tok + self.lm_head)
                            + self.L * 4 * self.D * (steps * P + steps * (steps + 1) // 2))
        decode_d = (R * self.sample_d + steps * self.fwd_depth(1)
                    + 3 * self.L * _lg_sum(P + 1, P + steps))
        return [("prefill", n_prefill * self.seq_flops(P, 1), self.fwd_depth(P)),
                ("decode", float(decode_w), float(decode_d))]


def _check_step(**sizes):
    for name, v in sizes.items():
        _positive_int(name, v)


def _check_kl(kl_coef):
    check_number("kl_coef", kl_coef, low=0)


def _result(phases, processors):
    return WorkDepth(tuple(PhaseRounds(n, float(w), float(d), processors) for n, w, d in phases),
                     processors)


def grpo_step_workdepth(*, num_layers: int, hidden_size: int, num_heads: int, vocab_size: int,
                        intermediate_size: int | None = None, mlp: str = "gelu",
                        num_prompts: int, group_size: int, prompt_len: int, response_len: int,
                        kl_coef: float = 0.0, processors: int = 1, attention: str = "causal",
                        share_prefill: bool = True, num_params: int | None = None) -> WorkDepth:
    """Work and depth of each phase of one GRPO step with one update per batch.

    Args:
        num_layers, hidden_size, num_heads, vocab_size, intermediate_size: L, D, H, V, F
            (F defaults to 4 D); H must divide D.
        mlp: ``"relu"`` or ``"gelu"`` (two D x F matrices) or ``"swiglu"`` / ``"geglu"``
            (three, Llama / Gemma).
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
        ValueError: naming a non-positive size, an unknown ``mlp`` or ``attention``, a
            negative ``kl_coef``, or an absurd size: over 1e9 (1e4 layers, 1e8 prompt and
            1e6 response tokens, 2^63 - 1 processors), or a shape of over 1e15 parameters.
    """
    m = ShapeCosts(num_layers, hidden_size, num_heads, vocab_size, intermediate_size, mlp,
                   attention)
    _check_step(num_prompts=num_prompts, group_size=group_size, prompt_len=prompt_len,
                response_len=response_len, processors=processors)
    _check_kl(kl_coef)
    B, G, P, R = num_prompts, group_size, prompt_len, response_len
    T, n_seq = P + R, B * G
    phases = m.rollout(B, G, P, R, share_prefill)
    train_fwd_w = n_seq * m.seq_flops(T, T)
    train_fwd_d = m.fwd_depth(T) + m.sample_d
    if kl_coef > 0:
        phases.append(("reference", train_fwd_w, train_fwd_d))
    phases.append(("reward", float(n_seq * R), 1 + _lg(R)))
    phases.append(("advantages", float(6 * n_seq), 2 * _lg(G) + 6))
    phases.append(("train_forward", train_fwd_w, train_fwd_d))
    phases.append(("train_backward", 2 * train_fwd_w, train_fwd_d + _d_mm(n_seq * T)))
    phases.append(("optimizer", *m.optimizer(num_params)))
    return _result(phases, processors)


def ppo_step_workdepth(*, num_layers: int, hidden_size: int, num_heads: int, vocab_size: int,
                       intermediate_size: int | None = None, mlp: str = "gelu",
                       num_prompts: int, prompt_len: int, response_len: int,
                       ppo_epochs: int = 1, num_minibatches: int = 1, kl_coef: float = 0.0,
                       processors: int = 1, attention: str = "causal",
                       num_params: int | None = None) -> WorkDepth:
    """Work and depth of one PPO step with a critic of the policy's shape (book section
    :ref:`sec-critic-cost`).

    Same shape arguments as :func:`grpo_step_workdepth`; one completion per prompt. What the
    critic adds: a ``values`` pass at rollout time, and per update a critic forward, backward and
    optimizer step. ``ppo_epochs * num_minibatches`` updates run one after another, so their
    depths add up, while each epoch's work is one pass over the batch. GAE is costed in the
    vectorised form the library uses (a (R, R) discount matrix: work 2 B R^2, depth
    1 + ceil(log2 R) + 3); the reversed loop would have depth about 2 R.

    Returns:
        :class:`WorkDepth` with phases prefill, decode, [reference], reward, values, advantages,
        train_forward, train_backward, optimizer, critic_forward, critic_backward,
        critic_optimizer.
    Raises:
        ValueError: as :func:`grpo_step_workdepth`, or for ``num_minibatches > num_prompts``.
    """
    m = ShapeCosts(num_layers, hidden_size, num_heads, vocab_size, intermediate_size, mlp,
                   attention)
    _check_step(num_prompts=num_prompts, prompt_len=prompt_len, response_len=response_len,
                processors=processors, ppo_epochs=ppo_epochs, num_minibatches=num_minibatches)
    if num_params is not None:
        _positive_int("num_params", num_params)
    _check_kl(kl_coef)
    if num_minibatches > num_prompts:
        raise ValueError(f"num_minibatches={num_minibatches} exceeds num_prompts={num_prompts}")
    B, P, R, E, M = num_prompts, prompt_len, response_len, ppo_epochs, num_minibatches
    T, U = P + R, ppo_epochs * num_minibatches           # U sequential updates
    mb = math.ceil(B / M)
    phases = m.rollout(B, 1, P, R, True)
    policy_fwd_w, policy_fwd_d = B * m.seq_flops(T, T), m.fwd_depth(T) + m.sample_d
    critic_fwd_w = B * m.seq_flops(T, T, head=m.value_head)
    critic_fwd_d = m.fwd_depth(T)                       # same trunk; the (D, 1) head's depth
    #                                                     equals the LM head's (norm + dot of D)
    if kl_coef > 0:
        phases.append(("reference", policy_fwd_w, policy_fwd_d))
    phases.append(("reward", float(B * R), 1 + _lg(R)))
    phases.append(("values", critic_fwd_w, critic_fwd_d))
    phases.append(("advantages", float(2 * B * R * R + 4 * B * R), 1 + _lg(R) + 3))
    n_policy = m.n_params if num_params is None else num_params
    n_critic = n_policy - vocab_size * hidden_size + hidden_size    # value head for the LM head
    for prefix, fwd_w, fwd_d, n_par in (("train", policy_fwd_w, policy_fwd_d, n_policy),
                                        ("critic", critic_fwd_w, critic_fwd_d, n_critic)):
        opt_w, opt_d = m.optimizer(n_par)
        phases.append((f"{prefix}_forward", E * fwd_w, U * fwd_d))
        phases.append((f"{prefix}_backward", 2 * E * fwd_w, U * (fwd_d + _d_mm(mb * T))))
        phases.append(("optimizer" if prefix == "train" else "critic_optimizer",
                       U * opt_w, U * opt_d))
    return _result(phases, processors)


def expected_max_length(lengths, group_size: int) -> float:
    """E[max of ``group_size`` independent draws] from the empirical distribution of
    ``lengths`` (a 1-D or 2-D array, flattened): sum over the sorted sample x_(1) <= ... <= x_(n) of
    x_(k) ((k / n)^G - ((k - 1) / n)^G), exact for that distribution.

    Raises:
        ValueError: naming ``lengths`` (empty, negative or not real numbers) or
            ``group_size``.
    """
    x = np.sort(check_real_array("lengths", lengths, max_ndim=2, low=0).reshape(-1))
    check_int("group_size", group_size, 1)
    n = x.size
    k = np.arange(1, n + 1)
    weights = (k / n) ** group_size - ((k - 1) / n) ** group_size
    return float((x * weights).sum())


def _layer_depth(m: ModelConfig, n: int, moe: bool) -> int:
    """Rounds of one block for a query over a context of n positions."""
    d, norm = m.hidden_size, _lg(m.hidden_size) + 5
    act = _ACT_DEPTH[m.mlp]
    q_in = m.q_lora_rank if m.is_mla and m.q_lora_rank else d
    attn = (norm + _d_mm(d) + (_d_mm(q_in) if m.is_mla else 0) + _d_mm(m.head_size) + 1
            + (2 * _lg(n) + 3) + _d_mm(n) + _d_mm(m.num_attention_heads * m.head_size) + 1)
    if moe:
        f = m.moe_intermediate_size
        mlp = (norm + _d_mm(d) + _lg(m.num_experts) + _d_mm(d) + act + _d_mm(f)
               + _lg(m.num_experts_per_tok + m.num_shared_experts) + 1)
    else:
        mlp = norm + _d_mm(d) + act + _d_mm(m.intermediate_size) + 1
    return attn + mlp


def forward_depth(model: ModelConfig, n: int) -> int:
    """Rounds of a forward pass whose last query sees n positions: every layer, the head and
    the log-softmax over the vocabulary. Only attention depends on n: 3 ceil(log2 n) + 4 rounds
    per layer (softmax over n keys, then the weighted sum of n values).

    Raises:
        ValueError: ``model`` is not a :class:`ModelConfig`, or ``n`` is not an int >= 1."""
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    check_int("n", n, 1)
    m = model
    n_moe = m.num_moe_layers
    layers = (m.num_hidden_layers - n_moe) * _layer_depth(m, n, False)
    if n_moe:
        layers += n_moe * _layer_depth(m, n, True)
    return layers + _lg(m.hidden_size) + 5 + _d_mm(m.hidden_size) + 2 * _lg(m.vocab_size) + 3


def rl_step_workdepth(algo: str = "grpo", *, processors: int = 1, **estimate_kwargs) -> WorkDepth:
    """Work (FLOPs) and depth (rounds) of each phase of the step that
    :func:`estimate_rl_step` describes (same arguments), with Brent's bounds for
    ``processors``. Decode depth uses the longest response of the batch (of the B G quantiles
    the estimate takes from a length distribution). ``processors`` counts units that each do
    one operation per round, not GPUs: a GPU is many thousands of them.

    Raises:
        ValueError: as :func:`estimate_rl_step`, or a bad ``processors``.
    """
    check_int("processors", processors, 1)
    est = estimate_rl_step(algo, **estimate_kwargs)
    models = {"actor": resolve_model(estimate_kwargs["actor"], "actor")}
    for key in ("critic", "reference", "reward"):
        v = estimate_kwargs.get(key)
        models[key] = models["actor"] if v is None else resolve_model(v, key)
    P = estimate_kwargs["prompt_len"]
    n_seq = estimate_kwargs["prompts"] * estimate_kwargs["group_size"]
    R = int(sample_lengths(estimate_kwargs["response_len"], n_seq).max())   # the estimate's
    T = P + R
    n_tokens = estimate_kwargs["prompts"] * estimate_kwargs["group_size"] * T
    phases = []
    for p in est.phases:
        m = models.get(p.model, models["actor"])
        if p.name == "rollout_prefill":
            depth = forward_depth(m, P)
        elif p.name == "rollout_decode":      # R - 1 passes; only attention grows with context
            ctx = np.arange(P + 1, P + R, dtype=np.float64)
            lg = np.where(ctx > 1, np.ceil(np.log2(np.maximum(ctx, 1))), 0)
            depth = (R - 1) * forward_depth(m, 1) + 3 * m.num_hidden_layers * float(lg.sum())
        elif p.name.endswith("_update"):
            fwd = forward_depth(m, T)
            epochs = estimate_kwargs.get("ppo_epochs", 1)
            depth = epochs * (fwd + fwd + _d_mm(n_tokens) + _ADAMW_DEPTH + _d_mm(m.num_params()))
        elif p.name == "advantages":
            depth = 2 * _lg(estimate_kwargs["group_size"]) + 6
        elif p.name == "weight_sync":
            depth = 1
        else:                                           # log-probs, values, reward forward
            depth = forward_depth(m, T)
        phases.append(PhaseRounds(p.name, float(p.flops), float(depth), processors))
    return WorkDepth(tuple(phases), processors)
