"""GRPO on the tiny LM, one readable loop (book section 1.5, lab Chapter 1).

Each step: sample B prompts and G completions each with the KV-cached sampler (rollout), score
them with the verifier (reward), compute group-relative advantages, optionally the reference
model's log-probs for a k3 KL penalty, then one AdamW step on the PPO-clipped surrogate whose
ratio is taken against the behaviour log-probs recorded at sampling time (the "old" policy; with
one update per batch the ratio starts at 1 and clipping only guards rounding differences).
Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300), Eq. 3 with token-mean aggregation.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from ..nn import (
    COUNTER,
    AdamW,
    TinyLMConfig,
    clip_grad_norm,
    generate,
    logps_backward,
    logps_forward,
    token_entropy,
    token_logps,
)
from ..tasks import AdditionTask
from .advantages import grpo_advantages
from .evaluate import evaluate
from .losses import (AGG_MODES, aggregate_weights, kl_estimate, kl_estimate_grad, policy_loss,
                     policy_loss_grad)
from .warmstart import warm_start

__all__ = ["GRPOConfig", "GRPOResult", "train_grpo", "evaluate"]


@dataclass(frozen=True)
class GRPOConfig:
    """Arguments of :func:`train_grpo` (defaults solve the addition task; see the Chapter 1 lab)."""

    seed: int = 0
    """Seeds the init, the warm-start data, the prompts and the sampling."""
    steps: int = 800
    """GRPO steps (optimizer updates)."""
    num_prompts: int = 32
    """B, prompts per step."""
    group_size: int = 4
    """G, completions per prompt."""
    lr: float = 1e-3
    """AdamW learning rate of the RL phase."""
    lr_warmup_steps: int = 20
    """Linear learning-rate warm-up over the first steps (Adam's first updates are large)."""
    lr_schedule: str = "linear"
    """After warm-up: ``"constant"``, or ``"linear"`` decay to 0 at the last step."""
    adam_betas: tuple = (0.9, 0.999)
    """AdamW (beta1, beta2)."""
    clip_eps: float = 0.2
    """PPO clip range (symmetric)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to the frozen warm-start model; 0 skips the reference pass."""
    temperature: float = 1.0
    """Sampling temperature (the trainer's log-probs use the same)."""
    max_new_tokens: int = 5
    """R_max, completion budget (the longest answer needs 4)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    loss_agg_mode: str = "token-mean"
    """See :func:`rlmperf_lite.rl.losses.aggregate_weights`."""
    warmstart_max_steps: int = 400
    """Most supervised steps of the base model (see :mod:`rlmperf_lite.rl.warmstart`)."""
    warmstart_target_accuracy: float = 0.4
    """The warm-start stops once greedy accuracy on its own pairs reaches this."""
    model: TinyLMConfig = field(default_factory=TinyLMConfig)
    """Shape of the tiny LM."""
    blas_threads: int | None = 1
    """BLAS threads while training: 1 is fastest for these tiny matrices and makes a run's
    numbers independent of the machine's core count; None keeps the process's setting."""

    def __post_init__(self):
        for name, low in (("steps", 0), ("num_prompts", 1), ("max_new_tokens", 1),
                          ("warmstart_max_steps", 0), ("lr_warmup_steps", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"GRPOConfig.{name} must be an int >= {low}, got {v!r}")
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(f"GRPOConfig.group_size must be an int >= 2 (a group of one has no "
                             f"baseline), got {self.group_size!r}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) \
                or self.seed < 0:
            raise ValueError(f"GRPOConfig.seed must be an int >= 0, got {self.seed!r}")
        for name in ("lr", "temperature", "max_grad_norm", "clip_eps", "kl_coef",
                     "warmstart_target_accuracy"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"GRPOConfig.{name} must be a finite number, got {v!r}")
        for name in ("lr", "temperature", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GRPOConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.warmstart_target_accuracy <= 1:
            raise ValueError(f"GRPOConfig.warmstart_target_accuracy must be in (0, 1], got "
                             f"{self.warmstart_target_accuracy!r}")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ValueError(f"GRPOConfig.adam_betas must be two numbers in [0, 1), got "
                             f"{self.adam_betas!r}")
        if self.loss_agg_mode not in AGG_MODES:
            raise ValueError(f"GRPOConfig.loss_agg_mode must be one of {AGG_MODES}, got "
                             f"{self.loss_agg_mode!r}")
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"GRPOConfig.clip_eps must be in (0, 1), got {self.clip_eps!r}")
        if self.lr_schedule not in ("constant", "linear"):
            raise ValueError(f"GRPOConfig.lr_schedule must be 'constant' or 'linear', got "
                             f"{self.lr_schedule!r}")
        if self.blas_threads is not None and (not isinstance(self.blas_threads, int)
                                              or self.blas_threads < 1):
            raise ValueError(f"GRPOConfig.blas_threads must be None or an int >= 1, got "
                             f"{self.blas_threads!r}")
        if not self.kl_coef >= 0:
            raise ValueError(f"GRPOConfig.kl_coef must be >= 0, got {self.kl_coef!r}")


@dataclass
class GRPOResult:
    """What :func:`train_grpo` returns."""

    params: dict
    history: list = field(default_factory=list)
    """One dict per step (the CLI prints each as a JSON line): the metrics, the wall time of
    each phase (``rollout_s``, ``ref_logps_s``, ``reward_s``, ``advantages_s``, ``update_s``)
    and of the whole step (``step_s``), the decode width R used (``response_width``) and the
    matrix-product FLOPs the model counted per phase (``prefill_flops``, ``decode_flops``, ...)."""
    base_params: dict = field(default_factory=dict)
    """The warm-start model (reference policy)."""
    warmstart_s: float = 0.0


def _lr_factor(step: int, c: GRPOConfig) -> float:
    """Multiplier of ``c.lr`` at ``step``: linear warm-up, then constant, or a linear decay
    towards 0 (the last step uses ``1 / (steps - lr_warmup_steps)``)."""
    if step < c.lr_warmup_steps:
        return (step + 1) / (c.lr_warmup_steps + 1)
    if c.lr_schedule == "linear":
        return 1.0 - (step - c.lr_warmup_steps) / max(c.steps - c.lr_warmup_steps, 1)
    return 1.0


def train_grpo(config: GRPOConfig = GRPOConfig(), *, task: AdditionTask | None = None,
               progress: bool = False, on_step=None, eval_every: int = 0,
               stop_at_accuracy: float | None = None) -> GRPOResult:
    """Warm-start then GRPO; returns the final params and per-step metrics.

    ``progress`` shows a tqdm bar; ``on_step(metrics)`` is called after each step. With
    ``eval_every`` > 0, every that many steps (and at the last) the held-out greedy accuracy is
    added to the step's metrics as ``eval_accuracy``, and training stops early once it reaches
    ``stop_at_accuracy`` (if given): the benchmark's time-to-accuracy.
    """
    if not isinstance(eval_every, (int, np.integer)) or eval_every < 0 \
            or (stop_at_accuracy is not None and not eval_every):
        raise ValueError(f"eval_every must be an int >= 0, and > 0 when stop_at_accuracy is "
                         f"given; got eval_every={eval_every!r}")
    if stop_at_accuracy is not None and not 0 <= stop_at_accuracy <= 1:
        raise ValueError(f"stop_at_accuracy must be in [0, 1], got {stop_at_accuracy!r}")
    if config.blas_threads is None:
        return _train(config, task or AdditionTask(), progress, on_step, eval_every,
                      stop_at_accuracy)
    with threadpool_limits(limits=config.blas_threads, user_api="blas"):
        return _train(config, task or AdditionTask(), progress, on_step, eval_every,
                      stop_at_accuracy)


def _train(config, task, progress, on_step, eval_every, stop_at_accuracy) -> GRPOResult:
    cfg, c = config.model, config
    if cfg.vocab_size != task.vocab_size:
        raise ValueError(f"GRPOConfig.model.vocab_size={cfg.vocab_size} must equal the task's "
                         f"vocab_size={task.vocab_size}")
    if c.max_new_tokens < task.max_answer_len:
        raise ValueError(f"GRPOConfig.max_new_tokens={c.max_new_tokens} is shorter than the "
                         f"task's longest answer ({task.max_answer_len} tokens with the end token)")
    if task.prompt_len + c.max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt length {task.prompt_len} + GRPOConfig.max_new_tokens="
                         f"{c.max_new_tokens} exceeds GRPOConfig.model.max_seq_len="
                         f"{cfg.max_seq_len}")
    rng_init, rng_data, rng_sample = np.random.default_rng(c.seed).spawn(3)
    t0 = time.perf_counter()
    params, _ = warm_start(cfg, task, rng_init, max_steps=c.warmstart_max_steps,
                           target_accuracy=c.warmstart_target_accuracy)
    result = GRPOResult(params=params, base_params={k: v.copy() for k, v in params.items()},
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
        opt.lr = c.lr * _lr_factor(step, c)
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

