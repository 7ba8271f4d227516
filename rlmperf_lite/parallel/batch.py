"""The GRPO batch every parallel step runs on, and the single-rank step each must equal.

:func:`make_grpo_batch` runs the GRPO loop's rollout once (prompts, samples, rewards,
advantages over the whole batch) so that data, ZeRO, tensor, pipeline and expert parallelism all
start from the same batch; :func:`reference_grpo_step` is the loop's own update on it, and
:func:`loss_forward` / :func:`local_grads` are one rank's forward and backward on a slice of it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_choice, check_int
from ..nn import (AdamW, TinyLMConfig, clip_grad_norm, copy_params, generate, logps_backward,
                  logps_forward)
from ..rl.advantages import grpo_advantages, rloo_advantages
from ..rl.common import blas_limits, check_fits_task, lr_factor
from ..rl.grpo import GRPOConfig
from ..rl.losses import grpo_loss, grpo_loss_grad, loss_norms
from ..rl.warmstart import warm_start
from ..tasks import AdditionTask

__all__ = ["GRPOBatch", "make_grpo_batch", "loss_forward", "local_grads", "reference_grpo_step"]


@dataclass(frozen=True)
class GRPOBatch:
    """One GRPO rollout batch, n = B * G rows laid out group by group."""

    tokens: np.ndarray
    """(n, P + R) int — prompt then completion."""
    completion_mask: np.ndarray
    """(n, R) float32 — 1 for generated tokens up to the end token."""
    old_per_token_logps: np.ndarray
    """(n, R) — behaviour log-probs recorded at sampling time."""
    advantages: np.ndarray
    """(n,) float32 — group-relative advantages, computed on the whole batch."""
    prompt_len: int
    """P; the completion's log-probs are columns P - 1 .. of the model's (n, P + R - 1)."""
    group_size: int
    """G, rows per prompt."""
    cfg: TinyLMConfig
    """The model shape the batch was sampled with."""
    params: dict
    """float64 copy of the weights that sampled the batch (a common starting point)."""
    rewards: np.ndarray
    """(n,) verifier rewards."""
    ref_per_token_logps: np.ndarray | None = None
    """(n, R) reference log-probs (the sampling weights), when the config has ``kl_coef`` > 0."""

    @property
    def num_groups(self) -> int:
        """B, prompts in the batch."""
        return len(self.tokens) // self.group_size

    def rows(self, sl) -> GRPOBatch:
        """The batch restricted to rows ``sl`` (a slice or index array; same model, params, P)."""
        ref = None if self.ref_per_token_logps is None else self.ref_per_token_logps[sl]
        return replace(self, tokens=self.tokens[sl], completion_mask=self.completion_mask[sl],
                       old_per_token_logps=self.old_per_token_logps[sl],
                       advantages=self.advantages[sl], rewards=self.rewards[sl],
                       ref_per_token_logps=ref)


def make_grpo_batch(cfg: TinyLMConfig, config: GRPOConfig, seed: int, *,
                    params: dict | None = None) -> GRPOBatch:
    """Run the GRPO loop's rollout once: ``config.num_prompts`` addition prompts x
    ``config.group_size`` samples with :func:`rlmperf_lite.nn.generate`, rewards from the
    verifier, advantages from :func:`rlmperf_lite.rl.grpo_advantages` (or RLOO).

    ``params`` (float32 weights of ``cfg``) default to the loop's warm-started base model for
    ``seed`` (~2 s): a random init is never right, so every advantage would be 0 and every
    gradient 0 (see :func:`rlmperf_lite.rl.warm_start`). ``config.model`` is ignored (``cfg`` is
    the model); dynamic sampling and the overlong penalty are not applied. ``seed`` seeds the
    warm-start, the prompts and the sampling exactly as ``train_grpo`` with that seed does, so
    the batch is that run's first batch.

    Raises:
        ValueError: ``cfg`` not a TinyLMConfig or not fitting the addition task, ``config`` not a
            GRPOConfig, ``seed`` not an int >= 0, ``params`` not the weights of ``cfg``'s model,
            or ``config.advantage_estimator`` is ``"reinforce_pp"`` (its KL-shaped returns need
            the reference pass of the loop).
    """
    if not isinstance(cfg, TinyLMConfig):
        raise ValueError(f"cfg must be a TinyLMConfig (e.g. config.model), got "
                         f"{type(cfg).__name__}")
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig, got {type(config).__name__}")
    check_int("seed", seed, 0)
    if params is not None:
        copy_params(params, cfg, "params")           # keys, shapes, finite: raises if not
    c, task = replace(config, model=cfg), AdditionTask()
    check_fits_task(c, task)
    check_choice("config.advantage_estimator", c.advantage_estimator, ("grpo", "rloo"))
    rng_init, rng_data, rng_sample = np.random.default_rng(seed).spawn(3)     # as the loop
    with blas_limits(c):
        if params is None:
            params, _ = warm_start(cfg, task, rng_init, max_steps=c.warmstart_max_steps,
                                   target_accuracy=c.warmstart_target_accuracy)
        prompts, pairs = task.sample_prompts(rng_data, c.num_prompts)         # (B, P)
        G = c.group_size
        ro = generate(params, prompts, cfg, max_new_tokens=c.max_new_tokens, eos_id=task.eos_id,
                      pad_id=task.pad_id, group_size=G, temperature=c.temperature,
                      rng=rng_sample)                                         # n = B * G rows
        rewards = task.reward(np.repeat(pairs, G, axis=0), ro.tokens[:, ro.prompt_len:])
        adv = (grpo_advantages(rewards, G, scale=c.adv_scale) if c.advantage_estimator == "grpo"
               else rloo_advantages(rewards, G))                              # (n,)
        params64 = {k: v.astype(np.float64) for k, v in params.items()}
        ref = None
        if c.kl_coef > 0:                   # the reference is the sampling model, in float64
            ref = logps_forward(params64, ro.tokens, cfg, c.temperature)[0][:, ro.prompt_len - 1:]
    return GRPOBatch(tokens=ro.tokens, completion_mask=ro.completion_mask,
                     old_per_token_logps=ro.per_token_logps, advantages=adv,
                     prompt_len=ro.prompt_len, group_size=G, cfg=cfg, params=params64,
                     rewards=rewards, ref_per_token_logps=ref)


def loss_forward(params: dict, batch: GRPOBatch, config: GRPOConfig, norms: dict):
    """Forward half of one rank's GRPO step, exactly the loop's micro-batch step:
    ``logps_forward``, then ``grpo_loss_grad`` on columns P - 1.. weighted with ``norms`` (pass
    the whole batch's :func:`rlmperf_lite.rl.loss_norms`).

    Returns (loss, dlogps, cache): the rank's term of the batch loss (float), dLoss/dlogps
    (rows, P + R - 1) (0 on prompt columns) and the cache for ``logps_backward``.
    """
    c, P = config, batch.prompt_len
    ref = batch.ref_per_token_logps if c.kl_coef > 0 else None
    logps_all, cache = logps_forward(params, batch.tokens, batch.cfg, c.temperature)
    logps = logps_all[:, P - 1:]                                              # (rows, R)
    dlogps = np.zeros_like(logps_all)                                         # (rows, P+R-1)
    dlogps[:, P - 1:] = grpo_loss_grad(logps, batch.old_per_token_logps, batch.advantages,
                                      batch.completion_mask, c, norms, ref_per_token_logps=ref)
    loss, _ = grpo_loss(logps, batch.old_per_token_logps, batch.advantages,
                                batch.completion_mask, c, norms, ref_per_token_logps=ref)
    return loss, dlogps, cache


def local_grads(params: dict, batch: GRPOBatch, config: GRPOConfig, norms: dict):
    """:func:`loss_forward` then ``logps_backward``: (loss term, grads dict like ``params``)."""
    loss, dlogps, cache = loss_forward(params, batch, config, norms)
    return loss, logps_backward(dlogps, cache)


def reference_grpo_step(params: dict, batch: GRPOBatch, config: GRPOConfig, *,
                        opt: AdamW | None = None):
    """The single-rank GRPO update every parallel step must equal: the loop's gradient on the
    whole batch, ``clip_grad_norm(max_grad_norm)``, then AdamW at ``lr * lr_factor(step)``.

    ``opt``: the AdamW to continue (its ``t`` is the step index); None starts one at step 0 as
    the loop does. ``params`` is not modified.

    Returns (loss, grads, new_params): the batch loss, the batch gradient BEFORE clipping, and
    the updated weights (a new dict).
    """
    loss, grads = local_grads(params, batch, config, loss_norms(batch.completion_mask, config))
    new_params = {k: v.copy() for k, v in params.items()}
    if opt is None:
        opt = AdamW(new_params, lr=config.lr, betas=config.adam_betas)
    clipped = {k: g.copy() for k, g in grads.items()}
    clip_grad_norm(clipped, config.max_grad_norm)
    opt.lr = config.lr * lr_factor(opt.t, config)
    opt.step(new_params, clipped)
    return loss, grads, new_params
