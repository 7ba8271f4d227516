"""The roofline: which phases are compute- or memory-bound, decode's bytes, MFU measured on the
toy model."""
import time

import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, decode_step_bytes, decode_step_flops, forward_flops,
                               hardware_preset, measure_cpu, mfu, model_preset, prefill_flops,
                               roofline_time)
from rlmperf_lite.nn import TinyLMConfig, init_params, logps_backward, logps_forward


def test_ridge_point_and_bounds_on_h100():
    h100 = hardware_preset("h100")
    model = model_preset("llama-2-7b")
    n = model.num_params()
    # decode, batch 1: read every weight once for one token -> ~1 FLOP per byte, memory-bound
    one = roofline_time(decode_step_flops(model, 1, 512), decode_step_bytes(model, 1, 512), h100)
    assert one["bound"] == "memory" and one["intensity"] < 2
    assert one["time_s"] == pytest.approx((2 * n + 512 * 2 * 32 * 4096 * 2) / 3.35e12)
    # prefill of 8 prompts x 2048 tokens: weights read once for 16k tokens -> compute-bound
    pf = roofline_time(prefill_flops(model, [2048] * 8), 2 * n, h100)
    assert pf["bound"] == "compute" and pf["ridge"] == pytest.approx(989.5e12 / 3.35e12)
    # a decode batch must be in the hundreds before the weights stop dominating
    big = roofline_time(decode_step_flops(model, 512, 0), decode_step_bytes(model, 512, 0), h100)
    assert big["bound"] == "compute"


def test_moe_decode_reads_the_experts_a_batch_touches():
    m = model_preset("qwen3-30b-a3b")
    b = m.param_breakdown()
    one = decode_step_bytes(m, 1, 0) / 2
    assert one == pytest.approx(m.num_params() - b["routed_experts"] * (1 - 8 / 128))
    assert decode_step_bytes(m, 4096, 0) / 2 == pytest.approx(m.num_params(), rel=1e-6)


def test_mfu_of_the_toy_training_pass_measured_on_this_cpu():
    """Measurement: counted FLOPs of a toy forward+backward over the measured time, against
    the CPU's measured GEMM peak, is a utilisation in (0, 1]."""
    cfg = TinyLMConfig()
    model = ModelConfig.from_tiny_lm(cfg)
    params = init_params(cfg, np.random.default_rng(0))
    tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, size=(256, 11))
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        logps, cache = logps_forward(params, tokens, cfg)
        logps_backward(np.ones_like(logps), cache)
        best = min(best, time.perf_counter() - t)
    flops = 3 * forward_flops(model, [11] * 256, causal=False)
    cpu = measure_cpu(0.5)
    u = mfu(flops, best, cpu, dtype="fp32")
    assert 0 < u <= 1


@pytest.mark.parametrize("call, match", [
    (lambda hw: roofline_time(-1, 1, hw), "flops"),
    (lambda hw: roofline_time(1, 1, "h100"), "hardware must be a HardwareSpec"),
    (lambda hw: roofline_time(1, 1, hw, dtype="fp4"), "has no peak for dtype 'fp4'"),
    (lambda hw: mfu(1.0, 0, hw), "seconds"),
    (lambda hw: decode_step_bytes(model_preset("llama-2-7b"), 0, 10), "batch"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call(hardware_preset("h100"))
