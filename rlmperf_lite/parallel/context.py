"""Context parallelism by ring attention: the sequence split over cp ranks, K/V passed round a
ring (Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv 2310.01889, §3 and
Algorithm 1; book section :ref:`sec-context-parallel`).

Rank r holds the queries, keys and values of its share of the T positions, each (n, H, T/cp, Dh).
At each of cp steps every rank attends its queries to the K/V chunk it currently holds and then
passes that chunk to rank r + 1, so after cp steps every query has met every key while no rank
ever held more than two K/V chunks. The partial results are merged with the online-softmax rule
(Milakov & Gimelshein 2018, arXiv 1805.02867, Algorithm 3) in the log-sum-exp form that
FlashAttention-2 saves for its backward (Dao 2023, arXiv 2307.08691, §3.1, Algorithms 1-2):

    lse = logaddexp(lse, lse_blk)
    out = exp(lse_old - lse) * out + exp(lse_blk - lse) * out_blk

Layouts. ``"contiguous"``: rank r holds positions [r T/cp, (r + 1) T/cp). With a causal mask
its queries see only the chunks of ranks 0..r, so rank 0 computes 1 block and rank cp - 1
computes cp: the last rank sets the pace and the others wait. ``"zigzag"``: the sequence is cut
into 2 cp pieces and rank r holds pieces r and 2 cp - 1 - r (Llama 3, Dubey et al. 2024, arXiv
2407.21783, §3.3.2; zhuzilin/ring-flash-attention ``zigzag_ring_flash_attn.py``); every rank
then computes its diagonal block and cp - 1 half blocks, the same work
(:func:`ring_attention_work`).

Bytes: forward, each rank sends its K and V chunk cp - 1 times, (cp - 1) * 2 * chunk bytes;
backward, K, V and their gradient accumulators travel together (cp - 1 hops) and the gradients
take one last hop home, (cp - 1) * 4 + 2 chunk bytes.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_choice, check_int
from ..nn.flops import mm
from ..nn.layers import linear_backward, linear_forward
from .collectives import ProcessGroup

__all__ = ["chunk_positions", "split_sequence", "merge_sequence", "ring_attention_work",
           "ring_attention_forward", "ring_attention_backward", "cp_attention_forward",
           "cp_attention_backward"]

LAYOUTS = ("contiguous", "zigzag")


# ---- which positions each rank holds ----------------------------------------------------------
def chunk_positions(T: int, cp: int, layout: str = "contiguous") -> list:
    """The global positions (T/cp,) int held by each of the cp ranks, in the rank's local order.

    Raises:
        ValueError: T not divisible by cp (by 2 cp for ``"zigzag"``), or an unknown layout.
    """
    check_int("cp", cp, 1)
    check_int("T", T, 1)
    check_choice("layout", layout, LAYOUTS)
    pieces = cp if layout == "contiguous" else 2 * cp
    if T % pieces:
        raise ValueError(f"T={T} must be divisible by {'cp' if pieces == cp else '2 * cp'} "
                         f"(cp={cp}, layout={layout!r}) so that every rank holds T/cp positions")
    piece = np.arange(T).reshape(pieces, T // pieces)                    # (pieces, T/pieces)
    if layout == "contiguous":
        return [piece[r] for r in range(cp)]
    return [np.concatenate([piece[r], piece[2 * cp - 1 - r]]) for r in range(cp)]


def _check_axis(axis, ndim: int, what: str) -> None:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or \
            not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis!r} is not an axis of {what}: pass the sequence axis as "
                         f"an int in [-{ndim}, {ndim}), or an x with that axis (the default -2 "
                         f"is T of (n, H, T, Dh))")


def split_sequence(x, cp: int, layout: str = "contiguous", axis: int = -2) -> list:
    """Rank r's share of ``x`` along the sequence ``axis`` (default -2: (n, H, T, Dh)).

    Raises:
        ValueError: T not divisible by cp (2 cp for zigzag), or ``axis`` not an axis of ``x``.
    """
    x = np.asarray(x)
    _check_axis(axis, x.ndim, f"x of shape {x.shape}")
    T = x.shape[axis]
    return [np.take(x, pos, axis=axis) for pos in chunk_positions(T, cp, layout)]


def merge_sequence(chunks: list, layout: str = "contiguous", axis: int = -2) -> np.ndarray:
    """Inverse of :func:`split_sequence`: the full sequence from the cp per-rank chunks.

    Raises:
        ValueError: ``chunks`` empty or of different shapes, ``axis`` not one of their axes, or
            the layout's errors.
    """
    if not isinstance(chunks, (list, tuple)) or not chunks:
        raise ValueError("chunks must be a non-empty list of the cp per-rank chunks")
    chunks = [np.asarray(c) for c in chunks]
    if any(c.shape != chunks[0].shape for c in chunks):
        raise ValueError(f"chunks must all have the same shape (as split_sequence returns them), "
                         f"got {[c.shape for c in chunks]}")
    _check_axis(axis, chunks[0].ndim, f"chunks of shape {chunks[0].shape}")
    cp = len(chunks)
    T = chunks[0].shape[axis] * cp
    out = np.empty_like(np.concatenate(chunks, axis=axis))              # (..., T, ...)
    for pos, c in zip(chunk_positions(T, cp, layout), chunks):
        idx = [slice(None)] * out.ndim
        idx[axis] = pos
        out[tuple(idx)] = c
    return out


def ring_attention_work(cp: int, layout: str = "contiguous", causal: bool = True) -> np.ndarray:
    """(cp,) float: score blocks each rank computes, in units of one (T/cp) x (T/cp) block.

    Contiguous causal: rank r computes its diagonal block (masked but computed densely, as
    ``layers.attention_forward`` does) and the r full blocks before it, r + 1. Zigzag: the
    diagonal block and cp - 1 half blocks, (cp + 1) / 2 on every rank. Both total
    cp (cp + 1) / 2. Without a causal mask every rank computes cp blocks.
    """
    check_int("cp", cp, 1)
    check_choice("layout", layout, LAYOUTS)
    if not causal:
        return np.full(cp, float(cp))
    if layout == "contiguous":
        return np.arange(1, cp + 1, dtype=float)
    return np.full(cp, (cp + 1) / 2)


# ---- one block: queries of a rank against the K/V chunk it holds -------------------------------
def _block(pos_q, pos_k, causal):
    """Rows (queries) and columns (keys) of a block that take part, and the mask among them."""
    allowed = pos_q[:, None] >= pos_k[None, :] if causal else \
        np.ones((len(pos_q), len(pos_k)), bool)                           # (Tc, Tc)
    rows, cols = allowed.any(axis=1), allowed.any(axis=0)
    return rows, cols, allowed[np.ix_(rows, cols)]


def _scores(q, k, mask):
    """Scaled scores q k^T / sqrt(Dh), -inf where the mask forbids: (n, H, R, C)."""
    s = mm(q, k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(q.shape[-1]))    # (n, H, R, C)
    return np.where(mask, s, -np.inf)


def _check_chunks(q_chunks, k_chunks, v_chunks, group):
    cp = group.size
    for name, xs in (("q_chunks", q_chunks), ("k_chunks", k_chunks), ("v_chunks", v_chunks)):
        if len(xs) != cp:
            raise ValueError(f"{name} must hold one chunk per rank (cp={cp}), got {len(xs)}")
        if any(np.ndim(x) != 4 for x in xs):
            raise ValueError(f"{name}: every chunk must be (n, H, T/cp, Dh)")
    lengths = [x.shape[2] for x in q_chunks]
    if any(x.shape != q_chunks[0].shape for x in q_chunks):
        raise ValueError(f"every rank must hold T/cp positions of the same (n, H, T/cp, Dh) shape; "
                         f"got chunk lengths {lengths}: T must be divisible by cp={cp}")
    for name, xs in (("k_chunks", k_chunks), ("v_chunks", v_chunks)):
        if any(x.shape != q_chunks[0].shape for x in xs):
            raise ValueError(f"{name} must have the shape of the q_chunks, "
                             f"{q_chunks[0].shape} (n, H, T/cp, Dh): self-attention, K/V at the "
                             f"same positions as Q; got {[x.shape for x in xs]}")


def ring_attention_forward(q_chunks, k_chunks, v_chunks, group: ProcessGroup,
                           causal: bool = True, layout: str = "contiguous"):
    """Ring attention over cp = ``group.size`` ranks.

    Args:
        q_chunks, k_chunks, v_chunks: cp arrays (n, H, T/cp, Dh), rank r's share of the sequence
            in ``layout`` (see :func:`split_sequence`).
    Returns:
        (out_chunks, cache) — out_chunks, cp arrays (n, H, T/cp, Dh), softmax(q k^T / sqrt(Dh)) v
        for rank r's queries; cache, a dict for :func:`ring_attention_backward`, whose
        ``cache["work"]`` (cp,) holds the score blocks each rank computed (units of a (T/cp)^2
        block, cf. :func:`ring_attention_work`), ``cache["work_by_step"]`` (cp, cp) the same
        per ring step and rank, and ``cache["kv_owner"]`` (cp, cp) int the rank whose K/V chunk
        each rank held at each step.
    Raises:
        ValueError: chunks of unequal length (T not divisible by cp) or a bad layout.
    """
    _check_chunks(q_chunks, k_chunks, v_chunks, group)
    cp, (n, H, Tc, _) = group.size, q_chunks[0].shape
    pos = chunk_positions(cp * Tc, cp, layout)
    out = [np.zeros_like(q) for q in q_chunks]                           # cp x (n, H, Tc, Dh)
    lse = [np.full((n, H, Tc), -np.inf, dtype=q.dtype) for q in q_chunks]  # cp x (n, H, Tc)
    kv = [np.stack([k, v]) for k, v in zip(k_chunks, v_chunks)]          # cp x (2, n, H, Tc, Dh)
    work = np.zeros((cp, cp))                                            # (step, rank)
    owner = np.zeros((cp, cp), dtype=int)                                # (step, rank)
    for step in range(cp):
        for r in range(cp):
            j = owner[step, r] = (r - step) % cp                         # owner of the K/V held
            rows, cols, mask = _block(pos[r], pos[j], causal)
            if not rows.any():
                continue                                                 # all in the future
            k, v = kv[r][0][:, :, cols], kv[r][1][:, :, cols]            # (n, H, C, Dh)
            s = _scores(q_chunks[r][:, :, rows], k, mask)                # (n, H, R, C)
            lse_blk = np.logaddexp.reduce(s, axis=-1)                    # (n, H, R)
            out_blk = mm(np.exp(s - lse_blk[..., None]), v)              # (n, H, R, Dh)
            lse_new = np.logaddexp(lse[r][:, :, rows], lse_blk)          # (n, H, R)
            out[r][:, :, rows] = (np.exp(lse[r][:, :, rows] - lse_new)[..., None] *
                                  out[r][:, :, rows] +
                                  np.exp(lse_blk - lse_new)[..., None] * out_blk)
            lse[r][:, :, rows] = lse_new
            work[step, r] = rows.sum() * cols.sum() / Tc ** 2
        if step < cp - 1:                                                # pass K/V to r + 1
            kv = _ring_pass(kv, group)
    cache = {"q": list(q_chunks), "k": list(k_chunks), "v": list(v_chunks), "out": out,
             "lse": lse, "pos": pos, "causal": causal, "work": work.sum(axis=0),
             "work_by_step": work, "kv_owner": owner}
    return out, cache


def _ring_pass(bufs: list, group: ProcessGroup) -> list:
    """Every rank r sends its buffer to rank r + 1 (all sends of a step happen together)."""
    cp = group.size
    received = [None] * cp
    for r in range(cp):
        received[(r + 1) % cp] = group.send(bufs[r], r, (r + 1) % cp)
    return received


def ring_attention_backward(dout_chunks, cache, group: ProcessGroup):
    """Ring backward: K/V travel again, now with their gradient accumulators dK, dV, which every
    rank adds its queries' share to; after cp steps one more hop brings dK, dV home. Uses the
    saved lse and D = rowsum(dout * out) (FlashAttention-2, Algorithm 2).

    Args:
        dout_chunks: cp arrays (n, H, T/cp, Dh).
    Returns:
        dq_chunks, dk_chunks, dv_chunks — each cp arrays (n, H, T/cp, Dh).
    """
    cp, pos, causal = group.size, cache["pos"], cache["causal"]
    q, lse = cache["q"], cache["lse"]
    delta = [(do * o).sum(axis=-1) for do, o in zip(dout_chunks, cache["out"])]  # (n, H, Tc)
    dq = [np.zeros_like(x) for x in q]                                   # cp x (n, H, Tc, Dh)
    # the travelling buffer: K, V, dK, dV of the chunk's owner
    buf = [np.stack([k, v, np.zeros_like(k), np.zeros_like(v)])          # (4, n, H, Tc, Dh)
           for k, v in zip(cache["k"], cache["v"])]
    for step in range(cp):
        for r in range(cp):
            j = (r - step) % cp
            rows, cols, mask = _block(pos[r], pos[j], causal)
            if not rows.any():
                continue
            k, v = buf[r][0][:, :, cols], buf[r][1][:, :, cols]          # (n, H, C, Dh)
            qr, do = q[r][:, :, rows], dout_chunks[r][:, :, rows]        # (n, H, R, Dh)
            p = np.exp(_scores(qr, k, mask) - lse[r][:, :, rows][..., None])  # (n, H, R, C)
            dp = mm(do, v.transpose(0, 1, 3, 2))                         # (n, H, R, C)
            ds = p * (dp - delta[r][:, :, rows][..., None]) / np.sqrt(qr.shape[-1])
            dq[r][:, :, rows] += mm(ds, k)                               # (n, H, R, Dh)
            buf[r][2][:, :, cols] += mm(ds.transpose(0, 1, 3, 2), qr)    # dK (n, H, C, Dh)
            buf[r][3][:, :, cols] += mm(p.transpose(0, 1, 3, 2), do)     # dV (n, H, C, Dh)
        if step < cp - 1:
            buf = _ring_pass(buf, group)
    if cp > 1:                                       # rank r holds r + 1's dK, dV: send home
        buf = _ring_pass([b[2:] for b in buf], group)
    else:
        buf = [b[2:] for b in buf]
    return dq, [b[0] for b in buf], [b[1] for b in buf]


# ---- the attention layer with its projections, context parallel ------------------------------
def cp_attention_forward(x_chunks, wqkv, wo, num_heads: int, group: ProcessGroup,
                         layout: str = "contiguous"):
    """``layers.attention_forward`` with the sequence split over the ranks of ``group``.

    Each rank projects its own positions (the weights are replicated: the cp group is a data
    parallel group for them), runs :func:`ring_attention_forward`, then projects the output.

    Args:
        x_chunks: cp arrays (n, T/cp, D), rank r's positions in ``layout``.
        wqkv: (D, 3D) laid out [q|k|v], each head-major.
        wo: (D, D).
    Returns:
        out_chunks — cp arrays (n, T/cp, D) (merge_sequence(out, layout, axis=1) equals
        ``attention_forward(x, wqkv, wo, H)[0]``), and the cache.
    Raises:
        ValueError: ``x_chunks`` not cp arrays of one (n, T/cp, D) shape, ``num_heads`` not
            dividing D, ``wqkv`` not (D, 3D) or ``wo`` not (D, D).
    """
    check_int("num_heads", num_heads, 1)
    if not isinstance(group, ProcessGroup):
        raise ValueError(f"group must be a ProcessGroup, got {type(group).__name__}")
    if not isinstance(x_chunks, (list, tuple)):
        raise ValueError(f"x_chunks must be a list of cp arrays, got {type(x_chunks).__name__}")
    x_chunks = [np.asarray(x) for x in x_chunks]
    if len(x_chunks) != group.size or \
            any(x.ndim != 3 or x.shape != x_chunks[0].shape for x in x_chunks):
        raise ValueError(f"x_chunks must be cp={group.size} arrays of one (n, T/cp, D) shape, "
                         f"got {[x.shape for x in x_chunks]}")
    n, Tc, D = x_chunks[0].shape
    if D % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide the model width D={D}")
    if np.shape(wqkv) != (D, 3 * D) or np.shape(wo) != (D, D):
        raise ValueError(f"wqkv must be (D, 3D) = {(D, 3 * D)} and wo (D, D) = {(D, D)} for "
                         f"D={D}, got {np.shape(wqkv)} and {np.shape(wo)}")
    H, Dh = num_heads, D // num_heads
    qkv_caches, qs, ks, vs = [], [], [], []
    for x in x_chunks:
        qkv, c = linear_forward(x.reshape(n * Tc, D), wqkv)              # (n Tc, 3D)
        q, k, v = qkv.reshape(n, Tc, 3, H, Dh).transpose(2, 0, 3, 1, 4)  # 3 x (n, H, Tc, Dh)
        qkv_caches.append(c)
        qs.append(q)
        ks.append(k)
        vs.append(v)
    att, ring_cache = ring_attention_forward(qs, ks, vs, group, causal=True, layout=layout)
    outs, wo_caches = [], []
    for a in att:
        y = a.transpose(0, 2, 1, 3).reshape(n * Tc, D)                   # (n Tc, D)
        o, c = linear_forward(y, wo)                                     # (n Tc, D)
        outs.append(o.reshape(n, Tc, D))
        wo_caches.append(c)
    return outs, {"qkv": qkv_caches, "ring": ring_cache, "wo": wo_caches, "H": H}


def cp_attention_backward(dout_chunks, cache, group: ProcessGroup):
    """dout_chunks: cp arrays (n, T/cp, D) -> (dx_chunks, dwqkv, dwo).

    dx_chunks are rank r's (n, T/cp, D); dwqkv (D, 3D) and dwo (D, D) are lists of cp equal
    copies, each rank's partial gradient summed over the group with ``all_reduce`` (the bytes of
    a data-parallel gradient reduction, 2 (cp - 1) / cp of the weights' bytes per rank).
    """
    n, Tc, D = dout_chunks[0].shape
    H = cache["H"]
    dwos, datt = [], []
    for do, c in zip(dout_chunks, cache["wo"]):
        dy, dwo = linear_backward(do.reshape(n * Tc, D), c)              # (n Tc, D), (D, D)
        datt.append(dy.reshape(n, Tc, H, D // H).transpose(0, 2, 1, 3))  # (n, H, Tc, Dh)
        dwos.append(dwo)
    dq, dk, dv = ring_attention_backward(datt, cache["ring"], group)
    dxs, dwqkvs = [], []
    for r, c in enumerate(cache["qkv"]):
        dqkv = np.stack([dq[r], dk[r], dv[r]]).transpose(1, 3, 0, 2, 4).reshape(n * Tc, 3 * D)
        dx, dwqkv = linear_backward(dqkv, c)                             # (n Tc, D), (D, 3D)
        dxs.append(dx.reshape(n, Tc, D))
        dwqkvs.append(dwqkv)
    return dxs, group.all_reduce(dwqkvs), group.all_reduce(dwos)
