"""The GRPO loop with its update on a mesh of simulated ranks (book sections
:ref:`sec-data-parallel` and :ref:`sec-tp-grpo-step`): the same
rollouts, rewards and advantages as :func:`rlmperf_lite.rl.train_grpo`, the update split over
``DeviceMesh(dp=..., tp=...)`` by :func:`~rlmperf_lite.parallel.parallel_grpo_step`, and the
new weights synced to the sampler (tp group 0's shards gathered) after every step. With no
micro-batches the run equals the single-rank loop's: same rewards, losses to float rounding.
"""
from __future__ import annotations

import time

from ..nn import COUNTER
from ..rl.common import blas_limits, end_step, flops_since, step_range
from ..rl.grpo import GRPOConfig, init_run, sample_and_score, step_advantages
from ..tasks import AdditionTask
from .collectives import DeviceMesh
from .grpo_step import full_params, init_parallel_state, parallel_grpo_step

__all__ = ["train_grpo_mesh", "check_split_config", "split_row"]


def check_split_config(config, what: str) -> None:
    """The checks every loop whose update is split over ranks shares (``what`` names the split
    in the message: "the mesh", "ZeRO", "the pipeline").

    Raises:
        ValueError: naming ``config`` (not a GRPOConfig), ``micro_batch_size`` (the ranks
            split the batch), ``dynamic_sampling`` (the split needs a fixed batch) or a
            rollout-engine or correction field (only :func:`~rlmperf_lite.rl.train_grpo` runs
            them)."""
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig, got {type(config).__name__}")
    if config.micro_batch_size is not None:
        raise ValueError(f"config.micro_batch_size must be None: {what} splits the batch")
    if config.dynamic_sampling:
        raise ValueError(f"config.dynamic_sampling must be False: {what} needs a fixed batch")
    config.check_train_grpo_only(f"the split loop over {what}")


def split_row(step, rewards, mask, zero_std, times, flops_before, **metrics) -> dict:
    """One step's history row of a split loop: the rollout's metrics, then ``metrics`` (loss,
    grad_norm, bytes per rank ...), then the phases' times and the FLOPs counted."""
    return {"step": step, "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "response_length": float(mask.sum(axis=1).mean()),
            "frac_reward_zero_std": zero_std, **metrics,
            **times, "step_s": sum(times.values()), **flops_since(flops_before)}


def train_grpo_mesh(config: GRPOConfig, mesh: DeviceMesh, *, task: AdditionTask | None = None,
                    sp: bool = False, base_params: dict | None = None, progress: bool = False,
                    on_step=None):
    """Warm-start then GRPO with the update on ``mesh``; returns the result of
    :func:`~rlmperf_lite.rl.train_grpo` (``params`` the unsharded weights) whose history adds,
    per step, ``dp_bytes`` and ``tp_bytes`` (the most bytes one rank sent along each axis).

    Raises:
        ValueError: a config with micro-batches (the mesh splits the batch itself), a DAPO
            config (dynamic sampling changes the batch size), a rollout-engine or correction field
            (only :func:`~rlmperf_lite.rl.train_grpo` runs them), and as
            :func:`~rlmperf_lite.parallel.parallel_grpo_step` (``mesh``, ``tp``, ``dp``).
    """
    check_split_config(config, "the mesh")
    task = task or AdditionTask()
    with blas_limits(config):
        return _train(config, mesh, task, sp, base_params, progress, on_step)


def _train(c, mesh, task, sp, base_params, progress, on_step):
    params, result, rng_data, rng_sample = init_run(c, task, base_params)
    rank_params, opt_states = init_parallel_state(params, c, mesh)
    kl_in_loss = c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp"
    steps = step_range(c, f"GRPO on {mesh}", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        tokens, mask, old_logps, rewards, ref_logps, _, zero_std = sample_and_score(
            params, result.base_params, c, task, rng_data, rng_sample, times)   # (B*G, ...)
        t = time.perf_counter()
        advantages = step_advantages(c, rewards, mask, old_logps, ref_logps)
        batch = {"tokens": tokens, "completion_mask": mask, "old_per_token_logps": old_logps,
                 "advantages": advantages, "prompt_len": task.prompt_len,
                 "ref_per_token_logps": ref_logps if kl_in_loss else None}
        out = parallel_grpo_step(rank_params, opt_states, batch, c, mesh, step=step, sp=sp)
        params.update(full_params(rank_params, c.model, mesh))        # the weight sync
        times["update_s"] = time.perf_counter() - t
        row = split_row(step, rewards, mask, zero_std, times, flops_before, loss=out["loss"],
                        grad_norm=out["grad_norm"],
                        dp_bytes=float(out["bytes_by_axis"]["dp"].max()),
                        tp_bytes=float(out["bytes_by_axis"]["tp"].max()))
        end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                 on_step=on_step, eval_every=0, stop_at_accuracy=None)
    return result
