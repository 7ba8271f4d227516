"""Model shapes and exact parameter counts (book Chapter 4): every preset against its published
count, Megatron-LM's Eq. 2, reading real config.json files, and bad input."""
import json

import pytest

from rlmperf_lite.cost import ModelConfig, from_hf_config, model_preset, model_presets, \
    preset_record

PUBLISHED = {                      # exact counts published for the checkpoints (see data files)
    "llama-2-7b": 6_738_415_616, "llama-3.1-8b": 8_030_261_248, "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800, "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-32b": 32_763_876_352, "qwen2.5-72b": 72_706_203_648, "qwen3-8b": 8_190_735_360,
    "qwen3-30b-a3b": 30_532_122_624, "qwen3-235b-a22b": 235_093_634_560,
    "mistral-7b-v0.1": 7_241_732_096, "mixtral-8x7b-v0.1": 46_702_792_704,
    "gemma-7b": 8_537_680_896, "gemma-2-9b": 9_241_705_984, "gemma-2-27b": 27_227_128_320,
    "gemma-3-1b": 999_885_952, "phi-3-mini-4k": 3_821_079_552, "phi-4": 14_659_507_200,
    "gpt2": 124_439_808, "gpt2-xl": 1_557_611_200, "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672, "qwen1.5-moe-a2.7b": 14_315_784_192,
    "deepseek-v2-lite": 15_706_484_224, "olmo-2-1124-13b": 13_716_198_400,
    "aya-expanse-8b": 8_028_033_024,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_count_equals_the_published_exact_count(name):
    assert preset_record(name)["published_num_params"] == PUBLISHED[name]
    assert model_preset(name).num_params() == PUBLISHED[name]


def test_llama_2_7b_from_references():
    """REFERENCES.md: Llama-2-7B = 6,738,415,616 parameters."""
    assert model_preset("Llama-2-7B").num_params() == 6_738_415_616


def test_deepseek_v3_main_model_and_active_parameters():
    """DeepSeek-V3 (arXiv 2412.19437): 671B parameters, 37B activated per token. The exact
    main-model count (without the multi-token-prediction module the HF checkpoint adds, which
    makes its 685B) rounds to 671.0B; active, without the input embedding, to 36.6B as the
    weights README states."""
    c = model_preset("deepseek-v3")
    assert round(c.num_params() / 1e9, 1) == 671.0
    embedding = c.vocab_size * c.hidden_size
    assert round((c.num_active_params() - embedding) / 1e9, 1) == 36.6


def test_gpt2_checkpoint_total_adds_its_stored_causal_masks():
    """HF's gpt2 model.safetensors holds 137,022,720 F32 elements (safetensors docs, metadata
    parsing): the 124,439,808 parameters and 12 causal-mask buffers h.N.attn.bias of 1024 x
    1024, which transformers ignores on load and we do not count."""
    rec = preset_record("gpt2")
    c = rec["config"]
    assert rec["published_hf_safetensors_total"] == 137_022_720
    assert c.num_params() + c.num_hidden_layers * 1024 * 1024 == 137_022_720


def test_gemma_3_12b_counts_the_language_model_of_the_multimodal_checkpoint():
    """Keras-hub publishes Gemma-3-12B's text model (vocabulary 262,144) at 11,765,788,416 and
    text + vision at 12,187,079,280; HF's text_config has 64 more vocabulary rows and its
    checkpoint totals 12,187,325,040. Our language model is Keras's plus 64 x 3840, and what
    the HF checkpoint adds to it is exactly Keras's vision tower and projector."""
    rec = preset_record("gemma-3-12b")
    c = rec["config"]
    assert c.vocab_size == 262_208 and c.num_hidden_layers == 48 and c.qk_norm
    assert c.num_params() == rec["published_keras_text_num_params"] + 64 * 3840
    vision = rec["published_keras_vision_text_num_params"] - rec["published_keras_text_num_params"]
    assert rec["published_hf_safetensors_total"] - c.num_params() == vision == 421_290_864


def test_rounded_only_presets_round_to_their_published_figures():
    """Command-R v01: '35 billion parameters' (model card), no exact count published.
    gpt-oss model card (arXiv 2508.10925) Table 1: 20.91B / 116.83B total, 3.61B / 5.13B
    active, the active figures without the input embedding."""
    assert preset_record("c4ai-command-r-v01")["published_num_params"] is None
    assert round(model_preset("c4ai-command-r-v01").num_params() / 1e9) == 35
    for name, total, active in (("gpt-oss-20b", 20.91, 3.61), ("gpt-oss-120b", 116.83, 5.13)):
        c = model_preset(name)
        assert round(c.num_params() / 1e9, 2) == total
        assert round((c.num_active_params() - c.vocab_size * c.hidden_size) / 1e9, 2) == active


def test_moe_active_parameters_match_the_model_names():
    """Model cards: Qwen3-30B-A3B activates 3.3B, Qwen3-235B-A22B 22B, Mixtral 8x7B 12.9B."""
    assert 3.3e9 <= model_preset("qwen3-30b-a3b").num_active_params() < 3.4e9      # 3.35B
    assert round(model_preset("qwen3-235b-a22b").num_active_params() / 1e9) == 22
    assert round(model_preset("mixtral-8x7b-v0.1").num_active_params() / 1e9, 1) == 12.9
    # Qwen1.5-MoE-A2.7B: 2.7B activated; DeepSeek-V2-Lite: 2.4B activated (arXiv 2405.04434),
    # the latter without the input embedding as DeepSeek counts
    assert round(model_preset("qwen1.5-moe-a2.7b").num_active_params() / 1e9, 1) == 2.7
    lite = model_preset("deepseek-v2-lite")
    assert 2.4e9 <= lite.num_active_params() - lite.vocab_size * lite.hidden_size < 2.5e9


@pytest.mark.parametrize("name", [n for n in model_presets() if n.startswith(("megatron", "gpt3"))])
def test_gpt_family_follows_megatron_eq2_and_rounds_to_the_table(name):
    """Narayanan et al. 2021 (arXiv 2104.04473), Eq. 2: P = 12 l h^2 (1 + 13/(12 h) +
    (V + s)/(12 l h)); our count adds only the final LayerNorm (2 h) that Eq. 2 leaves out.
    Each model rounds to its Table 1 size (GPT-3: Brown et al. 2020, Table D.1)."""
    rec = preset_record(name)
    c = rec["config"]
    n_l, h, V, s = c.num_hidden_layers, c.hidden_size, c.vocab_size, c.max_position_embeddings
    eq2 = 12 * n_l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * n_l * h))
    assert c.num_params() == pytest.approx(eq2 + 2 * h, rel=1e-12)
    assert round(c.num_params() / 1e9, 1) == rec["published_params_billion"]


def test_breakdown_sums_to_the_total_and_names_components():
    c = model_preset("deepseek-v3")
    b = c.param_breakdown()
    assert sum(b.values()) == c.num_params()
    assert b["routed_experts"] > 0.9 * c.num_params()        # most of a MoE is its experts
    assert model_preset("llama-2-7b").param_breakdown()["routed_experts"] == 0


def test_from_hf_config_reads_a_file_and_implies_what_the_file_omits(tmp_path):
    rec = preset_record("qwen2.5-7b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**rec["hf_config"], "rope_scaling": None, "use_cache": True}))
    c = ModelConfig.from_hf_config(str(path))
    assert c.qkv_bias and c.num_params() == PUBLISHED["qwen2.5-7b"]   # biases not in the file
    plain = {**rec["hf_config"], "model_type": "llama"}                 # same sizes, no biases
    assert from_hf_config(plain).num_params() == PUBLISHED["qwen2.5-7b"] - 28 * (3584 + 2 * 512)


@pytest.mark.parametrize("config, match", [
    ({"model_type": "gpt_neox"}, "model_type 'gpt_neox' is not supported"),
    ({"model_type": "llama", "hidden_size": 64}, "lacks 'vocab_size'"),
    ({"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 5, "intermediate_size": 128}, "num_attention_heads=5 must divide"),
    ({"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128},
     "num_key_value_heads=3 must divide"),
    ({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 128, "num_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "mlp_only_layers": [0]},
     "mlp_only_layers"),
    ("/no/such/config.json", "is not a file"),
    (42, "must be a dict or a path"),
])
def test_bad_configs_raise_a_named_value_error(config, match):
    with pytest.raises(ValueError, match=match):
        from_hf_config(config)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown model preset 'llama-9'.*llama-2-7b"):
        model_preset("llama-9")


def test_review_bad_inputs(tmp_path):
    from rlmperf_lite.cost import HardwareSpec, forward_depth, hardware_preset, mfu, train_flops
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    calls = [
        (lambda: from_hf_config(str(path)), "holds a list"),
        (lambda: from_hf_config({"model_type": ["llama"]}), "is not supported"),
        (lambda: model_preset(["x"]), "must be a string"),
        (lambda: hardware_preset({}), "must be a string"),
        (lambda: forward_depth("llama-2-7b", 10), "model must be a ModelConfig"),
        (lambda: forward_depth(model_preset("llama-2-7b"), 0), "n must be an int >= 1"),
        (lambda: HardwareSpec("x", {"bf16": 1e12}, 1e9, 0.0), "hbm_bandwidth_bytes_per_s"),
        (lambda: HardwareSpec("x", {"bf16": "fast"}, 1e9, 1e9), "peak_flops"),
        (lambda: train_flops(model_preset("llama-2-7b"), 10, recompute="none"),
         "recompute must be True or False"),
        (lambda: ModelConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16,
                             tie_word_embeddings="false"), "tie_word_embeddings"),
        (lambda: ModelConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16,
                             num_experts_per_tok=2), "need num_experts > 0"),
        (lambda: mfu(1e18, 1.0, hardware_preset("h100")), "is 1.01e\\+03x the peak"),
    ]
    for call, match in calls:
        with pytest.raises(ValueError, match=match):
            call()


SMALL = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128)


@pytest.mark.parametrize("fields, match", [
    ({"vocab_size": 10**30}, r"ModelConfig\.vocab_size must be an int in \[1, 1,000,000,000\], "
                             r"got an int of about 10\^30"),
    ({"num_hidden_layers": 10**20}, r"ModelConfig\.num_hidden_layers must be an int in "
                                    r"\[1, 10,000\], got 100000000000000000000"),
    ({"vocab_size": 10**5000}, r"got an int of about 10\^5000"),      # no 4,300-digit repr
    ({"max_position_embeddings": 10**9}, r"ModelConfig\.max_position_embeddings must be an int "
                                         r"in \[1, 100,000,000\]"),
    ({"vocab_size": 10**9, "hidden_size": 10**9},
     r"ModelConfig has 1e\+19 parameters, above the 1e\+15 this cost model accepts \(its "
     r"attention: num_hidden_layers x hidden_size x num_attention_heads\)"),
])
def test_absurd_sizes_are_refused_naming_the_field(fields, match):
    """Issue 18: a parameter count past 2^63 ended in an OverflowError deep in the roofline
    (vocab 1e30, 1e20 layers, vocab 1e12 x hidden 1e9); each bound names its field."""
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**SMALL, **fields})


def test_the_largest_published_models_are_far_inside_the_bounds():
    """DeepSeek-V3 (6.7e11 parameters) and Megatron's 1T are over 1,000x below 1e15."""
    for name in ("deepseek-v3", "megatron-1008b", "llama-3.1-405b"):
        assert model_preset(name).num_params() < 1e15 / 900


@pytest.mark.parametrize("raw, match", [
    (b"[" * 100_000 + b"]" * 100_000, "nests arrays or objects too deeply to read"),
    (json.dumps({"model_type": "llama"}).encode("utf-16"), r"is UTF-16 \(or UTF-32\) text; save "
                                                          "it as UTF-8"),
    (b'{"model_type": "llama", "_name_or_path": "caf\xe9"}',
     r"is not UTF-8 text \(byte 45: invalid continuation byte\); save it as UTF-8"),
    (b'{"model_type": "llama", "vocab_size": ' + b"9" * 5000 + b"}",
     r"holds a number too long to read \(over 4,300 digits\); no config field is that large"),
    (b'{"model_type": "llama",', "is not valid JSON: Expecting"),
    (b'{"model_type": "mistral", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": '
     b'100000000000000000000, "num_attention_heads": 2, "intermediate_size": 16, '
     b'"sliding_window": 4, "sliding_window_pattern": 2}',
     r"config\.json num_hidden_layers must be an int in \[1, 10,000\]"),   # before a 1e20 list
])
def test_a_bad_config_file_is_a_value_error_naming_the_file(tmp_path, raw, match):
    """Issue 18: a 100,000-deep file raised RecursionError; a UTF-16 or Latin-1 file, the
    codec's message; a 5,000-digit integer, Python's set_int_max_str_digits advice."""
    path = tmp_path / "config.json"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=rf"^config file {str(path)!r}:? .*{match}"):
        from_hf_config(str(path))


def test_a_file_whose_fields_are_wrong_is_named_too(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", **SMALL, "num_attention_heads": 5}))
    with pytest.raises(ValueError, match=rf"^config file {str(path)!r}: ModelConfig\."
                                         r"num_attention_heads=5 must divide hidden_size=64"):
        from_hf_config(str(path))
