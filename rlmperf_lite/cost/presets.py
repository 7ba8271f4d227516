"""Shipped presets: real models (public config.json values) and accelerators (vendor figures),
each with its sources, as small data files under ``rlmperf_lite/cost/data`` (book sections
:ref:`sec-model-params` and :ref:`sec-roofline`).

Model presets: the Llama, Qwen (dense, Qwen3-MoE, Qwen1.5-MoE), Mistral/Mixtral, DeepSeek-V2/V3,
Gemma 1/2/3, Phi-3/Phi-4, GPT-2, gpt-oss, OLMo-2, Cohere (Aya, Command-R) and OPT files hold the
published ``config.json`` fields, read through :func:`rlmperf_lite.cost.hf.from_hf_config`,
and the published parameter count with its source; the GPT family (Megatron-LM's Table 1 models
and GPT-3 175B) is built from its papers' tables.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from ..checks import did_you_mean
from .hf import from_hf_config
from .model import ModelConfig

__all__ = ["model_preset", "model_presets", "preset_record"]

_DATA = resources.files("rlmperf_lite.cost") / "data"


def _gpt(row) -> ModelConfig:
    name, L, d, H, V, S, _ = row
    return ModelConfig(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=H,
                       intermediate_size=4 * d, max_position_embeddings=S, mlp="gelu",
                       position="learned", norm="layernorm", attention_bias=True,
                       mlp_bias=True, tie_word_embeddings=True, name=name)


@lru_cache(maxsize=None)
def _records() -> dict:
    """name -> record: {"config": ModelConfig, "published_num_params": int | None, ...}."""
    out = {}
    for f in sorted((_DATA / "models").iterdir(), key=lambda p: p.name):
        if f.name.endswith(".json"):
            rec = json.loads(f.read_text(encoding="utf-8"))
            key = f.name.removesuffix(".json")
            out[key] = {**rec, "config": from_hf_config(rec["hf_config"], name=rec["name"])}
    family = json.loads((_DATA / "gpt_family.json").read_text(encoding="utf-8"))
    for row in family["rows"]:
        source = family["source_gpt3" if row[0].startswith("gpt3") else "source_megatron"]
        out[row[0]] = {"name": row[0], "config": _gpt(row), "published_num_params": None,
                       "published_params_billion": row[-1], "sources": {"all": source}}
    return out


def model_presets() -> list[str]:
    """Names of the shipped model presets."""
    return sorted(_records())


def preset_record(name: str) -> dict:
    """The preset's data record: ``config`` (a :class:`ModelConfig`), the published parameter
    count when one exists, and the source of every value.

    Raises:
        ValueError: an unknown name, with the closest known ones ("did you mean") and the
            list of all.
    """
    if not isinstance(name, str):
        raise ValueError(f"model preset name must be a string, got {name!r}")
    key = name.lower()
    recs = _records()
    if key not in recs:
        raise ValueError(f"unknown model preset {name!r}{did_you_mean(name, recs)}; known: "
                         f"{', '.join(sorted(recs))}")
    return recs[key]


def model_preset(name: str) -> ModelConfig:
    """A shipped model preset by name (case-insensitive), e.g. ``"llama-2-7b"``."""
    return preset_record(name)["config"]


def resolve_model(model, label: str = "actor") -> ModelConfig:
    """``model`` as a ModelConfig: itself, or the preset it names (:func:`model_preset`).

    Raises:
        ValueError: naming ``label`` when ``model`` is neither; an unknown preset name.
    """
    if isinstance(model, str):
        return model_preset(model)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"{label} must be a ModelConfig or a preset name, got "
                         f"{type(model).__name__}")
    return model
