"""ZeRO stages 0-3 on the tiny LM's GRPO step, on simulated data-parallel ranks (book section
:ref:`sec-zero-fsdp`).

Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §5 partitions the model states over the n
data-parallel ranks. All weights are one flat vector of N_pad elements (sorted keys, zero-padded
to a multiple of n; PyTorch FSDP's FlatParameter, Zhao et al. 2023, arXiv 2304.11277), rank r
owns shard r. Everything here is fp32 (float64 in the tests): the weights are their own master
copy, so the model states per rank are weights, gradients, Adam m and v. Per step:

    stage 0 (DP)   all-reduce grads; every rank updates all N weights       2 (n-1)/n N
    stage 1 (P_os) reduce-scatter grads into the rank's slice of its full   2 (n-1)/n N
                   gradient buffer; update own shard (m, v sharded);
                   all-gather the weights
    stage 2 (+g)   as stage 1, but only the gradient shard is kept          2 (n-1)/n N
    stage 3 (+p)   only the weight shard is kept: all-gather before the     3 (n-1)/n N
                   forward and again before the backward, reduce-scatter
                   grads, update own shard, no final gather

(elements sent per rank; x itemsize for bytes), ZeRO §7.2: stages 1-2 move what DP's all-reduce
moves, stage 3 1.5x. Stage 1 uses the paper's reduce-scatter (§7.2.1): an all-reduce followed by
the weights' all-gather (PyTorch's ZeroRedundancyOptimizer with DDP) would move 3 (n-1)/n N.
Stages 1-3 hold only a shard of the reduced gradient, so global-norm clipping needs one more
all-reduce, of a single squared norm (8 bytes in float64).

The stage-3 gathers are of the whole model at once (per-layer gathers, as FSDP does, move the
same bytes in L + 3 smaller calls). After the forward the gathered buffer is overwritten with
NaN (the "free"); the second gather writes the weights back into it and the backward reads only
those: a missing gather would show up as NaN gradients.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int
from ..nn import AdamW, clip_grad_norm, logps_backward
from ..rl.common import lr_factor
from ..rl.grpo import GRPOConfig
from ..rl.losses import loss_norms
from .collectives import ProcessGroup
from .batch import GRPOBatch, loss_forward
from .data import FlatLayout, check_group, split_groups

__all__ = ["ZeroState", "zero_init", "zero_step", "zero_params", "resident_bytes"]


@dataclass
class ZeroState:
    """What each of the n ranks holds between steps (lists indexed by rank)."""

    stage: int
    """0 (plain data parallel) to 3."""
    layout: FlatLayout
    """The flat vector's layout (N_pad elements, n shards)."""
    params: list
    """Weights — (N_pad,) on every rank for stages 0-2, the (N_pad / n,) shard for stage 3."""
    grads: list
    """Gradient buffer — (N_pad,) for stages 0-1, the shard for stages 2-3."""
    opts: list
    """AdamW over ``{"flat": the weights the rank updates}`` (all for stage 0, its shard
    otherwise); its ``m``, ``v`` are the optimizer states, its ``t`` the step index."""

    def own(self, r: int) -> np.ndarray:
        """The weights rank r updates: a view of its full vector (stages 1-2) or all it holds."""
        if self.stage in (1, 2):
            return self.params[r][self.layout.shard(r)]
        return self.params[r]


def zero_init(params: dict, group: ProcessGroup, stage: int, config: GRPOConfig) -> ZeroState:
    """Every rank loads the same weights (a checkpoint), keeps what its stage keeps, and makes
    its AdamW (``config.lr``, ``config.adam_betas``, eps 1e-8, no weight decay: the loop's).

    Raises:
        ValueError: ``stage`` not an int in 0..3 (bools too), or ``group`` not a ProcessGroup.
    """
    check_int("stage", stage, 0)
    check_choice("stage", stage, (0, 1, 2, 3))
    check_group(group)
    layout = FlatLayout.of(params, group.size)
    flat = layout.flatten(params)                                             # (N_pad,)
    state = ZeroState(stage, layout, [], [], [])
    for r in range(group.size):
        state.params.append(flat.copy() if stage < 3 else flat[layout.shard(r)].copy())
        state.grads.append(np.zeros(layout.padded_size if stage < 2 else layout.shard_size,
                                    dtype=flat.dtype))
        state.opts.append(AdamW({"flat": state.own(r)}, lr=config.lr, betas=config.adam_betas))
    return state


def _rank_grads(state: ZeroState, parts: list, config: GRPOConfig, norms: dict,
                group: ProcessGroup):
    """Forward and backward of every rank on its groups -> (loss terms, flat local grads)."""
    layout, n = state.layout, group.size
    if state.stage < 3:
        weights = state.params                               # each rank's full (N_pad,) copy
    else:
        weights = group.all_gather(state.params)             # gather 1, before the forward
    fwd = [loss_forward(layout.unflatten(weights[r]), parts[r], config, norms) for r in range(n)]
    if state.stage == 3:
        for w in weights:
            w.fill(np.nan)                                   # freed after the forward
        again = group.all_gather(state.params)               # gather 2, before the backward
        for w, a in zip(weights, again):
            w[:] = a                                         # where the backward's cache looks
    flat = [layout.flatten(logps_backward(dlogps, cache)) for _, dlogps, cache in fwd]
    return [f[0] for f in fwd], flat                         # n x (N_pad,)


def _clip_shards(shards: list, group: ProcessGroup, max_norm: float) -> float:
    """Global-norm clipping when rank r holds only gradient shard r: all-reduce the squared
    norms, then :func:`rlmperf_lite.nn.clip_grad_norm` scales each shard by the global norm."""
    sq = group.all_reduce([np.array([np.vdot(g, g)]) for g in shards])      # n x (1,)
    norm = float(np.sqrt(sq[0][0]))
    for g in shards:
        clip_grad_norm({"flat": g}, max_norm, norm=norm)
    return norm


def zero_step(state: ZeroState, batch: GRPOBatch, config: GRPOConfig,
              group: ProcessGroup) -> dict:
    """One GRPO step of ``state.stage`` over the ranks of ``group``; updates ``state`` in place.
    Equal to :func:`rlmperf_lite.parallel.reference_grpo_step` on the whole batch.

    Returns:
        dict: ``"loss_parts"``, each rank's term of the batch loss (they sum to it), and
        ``"grad_norm"``, the global norm before clipping.
    Raises:
        ValueError: ``group`` of a different size than the state's; n does not divide the
            batch's groups (``batch``).
    """
    check_group(group)
    layout, n, s = state.layout, group.size, state.stage
    if n != layout.n:
        raise ValueError(f"group has {n} ranks but the state was sharded for {layout.n}")
    parts = split_groups(batch, n)
    losses, local = _rank_grads(state, parts, config, loss_norms(batch.completion_mask, config),
                                group)
    if s == 0:
        for g, total in zip(state.grads, group.all_reduce(local)):
            g[:] = total                                     # every rank: the batch gradient
        norm = [clip_grad_norm({"flat": g}, config.max_grad_norm) for g in state.grads][0]
        mine = state.grads
    else:
        reduced = group.reduce_scatter(local)                # rank r: shard r of the sum
        mine = []
        for r in range(n):
            if s == 1:                                       # full buffer, own slice reduced
                state.grads[r][:] = local[r]
                state.grads[r][layout.shard(r)] = reduced[r]
                mine.append(state.grads[r][layout.shard(r)])
            else:
                state.grads[r][:] = reduced[r]
                mine.append(state.grads[r])
        norm = _clip_shards(mine, group, config.max_grad_norm)
    for r in range(n):
        opt = state.opts[r]
        opt.lr = config.lr * lr_factor(opt.t, config)
        opt.step({"flat": state.own(r)}, {"flat": mine[r]})
    if s in (1, 2):
        gathered = group.all_gather([state.own(r) for r in range(n)])
        for p, full in zip(state.params, gathered):
            p[:] = full
    return {"loss_parts": losses, "grad_norm": norm}


def _check_rank(state: ZeroState, rank) -> None:
    check_int("rank", rank, 0)
    if rank >= state.layout.n:
        raise ValueError(f"rank={rank} is out of range: the state holds n={state.layout.n} "
                         f"ranks, 0..{state.layout.n - 1}")


def zero_params(state: ZeroState, group: ProcessGroup, rank: int = 0) -> dict:
    """Rank ``rank``'s full weights as a dict (a copy): its own vector for stages 0-2, an
    all-gather of the shards for stage 3 (counted in the log, like saving a checkpoint).

    Raises:
        ValueError: ``rank`` not in 0..n - 1, or ``group`` not a ProcessGroup.
    """
    _check_rank(state, rank)
    check_group(group)
    full = state.params[rank] if state.stage < 3 else group.all_gather(state.params)[rank]
    return {k: v.copy() for k, v in state.layout.unflatten(full).items()}


def resident_bytes(state: ZeroState, rank: int = 0) -> dict:
    """Bytes of model states rank ``rank`` keeps between steps, measured on its arrays, with
    the keys of :func:`rlmperf_lite.cost.model_state_breakdown` (ZeRO §5.1,
    Fig. 1: with fp32 weights and grads, (4 + 4 + 8) N by stage 0, 4N + 4N + 8N/n by stage 1,
    4N + 12N/n by stage 2, 16N/n by stage 3). Transient buffers (stage 3's gathered weights,
    stage 2's full local gradient, freed bucket by bucket in real ZeRO) are not counted.

    Raises:
        ValueError: ``rank`` not in 0..n - 1.
    """
    _check_rank(state, rank)
    opt = state.opts[rank]
    return {"weights_bytes": float(state.params[rank].nbytes),
            "grads_bytes": float(state.grads[rank].nbytes),
            "optimizer_bytes": float(opt.m["flat"].nbytes + opt.v["flat"].nbytes)}
