"""The supervised warm-start that stands in for a pretrained base model (book section
:ref:`sec-toy-task`).

RL needs a policy that is sometimes right: from a random init every group of the addition task
is all-wrong, every group-relative advantage is 0, and GRPO never moves. Real RL post-training
starts from a pretrained (and often instruction-tuned) model; here a short, broad but partial
supervised phase plays that role: next-token cross-entropy on the answer tokens of a fixed 10% of
the training pairs, stopped early so the model is right only part of the time and keeps its
entropy. A narrow, confident warm-start collapses entropy and leaves RL nothing to explore.
"""
from __future__ import annotations

import numpy as np

from ..nn import AdamW, TinyLMConfig, clip_grad_norm, init_params, logps_backward, logps_forward
from ..tasks import Task
from .evaluate import forced_accuracy

__all__ = ["warm_start"]


def warm_start(cfg: TinyLMConfig, task: Task, rng: np.random.Generator, *,
               max_steps: int = 400, target_accuracy: float = 0.3, check_every: int = 10,
               batch_size: int = 64, lr: float = 3e-3,
               max_grad_norm: float = 1.0) -> tuple[dict, list[float]]:
    """Random init, then AdamW steps of answer-token cross-entropy on the task's warm-start
    batches (``task.warmstart_batch``), stopped early once the task's stop rule reaches
    ``target_accuracy`` (checked every ``check_every`` steps) or after ``max_steps``. The stop
    rule is the worst greedy accuracy over ``task.warmstart_checks()`` (addition: accuracy on
    the warm-start pairs; CoT: the worst k's accuracy with the chain forced).

    The stopping rule fixes the base model's quality rather than its step count, so every seed
    starts RL from a comparable policy (how often learning has "clicked" after a fixed number of
    steps varies a lot between seeds).

    Returns:
        ``(params, losses)``: the base model and the loss of each step (nats per answer token).
    Raises:
        ValueError: ``max_steps`` < 0, ``batch_size`` < 1 or ``target_accuracy`` outside (0, 1].
    """
    if not 0 < target_accuracy <= 1:
        raise ValueError(f"target_accuracy must be in (0, 1], got {target_accuracy!r}")
    steps = max_steps
    if steps < 0:
        raise ValueError(f"warm-start max_steps must be >= 0, got {steps!r}")
    if check_every < 1:
        raise ValueError(f"warm-start check_every must be >= 1, got {check_every!r}")
    if batch_size < 1:
        raise ValueError(f"warm-start batch_size must be >= 1, got {batch_size!r}")
    params = init_params(cfg, rng)
    opt = AdamW(params, lr=lr)
    checks = task.warmstart_checks()
    losses = []
    for step in range(steps):
        if step % check_every == 0 and step and min(
                forced_accuracy(params, cfg, task, problems, prefix)
                for problems, prefix in checks) >= target_accuracy:
            break
        tokens, loss_mask = task.warmstart_batch(rng, batch_size)
        logps, cache = logps_forward(params, tokens, cfg)                    # (n, T-1)
        n_tok = float(loss_mask.sum())
        losses.append(float(-(logps * loss_mask).sum() / n_tok))
        grads = logps_backward(-loss_mask / n_tok, cache)
        clip_grad_norm(grads, max_grad_norm)
        opt.step(params, grads)
    return params, losses
