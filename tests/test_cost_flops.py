"""FLOPs of real models against published formulas (Megatron-LM Eq. 3, Kaplan's 6N) and against
the matrix products the toy model counts while it runs."""
import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, decode_flops, forward_flops, matmul_weights_per_token,
                               model_preset, prefill_flops, train_flops)
from rlmperf_lite.nn import (COUNTER, TinyLMConfig, generate, init_params, logps_backward,
                             logps_forward)
from rlmperf_lite.tasks import AdditionTask


def test_megatron_eq3_for_the_145_6b_row_of_table_1():
    """Narayanan et al. 2021 (arXiv 2104.04473), Eq. 3 with full recomputation:
    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); Table 1 row: 145.6B, B = 2304, s = 2048,
    l = 80, h = 12288, V = 51200."""
    B, s, l_, h, V = 2304, 2048, 80, 12288, 51200
    model = model_preset("megatron-145.6b")
    assert (model.num_hidden_layers, model.hidden_size, model.vocab_size) == (l_, h, V)
    F = 96 * B * s * l_ * h * h * (1 + s / (6 * h) + V / (16 * l_ * h))
    assert train_flops(model, [s] * B, recompute=True, causal=False) == pytest.approx(F, rel=1e-12)
    no_recompute = train_flops(model, [s] * B, causal=False)
    assert no_recompute == pytest.approx(72 * B * s * l_ * h * h * (1 + s / (6 * h))
                                         + 6 * B * s * h * V, rel=1e-12)


def test_training_is_about_6n_and_forward_2n_flops_per_token():
    """Kaplan et al. 2020: training ~ 6 N FLOPs per token, forward ~ 2 N (short context)."""
    model = model_preset("llama-2-7b")
    n = model.num_params()
    assert forward_flops(model, [1]) == pytest.approx(2 * n, rel=0.02)
    assert train_flops(model, [1]) == pytest.approx(6 * n, rel=0.02)
    assert forward_flops(model, [1]) == 2 * matmul_weights_per_token(model) + 2 * 2 * 32 * 4096


def test_moe_tokens_pay_for_active_experts_only():
    model = model_preset("mixtral-8x7b-v0.1")
    per_token = forward_flops(model, [1], lm_head="none") / 2
    assert per_token < 0.3 * model.num_params()
    assert per_token == pytest.approx(model.num_active_params() - 2 * model.vocab_size
                                      * model.hidden_size, rel=0.01)


def test_the_toy_models_counted_flops_equal_the_formulas():
    """Every matrix product the numpy model runs, counted while it runs, equals the formula for
    its shape (it computes dense attention: causal=False)."""
    cfg, task = TinyLMConfig(), AdditionTask()
    model = ModelConfig.from_tiny_lm(cfg)
    assert model.num_params() == cfg.num_params()
    rng = np.random.default_rng(0)
    params = init_params(cfg, rng)
    prompts, _ = task.sample_prompts(rng, 8)
    COUNTER.reset()
    out = generate(params, prompts, cfg, max_new_tokens=5, eos_id=task.eos_id,
                   pad_id=task.pad_id, group_size=4, rng=rng)
    with COUNTER.phase("train_forward"):
        logps, cache = logps_forward(params, out.tokens, cfg)
    with COUNTER.phase("train_backward"):
        logps_backward(np.ones_like(logps), cache)
    P, T = out.prompt_len, out.tokens.shape[1]
    n_seq = len(out.tokens)
    counted = COUNTER.counts
    assert counted["prefill"] == prefill_flops(model, [P] * 8, causal=False)
    assert counted["decode"] == decode_flops(model, P, [T - P] * n_seq)
    assert counted["train_forward"] == forward_flops(model, [T] * n_seq, causal=False)
    assert counted["train_backward"] == 2 * counted["train_forward"]


def test_limits_and_units():
    model = model_preset("llama-3.1-8b")
    assert decode_flops(model, 100, 1) == 0 and decode_flops(model, 100, 0) == 0
    assert decode_flops(model, 1000, 10) > decode_flops(model, 10, 10)   # reads a longer cache
    # causal counts n(n+1)/2 pairs, dense n^2
    assert forward_flops(model, [4096]) < forward_flops(model, [4096], causal=False)
    assert forward_flops(model, [5, 7]) == forward_flops(model, [5]) + forward_flops(model, [7])
    assert train_flops(model, 4096, recompute=True) > train_flops(model, 4096)


@pytest.mark.parametrize("call, match", [
    (lambda m: forward_flops(m, [0]), "seq_lens must be finite and within"),
    (lambda m: forward_flops(m, [2.5]), "whole numbers"),
    (lambda m: forward_flops(m, "x"), "seq_lens must be"),
    (lambda m: forward_flops(m, [3], lm_head="first"), "lm_head must be"),
    (lambda m: decode_flops(m, [1, 2], [1, 2, 3]), "give one per sequence"),
    (lambda m: decode_flops(m, 10, -1), "response_lens"),
    (lambda m: train_flops("llama", [3]), "model must be a ModelConfig"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call(model_preset("llama-2-7b"))
