"""One GRPO update on a DP x TP mesh of simulated ranks, equal to the update of the GRPO loop
(book section :ref:`sec-tp-grpo-step`).

The loop's update (:func:`rlmperf_lite.rl.grpo.train_grpo`, one batch, no micro-batches):
per-token log-probs of the batch, the clipped-surrogate gradient from
:func:`~rlmperf_lite.rl.grpo.grpo_loss_grad` with the whole batch's normalisers
(:func:`~rlmperf_lite.rl.grpo.loss_norms`) on the completion columns (from P - 1: the
log-prob of token t + 1 sits at column t), backward, global gradient-norm clipping, AdamW at
``lr x lr_factor(step)``. :func:`rlmperf_lite.parallel.reference_grpo_step` does exactly
that on one rank.

:func:`parallel_grpo_step` does the same on ``DeviceMesh(dp=..., tp=...)``: the batch is split
over dp by whole groups of G completions; each tp group runs the tensor-parallel model
(:mod:`rlmperf_lite.parallel.tp_model`) on its dp shard; the loss weights use the WHOLE batch's
token and sequence counts, so summing the dp ranks' gradients (one all-reduce of a flat bucket
per rank, Li et al. 2020, PyTorch DDP, arXiv 2006.15704) gives the whole batch's gradient; the
squared gradient norm adds the sharded weights' parts over tp (one all-reduce of a float) and
the replicated weights' once; AdamW is elementwise, so each rank updating its own shard equals
the unsharded update. Bytes each rank sends per step (b = itemsize, N_rank = weights per rank):

    tp: 4 L x 2 (tp-1)/tp x (n/dp) T D b  (activations, see tp_model) + the norm's float
    dp: 2 (dp-1)/dp x N_rank b            (gradients)                + the loss's float
"""
from __future__ import annotations

import numpy as np

from ..nn import AdamW, check_tokens, clip_grad_norm
from ..rl.common import lr_factor
from ..rl.losses import grpo_loss, grpo_loss_grad, loss_norms
from .collectives import CommLog
from .tensor import check_tp, is_tp_sharded, shard_params_tp, unshard_grads_tp
from .tp_model import tp_logps_backward, tp_logps_forward

__all__ = ["parallel_grpo_step", "init_parallel_state", "full_params"]

_BATCH_KEYS = ("tokens", "completion_mask", "old_per_token_logps", "advantages", "prompt_len")


def _check_batch(batch, config):
    """(tokens, mask, old_logps, advantages, P, ref_logps or None) of a GRPO batch: a dict, or
    an object with these attributes (e.g. :class:`rlmperf_lite.parallel.GRPOBatch`).

    Raises:
        ValueError: naming ``batch``, for a missing key, a prompt length outside [1, T), a
            completion mask that is not (n, T - P), a row count not a multiple of G, or no
            ``ref_per_token_logps`` when the config has a KL penalty in the loss.
    """
    if not isinstance(batch, dict):
        batch = {k: getattr(batch, k) for k in (*_BATCH_KEYS, "ref_per_token_logps")
                 if hasattr(batch, k)}
    if any(k not in batch for k in _BATCH_KEYS):
        raise ValueError(f"batch must be a dict (or object) with keys {_BATCH_KEYS}")
    tokens = check_tokens(batch["tokens"], config.model, "batch['tokens']")
    n, T = tokens.shape
    P = batch["prompt_len"]
    if isinstance(P, bool) or not isinstance(P, (int, np.integer)) or not 1 <= P < T:
        raise ValueError(f"batch['prompt_len'] must be an int in [1, {T}), got {P!r}")
    mask = np.asarray(batch["completion_mask"])
    if mask.shape != (n, T - P):
        raise ValueError(f"batch['completion_mask'] must have shape {(n, T - P)}, got "
                         f"{mask.shape}")
    if n % config.group_size:
        raise ValueError(f"batch has {n} rows, not whole groups of group_size="
                         f"{config.group_size}")
    ref = None
    if config.kl_coef > 0 and config.advantage_estimator != "reinforce_pp":
        if batch.get("ref_per_token_logps") is None:
            raise ValueError("batch needs 'ref_per_token_logps' when config.kl_coef > 0")
        ref = np.asarray(batch["ref_per_token_logps"])
    return (tokens, mask, np.asarray(batch["old_per_token_logps"]),
            np.asarray(batch["advantages"]), int(P), ref)


def _dlogps_and_loss(logps_all, P, old, adv, mask, ref, config, norms):
    """The loop's loss gradient (n, T - 1), zero on the prompt columns, and its loss metric
    ``sum(w * per_token_loss)``, both weighted with the whole batch's ``norms``."""
    c = config
    logps = logps_all[:, P - 1:]                                         # (rows, R)
    dlogps = np.zeros_like(logps_all)                                    # (rows, T-1)
    dlogps[:, P - 1:] = grpo_loss_grad(logps, old, adv, mask, c, norms, ref_per_token_logps=ref)
    loss, _ = grpo_loss(logps, old, adv, mask, c, norms, ref_per_token_logps=ref)
    return dlogps, loss


def _degrees(mesh) -> tuple:
    if sorted(mesh.axes) != ["dp", "tp"]:
        raise ValueError(f"mesh must have the axes dp and tp, e.g. DeviceMesh(dp=2, tp=2), got "
                         f"{mesh.axes}")
    d = dict(zip(mesh.axes, mesh.shape))
    return d["dp"], d["tp"]


def init_parallel_state(params: dict, config, mesh) -> tuple:
    """(rank_params, opt_states): global rank r = (dp d, tp t) holds tp shard t of ``params``
    (copied, so dp replicas are separate arrays) and its own AdamW (``config.lr``, betas).

    Raises:
        ValueError: naming ``mesh`` (axes other than dp, tp) or ``tp`` (see
            :func:`~rlmperf_lite.parallel.check_tp`).
    """
    _, tp = _degrees(mesh)
    shards = shard_params_tp(params, config.model, tp)
    rank_params = [{k: v.copy() for k, v in shards[mesh.coords(r)["tp"]].items()}
                   for r in range(mesh.size)]
    return rank_params, [AdamW(p, lr=config.lr, betas=config.adam_betas) for p in rank_params]


def full_params(rank_params: list, cfg, mesh) -> dict:
    """The unsharded weights held by the tp group of dp rank 0 (a view for checks, not counted)."""
    return unshard_grads_tp([rank_params[r] for r in mesh.groups("tp")[0].ranks], cfg)


def parallel_grpo_step(rank_params: list, opt_states: list, batch: dict, config, mesh, *,
                       step: int = 0, sp: bool = False) -> dict:
    """:func:`~rlmperf_lite.parallel.reference_grpo_step` on the ranks of ``mesh``,
    updating every rank's shard and AdamW state in place (from :func:`init_parallel_state`).

    Args:
        sp: sequence parallelism inside the tp groups (T must be divisible by tp).
    Returns:
        ``loss`` and ``grad_norm`` (floats, equal on every rank), ``bytes_by_op`` (per op, the
        (world,) bytes each rank sent in this step, as :meth:`CommLog.bytes_by_op`) and
        ``bytes_by_axis`` ({"dp" | "tp": (world,) bytes}).
    Raises:
        ValueError: naming ``mesh``, ``tp`` (not dividing num_heads or intermediate_size),
            ``dp`` (not dividing the number of groups) or ``batch``.
    """
    c, cfg = config, config.model
    dp, tp = _degrees(mesh)
    check_tp(cfg, tp)
    if len(rank_params) != mesh.size or len(opt_states) != mesh.size:
        raise ValueError(f"rank_params and opt_states need one entry per rank ({mesh.size})")
    tokens, mask, old, adv, P, ref = _check_batch(batch, c)
    n = len(tokens)
    if (n // c.group_size) % dp:
        raise ValueError(f"dp={dp} must divide the batch's {n // c.group_size} groups: "
                         "each data-parallel rank takes whole groups")
    norms = loss_norms(mask, c)                    # the WHOLE batch's token and sequence counts
    mark = len(mesh.log.calls)
    grads, losses = [None] * mesh.size, [None] * mesh.size
    for tp_group in mesh.groups("tp"):             # one tp group per dp rank
        d = mesh.coords(tp_group.ranks[0])["dp"]
        rows = slice(d * n // dp, (d + 1) * n // dp)                     # whole groups
        shards = [rank_params[r] for r in tp_group.ranks]
        logps, cache = tp_logps_forward(shards, tokens[rows], cfg, tp_group, c.temperature, sp)
        dlogps = []
        for r, lp in zip(tp_group.ranks, logps):
            dl, losses[r] = _dlogps_and_loss(lp, P, old[rows], adv[rows], mask[rows],
                                             None if ref is None else ref[rows], c, norms)
            dlogps.append(dl)
        for r, g in zip(tp_group.ranks, tp_logps_backward(dlogps, cache)):
            grads[r] = g
    _sum_over_dp(mesh, grads, losses)
    norms_sq = _global_norms_sq(mesh, grads)
    for r in range(mesh.size):
        grad_norm = clip_grad_norm(grads[r], c.max_grad_norm, norm=np.sqrt(norms_sq[r]))
        opt_states[r].lr = c.lr * lr_factor(step, c)
        opt_states[r].step(rank_params[r], grads[r])
    step_log = CommLog(mesh.size)
    step_log.calls = mesh.log.calls[mark:]
    by_axis = {"dp": np.zeros(mesh.size), "tp": np.zeros(mesh.size)}
    for call in step_log.calls:
        by_axis[call["group"].rstrip("0123456789")][call["ranks"]] += call["bytes_per_rank"]
    return {"loss": losses[0], "grad_norm": grad_norm, "bytes_by_op": step_log.bytes_by_op(),
            "bytes_by_axis": by_axis}


def _sum_over_dp(mesh, grads: list, losses: list) -> None:
    """All-reduce each dp group's gradients (one flat bucket per rank) and losses, in place."""
    keys = list(grads[0])
    for dp_group in mesh.groups("dp"):
        bucket = dp_group.all_reduce([np.concatenate([grads[r][k].ravel() for k in keys])
                                      for r in dp_group.ranks])
        total = dp_group.all_reduce([np.array(losses[r]) for r in dp_group.ranks])
        for r, flat, loss in zip(dp_group.ranks, bucket, total):
            parts = np.split(flat, np.cumsum([grads[r][k].size for k in keys])[:-1])
            grads[r] = {k: p.reshape(grads[r][k].shape) for k, p in zip(keys, parts)}
            losses[r] = float(loss)


def _global_norms_sq(mesh, grads: list) -> list:
    """Each rank's squared global gradient norm: its tp-sharded weights' squares all-reduced
    over the tp group, plus its replicated weights' own."""
    norms_sq = [None] * mesh.size
    for tp_group in mesh.groups("tp"):
        sharded = tp_group.all_reduce([np.array(sum(float(np.vdot(g, g)) for k, g in
                                       grads[r].items() if is_tp_sharded(k)))
                                       for r in tp_group.ranks])
        for r, s in zip(tp_group.ranks, sharded):
            norms_sq[r] = float(s) + sum(float(np.vdot(g, g)) for k, g in grads[r].items()
                                         if not is_tp_sharded(k))
    return norms_sq
