"""GRPO on the tiny LM, one readable loop (book section 1.5, lab Chapter 1).

Each step: sample B prompts and G completions each with the KV-cached sampler (rollout), score
them with the verifier (reward), compute group-relative advantages, optionally the reference
model's log-probs for a k3 KL penalty, then one AdamW step on the PPO-clipped surrogate whose
ratio is taken against the behaviour log-probs recorded at sampling time (the "old" policy; with
one update per batch the ratio starts at 1 and clipping only guards rounding differences).
Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300), Eq. 3 with token-mean aggregation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..nn import (COUNTER, AdamW, clip_grad_norm, generate, logps_backward, logps_forward,
                  token_entropy, token_logps)
from ..tasks import AdditionTask
from .advantages import grpo_advantages
from .common import (RLConfig, RLResult, blas_limits, check_fits_task, check_run_args,
                     lr_factor)
from .evaluate import evaluate
from .losses import (aggregate_weights, kl_estimate, kl_estimate_grad, policy_loss,
                     policy_loss_grad)
from .warmstart import warm_start

__all__ = ["GRPOConfig", "GRPOResult", "train_grpo", "evaluate"]


@dataclass(frozen=True)
class GRPOConfig(RLConfig):
    """Arguments of :func:`train_grpo` (defaults solve the addition task; see the Chapter 1 lab).
    The shared fields are documented on :class:`rlmperf_lite.rl.common.RLConfig`."""

    group_size: int = 4
    """G, completions per prompt."""

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(f"GRPOConfig.group_size must be an int >= 2 (a group of one has no "
                             f"baseline), got {self.group_size!r}")


GRPOResult = RLResult


def train_grpo(config: GRPOConfig = GRPOConfig(), *, task: AdditionTask | None = None,
               progress: bool = False, on_step=None, eval_every: int = 0,
               stop_at_accuracy: float | None = None) -> GRPOResult:
    """Warm-start then GRPO; returns the final params and per-step metrics.

    ``progress`` shows a tqdm bar; ``on_step(metrics)`` is called after each step. With
    ``eval_every`` > 0, every that many steps (and at the last) the held-out greedy accuracy is
    added to the step's metrics as ``eval_accuracy``, and training stops early once it reaches
    ``stop_at_accuracy`` (if given): the benchmark's time-to-accuracy.
    """
    check_run_args(eval_every, stop_at_accuracy)
    with blas_limits(config):
        return _train(config, task or AdditionTask(), progress, on_step, eval_every,
                      stop_at_accuracy)


def _train(config, task, progress, on_step, eval_every, stop_at_accuracy) -> GRPOResult:
    cfg, c = config.model, config
    check_fits_task(c, task)
    rng_init, rng_data, rng_sample = np.random.default_rng(c.seed).spawn(3)
    t0 = time.perf_counter()
    params, _ = warm_start(cfg, task, rng_init, max_steps=c.warmstart_max_steps,
                           target_accuracy=c.warmstart_target_accuracy)
    result = RLResult(params=params, base_params={k: v.copy() for k, v in params.items()},
                        warmstart_s=time.perf_counter() - t0)
    opt = AdamW(params, lr=c.lr, betas=c.adam_betas)
    P = task.prompt_len
    steps = range(c.steps)
    if progress:
        from tqdm import tqdm  # a text bar: it also shows in a notebook saved to HTML
        steps = tqdm(steps, desc="GRPO", unit="step", mininterval=1.0, ascii=True)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        t = time.perf_counter()
        prompts, pairs = task.sample_prompts(rng_data, c.num_prompts)
        rollout = generate(params, prompts, cfg, max_new_tokens=c.max_new_tokens,
                           eos_id=task.eos_id, pad_id=task.pad_id, group_size=c.group_size,
                           temperature=c.temperature, rng=rng_sample)
        mask, old_logps = rollout.completion_mask, rollout.per_token_logps   # (B*G, R)
        times["rollout_s"] = (t2 := time.perf_counter()) - t
        if c.kl_coef > 0:
            with COUNTER.phase("reference"):
                ref_logps = token_logps(result.base_params, rollout.tokens, cfg,
                                        c.temperature)[:, P - 1:]
        times["ref_logps_s"] = (t := time.perf_counter()) - t2
        rewards = task.reward(np.repeat(pairs, c.group_size, axis=0), rollout.tokens[:, P:])
        times["reward_s"] = (t2 := time.perf_counter()) - t
        advantages = grpo_advantages(rewards, c.group_size)                  # (B*G,)
        times["advantages_s"] = (t := time.perf_counter()) - t2
        with COUNTER.phase("train_forward"):
            logps_all, cache = logps_forward(params, rollout.tokens, cfg, c.temperature)
        logps = logps_all[:, P - 1:]                                         # (B*G, R)
        per_token_loss, metrics = policy_loss(logps, old_logps, advantages, mask,
                                              clip_eps_low=c.clip_eps, clip_eps_high=c.clip_eps)
        dloss = policy_loss_grad(logps, old_logps, advantages, mask,
                                 clip_eps_low=c.clip_eps, clip_eps_high=c.clip_eps)
        if c.kl_coef > 0:
            kl = kl_estimate(logps, ref_logps) * mask
            per_token_loss = per_token_loss + c.kl_coef * kl
            dloss = dloss + c.kl_coef * kl_estimate_grad(logps, ref_logps) * mask
            metrics["kl_ref"] = float(kl.sum() / max(mask.sum(), 1.0))
        weights = aggregate_weights(mask, c.loss_agg_mode, max_len=c.max_new_tokens)
        dlogps = np.zeros_like(logps_all)
        dlogps[:, P - 1:] = weights * dloss
        with COUNTER.phase("train_backward"):
            grads = logps_backward(dlogps, cache)
        grad_norm = clip_grad_norm(grads, c.max_grad_norm)
        opt.lr = c.lr * lr_factor(step, c)
        opt.step(params, grads)
        times["update_s"] = time.perf_counter() - t
        entropy = token_entropy(cache)[:, P - 1:]
        row = {"step": step, "reward_mean": float(rewards.mean()),
               "reward_std": float(rewards.std()),
               "response_length": float(mask.sum(axis=1).mean()),
               "loss": float((weights * per_token_loss).sum()),
               "entropy": float((entropy * mask).sum() / mask.sum()),
               "grad_norm": grad_norm, **metrics, **times, "step_s": sum(times.values()),
               "response_width": int(mask.shape[1]),
               **{f"{k}_flops": v - flops_before.get(k, 0.0) for k, v in COUNTER.counts.items()
                  if v != flops_before.get(k, 0.0)}}
        if eval_every and ((step + 1) % eval_every == 0 or step + 1 == c.steps):
            row["eval_accuracy"] = evaluate(params, cfg, task, max_new_tokens=c.max_new_tokens)
        result.history.append(row)
        if progress:
            steps.set_postfix(reward=f"{row['reward_mean']:.2f}", refresh=False)
        if on_step is not None:
            on_step(row)
        if stop_at_accuracy is not None and row.get("eval_accuracy", -1.0) >= stop_at_accuracy:
            break
    return result

