"""Work and depth in seconds of a training step and of decode under tensor, sequence and context
parallelism (book section :ref:`sec-tp-workdepth`), in the terms of
:mod:`rlmperf_lite.cost.workdepth_s`.

Training (the step of :func:`~rlmperf_lite.cost.train_step_time`, pp = 1, no experts). A task
is one layer of one micro-batch of b sequences on its tp x cp group. TP splits the layer's
products over tp GPUs (Shoeybi et al. 2019 §3) and CP its sequence over cp, so on the chain of
one micro-batch the layer's compute shrinks by tp x cp. Each layer adds its collectives to the
chain, ``n_ar`` all-reduces of S = (T / cp) b h A bytes over tp (Megatron's f and g: 2 forward,
2 backward, 2 more with full recompute; with SP each is a reduce-scatter plus an all-gather of
the same bytes, Korthikanti et al. 2022 §4.2.2), and the ring's K/V passes over cp:

    D = L x (compute / (tp cp) + n_ar x (alpha 2 (tp - 1) + 2 (tp - 1)/tp S / bw) + ring)
        + the exposed DP gradient sync
    W = p x (compute + TP + CP time): Megatron's TP and CP collectives sit between dependent
        products, so a GPU waits through them (train_step_time counts them exposed)

TP's share: a layer's all-reduce time over its compute is, exactly in this bookkeeping,

    ratio = kappa (tp - 1) / h x peak eff / bw,    kappa = 2 n_ar A h^2 T L / F

with F the step's training FLOPs per sequence (attention, recompute and LM head included):
kappa = 2/9 for a layer of 12 h^2 matrix weights alone at A = 2 bytes (6 x 12 h^2 FLOPs per
token, 4 all-reduces each sending 2 h A bytes a token). So TP's traffic stays below compute while
tp < 1 + h bw / (kappa peak eff) (:func:`tp_comm_threshold`).

Decode on replicas of tp GPUs: a step is the roofline's ``decode_step_s`` (weights and KV cache
read over tp GPUs) plus 2 L all-reduces of b h A bytes; the chain is its R - 1 steps at batch
1, and the latency 2 (tp - 1) alpha of each all-reduce stops its fall at
:func:`decode_tp_floor`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_choice, check_efficiency, check_int, check_number
from .collective import NVLINK_HOP_LATENCY_S, collective_time_s
from .flops import decode_flops, forward_flops, matmul_weights_per_token
from .hardware import HardwareSpec, resolve_hardware
from .memory import kv_cache_bytes_per_token
from .model import ModelConfig
from .parallel_memory import inference_memory_per_gpu, memory_per_gpu
from .parallel_plan import RECOMPUTE, ParallelPlan, TrainWorkload
from .parallel_step import train_step_time
from .presets import resolve_model
from .rollout import decode_step_s, decode_tp_comm
from .workdepth_s import PhaseWorkDepth, StepTotals

__all__ = ["TPWorkDepth", "tp_train_workdepth", "tp_decode_workdepth", "tp_comm_constant",
           "tp_comm_compute_ratio", "tp_comm_threshold", "cp_overlap_min_chunk_tokens",
           "decode_tp_floor", "ALL_REDUCES_PER_LAYER", "RING_PASSES_PER_LAYER"]

#: The TP all-reduces per layer and micro-batch. Megatron's g after each row-parallel product
#: forward, f before each column-parallel one backward (Shoeybi et al. 2019 §3, Fig. 4);
#: full recompute runs the forward's 2 again (Korthikanti et al. 2022 §5)
ALL_REDUCES_PER_LAYER = {"none": 4, "selective": 4, "full": 6}
#: The CP ring all-gathers of K/V per layer and micro-batch. 1 forward, 2 backward (K/V again and
#: their gradients), 1 more with full recompute (as train_step_time counts them)
RING_PASSES_PER_LAYER = {"none": 3, "selective": 3, "full": 4}

# train_step_time on one GPU of 1 FLOP/s returns a step's training FLOPs as its compute seconds
_FLOP_COUNTER = HardwareSpec(name="1 FLOP/s", peak_flops={"bf16": 1.0}, hbm_bytes=1.0,
                             hbm_bandwidth_bytes_per_s=1.0)


@dataclass(frozen=True)
class TPWorkDepth(StepTotals):
    """W and D of a training step or a decode under TP/SP/CP; the phases run one after
    another. ``layer_compute_s`` and ``layer_comm_s`` are one layer's compute on the chain and
    its TP collectives (training: per micro-batch; decode: per step at the replica's batch);
    ``comm_compute_ratio`` their ratio (training: at bandwidth only, train_step_time's TP over
    compute; decode: latency included); ``threshold_tp`` the tp at which the training ratio
    reaches 1, or at which the decode chain stops shortening; ``measured_s`` train_step_time's
    total, or None (decode)."""

    mode: str
    phases: tuple
    processors: int
    layer_compute_s: float
    layer_comm_s: float
    comm_compute_ratio: float
    threshold_tp: float
    memory_bytes_per_gpu: float
    measured_s: float | None
    inputs: dict = field(default_factory=dict, compare=False, repr=False)


def _train_flops_per_sequence(m: ModelConfig, seq_len: int, recompute: str) -> float:
    """F: training FLOPs of one sequence as train_step_time counts them for ``recompute``."""
    plan = ParallelPlan(recompute=recompute)
    return train_step_time(m, _FLOP_COUNTER, plan, TrainWorkload(1, seq_len)).compute_s


def tp_comm_constant(model, seq_len: int, *, recompute: str = "selective",
                     activation_bytes: int = 2) -> float:
    """kappa = 2 n_ar A h^2 T L / F (module docstring): TP's all-reduce time over compute is
    kappa (tp - 1) / h x peak eff / bw. 2/9 for 12 h^2 weights a layer and nothing else.

    Raises:
        ValueError: a bad model, seq_len, recompute or activation_bytes.
    """
    m = resolve_model(model, "model")
    check_int("seq_len", seq_len, 1)
    check_choice("recompute", recompute, RECOMPUTE)
    check_int("activation_bytes", activation_bytes, 1)
    h, L, n_ar = m.hidden_size, m.num_hidden_layers, ALL_REDUCES_PER_LAYER[recompute]
    # each all-reduce sends 2 (tp - 1)/tp S per rank, S = T h A; compute is F / (tp peak)
    return 2.0 * n_ar * activation_bytes * h**2 * seq_len * L / \
        _train_flops_per_sequence(m, seq_len, recompute)


def tp_comm_compute_ratio(model, hardware, tp: int, seq_len: int, *, recompute="selective",
                          efficiency: float = 1.0, dtype: str = "bf16", activation_bytes: int = 2,
                          bandwidth_bytes_per_s: float | None = None) -> float:
    """kappa (tp - 1) / h x peak eff / bw: train_step_time's TP seconds over its compute
    seconds for any plan of this tp (dp, cp and b cancel). ``bw`` the node's link bandwidth
    unless ``bandwidth_bytes_per_s`` is given (e.g. the network's, for TP across nodes).

    Raises:
        ValueError: as :func:`tp_comm_constant`, tp < 1, efficiency outside [1e-6, 1], a dtype
            the hardware lacks, no bandwidth.
    """
    hw = resolve_hardware(hardware)
    check_int("tp", tp, 1)
    check_efficiency("efficiency", efficiency)
    kappa = tp_comm_constant(model, seq_len, recompute=recompute,
                             activation_bytes=activation_bytes)
    bw = hw.tp_bandwidth(bandwidth_bytes_per_s)
    h = resolve_model(model, "model").hidden_size
    return kappa * (tp - 1) / h * hw.peak(dtype) * efficiency / bw


def tp_comm_threshold(model, hardware, seq_len: int, *, ratio: float = 1.0, **kwargs) -> float:
    """The tp at which TP's traffic reaches ``ratio`` x the compute, tp* = 1 + ratio h bw /
    (kappa peak eff): below it the all-reduces can hide behind compute (if overlapped) or at
    least do not dominate it. Keywords as :func:`tp_comm_compute_ratio`.

    Raises:
        ValueError: ratio <= 0, and as :func:`tp_comm_compute_ratio`.
    """
    check_number("ratio", ratio, low=0, low_open=True)
    per_tp = tp_comm_compute_ratio(model, hardware, 2, seq_len, **kwargs)   # = ratio at tp - 1 = 1
    return 1.0 + ratio / per_tp


def cp_overlap_min_chunk_tokens(model, hardware, *, bandwidth_bytes_per_s: float,
                                efficiency: float = 1.0, dtype: str = "bf16",
                                activation_bytes: int = 2) -> float:
    """The chunk T / cp from which ring attention's K/V passes hide behind the blocks'
    attention: a step sends one chunk's K and V, kv T/cp bytes a layer, while each rank
    computes 1/cp^2 of the causal scores, a T (T + 1) / 2 / cp^2 FLOPs (a per query-key pair a
    layer, zigzag-balanced); so (T + 1) / cp >= 2 kv / a x peak eff / bw. The tp split cancels;
    backward moves and computes twice as much.

    Raises:
        ValueError: a latent-attention (MLA) model (the ring passes decompressed K/V, which the
            cache size does not give), a bad bandwidth, efficiency or dtype.
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    if m.is_mla:
        raise ValueError(f"{m.name} uses latent attention: its ring K/V is not its cache; "
                         f"choose a model without kv_lora_rank")
    check_number("bandwidth_bytes_per_s", bandwidth_bytes_per_s, low=0, low_open=True)
    check_efficiency("efficiency", efficiency)
    L = m.num_hidden_layers
    kv = kv_cache_bytes_per_token(m, activation_bytes) / L           # K and V, one token, layer
    s = 64                                                          # any length: a s^2 / s^2
    a = (forward_flops(m, s, causal=False, lm_head="none")
         - 2.0 * matmul_weights_per_token(m, lm_head=False) * s) / (s * s * L)
    return 2.0 * kv / a * hw.peak(dtype) * efficiency / bandwidth_bytes_per_s


def _check_train(m, plan, workload, latency_s):
    if not isinstance(plan, ParallelPlan):
        raise ValueError(f"plan must be a ParallelPlan, got {type(plan).__name__}")
    if not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")
    if plan.pp > 1 or plan.ep > 1:
        raise ValueError(f"pp={plan.pp}, ep={plan.ep}: this reading covers TP, SP and CP only; "
                         f"set pp=1 and ep=1 (pipelines and experts: pipeline_workdepth_s, "
                         "moe_layer_workdepth_s)")
    if plan.cp > 1 and m.is_mla:
        raise ValueError(f"cp={plan.cp} with {m.name}'s latent attention: its ring K/V is not "
                         f"its cache; use cp=1 or a model without kv_lora_rank")
    check_number("latency_s", latency_s, low=0)


def _layer_collectives_s(m, hw, plan, workload, A, latency_s) -> tuple:
    """(TP, CP) seconds of one layer's collectives for one micro-batch on its chain, and the
    CP group's bandwidth."""
    tp, cp, rc = plan.tp, plan.cp, plan.recompute
    T, b, L = workload.seq_len, workload.micro_batch_size, m.num_hidden_layers
    S = T / cp * b * m.hidden_size * A                             # (T/cp, b, h) activation
    bw = hw.intra_node_bandwidth_bytes_per_s or math.inf           # a TP group: one NVLink domain
    if plan.sp:                                                    # the same bytes, two halves
        one = (collective_time_s("reduce_scatter", S, tp, bw, latency_s)
               + collective_time_s("all_gather", S, tp, bw, latency_s))
    else:
        one = collective_time_s("all_reduce", S, tp, bw, latency_s)
    kv = T * b * kv_cache_bytes_per_token(m, A) / (L * tp)          # the sequence's K/V shard
    # the CP group spans tp x cp consecutive ranks (Megatron's order): NVLink if in a domain
    bw_cp = bw if tp * cp <= hw.nvlink_domain else (hw.inter_node_bandwidth_bytes_per_s
                                                    or math.inf)
    ring = collective_time_s("all_gather", kv, cp, bw_cp, latency_s)   # cp - 1 K/V passes
    return ALL_REDUCES_PER_LAYER[rc] * one, RING_PASSES_PER_LAYER[rc] * ring, bw_cp


def tp_train_workdepth(model, hardware, plan: ParallelPlan, workload: TrainWorkload, *,
                       efficiency: float = 1.0, dtype: str = "bf16", activation_bytes: int = 2,
                       latency_s: float = 0.0) -> TPWorkDepth:
    """W (GPU-s) and D (s) of one training step of ``plan`` (module docstring), phases
    ``layers`` (compute), ``tp_collectives``, ``cp_ring`` and ``dp_sync`` (the DP traffic left
    exposed, a collective all wait for: W = 0), each present when not zero. D is one
    micro-batch's chain; ``measured_s`` is train_step_time's total; ``inputs`` adds the step
    (``step``) and, for cp > 1, :func:`cp_overlap_min_chunk_tokens` at the CP group's bandwidth
    (``cp_min_chunk_tokens``). ``latency_s`` (alpha per ring step) is 0 as in train_step_time,
    which prices collectives at bandwidth.

    Raises:
        ValueError: pp or ep > 1, cp > 1 with an MLA model, a negative latency, and as
            :func:`~rlmperf_lite.cost.train_step_time`.
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    _check_train(m, plan, workload, latency_s)
    step = train_step_time(m, hw, plan, workload, efficiency=efficiency, dtype=dtype,
                           activation_bytes=activation_bytes)
    p, mb, L = plan.gpus, plan.microbatches, m.num_hidden_layers
    chain = step.compute_s / mb                 # b sequences' pass on tp x cp GPUs: b F / (tp cp)
    tp_s, cp_s, bw_cp = _layer_collectives_s(m, hw, plan, workload, activation_bytes,
                                             latency_s)
    phases = [PhaseWorkDepth("layers", step.compute_s * p * hw.peak(dtype) * efficiency,
                             step.compute_s * p, chain, p)]
    for name, layer_s in (("tp_collectives", tp_s), ("cp_ring", cp_s)):
        if layer_s > 0:                         # every micro-batch's chain, every GPU waiting
            phases.append(PhaseWorkDepth(name, 0.0, p * mb * L * layer_s, L * layer_s, p))
    if step.dp_exposed_s > 0:
        phases.append(PhaseWorkDepth("dp_sync", 0.0, 0.0, step.dp_exposed_s, p))
    kw = dict(recompute=plan.recompute, efficiency=efficiency, dtype=dtype,
              activation_bytes=activation_bytes)
    chunk = None if plan.cp == 1 else cp_overlap_min_chunk_tokens(
        m, hw, bandwidth_bytes_per_s=bw_cp, efficiency=efficiency, dtype=dtype,
        activation_bytes=activation_bytes)
    return TPWorkDepth(
        "train", tuple(phases), p, chain / L, tp_s,
        tp_comm_compute_ratio(m, hw, plan.tp, workload.seq_len, **kw),
        tp_comm_threshold(m, hw, workload.seq_len, **kw),
        memory_per_gpu(m, plan, workload).total_bytes, step.total_s,
        inputs={"model": m, "hardware": hw, "plan": plan, "workload": workload, "step": step,
                "latency_s": latency_s, "cp_bandwidth_bytes_per_s": bw_cp,
                "cp_min_chunk_tokens": chunk})


def _decode_all_reduces_s(m, hw, tp, batch, A, latency_s):
    """Seconds of one decode step's 2 L all-reduces of (batch, h) activations over tp."""
    return decode_tp_comm(m, hw, tp, batch, activation_bytes=A, latency_s=latency_s).total_s


def _decode_rates(train_efficiency, decode_efficiency, dtype):
    check_efficiency("train_efficiency", train_efficiency)
    check_efficiency("decode_efficiency", decode_efficiency)
    return dict(train_efficiency=train_efficiency, decode_efficiency=decode_efficiency,
                dtype=dtype)


def decode_tp_floor(model, hardware, *, batch: int = 1, prompt_len: int = 512,
                    response_len: int = 4096, latency_s: float = NVLINK_HOP_LATENCY_S,
                    activation_bytes: int = 2, bandwidth_bytes_per_s: float | None = None,
                    train_efficiency: float = 1.0, decode_efficiency: float = 1.0,
                    dtype: str = "bf16") -> float:
    """The tp that minimises the decode chain D(tp) = sum_j tau_j / tp + (R - 1) 2 L
    (2 (tp - 1) alpha + 2 (tp - 1)/tp s / bw), tau_j the step at tp = 1 (decode_step_s divides
    by tp) and s = b h A: tp* = sqrt((mean tau - 4 L s / bw) / (4 L alpha)). Beyond it the
    all-reduces' latency outgrows what tp saves; 1 if no tp helps, inf if alpha = 0.

    Raises:
        ValueError: naming a bad batch, length, latency, efficiency or bandwidth.
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    for label, v, low in (("batch", batch, 1), ("prompt_len", prompt_len, 1),
                          ("response_len", response_len, 2)):
        check_int(label, v, low)
    check_number("latency_s", latency_s, low=0)
    rates = _decode_rates(train_efficiency, decode_efficiency, dtype)
    ctx = prompt_len + np.arange(1, response_len)                    # (R - 1,) contexts
    tau = float(decode_step_s(m, hw, batch=batch, context=ctx, tp=1, **rates).mean())
    L, bw = m.num_hidden_layers, hw.tp_bandwidth(bandwidth_bytes_per_s)
    saved = tau - 4 * L * batch * m.hidden_size * activation_bytes / bw
    if saved <= 0:
        return 1.0
    if latency_s == 0:
        return math.inf
    return max(1.0, math.sqrt(saved / (4 * L * latency_s)))


def tp_decode_workdepth(model, hardware, tp: int, *, sequences: int = 512, gpus: int = 64,
                        prompt_len: int = 512, response_len: int = 4096,
                        latency_s: float = NVLINK_HOP_LATENCY_S, activation_bytes: int = 2,
                        train_efficiency: float = 1.0, decode_efficiency: float = 1.0,
                        dtype: str = "bf16") -> TPWorkDepth:
    """W and D of decoding ``sequences`` responses of ``response_len`` tokens on gpus / tp
    replicas of tp GPUs: phases ``decode`` (decode_step_s at the replica's batch b for W, at
    batch 1 for D, over the R - 1 dependent steps) and ``decode_all_reduces`` (2 L per step, of
    b h A bytes; D at batch 1). ``layer_compute_s`` and ``layer_comm_s`` are one step's
    weights-and-KV time and all-reduce time at b, divided by L; ``threshold_tp`` is
    :func:`decode_tp_floor`; ``memory_bytes_per_gpu`` the replica's weights and KV cache.

    Raises:
        ValueError: tp above the NVLink domain or not dividing gpus, tp and the heads not
            dividing one another, response_len < 2, and bad rates or latency.
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    for label, v, low in (("tp", tp, 1), ("sequences", sequences, 1), ("gpus", gpus, 1),
                          ("prompt_len", prompt_len, 1), ("response_len", response_len, 2)):
        check_int(label, v, low)
    if tp > hw.nvlink_domain or gpus % tp:
        raise ValueError(f"tp={tp} must fit in an NVLink domain of {hw.nvlink_domain} GPUs and "
                         f"divide gpus={gpus}")
    rates = _decode_rates(train_efficiency, decode_efficiency, dtype)
    b = math.ceil(sequences / (gpus // tp))                          # sequences per replica
    mem = inference_memory_per_gpu(m, tp, kv_tokens=b * (prompt_len + response_len),
                                   sequences=b)
    ctx = prompt_len + np.arange(1, response_len)                    # (R - 1,) contexts
    at_b = decode_step_s(m, hw, batch=b, context=ctx, tp=tp, **rates)
    alone = decode_step_s(m, hw, batch=1, context=ctx, tp=tp, **rates)
    ar_b, ar_1 = (_decode_all_reduces_s(m, hw, tp, n, activation_bytes, latency_s)
                  for n in (b, 1))
    steps, share = response_len - 1, tp * sequences / b              # a sequence's share, x tp
    phases = [PhaseWorkDepth("decode", decode_flops(m, [prompt_len] * sequences, response_len),
                             share * float(at_b.sum()), float(alone.sum()), gpus)]
    if tp > 1:
        phases.append(PhaseWorkDepth("decode_all_reduces", 0.0, share * steps * ar_b,
                                     steps * ar_1, gpus))
    L = m.num_hidden_layers
    return TPWorkDepth(
        "decode", tuple(phases), gpus, float(at_b.mean()) / L, ar_b / L,
        ar_b / float(at_b.mean()),
        decode_tp_floor(m, hw, batch=1, prompt_len=prompt_len, response_len=response_len,
                        latency_s=latency_s, activation_bytes=activation_bytes, **rates),
        mem.total_bytes, None,
        inputs={"model": m, "hardware": hw, "tp": tp, "batch_per_replica": b,
                "latency_s": latency_s, "step_s": float(at_b.mean()), "all_reduce_s": ar_b})
