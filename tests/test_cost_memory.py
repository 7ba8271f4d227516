"""Memory formulas against their papers: ZeRO's 16 bytes per parameter, Korthikanti et al.'s
activation table, vLLM's KV cache size for OPT-13B."""
import pytest

from rlmperf_lite.cost import (activation_bytes_per_layer, kv_cache_bytes_per_token,
                               model_preset, model_state_bytes)


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
    shape (h = 20480, a = 128, s = 2048) with t = 8 and b = 1."""
    model = model_preset("megatron-529.6b")
    s, b, h, a, t = 2048, 1, 20480, 128, 8
    sbh = s * b * h
    rows = {
        (1, False, "none"): sbh * (34 + 5 * a * s / h),
        (t, False, "none"): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        (t, True, "none"): sbh * (34 / t + 5 * a * s / (h * t)),
        (t, False, "selective"): sbh * (10 + 24 / t),
        (t, True, "selective"): sbh * 34 / t,
        (t, True, "full"): 2 * sbh,
    }
    for (tp, sp, rc), expected in rows.items():
        got = activation_bytes_per_layer(model, s, b, tp=tp, sp=sp, recompute=rc)
        assert got == pytest.approx(expected, rel=1e-12), (tp, sp, rc)
    # the paper's point: TP + SP + selective recompute keeps ~5x less than TP alone here
    ratio = rows[(t, False, "none")] / rows[(t, True, "selective")]
    assert 4 < ratio < 6


@pytest.mark.parametrize("kw, match", [
    ({"tp": 3}, "tp=3 must divide num_attention_heads=32"),
    ({"sp": True}, "sp=True needs tp > 1"),
    ({"recompute": "some"}, "recompute must be one of"),
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
