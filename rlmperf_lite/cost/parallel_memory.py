"""Memory per GPU under a parallel layout: the training engine's model states and activations,
the rollout engine's weights and KV cache (book sections :ref:`sec-zero-fsdp`,
:ref:`sec-pp-memory` and :ref:`sec-rollout-layout`).

Model states (Rajbhandari et al. 2020, ZeRO, arXiv 1910.02054, §3.1, §5 and Fig. 1): N
parameters trained with mixed-precision Adam hold 2N bytes of bf16 weights, 2N of gradients
and K N of optimizer states (K = 12: fp32 master weights, momentum, variance). Over N_d
data-parallel ranks, stage 1 shards the optimizer states, stage 2 the gradients too, stage 3
the weights too. Fig. 1, N = 7.5e9, N_d = 64: 120, 31.4, 16.6 and 1.9 GB.

Training memory (:func:`memory_per_gpu`), per GPU of the worst pipeline stage — the first,
the second (the fullest of the middle stages, which hold equal layers) or the last, each with
the layers of the plan's stage layout (``ParallelPlan.stage_layers``):

- Parameters: every layer the same share of the non-embedding parameters; the first stage
  adds the input embedding, the last the LM head (a copy of a tied embedding when pp > 1, as
  Megatron keeps one) and the final norm. Non-expert parameters are split by tp (the embedding
  by vocabulary) and their states sharded over the dp x cp ranks; routed experts are split by
  tp x ep and sharded over the dp x cp / ep expert-data-parallel ranks (Megatron-Core).
- Activations per layer: Korthikanti et al. 2022's (arXiv 2205.05198) bookkeeping for the
  plan's tp, sp and recompute with FlashAttention's logsumexp in place of stored scores
  (:func:`rlmperf_lite.cost.activation_bytes_per_layer`; ``attention="eager"`` for Table 2's
  s^2 term), divided by cp (context parallelism keeps T / cp queries per GPU).
  Microbatches in flight: 1F1B keeps min(p - i, m) on stage i (Narayanan et al. 2021
  §2.2.1); v-way interleaving keeps min(m v, v p + p - 1 - 2 i) chunks of 1/v of the layers,
  which is p (1 + (p - 1) / (p v)) micro-batches on the first once m is large (Korthikanti et
  al. 2022 §4.2.3); 1 on the last stage; GPipe keeps all m; without a pipeline one microbatch
  at a time (gradient accumulation). Full recomputation keeps each layer's input (2 T b D,
  / tp with sp) and adds one layer's full activations, rebuilt in backward. The stage with
  the LM head holds one microbatch's fp32 logits, 4 T b V / (tp cp) bytes, or one chunk of
  them with ``logits="chunked"``, and the final norm's and head's inputs
  (``rlmperf_lite.cost.memory.lm_head_activation_bytes``).
- Not counted: temporary buffers (ZeRO-3's gathered layer, communication buckets), the CUDA
  context, fragmentation.

Inference memory (:func:`inference_memory_per_gpu`): weights / (tp pp) plus the KV cache of
the tokens held, split by pp (layers) and by tp over the KV heads — replicated when tp exceeds
the KV heads, as vLLM does; a multi-head latent attention cache is replicated on every TP rank.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..checks import check_choice, check_int, check_number
from .memory import (ATTENTION, LOGITS, activation_bytes_per_layer, kv_cache_bytes,
                     kv_cache_bytes_per_token, kv_cache_split, lm_head_activation_bytes)
from .model import ModelConfig
from .parallel_plan import (RECOMPUTE, ParallelPlan, TrainWorkload, plan_columns,
                            stage_layer_arrays)

__all__ = ["model_state_breakdown", "model_state_bytes_per_gpu", "TrainMemory",
           "memory_per_gpu", "InferenceMemory", "inference_memory_per_gpu", "SCHEDULES"]

SCHEDULES = ("1f1b", "gpipe")


def model_state_breakdown(num_params: float, dp: int, zero_stage: int, *, weight_bytes: int = 2,
                          grad_bytes: int = 2, optimizer_bytes_per_param: int = 12) -> dict:
    """Bytes per GPU of weights, gradients and optimizer states of ``num_params`` parameters
    replicated over ``dp`` ranks with ZeRO ``zero_stage`` (ZeRO paper §5, Fig. 1).

    Returns:
        {"weights_bytes", "grads_bytes", "optimizer_bytes"}.
    Raises:
        ValueError: negative ``num_params``, ``dp`` < 1, a stage outside 0..3, byte counts < 1.
    """
    check_number("num_params", num_params, low=0)
    check_int("dp", dp, 1)
    check_choice("zero_stage", zero_stage, (0, 1, 2, 3))
    for label, v in (("weight_bytes", weight_bytes), ("grad_bytes", grad_bytes),
                     ("optimizer_bytes_per_param", optimizer_bytes_per_param)):
        check_int(label, v, 1)
    n = float(num_params)
    return {"weights_bytes": weight_bytes * n / (dp if zero_stage >= 3 else 1),
            "grads_bytes": grad_bytes * n / (dp if zero_stage >= 2 else 1),
            "optimizer_bytes": optimizer_bytes_per_param * n / (dp if zero_stage >= 1 else 1)}


def model_state_bytes_per_gpu(num_params: float, dp: int, zero_stage: int,
                              optimizer_bytes_per_param: int = 12, *, weight_bytes: int = 2,
                              grad_bytes: int = 2) -> float:
    """Total of :func:`model_state_breakdown`: (2 + 2 + K) N / N_d-sharded as the stage says.
    ZeRO paper Fig. 1 (N = 7.5e9, N_d = 64): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB for stages 0-3."""
    return float(sum(model_state_breakdown(
        num_params, dp, zero_stage, weight_bytes=weight_bytes, grad_bytes=grad_bytes,
        optimizer_bytes_per_param=optimizer_bytes_per_param).values()))


@dataclass(frozen=True)
class TrainMemory:
    """Bytes per GPU on the worst pipeline stage (``stage``: "first", "middle" — the second
    stage — or "last")."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    stage: str

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + \
            self.activation_bytes

    def as_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes}


def stage_param_arrays(m: ModelConfig, pp, first_layers, middle_layers, last_layers) -> dict:
    """Parameters, whole (not yet split by tp or ep), of the first, a middle and the last
    pipeline stage holding ``*_layers`` layers each (arrays, one per plan): {"first",
    "middle", "last"} non-expert, {"expert_first", "expert_middle", "expert_last"} routed
    experts (every layer the same share). The first stage adds the embedding, the last the
    final norm and the LM head (a tied head's copy when pp > 1); pp = 1 holds everything."""
    b, L = m.param_breakdown(), m.num_hidden_layers
    norm = m.norm_params()                                    # one norm's parameters
    per_layer = (b["attention"] + b["dense_mlp"] + b["router"] + b["shared_experts"]
                 + b["norms"] - norm) / L
    emb = b["embedding"] + b["position_embedding"]
    head = b["lm_head"] or m.vocab_size * m.hidden_size       # a tied head's copy when pp > 1
    one = np.asarray(pp) == 1
    out = {"first": np.where(one, emb + L * per_layer + b["lm_head"] + norm,
                             emb + first_layers * per_layer),
           "middle": middle_layers * per_layer}
    out["last"] = np.where(one, out["first"], head + norm + last_layers * per_layer)
    for k, n in (("first", first_layers), ("middle", middle_layers), ("last", last_layers)):
        out[f"expert_{k}"] = n * b["routed_experts"] / L
    return out


def stage_params(m: ModelConfig, pp):
    """(non-expert parameters of the first stage, of the last stage, routed-expert parameters
    of any stage), whole (not yet split by tp or ep), with L / pp layers per stage; ``pp`` an
    array (:func:`stage_param_arrays` for uneven stages)."""
    layers = m.num_hidden_layers / np.asarray(pp, dtype=np.float64)
    d = stage_param_arrays(m, pp, layers, layers, layers)
    return d["first"], d["last"], d["expert_first"]


def _per_distinct(fn, *cols) -> np.ndarray:
    """fn(*row) once per distinct row of the integer columns ``cols``, spread back over the
    plans (the scalar formula is the only one, so the planner and memory_per_gpu agree)."""
    keys = np.stack([np.asarray(c).astype(np.int64) for c in cols])
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
    vals = np.array([fn(*(int(k) for k in row)) for row in uniq.T], dtype=np.float64)
    return vals[inverse.reshape(-1)]


def _activation_per_layer(m: ModelConfig, s: int, b: int, tp, sp, rc, attention: str):
    """:func:`activation_bytes_per_layer` for every (tp, sp, recompute code) row; NaN where tp
    does not divide the heads or sp comes without tp (plans the rules reject)."""
    def one(t, q, r):
        if m.num_attention_heads % t or (q and t == 1):
            return np.nan
        return activation_bytes_per_layer(m, s, b, tp=t, sp=bool(q), recompute=RECOMPUTE[r],
                                          attention=attention)
    return _per_distinct(one, tp, sp, rc)


def _in_flight(schedule: str, pp, mb, v) -> tuple:
    """Micro-batches whose activations the first stage, the second (the fullest middle one)
    and the last hold at the peak (module docstring)."""
    if schedule == "gpipe":
        every = np.where(pp > 1, mb, 1.0)
        return every, every, every

    def stage(i):
        # interleaved: stage i holds min(m v, v p + p - 1 - 2 i) model chunks' micro-batches
        # (Megatron's warm-up, 2 (p - i - 1) + (v - 1) p, plus one), each 1/v of its layers
        chunks = np.minimum(mb * v, v * pp + pp - 1 - 2 * i) / v
        return np.where(pp > 1, np.where(v > 1, chunks, np.minimum(pp - i, mb)), 1.0)
    return stage(0), stage(1), 1.0


def train_memory_arrays(m: ModelConfig, cols: dict, workload: TrainWorkload,
                        schedule: str = "1f1b", weight_bytes: int = 2, grad_bytes: int = 2,
                        optimizer_bytes_per_param: int = 12, *, attention: str = "flash",
                        logits: str = "fp32", logits_chunk: int = 512) -> dict:
    """:func:`memory_per_gpu` for every plan in ``cols`` (:func:`plan_columns`) at once; the
    worst of the first, second and last stage ("stage": 0, 1, 2; "is_last")."""
    dp, tp, pp, cp, ep = (cols[k].astype(np.float64) for k in ("dp", "tp", "pp", "cp", "ep"))
    sp, z, rc = cols["sp"], cols["zero_stage"], cols["recompute"]
    s, b = workload.seq_len, workload.micro_batch_size
    layers = stage_layer_arrays(m.num_hidden_layers, pp, cols["first_stage_layers"],
                                cols["last_stage_layers"])             # first, middle, last, n
    params = stage_param_arrays(m, pp, *layers[:3])
    n_dense, n_exp = dp * cp, dp * cp / ep                   # ranks each state is sharded over

    def states(dense, expert):
        d, e = dense / tp, expert / (tp * ep)
        shard = {k: np.where(z >= stage, d / n_dense + e / n_exp, d + e)
                 for k, stage in (("w", 3), ("g", 2), ("o", 1))}
        return (weight_bytes * shard["w"], grad_bytes * shard["g"],
                optimizer_bytes_per_param * shard["o"])

    per_layer = _activation_per_layer(m, s, b, cols["tp"], sp, rc, attention) / cp
    # full recomputation rebuilds one layer's activations at a time in the backward
    full_layer = _activation_per_layer(m, s, b, cols["tp"], sp, np.zeros_like(rc), attention)
    working = np.where(rc == RECOMPUTE.index("full"), full_layer / cp, 0.0)
    head = _per_distinct(lambda t, c, q: lm_head_activation_bytes(
        m, s, b, tp=t, cp=c, sp=bool(q), logits=logits, chunk_tokens=logits_chunk),
        cols["tp"], cols["cp"], sp)                          # on the stage with the LM head
    in_flight = _in_flight(schedule, pp, cols["microbatches"].astype(np.float64),
                           cols["interleave"])
    head_on = (np.where(pp == 1, head, 0.0), 0.0, head)
    parts = [(*states(params[k], params[f"expert_{k}"]),
              per_layer * n * held + working + h)
             for k, n, held, h in zip(("first", "middle", "last"), layers, in_flight, head_on)]
    totals = np.stack([sum(p) for p in parts])                # (3, plans)
    totals[1] = np.where(pp > 2, totals[1], -np.inf)          # no middle stage when pp <= 2
    totals[2] = np.where(pp > 1, totals[2], -np.inf)
    stage = np.argmax(totals, axis=0)                         # ties: the earlier stage
    out = {k: np.choose(stage, [p[j] for p in parts]) for j, k in enumerate(
        ("weights_bytes", "grads_bytes", "optimizer_bytes", "activation_bytes"))}
    out.update(stage=stage, is_last=stage == 2, total_bytes=np.max(totals, axis=0))
    return out


def memory_per_gpu(model: ModelConfig, plan: ParallelPlan, workload: TrainWorkload, *,
                   schedule: str = "1f1b", weight_bytes: int = 2, grad_bytes: int = 2,
                   optimizer_bytes_per_param: int = 12, attention: str = "flash",
                   logits: str = "fp32", logits_chunk: int = 512) -> TrainMemory:
    """Training memory per GPU of the worst pipeline stage (module docstring: ZeRO §5 for the
    states, Korthikanti et al. 2022 with FlashAttention for activations; book section
    :ref:`sec-pp-memory`).

    Args:
        plan: the layout; its ``microbatches`` must equal global_batch / (dp x
            micro_batch_size).
        workload: batch and sequence length.
        schedule: "1f1b" (p microbatches in flight on the first stage) or "gpipe" (all m).
        attention: "flash" (FlashAttention's logsumexp, no s^2 scores) or "eager"
            (Korthikanti's stored scores), as :func:`activation_bytes_per_layer`.
        logits, logits_chunk: "fp32" (whole logits) or "chunked" (``logits_chunk`` tokens at a
            time), as ``rlmperf_lite.cost.memory.lm_head_activation_bytes``.
    Raises:
        ValueError: a plan that breaks a rule of :meth:`ParallelPlan.check` (without the
            NVLink-domain rule, which needs hardware), bad types, byte counts or options, a
            ``seq_len`` beyond the model's ``max_position_embeddings``.
    """
    if not isinstance(plan, ParallelPlan):
        raise ValueError(f"plan must be a ParallelPlan, got {type(plan).__name__}")
    if not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")
    check_choice("schedule", schedule, SCHEDULES)
    check_choice("attention", attention, ATTENTION)
    check_choice("logits", logits, LOGITS)
    for label, v in (("weight_bytes", weight_bytes), ("grad_bytes", grad_bytes),
                     ("optimizer_bytes_per_param", optimizer_bytes_per_param),
                     ("logits_chunk", logits_chunk)):
        check_int(label, v, 1)
    plan.validate(model, None, None, workload)
    model.check_positions(workload.seq_len, "workload.seq_len")
    r = train_memory_arrays(model, plan_columns([plan]), workload, schedule, weight_bytes,
                             grad_bytes, optimizer_bytes_per_param, attention=attention,
                             logits=logits, logits_chunk=logits_chunk)
    return TrainMemory(*(float(r[k][0]) for k in ("weights_bytes", "grads_bytes",
                                                  "optimizer_bytes", "activation_bytes")),
                       stage=("first", "middle", "last")[int(r["stage"][0])])


@dataclass(frozen=True)
class InferenceMemory:
    """Bytes per GPU of an inference (rollout) engine replica."""

    weights_bytes: float
    kv_cache_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes

    def as_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes}


def inference_memory_per_gpu(model: ModelConfig, tp: int = 1, pp: int = 1, kv_tokens: float = 0,
                             *, weight_bytes: int = 2, kv_dtype_bytes: int = 2,
                             sequences: int = 1) -> InferenceMemory:
    """Weights / (tp pp) plus the KV cache of ``kv_tokens`` tokens (summed over the
    ``sequences`` sequences the replica holds, kv_tokens / sequences each; a sliding-window
    layer keeps the last W of each, ``kv_cache_bytes``) split by
    pp and by min(tp, KV heads) — KV heads replicated beyond tp = KV heads, a latent (MLA)
    cache on every rank (Kwon et al. 2023, vLLM, §3 for the per-token size; book section
    :ref:`sec-rollout-layout`).

    Raises:
        ValueError: tp or pp < 1, tp not dividing the attention heads, tp and the KV heads not
            dividing one another, pp above the layers, ``kv_tokens`` negative or above 1e15,
            byte counts or ``sequences`` < 1.
    """
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    check_int("tp", tp, 1)
    check_int("pp", pp, 1)
    check_number("kv_tokens", kv_tokens, low=0, high=1e15)       # 1e15 tokens: any cluster's
    check_int("weight_bytes", weight_bytes, 1)
    check_int("kv_dtype_bytes", kv_dtype_bytes, 1)
    check_int("sequences", sequences, 1)
    if model.num_attention_heads % tp:
        raise ValueError(f"tp={tp} must divide num_attention_heads={model.num_attention_heads}")
    kvh = model.kv_heads
    if not model.is_mla and kvh % tp and tp % kvh:
        raise ValueError(f"tp={tp} and the {kvh} KV heads must divide one another (vLLM "
                         f"replicates KV heads when tp is a multiple of them); pick another tp")
    if pp > model.num_hidden_layers:
        raise ValueError(f"pp={pp} exceeds num_hidden_layers={model.num_hidden_layers}")
    if any(w is not None for w in model.layer_windows):    # each sequence capped at W
        held = sequences * kv_cache_bytes(model, kv_tokens / sequences, kv_dtype_bytes)
    else:
        held = kv_tokens * kv_cache_bytes_per_token(model, kv_dtype_bytes)
    kv = held / (pp * kv_cache_split(model, tp))
    return InferenceMemory(weight_bytes * float(model.num_params()) / (tp * pp), float(kv))
