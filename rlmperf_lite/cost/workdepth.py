"""Work and depth of an RL step of a real model, and the straggler effect of response lengths
(book Chapter 5).

Work W is the FLOPs of :func:`rlmperf_lite.cost.estimate_rl_step`'s phases. Depth 𝒟 counts
PRAM rounds with the conventions of :mod:`rlmperf_lite.workdepth` (a dot product of length k:
1 + ceil(log2 k) rounds; softmax over n: 2 ceil(log2 n) + 3; a norm over D: ceil(log2 D) + 5),
extended to grouped-query attention (same depth as multi-head: heads are independent) and to
mixture-of-experts layers (router dot product, top-k over E experts, the expert MLP, the sum of
k + shared outputs). Decoding one response of R tokens is R - 1 forward passes one after
another, so its depth grows with R and with the number of layers, and no number of processors
removes it. A group (and a rollout batch) finishes with its longest response: with lengths drawn
independently, the expected maximum of G draws (:func:`expected_max_length`) sets the decode
depth.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_int, check_real_array
from ..workdepth import _ACT_DEPTH, _ADAMW_DEPTH, PhaseCost, WorkDepth, _d_mm, _lg
from .estimate import estimate_rl_step, sample_lengths
from .presets import resolve_model
from .model import ModelConfig

__all__ = ["expected_max_length", "forward_depth", "rl_step_workdepth"]


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
        phases.append(PhaseCost(p.name, float(p.flops), float(depth), processors))
    return WorkDepth(tuple(phases), processors)
