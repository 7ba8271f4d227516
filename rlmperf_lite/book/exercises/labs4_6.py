"""Answers to the exercises of Labs 4-6 (Part II: compute profiles): each expected value is
computed by the library at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations


import numpy as np

from ._answer import QWEN_STEP, Answer

__all__ = ["ANSWERS"]


# ---- Lab 4 -----------------------------------------------------------------------------------

def _compute_bound_decode_batch() -> int:
    from ...cost import decode_step_bytes, decode_step_flops, hardware_preset, model_preset
    qwen, ridge = model_preset("qwen2.5-7b"), hardware_preset("h100").ridge_intensity
    b = 1
    while decode_step_flops(qwen, b, 0) / decode_step_bytes(qwen, b, 0) < ridge:
        b += 1
    return b


def _estimate(**changes):
    from ...cost import estimate_rl_step
    return estimate_rl_step("grpo", **{**QWEN_STEP, **changes})


def _worst_memory_gb(**changes) -> float:
    return max(p.per_gpu_memory_bytes for p in _estimate(**changes).phases) / 1e9


# ---- Lab 5 -----------------------------------------------------------------------------------

def _decode_depth_growth_70b() -> float:
    from ...cost import rl_step_workdepth
    d = {a: rl_step_workdepth("grpo", **{**QWEN_STEP, "actor": a}).phase("rollout_decode")
         for a in ("llama-3.1-8b", "llama-3.1-70b")}
    return d["llama-3.1-70b"].depth_rounds / d["llama-3.1-8b"].depth_rounds


def _exponential_max_ratio(group_size: int = 16) -> float:
    from ...cost import expected_max_length
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


def _decode_step_ms() -> float:
    from ...cost.rollout import decode_step_s
    from ...cost import hardware_preset, model_preset
    return 1e3 * float(decode_step_s(model_preset("qwen2.5-7b"), hardware_preset("h100"),
                                     batch=64, context=2560))


def _kv_sequences() -> int:
    from ...cost import hardware_preset, max_kv_sequences, model_preset
    return max_kv_sequences(model_preset("qwen2.5-7b"), hardware_preset("h100"), 512 + 4096,
                            memory_utilization=0.9)


ANSWERS: dict[str, Answer] = {
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
    "ch06.4": Answer(_decode_step_ms,
                     "ms of one decode step, Qwen2.5-7B on one H100, 64 sequences at 2,560 tokens",
                     "bytes read (2N of weights + 64 x 2,560 x 57,344 of KV cache) over 3.35 TB/s",
                     rtol=0.02),
    "ch06.5": Answer(_kv_sequences,
                     "sequences of 4,608 tokens whose KV cache fits on one H100 beside the weights",
                     "(0.9 x 80 GB - 2N) / (4,608 x 57,344 bytes), rounded down", rtol=0.0),
}
"""Exercise id -> :class:`~rlmperf_lite.book.exercises.Answer`."""
