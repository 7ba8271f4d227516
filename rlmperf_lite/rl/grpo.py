"""GRPO on the tiny LM, one readable loop (book section :ref:`sec-grpo`).

Each step: sample B prompts and G completions each with the KV-cached sampler (rollout), score
them with the verifier (reward), compute group-relative advantages, optionally the reference
model's log-probs for a k3 KL penalty, then one AdamW step on the PPO-clipped surrogate whose
ratio is taken against the behaviour log-probs recorded at sampling time (the "old" policy; with
one update per batch the ratio starts at 1 and clipping only guards rounding differences, unless
the rollout engine's numerics differ from the trainer's: :func:`rollout_correction`).
Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300), Eq. 3 with token-mean aggregation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..checks import check_bool, check_choice, check_int, check_number
from ..nn import (COUNTER, AdamW, TinyLMConfig, clip_grad_norm, copy_params, generate,
                  logps_backward, logps_forward, token_entropy, token_logps)
from ..nn.engine import ENGINE_DTYPES, EngineConfig
from ..tasks import COT_DEFAULTS, AdditionTask, Task
from .advantages import (check_rewards, grpo_advantages, reinforce_pp_advantages,
                         reinforce_pp_baseline_advantages, rloo_advantages)
from .common import (MAX_SAMPLES, RLConfig, RLResult, blas_limits, check_diverged,
                     check_fits_task, check_loop_args, end_step, flops_since, lr_factor,
                     step_range)
from .losses import (KL_ESTIMATORS, grpo_loss, grpo_loss_grad, kl_estimate, loss_norms,
                     overlong_penalty)
from .mismatch import (ROLLOUT_IS_LEVELS, ROLLOUT_RS_LEVELS, mismatch_metrics,
                       rollout_is_weights, rollout_rs_mask)
from .warmstart import warm_start

__all__ = ["GRPOConfig", "GRPOResult", "train_grpo", "step_advantages", "frac_reward_zero_std",
           "sample_and_score", "accumulate_grads", "rollout_correction"]


@dataclass(frozen=True)
class GRPOConfig(RLConfig):
    """Arguments of :func:`train_grpo` (defaults solve the addition task; see
    :ref:`sec-grpo-running`). The shared fields are documented on
    :class:`rlmperf_lite.rl.common.RLConfig`."""

    group_size: int = 4
    """G, completions per prompt."""
    advantage_estimator: str = "grpo"
    """``"grpo"`` (group baseline), ``"rloo"`` (leave-one-out), ``"reinforce_pp"``
    (REINFORCE++: batch-normalised returns, KL in the reward) or ``"reinforce_pp_baseline"``
    (group mean subtracted, then whitened over the batch's tokens, KL in the loss)."""
    adv_scale: str = "group"
    """For "grpo", divide by the group's std (``"group"``), the batch's (``"batch"``) or not at
    all (``"none"``, Dr. GRPO)."""
    clip_eps_high: float | None = None
    """Upper clip range; None = ``clip_eps`` (DAPO's clip-higher sets it above)."""
    clip_ratio_c: float | None = None
    """Dual clip (verl's ``clip_ratio_c``, 3.0 there): the loss of a token with a negative
    advantage is capped at ``clip_ratio_c`` times abs(A); None = off."""
    kl_estimator: str = "k3"
    """The per-token estimator of the KL term in the loss, one of ``KL_ESTIMATORS``."""
    dynamic_sampling: bool = False
    """DAPO drops groups whose rewards are all equal and samples more prompts to refill the
    batch."""
    max_resample_rounds: int = 3
    """Most extra sampling rounds per step with ``dynamic_sampling``."""
    overlong_buffer_len: int = 0
    """DAPO soft overlong punishment over the last this-many tokens of the budget (0 = off)."""
    micro_batch_size: int | None = None
    """Sequences per forward/backward (gradient accumulation); None = the whole batch at once."""
    rollout_dtype: str = "float32"
    """Numerics of the rollout engine, ``"float32"`` (the trainer's), ``"bfloat16"`` or
    ``"float16"`` (see :class:`~rlmperf_lite.nn.EngineConfig`)."""
    top_k: int | None = None
    """The engine samples among the k most likely tokens (None = all)."""
    top_p: float | None = None
    """The engine samples from the top-p nucleus (None = no truncation)."""
    bypass_mode: bool = True
    """Whether PPO's old log-probs are the engine's (True, verl's ``bypass_mode``) or recomputed
    on the trainer (False, the old-log-prob pass of verl's default decoupled mode)."""
    rollout_is: str | None = None
    """Truncated importance weights trainer/engine, ``"token"`` or ``"sequence"`` (verl's
    ``rollout_is``); needs ``bypass_mode=False``."""
    rollout_is_threshold: float = 2.0
    """The cap C of those weights, ``min(rho, C)`` (verl's ``rollout_is_threshold``)."""
    rollout_rs: str | None = None
    """Reject tokens or sequences whose ratio leaves the band, per ``"token"``, ``"sequence"``
    (product) or ``"geometric"`` (geometric mean) (verl's ``rollout_rs``); needs
    ``bypass_mode=False``."""
    rollout_rs_threshold: float = 2.0
    """Upper end of the band (>= 1)."""
    rollout_rs_threshold_lower: float | None = None
    """Lower end of the band (<= 1); None = ``1 / rollout_rs_threshold``."""

    VARIANTS = {
        "grpo": {},
        "dr_grpo": {"adv_scale": "none", "loss_agg_mode": "seq-mean-token-sum-norm"},
        "dapo": {"clip_eps_high": 0.28, "dynamic_sampling": True, "overlong_buffer_len": 1},
        "rloo": {"advantage_estimator": "rloo"},
        "reinforce_pp": {"advantage_estimator": "reinforce_pp", "kl_coef": 0.01},
        "reinforce_pp_baseline": {"advantage_estimator": "reinforce_pp_baseline"},
    }

    @classmethod
    def variant(cls, name: str, **overrides) -> GRPOConfig:
        """The config of a named member of the GRPO family (see ``VARIANTS``), with overrides."""
        if name not in cls.VARIANTS:
            raise ValueError(f"variant must be one of {sorted(cls.VARIANTS)}, got {name!r}")
        return cls(**{**cls.VARIANTS[name], **overrides})

    @classmethod
    def for_cot(cls, **overrides) -> GRPOConfig:
        """The config of the chain-of-thought design (:class:`~rlmperf_lite.tasks.CoTTask`):
        ``COT_DEFAULTS``' grpo fields and model shape, with overrides."""
        fields = {**COT_DEFAULTS["grpo"], "model": TinyLMConfig(**COT_DEFAULTS["model"])}
        return cls(**{**fields, **overrides})

    def __post_init__(self):
        super().__post_init__()
        check_choice("GRPOConfig.advantage_estimator", self.advantage_estimator,
                     ("grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"))
        # a group of one has no baseline, except for REINFORCE++ (batch-normalised returns)
        check_int("GRPOConfig.group_size", self.group_size,
                  1 if self.advantage_estimator == "reinforce_pp" else 2)
        check_choice("GRPOConfig.adv_scale", self.adv_scale, ("group", "batch", "none"))
        if self.num_prompts * self.group_size > MAX_SAMPLES:   # the toy holds them in memory
            raise ValueError(f"GRPOConfig.num_prompts x group_size = "
                             f"{self.num_prompts * self.group_size:,} samples per step exceeds "
                             f"{MAX_SAMPLES:,}: lower num_prompts or group_size")
        if self.clip_eps_high is not None:
            check_number("GRPOConfig.clip_eps_high", self.clip_eps_high, low=0, high=10,
                         low_open=True, high_open=True)
        if self.clip_ratio_c is not None:        # verl asserts > 1 (a cap below 1 bites first)
            check_number("GRPOConfig.clip_ratio_c", self.clip_ratio_c, low=1, low_open=True)
        check_choice("GRPOConfig.kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        check_bool("GRPOConfig.dynamic_sampling", self.dynamic_sampling)
        check_int("GRPOConfig.micro_batch_size", self.micro_batch_size, 1, optional=True)
        check_int("GRPOConfig.max_resample_rounds", self.max_resample_rounds, 0)
        check_int("GRPOConfig.overlong_buffer_len", self.overlong_buffer_len, 0)
        if self.overlong_buffer_len >= self.max_new_tokens:
            raise ValueError(f"GRPOConfig.overlong_buffer_len must be < max_new_tokens="
                             f"{self.max_new_tokens}, got {self.overlong_buffer_len!r}")
        self._check_correction()

    def _check_correction(self):
        """The checks of the engine and rollout-correction fields."""
        check_choice("GRPOConfig.rollout_dtype", self.rollout_dtype, ENGINE_DTYPES)
        check_int("GRPOConfig.top_k", self.top_k, 1, optional=True)
        if self.top_p is not None:
            check_number("GRPOConfig.top_p", self.top_p, low=0, high=1, low_open=True)
        check_bool("GRPOConfig.bypass_mode", self.bypass_mode)
        check_choice("GRPOConfig.rollout_is", self.rollout_is, (None, *ROLLOUT_IS_LEVELS))
        check_number("GRPOConfig.rollout_is_threshold", self.rollout_is_threshold, low=0,
                     low_open=True)
        check_choice("GRPOConfig.rollout_rs", self.rollout_rs, (None, *ROLLOUT_RS_LEVELS))
        check_number("GRPOConfig.rollout_rs_threshold", self.rollout_rs_threshold, low=1)
        if self.rollout_rs_threshold_lower is not None:
            check_number("GRPOConfig.rollout_rs_threshold_lower",
                         self.rollout_rs_threshold_lower, low=0, high=1, low_open=True)
        if self.bypass_mode and (self.rollout_is or self.rollout_rs):
            raise ValueError("GRPOConfig.rollout_is and rollout_rs weigh the engine's samples by "
                             "the trainer's old log-probs: set bypass_mode=False to compute them")

    def check_train_grpo_only(self, loop: str) -> None:
        """Refuse, in a loop that does not honour them, the rollout-engine and correction
        fields (``CORRECTION_FIELDS``) left off their defaults.

        Raises:
            ValueError: naming the first such field and ``loop``, and saying that
                :func:`train_grpo` supports it.
        """
        for name in CORRECTION_FIELDS:
            value, default = getattr(self, name), GRPOConfig.__dataclass_fields__[name].default
            if value != default:
                raise ValueError(f"GRPOConfig.{name}={value!r} is not supported by {loop}: only "
                                 f"train_grpo runs the rollout engine and its corrections; leave "
                                 f"{name} at {default!r} or train with train_grpo")

    @property
    def engine(self) -> EngineConfig | None:
        """The rollout engine of ``rollout_dtype``, ``top_k`` and ``top_p``; None when it
        samples exactly as the trainer computes (float32, no truncation)."""
        if self.rollout_dtype == "float32" and self.top_k is None and self.top_p is None:
            return None
        return EngineConfig(dtype=self.rollout_dtype, top_k=self.top_k, top_p=self.top_p)


CORRECTION_FIELDS = ("rollout_dtype", "top_k", "top_p", "bypass_mode", "rollout_is", "rollout_rs")
"""The GRPOConfig fields only :func:`train_grpo` honours (the other loops refuse them)."""

GRPOResult = RLResult


def train_grpo(config: GRPOConfig = GRPOConfig(), *, task: Task | None = None,
               progress: bool = False, on_step=None, eval_every: int = 0,
               stop_at_accuracy: float | None = None,
               base_params: dict | None = None) -> GRPOResult:
    """Warm-start then GRPO; returns the final params and per-step metrics.

    ``progress`` shows a tqdm bar; ``on_step(metrics)`` is called after each step. With
    ``eval_every`` > 0, every that many steps (and at the last) the held-out greedy accuracy is
    added to the step's metrics as ``eval_accuracy``, and training stops early once it reaches
    ``stop_at_accuracy`` (if given): the benchmark's time-to-accuracy. ``base_params`` (a
    result's ``base_params``, or :func:`warm_start`'s output for this config's seed) skips the
    warm-start; runs that share a seed can share one base model this way (``warmstart_s`` is then
    0) and train exactly as if each had warm-started itself. The dict is copied, not modified.

    Raises:
        ValueError: naming the argument — ``config`` not a GRPOConfig, bad run arguments
            (:func:`~rlmperf_lite.rl.common.check_loop_args`), ``base_params`` missing a weight or
            of the wrong shape for ``config.model``, or a run that diverged (the step and the
            lr named).
    """
    check_loop_args(config, GRPOConfig, task, progress, on_step, eval_every, stop_at_accuracy)
    # a diverging run overflows inside numpy before check_diverged names the cause (the lr):
    # the error says it, numpy's warnings would only bury it
    with blas_limits(config), np.errstate(over="ignore", invalid="ignore"):
        return _train(config, task or AdditionTask(), progress, on_step, eval_every,
                      stop_at_accuracy, base_params)


def _train(config, task, progress, on_step, eval_every, stop_at_accuracy,
           base_params) -> GRPOResult:
    c = config
    params, result, rng_data, rng_sample = init_run(c, task, base_params)
    opt = AdamW(params, lr=c.lr, betas=c.adam_betas)
    P = task.prompt_len
    steps = step_range(c, "GRPO", progress)
    for step in steps:
        times, flops_before = {}, dict(COUNTER.counts)
        tokens, mask, behav_logps, rewards, ref_logps, rounds, zero_std = sample_and_score(
            params, result.base_params, c, task, rng_data, rng_sample, times)  # (B*G, ...)
        check_diverged(step, c, "the rollout's log-probs", behav_logps)
        old_logps, is_w, loss_mask, corr = rollout_correction(params, c, tokens, mask,
                                                              behav_logps, P, times)
        t2 = time.perf_counter()
        kl_in_loss = c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp"
        advantages = step_advantages(c, rewards, mask, behav_logps, ref_logps)
        times["advantages_s"] = (t := time.perf_counter()) - t2
        # gradient accumulation: each micro-batch is weighted with the whole batch's token and
        # sequence counts, so the summed gradient equals the full batch's (not a mean of means)
        norms = loss_norms(loss_mask, c)
        grads, logps, entropy = accumulate_grads(
            params, tokens, old_logps, advantages, loss_mask, c, norms, prompt_len=P,
            ref_per_token_logps=ref_logps if kl_in_loss else None, step=step,
            rollout_is_weights=is_w)                                           # (B*G, R)
        loss, metrics = grpo_loss(logps, old_logps, advantages, loss_mask, c, norms,
                                  ref_per_token_logps=ref_logps if kl_in_loss else None,
                                  rollout_is_weights=is_w)
        if c.engine is not None:          # the trainer's log-probs before the update: free here
            corr.update(mismatch_metrics(logps, behav_logps, mask))
        grad_norm = clip_grad_norm(grads, c.max_grad_norm)
        opt.lr = c.lr * lr_factor(step, c)
        opt.step(params, grads)
        times["update_s"] = time.perf_counter() - t
        row = {"step": step, "reward_mean": float(rewards.mean()),
               "reward_std": float(rewards.std()),
               "response_length": float(mask.sum(axis=1).mean()),
               "response_length_max": int(mask.sum(axis=1).max()),      # verl's /max
               "loss": loss,
               "entropy": float((entropy * mask).sum() / mask.sum()),
               "grad_norm": grad_norm, **metrics, **corr, **times, "step_s": sum(times.values()),
               "response_width": int(mask.shape[1]), "resample_rounds": rounds,
               "frac_reward_zero_std": zero_std,
               **flops_since(flops_before)}
        if end_step(row, step=step, c=c, params=params, task=task, result=result, steps=steps,
                    on_step=on_step, eval_every=eval_every, stop_at_accuracy=stop_at_accuracy):
            break
    return result


def step_advantages(c: GRPOConfig, rewards, mask, old_logps, ref_logps) -> np.ndarray:
    """The advantages of ``c.advantage_estimator``: (B*G,) for "grpo" and "rloo", (B*G, R) for
    "reinforce_pp_baseline" and REINFORCE++ (KL to the reference in the reward: k1 of
    ``old_logps`` against ``ref_logps``, both (B*G, R), when ``c.kl_coef`` > 0). Shared by every
    GRPO loop."""
    if c.advantage_estimator == "grpo":
        return grpo_advantages(rewards, c.group_size, scale=c.adv_scale)
    if c.advantage_estimator == "rloo":
        return rloo_advantages(rewards, c.group_size)
    if c.advantage_estimator == "reinforce_pp_baseline":
        return reinforce_pp_baseline_advantages(rewards, mask, c.group_size)
    return reinforce_pp_advantages(
        rewards, mask, kl_coef=c.kl_coef,
        per_token_kl=kl_estimate(old_logps, ref_logps, "k1") if c.kl_coef else None)


def accumulate_grads(params, tokens, old_per_token_logps, advantages, completion_mask,
                     c: GRPOConfig, norms: dict, *, prompt_len: int,
                     ref_per_token_logps=None, step: int | None = None,
                     rollout_is_weights=None) -> tuple:
    """The gradient of the clipped surrogate over ``tokens`` (n, P+R), accumulated over
    micro-batches of ``c.micro_batch_size`` rows: each micro-batch is weighted with the whole
    batch's ``norms`` (:func:`loss_norms`), so the sum equals the full batch's gradient, not a
    mean of means. ``old_per_token_logps``, ``completion_mask`` and
    ``ref_per_token_logps`` (None: no KL term in the loss) and ``rollout_is_weights`` (None: no
    importance weights) are (n, R); ``advantages`` (n,) or (n, R). Shared by :func:`train_grpo`, the asynchronous loop and the Ray learners (book
    sections :ref:`sec-loss-aggregation` and :ref:`sec-ray-controller`).

    Returns (grads {name: array}, per_token_logps (n, R), token entropy (n, R)). Raises
    ValueError naming ``step`` and ``c.lr`` if the forward's log-probs or the gradients are
    non-finite (training diverged).
    """
    n, P = len(tokens), prompt_len
    size = c.micro_batch_size or n
    grads, parts = None, []
    for sl in (slice(i, i + size) for i in range(0, n, size)):
        with COUNTER.phase("train_forward"):
            logps_all, cache = logps_forward(params, tokens[sl], c.model, c.temperature)
        logps = logps_all[:, P - 1:]                                         # (micro, R)
        check_diverged(step, c, "the trainer's log-probs", logps)
        dlogps = np.zeros_like(logps_all)                                    # (micro, T-1)
        dlogps[:, P - 1:] = grpo_loss_grad(
            logps, old_per_token_logps[sl], advantages[sl], completion_mask[sl], c, norms,
            ref_per_token_logps=None if ref_per_token_logps is None
            else ref_per_token_logps[sl],
            rollout_is_weights=None if rollout_is_weights is None else rollout_is_weights[sl])
        with COUNTER.phase("train_backward"):
            g = logps_backward(dlogps, cache)
        grads = g if grads is None else {k: grads[k] + g[k] for k in grads}
        check_diverged(step, c, "the gradients", [np.vdot(v, v) for v in g.values()])
        parts.append((logps, token_entropy(cache)[:, P - 1:]))
    return (grads, np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]))


def init_run(c: GRPOConfig, task, base_params) -> tuple:
    """The start every GRPO loop shares (this one, and the asynchronous one,
    :ref:`sec-staleness-learner`): check the config fits the task, split the seed into the init,
    data and sampling generators (in this order), warm-start or copy ``base_params``, and open the
    result record. Returns (params, result, rng_data, rng_sample).

    Raises:
        ValueError: from the task check, or for ``base_params`` of the wrong shape.
    """
    check_fits_task(c, task)
    rng_init, rng_data, rng_sample = np.random.default_rng(c.seed).spawn(3)
    t0 = time.perf_counter()
    if base_params is None:
        params, _ = warm_start(c.model, task, rng_init, max_steps=c.warmstart_max_steps,
                               target_accuracy=c.warmstart_target_accuracy)
    else:
        params = copy_params(base_params, c.model, "base_params")
    result = RLResult(params=params, base_params={k: v.copy() for k, v in params.items()},
                      warmstart_s=0.0 if base_params is not None else time.perf_counter() - t0)
    return params, result, rng_data, rng_sample


def frac_reward_zero_std(rewards, group_size: int) -> float:
    """The share of groups whose G rewards are all equal (their GRPO advantages are all 0, no
    learning signal): TRL's ``frac_reward_zero_std``. rewards (B*G,), grouped in order;
    ValueError as :func:`check_rewards` (a group of one allowed)."""
    by_group = check_rewards(rewards, group_size, min_group_size=1)             # (B, G)
    return float(np.mean(by_group.max(axis=1) == by_group.min(axis=1)))


def sample_and_score(params, ref_params, c: GRPOConfig, task, rng_data, rng_sample,
                     times: dict) -> tuple:
    """The first phases every GRPO loop shares (:func:`train_grpo` and the asynchronous one of
    book section :ref:`sec-staleness-learner`): sample with ``params`` (DAPO's resampling included),
    the reference model's per-token log-probs (B*G, R) when ``c.kl_coef`` > 0 (else None), and the
    rewards (B*G,) with DAPO's overlong penalty when configured. Adds ``rollout_s``, ``ref_logps_s``
    and ``reward_s`` (seconds) to ``times``. Returns (tokens, completion_mask, behaviour
    per_token_logps, rewards, ref_per_token_logps, resample rounds, frac_reward_zero_std)."""
    t = time.perf_counter()
    tokens, mask, behav_logps, rewards, rounds, zero_std = _rollout(
        params, c, task, rng_data, rng_sample)                                 # (B*G, ...)
    times["rollout_s"] = (t2 := time.perf_counter()) - t
    ref_logps = None
    if c.kl_coef > 0:
        with COUNTER.phase("reference"):
            ref_logps = token_logps(ref_params, tokens, c.model,
                                    c.temperature)[:, task.prompt_len - 1:]    # (B*G, R)
    times["ref_logps_s"] = (t := time.perf_counter()) - t2
    if c.overlong_buffer_len:
        rewards = rewards + overlong_penalty(mask.sum(axis=1), c.max_new_tokens,
                                             c.overlong_buffer_len)
    times["reward_s"] = time.perf_counter() - t
    return tokens, mask, behav_logps, rewards, ref_logps, rounds, zero_std


def _rollout(params, c: GRPOConfig, task, rng_data, rng_sample):
    """Sample B prompts x G completions and score them; with ``dynamic_sampling`` (DAPO), keep
    only groups whose rewards differ and sample more prompts, up to ``max_resample_rounds``
    times, to refill the batch (if still short, the informative groups found are used).

    Returns tokens (B*G, P+R), completion_mask and behaviour per_token_logps (B*G, R), rewards
    (B*G,), the number of extra rounds sampled, and the share of the first round's groups whose
    rewards were all equal (TRL's ``frac_reward_zero_std``).
    """
    G, kept, rounds, zero_std = c.group_size, [], 0, None
    while True:
        prompts, pairs = task.sample_prompts(rng_data, c.num_prompts)
        ro = generate(params, prompts, c.model, max_new_tokens=c.max_new_tokens,
                      eos_id=task.eos_id, pad_id=task.pad_id, group_size=G,
                      temperature=c.temperature, rng=rng_sample, engine=c.engine)
        rewards = task.reward(np.repeat(pairs, G, axis=0), ro.tokens[:, ro.prompt_len:])
        by_group = rewards.reshape(-1, G)
        if zero_std is None:
            zero_std = frac_reward_zero_std(rewards, G)
        if not c.dynamic_sampling:
            return ro.tokens, ro.completion_mask, ro.per_token_logps, rewards, 0, zero_std
        for b in np.flatnonzero(by_group.max(axis=1) > by_group.min(axis=1)):
            rows = slice(b * G, (b + 1) * G)
            kept.append((ro.tokens[rows], ro.completion_mask[rows], ro.per_token_logps[rows],
                         rewards[rows]))
        if len(kept) >= c.num_prompts or rounds == c.max_resample_rounds:
            break
        rounds += 1
    if not kept:                       # no informative group at all: a zero-advantage batch
        return ro.tokens, ro.completion_mask, ro.per_token_logps, rewards, rounds, zero_std
    kept = kept[:c.num_prompts]
    width = max(k[1].shape[1] for k in kept)                     # pad to a common R
    pad = [width - k[1].shape[1] for k in kept]
    return (np.concatenate([np.pad(k[0], ((0, 0), (0, w)), constant_values=task.pad_id)
                            for k, w in zip(kept, pad)]),
            np.concatenate([np.pad(k[1], ((0, 0), (0, w))) for k, w in zip(kept, pad)]),
            np.concatenate([np.pad(k[2], ((0, 0), (0, w))) for k, w in zip(kept, pad)]),
            np.concatenate([k[3] for k in kept]), rounds, zero_std)


def rollout_correction(params, c: GRPOConfig, tokens, completion_mask, rollout_per_token_logps,
                       prompt_len: int, times: dict) -> tuple:
    """PPO's old log-probs and the engine–trainer correction of ``c`` (book section
    :ref:`sec-grpo`): with ``bypass_mode`` the engine's log-probs as they are; else the
    old-log-prob pass (one trainer forward over ``tokens`` (n, P+R), ``old_logps_s`` in
    ``times``), then ``rollout_is`` weights and a ``rollout_rs`` mask from the trainer/engine
    ratio (:mod:`rlmperf_lite.rl.mismatch`).

    Returns (old_per_token_logps (n, R), importance weights (n, R) or None, the loss's mask
    (n, R): ``completion_mask`` without the rejected tokens, metrics {name: float}).
    """
    if c.bypass_mode:
        return rollout_per_token_logps, None, completion_mask, {}
    t = time.perf_counter()
    with COUNTER.phase("old_logps"):
        old = token_logps(params, tokens, c.model, c.temperature)[:, prompt_len - 1:]
    old = old * completion_mask                       # 0 on padding, as the engine's
    weights, mask, metrics = None, completion_mask, {}
    if c.rollout_is:
        weights, m = rollout_is_weights(old, rollout_per_token_logps, completion_mask,
                                        level=c.rollout_is, threshold=c.rollout_is_threshold)
        metrics.update(m)
    if c.rollout_rs:
        mask, m = rollout_rs_mask(old, rollout_per_token_logps, completion_mask,
                                  level=c.rollout_rs, threshold=c.rollout_rs_threshold,
                                  threshold_lower=c.rollout_rs_threshold_lower)
        metrics.update(m)
    times["old_logps_s"] = time.perf_counter() - t
    return old, weights, mask, metrics
