"""Tensor parallelism (Megatron-LM) and sequence parallelism on simulated ranks: one transformer
block split over the tp ranks of a group, equal to :func:`rlmperf_lite.nn.block_forward`
(book sections :ref:`sec-tensor-parallel` and :ref:`sec-sequence-parallel`).

Tensor parallelism, Shoeybi et al. 2019 (arXiv 1909.08053) section 3, Fig. 3: the MLP's
``w_up`` is split by columns and ``w_down`` by rows, so each rank computes a partial sum of the
MLP output from its F/tp hidden units and one all-reduce (the paper's ``g``) adds them; attention
is split by heads, ``wqkv`` by columns (the q, k and v blocks each by head groups) and ``wo`` by
rows, with one more all-reduce. In the backward pass ``f`` (an identity forward) all-reduces the
partial gradients of the replicated norm outputs: 2 all-reduces of (n, T, D) per block forward
and 2 per block backward. Norm weights are replicated and see replicated inputs, so their
gradients are already equal on every rank (no communication).

Sequence parallelism, Korthikanti et al. 2022 (arXiv 2205.05198) section 4.2.2, Fig. 5: the
norm regions hold only T/tp positions per rank; each all-reduce becomes a reduce-scatter along
the sequence after the row-parallel layer, and an all-gather before the column-parallel layer
(and the reverse in backward): the same bytes, 1/tp of the norm-region activations. The norm
weights now see only T/tp positions per rank, so their gradients are all-reduced over the group.

Every exchange goes through :class:`~rlmperf_lite.parallel.collectives.ProcessGroup`, so its
``log`` counts the bytes. Lists index tp ranks: ``xs[r]`` is rank r's array.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_int
from ..nn.layers import (activation_backward, activation_forward, attention_backward,
                         attention_forward, linear_backward, linear_forward, rmsnorm_backward,
                         rmsnorm_forward)

__all__ = ["check_tp", "is_tp_sharded", "shard_params_tp", "unshard_grads_tp", "sequence_shards",
           "tp_block_forward",
           "tp_block_backward", "resident_activation_bytes"]

# weight name -> split axis: 1 column-parallel (outputs split), 0 row-parallel (inputs split)
_SPLIT_AXIS = {"wqkv": 1, "wo": 0, "w_up": 1, "w_down": 0}


def check_tp(cfg, tp: int) -> None:
    """Raise ValueError naming ``tp`` unless it is an int >= 1 dividing ``num_heads`` (heads are
    split) and ``intermediate_size`` (MLP columns are split)."""
    check_int("tp", tp, 1)
    for name in ("num_heads", "intermediate_size"):
        if getattr(cfg, name) % tp:
            raise ValueError(f"tp={tp} must divide {name}={getattr(cfg, name)}: each tensor "
                             f"parallel rank holds {name}/tp of them")


def is_tp_sharded(name: str) -> bool:
    """True for the weights split over tp ranks (wqkv, wo, w_up, w_down); the rest is
    replicated."""
    return name.split(".")[-1] in _SPLIT_AXIS


def shard_params_tp(params: dict, cfg, tp: int) -> list:
    """One weight dict per tp rank, same keys as ``params``: h{i}.wqkv (D, 3 D/tp) holding the
    rank's heads of q, k and v ([q_r|k_r|v_r], head-major), h{i}.wo (D/tp, D), h{i}.w_up
    (D, F/tp), h{i}.w_down (F/tp, D); norms, embeddings and lm_head copied whole.

    Raises:
        ValueError: naming ``tp`` (see :func:`check_tp`).
    """
    check_tp(cfg, tp)
    D, H, Dh = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    shards = [{} for _ in range(tp)]
    for name, w in params.items():
        kind = name.split(".")[-1]
        if kind == "wqkv":           # rank r: heads r H/tp .. (r+1) H/tp of each of q, k and v
            parts = [p.reshape(D, -1) for p in np.split(w.reshape(D, 3, H, Dh), tp, axis=2)]
        elif kind in _SPLIT_AXIS:
            parts = np.split(w, tp, axis=_SPLIT_AXIS[kind])
        else:
            parts = [w] * tp
        for shard, part in zip(shards, parts):
            shard[name] = part.copy()
    return shards


def unshard_grads_tp(grads_per_rank: list, cfg) -> dict:
    """The full dict from per-rank dicts (gradients or weights): the inverse of
    :func:`shard_params_tp`; a replicated entry is taken from rank 0. A check and a view for the
    lab, not a step of training, so nothing is counted."""
    tp = len(grads_per_rank)
    D, Dh = cfg.hidden_size, cfg.head_dim
    full = {}
    for name in grads_per_rank[0]:
        parts = [g[name] for g in grads_per_rank]
        kind = name.split(".")[-1]
        if kind == "wqkv":
            heads = [p.reshape(D, 3, cfg.num_heads // tp, Dh) for p in parts]
            full[name] = np.concatenate(heads, axis=2).reshape(D, 3 * D)
        elif kind in _SPLIT_AXIS:
            full[name] = np.concatenate(parts, axis=_SPLIT_AXIS[kind])
        else:
            full[name] = parts[0].copy()
    return full


def sequence_shards(x: np.ndarray, tp: int) -> list:
    """(n, T, D) -> tp arrays (n, T/tp, D), rank r holding positions r T/tp .. (r+1) T/tp - 1
    (a local slice of a replicated array, no communication).

    Raises:
        ValueError: naming ``tp`` if it does not divide T.
    """
    check_int("tp", tp, 1)
    if x.shape[1] % tp:
        raise ValueError(f"tp={tp} must divide the sequence length T={x.shape[1]} for sequence "
                         "parallelism (sp=True)")
    return np.split(x, tp, axis=1)


def gather_seq(group, xs: list) -> list:
    """All-gather along the sequence: rank r's (n, T/tp, D) -> (n, T, D) on every rank. Arrays
    travel sequence-first, Megatron's [s, b, h] layout, so rank r's chunk is its positions."""
    n, Tl, D = xs[0].shape
    full = group.all_gather([np.moveaxis(x, 1, 0).ravel() for x in xs])       # (T n D,)
    return [np.moveaxis(f.reshape(group.size * Tl, n, D), 0, 1) for f in full]


def _scatter_seq(group, xs: list) -> list:
    """Reduce-scatter along the sequence: partial sums (n, T, D) -> rank r's positions of the
    sum, (n, T/tp, D)."""
    n, T, D = xs[0].shape
    parts = group.reduce_scatter([np.moveaxis(x, 1, 0) for x in xs])          # (T/tp n D,)
    return [np.moveaxis(p.reshape(T // group.size, n, D), 0, 1) for p in parts]


# ---- one rank's share: attention over its heads, the MLP over its F/tp columns ----------------
def _attention_backward(dout, cache):
    """:func:`rlmperf_lite.nn.layers.attention_backward` on this rank's heads, returning
    (dx partial, (dwqkv, dwo)) as :func:`each_rank` expects."""
    dx, dwqkv, dwo = attention_backward(dout, cache)
    return dx, (dwqkv, dwo)


def _mlp_forward(h, w_up, w_down, kind):
    """h (n, T, D) -> this rank's partial MLP output (n, T, D) from its F/tp hidden units."""
    n, T, D = h.shape
    u, c_up = linear_forward(h.reshape(n * T, D), w_up)                  # (NT, F/tp)
    z, c_act = activation_forward(u, kind)
    m, c_down = linear_forward(z, w_down)                                # (NT, D) partial
    return m.reshape(n, T, D), (c_up, c_act, c_down, kind)


def _mlp_backward(dm, cache):
    c_up, c_act, c_down, kind = cache
    n, T, D = dm.shape
    dz, dw_down = linear_backward(dm.reshape(n * T, D), c_down)
    dh, dw_up = linear_backward(activation_backward(dz, c_act, kind), c_up)
    return dh.reshape(n, T, D), (dw_up, dw_down)                         # dh partial


def each_rank(fn, *per_rank_args):
    """fn on every rank's arguments, returning ([out_r], [second_r])."""
    pairs = [fn(*args) for args in zip(*per_rank_args)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


# ---- the block -------------------------------------------------------------------------------
def tp_block_forward(xs: list, shards_per_rank: list, i: int, cfg, group, sp: bool = False):
    """Block ``i`` on the tp ranks of ``group``: per-rank inputs -> (per-rank outputs, cache).

    Without sequence parallelism ``xs[r]`` is the full residual stream (n, T, D), equal on every
    rank; with ``sp`` it is rank r's positions (n, T/tp, D) (:func:`sequence_shards`). Output has
    the input's layout. Bytes per rank (S = n T D x itemsize): 2 all-reduces, 2 (tp-1)/tp S each;
    with ``sp`` 2 all-gathers and 2 reduce-scatters, (tp-1)/tp S each: the same total.

    Raises:
        ValueError: naming ``tp`` (see :func:`check_tp`) or ``shards_per_rank`` if the lists do
            not hold one entry per rank of ``group``.
    """
    tp = group.size
    check_tp(cfg, tp)
    if len(shards_per_rank) != tp or len(xs) != tp:
        raise ValueError(f"shards_per_rank and xs need one entry per rank of {group.name} "
                         f"({tp}), got {len(shards_per_rank)} and {len(xs)}")
    W = [{k.split(".")[-1]: v for k, v in s.items() if k.startswith(f"h{i}.")}
         for s in shards_per_rank]                                       # rank r's block i
    eps, heads = cfg.norm_eps, cfg.num_heads // tp
    # after a row-parallel layer: Shoeybi's g (all-reduce), with sp Korthikanti's g-bar
    reduce = (lambda a: _scatter_seq(group, a)) if sp else group.all_reduce
    c = {"i": i, "group": group, "sp": sp}
    h, c["ln1"] = each_rank(lambda x, w: rmsnorm_forward(x, w["ln1"], eps), xs, W)
    if sp:
        h = gather_seq(group, h)                  # Korthikanti's g: (n, T, D) on every rank
    a, c["att"] = each_rank(lambda h_, w: attention_forward(h_, w["wqkv"], w["wo"], heads), h, W)
    xs = [x + a_ for x, a_ in zip(xs, reduce(a))]                        # residual
    h, c["ln2"] = each_rank(lambda x, w: rmsnorm_forward(x, w["ln2"], eps), xs, W)
    if sp:
        h = gather_seq(group, h)
    m, c["mlp"] = each_rank(lambda h_, w: _mlp_forward(h_, w["w_up"], w["w_down"], cfg.activation),
                            h, W)
    xs = [x + m_ for x, m_ in zip(xs, reduce(m))]
    return xs, c


def tp_block_backward(dxs: list, cache):
    """Per-rank gradients of block i's output (layout as its output) -> (per-rank gradients of
    its input, per-rank dicts of the gradients of the rank's weights, keys ``h{i}.*``).

    Sharded weights get their shard's gradient; norm weights the full gradient on every rank
    (with ``sp``, after an all-reduce of D x itemsize bytes each, as Megatron does)."""
    i, group, sp = cache["i"], cache["group"], cache["sp"]
    grads = [{} for _ in range(group.size)]
    # backward of g (identity), with sp of g-bar (all-gather)
    gather = (lambda d: gather_seq(group, d)) if sp else (lambda d: d)
    # before the norms: backward of f (all-reduce), with sp of Korthikanti's g (reduce-scatter)
    reduce = (lambda d: _scatter_seq(group, d)) if sp else group.all_reduce
    dh, g_mlp = each_rank(_mlp_backward, gather(dxs), cache["mlp"])
    dx2, dln2 = each_rank(rmsnorm_backward, reduce(dh), cache["ln2"])
    dxs = [dx + d for dx, d in zip(dxs, dx2)]
    dh, g_att = each_rank(_attention_backward, gather(dxs), cache["att"])
    dx1, dln1 = each_rank(rmsnorm_backward, reduce(dh), cache["ln1"])
    if sp:                                         # each rank saw T/tp positions: sum over them
        dln1, dln2 = group.all_reduce(dln1), group.all_reduce(dln2)
    for r, g in enumerate(grads):
        g[f"h{i}.w_up"], g[f"h{i}.w_down"] = g_mlp[r]
        g[f"h{i}.wqkv"], g[f"h{i}.wo"] = g_att[r]
        g[f"h{i}.ln1"], g[f"h{i}.ln2"] = dln1[r], dln2[r]
    return [dx + d for dx, d in zip(dxs, dx1)], grads


def resident_activation_bytes(cache, rank: int = 0) -> dict:
    """Bytes of activations a block's cache keeps on ``rank`` for the backward pass (weights
    excluded): ``norm_region_bytes`` (the two RMSNorms' normalised inputs and inverse rms,
    (n, T, D) + (n, T, 1) each, 1/tp of that with ``sp``), ``tp_region_bytes`` (inputs of the
    linear layers, q, k, v, attention probabilities, MLP hidden units of the rank's heads and
    columns; the gathered (n, T, D) inputs are kept, so the same with or without ``sp``) and
    ``total_bytes``. Korthikanti et al. 2022, section 4.2.2 (which keeps only the rank's shard of
    the gathered inputs and gathers them again in backward: less memory, more bytes)."""
    norm = sum(c[0].nbytes + c[1].nbytes for c in (cache["ln1"][rank], cache["ln2"][rank]))
    x, _, _, q, k, v, p, y, _ = cache["att"][rank]
    c_up, c_act, c_down, _ = cache["mlp"][rank]
    act = c_act if isinstance(c_act, tuple) else (c_act,)
    tp_region = sum(a.nbytes for a in (x, q, k, v, p, y, c_up[0], *act, c_down[0]))
    return {"norm_region_bytes": norm, "tp_region_bytes": tp_region,
            "total_bytes": norm + tp_region}
