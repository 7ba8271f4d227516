"""The whole tiny LM with tensor-parallel blocks, from tokens to per-token log-probs and back,
equal to :func:`rlmperf_lite.nn.logps_forward` / :func:`~rlmperf_lite.nn.logps_backward`
(book section :ref:`sec-tp-grpo-step`).

The blocks are split as in :mod:`rlmperf_lite.parallel.tensor`; the embeddings, the final norm
and the LM head are replicated: every tp rank computes them on the same inputs, so their
gradients come out equal on every rank with no communication (Megatron also splits the
embedding and LM head over the vocabulary, Shoeybi et al. 2019 section 3; at V = 14 it would
only add collectives). Bytes each rank sends, with S = n T D x itemsize:

    tp:        4 L x 2 (tp-1)/tp S     2 all-reduces per block forward, 2 per block backward
    tp + sp:   4 L x 2 (tp-1)/tp S     the same, as all-gathers and reduce-scatters
               + 2 (tp-1)/tp S         all-gather of the residual before the replicated ln_f, and
                                       of its gradient before the replicated embedding backward
               + 2 L x 2 (tp-1)/tp D itemsize   all-reduce of the norm weights' gradients
"""
from __future__ import annotations


from ..nn.layers import embedding_backward, embedding_forward, rmsnorm_backward, rmsnorm_forward
from ..nn.model import check_tokens, lm_head_backward, lm_head_forward
from .tensor import (check_tp, each_rank, gather_seq, sequence_shards, tp_block_backward,
                     tp_block_forward)

__all__ = ["tp_logps_forward", "tp_logps_backward"]


def tp_logps_forward(shards_per_rank: list, tokens, cfg, group, temperature: float = 1.0,
                     sp: bool = False):
    """Per-token log-probs of ``tokens`` (n, T) on the tp ranks of ``group``.

    Args:
        shards_per_rank: rank r's weights, from
            :func:`~rlmperf_lite.parallel.shard_params_tp`.
        temperature: > 0, as in :func:`rlmperf_lite.nn.logps_forward`.
        sp: sequence parallelism in the blocks (T must be divisible by tp).
    Returns:
        one (n, T - 1) per_token_logps per rank (equal on every rank) and a cache for
        :func:`tp_logps_backward`.
    Raises:
        ValueError: bad ``tokens`` or ``temperature``; ``tp`` (the group's size) not dividing
            num_heads, intermediate_size or (with ``sp``) T; a wrong number of shards.
    """
    tokens = check_tokens(tokens, cfg)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature!r}")
    tp = group.size
    check_tp(cfg, tp)
    if len(shards_per_rank) != tp:
        raise ValueError(f"shards_per_rank needs one dict per rank of {group.name} ({tp}), got "
                         f"{len(shards_per_rank)}")
    x, c_emb = each_rank(lambda s: embedding_forward(s["wte"], s["wpe"], tokens), shards_per_rank)
    if sp:                                         # each rank keeps its own positions (no comm)
        x = [sequence_shards(x_r, tp)[r] for r, x_r in enumerate(x)]     # (n, T/tp, D)
    blocks = []
    for i in range(cfg.num_layers):
        x, c_block = tp_block_forward(x, shards_per_rank, i, cfg, group, sp)
        blocks.append(c_block)
    if sp:
        x = gather_seq(group, x)                  # the replicated head needs every position
    hf, c_lnf = each_rank(lambda x_r, s: rmsnorm_forward(x_r, s["ln_f"], cfg.norm_eps),
                          x, shards_per_rank)                                # (n, T, D)
    logps, c_head = each_rank(lambda h, s: lm_head_forward(h, s["lm_head"], tokens, temperature),
                              hf, shards_per_rank)                           # (n, T-1)
    return logps, {"emb": c_emb, "blocks": blocks, "lnf": c_lnf, "head": c_head,
                   "group": group, "sp": sp}


def tp_logps_backward(dlogps_per_rank: list, cache) -> list:
    """One dLoss/dper_token_logps (n, T - 1) per rank (equal on every rank, as the replicated
    loss makes them) -> one dict of weight gradients per rank, keys and shapes of the rank's
    shard: sharded weights get their shard's gradient, replicated weights the full one."""
    group, sp, tp = cache["group"], cache["sp"], cache["group"].size
    dhf, dlm_head = each_rank(lm_head_backward, dlogps_per_rank, cache["head"])
    dx, dln_f = each_rank(rmsnorm_backward, dhf, cache["lnf"])               # (n, T, D)
    if sp:          # the head is replicated, so dx is equal on every rank: keep own positions
        dx = [sequence_shards(d, tp)[r] for r, d in enumerate(dx)]
    grads = [{"lm_head": a, "ln_f": b} for a, b in zip(dlm_head, dln_f)]
    for c_block in reversed(cache["blocks"]):
        dx, block_grads = tp_block_backward(dx, c_block)
        for g, bg in zip(grads, block_grads):
            g.update(bg)
    if sp:
        dx = gather_seq(group, dx)                # the replicated embedding needs every position
    for g, d, c in zip(grads, dx, cache["emb"]):
        g["wte"], g["wpe"] = embedding_backward(d, c)
    return grads
