"""What the RL loops of the book share: the common config, the learning-rate schedule, checks
that a config fits its task, the result record (book sections :ref:`sec-grpo` and
:ref:`sec-ppo`)."""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from ..checks import check_bool, check_choice, check_int, check_number, progress_bar
from ..nn import COUNTER, TinyLMConfig
from ..tasks import Task
from .evaluate import evaluate
from .losses import AGG_MODES

__all__ = ["RLConfig", "RLResult", "timed", "lr_factor", "check_fits_task", "check_run_args",
           "check_loop_args", "check_diverged", "blas_limits", "step_range", "flops_since",
           "end_step", "MIN_TEMPERATURE"]


MAX_SAMPLES = 65_536          # samples per step the toy's loops accept (B G rows in memory)
MIN_TEMPERATURE = 1e-6
"""The lowest sampling temperature the loops accept. Above it logits / temperature stays finite
in float32 for logits up to 3e32; 1e-300 (0 in float32) made every log-prob NaN."""


@dataclass(frozen=True)
class RLConfig:
    """Fields every RL loop takes; :class:`~rlmperf_lite.rl.GRPOConfig` and
    :class:`~rlmperf_lite.rl.PPOConfig` add their own.

    Raises:
        ValueError: naming the field, for an impossible or non-finite value.
    """

    seed: int = 0
    """Seeds the init, the warm-start data, the prompts and the sampling."""
    steps: int = 800
    """RL steps (one rollout batch each)."""
    num_prompts: int = 32
    """B, prompts per step."""
    lr: float = 1e-3
    """AdamW learning rate of the RL phase."""
    lr_warmup_steps: int = 20
    """Linear learning-rate warm-up over the first steps (Adam's first updates are large)."""
    lr_schedule: str = "linear"
    """After warm-up, ``"constant"``, or ``"linear"`` decay to 0 at the last step."""
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
    """See :func:`rlmperf_lite.rl.aggregate_weights`."""
    warmstart_max_steps: int = 400
    """Most supervised steps of the base model (see :func:`rlmperf_lite.rl.warm_start`)."""
    warmstart_target_accuracy: float = 0.4
    """The warm-start stops once greedy accuracy on its own pairs reaches this."""
    model: TinyLMConfig = field(default_factory=TinyLMConfig)
    """Shape of the tiny LM."""
    blas_threads: int | None = 1
    """BLAS threads while training — 1 is fastest for these tiny matrices and makes a run's
    numbers independent of the machine's core count; None keeps the process's setting."""

    def __post_init__(self):
        cls = type(self).__name__
        for name, low in (("seed", 0), ("steps", 0), ("num_prompts", 1), ("max_new_tokens", 1),
                          ("warmstart_max_steps", 0), ("lr_warmup_steps", 0)):
            check_int(f"{cls}.{name}", getattr(self, name), low)
        check_int(f"{cls}.blas_threads", self.blas_threads, 1, optional=True)
        if self.num_prompts > MAX_SAMPLES:           # a step's arrays are held in memory
            raise ValueError(f"{cls}.num_prompts={self.num_prompts:,} exceeds {MAX_SAMPLES:,} "
                             "samples per step: lower it")
        for name in ("lr", "max_grad_norm"):
            check_number(f"{cls}.{name}", getattr(self, name), low=0, low_open=True)
        check_number(f"{cls}.temperature", self.temperature, low=MIN_TEMPERATURE)
        check_number(f"{cls}.clip_eps", self.clip_eps, low=0, high=1, low_open=True,
                     high_open=True)
        check_number(f"{cls}.kl_coef", self.kl_coef, low=0)
        check_number(f"{cls}.warmstart_target_accuracy", self.warmstart_target_accuracy, low=0,
                     high=1, low_open=True)
        if not isinstance(self.adam_betas, (tuple, list)) or len(self.adam_betas) != 2:
            raise ValueError(f"{cls}.adam_betas must be a pair (beta1, beta2) of numbers in "
                             f"[0, 1), e.g. (0.9, 0.999); got {self.adam_betas!r}")
        for b in self.adam_betas:
            check_number(f"{cls}.adam_betas", b, low=0, high=1, high_open=True)
        if not isinstance(self.model, TinyLMConfig):
            raise ValueError(f"{cls}.model must be a TinyLMConfig, e.g. TinyLMConfig(hidden_size="
                             f"64); got {self.model!r}")
        check_choice(f"{cls}.loss_agg_mode", self.loss_agg_mode, AGG_MODES)
        check_choice(f"{cls}.lr_schedule", self.lr_schedule, ("constant", "linear"))


@dataclass
class RLResult:
    """What a training loop returns."""

    params: dict
    history: list = field(default_factory=list)
    """One dict per step (the CLI prints each as a JSON line) — the metrics, the wall time of
    each phase (``*_s``) and of the whole step (``step_s``), the decode width R used
    (``response_width``) and the matrix-product FLOPs the model counted per phase
    (``prefill_flops``, ``decode_flops``, ...)."""
    base_params: dict = field(default_factory=dict)
    """The warm-start model (reference policy)."""
    warmstart_s: float = 0.0


@contextmanager
def timed(times: dict, key: str):
    """Add the block's wall time in seconds to ``times[key]``, as in
    ``with timed(times, "rollout_s"):``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[key] = times.get(key, 0.0) + time.perf_counter() - start


def lr_factor(step: int, c: RLConfig) -> float:
    """Multiplier of ``c.lr`` at ``step``: linear warm-up, then constant, or a linear decay
    towards 0 (the last step uses ``1 / (steps - lr_warmup_steps)``).

    Raises:
        ValueError: ``step`` not an int in [0, steps): past the last step a linear schedule
            would give a negative learning rate (gradient ascent).
    """
    check_int("step", step, 0)
    if step >= c.steps:
        raise ValueError(f"step={step} is past the schedule of steps={c.steps}; raise steps")
    if step < c.lr_warmup_steps:
        return (step + 1) / (c.lr_warmup_steps + 1)
    if c.lr_schedule == "linear":
        return 1.0 - (step - c.lr_warmup_steps) / max(c.steps - c.lr_warmup_steps, 1)
    return 1.0


def check_fits_task(c: RLConfig, task: Task) -> None:
    """Raise ValueError if the config cannot solve ``task`` (vocabulary, answer length, context)."""
    name, cfg = type(c).__name__, c.model
    if cfg.vocab_size != task.vocab_size:
        raise ValueError(f"{name}.model.vocab_size={cfg.vocab_size} must equal the task's "
                         f"vocab_size={task.vocab_size}")
    if c.max_new_tokens < task.max_answer_len:
        raise ValueError(f"{name}.max_new_tokens={c.max_new_tokens} is shorter than the "
                         f"task's longest answer ({task.max_answer_len} tokens with the end token)")
    if task.prompt_len + c.max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt length {task.prompt_len} + {name}.max_new_tokens="
                         f"{c.max_new_tokens} exceeds {name}.model.max_seq_len={cfg.max_seq_len}")


def check_run_args(eval_every, stop_at_accuracy) -> None:
    """Validate the run-control arguments of the training loops: ``eval_every`` an int >= 0
    (> 0 with ``stop_at_accuracy``), ``stop_at_accuracy`` None or a number in [0, 1]."""
    if isinstance(eval_every, bool) or not isinstance(eval_every, (int, np.integer)) \
            or eval_every < 0 or (stop_at_accuracy is not None and not eval_every):
        raise ValueError(f"eval_every must be an int >= 0, and > 0 when stop_at_accuracy is "
                         f"given; got eval_every={eval_every!r}")
    if stop_at_accuracy is not None:
        check_number("stop_at_accuracy", stop_at_accuracy, low=0, high=1)


def check_loop_args(config, config_cls: type, task, progress, on_step, eval_every,
                    stop_at_accuracy) -> None:
    """Validate what a training loop is given: ``config`` an instance of ``config_cls`` (a
    PPOConfig handed to train_grpo is refused by name, not with an AttributeError), ``task``
    None or a :class:`~rlmperf_lite.tasks.Task` (AdditionTask, CoTTask), ``progress`` a bool,
    ``on_step`` None or a callable, and the run-control arguments of ``check_run_args``."""
    if not isinstance(config, config_cls):
        name = config_cls.__name__
        raise ValueError(f"config must be {'an' if name[0] in 'AEIOU' else 'a'} {name}, got "
                         f"{type(config).__name__}; build one with {name}(...)")
    if task is not None and not isinstance(task, Task):
        raise ValueError(f"task must be None or an AdditionTask or CoTTask (a "
                         f"rlmperf_lite.tasks.Task), got {type(task).__name__}")
    check_bool("progress", progress)
    if on_step is not None and not callable(on_step):
        raise ValueError(f"on_step must be None or a callable taking the step's metrics, got "
                         f"{on_step!r}")
    check_run_args(eval_every, stop_at_accuracy)


def check_diverged(step, c: RLConfig, what: str, value, *, lr_field: str = "lr") -> None:
    """Raise ValueError if ``value`` (an array or number the loop just computed, e.g. the
    rollout's log-probs) holds a NaN or inf: training diverged at ``step`` (None: unknown), and
    the likely cause is the learning rate ``c.<lr_field>``."""
    if not np.isfinite(value).all():
        at = "" if step is None else f" at step {step}"
        raise ValueError(f"training diverged{at}: {what} became non-finite; "
                         f"{lr_field}={getattr(c, lr_field):g} is too high: lower it")


def blas_limits(c: RLConfig):
    """Context limiting BLAS to ``c.blas_threads`` (a no-op for None)."""
    if c.blas_threads is None:
        return nullcontext()
    return threadpool_limits(limits=c.blas_threads, user_api="blas")


def step_range(c: RLConfig, desc: str, progress: bool):
    """``range(c.steps)``, wrapped in a text tqdm bar when ``progress``
    (:func:`~rlmperf_lite.checks.progress_bar`)."""
    return progress_bar(range(c.steps), progress, desc=desc, unit="step")


def flops_since(before: dict) -> dict:
    """``{phase}_flops`` counted by ``rlmperf_lite.nn.COUNTER`` since the snapshot ``before``."""
    return {f"{k}_flops": v - before.get(k, 0.0) for k, v in COUNTER.counts.items()
            if v != before.get(k, 0.0)}


def end_step(row: dict, *, step: int, c: RLConfig, params: dict, task: Task,
             result: RLResult, steps, on_step, eval_every: int, stop_at_accuracy) -> bool:
    """Bookkeeping shared by the loops after a step: optional held-out evaluation, history,
    progress bar, callback. Returns True when training should stop (accuracy reached)."""
    if eval_every and ((step + 1) % eval_every == 0 or step + 1 == c.steps):
        row["eval_accuracy"] = evaluate(params, c.model, task, max_new_tokens=c.max_new_tokens)
    result.history.append(row)
    if hasattr(steps, "set_postfix"):
        steps.set_postfix(reward=f"{row['reward_mean']:.2f}", refresh=False)
    if on_step is not None:
        on_step(row)
    return stop_at_accuracy is not None and row.get("eval_accuracy", -1.0) >= stop_at_accuracy
