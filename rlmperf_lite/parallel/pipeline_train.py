"""The GRPO loop with its update on pp simulated pipeline ranks (book section
:ref:`sec-pp-workdepth`): the same rollouts, rewards and advantages as
:func:`rlmperf_lite.rl.train_grpo`, the gradient from
:func:`~rlmperf_lite.parallel.pipeline_grads` in a schedule's order (each micro-batch's loss
gradient with the whole batch's normalisers), the global gradient norm from an all-reduce of
the stages' squared norms, one AdamW per stage on the weights it holds, and the new weights
gathered for the sampler after every step. The run equals the single-rank loop's: same rewards,
losses to float rounding.
"""
from __future__ import annotations

import time

import numpy as np

from ..nn import COUNTER, AdamW, clip_grad_norm
from ..rl.common import blas_limits, end_step, lr_factor, step_range
from ..rl.grpo import GRPOConfig, init_run, sample_and_score, step_advantages
from ..rl.losses import grpo_loss, grpo_loss_grad, loss_norms
from ..tasks import AdditionTask
from .collectives import ProcessGroup
from .pipeline import SCHEDULES, pipeline_grads, stage_layers
from .train import check_split_config, split_row

__all__ = ["train_grpo_pipeline", "stage_of_weights"]


def stage_of_weights(params: dict, num_layers: int, pp: int, interleave: int = 1) -> dict:
    """{weight name: the pipeline rank that holds it}: block i's weights (``h{i}.``) on the rank
    of its virtual stage k (k mod pp, :func:`~rlmperf_lite.parallel.stage_layers`), the
    embeddings on rank 0, the final norm and LM head on rank pp - 1 (as
    :func:`~rlmperf_lite.parallel.pipeline_grads` places them).

    Raises:
        ValueError: as :func:`~rlmperf_lite.parallel.stage_layers`.
    """
    rank = {i: k % pp for k, blocks in enumerate(stage_layers(num_layers, pp, interleave))
            for i in blocks}
    out = {}
    for name in params:
        if name in ("wte", "wpe"):
            out[name] = 0
        elif name in ("ln_f", "lm_head"):
            out[name] = pp - 1
        else:
            out[name] = rank[int(name[1:name.index(".")])]          # "h{i}.<weight>"
    return out


def train_grpo_pipeline(config: GRPOConfig, *, pp: int, microbatches: int,
                        schedule: str = "1f1b", interleave: int = 1,
                        task: AdditionTask | None = None, base_params: dict | None = None,
                        progress: bool = False, on_step=None):
    """Warm-start then GRPO with the update on ``pp`` pipeline ranks, the batch of B G
    sequences cut into ``microbatches`` run in the order of ``schedule`` ("gpipe", "1f1b" or
    "interleaved" with ``interleave`` chunks per rank). Returns the result of
    :func:`~rlmperf_lite.rl.train_grpo` (``params`` the gathered weights) whose history adds,
    per step, ``pp_bytes`` (the most bytes one rank sent: activations, gradients and the norm)
    and ``bubble_fraction`` (the schedule's, :class:`~rlmperf_lite.parallel.PipelineTimeline`).

    Raises:
        ValueError: a config that is not a GRPOConfig, with micro-batches (the pipeline cuts the
            batch itself), dynamic sampling (it changes the batch size) or a rollout-engine or
            correction field (only :func:`~rlmperf_lite.rl.train_grpo` runs them); ``schedule``,
            ``interleave``, ``pp`` (pp v not dividing ``config.model.num_layers``) or
            ``microbatches`` (not dividing B G; a multiple of pp when interleaved), named.
    """
    check_split_config(config, "the pipeline")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule != "interleaved" and interleave != 1:
        raise ValueError(f"interleave={interleave} needs schedule='interleaved', got "
                         f"schedule={schedule!r}")
    stage_layers(config.model.num_layers, pp, interleave)            # pp, interleave checked
    n = config.num_prompts * config.group_size
    if isinstance(microbatches, bool) or not isinstance(microbatches, (int, np.integer)) \
            or microbatches < 1 or n % microbatches:
        raise ValueError(f"microbatches must be an int >= 1 dividing the batch of "
                         f"num_prompts x group_size = {n} sequences, got {microbatches!r}")
    if schedule == "interleaved" and microbatches % pp:
        raise ValueError(f"microbatches={microbatches} must be a multiple of pp={pp} for the "
                         f"interleaved schedule")
    task = task or AdditionTask()
    with blas_limits(config):
        return _train(config, pp, microbatches, schedule, interleave, task, base_params,
                      progress, on_step)


def _pipeline_update(rank_params, opts, batch, c, pp, group, step, **pipe):
    """One update on the pp ranks: pipeline_grads, the norm's all-reduce, AdamW per rank.
    Returns (loss, metrics, grad_norm, timeline)."""
    tokens, mask, old, adv, ref, P = batch
    norms = loss_norms(mask, c)                    # the WHOLE batch's token and sequence counts

    def dlogps_fn(logps_mb, rows):                 # on the last rank, one micro-batch
        d = np.zeros_like(logps_mb)                                   # (n/m, T-1)
        d[:, P - 1:] = grpo_loss_grad(logps_mb[:, P - 1:], old[rows], adv[rows], mask[rows], c,
                                     norms, ref_per_token_logps=None if ref is None
                                     else ref[rows])
        return d

    held = {k: w for p in rank_params for k, w in p.items()}   # each rank reads its own
    with COUNTER.phase("train_pipeline"):
        logps_all, grads, timeline = pipeline_grads(held, c.model, tokens, dlogps_fn, pp=pp,
                                                    group=group, temperature=c.temperature,
                                                    **pipe)
    loss, metrics = grpo_loss(logps_all[:, P - 1:], old, adv, mask, c, norms,
                                      ref_per_token_logps=ref)
    mine = [{k: grads[k] for k in p} for p in rank_params]     # each rank's own gradients
    norms_sq = group.all_reduce([np.array(sum(float(np.vdot(g, g)) for g in r.values()))
                                 for r in mine])
    for r in range(pp):
        grad_norm = clip_grad_norm(mine[r], c.max_grad_norm, norm=np.sqrt(norms_sq[r]))
        opts[r].lr = c.lr * lr_factor(step, c)
        opts[r].step(rank_params[r], mine[r])
    return loss, metrics, grad_norm, timeline


def _train(c, pp, microbatches, schedule, interleave, task, base_params, progress, on_step):
    params, result, rng_data, rng_sample = init_run(c, task, base_params)
    owner = stage_of_weights(params, c.model.num_layers, pp, interleave)
    rank_params = [{k: w.copy() for k, w in params.items() if owner[k] == r} for r in range(pp)]
    opts = [AdamW(p, lr=c.lr, betas=c.adam_betas) for p in rank_params]
    group = ProcessGroup(pp, name="pp")
    kl_in_loss = c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp"
    steps = step_range(c, f"GRPO on pp={pp} ({schedule})", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        tokens, mask, old_logps, rewards, ref_logps, _, zero_std = sample_and_score(
            params, result.base_params, c, task, rng_data, rng_sample, times)   # (B*G, ...)
        t = time.perf_counter()
        advantages = step_advantages(c, rewards, mask, old_logps, ref_logps)
        batch = (tokens, mask, old_logps, advantages, ref_logps if kl_in_loss else None,
                 task.prompt_len)
        group.log.reset()
        loss, metrics, grad_norm, timeline = _pipeline_update(
            rank_params, opts, batch, c, pp, group, step, microbatches=microbatches,
            schedule=schedule, interleave=interleave)
        for p in rank_params:                                         # the weight sync
            params.update({k: w.copy() for k, w in p.items()})
        times["update_s"] = time.perf_counter() - t
        row = split_row(step, rewards, mask, zero_std, times, flops_before, loss=loss,
                        grad_norm=grad_norm, **metrics, response_width=int(mask.shape[1]),
                        pp_bytes=float(group.log.sent_bytes.max()),
                        bubble_fraction=timeline.bubble_fraction)
        end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                 on_step=on_step, eval_every=0, stop_at_accuracy=None)
    return result
