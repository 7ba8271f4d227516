"""The model families read from config.json (issue 17, Models): each one's count from the module
shapes in transformers' modeling_<family>.py, written out as a formula per family; multimodal
wrappers read as their language model; model directories; refusals; DeepSeek-V3's
multi-token-prediction module in parameters (against the HF checkpoint's element count) and
in training FLOPs. Each formula below also equals transformers 5.24's own count of the model
built on the meta device from the same config (checked when these tests were written)."""
import dataclasses
import json
import math

import pytest

from rlmperf_lite.cost import (ModelConfig, decode_flops, forward_flops, from_hf_config,
                               kv_cache_bytes, matmul_weights_per_token, model_preset,
                               mtp_flops, prefill_flops, train_flops)
from rlmperf_lite.cost.flops import attention_flops_per_pair
from rlmperf_lite.cost.hf import FAMILIES

V, D, F, L, H, KV, HD = 1000, 128, 256, 3, 4, 2, 32
BASE = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
            num_attention_heads=H, num_key_value_heads=KV, head_dim=HD)
ATTN = D * H * HD + 2 * D * KV * HD + H * HD * D          # q, k, v, o weights


def test_gemma_geglu_tied_with_two_norms():
    """GemmaMLP: gate, up, down (GELU-gated); GemmaRMSNorm before attention and MLP; tied."""
    c = from_hf_config({**BASE, "model_type": "gemma"})
    assert c.mlp == "geglu" and c.tie_word_embeddings and c.sliding_window is None
    assert c.num_params() == V * D + L * (ATTN + 3 * D * F + 2 * D) + D


def test_gemma2_four_norms_and_alternating_windows():
    """Gemma2DecoderLayer: input, post-attention, pre- and post-feedforward norms; without
    layer_types Gemma2Config makes layer i slide when (i + 1) % 2 (window 4096)."""
    c = from_hf_config({**BASE, "model_type": "gemma2"})
    assert c.num_params() == V * D + L * (ATTN + 3 * D * F + 4 * D) + D
    assert c.layer_windows == (4096, None, 4096)
    assert from_hf_config({**BASE, "model_type": "gemma2", "sliding_window": 64,
                           "num_hidden_layers": 4}).layer_windows == (64, None) * 2


def test_gemma3_text_defaults_qk_norms_and_the_wrapper():
    """Gemma3Attention: q_norm, k_norm of head_dim. A gemma3 config's text_config may leave out
    vocab_size (262,208), head_dim (256), the window (4096) and the pattern (6); the wrapper's
    vision tower is not counted."""
    c = from_hf_config({**BASE, "model_type": "gemma3_text"})
    assert c.num_params() == V * D + L * (ATTN + 2 * HD + 3 * D * F + 4 * D) + D
    text = {k: BASE[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                 "num_key_value_heads")}
    wrapped = from_hf_config({"model_type": "gemma3", "text_config": {**text,
                              "num_hidden_layers": 6}, "vision_config": {"hidden_size": 1152}})
    assert wrapped.vocab_size == 262_208 and wrapped.head_dim == 256
    assert wrapped.layer_windows == (4096,) * 5 + (None,)
    attn = D * H * 256 + 2 * D * KV * 256 + H * 256 * D + 2 * 256
    assert wrapped.num_params() == 262_208 * D + 6 * (attn + 3 * D * F + 4 * D) + D


def test_multimodal_wrapper_reads_its_language_model():
    """A LLaVA-style config: the text_config (a llama) is the model; the wrapper's
    tie_word_embeddings and vocab_size fill what the text config leaves out."""
    llama = {k: v for k, v in BASE.items() if k != "vocab_size"}
    c = from_hf_config({"model_type": "llava", "vocab_size": V, "tie_word_embeddings": True,
                        "text_config": {**llama, "model_type": "llama"},
                        "vision_config": {"model_type": "clip_vision_model"}})
    assert c.num_params() == V * D + L * (ATTN + 3 * D * F + 2 * D) + D
    with pytest.raises(ValueError, match="model_type 'qwen2_5_vl_text' is not supported"):
        from_hf_config({"model_type": "qwen2_5_vl",
                        "text_config": {**BASE, "model_type": "qwen2_5_vl_text"}})


def test_phi3_is_llama_shaped_with_its_window_in_every_layer():
    """Phi3: fused qkv_proj and gate_up_proj (same counts), untied; transformers applies
    sliding_window in every layer (Phi-3-mini-4k: 2047)."""
    c = from_hf_config({**BASE, "model_type": "phi3", "sliding_window": 2047})
    assert c.num_params() == 2 * V * D + L * (ATTN + 3 * D * F + 2 * D) + D
    assert c.layer_windows == (2047,) * L


def test_gpt2_field_names_and_megatron_eq2():
    """GPT2Config's n_embd, n_layer, n_head, n_inner, n_positions; Conv1D c_attn (3 d^2 +
    3 d), c_proj, c_fc, c_proj with biases, ln_1, ln_2, ln_f with biases, wte tied, wpe: with
    n_inner = 4 d this is Megatron-LM's Eq. 2 plus the final LayerNorm."""
    d, l, v, s = 64, 2, 1000, 128
    c = from_hf_config({"model_type": "gpt2", "vocab_size": v, "n_embd": d, "n_layer": l,
                        "n_head": 4, "n_positions": s})
    assert c.num_params() == 12 * l * d * d + 13 * l * d + (v + s) * d + 2 * d
    inner = from_hf_config({"model_type": "gpt2", "vocab_size": v, "n_embd": d, "n_layer": l,
                            "n_head": 4, "n_positions": s, "n_inner": 100})
    assert inner.intermediate_size == 100
    assert inner.num_params() == (v + s) * d + l * (4 * d * d + 4 * d + 2 * d * 100 + 100 + d
                                                    + 4 * d) + 2 * d
    with pytest.raises(ValueError, match="add_cross_attention"):
        from_hf_config({"model_type": "gpt2", "vocab_size": v, "n_embd": d, "n_layer": l,
                        "n_head": 4, "add_cross_attention": True})


def test_gpt_oss_biases_sinks_router_bias_and_alternating_windows():
    """GptOssAttention: q, k, v, o with biases and one sink per head; GptOssExperts: E x
    (gate_up D x 2F + 2F, down F x D + D); router D x E + E; without layer_types
    GptOssConfig alternates a 128 window (sliding first)."""
    E = 4
    c = from_hf_config({**BASE, "model_type": "gpt_oss", "num_hidden_layers": 4,
                        "num_local_experts": E, "num_experts_per_tok": 2})
    attn = ATTN + H * HD + 2 * KV * HD + D + H
    moe = E * (3 * D * F + 2 * F + D) + D * E + E
    assert c.num_params() == 2 * V * D + 4 * (attn + moe + 2 * D) + D
    assert c.layer_windows == (128, None, 128, None)
    # a token goes through 2 of the 4 experts (biases included)
    assert c.num_active_params() == c.num_params() - 4 * (E - 2) * (3 * D * F + 2 * F + D)


def test_qwen2_moe_shared_expert_and_its_gate():
    """Qwen2MoeSparseMoeBlock: router D x E, E experts of moe_intermediate_size, one shared
    expert of shared_expert_intermediate_size and its sigmoid gate D -> 1; q/k/v biases."""
    E, fe, fs = 6, 32, 96
    cfg = {**BASE, "model_type": "qwen2_moe", "num_experts": E, "num_experts_per_tok": 2,
           "moe_intermediate_size": fe, "shared_expert_intermediate_size": fs}
    c = from_hf_config(cfg)
    attn = ATTN + H * HD + 2 * KV * HD
    moe = D * E + E * 3 * D * fe + 3 * D * fs + D
    assert c.num_params() == 2 * V * D + L * (attn + moe + 2 * D) + D
    # per token: 2 of 6 experts, the shared one and its gate (a D -> 1 product)
    per_layer = ATTN + D * E + 2 * 3 * D * fe + 3 * D * fs + D
    assert matmul_weights_per_token(c) == L * per_layer + V * D
    for bad, match in (({"mlp_only_layers": [0]}, "mlp_only_layers"),
                       ({"use_sliding_window": True, "sliding_window": 8},
                        "use_sliding_window")):
        with pytest.raises(ValueError, match=match):
            from_hf_config({**cfg, **bad})


def test_deepseek_v2_mla_without_router_bias():
    """DeepseekV2Attention without q_lora_rank: q_proj D x H (nope + rope); kv_a_proj_with_mqa
    D x (r + rope), kv_a_layernorm r, kv_b r x H (nope + v), o; no e_score_correction_bias."""
    r, nope, rope, v = 32, 16, 8, 16
    E, fe = 8, 32
    cfg = {**BASE, "model_type": "deepseek_v2", "q_lora_rank": None, "kv_lora_rank": r,
           "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": v,
           "n_routed_experts": E, "num_experts_per_tok": 2, "n_shared_experts": 1,
           "moe_intermediate_size": fe, "first_k_dense_replace": 1}
    c = from_hf_config(cfg)
    attn = D * H * (nope + rope) + D * (r + rope) + r + r * H * (nope + v) + H * v * D
    moe = D * E + (E + 1) * 3 * D * fe
    assert not c.router_bias
    assert c.num_params() == 2 * V * D + L * (attn + 2 * D) + 3 * D * F + 2 * moe + D
    # a config that leaves q_lora_rank out gets DeepseekV2Config's 1536
    assert from_hf_config({k: x for k, x in cfg.items() if k != "q_lora_rank"}).q_lora_rank \
        == 1536


def test_olmo2_qk_norms_over_the_whole_projection():
    """Olmo2Attention: q_norm RMSNorm(H x head_dim), k_norm RMSNorm(KV x head_dim);
    post-attention and post-feedforward norms; untied."""
    c = from_hf_config({**BASE, "model_type": "olmo2"})
    assert c.qk_norm_width == "projection"
    assert c.num_params() == 2 * V * D + L * (ATTN + (H + KV) * HD + 3 * D * F + 2 * D) + D


def test_starcoder2_layernorm_gelu_and_biases():
    """Starcoder2: q, k, v, o and c_fc, c_proj with biases (use_bias), nn.LayerNorm (weight
    and bias), tied by default; use_bias false drops every bias; its window is every layer's."""
    c = from_hf_config({**BASE, "model_type": "starcoder2", "sliding_window": 64})
    attn = ATTN + H * HD + 2 * KV * HD + D
    assert c.num_params() == V * D + L * (attn + 2 * D * F + F + D + 4 * D) + 2 * D
    assert c.layer_windows == (64,) * L
    plain = from_hf_config({**BASE, "model_type": "starcoder2", "use_bias": False,
                            "tie_word_embeddings": False})
    assert plain.num_params() == 2 * V * D + L * (ATTN + 2 * D * F + 4 * D) + 2 * D


def test_cohere_one_bias_free_norm_per_parallel_block():
    """CohereDecoderLayer: one CohereLayerNorm (weight only) feeding attention and MLP in
    parallel; tied; use_qk_norm adds CohereLayerNorm((H, head_dim)) and ((KV, head_dim))."""
    c = from_hf_config({**BASE, "model_type": "cohere"})
    assert c.norm == "layernorm_nobias" and c.norms_per_layer == 1
    assert c.num_params() == V * D + L * (ATTN + 3 * D * F + D) + D
    qk = from_hf_config({**BASE, "model_type": "cohere", "use_qk_norm": True})
    assert qk.num_params() == c.num_params() + L * (H + KV) * HD


def test_an_unsupported_model_type_lists_the_supported_ones():
    with pytest.raises(ValueError) as err:
        from_hf_config({**BASE, "model_type": "gpt_neox"})
    msg = str(err.value)
    assert "model_type 'gpt_neox' is not supported" in msg
    assert all(repr(f) in msg for f in FAMILIES) and "text_config" in msg


def test_a_model_directory_is_read_through_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "model_type": "llama"}))
    assert from_hf_config(tmp_path) == from_hf_config(str(tmp_path / "config.json"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"model directory '{empty}' has no config.json "
                                         rf"\(looked for '{empty / 'config.json'}'\)"):
        from_hf_config(str(empty))


def test_new_fields_are_checked_by_name():
    kw = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128)
    for extra, match in (({"norms_per_layer": 0}, "norms_per_layer"),
                         ({"qk_norm_width": "wide"}, "qk_norm_width"),
                         ({"attention_sinks": 1}, "attention_sinks"),
                         ({"shared_expert_gate": True}, "shared_expert_gate need"),
                         ({"mtp_trained": True}, "mtp_trained needs num_nextn_predict_layers"),
                         ({"mlp": "reglu"}, "ModelConfig.mlp"),
                         ({"norm": "batchnorm"}, "ModelConfig.norm")):
        with pytest.raises(ValueError, match=match):
            ModelConfig(**kw, **extra)


# -- DeepSeek-V3's multi-token-prediction module -------------------------------------------------
def _fp8_scales(shape) -> int:
    """weight_scale_inv elements of an FP8 matrix: one per 128 x 128 block."""
    return math.ceil(shape[0] / 128) * math.ceil(shape[1] / 128)


def test_deepseek_v3_checkpoint_total_is_the_model_plus_its_mtp_module():
    """The HF checkpoint's 684,531,386,000 elements (BF16 + F8_E4M3 + F32, data file) are the
    main model, the MTP layer 61 (its block, eh_proj, enorm, hnorm, final norm) with its own
    copies of embed_tokens and shared_head.head, and the FP8 weights' block scales; the F32
    elements are those scales and the 59 MoE layers' (58 + MTP) e_score_correction_bias."""
    c = model_preset("deepseek-v3")
    assert c.num_nextn_predict_layers == 1 and not c.mtp_trained
    H_, d, r_q, r_kv = c.num_attention_heads, c.hidden_size, c.q_lora_rank, c.kv_lora_rank
    attn = [(r_q, d), (H_ * c.head_size, r_q), (r_kv + c.qk_rope_head_dim, d),
            (H_ * (c.qk_nope_head_dim + c.v_head_dim), r_kv), (d, H_ * c.v_head_dim)]
    dense = [(c.intermediate_size, d)] * 2 + [(d, c.intermediate_size)]
    expert = [(c.moe_intermediate_size, d)] * 2 + [(d, c.moe_intermediate_size)]
    moe_layers = c.num_moe_layers + 1                                   # 58 + the MTP layer
    scales = (62 * sum(map(_fp8_scales, attn)) + 3 * sum(map(_fp8_scales, dense))
              + moe_layers * (c.num_experts + 1) * sum(map(_fp8_scales, expert)))
    copies = 2 * c.vocab_size * d
    total = 3_918_786_560 + 680_571_043_840 + 41_555_600              # BF16, F8, F32
    assert c.num_params() + c.mtp_params() + copies + scales == total == 684_531_386_000
    assert scales + moe_layers * c.num_experts == 41_555_600
    assert c.mtp_params() == 11_610_068_224


def test_training_mtp_adds_one_block_eh_proj_and_head_per_token():
    """With mtp_trained, train_flops adds 3 forwards of eh_proj (2D -> D), one more MoE block
    and the shared LM head per token, plus the block's attention; prefill, decode and the KV
    cache are unchanged (a draft for speculative decoding is not modelled)."""
    m = model_preset("deepseek-v3")
    t = dataclasses.replace(m, mtp_trained=True)
    n, d, H_ = 4096, m.hidden_size, m.num_attention_heads
    attn_w = (m.q_lora_rank * (d + H_ * m.head_size) + d * (m.kv_lora_rank + m.qk_rope_head_dim)
              + m.kv_lora_rank * H_ * (m.qk_nope_head_dim + m.v_head_dim) + H_ * m.v_head_dim * d)
    block = attn_w + d * m.num_experts + (8 + 1) * 3 * d * m.moe_intermediate_size
    per_token = 2.0 * (2 * d * d + block + m.vocab_size * d)
    attn = attention_flops_per_pair(m) / m.num_hidden_layers * n * (n + 1) / 2
    extra = 3.0 * (per_token * n + attn)
    assert train_flops(t, [n]) - train_flops(m, [n]) == pytest.approx(extra, rel=1e-12)
    assert mtp_flops(t, [n]) == pytest.approx(extra, rel=1e-12) and mtp_flops(m, [n]) == 0.0
    assert 0.040 < train_flops(t, [n]) / train_flops(m, [n]) - 1 < 0.042     # +4.1% at 4k
    recompute = train_flops(t, [n], recompute=True) - train_flops(m, [n], recompute=True)
    assert recompute == pytest.approx(extra + (2.0 * (2 * d * d + block) * n + attn),
                                      rel=1e-12)
    assert forward_flops(t, [n]) == forward_flops(m, [n])
    assert prefill_flops(t, [512]) == prefill_flops(m, [512])
    assert decode_flops(t, 512, 1000) == decode_flops(m, 512, 1000)
    assert kv_cache_bytes(t, 5000) == kv_cache_bytes(m, 5000)
    assert t.num_params() == m.num_params()


def test_estimate_update_phase_counts_a_trained_mtp_module():
    """The actor's update in estimate_rl_step adds mtp_flops for each sequence when trained."""
    from rlmperf_lite.cost import estimate_rl_step
    kw = dict(hardware="h100", prompts=4, group_size=4, prompt_len=256, response_len=256,
              gpus=256)
    m = model_preset("deepseek-v3")
    t = dataclasses.replace(m, mtp_trained=True)
    base = estimate_rl_step("grpo", actor=m, **kw).phase("actor_update").flops
    more = estimate_rl_step("grpo", actor=t, **kw).phase("actor_update").flops
    assert more - base == pytest.approx(mtp_flops(t, [512] * 16), rel=1e-9)
