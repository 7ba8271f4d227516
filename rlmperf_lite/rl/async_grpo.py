"""Asynchronous GRPO with bounded staleness k, one readable loop (book section
:ref:`sec-staleness-learner`).

In an asynchronous RL system the rollout engine does not wait for the trainer: it keeps sampling
with the last weights it received while the trainer updates. With staleness bound k, the batch
the trainer consumes at step t was sampled by the policy of version ``max(0, t - k)`` (version v
= the weights after v updates): k = 1 is one-step-off-policy training (the rollout of step t+1
overlaps the update of step t), and k plays the role of AReaL's maximum staleness eta (Fu et al.
2025, arXiv 2505.24298, Sec. 5.1). Here the overlap is simulated in one process: a FIFO holds
copies of the last k + 1 weight versions and the sampler always uses the oldest, so the numbers
are those of the asynchronous system, not its wall time.

The data then come from a behaviour policy pi_behav older than the trainer's weights, and the
loss must decide what to do about it (``AsyncGRPOConfig.objective``):

- ``"decoupled"`` (AReaL, Sec. 5.2, Eq. 5; from Hilton et al. 2021, arXiv 2110.00641): clip
  against the proximal policy pi_prox (the weights before this update) and correct the stale
  sampling with the importance weight w = pi_prox / pi_behav, a constant:
  ``loss_t = -w_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps_high) A_t)``, r = pi_theta / pi_prox.
- ``"naive"``: use pi_prox as PPO's old policy and ignore that the data are stale (no w).
- ``"behaviour"``: PPO's clip against the recorded behaviour log-probs (verl fully-async's
  ``use_rollout_log_probs``): r = pi_theta / pi_behav, so stale tokens fall outside the clip range
  and stop contributing.

The proximal log-probs are recomputed with the trainer's weights before the step's updates: one
extra forward (``prox_logps_s`` in the history), skipped for a fresh batch, whose behaviour policy
is those very weights (so at k = 0 all three objectives are train_grpo, exactly). With one update
per batch (``num_minibatches=1``, as :func:`rlmperf_lite.rl.train_grpo`) r = pi_theta / pi_prox
is 1 where the gradient is taken: the decoupled and naive clips never bind (no trust region at
all) and the decoupled gradient is w times the naive one; the clip around pi_prox acts from the
second minibatch on (AReaL takes 4). The k3 KL penalty (``kl_coef``) is added unweighted.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number
from ..nn import (COUNTER, AdamW, clip_grad_norm, token_logps)
from ..tasks import AdditionTask, Task
from .common import (RLResult, blas_limits, check_diverged, check_loop_args, end_step,
                     flops_since, lr_factor, step_range)
from .grpo import GRPOConfig, accumulate_grads, init_run, sample_and_score, step_advantages
from .inputs import check_completion_mask, check_per_token_array
from .losses import grpo_loss, loss_norms, policy_loss

__all__ = ["AsyncGRPOConfig", "OBJECTIVES", "behav_importance_weights", "objective_inputs",
           "step_metrics", "train_async_grpo"]

OBJECTIVES = ("decoupled", "naive", "behaviour")


@dataclass(frozen=True)
class AsyncGRPOConfig(GRPOConfig):
    """Arguments of :func:`train_async_grpo`: :class:`~rlmperf_lite.rl.GRPOConfig` plus the
    staleness bound and the objective. k = ``staleness``: the batch trained at step t was sampled
    by the policy of version max(0, t - k) (k = 1: one-step-off; AReaL's eta).

    Raises:
        ValueError: naming the field, for a negative or non-int ``staleness``, an unknown
            ``objective``, ``num_minibatches`` not in [1, num_prompts], or a
            ``behav_imp_weight_cap`` <= 1 or set for another objective than "decoupled".
    """

    staleness: int = 0
    """k, weight versions the sampler lags behind the trainer (0 = synchronous GRPO)."""
    objective: str = "decoupled"
    """``"decoupled"`` (AReaL), ``"naive"`` or ``"behaviour"``; see the module docstring."""
    num_minibatches: int = 1
    """PPO updates per batch, each on an equal share of its groups (AReaL's
    ``ppo_n_minibatches``, 4 in its paper); 1 = one update per batch, as ``train_grpo``."""
    behav_imp_weight_cap: float | None = None
    """With the decoupled objective only, tokens whose w = pi_prox / pi_behav exceeds this get
    weight 0 (AReaL's ``behav_imp_weight_cap``, which filters rather than clamps; its default
    is None = no cap)."""

    def __post_init__(self):
        super().__post_init__()
        check_int("AsyncGRPOConfig.staleness", self.staleness, 0)
        check_choice("AsyncGRPOConfig.objective", self.objective, OBJECTIVES)
        check_int("AsyncGRPOConfig.num_minibatches", self.num_minibatches, 1)
        if self.num_minibatches > self.num_prompts:
            raise ValueError(f"AsyncGRPOConfig.num_minibatches={self.num_minibatches} exceeds "
                             f"num_prompts={self.num_prompts} (a minibatch holds whole groups)")
        if self.behav_imp_weight_cap is not None:
            check_number("AsyncGRPOConfig.behav_imp_weight_cap", self.behav_imp_weight_cap,
                         low=1, low_open=True)
            if self.objective != "decoupled":
                raise ValueError(f"AsyncGRPOConfig.behav_imp_weight_cap weights the decoupled "
                                 f"objective only; set it to None for objective="
                                 f"{self.objective!r}")


def behav_importance_weights(prox_per_token_logps, behav_per_token_logps, completion_mask, *,
                             cap: float | None = None) -> np.ndarray:
    """w = pi_prox / pi_behav per token, (B*G, R): 1 on masked positions, exactly 1 where the
    two log-probs are equal (fresh data), and 0 where w > ``cap`` (AReaL filters such tokens).
    AReaL (arXiv 2505.24298) Sec. 5.2, Eq. 5: the off-policy correction of the decoupled
    objective. ValueError naming the argument for mismatched shapes, non-finite log-probs, a
    mask that is not 0/1, a ``cap`` that is not a number > 0, or a weight that overflows."""
    prox = check_per_token_array("prox_per_token_logps", prox_per_token_logps)
    behav = check_per_token_array("behav_per_token_logps", behav_per_token_logps, prox.shape)
    mask = check_completion_mask(completion_mask, prox.shape)
    if cap is not None:
        check_number("cap", cap, low=0, low_open=True)
    with np.errstate(over="ignore", invalid="ignore"):
        log_w = np.where(mask > 0, prox - behav, 0).astype(np.result_type(prox, behav, mask))
        w = np.exp(log_w)
    if not np.isfinite(w).all():
        raise ValueError(f"the importance weight exp(prox_per_token_logps - "
                         f"behav_per_token_logps) overflows: the log-ratio reaches "
                         f"{log_w.max():.4g}; the behaviour policy is too far from the trainer's "
                         "(lower staleness or lr)")
    return w if cap is None else np.where(w <= cap, w, 0.0).astype(w.dtype)


def objective_inputs(objective: str, advantages, behav_per_token_logps, prox_per_token_logps,
                     completion_mask, *, cap: float | None = None):
    """The (old_per_token_logps, advantages) that turn PPO's clipped surrogate
    (:func:`rlmperf_lite.rl.policy_loss` and its gradient) into each objective.

    Decoupled: old = prox and A_t w_t — since w > 0 is a constant,
    ``w min(r A, clip(r) A) = min(r (w A), clip(r) (w A))`` and the clip decision is unchanged,
    so the decoupled loss (AReaL Eq. 5) and its gradient ``w * policy_loss_grad(logp, prox, A)``
    are PPO's with per-token advantages w A. Naive: (prox, A). Behaviour: (behav, A).

    Arrays (B*G, R); advantages (B*G,) or (B*G, R). Raises ValueError for an unknown objective,
    advantages of another shape, or as :func:`behav_importance_weights`.
    """
    check_choice("objective", objective, OBJECTIVES)
    if objective == "behaviour":
        return behav_per_token_logps, advantages
    if objective == "naive":
        return prox_per_token_logps, advantages
    adv = np.asarray(advantages)
    w = behav_importance_weights(prox_per_token_logps, behav_per_token_logps, completion_mask,
                                 cap=cap)
    if adv.shape not in (w.shape[:1], w.shape):
        raise ValueError(f"advantages must have shape ({w.shape[0]},) or {w.shape}, got "
                         f"{adv.shape}")
    return prox_per_token_logps, (adv[:, None] if adv.ndim == 1 else adv) * w   # (B*G, R)


def train_async_grpo(config: AsyncGRPOConfig = AsyncGRPOConfig(), *,
                     task: Task | None = None, progress: bool = False, on_step=None,
                     eval_every: int = 0, base_params: dict | None = None) -> RLResult:
    """Warm-start then asynchronous GRPO with staleness ``config.staleness``; arguments and
    result as :func:`rlmperf_lite.rl.train_grpo`. At staleness 0 (and one minibatch) every
    objective trains exactly as ``train_grpo``: the same numbers for the same config and seed.

    History rows add ``staleness`` (versions between sampler and trainer: min(t, k)),
    ``importance_weight_mean`` / ``importance_weight_max`` (w = pi_prox / pi_behav over completion
    tokens, whatever the objective), ``prox_logps_s`` (the recompute) and ``weight_sync_s``
    (copying the new weights to the sampler's FIFO). Loss metrics are means over the minibatches;
    ``approx_kl`` is between the behaviour and the current policy (cleanrl's k3), while
    ``clipfrac``, ``ratio_mean`` and ``ratio_max`` are those of the objective's own ratio.

    Raises:
        ValueError: naming the argument — ``config`` not an :class:`AsyncGRPOConfig`, ``task``
            not an AdditionTask, a bad ``eval_every``, ``on_step`` not callable, ``progress``
            not a bool, ``base_params`` that do not fit ``config.model``, a rollout-engine or
            correction field off its default (only :func:`~rlmperf_lite.rl.train_grpo` runs
            them), or a run that diverged (the step and the lr named).
    """
    check_loop_args(config, AsyncGRPOConfig, task, progress, on_step, eval_every, None)
    config.check_train_grpo_only("train_async_grpo")
    # a diverging run overflows inside numpy before check_diverged names the cause (the lr)
    with blas_limits(config), np.errstate(over="ignore", invalid="ignore"):
        return _train(config, task or AdditionTask(), progress, on_step, eval_every, base_params)


def _train(c: AsyncGRPOConfig, task, progress, on_step, eval_every, base_params) -> RLResult:
    cfg, P = c.model, task.prompt_len
    # the same generators, drawn in the same order, as train_grpo: k = 0 reproduces it exactly
    params, result, rng_data, rng_sample = init_run(c, task, base_params)
    opt = AdamW(params, lr=c.lr, betas=c.adam_betas)
    versions = deque([(0, _snapshot(params))], maxlen=c.staleness + 1)    # (version, weights)
    steps = step_range(c, f"async GRPO k={c.staleness}", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        behav_version, sampler_params = versions[0]           # the oldest weights in the FIFO
        tokens, mask, behav_logps, rewards, ref_logps, rounds, zero_std = sample_and_score(
            sampler_params, result.base_params, c, task, rng_data, rng_sample, times)
        check_diverged(step, c, "the rollout's log-probs", behav_logps)
        t2 = time.perf_counter()
        advantages = step_advantages(c, rewards, mask, behav_logps, ref_logps)
        times["advantages_s"] = (t := time.perf_counter()) - t2
        kl_ref = ref_logps if c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp" else None
        # proximal policy = the weights before this step's updates; for a fresh batch (sampled
        # by these very weights) it is the behaviour policy, and train_grpo's old policy
        if behav_version == step:
            prox_logps = behav_logps
        else:
            with COUNTER.phase("prox_logps"):
                prox_logps = token_logps(params, tokens, cfg, c.temperature)[:, P - 1:]
            check_diverged(step, c, "the proximal log-probs", prox_logps)
        times["prox_logps_s"] = (t2 := time.perf_counter()) - t
        old, adv = objective_inputs(c.objective, advantages, behav_logps, prox_logps, mask,
                                    cap=c.behav_imp_weight_cap)               # (B*G, R)
        opt.lr = c.lr * lr_factor(step, c)
        G, logs = c.group_size, []
        for rows in np.array_split(np.arange(len(tokens)).reshape(-1, G), c.num_minibatches):
            if rows.size:                       # minibatches of whole groups, one update each
                mb = slice(rows[0, 0], rows[-1, -1] + 1)
                logs.append(_update(params, opt, c, tokens[mb], mask[mb], old[mb], adv[mb],
                                    behav_logps[mb], None if kl_ref is None else kl_ref[mb], P,
                                    step))
        times["update_s"] = (t := time.perf_counter()) - t2
        versions.append((step + 1, _snapshot(params)))        # "broadcast" to the rollout FIFO
        times["weight_sync_s"] = time.perf_counter() - t
        row = {**step_metrics(step, rewards, mask, logs, step - behav_version, prox_logps,
                              behav_logps),
               **times, "step_s": sum(times.values()),
               "response_width": int(mask.shape[1]), "resample_rounds": rounds,
               "frac_reward_zero_std": zero_std, **flops_since(flops_before)}
        end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                 on_step=on_step, eval_every=eval_every, stop_at_accuracy=None)
    return result


def step_metrics(step: int, rewards, completion_mask, logs: list, staleness: int,
                 prox_per_token_logps, behav_per_token_logps) -> dict:
    """The per-step metrics of an asynchronous step, shared by :func:`train_async_grpo` and the
    Ray controller (:func:`rlmperf_lite.distributed.train_ray`): rewards (B*G,), completion_mask,
    prox/behav per-token log-probs (B*G, R); ``logs`` one dict of metrics per minibatch update
    (averaged); ``staleness`` the batch's age in versions. Importance weights as
    :func:`behav_importance_weights` (book section :ref:`sec-staleness-learner`)."""
    mask = completion_mask
    w = behav_importance_weights(prox_per_token_logps, behav_per_token_logps, mask)
    return {"step": step, "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "response_length": float(mask.sum(axis=1).mean()),
            "response_length_max": int(mask.sum(axis=1).max()),
            **{k: float(np.mean([log[k] for log in logs])) for k in logs[0]},
            "staleness": staleness,
            "importance_weight_mean": float((w * mask).sum() / max(mask.sum(), 1.0)),
            "importance_weight_max": float(np.max(w, where=mask > 0, initial=0.0))}


def _update(params, opt, c: AsyncGRPOConfig, tokens, mask, old, adv, behav, kl_ref, P,
            step) -> dict:
    """One AdamW step of the clipped surrogate (old, adv from :func:`objective_inputs`) on these
    rows, accumulated over micro-batches as :func:`rlmperf_lite.rl.train_grpo` does; returns
    the metrics (``approx_kl`` of the behaviour vs the current policy)."""
    norms = loss_norms(mask, c)
    grads, logps, entropy = accumulate_grads(params, tokens, old, adv, mask, c, norms,
                                             prompt_len=P, ref_per_token_logps=kl_ref,
                                             step=step)
    loss, metrics = grpo_loss(logps, old, adv, mask, c, norms,
                                      ref_per_token_logps=kl_ref)
    grad_norm = clip_grad_norm(grads, c.max_grad_norm)
    opt.step(params, grads)
    return {"loss": loss, "entropy": float((entropy * mask).sum() / mask.sum()),
            "grad_norm": grad_norm, **metrics,
            "approx_kl": policy_loss(logps, behav, adv, mask)[1]["approx_kl"]}


def _snapshot(params: dict) -> dict:
    """A copy of the weights: what the trainer sends to the rollout engine."""
    return {k: v.copy() for k, v in params.items()}
