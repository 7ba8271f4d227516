"""Read a Hugging Face ``config.json`` into a :class:`ModelConfig` (book section
:ref:`sec-model-params`).

A config file states sizes but not everything the architecture implies: Qwen2's q/k/v biases,
Qwen3's q/k norms, OPT's two extra position rows, DeepSeek-V3's router bias are in the modelling
code, not in the file. ``model_type`` names the architecture, and :data:`FAMILIES` holds what
each one implies. Fields the cost model does not need (rope scaling, dropout, token ids,
quantisation...) are ignored. Sliding-window attention is read from ``sliding_window``,
``layer_types``, ``sliding_window_pattern``, ``use_sliding_window`` and ``max_window_layers``
as transformers' configuration classes read them.
"""
from __future__ import annotations

import json
import os
import sys

from ..checks import check_int
from .model import MAX_LAYERS, ModelConfig

__all__ = ["from_hf_config", "FAMILIES"]

_LLAMA = {"mlp": "swiglu", "position": "rope", "norm": "rmsnorm"}
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
}
"""What each supported ``model_type`` implies beyond its config.json."""

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


def from_hf_config(config, *, name: str | None = None) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face config (dict or path to ``config.json``).

    Supported ``model_type``: llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3, opt.

    Raises:
        ValueError: an unreadable file, an unsupported ``model_type``, a missing required
            field (named), or a layout the cost model does not represent (e.g. Qwen3-MoE with
            ``mlp_only_layers``), and any :class:`ModelConfig` check; from a file, each names
            the file.
    """
    c = _loaded(config)
    if isinstance(config, dict):
        return _from_dict(c, name)
    try:
        return _from_dict(c, name)
    except ValueError as err:
        raise ValueError(f"config file {str(config)!r}: {err}") from None


def _from_dict(c: dict, name: str | None) -> ModelConfig:
    """The body of :func:`from_hf_config`, on a loaded config."""
    mt = c.get("model_type")
    if not isinstance(mt, str) or mt not in FAMILIES:
        raise ValueError(f"model_type {mt!r} is not supported; supported: {sorted(FAMILIES)}")
    kw = {k: c[k] for k in _COMMON if c.get(k) is not None}
    kw.update(FAMILIES[mt])
    if mt == "opt":
        kw["intermediate_size"] = _need(c, "ffn_dim", mt)
        kw["tie_word_embeddings"] = c.get("tie_word_embeddings", True)
        kw["attention_bias"] = kw["mlp_bias"] = c.get("enable_bias", True)
        # do_layer_norm_before=False (post-norm, OPT-350M) has the same weights: same count
        if c.get("word_embed_proj_dim", c.get("hidden_size")) != c.get("hidden_size"):
            raise ValueError("OPT with word_embed_proj_dim != hidden_size (project_in/out, as "
                             "OPT-350M) is not represented")
    elif mt == "mixtral":
        kw.update(num_experts=_need(c, "num_local_experts", mt),
                  num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
                  moe_intermediate_size=_need(c, "intermediate_size", mt))
    elif mt == "qwen3_moe":
        if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
            raise ValueError("Qwen3-MoE with mlp_only_layers or decoder_sparse_step != 1 is not "
                             "represented (only all-MoE layer stacks)")
        kw.update(num_experts=_need(c, "num_experts", mt),
                  num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
                  moe_intermediate_size=_need(c, "moe_intermediate_size", mt))
    elif mt == "deepseek_v3":
        if c.get("moe_layer_freq", 1) != 1:
            raise ValueError("DeepSeek-V3 with moe_layer_freq != 1 is not represented")
        kw.update(num_experts=_need(c, "n_routed_experts", mt),
                  num_experts_per_tok=_need(c, "num_experts_per_tok", mt),
                  num_shared_experts=c.get("n_shared_experts") or 0,
                  moe_intermediate_size=_need(c, "moe_intermediate_size", mt),
                  first_k_dense_replace=c.get("first_k_dense_replace", 0),
                  q_lora_rank=c.get("q_lora_rank"), kv_lora_rank=_need(c, "kv_lora_rank", mt),
                  qk_rope_head_dim=_need(c, "qk_rope_head_dim", mt),
                  qk_nope_head_dim=_need(c, "qk_nope_head_dim", mt),
                  v_head_dim=_need(c, "v_head_dim", mt))
        kw.pop("head_dim", None)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size"):
        if key not in kw:
            _need(c, key, mt)
    # before a per-layer list of num_hidden_layers entries is built
    check_int("config.json num_hidden_layers", kw["num_hidden_layers"], 1, high=MAX_LAYERS)
    kw.update(_attention_windows(c, kw["num_hidden_layers"]))
    return ModelConfig(**kw, name=name or c.get("_name_or_path") or mt)


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
