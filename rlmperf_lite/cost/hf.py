"""Read a Hugging Face ``config.json`` into a :class:`ModelConfig` (book section
:ref:`sec-model-params`).

A config file states sizes but not everything the architecture implies: Qwen2's q/k/v biases,
Qwen3's q/k norms, OPT's two extra position rows, DeepSeek-V3's router bias, Gemma's GeGLU and
four norms per layer, gpt-oss's attention sinks and expert biases are in the modelling code,
not in the file. ``model_type`` names the architecture, and :data:`~rlmperf_lite.cost.hf.FAMILIES` holds what each
one implies; a field the file leaves out takes its configuration class's default (e.g. Gemma-3's
vocabulary of 262,208, gpt-oss's window of 128). Fields the cost model does not need (rope
scaling, dropout, soft-capping, token ids, quantisation...) are ignored. Sliding-window
attention is read from ``sliding_window``, ``layer_types``, ``sliding_window_pattern``,
``use_sliding_window`` and ``max_window_layers`` as transformers' configuration classes read
them (Gemma-2 and gpt-oss alternate, sliding first; Gemma-3 has five local layers to one
global). A multimodal wrapper (``text_config``, e.g. Gemma-3 12B) is read as its language
model: the vision tower and projector are not costed.
"""
from __future__ import annotations

import json
import os
import sys

from ..checks import check_int
from .model import MAX_LAYERS, ModelConfig

__all__ = ["from_hf_config", "FAMILIES"]

_LLAMA = {"mlp": "swiglu", "position": "rope", "norm": "rmsnorm"}
_GEMMA = {**_LLAMA, "mlp": "geglu"}
FAMILIES = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": {**_LLAMA, "qkv_bias": True},
    "qwen3": {**_LLAMA, "qk_norm": True},
    "mixtral": _LLAMA,
    "qwen3_moe": {**_LLAMA, "qk_norm": True},
    "deepseek_v3": {**_LLAMA, "router_bias": True},
    "opt": {"mlp": "relu", "position": "learned", "norm": "layernorm", "attention_bias": True,
            "mlp_bias": True, "position_offset": 2, "tie_word_embeddings": True},
    "gemma": _GEMMA,
    "gemma2": {**_GEMMA, "norms_per_layer": 4},
    "gemma3_text": {**_GEMMA, "norms_per_layer": 4, "qk_norm": True},
    "phi3": _LLAMA,
    "gpt2": {"mlp": "gelu", "position": "learned", "norm": "layernorm", "attention_bias": True,
             "mlp_bias": True},
    "gpt_oss": {**_LLAMA, "attention_sinks": True, "router_bias": True, "mlp_bias": True},
    "qwen2_moe": _LLAMA,
    "deepseek_v2": _LLAMA,
    "olmo2": {**_LLAMA, "qk_norm": True, "qk_norm_width": "projection"},
    "starcoder2": {"mlp": "gelu", "position": "rope", "norm": "layernorm"},
    "cohere": {**_LLAMA, "norm": "layernorm_nobias", "norms_per_layer": 1},
}
"""What each supported ``model_type`` implies beyond its config.json."""

# configuration-class defaults of fields a config.json may leave out (transformers'
# Gemma2Config, Gemma3TextConfig, GptOssConfig, ...); a field the file gives wins
_DEFAULTS = {
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True, "sliding_window": 4096,
               "sliding_window_pattern": 2},
    "gemma3_text": {"tie_word_embeddings": True, "vocab_size": 262208, "head_dim": 256,
                    "max_position_embeddings": 131072, "sliding_window": 4096,
                    "sliding_window_pattern": 6},
    "gpt2": {"tie_word_embeddings": True, "n_positions": 1024},
    "gpt_oss": {"attention_bias": True, "sliding_window": 128, "sliding_window_pattern": 2},
    "qwen2_moe": {"qkv_bias": True},
    "deepseek_v2": {"q_lora_rank": 1536},
    "starcoder2": {"tie_word_embeddings": True, "use_bias": True},
    "cohere": {"tie_word_embeddings": True},
}
_TEXT_MODEL_TYPES = {"gemma3": "gemma3_text"}   # a wrapper's text_config without model_type

_COMMON = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "intermediate_size", "tie_word_embeddings",
           "max_position_embeddings", "attention_bias", "mlp_bias")


def _load(config) -> dict:
    if isinstance(config, (str, os.PathLike)):
        if not os.path.isfile(config):
            raise ValueError(f"config path {str(config)!r} is not a file; give a config.json "
                             "path or a dict")
        return _read_json(str(config))
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict or a path to config.json, got "
                         f"{type(config).__name__}")
    return config


def _read_json(path: str):
    """The JSON value in the file at ``path`` (UTF-8, as RFC 8259 requires), or a ValueError
    naming the file and what is wrong with it."""
    bad = f"config file {path!r}"
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        raise ValueError(f"{bad} cannot be read ({err.strerror or err})") from None
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:4]:   # a UTF-16 BOM or NULs
        raise ValueError(f"{bad} is UTF-16 (or UTF-32) text; save it as UTF-8, as Hugging Face "
                         "does")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{bad} is not UTF-8 text (byte {err.start}: {err.reason}); save it as "
                         "UTF-8") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{bad} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"{bad} nests arrays or objects too deeply to read; a config.json is "
                         "a flat object of fields") from None
    except ValueError:                              # int(): over sys.get_int_max_str_digits()
        raise ValueError(f"{bad} holds a number too long to read (over "
                         f"{sys.get_int_max_str_digits():,} digits); no config field is that "
                         "large") from None


def _loaded(config) -> dict:
    c = _load(config)
    if not isinstance(c, dict):
        raise ValueError(f"config file {str(config)!r} holds a {type(c).__name__}, not a "
                         "config.json object")
    return c


def _need(c: dict, key: str, model_type: str):
    if c.get(key) is None:
        raise ValueError(f"config.json of model_type {model_type!r} lacks {key!r}")
    return c[key]


def _config_path(config):
    """A model directory's ``config.json``; anything else as given."""
    if isinstance(config, (str, os.PathLike)) and os.path.isdir(config):
        path = os.path.join(config, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"model directory {str(config)!r} has no config.json (looked for "
                             f"{path!r}); give a Hugging Face model directory or a config.json "
                             "path")
        return path
    return config


def _text_model(c: dict) -> dict:
    """A multimodal wrapper's language model (its ``text_config``), the wrapper's
    ``tie_word_embeddings``, ``vocab_size`` and name filling what the text config leaves out;
    any other config as given."""
    text, mt = c.get("text_config"), c.get("model_type")
    if (isinstance(mt, str) and mt in FAMILIES) or not isinstance(text, dict):
        return c
    out = dict(text)
    out.setdefault("model_type", _TEXT_MODEL_TYPES.get(mt))
    for key in ("tie_word_embeddings", "vocab_size", "_name_or_path"):
        if key not in out and key in c:
            out[key] = c[key]
    return out


def from_hf_config(config, *, name: str | None = None) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face config: a dict, a path to ``config.json``,
    or a model directory holding one.

    Supported ``model_type`` (:data:`~rlmperf_lite.cost.hf.FAMILIES`): llama, mistral, qwen2, qwen3, mixtral,
    qwen3_moe, deepseek_v2, deepseek_v3, opt, gemma, gemma2, gemma3_text, phi3 (Phi-3, Phi-4),
    gpt2, gpt_oss, qwen2_moe, olmo2, starcoder2, cohere; and a multimodal wrapper whose
    ``text_config`` is one of these (e.g. gemma3), read as its language model only.

    Raises:
        ValueError: an unreadable file, a directory without config.json, an unsupported
            ``model_type``, a missing required field (named), or a layout the cost model does
            not represent (e.g. Qwen3-MoE with ``mlp_only_layers``), and any
            :class:`ModelConfig` check; from a file, each names the file.
    """
    path = _config_path(config)
    c = _text_model(_loaded(path))
    if isinstance(config, dict):
        return _from_dict(c, name)
    try:
        return _from_dict(c, name)
    except ValueError as err:
        raise ValueError(f"config file {str(path)!r}: {err}") from None


def _from_dict(c: dict, name: str | None) -> ModelConfig:
    """The body of :func:`from_hf_config`, on a loaded config."""
    mt = c.get("model_type")
    if not isinstance(mt, str) or mt not in FAMILIES:
        raise ValueError(f"model_type {mt!r} is not supported; supported: {sorted(FAMILIES)} "
                         "(or a multimodal config whose text_config is one of them)")
    c = {**_DEFAULTS.get(mt, {}), **c}
    kw = {k: c[k] for k in _COMMON if c.get(k) is not None}
    kw.update(FAMILIES[mt])
    if mt in _FAMILY_FIELDS:
        _FAMILY_FIELDS[mt](c, mt, kw)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size"):
        if key not in kw:
            _need(c, key, mt)
    # before a per-layer list of num_hidden_layers entries is built
    check_int("config.json num_hidden_layers", kw["num_hidden_layers"], 1, high=MAX_LAYERS)
    kw.update(_attention_windows(c, kw["num_hidden_layers"]))
    return ModelConfig(**kw, name=name or c.get("_name_or_path") or mt)


def _opt(c: dict, mt: str, kw: dict) -> None:
    kw["intermediate_size"] = _need(c, "ffn_dim", mt)
    kw["tie_word_embeddings"] = c.get("tie_word_embeddings", True)
    kw["attention_bias"] = kw["mlp_bias"] = c.get("enable_bias", True)
    # do_layer_norm_before=False (post-norm, OPT-350M) has the same weights: same count
    if c.get("word_embed_proj_dim", c.get("hidden_size")) != c.get("hidden_size"):
        raise ValueError("OPT with word_embed_proj_dim != hidden_size (project_in/out, as "
                         "OPT-350M) is not represented")


def _gpt2(c: dict, mt: str, kw: dict) -> None:
    # GPT2Config's own names; Conv1D c_attn holds q, k, v (and their biases) in one matrix
    if c.get("add_cross_attention"):
        raise ValueError("GPT-2 with add_cross_attention (an encoder-decoder's extra "
                         "attention) is not represented")
    d = _need(c, "n_embd", mt)
    kw.update(hidden_size=d, num_hidden_layers=_need(c, "n_layer", mt),
              num_attention_heads=_need(c, "n_head", mt),
              intermediate_size=c.get("n_inner") or 4 * d,
              max_position_embeddings=_need(c, "n_positions", mt))


def _mixtral(c: dict, mt: str, kw: dict) -> None:
    kw.update(num_experts=_need(c, "num_local_experts", mt),
              num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
              moe_intermediate_size=_need(c, "intermediate_size", mt))


def _qwen3_moe(c: dict, mt: str, kw: dict) -> None:
    if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
        raise ValueError(f"{mt} with mlp_only_layers or decoder_sparse_step != 1 is not "
                         "represented (only all-MoE layer stacks)")
    kw.update(num_experts=_need(c, "num_experts", mt),
              num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
              moe_intermediate_size=_need(c, "moe_intermediate_size", mt))


def _qwen2_moe(c: dict, mt: str, kw: dict) -> None:
    # Qwen2MoeSparseMoeBlock: 60 routed experts and one shared expert of its own width,
    # scaled by sigmoid(shared_expert_gate(x)), a D -> 1 projection
    if c.get("use_sliding_window"):
        raise ValueError("Qwen2-MoE with use_sliding_window=true is not represented")
    _qwen3_moe(c, mt, kw)
    kw["qkv_bias"] = c["qkv_bias"]
    shared = _need(c, "shared_expert_intermediate_size", mt)
    if shared:
        kw.update(num_shared_experts=1, shared_expert_intermediate_size=shared,
                  shared_expert_gate=True)


def _gpt_oss(c: dict, mt: str, kw: dict) -> None:
    # GptOssExperts: fused gate_up (E, D, 2F) and down (E, F, D) with their biases
    kw.update(num_experts=_need(c, "num_local_experts", mt),
              num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
              moe_intermediate_size=_need(c, "intermediate_size", mt))


def _deepseek(c: dict, mt: str, kw: dict) -> None:
    if c.get("moe_layer_freq", 1) != 1:
        raise ValueError(f"{mt} with moe_layer_freq != 1 is not represented")
    kw.update(num_experts=_need(c, "n_routed_experts", mt),
              num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
              num_shared_experts=c.get("n_shared_experts") or 0,
              moe_intermediate_size=_need(c, "moe_intermediate_size", mt),
              first_k_dense_replace=c.get("first_k_dense_replace", 0),
              q_lora_rank=c.get("q_lora_rank"), kv_lora_rank=_need(c, "kv_lora_rank", mt),
              qk_rope_head_dim=_need(c, "qk_rope_head_dim", mt),
              qk_nope_head_dim=_need(c, "qk_nope_head_dim", mt),
              v_head_dim=_need(c, "v_head_dim", mt),
              num_nextn_predict_layers=c.get("num_nextn_predict_layers") or 0)
    kw.pop("head_dim", None)


def _starcoder2(c: dict, mt: str, kw: dict) -> None:
    kw["attention_bias"] = kw["mlp_bias"] = c["use_bias"]     # q, k, v, o, c_fc, c_proj


def _cohere(c: dict, mt: str, kw: dict) -> None:
    if c.get("use_qk_norm"):          # CohereLayerNorm((heads, head_dim)): a weight per channel
        kw.update(qk_norm=True, qk_norm_width="projection")


_FAMILY_FIELDS = {"opt": _opt, "gpt2": _gpt2, "mixtral": _mixtral, "qwen3_moe": _qwen3_moe,
                  "qwen2_moe": _qwen2_moe, "gpt_oss": _gpt_oss, "deepseek_v2": _deepseek,
                  "deepseek_v3": _deepseek, "starcoder2": _starcoder2, "cohere": _cohere}


def _attention_windows(c: dict, layers: int) -> dict:
    """``sliding_window`` and ``layer_types`` from a config, as transformers reads them: a
    ``use_sliding_window: false`` (Qwen2, Qwen3) turns the window off; ``layer_types`` as
    given, else Gemma-3's ``sliding_window_pattern`` p (layer i slides unless (i + 1) % p ==
    0), else Qwen2's ``max_window_layers`` m when the window is on (layers i >= m slide), else
    every layer slides (Mistral)."""
    window = c.get("sliding_window")
    if window is None or c.get("use_sliding_window", True) is False:
        return {}
    if c.get("layer_types") is not None:
        return {"sliding_window": window, "layer_types": c["layer_types"]}   # checked there
    p = c.get("sliding_window_pattern")
    if p is not None:
        if not isinstance(p, int) or isinstance(p, bool) or p < 1:
            raise ValueError(f"config.json sliding_window_pattern must be an int >= 1, got {p!r}")
        types = ["full_attention" if (i + 1) % p == 0 else "sliding_attention"
                 for i in range(layers)]
        return {"sliding_window": window, "layer_types": tuple(types)}
    if "use_sliding_window" in c and c.get("max_window_layers") is not None:
        m = c["max_window_layers"]
        check_int("config.json max_window_layers", m, 0)
        types = ["sliding_attention" if i >= m else "full_attention" for i in range(layers)]
        return {"sliding_window": window, "layer_types": tuple(types)}
    return {"sliding_window": window}
