"""PPO with a critic on the tiny LM, one readable loop (book section :ref:`sec-ppo`).

Each step: sample one completion for each of B prompts (rollout), score them (reward: the
outcome reward sits on the last token), run the critic over the sequences (values), compute
GAE advantages and returns (Schulman et al. 2016), then ``ppo_epochs`` passes over the batch in
``num_minibatches`` shuffled minibatches, each an AdamW step of the policy on the clipped
surrogate (Schulman et al. 2017, Eq. 7) and of the critic on the clipped value loss. Unlike GRPO
with one update per batch, later minibatch updates see a policy that has moved: the ratio leaves
1 and clipping acts. The critic is a separate model (:mod:`rlmperf_lite.nn.value`) initialised
from the warm-started policy's trunk (RLHF frameworks start it from a pretrained model: the
policy's or the reward model's).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..checks import check_bool, check_choice, check_int, check_number
from ..nn import (COUNTER, AdamW, clip_grad_norm, generate, init_value_params, logps_backward,
                  logps_forward, token_entropy, token_logps, values_backward, values_forward)
from ..tasks import AdditionTask, Task
from .common import (RLConfig, RLResult, blas_limits, check_diverged, check_fits_task,
                     check_loop_args, end_step, flops_since, lr_factor, step_range, timed)
from .gae import gae
from .losses import (aggregate_weights, kl_estimate, kl_estimate_grad, policy_loss,
                     policy_loss_grad, value_loss, value_loss_grad)
from .warmstart import warm_start

__all__ = ["PPOConfig", "train_ppo"]


@dataclass(frozen=True)
class PPOConfig(RLConfig):
    """Arguments of :func:`train_ppo`; shared fields on :class:`rlmperf_lite.rl.common.RLConfig`.
    Defaults solve the addition task with the same 128 samples per step as the GRPO defaults."""

    steps: int = 200
    """PPO steps (rollout batches); each makes ppo_epochs * num_minibatches updates."""
    num_prompts: int = 128
    """B, prompts per step, one completion each."""
    ppo_epochs: int = 2
    """Passes over each rollout batch."""
    num_minibatches: int = 2
    """Minibatches per pass (one policy and one critic update each)."""
    critic_lr: float = 1e-3
    """AdamW learning rate of the critic (same schedule as the policy's)."""
    gamma: float = 1.0
    """Discount (1 = the outcome reward counts fully for every token)."""
    lam: float = 0.95
    """GAE lambda."""
    vf_clip_eps: float = 0.2
    """Value clipping range around the rollout-time values."""
    norm_adv: bool = True
    """Normalise advantages over the batch's tokens (mean 0, std 1)."""
    kl_in: str = "reward"
    """Where the KL penalty goes when kl_coef > 0 — per-token k1 in the ``"reward"`` (InstructGPT,
    OpenRLHF) or k3 in the ``"loss"`` (as GRPO does)."""

    def __post_init__(self):
        super().__post_init__()
        check_int("PPOConfig.ppo_epochs", self.ppo_epochs, 1)
        check_int("PPOConfig.num_minibatches", self.num_minibatches, 1)
        if self.num_minibatches > self.num_prompts:
            raise ValueError(f"PPOConfig.num_minibatches={self.num_minibatches} exceeds "
                             f"num_prompts={self.num_prompts}")
        check_number("PPOConfig.critic_lr", self.critic_lr, low=0, low_open=True)
        check_number("PPOConfig.vf_clip_eps", self.vf_clip_eps, low=0, low_open=True)
        for name in ("gamma", "lam"):
            check_number(f"PPOConfig.{name}", getattr(self, name), low=0, high=1)
        check_choice("PPOConfig.kl_in", self.kl_in, ("reward", "loss"))
        check_bool("PPOConfig.norm_adv", self.norm_adv)


def _mean(values) -> float | None:
    """Mean of the finite values; None (JSON null) when there is none, e.g. the explained
    variance of returns that do not vary."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def train_ppo(config: PPOConfig = PPOConfig(), *, task: Task | None = None,
              progress: bool = False, on_step=None, eval_every: int = 0,
              stop_at_accuracy: float | None = None) -> RLResult:
    """Warm-start then PPO; same arguments and result as :func:`rlmperf_lite.rl.train_grpo`.
    History rows add ``value_loss``, ``vf_clipfrac``, ``explained_variance`` and ``values_s``.
    Raises ValueError naming the argument, as train_grpo (``config`` must be a PPOConfig; a
    diverged critic names ``critic_lr``)."""
    check_loop_args(config, PPOConfig, task, progress, on_step, eval_every, stop_at_accuracy)
    # a diverging run overflows inside numpy before check_diverged names the cause (the lr):
    # the error says it, numpy's warnings would only bury it
    with blas_limits(config), np.errstate(over="ignore", invalid="ignore"):
        return _train(config, task or AdditionTask(), progress, on_step, eval_every,
                      stop_at_accuracy)


def _train(c: PPOConfig, task, progress, on_step, eval_every, stop_at_accuracy) -> RLResult:
    check_fits_task(c, task)
    rng_init, rng_data, rng_sample, rng_mb = np.random.default_rng(c.seed).spawn(4)
    t0 = time.perf_counter()
    params, _ = warm_start(c.model, task, rng_init, max_steps=c.warmstart_max_steps,
                           target_accuracy=c.warmstart_target_accuracy)
    vparams = init_value_params(c.model, rng_init, from_params=params)
    result = RLResult(params=params, base_params={k: v.copy() for k, v in params.items()},
                      warmstart_s=time.perf_counter() - t0)
    opt = AdamW(params, lr=c.lr, betas=c.adam_betas)
    vopt = AdamW(vparams, lr=c.critic_lr, betas=c.adam_betas)
    steps = step_range(c, "PPO", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        opt.lr, vopt.lr = c.lr * lr_factor(step, c), c.critic_lr * lr_factor(step, c)
        b = _experience(params, vparams, result.base_params, c, task, rng_data, rng_sample, times,
                        step)
        with timed(times, "update_s"):
            logs = [_minibatch_update(params, vparams, opt, vopt, b, mb, c, task.prompt_len, step)
                    for _ in range(c.ppo_epochs)
                    for mb in np.array_split(rng_mb.permutation(c.num_prompts),
                                             c.num_minibatches)]
        row = {"step": step, "reward_mean": float(b["rewards"].mean()),
               "reward_std": float(b["rewards"].std()),
               "response_length": float(b["mask"].sum(axis=1).mean()),
               **{k: _mean(log[k] for log in logs) for k in logs[0]},
               **times, "step_s": sum(times.values()), "response_width": int(b["mask"].shape[1]),
               **flops_since(flops_before)}
        if end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                    on_step=on_step, eval_every=eval_every, stop_at_accuracy=stop_at_accuracy):
            break
    return result


def _experience(params, vparams, ref_params, c: PPOConfig, task, rng_data, rng_sample,
                times: dict, step: int) -> dict:
    """One step's rollout, rewards (KL in the reward when ``kl_in="reward"``), values and GAE
    advantages: {tokens (n, P+R), mask, old_logps, ref (or None), old_values, advantages,
    returns (n, R), rewards (n,)}, timing each phase into ``times``."""
    cfg, P, n = c.model, task.prompt_len, c.num_prompts
    with timed(times, "rollout_s"):
        prompts, pairs = task.sample_prompts(rng_data, n)
        rollout = generate(params, prompts, cfg, max_new_tokens=c.max_new_tokens,
                           eos_id=task.eos_id, pad_id=task.pad_id,
                           temperature=c.temperature, rng=rng_sample)
    tokens, mask, old_logps = rollout.tokens, rollout.completion_mask, rollout.per_token_logps
    check_diverged(step, c, "the rollout's log-probs", old_logps)
    R, ref = mask.shape[1], None
    with timed(times, "reward_s"):
        token_rewards = np.zeros_like(mask)
        rewards = task.reward(pairs, tokens[:, P:])
        token_rewards[np.arange(n), mask.sum(axis=1).astype(int) - 1] = rewards  # last token
        if c.kl_coef > 0:
            with COUNTER.phase("reference"):
                ref = token_logps(ref_params, tokens, cfg, c.temperature)[:, P - 1:]
            if c.kl_in == "reward":                         # KL penalty in the reward (k1)
                token_rewards -= c.kl_coef * kl_estimate(old_logps, ref, "k1") * mask
    with timed(times, "values_s"), COUNTER.phase("values"):
        old_values = values_forward(vparams, tokens, cfg)[0][:, P - 1:P - 1 + R]
    check_diverged(step, c, "the critic's values", old_values, lr_field="critic_lr")
    with timed(times, "advantages_s"):
        advantages, returns = gae(token_rewards, old_values, mask, c.gamma, c.lam)
        if c.norm_adv:                                      # over the batch's tokens
            mean = (advantages * mask).sum() / mask.sum()
            std = np.sqrt((((advantages - mean) * mask) ** 2).sum() / mask.sum())
            advantages = (advantages - mean) / (std + 1e-8) * mask
    return dict(tokens=tokens, mask=mask, old_logps=old_logps, ref=ref, old_values=old_values,
                advantages=advantages, returns=returns, rewards=rewards)


def _minibatch_update(params, vparams, opt, vopt, b: dict, mb, c: PPOConfig, P: int,
                      step: int) -> dict:
    """One AdamW step of the policy on the clipped surrogate (plus k3 in the loss when
    ``kl_in="loss"``) and one of the critic on the clipped value loss, over rows ``mb`` of the
    batch ``b``; returns the minibatch's metrics."""
    cfg, mask, R = c.model, b["mask"][mb], b["mask"].shape[1]
    old_logps, adv = b["old_logps"][mb], b["advantages"][mb]
    weights = aggregate_weights(mask, c.loss_agg_mode, max_len=c.max_new_tokens)
    with COUNTER.phase("train_forward"):
        logps_all, cache = logps_forward(params, b["tokens"][mb], cfg, c.temperature)
    logps = logps_all[:, P - 1:]
    check_diverged(step, c, "the trainer's log-probs", logps)
    _, metrics = policy_loss(logps, old_logps, adv, mask, clip_eps_low=c.clip_eps,
                             clip_eps_high=c.clip_eps)
    dloss = policy_loss_grad(logps, old_logps, adv, mask, clip_eps_low=c.clip_eps,
                             clip_eps_high=c.clip_eps)
    if c.kl_coef > 0:
        ref = b["ref"][mb]
        kl = kl_estimate(logps, ref) * mask                                # k3, for the logs
        metrics["kl_ref"] = float(kl.sum() / mask.sum())
        if c.kl_in == "loss":
            dloss = dloss + c.kl_coef * kl_estimate_grad(logps, ref) * mask
    dlogps = np.zeros_like(logps_all)
    dlogps[:, P - 1:] = weights * dloss
    with COUNTER.phase("train_backward"):
        grads = logps_backward(dlogps, cache)
    check_diverged(step, c, "the policy's gradients", [np.vdot(g, g) for g in grads.values()])
    metrics["grad_norm"] = clip_grad_norm(grads, c.max_grad_norm)
    opt.step(params, grads)
    with COUNTER.phase("critic_forward"):
        values_all, vcache = values_forward(vparams, b["tokens"][mb], cfg)
    values = values_all[:, P - 1:P - 1 + R]
    check_diverged(step, c, "the critic's values", values, lr_field="critic_lr")
    old_values, returns = b["old_values"][mb], b["returns"][mb]
    vloss, vmetrics = value_loss(values, old_values, returns, mask, clip_eps=c.vf_clip_eps)
    dvalues = np.zeros_like(values_all)
    dvalues[:, P - 1:P - 1 + R] = weights * value_loss_grad(values, old_values, returns, mask,
                                                            clip_eps=c.vf_clip_eps)
    with COUNTER.phase("critic_backward"):
        vgrads = values_backward(dvalues, vcache)
    check_diverged(step, c, "the critic's gradients", [np.vdot(g, g) for g in vgrads.values()],
                   lr_field="critic_lr")
    clip_grad_norm(vgrads, c.max_grad_norm)
    vopt.step(vparams, vgrads)
    entropy = token_entropy(cache)[:, P - 1:]
    return {**metrics, **vmetrics, "value_loss": float((weights * vloss).sum()),
            "entropy": float((entropy * mask).sum() / mask.sum())}
