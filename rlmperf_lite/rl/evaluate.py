"""Held-out evaluation: greedy accuracy of a policy on a split of the task, with the response
length and the share of answers that write a chain of thought (book section :ref:`sec-toy-task`)."""
from __future__ import annotations

import numpy as np

from ..nn import TinyLMConfig, generate
from ..tasks import Task

__all__ = ["evaluate", "evaluate_details", "forced_accuracy"]


def evaluate_details(params: dict, cfg: TinyLMConfig, task: Task, split: str = "eval",
                     max_new_tokens: int | None = None) -> dict:
    """Greedy decoding on every problem of ``split`` -> ``accuracy`` (mean reward),
    ``response_len_mean`` (tokens up to and with the end token) and ``cot_share`` (the share of
    responses that write a chain before the answer, ``task.uses_chain``). ``max_new_tokens``
    None uses ``task.eval_max_new_tokens``."""
    problems = task.problems(split)
    rollout = generate(params, task.encode_prompts(problems), cfg,
                       max_new_tokens=max_new_tokens or task.eval_max_new_tokens,
                       eos_id=task.eos_id, pad_id=task.pad_id, temperature=0.0)
    completions = rollout.tokens[:, rollout.prompt_len:]
    rewards = task.reward(problems, completions)
    return {"accuracy": float(rewards.mean(dtype=np.float64)),
            "response_len_mean": float(rollout.completion_mask.sum(axis=1).mean(dtype=np.float64)),
            "cot_share": float(task.uses_chain(completions).mean(dtype=np.float64))}


def evaluate(params: dict, cfg: TinyLMConfig, task: Task, split: str = "eval",
             max_new_tokens: int | None = None) -> float:
    """Accuracy of greedy decoding on every problem of ``split`` (addition: the 1,000 held-out
    pairs; see :func:`evaluate_details`)."""
    return evaluate_details(params, cfg, task, split, max_new_tokens)["accuracy"]


def forced_accuracy(params: dict, cfg: TinyLMConfig, task: Task, problems, prefix) -> float:
    """Greedy accuracy when the response must start with ``prefix`` (n, F) (the first chain
    token forces the chain of thought; F = 0 is plain greedy accuracy): the prefix is appended to
    the prompt and scored as the start of the completion."""
    prefix = np.asarray(prefix, dtype=np.int64)
    rollout = generate(params, np.concatenate([task.encode_prompts(problems), prefix], axis=1),
                       cfg, max_new_tokens=task.eval_max_new_tokens - prefix.shape[1],
                       eos_id=task.eos_id, pad_id=task.pad_id, temperature=0.0)
    completions = np.concatenate([prefix, rollout.tokens[:, rollout.prompt_len:]], axis=1)
    return float(task.reward(problems, completions).mean(dtype=np.float64))
