"""The rollout model's averages and totals (issue 16, items 6 and 8): the time-averaged context
of a running sequence is length-biased (checked against an explicit loop over decode iterations),
and a decode's bytes count only the replicas that hold a sequence."""
import numpy as np
import pytest

from rlmperf_lite.cost import (estimate_rl_step, kv_cache_bytes_per_token, model_preset,
                               resolve_hardware)
from rlmperf_lite.cost.flops import attended_keys
from rlmperf_lite.cost.rollout import mean_decode_context
from rlmperf_lite.sim import Workload
from rlmperf_lite.sim.from_cost import engine_from_cost

CH11 = dict(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
            max_response_len=8192, length_sigma=1.0, seed=0)
"""The workload of Chapter 11 (and Lab 11): log-normal responses of mean 2,048 cut at 8,192."""


def _loop_mean_context(P: int, lengths, keys=lambda c: c) -> float:
    """Decode the batch iteration by iteration: at iteration t every sequence still running
    (t < R_i) holds P + t tokens; the mean of ``keys`` of those over all (sequence, iteration)."""
    lengths = [int(r) for r in np.ravel(lengths)]
    total, count = 0.0, 0
    for t in range(max(lengths)):
        for r in lengths:
            if t < r:
                total += keys(P + t)
                count += 1
    return total / count


def test_mean_context_equals_a_direct_simulation():
    small = {**CH11, "prompts": 2, "mean_response_len": 500.0, "max_response_len": 2000}
    lengths = Workload(**small).response_lengths(2)                 # (2, 16) sampled lengths
    P = 512
    loop = _loop_mean_context(P, lengths)
    assert mean_decode_context(P, lengths) == pytest.approx(loop, rel=1e-12)
    R = lengths.ravel().astype(float)
    # the closed form: P + (E[R^2] / E[R] - 1) / 2, not P + E[R] / 2
    assert loop == pytest.approx(P + ((R ** 2).mean() / R.mean() - 1) / 2, rel=1e-12)
    assert loop > P + R.mean() / 2 + 100
    # with a sliding window (Mistral, 4,096 in every layer): each layer's cache capped
    m = model_preset("mistral-7b-v0.1")
    long = np.array([100, 3000, 6000, 9000])
    assert mean_decode_context(P, long, model=m) == pytest.approx(
        _loop_mean_context(P, long, lambda c: attended_keys(m, c)), rel=1e-12)


def test_chapter_11_workload_mean_context():
    """P + E[R^2] / (2 E[R]) of the cut log-normal is about 2,394 tokens (the engine charged
    P + mean / 2 = 1,536); the distribution's probabilities give what a large draw gives."""
    wl = Workload(**CH11)
    n, p = wl.length_pmf()
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and n.max() == 8192
    mean, second = (n * p).sum(), (n ** 2 * p).sum()
    assert 512 + second / (2 * mean) == pytest.approx(2394, abs=1)
    held = mean_decode_context(512, n, p)
    assert held == pytest.approx(512 + second / (2 * mean) - 0.5, rel=1e-12)
    draw = wl.response_lengths(20_000).ravel()                  # 320,000 samples
    assert mean_decode_context(512, draw) == pytest.approx(held, rel=0.01)
    assert draw.mean() == pytest.approx(mean, rel=0.01)
    fixed_n, fixed_p = Workload(**{**CH11, "dist": "fixed"}).length_pmf()
    assert fixed_n.tolist() == [2048] and fixed_p.tolist() == [1.0]
    assert mean_decode_context(512, fixed_n, fixed_p) == 512 + 2047 / 2


def test_engine_charges_the_length_biased_context():
    wl = Workload(**CH11)
    eng = engine_from_cost("qwen2.5-7b", "h100-sxm", wl, 8, decode_efficiency=0.5)
    m, hw = model_preset("qwen2.5-7b"), resolve_hardware("h100-sxm")
    n, p = wl.length_pmf()
    bw = hw.hbm_bandwidth_bytes_per_s * eng.tp * 0.5
    assert eng.decode_per_seq_s == pytest.approx(
        kv_cache_bytes_per_token(m) * mean_decode_context(512, n, p) / bw, rel=1e-12)


def test_mean_context_bad_input():
    with pytest.raises(ValueError, match="prompt_len"):
        mean_decode_context(-1, [10])
    with pytest.raises(ValueError, match="lengths"):
        mean_decode_context(10, [0, 3])
    with pytest.raises(ValueError, match="lengths"):
        mean_decode_context(10, [2.5])
    with pytest.raises(ValueError, match="weights"):
        mean_decode_context(10, [2, 3], [1.0])
    with pytest.raises(ValueError, match="weights"):
        mean_decode_context(10, [2, 3], [0.0, 0.0])


DEFAULT = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
               response_len=4096)
"""``rlmperf estimate``'s default workload: 512 sequences of 4,096 tokens after 512."""


def _replica_decode_bytes(m, batch: int, P: int = 512, R: int = 4096) -> float:
    """One replica decoding ``batch`` equal sequences: R - 1 steps, each the bf16 weights
    plus batch x (P + j) cached tokens."""
    j = np.arange(1, R, dtype=np.float64)
    return float((2.0 * m.num_params() + kv_cache_bytes_per_token(m) * batch * (P + j)).sum())


def test_decode_bytes_count_only_busy_replicas():
    """512 sequences: on 512, 1,024 or 4,096 GPUs (tp = 1) each busy replica decodes one and
    the rest idle, so the bytes are 512 single-sequence decodes, 3.22e16 B, at any GPU count
    (4,096 GPUs reported 2.58e17 before); with fewer replicas than sequences, the busiest
    replica's bytes times the replicas, as before."""
    m = model_preset("qwen2.5-7b")
    one = _replica_decode_bytes(m, 1)
    for gpus in (512, 1024, 4096):
        est = estimate_rl_step("grpo", gpus=gpus, **DEFAULT)
        assert est.rollout_tp == 1
        assert est.phase("rollout_decode").bytes_moved == pytest.approx(512 * one, rel=1e-12)
    assert 512 * one == pytest.approx(3.22e16, rel=2e-3)
    est = estimate_rl_step("grpo", gpus=64, **DEFAULT)                # 8 sequences each
    assert est.phase("rollout_decode").bytes_moved == pytest.approx(
        64 * _replica_decode_bytes(m, 8), rel=1e-12)
