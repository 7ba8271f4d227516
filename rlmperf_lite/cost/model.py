"""The shape of a real transformer, with Hugging Face field names, and its exact parameter count
(book section :ref:`sec-model-params`).

A :class:`ModelConfig` covers the decoder families the book uses: Llama / Mistral / Qwen2 / Qwen3
/ Phi-3 (RoPE, RMSNorm, SwiGLU, grouped-query attention, with Qwen2's q/k/v biases and Qwen3's
per-head q/k norms), Gemma (GeGLU; Gemma-2 and -3 with four norms per layer), OLMo-2 (q/k norms
over the whole projection), Cohere (bias-free LayerNorm, one norm per parallel block),
StarCoder2 and GPT-2 / OPT (LayerNorm, biases), their mixture-of-experts versions (Mixtral,
Qwen3-MoE, Qwen2-MoE with its gated shared expert, gpt-oss with expert biases and attention
sinks, DeepSeek-V2/V3 with shared experts, dense first layers, multi-head latent attention and
V3's multi-token-prediction module). Counts are of weights and biases as the Hugging Face
modules hold them (no buffers such as RoPE's ``inv_freq`` or GPT-2's stored causal masks), so
they equal the counts published for the checkpoints (tests: ``tests/test_cost_model.py``;
the counting conventions are in the API reference, book section :ref:`sec-model-params`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_bool, check_choice, check_int

__all__ = ["ModelConfig", "LAYER_TYPES"]

LAYER_TYPES = ("full_attention", "sliding_attention")
"""The attention types of Hugging Face's ``layer_types`` the cost models represent."""

_GATED = ("swiglu", "geglu")            # MLPs of three matrices: gate, up, down
_LAYERNORMS = ("layernorm", "layernorm_nobias")     # norms that subtract the mean
# Bounds far above any published model (DeepSeek-V3: 6.7e11 parameters, 61 layers; Llama 4
# Scout: 1e7 positions): parameter counts stay exact in float64 (< 2^53) and fit int64
MAX_SIZE = 10**9                # any width or count
MAX_POSITIONS = 10**8           # tokens per sequence (max_position_embeddings, sliding_window)
MAX_LAYERS = 10**4              # per-layer tuples (layer_windows) stay small
MAX_PARAMS = 10**15


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer's shape. Field names and meanings follow Hugging Face's
    ``config.json``; the extra fields say what the architecture implies (see
    :meth:`from_hf_config`, which fills them from ``model_type``).

    Raises (on construction):
        ValueError: naming a non-positive size, an unknown ``mlp``/``position``/``norm``, heads
            that do not divide, or inconsistent MoE / MLA fields; naming an absurd size: a
            field above 1e9, positions or a window above 1e8, more than 1e4 layers, or more
            than 1e15 parameters in all.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    num_key_value_heads: int | None = None
    """None = as many as query heads (multi-head attention)."""
    head_dim: int | None = None
    """None = hidden_size // num_attention_heads."""
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    mlp: str = "swiglu"
    """``"swiglu"`` or ``"geglu"`` (gate, up, down = 3 matrices; GeGLU is Gemma's GELU-gated
    form) or ``"gelu"`` / ``"relu"`` (up, down = 2)."""
    position: str = "rope"
    """``"rope"`` (no weights) or ``"learned"`` (a table of positions x hidden_size)."""
    norm: str = "rmsnorm"
    """``"rmsnorm"`` (a weight), ``"layernorm"`` (a weight and a bias) or
    ``"layernorm_nobias"`` (a LayerNorm with a weight only, Cohere's)."""
    attention_bias: bool = False
    """Biases on the q, k, v and output projections (Llama's ``attention_bias``, GPT, OPT)."""
    qkv_bias: bool = False
    """Biases on q, k, v only (the Qwen2 family, whose config.json does not say so)."""
    qk_norm: bool = False
    """A norm on queries and one on keys in every layer (Qwen3, Gemma-3, OLMo-2, Cohere's
    ``use_qk_norm``), a weight each of ``qk_norm_width``."""
    mlp_bias: bool = False
    """Biases on the MLP's matrices, and on every expert's in a MoE layer (gpt-oss)."""
    num_experts: int = 0
    """Routed experts per MoE layer; 0 = a dense model."""
    num_experts_per_tok: int = 0
    num_shared_experts: int = 0
    """Experts every token goes through, besides its routed ones (DeepSeek)."""
    moe_intermediate_size: int | None = None
    first_k_dense_replace: int = 0
    """The first this-many layers keep a dense MLP of ``intermediate_size`` (DeepSeek)."""
    router_bias: bool = False
    """A per-expert bias in the router (DeepSeek-V3's ``e_score_correction_bias``)."""
    q_lora_rank: int | None = None
    """Multi-head latent attention (DeepSeek-V2/V3) when ``kv_lora_rank`` is set."""
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    position_offset: int = 0
    """Extra rows of a learned position table (OPT stores max_position_embeddings + 2)."""
    name: str = "custom"
    sliding_window: int | None = None
    """The keys a sliding-window layer attends, W = the query and the W - 1 positions before it
    (HF ``sliding_window``, its mask ``kv_idx > q_idx - sliding_window`` in
    ``masking_utils.sliding_window_overlay``; Mistral's rolling cache of W tokens, Jiang et al.
    2023, arXiv 2310.06825, §2); None = full attention in every layer."""
    layer_types: tuple | None = None
    """Per layer ``"sliding_attention"`` or ``"full_attention"`` (HF ``layer_types``); None
    = every layer slides when ``sliding_window`` is set (Mistral)."""
    norms_per_layer: int = 2
    """Hidden-size norms in each layer, 2 for Llama's two pre-norms (and OLMo-2's two
    post-norms), 4 for Gemma-2 and -3 (a norm before and after both attention and MLP), 1 for
    Cohere's parallel block, whose attention and MLP read one norm."""
    qk_norm_width: str = "head_dim"
    """The width of each q and k norm's weight (with ``qk_norm``), ``"head_dim"`` for one
    weight shared by the heads (Qwen3, Gemma-3) or ``"projection"`` for the whole projection,
    H x head_dim for q and KV x head_dim for k (OLMo-2; Cohere's per-head LayerNorm weights)."""
    attention_sinks: bool = False
    """A learned logit per query head in every layer that joins each softmax (gpt-oss's
    ``sinks``); H parameters a layer, no FLOPs counted."""
    shared_expert_intermediate_size: int | None = None
    """Width of each shared expert when it differs from ``moe_intermediate_size`` (Qwen2-MoE
    has one shared expert of 5632 beside 60 routed experts of 1408); None = the routed width."""
    shared_expert_gate: bool = False
    """A sigmoid gate on the shared expert's output, a D -> 1 projection in every MoE layer
    (Qwen2-MoE's ``shared_expert_gate``)."""
    num_nextn_predict_layers: int = 0
    """Multi-token-prediction modules (DeepSeek-V3's ``num_nextn_predict_layers``, arXiv
    2412.19437, section 2.2), each one more transformer block with its ``eh_proj`` (2 D -> D)
    and three norms, sharing the embedding and the LM head. Not in :meth:`num_params` (see
    :meth:`mtp_params`); transformers does not load them, inference does not run them."""
    mtp_trained: bool = False
    """Whether training runs the multi-token-prediction modules (DeepSeek-V3's pre-training
    did); adds their FLOPs to :func:`rlmperf_lite.cost.train_flops`. Default False, as RL
    post-training with a Hugging Face model (verl, OpenRLHF) drops them."""

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "num_attention_heads", "intermediate_size"):
            check_int(f"ModelConfig.{f}", getattr(self, f), 1, high=MAX_SIZE)
        check_int("ModelConfig.num_hidden_layers", self.num_hidden_layers, 1, high=MAX_LAYERS)
        check_int("ModelConfig.max_position_embeddings", self.max_position_embeddings, 1,
                  high=MAX_POSITIONS)
        check_int("ModelConfig.sliding_window", self.sliding_window, 1, optional=True,
                  high=MAX_POSITIONS)
        for f in ("num_key_value_heads", "head_dim", "moe_intermediate_size", "q_lora_rank",
                  "kv_lora_rank"):
            check_int(f"ModelConfig.{f}", getattr(self, f), 1, optional=True, high=MAX_SIZE)
        for f in ("num_experts", "num_experts_per_tok", "num_shared_experts",
                  "first_k_dense_replace", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                  "position_offset"):
            check_int(f"ModelConfig.{f}", getattr(self, f), 0, high=MAX_SIZE)
        for f in ("tie_word_embeddings", "attention_bias", "qkv_bias", "qk_norm", "mlp_bias",
                  "router_bias"):
            check_bool(f"ModelConfig.{f}", getattr(self, f))
        check_choice("ModelConfig.mlp", self.mlp, (*_GATED, "gelu", "relu"))
        check_choice("ModelConfig.position", self.position, ("rope", "learned"))
        check_choice("ModelConfig.norm", self.norm, ("rmsnorm", *_LAYERNORMS))
        self._check_layer_types()
        self._check_family_fields()
        H, KV = self.num_attention_heads, self.kv_heads
        if H % KV:
            raise ValueError(f"ModelConfig.num_key_value_heads={KV} must divide "
                             f"num_attention_heads={H}")
        if self.head_dim is None and not self.is_mla and self.hidden_size % H:
            raise ValueError(f"ModelConfig.num_attention_heads={H} must divide hidden_size="
                             f"{self.hidden_size} (or give head_dim)")
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ValueError(f"ModelConfig.num_experts_per_tok must be in [1, num_experts="
                                 f"{self.num_experts}], got {self.num_experts_per_tok}")
            if self.moe_intermediate_size is None:
                raise ValueError("ModelConfig.moe_intermediate_size is needed with num_experts")
            if self.first_k_dense_replace > self.num_hidden_layers:
                raise ValueError("ModelConfig.first_k_dense_replace exceeds num_hidden_layers")
        elif self.num_experts_per_tok or self.num_shared_experts or self.first_k_dense_replace \
                or self.moe_intermediate_size is not None or self.router_bias:
            raise ValueError("ModelConfig: MoE fields (num_experts_per_tok, num_shared_experts, "
                             "moe_intermediate_size, first_k_dense_replace, router_bias) need "
                             "num_experts > 0")
        if self.q_lora_rank is not None and not self.is_mla:
            raise ValueError("ModelConfig.q_lora_rank needs kv_lora_rank (multi-head latent "
                             "attention)")
        if self.is_mla and not (self.qk_rope_head_dim and self.qk_nope_head_dim
                                and self.v_head_dim):
            raise ValueError("ModelConfig: multi-head latent attention (kv_lora_rank) needs "
                             "qk_rope_head_dim, qk_nope_head_dim and v_head_dim > 0")
        self._check_size()

    def _check_size(self) -> None:
        """At most 1e15 parameters, naming the fields of the largest component."""
        b = self.param_breakdown()
        if sum(b.values()) <= MAX_PARAMS:
            return
        part = max(b, key=b.get)
        fields = {"embedding": "vocab_size x hidden_size", "lm_head": "vocab_size x hidden_size",
                  "position_embedding": "max_position_embeddings x hidden_size",
                  "attention": "num_hidden_layers x hidden_size x num_attention_heads",
                  "dense_mlp": "num_hidden_layers x hidden_size x intermediate_size",
                  "router": "num_experts x hidden_size",
                  "routed_experts": "num_experts x moe_intermediate_size",
                  "shared_experts": "num_shared_experts x moe_intermediate_size",
                  "norms": "num_hidden_layers x hidden_size"}[part]
        raise ValueError(f"ModelConfig has {sum(b.values()):.3g} parameters, above the "
                         f"{MAX_PARAMS:.0e} this cost model accepts (its {part}: {fields}); "
                         f"check those fields")

    def check_positions(self, tokens: int, label: str = "seq_len") -> None:
        """Refuse a sequence of ``tokens`` positions longer than ``max_position_embeddings``
        (a ValueError naming ``label``), for every calculator that takes a length."""
        if tokens > self.max_position_embeddings:
            raise ValueError(f"{label} = {int(tokens)} exceeds {self.name}'s "
                             f"max_position_embeddings={self.max_position_embeddings}")

    def _check_layer_types(self) -> None:
        """``layer_types`` as a tuple of one known type per layer, sliding ones with a window."""
        if self.layer_types is None:
            return
        if isinstance(self.layer_types, str) or not hasattr(self.layer_types, "__len__"):
            raise ValueError(f"ModelConfig.layer_types must be a list of layer types, got "
                             f"{self.layer_types!r}")
        types = tuple(self.layer_types)
        object.__setattr__(self, "layer_types", types)      # a list in, a hashable tuple kept
        if len(types) != self.num_hidden_layers:
            raise ValueError(f"ModelConfig.layer_types has {len(types)} entries for "
                             f"num_hidden_layers={self.num_hidden_layers}")
        for t in types:
            check_choice("ModelConfig.layer_types[i]", t, LAYER_TYPES)
        if "sliding_attention" in types and self.sliding_window is None:
            raise ValueError("ModelConfig.layer_types has sliding_attention layers but "
                             "sliding_window is None")

    def _check_family_fields(self) -> None:
        """The fields that say what a family implies: kinds, counts, and MoE / MTP pairings."""
        check_int("ModelConfig.norms_per_layer", self.norms_per_layer, 1)
        check_int("ModelConfig.num_nextn_predict_layers", self.num_nextn_predict_layers, 0)
        check_int("ModelConfig.shared_expert_intermediate_size",
                  self.shared_expert_intermediate_size, 1, optional=True)
        for f in ("attention_sinks", "shared_expert_gate", "mtp_trained"):
            check_bool(f"ModelConfig.{f}", getattr(self, f))
        check_choice("ModelConfig.qk_norm_width", self.qk_norm_width, ("head_dim", "projection"))
        if (self.shared_expert_intermediate_size is not None or self.shared_expert_gate) \
                and not (self.is_moe and self.num_shared_experts):
            raise ValueError("ModelConfig: shared_expert_intermediate_size and "
                             "shared_expert_gate need num_experts > 0 and num_shared_experts > 0")
        if self.mtp_trained and not self.num_nextn_predict_layers:
            raise ValueError("ModelConfig.mtp_trained needs num_nextn_predict_layers > 0 (the "
                             "model has no multi-token-prediction module to train)")

    # -- derived shape -------------------------------------------------------------------------
    @property
    def layer_windows(self) -> tuple:
        """Per layer, the keys its attention is limited to (``sliding_window``) or None (full)."""
        if self.sliding_window is None:
            return (None,) * self.num_hidden_layers
        if self.layer_types is None:
            return (self.sliding_window,) * self.num_hidden_layers
        return tuple(self.sliding_window if t == "sliding_attention" else None
                     for t in self.layer_types)

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Query/key size per head (for MLA, nope + rope parts)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of D x F in one MLP, 3 when gated (SwiGLU, GeGLU), else 2."""
        return 3 if self.mlp in _GATED else 2

    @property
    def shared_expert_size(self) -> int:
        """Intermediate width of each shared expert (``shared_expert_intermediate_size``, else
        ``moe_intermediate_size``); 0 for a dense model."""
        return self.shared_expert_intermediate_size or self.moe_intermediate_size or 0

    # -- parameter counts ----------------------------------------------------------------------
    def _norm(self, n: int) -> int:
        return n * (2 if self.norm == "layernorm" else 1)

    def norm_params(self) -> int:
        """Parameters of one hidden-size norm, D (RMSNorm, bias-free LayerNorm) or 2 D."""
        return self._norm(self.hidden_size)

    def attention_params(self) -> int:
        """Weights and biases of one layer's attention block (norm excluded)."""
        d, H, KV, hd = self.hidden_size, self.num_attention_heads, self.kv_heads, self.head_size
        if self.is_mla:
            qk, v, rope = self.head_size, self.v_head_dim, self.qk_rope_head_dim
            r_kv = self.kv_lora_rank
            q = (d * H * qk if self.q_lora_rank is None else
                 d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * H * qk)
            return (q + d * (r_kv + rope) + r_kv + r_kv * H * (self.qk_nope_head_dim + v)
                    + H * v * d)
        n = d * H * hd + 2 * d * KV * hd + H * hd * d
        if self.attention_bias or self.qkv_bias:
            n += H * hd + 2 * KV * hd
        if self.attention_bias:
            n += d
        if self.qk_norm:           # q and k norm weights (all four families: no bias)
            n += 2 * hd if self.qk_norm_width == "head_dim" else (H + KV) * hd
        if self.attention_sinks:
            n += H
        return n

    def mlp_params(self, intermediate_size: int | None = None) -> int:
        """One MLP (a dense layer's, or one expert's with its intermediate size)."""
        d, f = self.hidden_size, intermediate_size or self.intermediate_size
        mats = self.mlp_matrices
        return mats * d * f + ((mats - 1) * f + d if self.mlp_bias else 0)

    def _moe_params(self) -> dict:
        """One MoE layer's router, routed experts and shared experts (with their gate)."""
        d, E = self.hidden_size, self.num_experts
        shared = self.num_shared_experts * self.mlp_params(self.shared_expert_size)
        return {"router": d * E + (E if self.router_bias else 0),
                "routed_experts": E * self.mlp_params(self.moe_intermediate_size),
                "shared_experts": shared + (d if self.shared_expert_gate else 0)}

    def param_breakdown(self) -> dict:
        """Exact parameter count by component (all layers summed); values sum to
        :meth:`num_params`. Keys: embedding, position_embedding, attention, dense_mlp, router,
        routed_experts, shared_experts, norms, lm_head (a tied head counted once, as the
        embedding)."""
        d, L, V = self.hidden_size, self.num_hidden_layers, self.vocab_size
        moe = self.num_moe_layers
        per_moe = self._moe_params() if self.is_moe else dict.fromkeys(
            ("router", "routed_experts", "shared_experts"), 0)
        return {
            "embedding": V * d,
            "position_embedding": ((self.max_position_embeddings + self.position_offset) * d
                                   if self.position == "learned" else 0),
            "attention": L * self.attention_params(),
            "dense_mlp": (L - moe) * self.mlp_params(),
            **{k: moe * v for k, v in per_moe.items()},
            "norms": self.norm_params() * (self.norms_per_layer * L + 1),
            "lm_head": 0 if self.tie_word_embeddings else V * d,
        }

    def num_params(self) -> int:
        """Exact number of weights and biases (the main model: multi-token-prediction modules
        are :meth:`mtp_params`)."""
        return sum(self.param_breakdown().values())

    def mtp_params(self) -> int:
        """Weights of the ``num_nextn_predict_layers`` multi-token-prediction modules that the
        main model does not share: per module one transformer block (a MoE block for a MoE
        model), ``eh_proj`` (2 D x D) and the ``enorm``, ``hnorm`` and final norms; the
        embedding and LM head are shared (DeepSeek-V3, arXiv 2412.19437, section 2.2). 0
        without them."""
        if not self.num_nextn_predict_layers:
            return 0
        d = self.hidden_size
        mlp = sum(self._moe_params().values()) if self.is_moe else self.mlp_params()
        block = self.attention_params() + mlp + self.norms_per_layer * self.norm_params()
        return self.num_nextn_predict_layers * (block + 2 * d * d + 3 * self.norm_params())

    def num_active_params(self) -> int:
        """Parameters one token goes through: for MoE, ``num_experts_per_tok`` of the routed
        experts (shared experts, router, attention and embeddings all count); = num_params for a
        dense model. The input embedding is counted (one row is read per token; DeepSeek's
        "37B activated" excludes it)."""
        b = self.param_breakdown()
        if self.is_moe:
            b["routed_experts"] = b["routed_experts"] * self.num_experts_per_tok \
                // self.num_experts
        return sum(b.values())

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def from_tiny_lm(cls, cfg) -> ModelConfig:
        """The shape of the book's numpy model (:class:`rlmperf_lite.nn.TinyLMConfig`): learned
        positions, RMSNorm, a 2-matrix MLP, untied head, no biases."""
        return cls(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                   num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                   intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_seq_len,
                   mlp=cfg.activation, position="learned", norm="rmsnorm", name="tiny-lm")

    # -- Hugging Face configs and presets (hf.py, presets.py) --------------------------
    @classmethod
    def from_hf_config(cls, config, *, name: str | None = None) -> ModelConfig:
        """From a Hugging Face ``config.json`` (a dict, a path to the file, or a model
        directory); see :func:`rlmperf_lite.cost.from_hf_config`."""
        from .hf import from_hf_config
        return from_hf_config(config, name=name)

    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """A shipped preset by name (case-insensitive); see
        :func:`rlmperf_lite.cost.model_presets`."""
        from .presets import model_preset
        return model_preset(name)
