"""The GRPO loop with its update sharded by ZeRO over simulated data-parallel ranks (book
section :ref:`sec-dp-workdepth`): the rollouts, rewards and advantages of
:func:`rlmperf_lite.rl.train_grpo`, the update by :func:`~rlmperf_lite.parallel.zero_step`
(stages 0-3), and the new weights synced to the sampler after every step
(:func:`~rlmperf_lite.parallel.zero_params`: stage 3 all-gathers its shards for it). With no
micro-batches the run equals the single-rank loop's: same rewards, losses to float rounding.
"""
from __future__ import annotations

import time

from ..nn import COUNTER
from ..rl.common import blas_limits, end_step, step_range
from ..rl.grpo import GRPOConfig, init_run, sample_and_score, step_advantages
from ..tasks import AdditionTask
from .collectives import ProcessGroup
from .batch import GRPOBatch
from .train import check_split_config, split_row
from .zero import zero_init, zero_params, zero_step

__all__ = ["train_grpo_zero"]


def train_grpo_zero(config: GRPOConfig, dp: int, zero_stage: int, *,
                    task: AdditionTask | None = None, base_params: dict | None = None,
                    progress: bool = False, on_step=None):
    """Warm-start then GRPO with the update on ``dp`` ranks at ZeRO ``zero_stage``; returns the
    result of :func:`~rlmperf_lite.rl.train_grpo` whose history adds, per step, ``dp_bytes``
    (the most bytes one rank sent in the update) and ``sync_bytes`` (in the weight sync).

    Raises:
        ValueError: a config with micro-batches, dynamic sampling or a rollout-engine or
            correction field (as
            :func:`~rlmperf_lite.parallel.train_grpo_mesh`), and as
            :func:`~rlmperf_lite.parallel.zero_init` (``stage``) and
            :func:`~rlmperf_lite.parallel.zero_step` (dp not dividing the groups).
    """
    check_split_config(config, "ZeRO")
    task = task or AdditionTask()
    with blas_limits(config):
        return _train(config, ProcessGroup(dp), zero_stage, task, base_params, progress,
                      on_step)


def _train(c, group, stage, task, base_params, progress, on_step):
    params, result, rng_data, rng_sample = init_run(c, task, base_params)
    state = zero_init(params, group, stage, c)
    kl_in_loss = c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp"
    steps = step_range(c, f"GRPO, ZeRO-{stage} on {group.size} ranks", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        tokens, mask, old_logps, rewards, ref_logps, _, zero_std = sample_and_score(
            params, result.base_params, c, task, rng_data, rng_sample, times)   # (B*G, ...)
        t = time.perf_counter()
        batch = GRPOBatch(tokens=tokens, completion_mask=mask, old_per_token_logps=old_logps,
                          advantages=step_advantages(c, rewards, mask, old_logps, ref_logps),
                          prompt_len=task.prompt_len, group_size=c.group_size, cfg=c.model,
                          params=params, rewards=rewards,
                          ref_per_token_logps=ref_logps if kl_in_loss else None)
        before = group.log.sent_bytes.copy()
        out = zero_step(state, batch, c, group)
        update = group.log.sent_bytes - before
        params.update(zero_params(state, group))                      # the weight sync
        times["update_s"] = time.perf_counter() - t
        row = split_row(step, rewards, mask, zero_std, times, flops_before,
                        loss=float(sum(out["loss_parts"])), grad_norm=out["grad_norm"],
                        dp_bytes=float(update.max()),
                        sync_bytes=float((group.log.sent_bytes - before - update).max()))
        end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                 on_step=on_step, eval_every=0, stop_at_accuracy=None)
    return result
