"""Answers to the labs' exercises, computed by the library when asked (book Labs 1–9).

Each lab ends with exercises, each followed by its worked solution (folded in the full edition
of the book, left out of the student edition). Where an answer is a number, the solution ends
with ``check_answer("chNN.k", value)``, and a reader can call it on their own answer:

    >>> from rlmperf_lite.exercises import check_answer
    >>> check_answer("ch01.1a", 0.32)
    ✓ ch01.1a: 0.32 matches
    True

Nothing here stores an answer. The registry maps each exercise id to a function that computes
the expected value with the library's own functions at call time, so an answer follows the
library if a formula or a preset changes. Ids are ``"chNN.k"`` for exercise k of chapter NN's
lab, with a letter when one exercise asks for two numbers (``"ch01.1a"``, ``"ch01.1b"``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Answer", "REGISTRY", "answers", "check_answer", "expected_answer"]

LLAMA2_7B_SHAPE = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
                       intermediate_size=11008, mlp="swiglu")
"""Llama-2-7B's shape for the work–depth calculator (Labs 1–3)."""

QWEN_STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
                 response_len=4096, gpus=64, kl_coef=0.001)
"""The GRPO step of Labs 4–6: Qwen2.5-7B, 32 prompts x 16 samples, 512 + 4,096 tokens, 64 H100."""


@dataclass(frozen=True)
class Answer:
    """One registered answer: how to compute it, what it is, and how close is right."""

    compute: Callable[[], float]
    """Computes the expected value with the library (called at each check)."""
    what: str
    """The quantity, in a few words."""
    hint: str
    """Shown with a wrong answer."""
    rtol: float = 0.01
    """Relative tolerance; 0 for an exact (integer) answer."""
    atol: float = 0.0
    """Absolute tolerance, for answers that may be 0."""


# ---- Lab 1 -----------------------------------------------------------------------------------

def _informative(q: float, group_size: int) -> float:
    from .variant_costs import informative_fraction
    return informative_fraction(q, group_size)


def _most_informative_pass_rate() -> float:
    from .variant_costs import informative_fraction
    q = np.linspace(0.0, 1.0, 10_001)
    return float(q[np.argmax([informative_fraction(x, 4) for x in q])])


def _llama_workdepth(response_len: int):
    from .workdepth import grpo_step_workdepth
    return grpo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, group_size=16, prompt_len=512,
                               response_len=response_len)


def _depth_growth(phase: str) -> float:
    return (_llama_workdepth(8192).phase(phase).depth_rounds
            / _llama_workdepth(4096).phase(phase).depth_rounds)


# ---- Lab 2 -----------------------------------------------------------------------------------

def _update_depth_factor() -> float:
    from .workdepth import ppo_step_workdepth
    kw = dict(**LLAMA2_7B_SHAPE, num_prompts=512, prompt_len=512, response_len=4096)
    four = ppo_step_workdepth(**kw, ppo_epochs=2, num_minibatches=2)
    one = ppo_step_workdepth(**kw, ppo_epochs=1, num_minibatches=1)
    return four.phase("train_forward").depth_rounds / one.phase("train_forward").depth_rounds


def _gae_signal_share(lam: float) -> float:
    """Share of the tokens of the right answer to 47+85= whose GAE advantage is not zero, for
    a critic as :func:`rlmperf_lite.nn.init_value_params` makes it (zero value head)."""
    from .nn import TinyLMConfig, init_value_params, values_forward
    from .rl import gae
    from .tasks import AdditionTask
    task, cfg = AdditionTask(), TinyLMConfig()
    pair = np.array([[47, 85]])
    answer = task.answer_tokens(pair)[0]
    tokens = np.concatenate([task.encode_prompts(pair), [answer]], axis=1)     # (1, P + R)
    P, R = task.prompt_len, len(answer)
    critic = init_value_params(cfg, np.random.default_rng(0))
    values = values_forward(critic, tokens, cfg)[0][:, P - 1:P - 1 + R]       # (1, R)
    rewards = np.zeros((1, R))
    rewards[0, -1] = 1.0                                                       # outcome reward
    adv, _ = gae(rewards, values, np.ones((1, R)), gamma=1.0, lam=lam)
    return float(np.mean(np.abs(adv) > 1e-6))


def _critic_break_even_group() -> int:
    from .workdepth import grpo_step_workdepth, ppo_step_workdepth
    lengths = dict(prompt_len=512, response_len=4096)
    ppo = ppo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, ppo_epochs=2, num_minibatches=2,
                             **lengths)
    critic = sum(ppo.phase(p).work_flops
                 for p in ("values", "critic_forward", "critic_backward", "critic_optimizer"))

    def rollout(G):
        wd = grpo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, group_size=G, **lengths)
        return wd.phase("prefill").work_flops + wd.phase("decode").work_flops

    one = rollout(1)
    G = 2
    while rollout(G) - one < critic:
        G += 1
    return G


# ---- Lab 3 -----------------------------------------------------------------------------------

def _length_bias_ratio() -> float:
    from .rl import GRPOConfig, aggregate_weights
    from .tasks import AdditionTask
    task = AdditionTask()
    n = [len(a) for a in task.answer_tokens(task.pairs("train"))]    # digits + end token
    mask = np.zeros((2, GRPOConfig().max_new_tokens), dtype=np.float32)     # (2, R_max)
    mask[0, :min(n)], mask[1, :max(n)] = 1, 1
    w = aggregate_weights(mask, "seq-mean-token-mean", max_len=mask.shape[1])
    return float(w[0, 0] / w[1, 0])


def _dapo_depth_factor() -> float:
    from .variant_costs import compare_variants
    costs = {c.variant: c for c in compare_variants(
        **LLAMA2_7B_SHAPE, num_prompts=32, group_size=16, prompt_len=512, response_len=4096,
        pass_rate=0.8, kl_coef=0.001)}
    return costs["dapo"].workdepth.depth_rounds / costs["grpo"].workdepth.depth_rounds


def _std_scaling_factor() -> float:
    from .rl import grpo_advantages
    factor = []
    for r in (np.array([1.0, 0, 0, 0]), np.array([1.0, 1, 0, 0])):
        factor.append(grpo_advantages(r, 4)[0] / grpo_advantages(r, 4, scale="none")[0])
    return float(factor[0] / factor[1])


def _k2_k3_opposite_count() -> int:
    from .rl import categorical_kl_gradients
    count = 0
    for r0 in np.linspace(0.02, 0.98, 49):
        for theta in np.linspace(-8, 8, 81):
            g = categorical_kl_gradients([theta, 0.0], [r0, 1 - r0])
            count += int(g["k2"][0] * g["k3"][0] < 0)
    return count


def _rounds(q: float) -> float:
    from .variant_costs import dynamic_sampling_rounds, informative_fraction
    return dynamic_sampling_rounds(informative_fraction(q, 16), 512, None)["expected_rounds"]


def _pass_rate_for_rounds(target: float = 2.5) -> float:
    lo, hi = 0.9, 0.99                   # 2 rounds at lo, more than 7 at hi (Lab 3's table)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _rounds(mid) < target else (lo, mid)
    return (lo + hi) / 2


# ---- Lab 4 -----------------------------------------------------------------------------------

def _compute_bound_decode_batch() -> int:
    from .cost import decode_step_bytes, decode_step_flops, hardware_preset, model_preset
    qwen, ridge = model_preset("qwen2.5-7b"), hardware_preset("h100").ridge_intensity
    b = 1
    while decode_step_flops(qwen, b, 0) / decode_step_bytes(qwen, b, 0) < ridge:
        b += 1
    return b


def _estimate(**changes):
    from .cost import estimate_rl_step
    return estimate_rl_step("grpo", **{**QWEN_STEP, **changes})


def _worst_memory_gb(**changes) -> float:
    return max(p.per_gpu_memory_bytes for p in _estimate(**changes).phases) / 1e9


# ---- Lab 5 -----------------------------------------------------------------------------------

def _decode_depth_growth_70b() -> float:
    from .cost import rl_step_workdepth
    d = {a: rl_step_workdepth("grpo", **{**QWEN_STEP, "actor": a}).phase("rollout_decode")
         for a in ("llama-3.1-8b", "llama-3.1-70b")}
    return d["llama-3.1-70b"].depth_rounds / d["llama-3.1-8b"].depth_rounds


def _exponential_max_ratio(group_size: int = 16) -> float:
    from .cost import expected_max_length
    q = (np.arange(100_000) + 0.5) / 100_000
    lengths = -np.log1p(-q)                               # quantiles of Exp(1)
    return expected_max_length(lengths, group_size) / lengths.mean()


def _tail_cut_saving_s() -> float:
    # the log-normal sample of Lab 5's straggler cell
    tail = np.random.default_rng(0).lognormal(7.0, 0.8, size=100_000).clip(1, 16384).round()
    long = _estimate(response_len=tail).phase("rollout_decode").time_s
    short = _estimate(response_len=tail.clip(1, 4096)).phase("rollout_decode").time_s
    return long - short


# ---- Lab 6 -----------------------------------------------------------------------------------

def _half_share_group_size() -> int:
    lo, hi = 16, 1024                      # share above one half at lo, below at hi (Lab 6)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _estimate(group_size=mid).generation_time_share >= 0.5 else (lo, mid)
    return hi


def _lever_saving(hardware: str, **lever) -> float:
    base = dict(hardware=hardware, train_efficiency=0.4, decode_efficiency=0.5)
    return 1 - _estimate(**{**base, **lever}).time_s / _estimate(**base).time_s


# ---- Lab 7 -----------------------------------------------------------------------------------

TOY_GRPO = dict(num_prompts=8, group_size=4, lr_warmup_steps=2, steps=10, seed=3)
"""The toy GRPO loop of Labs 7 and 8, whose first batch (8 prompts x 4 samples) they split."""

DP_BATCH = dict(global_batch=512, seq_len=4608)
"""Lab 7's training batch, Chapter 4's 512 sequences of 512 + 4,096 tokens."""


def _bytes_over_s(op: str, n: int) -> float:
    from .cost import collective_bytes_per_rank
    return collective_bytes_per_rank(op, 1.0, n)


def _ring_steps(op: str, n: int) -> float:
    from .cost import collective_time_s
    return collective_time_s(op, 0.0, n, 1.0, latency_s=1.0)   # 1 s per step, no bytes


def _token_mean_dp_error(dp: int) -> float:
    """Largest relative error of the mean of per-rank token-means on dp ranks (Lab 7)."""
    from .parallel import ProcessGroup, dp_grads, local_grads, make_grpo_batch
    from .rl import GRPOConfig, loss_norms
    config = GRPOConfig(**TOY_GRPO)
    batch = make_grpo_batch(config.model, config, config.seed)
    _, full = local_grads(batch.params, batch, config, loss_norms(batch.completion_mask, config))
    wrong = dp_grads(batch.params, batch, config, ProcessGroup(dp), norms="rank")[0]
    return max(float(np.abs(wrong[k] - full[k]).max() / np.abs(full[k]).max()) for k in full)


def _dp_plan(model: str, dp: int, zero_stage: int, micro_batch_size: int = 1):
    """Memory and step time of a pure data-parallel plan on H100s (Lab 7's calculator)."""
    from .cost import (ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                       memory_per_gpu, train_step_time)
    m = ModelConfig.preset(model)
    wl = TrainWorkload(**DP_BATCH, micro_batch_size=micro_batch_size)
    plan = ParallelPlan(dp=dp, zero_stage=zero_stage, recompute="full",
                        microbatches=DP_BATCH["global_batch"] // (dp * micro_batch_size))
    return memory_per_gpu(m, plan, wl), train_step_time(m, hardware_preset("h100"), plan, wl)


DP_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""The dp values of Lab 7's calculator (512 sequences: at most one per rank)."""


def _smallest_fitting_dp(model: str, zero_stage: int) -> int:
    from .cost import hardware_preset
    hbm = hardware_preset("h100").hbm_bytes
    return next(d for d in DP_SIZES if _dp_plan(model, d, zero_stage)[0].total_bytes <= hbm)


def _dp_efficiency(dp: int, zero_stage: int) -> float:
    """Parallel efficiency T(1) / (dp T(dp)) of Qwen2.5-7B's step (Lab 7's scaling cell)."""
    one = _dp_plan("qwen2.5-7b", 1, zero_stage)[1].total_s
    return one / (dp * _dp_plan("qwen2.5-7b", dp, zero_stage)[1].total_s)


def _allreduce_terms(latency_s: float = 5e-6, n: int = 512) -> tuple[float, float]:
    """(latency term, bandwidth term) in seconds of the bf16 gradient all-reduce of Qwen2.5-7B
    over the network on n ranks."""
    from .cost import collective_time_s, hardware_preset, model_preset
    S, bw = 2 * model_preset("qwen2.5-7b").num_params(), hardware_preset("h100")
    bandwidth = collective_time_s("all_reduce", S, n, bw.inter_node_bandwidth_bytes_per_s)
    return collective_time_s("all_reduce", S, n, bw.inter_node_bandwidth_bytes_per_s,
                             latency_s=latency_s) - bandwidth, bandwidth


def _tree_ring_crossover_bytes(latency_s: float = 5e-6, n: int = 512) -> float:
    """Buffer below which a binomial tree's reduce + broadcast, 2 ceil(log2 n) steps each
    sending the whole buffer (Thakur et al. 2005, §4), beats the ring's all-reduce."""
    from .cost import collective_time_s, hardware_preset
    bw = hardware_preset("h100").inter_node_bandwidth_bytes_per_s
    depth = 2 * math.ceil(math.log2(n))

    def ring(S):
        return collective_time_s("all_reduce", S, n, bw, latency_s=latency_s)

    def tree(S):                                # each step: one whole-buffer hop, a pair
        return depth * collective_time_s("broadcast", S, 2, bw, latency_s=latency_s)

    # both are linear in S: a + b S; they cross where a_tree + b_tree S = a_ring + b_ring S
    return (ring(0) - tree(0)) / ((tree(1.0) - tree(0)) - (ring(1.0) - ring(0)))


# ---- Lab 8 -----------------------------------------------------------------------------------

def _tp_plan(model: str, hardware, tp: int, cp: int, seq_len: int, gpus: int = 64):
    """Memory and step time of Lab 8's plans: tp x cp model-parallel groups with sequence
    parallelism, dp = gpus / (tp cp), ZeRO-1, selective recomputation, 512 sequences."""
    from .cost import (HardwareSpec, ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                       memory_per_gpu, train_step_time)
    m = ModelConfig.preset(model)
    hw = hardware if isinstance(hardware, HardwareSpec) else hardware_preset(hardware)
    wl = TrainWorkload(global_batch=512, seq_len=seq_len)
    dp = gpus // (tp * cp)
    plan = ParallelPlan(dp=dp, tp=tp, cp=cp, sp=tp > 1, zero_stage=1, recompute="selective",
                        microbatches=512 // dp)
    plan.validate(m, hw, gpus, wl)
    return memory_per_gpu(m, plan, wl), train_step_time(m, hw, plan, wl), hw


def _smallest_fitting_cp() -> int:
    """Smallest cp at which Llama-3.1-70B's 16,384-token step fits on 64 H100s, tp = 8 + sp."""
    for cp in (1, 2, 4, 8):
        mem, _, hw = _tp_plan("llama-3.1-70b", "h100", 8, cp, 16384)
        if mem.total_bytes <= hw.hbm_bytes:
            return cp
    raise ValueError("no cp up to 8 fits")          # not reached with the library's presets


def _cp_share_of_step() -> float:
    _, step, _ = _tp_plan("llama-3.1-70b", "h100", 8, _smallest_fitting_cp(), 16384)
    return step.comm_s["cp"] / step.total_s


def _tp_across_nodes_ratio(hardware: str) -> float:
    """TP communication of GPT-3 175B at tp = 16 over two nodes (links at the network's
    bandwidth) over tp = 8 in one node, 128 GPUs (Lab 8, §5)."""
    from dataclasses import replace

    from .cost import hardware_preset
    hw = hardware_preset(hardware)
    across = replace(hw, gpus_per_node=16,
                     intra_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s)
    inside = _tp_plan("gpt3-175b", hw, 8, 1, 4608, gpus=128)[1]
    spread = _tp_plan("gpt3-175b", across, 16, 1, 4608, gpus=128)[1]
    return spread.comm_s["tp"] / inside.comm_s["tp"]


def _decode_intensity(batch: int, context: int = 4608) -> float:
    from .cost import decode_step_bytes, decode_step_flops, model_preset
    m = model_preset("llama-3.1-70b")
    return decode_step_flops(m, batch, context) / decode_step_bytes(m, batch, context)


def _ring_slowest_over_zigzag(cp: int) -> float:
    from .parallel import ring_attention_work
    return float(ring_attention_work(cp, "contiguous").max()
                 / ring_attention_work(cp, "zigzag").max())


# ---- Lab 9 -----------------------------------------------------------------------------------

RL_UPDATE = dict(global_batch=512, seq_len=512 + 4096)
"""Lab 9's RL update: 512 sequences of 512 + 4,096 tokens."""


def _timeline(schedule: str, pp: int, m: int, v: int = 1):
    from .parallel import make_schedule, schedule_timeline
    return schedule_timeline(make_schedule(schedule, pp, m, v))


def _search(model: str, gpus: int, **options):
    from .cost import TrainWorkload, hardware_preset, model_preset, search_plans
    workload = TrainWorkload(**{**RL_UPDATE, **options.pop("workload", {})})
    return search_plans(model_preset(model), hardware_preset("h100"), gpus, workload, **options)


def _skewed_expert_traffic(shift: float = 3.0) -> tuple[float, float]:
    """Lab 9's MoE layer (E = 8, top-2, ep = 4, 64 tokens per rank, seed 0) on tokens shifted by
    ``shift`` along expert 0's router direction: (share of the (token, choice) pairs the busiest
    expert gets, combine bytes its rank sends over the mean of the ranks)."""
    from .parallel import (ProcessGroup, ep_moe_forward, expert_load, init_moe_params,
                           shard_experts)
    E, top_k, ep = 8, 2, 4
    moe = init_moe_params(16, 32, E, seed=0)
    rng = np.random.default_rng(0)
    direction = moe["w_router"][:, 0] / np.linalg.norm(moe["w_router"][:, 0])
    xs = [rng.standard_normal((64, 16)) + shift * direction for _ in range(ep)]
    group = ProcessGroup(ep, name="ep")
    _, cache = ep_moe_forward(xs, shard_experts(moe, ep), top_k, group)
    load = expert_load(np.concatenate(cache["experts"]), E)
    combine = group.log.calls[2]["bytes_per_rank"]                 # counts, dispatch, combine
    owner = int(np.argmax(load)) // (E // ep)
    return float(load.max() / load.sum()), float(combine[owner] / combine.mean())


def _reshard_gb(rollout_tp: int, mode: str) -> float:
    """GB each GPU receives to go from Megatron tp = 8 (dp = 8) training of Qwen2.5-72B on 64
    GPUs to rollout replicas of ``rollout_tp`` GPUs."""
    from .cost import ParallelPlan, model_preset, reshard_bytes_per_gpu
    train = ParallelPlan(dp=8, tp=8, zero_stage=1, microbatches=64)
    return reshard_bytes_per_gpu(model_preset("qwen2.5-72b"), train, rollout_tp, mode=mode) / 1e9


BEST_PLAN_SETTINGS = tuple((model, gpus) for model in ("qwen2.5-72b", "qwen3-235b-a22b")
                           for gpus in (64, 256, 1024))
"""The six searches of Lab 9, §5."""


def _memory_margin_effect() -> tuple[int, float]:
    """(how many of the six best plans of Lab 9 use at most 80% of the HBM, the largest
    slow-down of a best plan when plans may use only 80%)."""
    from .cost import hardware_preset
    limit = 0.8 * hardware_preset("h100").hbm_bytes
    kept, slower = 0, 1.0
    for model, gpus in BEST_PLAN_SETTINGS:
        best = _search(model, gpus).best
        kept += best.memory_per_gpu_bytes <= limit
        slower = max(slower, _search(model, gpus, memory_fraction=0.8).best.step_time_s
                     / best.step_time_s)
    return kept, slower


REGISTRY: dict[str, Answer] = {
    "ch01.1a": Answer(lambda: _informative(0.8, 2),
                      "share of informative groups, q = 0.8, G = 2",
                      "a group teaches nothing when all G samples are right (q^G) or all wrong"),
    "ch01.1b": Answer(lambda: _informative(0.8, 4),
                      "share of informative groups, q = 0.8, G = 4",
                      "1 - q^G - (1 - q)^G with G = 4"),
    "ch01.2": Answer(_most_informative_pass_rate,
                     "pass rate at which a group of 4 is most often informative",
                     "maximise 1 - q^4 - (1 - q)^4 over q; it is symmetric in q and 1 - q"),
    "ch01.3a": Answer(lambda: _depth_growth("decode"),
                      "decode depth at R = 8192 over R = 4096 (Llama-2-7B shape)",
                      "decode is a chain of R - 1 forward passes"),
    "ch01.3b": Answer(lambda: _depth_growth("train_forward"),
                      "training-forward depth at R = 8192 over R = 4096",
                      "a training pass handles all positions at once: only log terms grow"),
    "ch01.4a": Answer(lambda: _llama_workdepth(4096).phase("decode").parallelism,
                      "processors at which decode's W/p equals its depth",
                      "W/p = D at p = W/D, the phase's parallelism"),
    "ch01.4b": Answer(lambda: _llama_workdepth(4096).phase("train_forward").parallelism,
                      "processors at which the training forward's W/p equals its depth",
                      "W/p = D at p = W/D, the phase's parallelism"),
    "ch02.1": Answer(_update_depth_factor,
                     "depth of PPO's update with 2 x 2 updates over 1 x 1",
                     "the ppo_epochs * num_minibatches updates run one after another",
                     rtol=0.0),
    "ch02.2": Answer(lambda: _gae_signal_share(0.0),
                     "share of a 4-token answer's tokens with a non-zero advantage, lam = 0, "
                     "untrained critic",
                     "with lam = 0, A_t = r_t + V(s_t+1) - V(s_t): only the last token sees "
                     "the reward", atol=1e-9),
    "ch02.3": Answer(_critic_break_even_group,
                     "smallest G at which GRPO's extra rollout work (32 prompts) exceeds "
                     "PPO's critic work",
                     "extra rollout = rollout(G) - rollout(1); critic = values + critic "
                     "forward, backward and optimizer", rtol=0.0),
    "ch03.1": Answer(_length_bias_ratio,
                     "seq-mean-token-mean weight of a token of the shortest over the longest "
                     "answer",
                     "each sequence's tokens share a weight of 1/B; the answers are 2 to 4 "
                     "tokens long"),
    "ch03.2": Answer(_dapo_depth_factor,
                     "DAPO's depth over GRPO's, Llama-2-7B shape, pass rate 0.8",
                     "compare_variants(...)['dapo'].workdepth.depth_rounds over GRPO's"),
    "ch03.3": Answer(_std_scaling_factor,
                     "weight of a 1-of-4 group over a 2-of-4 group from std scaling",
                     "the factor is 1/std of each group's rewards (unbiased std)"),
    "ch03.4": Answer(_k2_k3_opposite_count,
                     "(reference, theta) pairs on a grid where k2 and k3 point opposite ways",
                     "for two actions both gradients have the sign of pi_0 - ref_0",
                     rtol=0.0, atol=0.0),
    "ch03.5": Answer(_pass_rate_for_rounds,
                     "pass rate q at which DAPO (G = 16, B = 512, no limit) needs 2.5 rounds",
                     "scan q between 0.95 and 0.97 with informative_fraction and "
                     "dynamic_sampling_rounds", rtol=1e-3),
    "ch04.1": Answer(_compute_bound_decode_batch,
                     "smallest decode batch of Qwen2.5-7B at context 0 that is compute-bound "
                     "on an H100",
                     "compare decode_step_flops / decode_step_bytes with ridge_intensity",
                     rtol=0.0),
    "ch04.2a": Answer(lambda: _estimate(response_len=1024).generation_time_share,
                      "generation share of step time at R = 1024",
                      "estimate_rl_step(..., response_len=1024).generation_time_share"),
    "ch04.2b": Answer(lambda: _estimate(response_len=16384).generation_time_share,
                      "generation share of step time at R = 16384",
                      "estimate_rl_step(..., response_len=16384).generation_time_share"),
    "ch04.3": Answer(lambda: _worst_memory_gb(actor="llama-3.1-70b", gpus=16),
                     "GB per GPU of the most memory-hungry phase, Llama-3.1-70B on 16 H100",
                     "the overflow message names the phase and its parts"),
    "ch05.1": Answer(_decode_depth_growth_70b,
                     "decode depth of Llama-3.1-70B over Llama-3.1-8B",
                     "80 layers against 32, each a little deeper (wider matrices)"),
    "ch05.2": Answer(_exponential_max_ratio,
                     "E[longest of 16] / mean for exponential lengths",
                     "the harmonic number H_16 = 1 + 1/2 + ... + 1/16"),
    "ch05.3": Answer(_tail_cut_saving_s,
                     "decode seconds saved by cutting the log-normal tail at 4,096 tokens",
                     "clip the lengths (tail_lengths.clip(1, 4096)) and compare rollout_decode"),
    "ch06.1": Answer(_half_share_group_size,
                     "smallest G at which generation is under half of the H100 step",
                     "the share falls with G; search between 16 and 1024", rtol=0.0),
    "ch06.2": Answer(lambda: _worst_memory_gb(actor="deepseek-v3", hardware="h20", gpus=96,
                                              response_len=16384),
                     "GB per GPU that DeepSeek-V3 needs on 96 H20 with 16,384-token responses",
                     "the overflow message names the phase and its parts"),
    "ch06.3a": Answer(lambda: _lever_saving("b200", decode_efficiency=1.0),
                      "share of the B200 step saved by decode at full bandwidth (from 0.5)",
                      "1 - new time / old time, from train 0.4 and decode 0.5 efficiency"),
    "ch06.3b": Answer(lambda: _lever_saving("h20", train_efficiency=0.8),
                      "share of the H20 step saved by a trainer at 0.8 MFU (from 0.4)",
                      "1 - new time / old time, from train 0.4 and decode 0.5 efficiency"),
    "ch07.1a": Answer(lambda: _ring_steps("reduce_scatter", 8),
                      "steps of the ring reduce-scatter on 8 ranks",
                      "every step moves one chunk one rank further; n chunks, n - 1 hops",
                      rtol=0.0),
    "ch07.1b": Answer(lambda: _bytes_over_s("all_reduce", 8),
                      "bytes each rank sends in a ring all-reduce on 8 ranks, over S",
                      "2 (n - 1) steps of one chunk of S / n each"),
    "ch07.2": Answer(lambda: _token_mean_dp_error(2),
                     "relative error of the mean of per-rank token-means on 2 ranks",
                     "dp_grads(..., ProcessGroup(2), norms=\"rank\") against local_grads on the "
                     "whole batch; the largest error over the weights, relative to each "
                     "weight's largest gradient"),
    "ch07.3a": Answer(lambda: _smallest_fitting_dp("llama-3.1-70b", 3),
                      "smallest dp at which Llama-3.1-70B fits on H100s with ZeRO-3",
                      "scan dp = 1, 2, 4, ... in the calculator (zero_stage=3)", rtol=0.0),
    "ch07.3b": Answer(lambda: _dp_plan("llama-3.1-70b", 512, 1)[0].total_bytes / 1e9,
                      "GB per GPU of Llama-3.1-70B with ZeRO-1 at dp = 512",
                      "ZeRO-1 keeps the bf16 weights and gradients whole on every GPU"),
    "ch07.4a": Answer(lambda: _dp_efficiency(16, 3),
                      "parallel efficiency of Qwen2.5-7B's step at dp = 16 with ZeRO-3",
                      "T(1) / (16 T(16)), both with zero_stage=3"),
    "ch07.4b": Answer(lambda: _dp_plan("qwen2.5-7b", 16, 3, micro_batch_size=4)[0].total_bytes
                      / 1e9,
                      "GB per GPU of Qwen2.5-7B at dp = 16, ZeRO-3, 4 sequences per micro-batch",
                      "memory_per_gpu with TrainWorkload(..., micro_batch_size=4) and "
                      "512 // (16 x 4) micro-batches"),
    "ch07.5a": Answer(lambda: _allreduce_terms()[0] / _allreduce_terms()[1],
                      "latency term over bandwidth term of the 15.2 GB all-reduce on 512 "
                      "ranks, 5 us per step",
                      "latency: 2 (n - 1) steps x 5 us; bandwidth: the time at latency 0"),
    "ch07.5b": Answer(lambda: _tree_ring_crossover_bytes() / 1e6,
                      "MB below which a binomial tree (2 ceil(log2 n) whole-buffer steps) "
                      "beats the ring on 512 ranks",
                      "both times are a + b S; solve a_tree + b_tree S = a_ring + b_ring S"),
    "ch08.1": Answer(lambda: 4 * _bytes_over_s("all_reduce", 8),
                     "bytes one block sends per rank at tp = 8, over S",
                     "four all-reduces of S per block, each 2 (tp - 1) / tp x S"),
    "ch08.2a": Answer(_smallest_fitting_cp,
                      "smallest cp at which Llama-3.1-70B fits on 64 H100s, 16,384 tokens, "
                      "tp = 8 + sp",
                      "tp_plan_results(..., 8, True, cp, 16384) for cp = 1, 2, 4", rtol=0.0),
    "ch08.2b": Answer(_cp_share_of_step,
                      "share of that step in context-parallel communication",
                      "step.comm_s['cp'] / step.total_s"),
    "ch08.2c": Answer(lambda: _tp_plan("qwen2.5-32b", "h100", 8, 1, 32768)[0].total_bytes / 1e9,
                      "GB per GPU of Qwen2.5-32B, 32,768 tokens, tp = 8 + sp, cp = 1",
                      "tp_plan_results('qwen2.5-32b', 'h100', 8, True, 1, 32768)"),
    "ch08.3": Answer(lambda: _tp_across_nodes_ratio("b200"),
                     "TP communication of GPT-3 175B across two B200 nodes over inside one",
                     "(15/16 x 2 x 64) / (7/8 x 2 x 32) x NVLink / network bandwidth"),
    "ch08.4a": Answer(lambda: _decode_intensity(1024),
                      "FLOPs per byte of a Llama-3.1-70B decode step, 1,024 sequences, context "
                      "4,608",
                      "decode_step_flops / decode_step_bytes; tp divides both"),
    "ch08.4b": Answer(lambda: _decode_intensity(10**6),
                      "the same at a batch of a million sequences (the limit)",
                      "as the batch grows the weights' bytes vanish beside the KV cache's"),
    "ch08.5": Answer(lambda: _ring_slowest_over_zigzag(8),
                     "slowest rank with contiguous chunks over zigzag, cp = 8",
                     "contiguous: rank r computes r + 1 blocks; zigzag: (cp + 1) / 2 each"),
    "ch09.1a": Answer(lambda: _timeline("1f1b", 4, 4).bubble_fraction,
                      "1F1B bubble over the ideal time, p = m = 4",
                      "(p - 1) / m"),
    "ch09.1b": Answer(lambda: _timeline("interleaved", 4, 4, 2).bubble_fraction,
                      "interleaved bubble over the ideal time, p = m = 4, v = 2",
                      "(p - 1) / (v m)"),
    "ch09.1c": Answer(lambda: _timeline("interleaved", 4, 4, 2).peak_in_flight[0],
                      "micro-batch chunks stage 0 holds at once, interleaved, p = m = 4, v = 2",
                      "the warm-up runs every forward chunk of stage 0 before its first "
                      "backward", rtol=0.0),
    "ch09.2a": Answer(lambda: _search("qwen2.5-72b", 1024,
                                      workload={"global_batch": 128}).best.bubble_share,
                      "bubble share of the best plan, Qwen2.5-72B, 1,024 GPUs, 128 sequences",
                      "search_plans(..., TrainWorkload(global_batch=128, ...)).best"),
    "ch09.2b": Answer(lambda: _search("qwen2.5-72b", 1024,
                                      workload={"global_batch": 128}).best.comm_share,
                      "exposed-communication share of that plan",
                      "search_plans(...).best.comm_share"),
    "ch09.3a": Answer(lambda: _skewed_expert_traffic(3.0)[0],
                      "share of the (token, choice) pairs the busiest expert gets, shift 3",
                      "expert_load(...).max() / expert_load(...).sum()"),
    "ch09.3b": Answer(lambda: _skewed_expert_traffic(3.0)[1],
                      "combine bytes of the busiest expert's rank over the mean, shift 3",
                      "the combine is the third all-to-all of the forward log"),
    "ch09.4a": Answer(lambda: _reshard_gb(4, "colocated"),
                      "GB each GPU receives, Megatron tp = 8 to rollout tp = 4, colocated",
                      "reshard_bytes_per_gpu(model, ParallelPlan(dp=8, tp=8, ...), 4, "
                      "mode='colocated')"),
    "ch09.4b": Answer(lambda: _reshard_gb(4, "disaggregated"),
                      "GB each GPU receives, Megatron tp = 8 to rollout tp = 4, disaggregated",
                      "a separate GPU holds nothing: it receives its whole inference shard"),
    "ch09.5a": Answer(lambda: _memory_margin_effect()[0],
                      "how many of the six best plans of §9.5 use at most 80% of the HBM",
                      "compare each best plan's memory_per_gpu_bytes with 0.8 x 80 GB",
                      rtol=0.0),
    "ch09.5b": Answer(lambda: _memory_margin_effect()[1],
                      "largest slow-down of a best plan with memory_fraction=0.8",
                      "new best step_time_s over the old one, for each of the six searches"),
}
"""Exercise id -> :class:`Answer`."""


def answers(prefix: str = "") -> list[str]:
    """The registered exercise ids, in order; with ``prefix`` (e.g. ``"ch04"``) only those that
    start with it.

    Raises:
        ValueError: naming ``prefix`` if it is not a string.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'ch04', got {prefix!r}")
    return [k for k in REGISTRY if k.startswith(prefix)]


def _entry(exercise) -> Answer:
    if not isinstance(exercise, str) or exercise not in REGISTRY:
        raise ValueError(f"exercise must be one of {answers()}, got {exercise!r}")
    return REGISTRY[exercise]


def expected_answer(exercise: str) -> float:
    """The expected value of ``exercise``, computed by the library now.

    Raises:
        ValueError: naming ``exercise`` if it is not a registered id.
    """
    return float(_entry(exercise).compute())


def _digits(rtol: float) -> int:
    """Significant digits that a relative tolerance resolves (at least 2)."""
    return max(2, math.ceil(-math.log10(rtol))) if rtol > 0 else 0


def _fmt(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits (trailing zeros kept); 0 digits: as it is."""
    if digits == 0:                                      # exact answers are whole numbers
        return f"{x:,.0f}" if float(x).is_integer() else f"{x:.6g}"
    return f"{x:#.{digits}g}".rstrip(".")


def check_answer(exercise: str, value, *, rtol: float | None = None) -> bool:
    """Compare ``value`` with the library's answer to ``exercise``; print a one-line verdict.

    Args:
        exercise: an id of :func:`answers`, e.g. ``"ch04.2a"``.
        value: your answer, a finite real number.
        rtol: relative tolerance; None = the exercise's own (1% for most, exact for counts).
    Returns:
        True if ``value`` is within the tolerance of the expected answer.
    Raises:
        ValueError: naming ``exercise`` (not a registered id; the message lists them),
            ``value`` (not a finite real number) or ``rtol`` (outside [0, 1)).
    """
    entry = _entry(exercise)
    ok_type = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    if not ok_type or not math.isfinite(value):
        raise ValueError(f"value must be a finite real number (your answer to {exercise}), "
                         f"got {value!r}")
    if rtol is None:
        rtol = entry.rtol
    elif isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol < 1:
        raise ValueError(f"rtol must be a number in [0, 1), got {rtol!r}")
    expected = expected_answer(exercise)
    value = float(value)
    ok = abs(value - expected) <= max(rtol * abs(expected), entry.atol)
    digits = _digits(rtol)
    if ok:
        print(f"✓ {exercise}: {_fmt(value, 0) if digits == 0 else f'{value:.4g}'} matches")
    else:
        want = (f"expected {_fmt(expected, digits)}" if digits == 0 else
                f"expected about {_fmt(expected, digits)} (to {digits} significant digits)")
        print(f"✗ {exercise}: {want}, got {_fmt(value, digits)} — hint: {entry.hint}")
    return ok
