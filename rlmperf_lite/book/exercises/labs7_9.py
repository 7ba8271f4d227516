"""Answers to the exercises of Labs 7-9 (Part III: parallelism): each expected value is
computed by the library at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations

import math

import numpy as np

from ._answer import Answer

__all__ = ["ANSWERS"]


# ---- Lab 7 -----------------------------------------------------------------------------------

TOY_GRPO = dict(num_prompts=8, group_size=4, lr_warmup_steps=2, steps=10, seed=3)
"""The toy GRPO loop of Labs 7 and 8, whose first batch (8 prompts x 4 samples) they split."""

DP_BATCH = dict(global_batch=512, seq_len=4608)
"""Lab 7's training batch, Chapter 4's 512 sequences of 512 + 4,096 tokens."""


def _bytes_over_s(op: str, n: int) -> float:
    from ...cost import collective_bytes_per_rank
    return collective_bytes_per_rank(op, 1.0, n)


def _ring_steps(op: str, n: int) -> float:
    from ...cost import collective_time_s
    return collective_time_s(op, 0.0, n, 1.0, latency_s=1.0)   # 1 s per step, no bytes


def _token_mean_dp_error(dp: int) -> float:
    """Largest relative error of the mean of per-rank token-means on dp ranks (Lab 7)."""
    from ...parallel import ProcessGroup, dp_grads, local_grads, make_grpo_batch
    from ...rl import GRPOConfig, loss_norms
    config = GRPOConfig(**TOY_GRPO)
    batch = make_grpo_batch(config.model, config, config.seed)
    _, full = local_grads(batch.params, batch, config, loss_norms(batch.completion_mask, config))
    wrong = dp_grads(batch.params, batch, config, ProcessGroup(dp), norms="rank")[0]
    return max(float(np.abs(wrong[k] - full[k]).max() / np.abs(full[k]).max()) for k in full)


def _dp_plan(model: str, dp: int, zero_stage: int, micro_batch_size: int = 1):
    """Memory and step time of a pure data-parallel plan on H100s (Lab 7's calculator)."""
    from ...cost import (ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                         memory_per_gpu, train_step_time)
    m = ModelConfig.preset(model)
    wl = TrainWorkload(**DP_BATCH, micro_batch_size=micro_batch_size)
    plan = ParallelPlan(dp=dp, zero_stage=zero_stage, recompute="full",
                        microbatches=wl.microbatches_per_rank(dp))
    return memory_per_gpu(m, plan, wl), train_step_time(m, hardware_preset("h100"), plan, wl)


DP_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""The dp values of Lab 7's calculator (512 sequences: at most one per rank)."""


def _smallest_fitting_dp(model: str, zero_stage: int) -> int:
    from ...cost import hardware_preset
    hbm = hardware_preset("h100").hbm_bytes
    return next(d for d in DP_SIZES if _dp_plan(model, d, zero_stage)[0].total_bytes <= hbm)


def _dp_efficiency(dp: int, zero_stage: int) -> float:
    """Parallel efficiency T(1) / (dp T(dp)) of Qwen2.5-7B's step (Lab 7's scaling cell)."""
    one = _dp_plan("qwen2.5-7b", 1, zero_stage)[1].total_s
    return one / (dp * _dp_plan("qwen2.5-7b", dp, zero_stage)[1].total_s)


def _allreduce_terms(latency_s: float = 5e-6, n: int = 512) -> tuple[float, float]:
    """(latency term, bandwidth term) in seconds of the bf16 gradient all-reduce of Qwen2.5-7B
    over the network on n ranks."""
    from ...cost import collective_time_s, hardware_preset, model_preset
    S, bw = 2 * model_preset("qwen2.5-7b").num_params(), hardware_preset("h100")
    bandwidth = collective_time_s("all_reduce", S, n, bw.inter_node_bandwidth_bytes_per_s)
    return collective_time_s("all_reduce", S, n, bw.inter_node_bandwidth_bytes_per_s,
                             latency_s=latency_s) - bandwidth, bandwidth


def _double_tree_crossover_bytes(latency_s: float = 5e-6, n: int = 512) -> float:
    """Buffer below which NCCL's pipelined double binary tree beats the ring's all-reduce over
    the network (:func:`~rlmperf_lite.cost.tree_ring_crossover_bytes`)."""
    from ...cost import hardware_preset, tree_ring_crossover_bytes
    bw = hardware_preset("h100").inter_node_bandwidth_bytes_per_s
    return tree_ring_crossover_bytes(n, bw, latency_s)


def _binomial_ring_crossover_bytes(latency_s: float = 5e-6, n: int = 512) -> float:
    """Buffer below which an unpipelined binomial tree's reduce + broadcast, 2 ceil(log2 n)
    steps each sending the whole buffer (Thakur et al. 2005, §4), beats the ring's
    all-reduce."""
    from ...cost import collective_time_s, hardware_preset
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
    from ...cost import (HardwareSpec, ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                         memory_per_gpu, train_step_time)
    m = ModelConfig.preset(model)
    hw = hardware if isinstance(hardware, HardwareSpec) else hardware_preset(hardware)
    wl = TrainWorkload(global_batch=512, seq_len=seq_len)
    dp = gpus // (tp * cp)
    plan = ParallelPlan(dp=dp, tp=tp, cp=cp, sp=tp > 1, zero_stage=1, recompute="selective",
                        microbatches=wl.microbatches_per_rank(dp))
    plan.validate(m, hw, gpus, wl)
    return memory_per_gpu(m, plan, wl), train_step_time(m, hw, plan, wl), hw


def _smallest_fitting_cp(model: str = "llama-3.1-70b", seq_len: int = 16384) -> int:
    """Smallest cp at which ``model``'s step of ``seq_len``-token sequences fits on 64 H100s,
    tp = 8 + sp (Lab 8's plans)."""
    for cp in (1, 2, 4, 8):
        mem, _, hw = _tp_plan(model, "h100", 8, cp, seq_len)
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

    from ...cost import hardware_preset
    hw = hardware_preset(hardware)
    across = replace(hw, gpus_per_node=16,
                     intra_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s)
    # GPT-3's full context, 2,048 tokens; the ratio does not depend on the length
    inside = _tp_plan("gpt3-175b", hw, 8, 1, 2048, gpus=128)[1]
    spread = _tp_plan("gpt3-175b", across, 16, 1, 2048, gpus=128)[1]
    return spread.comm_s["tp"] / inside.comm_s["tp"]


def _decode_intensity(batch: int, context: int = 4608) -> float:
    from ...cost import decode_step_bytes, decode_step_flops, model_preset
    m = model_preset("llama-3.1-70b")
    return decode_step_flops(m, batch, context) / decode_step_bytes(m, batch, context)


def _ring_slowest_over_zigzag(cp: int) -> float:
    from ...parallel import ring_attention_work
    return float(ring_attention_work(cp, "contiguous").max()
                 / ring_attention_work(cp, "zigzag").max())


# ---- Lab 9 -----------------------------------------------------------------------------------

RL_UPDATE = dict(global_batch=512, seq_len=512 + 4096)
"""Lab 9's RL update: 512 sequences of 512 + 4,096 tokens."""


def _timeline(schedule: str, pp: int, m: int, v: int = 1):
    from ...parallel import make_schedule, schedule_timeline
    return schedule_timeline(make_schedule(schedule, pp, m, v))


def _search(model: str, gpus: int, **options):
    from ...cost import TrainWorkload, hardware_preset, model_preset, search_plans
    workload = TrainWorkload(**{**RL_UPDATE, **options.pop("workload", {})})
    return search_plans(model_preset(model), hardware_preset("h100"), gpus, workload, **options)


def _skewed_expert_traffic(shift: float = 3.0) -> tuple[float, float]:
    """Lab 9's MoE layer (E = 8, top-2, ep = 4, 64 tokens per rank, seed 0) on tokens shifted by
    ``shift`` along expert 0's router direction: (share of the (token, choice) pairs the busiest
    expert gets, combine bytes its rank sends over the mean of the ranks)."""
    from ...parallel import (ProcessGroup, ep_moe_forward, expert_load, init_moe_params,
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
    from ...cost import ParallelPlan, model_preset, reshard_bytes_per_gpu
    train = ParallelPlan(dp=8, tp=8, zero_stage=1, microbatches=64)
    return reshard_bytes_per_gpu(model_preset("qwen2.5-72b"), train, rollout_tp, mode=mode) / 1e9


BEST_PLAN_SETTINGS = tuple((model, gpus) for model in ("qwen2.5-72b", "qwen3-235b-a22b")
                           for gpus in (64, 256, 1024))
"""The six searches of Lab 9, §5."""


def _memory_margin_effect() -> tuple[int, float]:
    """(how many of the six best plans of Lab 9 use at most 80% of the HBM, the largest
    slow-down of a best plan when plans may use only 80%)."""
    from ...cost import hardware_preset
    limit = 0.8 * hardware_preset("h100").hbm_bytes
    kept, slower = 0, 1.0
    for model, gpus in BEST_PLAN_SETTINGS:
        best = _search(model, gpus).best
        kept += best.memory_per_gpu_bytes <= limit
        slower = max(slower, _search(model, gpus, memory_fraction=0.8).best.step_time_s
                     / best.step_time_s)
    return kept, slower


ANSWERS: dict[str, Answer] = {
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
    "ch07.5b": Answer(lambda: _double_tree_crossover_bytes() / 1e6,
                      "MB below which a pipelined double binary tree beats the ring on 512 "
                      "ranks",
                      "tree_ring_crossover_bytes(512, 50e9, 5e-6): the latency the tree saves, "
                      "(2 (n - 1) - m) alpha, against its pipeline's fill"),
    "ch07.5c": Answer(lambda: _binomial_ring_crossover_bytes() / 1e6,
                      "MB below which an unpipelined binomial tree (2 ceil(log2 n) "
                      "whole-buffer steps) beats the ring on 512 ranks",
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
    "ch08.2d": Answer(lambda: _smallest_fitting_cp("qwen2.5-32b", 32768),
                      "smallest cp at which Qwen2.5-32B fits on 64 H100s, 32,768 tokens, "
                      "tp = 8 + sp",
                      "tp_plan_results('qwen2.5-32b', 'h100', 8, True, cp, 32768) for cp = 1, "
                      "2, 4", rtol=0.0),
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
"""Exercise id -> :class:`~rlmperf_lite.book.exercises.Answer`."""
