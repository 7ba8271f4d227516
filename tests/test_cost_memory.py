"""Memory formulas against their papers: ZeRO's 16 bytes per parameter, Korthikanti et al.'s
activation table (and FlashAttention's logsumexp in place of its scores), Megatron-LM's
estimator, the toy model's own cache counted byte by byte, vLLM's KV cache size for OPT-13B."""
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, activation_bytes_per_layer, kv_cache_bytes_per_token,
                               model_preset, model_state_bytes)
from rlmperf_lite.cost.memory import lm_head_activation_bytes
from rlmperf_lite.nn import TinyLMConfig, block_forward, init_params


def test_zero_fig1_baseline():
    """Rajbhandari et al. 2020 (ZeRO), Fig. 1: 7.5B parameters with mixed-precision Adam take
    120 GB of model states without partitioning."""
    assert model_state_bytes(7.5e9) == 120e9
    assert model_state_bytes(7.5e9, trainable=False) == 15e9          # bf16 weights only


def test_vllm_opt_13b_kv_cache_per_token():
    """Kwon et al. 2023 (vLLM), §3: OPT-13B's KV cache is 800 KB per token in fp16:
    2 (K, V) x 5120 (hidden) x 40 (layers) x 2 bytes = 819,200 bytes."""
    assert kv_cache_bytes_per_token(model_preset("opt-13b")) == 819_200


def test_gqa_and_mla_shrink_the_cache():
    llama2, llama3 = model_preset("llama-2-7b"), model_preset("llama-3.1-8b")
    assert kv_cache_bytes_per_token(llama2) == 2 * 32 * 4096 * 2            # MHA: 512 KiB
    assert kv_cache_bytes_per_token(llama3) == 2 * 32 * 8 * 128 * 2        # 8 KV heads: 4x less
    assert kv_cache_bytes_per_token(model_preset("deepseek-v3")) == 61 * (512 + 64) * 2


def test_korthikanti_table2_rows():
    """Korthikanti et al. 2022 (arXiv 2205.05198), Table 2, per layer, for their 530B model
    shape (h = 20480, a = 128, s = 2048) with t = 8 and b = 1: the eager layout (stored
    scores, dropout masks, no norm statistics) reproduces 34 and 5 a s / h exactly."""
    model = model_preset("megatron-529.6b")
    s, b, h, a, t = 2048, 1, 20480, 128, 8
    sbh = s * b * h
    rows = {
        (1, False, "none"): sbh * (34 + 5 * a * s / h),
        (t, False, "none"): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        (t, True, "none"): sbh * (34 / t + 5 * a * s / (h * t)),
        (t, False, "selective"): sbh * (10 + 24 / t),
        (t, True, "selective"): sbh * 34 / t,
        (t, False, "full"): 2 * sbh,
        (t, True, "full"): 2 * sbh / t,      # the layer input, sharded along s under SP
    }
    for (tp, sp, rc), expected in rows.items():
        got = activation_bytes_per_layer(model, s, b, tp=tp, sp=sp, recompute=rc,
                                         attention="eager", dropout=True)
        assert got == pytest.approx(expected, rel=1e-12), (tp, sp, rc)
    # the paper's point: TP + SP + selective recompute keeps ~5x less than TP alone here
    ratio = rows[(t, False, "none")] / rows[(t, True, "selective")]
    assert 4 < ratio < 6


def test_flash_attention_keeps_a_logsumexp_not_the_scores():
    """FlashAttention (Dao et al. 2022, arXiv 2205.14135, Alg. 2; FA2 arXiv 2307.08691)
    keeps Q, K, V, O and one fp32 logsumexp per query row and head, 4 a s b bytes, in place
    of Korthikanti's 5 a s^2 b; flash drops its dropout mask too (it regenerates it)."""
    model = model_preset("megatron-529.6b")
    s, b, h, a, t = 2048, 1, 20480, 128, 8
    sbh = s * b * h
    for tp, sp in [(1, False), (t, False), (t, True)]:
        eager = activation_bytes_per_layer(model, s, b, tp=tp, sp=sp, attention="eager",
                                           dropout=True)
        flash = activation_bytes_per_layer(model, s, b, tp=tp, sp=sp, dropout=True)
        assert eager - flash == pytest.approx((5 * a * s * s * b - 4 * a * s * b) / tp)
    # without dropout (the default): Table 2's rows less the two 1-byte masks, 2 s b h
    flash = activation_bytes_per_layer(model, s, b, tp=t, sp=True)
    assert flash == pytest.approx(sbh * (32 / t + 4 * a / (h * t)))
    selective = activation_bytes_per_layer(model, s, b, tp=t, sp=True, recompute="selective")
    assert selective == pytest.approx(sbh * 32 / t)


def test_megatron_estimator_for_other_mlp_widths():
    """Megatron-LM ``theoretical_memory_usage.compute_activation_memory`` (sequence parallel,
    selective recompute): s b h (18 + 4 f / h) / t per layer for a GELU MLP of width f."""
    s, b, h, t = 4096, 2, 1024, 4
    for f in (2048, 3072, 4096, 5000):
        m = ModelConfig(vocab_size=1000, hidden_size=h, num_hidden_layers=2,
                        num_attention_heads=16, intermediate_size=f, mlp="gelu")
        got = activation_bytes_per_layer(m, s, b, tp=t, sp=True, recompute="selective",
                                         attention="eager", dropout=True)
        assert got == pytest.approx(s * b * h * (18 + 4 * f / h) / t, rel=1e-12)


def test_swiglu_and_grouped_query_attention():
    """Korthikanti's bookkeeping (2 bytes a value, units of s b h): a fused SwiGLU keeps its
    gate and up outputs and their product, 6 f / h (GELU: 4 f / h); GQA keeps K and V of
    n_kv heads, 4 n_kv / a instead of 4. Qwen2.5-7B (f / h = 5.29, 4 of 28 KV heads): the
    library's old 34 was about a quarter too low (issue 16's expert readers)."""
    q = model_preset("qwen2.5-7b")
    s, b, h, f, a = 4096, 1, q.hidden_size, q.intermediate_size, q.num_attention_heads
    sbh, kw = s * b * h, {"recompute": "selective", "dropout": True}
    gelu = replace(q, mlp="gelu")
    mha = replace(q, num_key_value_heads=None)
    qwen = activation_bytes_per_layer(q, s, b, **kw)
    assert qwen - activation_bytes_per_layer(gelu, s, b, **kw) == pytest.approx(sbh * 2 * f / h)
    assert activation_bytes_per_layer(mha, s, b, **kw) - qwen == pytest.approx(
        sbh * 4 * (a - q.kv_heads) / a)
    assert 0.7 < 34 * sbh / qwen < 0.8
    unfused = activation_bytes_per_layer(q, s, b, mlp_arrays=4, **kw)   # + silu(gate)
    assert unfused - qwen == pytest.approx(sbh * 2 * f / h)


def test_moe_keeps_its_top_k_experts():
    """A MoE layer keeps, per token, its k experts' f-wide arrays and each routed copy's input
    and output (2 h), plus the router's E fp32 scores; the dense first layers their own MLP
    (mean over layers). Qwen3-30B-A3B: 128 experts, 8 per token, f_e = 768."""
    m = model_preset("qwen3-30b-a3b")
    s, k, fe, h = 1024, m.num_experts_per_tok, m.moe_intermediate_size, m.hidden_size
    dense = replace(m, num_experts=0, num_experts_per_tok=0, moe_intermediate_size=None,
                    intermediate_size=k * fe)
    moe = activation_bytes_per_layer(m, s, 1, recompute="selective")
    same_width = activation_bytes_per_layer(dense, s, 1, recompute="selective")
    assert moe - same_width == pytest.approx(s * (k * 2 * 2 * h + 4 * m.num_experts))


def test_toy_model_cache_byte_for_byte():
    """The formula, with the toy's layout (fp32 or fp64 values, no dropout, RMSNorm keeping
    its normalised input and 1/rms, eager attention keeping the softmax, GELU in tanh form
    keeping tanh too), equals the bytes of the arrays one block's forward caches for its
    backward (rlmperf_lite.nn.block_forward), views counted once, weights excluded."""
    for activation, mlp_arrays in (("relu", None), ("gelu", 3)):
        cfg = TinyLMConfig(vocab_size=14, max_seq_len=16, hidden_size=32, num_layers=2,
                           num_heads=4, intermediate_size=48, activation=activation)
        for dtype, value_bytes in ((np.float32, 4), (np.float64, 8)):
            params = init_params(cfg, np.random.default_rng(0), dtype=dtype)
            n, T = 3, 12
            x = np.random.default_rng(1).standard_normal((n, T, cfg.hidden_size)).astype(dtype)
            _, cache = block_forward(params, 0, x, cfg)
            expected = activation_bytes_per_layer(
                ModelConfig.from_tiny_lm(cfg), T, n, attention="eager", norm_stats=True,
                value_bytes=value_bytes, mlp_arrays=mlp_arrays)
            assert _kept_bytes(cache, params) == expected, (activation, dtype)


def _kept_bytes(cache, params) -> int:
    """Bytes of the distinct arrays a cache holds (a view counts as its base), weights out."""
    weights, roots = {id(p) for p in params.values()}, {}

    def walk(obj):
        if isinstance(obj, np.ndarray):
            root = obj
            while isinstance(root.base, np.ndarray):
                root = root.base
            if id(obj) not in weights and id(root) not in weights:
                roots[id(root)] = root.nbytes
        elif isinstance(obj, (tuple, list)):
            for item in obj:
                walk(item)

    walk(cache)
    return sum(roots.values())


def test_lm_head_logits():
    """fp32 logits of 32,768 tokens of Qwen2.5-7B's vocabulary (152,064): 4 s V = 19.9 GB,
    plus a logsumexp per token and the final norm's and head's bf16 inputs (2 + 2) s b h;
    Megatron-LM's estimator counts the same head as 4 s b h (1 + V / h) / t with SP. Chunked:
    one chunk's fp32 logits (verl's FusedLinearForPPO: 512 tokens by default)."""
    q, s = model_preset("qwen2.5-7b"), 32768
    h, V = q.hidden_size, q.vocab_size
    fp32 = lm_head_activation_bytes(q, s, 1)
    assert fp32 - 4 * s * h - 4 * s == 4 * s * V
    assert round(4 * s * V / 1e9, 1) == 19.9
    megatron = s * h * 4 * (1 + V / h) / 8
    assert lm_head_activation_bytes(q, s, 1, tp=8, sp=True) - 4 * s == pytest.approx(megatron)
    chunked = lm_head_activation_bytes(q, s, 1, logits="chunked")
    assert chunked == 4 * s * h + 4 * 512 * V
    assert lm_head_activation_bytes(q, 256, 1, logits="chunked") == 4 * 256 * h + 4 * 256 * V
    with pytest.raises(ValueError, match="logits must be one of"):
        lm_head_activation_bytes(q, s, 1, logits="bf16")


@pytest.mark.parametrize("kw, match", [
    ({"tp": 3}, "tp=3 must divide num_attention_heads=32"),
    ({"sp": True}, "sp=True needs tp > 1"),
    ({"recompute": "some"}, "recompute must be one of"),
    ({"attention": "sdpa"}, "attention must be one of"),
    ({"value_bytes": 0}, "value_bytes"),
    ({"mlp_arrays": 0}, "mlp_arrays"),
    ({"dropout": 1}, "dropout must be True or False"),
    ({"seq_len": 0}, "seq_len"),
])
def test_bad_activation_arguments_are_named(kw, match):
    args = {"seq_len": 1024, "micro_batch": 1, **kw}
    with pytest.raises(ValueError, match=match):
        activation_bytes_per_layer(model_preset("llama-2-7b"), **args)
    with pytest.raises(ValueError, match="num_params"):
        model_state_bytes(-1)
    with pytest.raises(ValueError, match="model must be a ModelConfig"):
        kv_cache_bytes_per_token("opt-13b")


# ---- max_kv_sequences: the decode batch the KV cache allows -----------------------------------

def test_max_kv_sequences_matches_a_count_by_hand():
    """Qwen2.5-7B (28 layers, 4 KV heads of 128: 57,344 bf16 bytes a token; 7,615,616,512
    parameters) on an 80 GB H100 at vLLM's gpu_memory_utilization 0.9, 512 + 4,096 tokens."""
    from rlmperf_lite.cost import hardware_preset, max_kv_sequences, model_preset
    qwen, h100 = model_preset("qwen2.5-7b"), hardware_preset("h100")
    per_token = 2 * 28 * 4 * 128 * 2
    by_hand = (0.9 * 80e9 - 2 * 7_615_616_512) / (4608 * per_token)            # 214.8
    assert max_kv_sequences(qwen, h100, 4608, memory_utilization=0.9) == int(by_hand) == 214
    # tp = 2: half the weights per GPU, and the 4 KV heads split two ways
    tp2 = (0.9 * 80e9 - 7_615_616_512) / (4608 * per_token / 2)                  # 487.3
    assert max_kv_sequences(qwen, h100, 4608, memory_utilization=0.9, tp=2) == int(tp2)
    # 70B's 141 GB of bf16 weights leave no room on one GPU
    assert max_kv_sequences(model_preset("llama-3.1-70b"), h100, 4608,
                            memory_utilization=0.9) == 0


def test_max_kv_sequences_is_the_largest_batch_within_the_budget():
    from rlmperf_lite.cost import (hardware_preset, kv_cache_bytes, max_kv_sequences,
                                   model_preset)
    h100 = hardware_preset("h100")
    for name in ("qwen2.5-7b", "llama-3.1-8b", "deepseek-v3"):
        m = model_preset(name)
        for context, tp in ((1024, 1), (8192, 8), (32768, 8)):
            n = max_kv_sequences(m, h100, context, memory_utilization=0.9, tp=tp)
            budget = 0.9 * h100.hbm_bytes - 2 * m.num_params() / tp
            per = kv_cache_bytes(m, context) / (1 if m.is_mla else min(tp, m.kv_heads))
            assert n * per <= max(budget, 0) < (n + 1) * per or (n == 0 and budget < per)


@pytest.mark.parametrize("kwargs, match", [
    (dict(context=0), "context"), (dict(memory_utilization=0.0), "memory_utilization"),
    (dict(memory_utilization=1.5), "memory_utilization"), (dict(tp=0), "tp"),
    (dict(hw="h100"), "hw must be a HardwareSpec")])
def test_max_kv_sequences_bad_inputs_name_the_parameter(kwargs, match):
    from rlmperf_lite.cost import hardware_preset, max_kv_sequences, model_preset
    args = dict(model=model_preset("qwen2.5-7b"), hw=hardware_preset("h100"), context=4608,
                memory_utilization=0.9)
    with pytest.raises(ValueError, match=match):
        max_kv_sequences(**{**args, **kwargs})
