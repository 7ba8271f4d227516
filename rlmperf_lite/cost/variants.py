"""What one step of each member of the GRPO family (and PPO) costs (book section
:ref:`sec-variant-costs`): models held, passes, sampling rounds, and the step's work and depth
in seconds (:func:`~rlmperf_lite.cost.variant_step_workdepth_s`).

For the same samples per step the variants differ in the models they hold (a frozen reference
when a KL term is on, a critic for PPO), in the passes they make, and — for DAPO's dynamic
sampling — in how many sampling rounds they need to fill a batch with groups that carry a
learning signal. A group whose G rewards are all equal has zero advantage everywhere: with a
verifier's 0/1 reward and per-prompt pass rate q it happens with probability q^G + (1 - q)^G, so
as the policy improves, more of each batch is wasted (GRPO) or must be resampled (DAPO).

Memory counts model states only (no activations, no KV cache): 16 bytes per trainable parameter
(bf16 weights and gradients + fp32 master weights and Adam moments; Rajbhandari et al. 2020,
ZeRO, Fig. 1: 7.5B parameters -> 120 GB) and 2 bytes per frozen parameter (bf16).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_choice, check_int, check_number, check_real_array
from .memory import BYTES_PER_PARAM_ADAM, model_state_bytes
from .estimate import estimate_rl_step
from .workdepth import ShapeCosts, WorkDepth, grpo_step_workdepth, ppo_step_workdepth
from .workdepth_s import StepWorkDepth, rl_step_workdepth_s

__all__ = ["BYTES_PER_TRAINABLE_PARAM", "BYTES_PER_FROZEN_PARAM", "informative_fraction",
           "informative_fraction_beta", "dynamic_sampling_rounds", "VariantCost",
           "variant_step_cost", "VARIANT_KL", "compare_variants", "RESAMPLED_PHASES",
           "VariantWorkDepth", "variant_step_workdepth_s"]

BYTES_PER_TRAINABLE_PARAM = BYTES_PER_PARAM_ADAM      # ZeRO Fig. 1, mixed-precision Adam
BYTES_PER_FROZEN_PARAM = 2                            # bf16 weights
VARIANT_KL = {"grpo": "loss", "dr_grpo": "loss", "dapo": None, "rloo": "loss",
              "reinforce_pp": "reward", "ppo": "reward"}
"""Where each variant puts its KL term when ``kl_coef`` > 0, as the library's loops do — in the
loss, or in the reward; None: DAPO removes the KL term (Yu et al. 2025), so it holds no
reference model whatever ``kl_coef`` is."""


def informative_fraction(pass_rates, group_size: int) -> float:
    """Expected share of groups whose G rewards are not all equal (0/1 rewards).

    Args:
        pass_rates: scalar or (n,), each prompt's probability q of a correct completion, in
            [0, 1].
        group_size: G >= 1.
    Returns:
        mean over prompts of 1 - q^G - (1 - q)^G (0 for G = 1, as a lone sample has no group
        baseline).
    Raises:
        ValueError: naming ``pass_rates`` (empty, not real numbers, NaN, outside [0, 1], more
            than one dimension) or ``group_size``.
    """
    check_int("group_size", group_size, 1)
    q = check_real_array("pass_rates", pass_rates, low=0, high=1).reshape(-1)
    return float(np.mean(1 - q ** group_size - (1 - q) ** group_size))


def informative_fraction_beta(alpha: float, beta: float, group_size: int) -> float:
    """Expected share of informative groups when each prompt's pass rate q ~ Beta(alpha, beta),
    exactly from the Beta moments: E[q^G] = prod_{j<G} (alpha + j) / (alpha + beta + j), and
    E[(1 - q)^G] likewise with beta. Below :func:`informative_fraction` at the mean
    alpha / (alpha + beta), as 1 - q^G - (1 - q)^G is concave (Jensen; book section
    sec-variant-costs). For a sample of pass rates, use :func:`informative_fraction` on it.

    Raises:
        ValueError: naming ``alpha`` or ``beta`` (not > 0) or ``group_size`` (not an int >= 1).
    """
    check_number("alpha", alpha, low=0, low_open=True)
    check_number("beta", beta, low=0, low_open=True)
    check_int("group_size", group_size, 1)
    j = np.arange(group_size, dtype=np.float64)
    all_right = np.prod((alpha + j) / (alpha + beta + j))      # E[q^G]
    all_wrong = np.prod((beta + j) / (alpha + beta + j))       # E[(1 - q)^G]
    return float(max(0.0, 1.0 - all_right - all_wrong))


_EXACT_MAX_PROMPTS = 4096      # above: normal approximation of the binomial
_MAX_ROUNDS = 10_000


def _short(n: int, f: float, B: int) -> tuple[float, float]:
    """For X ~ Binomial(n, f): P(X < B) and E[X; X < B]."""
    if f <= 0:
        return 1.0, 0.0
    if f >= 1:
        return (1.0, float(n)) if n < B else (0.0, 0.0)
    if B > _EXACT_MAX_PROMPTS:                     # continuity-corrected normal approximation
        mu, sd = n * f, math.sqrt(n * f * (1 - f))
        z = (B - 0.5 - mu) / sd
        cdf, pdf = 0.5 * math.erfc(-z / math.sqrt(2)), math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
        return cdf, max(0.0, mu * cdf - sd * pdf)
    j = np.arange(min(B, n + 1), dtype=np.float64)
    log_comb = np.concatenate([[0.0], np.cumsum(np.log((n - j[1:] + 1) / j[1:]))])
    pmf = np.exp(log_comb + j * math.log(f) + (n - j) * math.log1p(-f))
    return min(1.0, float(pmf.sum())), float((j * pmf).sum())


def dynamic_sampling_rounds(informative_frac: float, num_prompts: int,
                            max_resample_rounds: int | None = 3) -> dict:
    """Expected sampling rounds of DAPO's dynamic sampling, as ``train_grpo`` does it.

    Each round samples ``num_prompts`` (B) groups, each informative with probability f
    independently, and keeps the informative ones; sampling stops once B are kept or after
    K = ``max_resample_rounds`` extra rounds. With fresh prompts every round, f is the mean over
    the prompt set of 1 - q^G - (1 - q)^G, which is below its value at the mean pass rate when
    pass rates vary (:func:`informative_fraction` of a sample, :func:`informative_fraction_beta`);
    one pass rate for every prompt gives the fewest rounds. After k rounds the kept count is
    Binomial(k B, f), so

        E[rounds] = 1 + sum_{k=1}^{K} P(Binomial(k B, f) < B).

    For large B this is a staircase in 1/f (whole rounds: f = 0.9 needs 2), not 1/f itself.
    Exact for B <= 4096; above, the binomial is replaced by its normal approximation.

    Args:
        informative_frac: f in [0, 1], e.g. from :func:`informative_fraction`.
        num_prompts: B >= 1.
        max_resample_rounds: K in [0, 10000]; None = no limit (then f must be >= 0.001).
    Returns:
        dict with ``expected_rounds`` (also the completions generated per completion of a
        full batch), ``prob_short``, the probability that the batch is still not full when
        sampling stops (then the informative groups found are used), and
        ``expected_informative``, the expected informative groups trained on (<= B).
    Raises:
        ValueError: naming the argument out of range.
    """
    check_number("informative_frac", informative_frac, low=0, high=1)
    check_int("num_prompts", num_prompts, 1)
    check_int("max_resample_rounds", max_resample_rounds, 0, optional=True)
    f, B, K = float(informative_frac), int(num_prompts), max_resample_rounds
    if K is not None and K > _MAX_ROUNDS:
        raise ValueError(f"max_resample_rounds must be <= {_MAX_ROUNDS} (or None), got {K}")
    if K is None and f < 1e-3:
        raise ValueError(f"informative_frac={f} needs about {1 / f if f else math.inf:.3g} "
                         "rounds; with no limit (max_resample_rounds=None) it must be >= 0.001")
    rounds, k, short = 1.0, 1, 1.0
    while K is None or k <= K:
        short = _short(k * B, f, B)[0]
        rounds += short
        if short < 1e-12:
            break
        k += 1
    if K is None or short < 1e-12:                          # the batch is full in the end
        return {"expected_rounds": rounds, "prob_short": 0.0, "expected_informative": float(B)}
    prob_short, kept_if_short = _short((K + 1) * B, f, B)    # kept after the last round, < B
    return {"expected_rounds": rounds, "prob_short": prob_short,
            "expected_informative": B * (1 - prob_short) + kept_if_short}


@dataclass(frozen=True)
class VariantCost:
    """One step of one variant (see :func:`variant_step_cost`).

    Attributes:
        trainable_models, frozen_models: names of the models held (policy, critic / reference).
        model_state_bytes: their states' bytes (16 per trainable, 2 per frozen parameter).
        samples_generated: expected completions generated per step (resampling included).
        informative_groups: expected groups per step with a non-zero advantage (GRPO-style
            estimators; for PPO and REINFORCE++ every sample can carry signal: None). The
            other groups still carry the KL term's gradient when there is one.
        passes: {"forward": sequences, "backward": sequences} of the training side per step
            (reference, values, policy and critic passes; generation is not included).
        workdepth: phases with work and depth (rollout phases scaled by the expected rounds).
    """

    variant: str
    trainable_models: tuple
    frozen_models: tuple
    model_state_bytes: float
    samples_generated: float
    informative_groups: float | None
    passes: dict
    workdepth: WorkDepth


def variant_step_cost(variant: str, *, num_layers: int, hidden_size: int, num_heads: int,
                      vocab_size: int, intermediate_size: int | None = None, mlp: str = "gelu",
                      num_prompts: int, group_size: int, prompt_len: int, response_len: int,
                      kl_coef: float = 0.0, informative_frac: float = 1.0,
                      max_resample_rounds: int | None = 3, ppo_epochs: int = 2,
                      num_minibatches: int = 2, attention: str = "causal") -> VariantCost:
    """Cost of one step of ``variant`` for B = ``num_prompts`` prompts x G = ``group_size``
    samples (PPO: B G prompts x 1 sample, ``ppo_epochs`` x ``num_minibatches`` updates, the
    critic of the policy's shape). ``kl_coef`` > 0 adds the frozen reference model and its
    forward pass (KL in the loss or the reward; DAPO has none: :data:`VARIANT_KL`).
    ``informative_frac`` is the share of groups whose rewards differ
    (:func:`informative_fraction`); DAPO ("dapo") resamples to replace the others, the rest
    train on them with zero advantage. Old log-probs are taken as recorded at sampling time
    (no extra pass), as the library's loops do.

    Shapes as :func:`rlmperf_lite.cost.grpo_step_workdepth`.
    Raises:
        ValueError: an unknown variant, or any argument the calculators reject, named.
    """
    check_choice("variant", variant, tuple(VARIANT_KL))
    check_number("kl_coef", kl_coef, low=0)
    check_number("informative_frac", informative_frac, low=0, high=1)
    check_int("num_prompts", num_prompts, 1)
    check_int("group_size", group_size, 2 if variant in ("grpo", "dr_grpo", "dapo", "rloo")
              else 1)
    check_int("max_resample_rounds", max_resample_rounds, 0, optional=True)
    if VARIANT_KL[variant] is None:
        kl_coef = 0.0
    model = dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                 vocab_size=vocab_size, intermediate_size=intermediate_size, mlp=mlp,
                 attention=attention)
    B, G = num_prompts, group_size
    n_params = ShapeCosts(num_layers, hidden_size, num_heads, vocab_size, intermediate_size, mlp,
                          attention).n_params
    lengths = dict(prompt_len=prompt_len, response_len=response_len, kl_coef=kl_coef)
    trainable, frozen = ["policy"], ["reference"] if kl_coef > 0 else []
    if variant == "ppo":
        trainable.append("critic")
    wd, rounds, informative, passes = _variant_workdepth(
        variant, model, lengths, B, G, informative_frac, max_resample_rounds, ppo_epochs,
        num_minibatches)
    # the critic: the policy's shape with a (D, 1) value head instead of the (D, V) LM head
    sizes = {"policy": n_params, "reference": n_params,
             "critic": n_params - vocab_size * hidden_size + hidden_size}
    state = (sum(model_state_bytes(sizes[m]) for m in trainable)
             + sum(model_state_bytes(sizes[m], trainable=False) for m in frozen))
    return VariantCost(variant, tuple(trainable), tuple(frozen), float(state),
                       B * G * rounds, informative, passes, wd)


def _variant_workdepth(variant, model, lengths, B, G, informative_frac, max_resample_rounds,
                       ppo_epochs, num_minibatches) -> tuple:
    """(WorkDepth, sampling rounds, expected informative groups or None, passes per model) of
    :func:`variant_step_cost`: PPO's step, or GRPO's with DAPO's resampling rounds scaling
    its generation and reward."""
    rounds, informative, kl = 1.0, B * informative_frac, lengths["kl_coef"] > 0
    if variant == "ppo":
        wd = ppo_step_workdepth(**model, num_prompts=B * G, ppo_epochs=ppo_epochs,
                                num_minibatches=num_minibatches, **lengths)
        n = B * G
        fwd = n * (1 + ppo_epochs * 2 + kl)                  # values, policy+critic per epoch
        return wd, rounds, None, {"forward": fwd, "backward": 2 * ppo_epochs * n}
    wd = grpo_step_workdepth(**model, num_prompts=B, group_size=G, **lengths)
    if variant == "dapo":
        ds = dynamic_sampling_rounds(informative_frac, B, max_resample_rounds)
        rounds = ds["expected_rounds"]
        informative = ds["expected_informative"]
        scaled = ("prefill", "decode", "reward")
        wd = WorkDepth(tuple(replace(p, work_flops=p.work_flops * rounds,
                                     depth_rounds=p.depth_rounds * rounds)
                             if p.name in scaled else p for p in wd.phases), wd.processors)
    elif variant == "reinforce_pp":
        informative = None
    return wd, rounds, informative, {"forward": B * G * (1 + kl), "backward": B * G}


def compare_variants(*, pass_rate: float, kl_coef: float = 0.0,
                     max_resample_rounds: int | None = 3, **shape) -> list[VariantCost]:
    """:func:`variant_step_cost` of every variant (the keys of :data:`VARIANT_KL`, in order) for
    one shape, with the informative share of groups that a per-prompt pass rate ``pass_rate``
    (the same for every prompt) implies for the shape's ``group_size``.

    Raises:
        ValueError: as :func:`informative_fraction` and :func:`variant_step_cost`; a group
            size of 1 is rejected (only REINFORCE++ and PPO could run it).
    """
    check_number("pass_rate", pass_rate, low=0, high=1)
    check_int("group_size", shape.get("group_size"), 2)
    f = informative_fraction(pass_rate, shape["group_size"])
    if f == 0 and max_resample_rounds is None:
        raise ValueError(f"pass_rate={pass_rate} makes every group uninformative: DAPO with "
                         "no limit on resampling (max_resample_rounds=None) would never stop")
    return [variant_step_cost(v, kl_coef=kl_coef, informative_frac=f,
                              max_resample_rounds=max_resample_rounds, **shape)
            for v in VARIANT_KL]


#: The phases a DAPO round repeats; generate, then score (a reward model, when there is one).
RESAMPLED_PHASES = ("rollout_prefill", "rollout_decode", "reward")


@dataclass(frozen=True)
class VariantWorkDepth:
    """One step of ``variant`` (see :func:`variant_step_workdepth_s`).

    Attributes:
        step: the phases in seconds, the rollout phases at ``expected_rounds`` rounds, and
            ``step.estimate_s`` the estimate's step time with the same rounds.
        expected_rounds: E[k], rounds of generation per step (1 for every variant but DAPO).
        informative_frac: f, the share of groups whose rewards differ at ``pass_rate``.
        pass_rate: q, each prompt's probability of a correct completion.
    """

    variant: str
    step: StepWorkDepth
    expected_rounds: float
    informative_frac: float
    pass_rate: float


def variant_step_workdepth_s(variant: str = "grpo", *, pass_rate: float,
                             max_resample_rounds: int | None = 3,
                             **estimate_kwargs) -> VariantWorkDepth:
    """W (GPU-seconds), D (seconds) and Brent's bounds per phase of one step of ``variant``
    (a key of :data:`~rlmperf_lite.cost.VARIANT_KL`), for the step that
    :func:`~rlmperf_lite.cost.estimate_rl_step` describes (same keyword arguments; B =
    ``prompts``, G = ``group_size``).

    DAPO: f = 1 - q^G - (1 - q)^G at per-prompt pass rate q = ``pass_rate``, E[k] =
    ``dynamic_sampling_rounds(f, B, max_resample_rounds)``; the phases of
    :data:`RESAMPLED_PHASES` get W x E[k] and D x E[k], the estimate's step time
    ``(E[k] - 1)`` x their estimated time more. DAPO holds no reference model whatever
    ``kl_coef`` is (Yu et al. 2025), as the estimate does. The other variants: one round.

    Raises:
        ValueError: an unknown variant, ``pass_rate`` outside [0, 1], and as
            :func:`~rlmperf_lite.cost.estimate_rl_step` and
            :func:`~rlmperf_lite.cost.dynamic_sampling_rounds`, naming the argument.
    """
    check_choice("variant", variant, tuple(VARIANT_KL))
    check_number("pass_rate", pass_rate, low=0, high=1)
    wd = rl_step_workdepth_s(variant, **estimate_kwargs)       # validates the step's inputs
    f = informative_fraction(pass_rate, wd.inputs["group_size"])
    if variant != "dapo":
        return VariantWorkDepth(variant, wd, 1.0, f, pass_rate)
    rounds = dynamic_sampling_rounds(f, wd.inputs["prompts"], max_resample_rounds)
    k = rounds["expected_rounds"]
    est = estimate_rl_step(variant, **wd.inputs)
    extra_s = (k - 1) * sum(p.time_s for p in est.phases if p.name in RESAMPLED_PHASES)
    phases = tuple(replace(p, work_flops=k * p.work_flops, work_gpu_s=k * p.work_gpu_s,
                           depth_s=k * p.depth_s) if p.name in RESAMPLED_PHASES else p
                   for p in wd.phases)
    step = replace(wd, phases=phases, estimate_s=wd.estimate_s + extra_s)
    return VariantWorkDepth(variant, step, float(k), f, pass_rate)
