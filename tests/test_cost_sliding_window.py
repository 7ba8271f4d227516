"""Sliding-window attention (issue 16, item 7): windows and local/global layer patterns read
from config.json, attention pairs and KV cache capped at the window, checked against brute-force
counts over positions and against Mistral-7B-v0.1's published config (window 4096)."""
import dataclasses

import numpy as np
import pytest

from rlmperf_lite.cost import (decode_flops, decode_step_bytes, decode_step_flops,
                               estimate_rl_step, forward_flops, from_hf_config,
                               inference_memory_per_gpu, kv_cache_bytes_per_token,
                               matmul_weights_per_token, model_preset, prefill_flops)
from rlmperf_lite.cost.flops import (attended_keys, attention_flops_per_pair, attention_pairs,
                                     causal_pairs)
from rlmperf_lite.cost.memory import kv_cache_bytes
from rlmperf_lite.cost.model import ModelConfig

# Mistral-7B-v0.1 config.json: 32 layers, 8 KV heads, head_dim 4096 / 32 = 128, window 4096
MISTRAL_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2          # K and V, every layer, bf16: 131,072 B
W = 4096


def _gemma3_like(window=1024, layers=12):
    """A small model with Gemma-3's pattern: 5 local layers of ``window``, then 1 global."""
    types = tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                  for i in range(layers))
    return ModelConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, intermediate_size=512,
                       max_position_embeddings=10**6, sliding_window=window, layer_types=types)


def _keys_brute(m, context: int) -> float:
    """Keys a query reads with ``context`` tokens in its sequence, summed over layers / L."""
    return sum(context if w is None else min(context, w) for w in m.layer_windows) \
        / m.num_hidden_layers


def test_mistral_preset_has_its_window():
    m = model_preset("mistral-7b-v0.1")
    assert m.sliding_window == W and set(m.layer_windows) == {W}
    assert kv_cache_bytes_per_token(m) == MISTRAL_KV_PER_TOKEN


def test_mistral_kv_cache_at_28k_is_the_window():
    """The issue's case: a 28,000-token response (512-token prompt) on 64 H100s, tp = 1, so 8
    sequences per replica, each holding its last 4,096 tokens in every layer: 8 x 4096 x
    131,072 B = 4.29 GB per GPU (it was 8 x 28,512 x 131,072 = 29.9 GB)."""
    est = estimate_rl_step("grpo", actor="mistral-7b-v0.1", hardware="h100", prompts=32,
                           group_size=16, prompt_len=512, response_len=28000, gpus=64)
    assert est.rollout_tp == 1
    kv = est.phase("rollout_decode").memory_parts["KV cache"]
    assert kv == 8 * W * MISTRAL_KV_PER_TOKEN == 4_294_967_296
    m = model_preset("mistral-7b-v0.1")
    assert kv_cache_bytes(m, 512 + 28000) == W * MISTRAL_KV_PER_TOKEN
    assert kv_cache_bytes(m, 1000) == 1000 * MISTRAL_KV_PER_TOKEN      # inside the window
    mem = inference_memory_per_gpu(m, 1, kv_tokens=8 * 28512, sequences=8)
    assert mem.kv_cache_bytes == kv


def test_causal_pairs_is_a_count_over_positions():
    for window in (None, 1, 3, 7, 16):
        for n in range(0, 40):
            brute = sum(i + 1 if window is None else min(i + 1, window) for i in range(n))
            assert causal_pairs(n, window) == brute, (n, window)


def test_attention_flops_of_a_layer_pattern_are_a_count_over_positions():
    """Forward and decode FLOPs of a Gemma-3-like 5 local : 1 global model: the attention term
    equals a loop over layers and positions, each position i attending min(i + 1, W) keys."""
    m = _gemma3_like(window=16)
    a_layer = attention_flops_per_pair(m) // m.num_hidden_layers
    for n in (1, 10, 16, 17, 50):
        brute = sum(a_layer * (i + 1 if w is None else min(i + 1, w))
                    for w in m.layer_windows for i in range(n))
        attn = forward_flops(m, n, lm_head="none") - 2.0 * matmul_weights_per_token(
            m, lm_head=False) * n
        assert attn == pytest.approx(brute, rel=1e-12)
    P, R = 5, 40
    steps = [2.0 * matmul_weights_per_token(m) + attention_flops_per_pair(m)
             * _keys_brute(m, P + j) for j in range(1, R)]
    assert decode_flops(m, P, R) == pytest.approx(sum(steps), rel=1e-12)
    assert decode_step_flops(m, 3, 30) == pytest.approx(
        3 * (2.0 * matmul_weights_per_token(m) + attention_flops_per_pair(m)
             * _keys_brute(m, 31)), rel=1e-12)
    assert attended_keys(m, 100) == pytest.approx((10 * 16 + 2 * 100) / 12)
    assert attention_pairs(m, 50) == pytest.approx(
        sum(causal_pairs(50, w) for w in m.layer_windows) / 12)


def test_decode_bytes_read_only_the_window():
    m = model_preset("mistral-7b-v0.1")
    assert decode_step_bytes(m, 2, 10000) == 2 * m.num_params() + 2 * W * MISTRAL_KV_PER_TOKEN
    assert decode_step_bytes(m, 2, 100) == 2 * m.num_params() + 2 * 100 * MISTRAL_KV_PER_TOKEN


def test_a_model_without_a_window_is_unchanged():
    """No window: attended_keys hands back its input (so every caller computes what it did
    before), and the FLOPs and bytes are the old closed forms, bit for bit."""
    m = model_preset("qwen2.5-7b")
    ctx = np.arange(513, 4608, dtype=np.float64)
    assert attended_keys(m, ctx) is ctx and attended_keys(m, 7) == 7
    n = np.array([100.0, 4608.0])
    old_fwd = float(2.0 * matmul_weights_per_token(m, lm_head=False) * n.sum()
                    + attention_flops_per_pair(m) * (n * (n + 1) / 2).sum()
                    + 2.0 * m.vocab_size * m.hidden_size * n.sum())
    assert forward_flops(m, n) == old_fwd
    steps = 4095.0
    assert decode_flops(m, 512, 4096) == float(
        2.0 * matmul_weights_per_token(m) * steps
        + attention_flops_per_pair(m) * (steps * 512 + steps * (steps + 1) / 2))
    assert kv_cache_bytes(m, 4608) == 4608 * kv_cache_bytes_per_token(m)
    assert decode_step_bytes(m, 8, 4608) == float(2 * m.num_params()
                                                  + 8 * 4608 * kv_cache_bytes_per_token(m))
    # a window wider than every context changes nothing either (up to rounding)
    wide = dataclasses.replace(m, sliding_window=10**7)
    assert forward_flops(wide, n) == pytest.approx(forward_flops(m, n), rel=1e-14)
    assert prefill_flops(wide, [512] * 4) == pytest.approx(prefill_flops(m, [512] * 4),
                                                           rel=1e-14)


def test_windows_from_config_json():
    base = dict(vocab_size=32000, hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                num_key_value_heads=2, intermediate_size=1024)
    mistral = from_hf_config({**base, "model_type": "mistral", "sliding_window": 4096})
    assert mistral.layer_windows == (4096,) * 6
    # Qwen2's config carries a window it does not use unless use_sliding_window is true
    off = from_hf_config({**base, "model_type": "qwen2", "sliding_window": 131072,
                          "use_sliding_window": False, "max_window_layers": 4})
    assert off.sliding_window is None and off.layer_windows == (None,) * 6
    on = from_hf_config({**base, "model_type": "qwen2", "sliding_window": 4096,
                         "use_sliding_window": True, "max_window_layers": 4})
    assert on.layer_windows == (None,) * 4 + (4096,) * 2
    # Gemma-3's sliding_window_pattern 6: every 6th layer is global
    g3 = from_hf_config({**base, "num_hidden_layers": 12, "model_type": "llama",
                         "sliding_window": 1024, "sliding_window_pattern": 6})
    assert g3.layer_windows == ((1024,) * 5 + (None,)) * 2
    # gpt-oss style layer_types: a 128-token window alternating with full attention
    types = ["sliding_attention", "full_attention"] * 3
    oss = from_hf_config({**base, "model_type": "llama", "sliding_window": 128,
                          "layer_types": types})
    assert oss.layer_windows == (128, None) * 3 and oss.layer_types == tuple(types)
    assert from_hf_config({**base, "model_type": "llama"}).sliding_window is None


def test_bad_window_fields_are_named():
    kw = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128)
    with pytest.raises(ValueError, match="sliding_window"):
        ModelConfig(**kw, sliding_window=0)
    with pytest.raises(ValueError, match="layer_types has 1 entries"):
        ModelConfig(**kw, sliding_window=8, layer_types=("full_attention",))
    with pytest.raises(ValueError, match="layer_types"):
        ModelConfig(**kw, sliding_window=8, layer_types=("full_attention", "chunked"))
    with pytest.raises(ValueError, match="sliding_window is None"):
        ModelConfig(**kw, layer_types=("sliding_attention", "full_attention"))
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        from_hf_config({**kw, "model_type": "llama", "sliding_window": 8,
                        "sliding_window_pattern": 0})


def test_gpt_oss_sliding_layers_keep_only_their_window():
    """gpt-oss-20b (config.json layer_types): 12 sliding layers of 128 keys and 12 full ones.
    At 100,000 tokens a sequence's cache holds (12 x 128 + 12 x 100,000) / 24 tokens' worth of
    K and V (2 x 24 layers x 8 KV heads x 64 x 2 bytes per token): the sliding half is capped."""
    m = model_preset("gpt-oss-20b")
    per_token = 2 * 24 * 8 * 64 * 2
    assert kv_cache_bytes_per_token(m) == per_token
    assert m.layer_windows == (128, None) * 12
    assert kv_cache_bytes(m, 100_000) == per_token * (12 * 128 + 12 * 100_000) / 24
    assert kv_cache_bytes(m, 100) == 100 * per_token                     # inside the window
    n = 8192
    assert attention_pairs(m, n) == pytest.approx(
        (12 * causal_pairs(n, 128) + 12 * n * (n + 1) / 2) / 24, rel=1e-15)


def test_gemma_family_presets_carry_their_local_global_patterns():
    """Gemma-2-9B: 21 local (4096) layers alternating with 21 global ones (Gemma2Config's
    default); Gemma-3-12B: 40 local (1024) and 8 global, five to one; Phi-3-mini-4k's 2047
    window in all 32 layers."""
    g2 = model_preset("gemma-2-9b")
    assert g2.layer_windows == (4096, None) * 21
    assert attended_keys(g2, 10_000) == pytest.approx((21 * 4096 + 21 * 10_000) / 42)
    g3 = model_preset("gemma-3-12b")
    assert g3.layer_windows == ((1024,) * 5 + (None,)) * 8
    assert kv_cache_bytes(g3, 32_768) == kv_cache_bytes_per_token(g3) * (
        40 * 1024 + 8 * 32_768) / 48
    assert set(model_preset("phi-3-mini-4k").layer_windows) == {2047}
    assert model_preset("phi-4").sliding_window is None
