"""The rollout of an RL step on inference replicas, and the weight sync that feeds them (book
section :ref:`sec-step-7b`).

Modelling choices, stated once:

- The rollout runs on ``gpus / tp`` replicas of ``tp`` GPUs each: tp is the smallest power of
  two within an NVLink domain whose HBM holds the bf16 weights with 30% left for the KV cache.
- Prefill: each prompt is prefilled once (its G samples share the cache, as engines do with
  ``n`` samples); prompts are spread evenly over replicas; the busiest replica sets the time.
- Decode: samples are dealt to replicas longest first, round-robin (balanced as if lengths were
  known in advance, an optimistic schedule); each replica decodes its samples as one batch,
  one token per step, until its longest response ends. A step reads the weights (for MoE, the
  experts that step's batch is expected to touch) and the KV cache of every running sequence
  (a sliding-window layer's last W tokens only). The phase's bytes are the busiest replica's
  times the replicas that hold a sequence (idle replicas move nothing).
- Weights and KV cache are bf16 (2 bytes). KV heads split across tp (replicated beyond the
  number of KV heads; a latent-attention cache is replicated).
- Tensor parallelism: a replica of tp > 1 GPUs all-reduces each layer's attention and MLP
  outputs every decode step, after their row-parallel products (Shoeybi et al. 2019 §3), on
  top of the step's roofline time (:func:`decode_tp_comm`). MoE layers count the same two (the
  experts split by tp); expert-parallel all-to-alls are out of scope. We cost each as a ring,
  2 (tp - 1) steps of alpha = 3.4 us, NCCL's NVLink ring Simple-protocol latency
  (NVIDIA/nccl src/graph/tuning.cc, hwLat). Engines do better for these small messages: vLLM's
  custom all-reduce (within a node, tp in 2, 4, 6, 8, under 8 MB) runs one-shot — every rank
  reads its peers' buffers, one step — at tp 2 and below 512 KB (tp <= 4) or 256 KB (tp <= 8),
  and two-shot (reduce-scatter, all-gather) above (vllm-project/vllm csrc/custom_all_reduce.cuh
  ``allreduce``; vllm/distributed/device_communicators/custom_all_reduce.py ``max_size``);
  NCCL's LL protocol hops in 0.47 us (the same table). So the ring is a conservative stand-in:
  pass a measured ``latency_s``. Any power of two the model's heads and the node allow
  (:func:`rollout_tp_choices`) may be chosen; the default is the smallest that fits.
- Weight sync (:func:`weight_sync_s`, the bandwidth bound): the trainer's bf16 weights
  all-gathered onto every GPU, hierarchically: the part from other nodes over the node's
  network cards, the rest over NVLink.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import check_int, check_number, check_real_array
from .collective import NVLINK_HOP_LATENCY_S, collective_time_s
from .flops import (attended_keys, attention_flops_per_pair, attention_pairs, causal_pairs,
                    decode_flops, matmul_weights_per_token, prefill_flops)
from .hardware import HardwareSpec
from .memory import kv_cache_bytes, kv_cache_bytes_per_token, kv_cache_split
from .model import ModelConfig
from .phase import PhaseEstimate
from .roofline import params_read_per_step

__all__ = ["rollout_tp", "rollout_tp_choices", "check_rollout_tp", "DecodeTPComm",
           "decode_tp_comm", "rollout_phases", "decode_step_s", "prefill_s", "weight_sync_s",
           "mean_decode_context"]


def rollout_tp(model: ModelConfig, hw: HardwareSpec, gpus: int, kv_share: float = 0.3) -> int:
    """Smallest power-of-two TP degree within an NVLink domain whose HBM holds the bf16 weights
    with ``kv_share`` of it left for the KV cache (capped by the domain and by ``gpus``)."""
    tp, weights = 1, 2.0 * model.num_params()
    while weights / tp > (1 - kv_share) * hw.hbm_bytes and tp * 2 <= min(hw.nvlink_domain, gpus):
        tp *= 2
    return tp


def _tp_rule_broken(model: ModelConfig, hw: HardwareSpec, gpus: int, tp: int) -> str | None:
    """The first rule ``tp`` breaks as a replica size of ``model`` on ``gpus`` GPUs, or None."""
    smallest, top = rollout_tp(model, hw, gpus), min(hw.nvlink_domain, gpus)
    if tp & (tp - 1):
        return "a power of two"
    if tp < smallest:
        return f">= {smallest}, the smallest replica whose HBM holds the weights (rollout_tp)"
    if tp > top:
        return (f"<= {top}, the GPUs of an NVLink domain ({hw.nvlink_domain}) and of the pool "
                f"({gpus})")
    if gpus % tp:
        return f"a divisor of the pool's {gpus} GPUs"
    # vLLM refuses heads that do not split evenly (ModelConfig.verify_with_parallel_config);
    # its QKVParallelLinear splits the KV heads, or replicates them when tp exceeds them
    if model.num_attention_heads % tp:
        return f"a divisor of num_attention_heads={model.num_attention_heads}"
    kv = model.kv_heads
    if not model.is_mla and kv % tp and tp % kv:
        return f"a divisor or a multiple of num_key_value_heads={kv}"
    return None


def rollout_tp_choices(model: ModelConfig, hw: HardwareSpec, gpus: int) -> tuple:
    """The replica sizes an engine of ``model`` may use on ``gpus`` GPUs: powers of two from
    :func:`rollout_tp` up to min(NVLink domain, gpus) that divide ``gpus`` and split the heads
    (:func:`check_rollout_tp`'s rules), smallest first; empty if none does."""
    check_int("gpus", gpus, 1)
    out, tp = [], rollout_tp(model, hw, gpus)
    while tp <= min(hw.nvlink_domain, gpus):
        if _tp_rule_broken(model, hw, gpus, tp) is None:
            out.append(tp)
        tp *= 2
    return tuple(out)


def check_rollout_tp(label: str, tp, model: ModelConfig, hw: HardwareSpec, gpus: int) -> None:
    """ValueError naming ``label`` unless ``tp`` is an int replica size of ``model`` on ``gpus``
    GPUs: a power of two, >= :func:`rollout_tp`, <= min(NVLink domain, gpus), dividing ``gpus``
    and ``num_attention_heads``, and dividing or a multiple of the KV heads (vLLM's rules)."""
    check_int(label, tp, 1)
    why = _tp_rule_broken(model, hw, gpus, tp)
    if why is not None:
        raise ValueError(f"{label}={tp} must be {why} for {model.name} on {gpus} x {hw.name}; "
                         f"allowed: {rollout_tp_choices(model, hw, gpus) or 'none'}")


@dataclass(frozen=True)
class DecodeTPComm:
    """One decode step's tensor-parallel all-reduces on a replica (:func:`decode_tp_comm`)."""

    all_reduces: int
    """2 L at tp > 1 (attention output, MLP output per layer), 0 at tp = 1."""
    message_bytes: float
    """b h A, the (b, h) activations each all-reduce sums."""
    latency_s: float
    """The latency, all_reduces x 2 (tp - 1) alpha, whatever the batch."""
    bandwidth_s: float
    """The link time, all_reduces x 2 (tp - 1) / tp x message_bytes / busbw, linear in the batch."""
    batch: float
    """b, the sequences the step decodes."""

    @property
    def total_s(self) -> float:
        """Seconds the step's all-reduces add to its roofline time."""
        return self.latency_s + self.bandwidth_s

    @property
    def per_seq_s(self) -> float:
        """bandwidth_s per running sequence (0 for an empty batch)."""
        return self.bandwidth_s / self.batch if self.batch else 0.0


def decode_tp_comm(model: ModelConfig, hw: HardwareSpec, tp: int, batch: float = 1, *,
                   activation_bytes: int = 2, latency_s: float = NVLINK_HOP_LATENCY_S,
                   bandwidth_bytes_per_s: float | None = None) -> DecodeTPComm:
    """One decode step's all-reduces on a replica of ``tp`` GPUs running ``batch`` sequences:
    2 L ring all-reduces of S = b h A bytes, each 2 (tp - 1) alpha + 2 (tp - 1)/tp S / busbw
    (:func:`~rlmperf_lite.cost.collective_time_s`; the module docstring says what engines run).
    busbw defaults to the hardware's intra-node bandwidth.

    Raises:
        ValueError: naming ``tp`` (< 1 or beyond the NVLink domain), ``batch``,
            ``activation_bytes``, ``latency_s`` or ``bandwidth_bytes_per_s`` (or a hardware
            without an intra-node bandwidth at tp > 1).
    """
    check_int("tp", tp, 1)
    if tp > hw.nvlink_domain:           # beyond it the all-reduce is not an NVLink ring
        raise ValueError(f"tp={tp} exceeds the NVLink domain of {hw.name} "
                         f"({hw.nvlink_domain} GPUs): a replica's all-reduces run within it")
    check_number("batch", batch, low=0)
    check_int("activation_bytes", activation_bytes, 1)
    check_number("latency_s", latency_s, low=0)
    S = float(batch) * model.hidden_size * activation_bytes                  # bytes, (b, h)
    if tp == 1:
        return DecodeTPComm(0, S, 0.0, 0.0, float(batch))
    bw = hw.tp_bandwidth(bandwidth_bytes_per_s)
    n = 2 * model.num_hidden_layers
    latency = n * collective_time_s("all_reduce", 0.0, tp, bw, latency_s)   # the alpha part
    bandwidth = n * collective_time_s("all_reduce", S, tp, bw)              # the beta part
    return DecodeTPComm(n, S, latency, bandwidth, float(batch))


def rollout_phases(actor: ModelConfig, hw: HardwareSpec, *, prefill_prompts: int,
                   prompt_len: int, lengths: np.ndarray, gpus: int, tp: int,
                   train_efficiency: float, decode_efficiency: float, dtype: str,
                   resident: float) -> tuple:
    """(prefill, decode) :class:`PhaseEstimate` for ``lengths`` (one response length per
    sample); ``resident`` is the per-GPU memory already held (training states)."""
    replicas = gpus // tp
    w_bytes = 2.0 * actor.num_params()
    kv_tok = kv_cache_bytes_per_token(actor)
    kv_div = kv_cache_split(actor, tp)
    peak, bw = hw.peak(dtype) * tp, hw.hbm_bandwidth_bytes_per_s * tp
    engine = {"model states": resident, "weights": w_bytes / tp}
    rates = dict(tp=tp, train_efficiency=train_efficiency, decode_efficiency=decode_efficiency,
                 dtype=dtype)
    # prefill: the busiest replica prefills ceil(prompts / replicas) prompts
    per_rep = math.ceil(prefill_prompts / replicas)
    pf_rep = prefill_flops(actor, [prompt_len] * per_rep)
    pf_kv = per_rep * kv_cache_bytes(actor, prompt_len)     # a window keeps its last W tokens
    pf_bytes = w_bytes + pf_kv
    pf_t = prefill_s(actor, hw, prompts=per_rep, prompt_len=prompt_len, **rates)
    prefill = PhaseEstimate(
        "rollout_prefill", "actor", prefill_flops(actor, [prompt_len] * prefill_prompts),
        min(replicas, prefill_prompts) * pf_bytes, pf_t,
        "compute" if pf_rep / pf_bytes >= peak / bw else "memory",
        {**engine, "KV cache": pf_kv / kv_div})
    # decode: the busiest replica's batch, step by step (1-D over steps: memory O(R))
    desc = np.sort(lengths)[::-1]
    deal = np.arange(desc.size) % replicas                    # longest first, round-robin
    busiest = desc[deal == int(np.argmax(np.bincount(deal, weights=desc)))]
    ordered = np.sort(busiest)
    steps = int(ordered[-1]) - 1
    j = np.arange(1, steps + 1, dtype=np.float64)
    active = ordered.size - np.searchsorted(ordered, j, side="right")    # still running
    ctx = active * attended_keys(actor, prompt_len + j)       # keys read, summed over the batch
    step_flops = (active * 2.0 * matmul_weights_per_token(actor)
                  + attention_flops_per_pair(actor) * ctx)
    step_bytes = 2.0 * params_read_per_step(actor, active) + kv_tok * ctx
    comm = decode_tp_comm(actor, hw, tp)                     # 0 at tp = 1
    step_t = (decode_step_s(actor, hw, batch=active, context=prompt_len + j, **rates)
              + comm.latency_s + active * comm.per_seq_s)   # all-reduces after the roofline
    mem_bound = (step_bytes / bw).sum() >= (step_flops / peak).sum()
    kv_peak = kv_tok * float(attended_keys(actor, prompt_len + busiest).sum()) / kv_div
    # every replica that holds a sequence moves the busiest one's bytes; idle ones move none
    decode = PhaseEstimate("rollout_decode", "actor", decode_flops(actor, prompt_len, lengths),
                           float(step_bytes.sum()) * min(replicas, desc.size),
                           float(step_t.sum()),
                           "memory" if steps == 0 or mem_bound else "compute",
                           {**engine, "KV cache": kv_peak})
    return prefill, decode


def decode_step_s(actor: ModelConfig, hw: HardwareSpec, *, batch, context, tp: int = 1,
                  train_efficiency: float = 1.0, decode_efficiency: float = 1.0,
                  dtype: str = "bf16"):
    """Seconds of one decode step of ``batch`` sequences whose caches hold ``context`` tokens
    each, on a replica of ``tp`` GPUs (ints or arrays, broadcast):
    max(b (2 N_mm + a c) / (tp peak e_t), (2 N_read(b) + b c kv) / (tp bw e_d)), with c the
    keys a query reads (``context``, capped by sliding windows:
    ``attended_keys``), N_mm the matrix weights, a the attention
    FLOPs per key (``decode_flops``),
    N_read(b) the weights a batch of b touches
    (:func:`~rlmperf_lite.cost.roofline.params_read_per_step`), kv the bytes per cached token."""
    b = np.asarray(batch, dtype=np.float64)
    c = attended_keys(actor, np.asarray(context, dtype=np.float64))     # window-capped
    flops = b * (2.0 * matmul_weights_per_token(actor) + attention_flops_per_pair(actor) * c)
    moved = 2.0 * params_read_per_step(actor, b) + b * c * kv_cache_bytes_per_token(actor)
    with np.errstate(over="ignore"):        # a tiny efficiency: inf, refused by the estimate
        return np.maximum(flops / (tp * hw.peak(dtype) * train_efficiency),
                          moved / (tp * hw.hbm_bandwidth_bytes_per_s * decode_efficiency))


def prefill_s(actor: ModelConfig, hw: HardwareSpec, *, prompts: int, prompt_len: int,
              tp: int = 1, train_efficiency: float = 1.0, decode_efficiency: float = 1.0,
              dtype: str = "bf16") -> float:
    """Seconds to prefill ``prompts`` prompts of ``prompt_len`` tokens as one batch on a replica
    of ``tp`` GPUs: max(F / (tp peak e_t), (2 N + prompts P kv) / (tp bw e_d)), the weights read
    once for the batch and each prompt's KV cache written (a sliding-window layer's last W
    tokens of it, ``kv_cache_bytes``)."""
    flops = prefill_flops(actor, [prompt_len] * prompts)
    moved = 2.0 * actor.num_params() + prompts * kv_cache_bytes(actor, prompt_len)
    return max(flops / (tp * hw.peak(dtype) * train_efficiency),
               moved / (tp * hw.hbm_bandwidth_bytes_per_s * decode_efficiency))


def weight_sync_s(weight_bytes: float, hw: HardwareSpec, gpus: int) -> float:
    """The pure bandwidth bound of a weight sync (the mechanism model is
    :func:`rlmperf_lite.cost.weight_sync_time_s`, whose ``gather`` stage this is): seconds to
    all-gather ``weight_bytes`` onto every one of ``gpus`` GPUs, hierarchically: the share held
    in other NVLink domains crosses each domain's network cards (one per GPU), then the share
    held by other GPUs of the domain crosses NVLink (each GPU receives (n-1)/n of the data of a
    ring all-gather over n)."""
    per_node = min(gpus, hw.nvlink_domain)                   # GPUs per NVLink domain
    nodes = math.ceil(gpus / per_node)
    intra = hw.intra_node_bandwidth_bytes_per_s or hw.hbm_bandwidth_bytes_per_s
    t = weight_bytes * (1 - 1 / per_node) / intra
    if nodes > 1:
        inter = hw.inter_node_bandwidth_bytes_per_s or intra
        t += weight_bytes * (1 - 1 / nodes) / (per_node * inter)
    return t


def mean_decode_context(prompt_len: int, lengths, weights=None, *, model=None) -> float:
    """Tokens in a running sequence's KV cache, averaged over every (sequence, iteration) of a
    decode in which a sequence of R tokens runs R iterations holding P, P + 1, ..., P + R - 1
    tokens: sum_i w_i (R_i P + R_i (R_i - 1) / 2) / sum_i w_i R_i = P + (E[R^2] / E[R] - 1) / 2.

    Long responses run longer, so the mean is length-biased: P + E[R^2] / (2 E[R]) - 1/2, not
    P + E[R] / 2 (they agree only when every length is the same). ``lengths`` are samples
    (``weights`` None) or the support of a distribution with probabilities ``weights``. With
    ``model``, the cache each layer keeps is capped at its sliding window: the mean of
    ``attended_keys``, from the closed-form sums
    ``causal_pairs``. ``prompt_len + 1`` gives the mean keys the
    new token attends (the cache plus itself).

    Raises:
        ValueError: naming ``prompt_len`` (< 0), ``lengths`` (not whole numbers >= 1) or
            ``weights`` (negative, all zero, or not one per length).
    """
    check_int("prompt_len", prompt_len, 0)
    R = check_real_array("lengths", lengths, max_ndim=2, low=1).reshape(-1)
    if np.any(R != np.round(R)):
        raise ValueError(f"lengths must be whole numbers of tokens, got {lengths!r}")
    w = np.ones_like(R) if weights is None else \
        check_real_array("weights", weights, max_ndim=2, low=0).reshape(-1)
    if w.shape != R.shape or not w.sum() > 0:
        raise ValueError(f"weights must be one non-negative weight per length, not all zero; "
                         f"got {w.size} for {R.size} lengths")
    # sum_{k=1}^{R} keys(P + k - 1) = S(P + R - 1) - S(P - 1), S(n) = sum_{c=1}^{n} keys(c)
    if model is None:
        held = causal_pairs(prompt_len + R - 1) - causal_pairs(prompt_len - 1)
    else:
        held = attention_pairs(model, prompt_len + R - 1) - attention_pairs(model, prompt_len - 1)
    return float((w * held).sum() / (w * R).sum())
