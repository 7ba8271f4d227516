"""Held-out evaluation: greedy accuracy of a policy on a split of the task, with the response
length and the share of answers that write a chain of thought (book section :ref:`sec-toy-task`)."""
from __future__ import annotations

import numpy as np

from ..nn import TinyLMConfig, generate
from ..tasks import Task

__all__ = ["evaluate", "evaluate_details", "forced_accuracy"]


def _greedy(params: dict, cfg: TinyLMConfig, task: Task, problems, prefix, max_new_tokens: int):
    """Greedy completions (n, F + t) of ``problems`` that start with ``prefix`` (n, F), the
    prefix appended to the prompt, and their mask; F = 0 is plain greedy decoding."""
    prefix = np.asarray(prefix, dtype=np.int64).reshape(len(problems), -1)
    rollout = generate(params, np.concatenate([task.encode_prompts(problems), prefix], axis=1),
                       cfg, max_new_tokens=max_new_tokens - prefix.shape[1], eos_id=task.eos_id,
                       pad_id=task.pad_id, temperature=0.0)
    completions = np.concatenate([prefix, rollout.tokens[:, rollout.prompt_len:]], axis=1)
    mask = np.concatenate([np.ones(prefix.shape, np.float32), rollout.completion_mask], axis=1)
    return completions, mask


def evaluate_details(params: dict, cfg: TinyLMConfig, task: Task, split: str = "eval",
                     max_new_tokens: int | None = None) -> dict:
    """Greedy decoding on every problem of ``split`` -> ``accuracy`` (mean reward),
    ``response_len_mean`` (tokens up to and with the end token) and ``cot_share`` (the share of
    responses that write a chain before the answer, ``task.uses_chain``). ``max_new_tokens``
    None uses ``task.eval_max_new_tokens``."""
    problems = task.problems(split)
    completions, mask = _greedy(params, cfg, task, problems, np.zeros((len(problems), 0)),
                                max_new_tokens or task.eval_max_new_tokens)
    rewards = task.reward(problems, completions)
    return {"accuracy": float(rewards.mean(dtype=np.float64)),
            "response_len_mean": float(mask.sum(axis=1).mean(dtype=np.float64)),
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
    completions, _ = _greedy(params, cfg, task, problems, prefix, task.eval_max_new_tokens)
    return float(task.reward(problems, completions).mean(dtype=np.float64))
