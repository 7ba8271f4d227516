"""The toy's GRPO step in the work-depth model, from per-operation costs measured on this CPU
(book section :ref:`sec-workdepth-your-machine`; the model: :ref:`sec-workdepth-seconds`).

A task is one operation of :func:`~rlmperf_lite.rl.train_grpo`'s step: the prompts' prefill, a
decode step, the verifier, the reference pass, the advantages, a micro-batch's forward and
backward, the loss value, the optimizer step. Each is timed (:func:`~rlmperf_lite.cost.best_of_s`,
under the loop's BLAS thread limit) at the batch the loop gives it (B prompts, B G rows, the
micro-batch) and alone (one sequence; one group for the advantages). A processor is a core: the
loop is one Python thread with BLAS pinned to one thread (``GRPOConfig.blas_threads`` = 1), so
p = 1. With R the step's decode width (the longest response: the sampler runs every row until it
ends, so padding row-steps are work the loop does)::

    W = t_pf(B) + (R - 1) t_dec(B G) + t_rew(B G) + t_ref(B G) + t_adv(B G)
        + sum_k t_fb(m_k) + t_loss(B G) + t_opt                         (core-seconds)
    D = t_pf(1) + (R - 1) t_dec(1) + t_rew(1) + t_ref(1) + t_adv(G) + t_fb(1) + t_opt   (s)
    max(W / p, D) <= T <= W / p + D                                     (Brent 1974)

summed phase by phase, as the loop runs them (a barrier between two phases). On its one core the
loop runs every task in turn at its batch, so its own schedule takes W: the point prediction
``predicted_s`` set against the measured step. Generation's share of it, W(prefill + decode) / W,
is set against the loop's own ``rollout_s`` / ``step_s``, batch by batch
(:func:`~rlmperf_lite.cost.generation_share_sweep`): the CPU's version of the sequences per
GPU in decode.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np
from threadpoolctl import threadpool_limits

from ..checks import check_int, check_number
from ..nn import (COUNTER, AdamW, BatchingStats, clip_grad_norm, copy_params, generate,
                  generate_continuous, static_batching_stats, token_logps)
from ..rl.common import blas_limits
from ..rl.grpo import (GRPOConfig, accumulate_grads, frac_reward_zero_std, step_advantages,
                       train_grpo)
from ..rl.losses import grpo_loss, loss_norms, overlong_penalty
from ..tasks import AdditionTask, CoTTask, Task
from .estimate import GENERATION_PHASES
from .workdepth_s import PhaseWorkDepth, StepTotals

__all__ = ["ToyOpCosts", "ToyStepWorkDepth", "best_of_s", "measure_toy_op_costs",
           "toy_step_workdepth", "measured_step_s", "measured_generation_share",
           "toy_step_prediction", "generation_share_sweep", "measure_batching"]


def best_of_s(ops: dict, repeats: int = 15) -> dict:
    """{name: least wall time (s) of its calls} of ``ops`` ({name: callable}): each called once
    to warm up, then ``repeats`` rounds calling each once in turn (``time.perf_counter``).
    Best-of-n, as ``timeit`` reports, since other processes on the machine only add time; the
    turns spread each op's calls over the whole measurement, so a burst of load spoils few."""
    check_int("repeats", repeats, 1)
    best = {}
    for name, fn in ops.items():
        fn()
        best[name] = math.inf
    for _ in range(repeats):
        for name, fn in ops.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


@dataclass(frozen=True)
class ToyOpCosts:
    """Seconds of each operation of the toy's GRPO step on this CPU, at the batch the loop
    gives it (``*_batch_s``) and alone (``*_one_s``, the depth's); ``flops`` holds the
    matrix-product FLOPs of one call at the loop's batch (``rlmperf_lite.nn.COUNTER``).

    Raises:
        ValueError: naming a field that is not a finite number >= 0, or a bad width.
    """

    response_width: int
    """R, the decode width the costs were measured at (R - 1 decode steps)."""
    prefill_batch_s: float
    """Draw B prompts, prefill them, copy their K, V to G samples, sample the first tokens."""
    prefill_one_s: float
    decode_step_batch_s: float
    """One decode step of B G rows, sampling included."""
    decode_step_one_s: float
    reward_batch_s: float
    """The verifier on B G completions (and DAPO's overlong penalty if configured)."""
    reward_one_s: float
    ref_logprobs_batch_s: float
    """The reference model's forward over B G sequences; 0 without a KL term."""
    ref_logprobs_one_s: float
    advantages_batch_s: float
    advantages_group_s: float
    """One group's G rewards (the whole batch's if the estimator normalises over the batch)."""
    micro_batch_s: tuple
    """Forward + backward of each micro-batch, in the loop's order."""
    micro_batch_one_s: float
    loss_s: float
    """The loss value and its metrics on the batch, off the chain since nothing waits for it."""
    optimizer_s: float
    """Clip the gradient's global norm, one AdamW step."""
    flops: dict = field(default_factory=dict)

    def __post_init__(self):
        check_int("ToyOpCosts.response_width", self.response_width, 1)
        if not isinstance(self.micro_batch_s, tuple) or not self.micro_batch_s:
            raise ValueError(f"ToyOpCosts.micro_batch_s must be a non-empty tuple of seconds, "
                             f"one per micro-batch, got {self.micro_batch_s!r}")
        for f in fields(self):
            if f.name.endswith("_s"):
                for v in np.atleast_1d(getattr(self, f.name)).tolist():
                    check_number(f"ToyOpCosts.{f.name}", v, low=0)


@dataclass(frozen=True)
class ToyStepWorkDepth(StepTotals):
    """The toy step's phases (:class:`~rlmperf_lite.cost.PhaseWorkDepth`, W in core-seconds
    in ``work_gpu_s``) on ``processors`` cores, and the step's measured time ``measured_s``
    (None if not given). Phases run one after another: the step's bounds are their sums."""

    phases: tuple
    processors: int
    response_width: int
    measured_s: float | None = None
    measured_generation_share: float | None = None
    """The loop's own rollout share of its steps (from measured_generation_share), or None."""

    @property
    def work_per_processor_s(self) -> float:
        return self.work_gpu_s / self.processors

    @property
    def parallelism(self) -> float:
        """The most cores the step's graph could keep busy, W / D."""
        return self.work_gpu_s / self.depth_s if self.depth_s else math.inf

    @property
    def predicted_s(self) -> float:
        """The prediction, the loop's own schedule, which runs every task one after another on
        its one core at the batch the loop gives it, so the sum W of the per-op costs
        (whatever ``processors`` says)."""
        return self.work_gpu_s

    @property
    def predicted_generation_share(self) -> float:
        """The predicted step's generation share W(prefill + decode) / W (the loop runs the
        phases one after another on its one core, as ``predicted_s`` does)."""
        return sum(p.work_gpu_s for p in self.phases if p.name in GENERATION_PHASES) \
            / self.work_gpu_s

    @property
    def error(self) -> float:
        """(T_measured - predicted) / T_measured. Raises ValueError without ``measured_s``."""
        if self.measured_s is None:
            raise ValueError("measured_s is None: pass the step's measured time "
                             "(measured_s=..., e.g. from measured_step_s)")
        return (self.measured_s - self.predicted_s) / self.measured_s

    def brackets(self, tolerance: float = 0.0) -> bool:
        """Whether lower x (1 - tol) <= T_measured <= upper x (1 + tol)."""
        check_number("tolerance", tolerance, low=0, high=1)
        if self.measured_s is None:
            raise ValueError("measured_s is None: pass the step's measured time")
        return self.brent_lower_s * (1 - tolerance) <= self.measured_s \
            <= self.brent_upper_s * (1 + tolerance)


def toy_step_workdepth(costs: ToyOpCosts, *, measured_s: float | None = None,
                       processors: int = 1,
                       measured_generation_share: float | None = None) -> ToyStepWorkDepth:
    """W, D and Brent's bounds of each phase of a toy GRPO step from its per-op ``costs``
    (the equations of this module's docstring); a phase with no task (the reference pass
    without a KL term, decode at R = 1) is left out.
    ``processors``: 1, the core the loop runs on; more give the bounds of a machine that spread
    the tasks over that many cores, which the loop does not do. ``measured_generation_share``:
    the loop's own, to set against ``predicted_generation_share``.

    Raises:
        ValueError: ``costs`` not a ToyOpCosts, ``processors`` < 1, ``measured_s`` <= 0, a
            share outside [0, 1].
    """
    if not isinstance(costs, ToyOpCosts):
        raise ValueError(f"costs must be a ToyOpCosts (measure_toy_op_costs), got {costs!r}")
    check_int("processors", processors, 1)
    if measured_s is not None:
        check_number("measured_s", measured_s, low=0, low_open=True)
    if measured_generation_share is not None:
        check_number("measured_generation_share", measured_generation_share, low=0, high=1)
    c, steps, f = costs, costs.response_width - 1, costs.flops
    rows = [  # (phase, W core-s, D s, FLOPs)
        ("rollout_prefill", c.prefill_batch_s, c.prefill_one_s, f.get("prefill", 0.0)),
        ("rollout_decode", steps * c.decode_step_batch_s, steps * c.decode_step_one_s,
         steps * f.get("decode_step", 0.0)),
        ("reward", c.reward_batch_s, c.reward_one_s, 0.0),
        ("ref_logprobs", c.ref_logprobs_batch_s, c.ref_logprobs_one_s,
         f.get("ref_logprobs", 0.0)),
        ("advantages", c.advantages_batch_s, c.advantages_group_s, 0.0),
        ("actor_update", sum(c.micro_batch_s) + c.loss_s + c.optimizer_s,
         c.micro_batch_one_s + c.optimizer_s, f.get("update", 0.0)),
    ]
    phases = tuple(PhaseWorkDepth(name, float(fl), float(w), float(d), processors)
                   for name, w, d, fl in rows if w or d)    # no KL: no reference pass
    return ToyStepWorkDepth(phases, processors, c.response_width, measured_s,
                            measured_generation_share)


def _flops_of(fn) -> float:
    """Matrix-product FLOPs of one call of ``fn`` (``rlmperf_lite.nn.COUNTER``)."""
    before = sum(COUNTER.counts.values())
    fn()
    return sum(COUNTER.counts.values()) - before


def _rollout_ops(params, c: GRPOConfig, task, R: int, seed: int) -> tuple:
    """The ops of the rollout, at B prompts x G and at one x one: draw the prompts, then a
    ``generate`` of width 1 (the prefill, the first token) or R; decode steps run, FLOPs, and
    the batch's rollout. The end token is the pad id, which the model is never taught to emit,
    so decode runs to R (a seed that does is chosen)."""
    ops, steps, flops = {}, {}, {}
    for key, B, G in (("batch", c.num_prompts, c.group_size), ("one", 1, 1)):
        prompts, pairs = task.sample_prompts(np.random.default_rng(seed), B)        # (B, P)

        def gen(width, s, prompts=prompts, G=G):
            return generate(params, prompts, c.model, max_new_tokens=width,
                            eos_id=task.pad_id, pad_id=task.pad_id, group_size=G,
                            temperature=c.temperature, rng=np.random.default_rng(s))
        s = next((s for s in range(seed, seed + 64)
                  if gen(R, s).num_decode_steps == R - 1), seed)
        steps[key] = gen(R, s).num_decode_steps
        if R > 1 and not steps[key]:
            raise ValueError("params end every sampled sequence at its first token, even with "
                             "the pad id as the end token: no decode step to time")
        draw = np.random.default_rng(seed)                  # the loop draws its prompts too
        for width, name in ((1, "prefill"), (R, "generate")):
            ops[f"{name}_{key}"] = (lambda w=width, s=s, B=B, gen=gen, draw=draw:
                                    (task.sample_prompts(draw, B), gen(w, s)))
        if key == "batch":
            ro, ro_pairs = gen(R, s), pairs
            flops["prefill"] = _flops_of(lambda: gen(1, s))
            flops["decode_step"] = (_flops_of(lambda: gen(R, s)) - flops["prefill"]) / max(
                steps[key], 1)
    return ops, steps, flops, ro, ro_pairs


def _score_ops(params, c: GRPOConfig, task, ro, pairs) -> tuple:
    """The ops of the verifier, the reference pass (with a KL term) and the advantages on the
    rollout ``ro`` (B G rows) and on one row (one group); their FLOPs, the advantages and the
    reference's log-probs (None without KL)."""
    P, G, n = ro.prompt_len, c.group_size, len(ro.tokens)
    repeated = np.repeat(pairs, G, axis=0)

    def reward(rows, metric):
        r = task.reward(repeated[rows], ro.tokens[rows, P:])
        if c.overlong_buffer_len:
            r = r + overlong_penalty(ro.completion_mask[rows].sum(axis=1), c.max_new_tokens,
                                     c.overlong_buffer_len)
        return (r, frac_reward_zero_std(r, G)) if metric else (r, None)
    ops = {"reward_batch": lambda: reward(slice(0, n), True),
           "reward_one": lambda: reward(slice(0, 1), False)}
    rewards, flops, ref = reward(slice(0, n), False)[0], {}, None
    if c.kl_coef > 0:
        def ref_pass(rows):
            return token_logps(params, ro.tokens[rows], c.model, c.temperature)[:, P - 1:]
        ops["ref_logprobs_batch"] = lambda: ref_pass(slice(0, n))
        ops["ref_logprobs_one"] = lambda: ref_pass(slice(0, 1))
        flops["ref_logprobs"], ref = _flops_of(ops["ref_logprobs_batch"]), ref_pass(slice(0, n))
    local = c.advantage_estimator == "rloo" or (c.advantage_estimator == "grpo"
                                                and c.adv_scale != "batch")   # group by group

    def adv(rows):
        return step_advantages(c, rewards[rows], ro.completion_mask[rows],
                               ro.per_token_logps[rows], None if ref is None else ref[rows])
    ops["advantages_batch"] = lambda: adv(slice(0, n))
    ops["advantages_group"] = lambda: adv(slice(0, G if local else n))
    return ops, flops, adv(slice(0, n)), ref


def _update_ops(params, c: GRPOConfig, ro, advantages, ref) -> tuple:
    """The ops of the update: forward + backward of a micro-batch of each size the loop's
    ``micro_batch_size`` gives (and the sizes, in order), of one sequence, the loss value, the
    optimizer step; their FLOPs."""
    n, P = len(ro.tokens), ro.prompt_len
    norms = loss_norms(ro.completion_mask, c)
    ref = ref if c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp" else None

    def fwd_bwd(k):
        return accumulate_grads(params, ro.tokens[:k], ro.per_token_logps[:k], advantages[:k],
                                ro.completion_mask[:k], c, norms, prompt_len=P,
                                ref_per_token_logps=None if ref is None else ref[:k])
    m = c.micro_batch_size or n
    sizes = [m] * (n // m) + ([n % m] if n % m else [])       # the loop's micro-batches
    grads, logps, _ = fwd_bwd(n)                              # logps (B*G, R)
    weights = copy_params(params, c.model)
    opt = AdamW(weights, lr=c.lr, betas=c.adam_betas)

    def optimizer():
        clip_grad_norm(grads, c.max_grad_norm)
        opt.step(weights, grads)
    ops = {f"micro_{k}": (lambda k=k: fwd_bwd(k)) for k in sorted(set(sizes))}
    ops["micro_one"] = lambda: fwd_bwd(1)
    ops["loss"] = lambda: grpo_loss(logps, ro.per_token_logps, advantages, ro.completion_mask,
                                    c, loss_norms(ro.completion_mask, c),
                                    ref_per_token_logps=ref)
    ops["optimizer"] = optimizer
    return ops, {"update": sum(_flops_of(lambda k=k: fwd_bwd(k)) for k in sizes)}, sizes


def measure_toy_op_costs(config: GRPOConfig, params: dict, *, task: Task | None = None,
                         response_width: int | None = None, repeats: int = 15,
                         seed: int = 0) -> ToyOpCosts:
    """Time each operation of a :func:`~rlmperf_lite.rl.train_grpo` step run with ``config``
    and the weights ``params`` (also as the reference's), at decode width R =
    ``response_width`` (default ``config.max_new_tokens``), on this CPU under the loop's BLAS
    thread limit, at the loop's batch and alone: :func:`~rlmperf_lite.cost.best_of_s` of
    ``repeats`` rounds, about 0.5 s for the default config. A decode step costs
    (t(R) - t(1)) / (R - 1), t(k) a rollout of width k. ``task``: any
    :class:`~rlmperf_lite.tasks.Task` (default :class:`~rlmperf_lite.tasks.AdditionTask`),
    whose prompts and verifier the ops use.

    Raises:
        ValueError: DAPO's dynamic sampling (its rounds vary from step to step); R outside
            [1, max_new_tokens]; as the config and the model's checks.
    """
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig, got {type(config).__name__}")
    if config.dynamic_sampling:
        raise ValueError("config.dynamic_sampling: a step's sampling rounds vary, so it has no "
                         "one cost; measure a config without dynamic sampling")
    R = config.max_new_tokens if response_width is None else response_width
    check_int("response_width", R, 1)
    if R > config.max_new_tokens:
        raise ValueError(f"response_width={R} exceeds config.max_new_tokens="
                         f"{config.max_new_tokens}: the loop never decodes wider")
    check_int("repeats", repeats, 1)
    task, params = task or AdditionTask(), copy_params(params, config.model)
    with blas_limits(config):
        roll, steps, flops, ro, pairs = _rollout_ops(params, config, task, R, seed)
        score, f2, advantages, ref = _score_ops(params, config, task, ro, pairs)
        update, f3, sizes = _update_ops(params, config, ro, advantages, ref)
        t = best_of_s({**roll, **score, **update}, repeats)
    out = {}
    for key in ("batch", "one"):
        out[f"prefill_{key}_s"] = t[f"prefill_{key}"]
        out[f"decode_step_{key}_s"] = max(t[f"generate_{key}"] - t[f"prefill_{key}"], 0.0) \
            / steps[key] if steps[key] else 0.0
    return ToyOpCosts(
        response_width=R, **out, reward_batch_s=t["reward_batch"], reward_one_s=t["reward_one"],
        ref_logprobs_batch_s=t.get("ref_logprobs_batch", 0.0),
        ref_logprobs_one_s=t.get("ref_logprobs_one", 0.0),
        advantages_batch_s=t["advantages_batch"], advantages_group_s=t["advantages_group"],
        micro_batch_s=tuple(t[f"micro_{k}"] for k in sizes), micro_batch_one_s=t["micro_one"],
        loss_s=t["loss"], optimizer_s=t["optimizer"], flops={**flops, **f2, **f3})


def measured_step_s(history, *, response_width: int | None = None) -> tuple:
    """(T, R): the least ``step_s`` over the rows of a GRPO loop's ``history`` whose decode
    width is R (default the median width), best-of-n as for the op costs.

    Raises:
        ValueError: an empty history, rows without ``step_s`` and ``response_width``, or no row
            of width R.
    """
    rows = list(history)
    if not rows or any(k not in r for r in rows for k in ("step_s", "response_width")):
        raise ValueError("history must be non-empty rows of a GRPO loop (train_grpo's "
                         "result.history) with step_s and response_width")
    R = int(round(float(np.median([r["response_width"] for r in rows])))) \
        if response_width is None else response_width
    at_R = [r["step_s"] for r in rows if r["response_width"] == R]
    if not at_R:
        raise ValueError(f"no step of the history has response_width={R}; widths are "
                         f"{sorted({r['response_width'] for r in rows})}")
    return float(min(at_R)), R


def toy_step_prediction(config: GRPOConfig, history, params: dict, *,
                        task: Task | None = None, repeats: int = 15,
                        processors: int = 1) -> ToyStepWorkDepth:
    """The toy step's Brent bounds from costs measured on this CPU
    (:func:`measure_toy_op_costs` at the history's median width R), set against the fastest
    measured step of width R (:func:`measured_step_s`) and the loop's generation share at R
    (:func:`measured_generation_share`); ``history`` and ``params`` from a
    :func:`~rlmperf_lite.rl.train_grpo` run with ``config`` on ``task``.

    Raises:
        ValueError: as :func:`measured_step_s` and :func:`measure_toy_op_costs`.
    """
    measured, R = measured_step_s(history)
    costs = measure_toy_op_costs(config, params, task=task, response_width=R, repeats=repeats)
    return toy_step_workdepth(costs, measured_s=measured, processors=processors,
                              measured_generation_share=measured_generation_share(
                                  history, response_width=R))


def measured_generation_share(history, *, response_width: int | None = None) -> float:
    """The median over the rows of a GRPO loop's ``history`` of width R (default as
    :func:`measured_step_s`) of ``rollout_s`` / ``step_s``: generation's share of the loop's
    own step. The median, not the fastest step: a share is a ratio, and load slows both parts.
    The loop's ``rollout_s`` also times drawing the prompts and the verifier (the prediction's
    prefill and ``reward`` phase).

    Raises:
        ValueError: as :func:`measured_step_s`, or rows without ``rollout_s``.
    """
    R = measured_step_s(history, response_width=response_width)[1]
    rows = [r for r in history if r["response_width"] == R]
    if any("rollout_s" not in r for r in rows):
        raise ValueError("history rows must carry rollout_s (train_grpo's phase times)")
    return float(np.median([r["rollout_s"] / r["step_s"] for r in rows]))


def _check_sequences(sequences, group_size: int) -> list:
    if not isinstance(sequences, (list, tuple)) or not sequences:
        raise ValueError(f"sequences must be a non-empty list of batch sizes (prompts x "
                         f"group_size), e.g. [16, 32, 64, 128], got {sequences!r}")
    for s in sequences:
        check_int("sequences", s, group_size)
        if s % group_size:
            raise ValueError(f"sequences={s} is not a multiple of group_size={group_size}: "
                             f"each step holds whole groups (prompts x {group_size})")
    return list(sequences)


def generation_share_sweep(sequences=(16, 32, 64, 128), *, config: GRPOConfig | None = None,
                           task: Task | None = None, steps: int = 3, repeats: int = 3,
                           base_params: dict | None = None, seed: int = 0) -> list[dict]:
    """Generation's share of the toy's GRPO step, predicted and measured, batch by batch: for
    each batch of s ``sequences`` (s / G prompts x G = ``config.group_size``), ``steps`` steps of
    :func:`~rlmperf_lite.rl.train_grpo` from one warm-start (``base_params``; None: the first
    batch's run warm-starts, 10-30 s, and the others reuse it), then per-op costs measured at
    that batch and at the median-low width R of its steps (:func:`measure_toy_op_costs`,
    ``repeats`` rounds). ``config`` defaults to ``GRPOConfig.for_cot()``, ``task`` to
    :class:`~rlmperf_lite.tasks.CoTTask`. About 2 s on one core for the defaults, warm-start
    excluded.

    Returns:
        A list of rows, one per batch, with ``sequences``, ``predicted_share``
        (W(prefill + decode) / W),
        ``measured_share`` (:func:`measured_generation_share` at R), ``verifier_share`` (the
        predicted verifier's W / W, which the loop's ``rollout_s`` also times),
        ``response_width`` R, ``predicted_s`` and ``measured_s`` (:func:`measured_step_s`).

    Raises:
        ValueError: ``sequences`` not a non-empty list of ints >= G and multiples of G;
            ``steps`` or ``repeats`` < 1; ``config`` not a GRPOConfig; as the loop and
            :func:`measure_toy_op_costs` (e.g. dynamic sampling).
    """
    config = GRPOConfig.for_cot() if config is None else config
    if not isinstance(config, GRPOConfig):
        raise ValueError(f"config must be a GRPOConfig (e.g. GRPOConfig.for_cot()), got "
                         f"{type(config).__name__}")
    sequences = _check_sequences(sequences, config.group_size)
    check_int("steps", steps, 1)
    check_int("repeats", repeats, 1)
    task, rows = task or CoTTask(), []
    for s in sequences:
        c = replace(config, num_prompts=s // config.group_size, steps=steps, seed=seed)
        run = train_grpo(c, task=task, base_params=base_params)
        base_params = run.base_params                          # one warm-start for all
        R = sorted(r["response_width"] for r in run.history)[(len(run.history) - 1) // 2]
        measured, _ = measured_step_s(run.history, response_width=R)
        costs = measure_toy_op_costs(c, run.params, task=task, response_width=R,
                                     repeats=repeats, seed=seed)
        wd = toy_step_workdepth(costs, measured_s=measured, measured_generation_share=(
            measured_generation_share(run.history, response_width=R)))
        rows.append({"sequences": s, "predicted_share": wd.predicted_generation_share,
                     "measured_share": wd.measured_generation_share,
                     "verifier_share": costs.reward_batch_s / wd.work_gpu_s,
                     "response_width": R, "predicted_s": wd.predicted_s, "measured_s": measured})
    return rows


def measure_batching(params: dict, prompts, cfg, *, num_slots: int, seeds, max_new_tokens: int,
                     eos_id: int, pad_id: int, group_size: int = 1, temperature: float = 1.0,
                     repeats: int = 5) -> dict:
    """The static sampler against the continuous one at the same S = ``num_slots`` decode rows,
    on the same prompts (B, P) and per-row ``seeds`` (n = B G): :func:`~rlmperf_lite.nn.generate`
    in waves of S / G prompts (each wave decodes to its longest row) and
    :func:`~rlmperf_lite.nn.generate_continuous` with S slots (book section
    :ref:`sec-stragglers`). Wall times are :func:`best_of_s` of ``repeats`` rounds, BLAS on one
    thread as the loops run it.

    Returns:
        A dict with ``static`` and ``continuous`` (:class:`~rlmperf_lite.nn.BatchingStats`;
        the waves' summed, S rows a step), ``static_s`` and ``continuous_s`` (s),
        ``same_outputs`` (every row's tokens and mask equal), ``lengths`` (n,) and
        ``wave_widths`` (each wave's R).
    Raises:
        ValueError: S not a multiple of G that divides n, ``repeats`` < 1, and as the samplers.
    """
    check_int("group_size", group_size, 1)
    check_int("num_slots", num_slots, group_size)
    check_int("repeats", repeats, 1)
    n = len(prompts) * group_size
    if num_slots % group_size or n % num_slots:
        raise ValueError(f"num_slots={num_slots} must be a multiple of group_size={group_size} "
                         f"that divides the {n} rows (a wave holds whole groups)")
    args = dict(max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                group_size=group_size, temperature=temperature)
    per, seeds = num_slots // group_size, list(seeds)

    def static():                                       # waves of S rows, one after another
        return [generate(params, prompts[i:i + per], cfg, **args,
                         seeds=seeds[i * group_size:(i + per) * group_size])
                for i in range(0, len(prompts), per)]

    def continuous():
        return generate_continuous(params, prompts, cfg, num_slots=num_slots, seeds=seeds,
                                   **args)
    with threadpool_limits(limits=1, user_api="blas"):
        waves, (cont, cont_stats) = static(), continuous()
        times = best_of_s({"static": static, "continuous": continuous}, repeats=repeats)
    same, start = True, 0
    for w in waves:                     # a row's tokens past its wave's width are all padding
        rows, width = slice(start, start + len(w.tokens)), w.tokens.shape[1]
        same &= bool(np.array_equal(cont.tokens[rows, :width], w.tokens)
                     and np.array_equal(cont.completion_mask[rows, :width - w.prompt_len],
                                        w.completion_mask)
                     and not cont.completion_mask[rows, width - w.prompt_len:].any())
        start += len(w.tokens)
    wave_stats = [static_batching_stats(w) for w in waves]
    return {"static": BatchingStats(num_slots=num_slots,
                                    num_steps=sum(s.num_steps for s in wave_stats),
                                    kept_tokens=sum(s.kept_tokens for s in wave_stats)),
            "continuous": cont_stats, "static_s": times["static"],
            "continuous_s": times["continuous"], "same_outputs": same,
            "lengths": cont.completion_mask.sum(axis=1).astype(np.int64),
            "wave_widths": [s.num_steps for s in wave_stats]}
