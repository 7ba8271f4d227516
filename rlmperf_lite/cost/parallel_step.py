"""Time of one training step under a parallel layout: compute, pipeline bubble and the
communication of each kind of parallelism (book sections :ref:`sec-dp-workdepth`,
:ref:`sec-tp-at-scale` and :ref:`sec-choose-plan`).

The model, stated once (T sequence length, b micro-batch, D width, L layers, m microbatches,
p = pp, v interleave, activations and gradients bf16 = 2 bytes):

- Compute, stage by stage: a stage's layers (``ParallelPlan.stage_layers``) each take 1 / L
  of the training FLOPs of the layers (:func:`rlmperf_lite.cost.train_flops` without the LM
  head; full recompute adds a forward of the layers, selective recompute the attention core's
  forward); the last stage adds the LM head's logits matmul, 2 V D per token forward and twice
  that backward, never recomputed; the first stage's embedding is a lookup, no matmul FLOPs
  (``rlmperf_lite.cost.flops``; the log-softmax is not counted either). Each stage's FLOPs
  run on its dp x tp x cp GPUs at ``efficiency`` of the peak. The stages run in lockstep, so
  each microbatch slot lasts as long as the slowest stage's work: the stage with the most
  compute plus per-layer traffic (TP, CP, EP, counted on its layers, its MoE share of them).
  pp = 1: the whole step's FLOPs over the GPUs.
- TP (Narayanan et al. 2021 §2.3, Fig. 5): per layer and microbatch, 2 all-reduces forward and
  2 backward of the (T / cp) b D activations; with sequence parallelism each becomes an
  all-gather plus a reduce-scatter, the same bytes and time (Korthikanti et al. 2022 §4.2.2).
  Full recompute repeats the forward's 2.
- CP (ring attention, as Megatron-Core's context parallelism): per layer and microbatch, the
  keys and values of the whole sequence pass around the ring once forward (an all-gather of
  T b x KV width / tp) and twice backward (keys and values again, their gradients back: an
  all-gather and a reduce-scatter); full recompute repeats the forward's.
- EP (Megatron-Core's all-to-all dispatcher): per MoE layer and microbatch, 2 all-to-alls
  forward (dispatch, combine) and 2 backward, each of the GPU's T b / (cp tp) tokens x top-k
  x D; full recompute repeats the forward's.
- PP: per microbatch and model chunk, one activation forward and one gradient backward of
  T b D / (cp tp) bytes, point to point (Megatron's scatter/gather optimisation, Narayanan et
  al. 2021 §4.1, or the sequence-parallel tensor).
- DP (ZeRO paper §7): gradients of the GPU's parameters (non-expert over the dp x cp ranks,
  routed experts over dp x cp / ep). Stage 0: one all-reduce per step; stage 1: a
  reduce-scatter of gradients and an all-gather of updated weights per step; stage 2: the
  reduce-scatter at every microbatch (gradients are kept sharded), the all-gather per step;
  stage 3: per microbatch a reduce-scatter and two all-gathers of the weights (forward and
  backward). Sizes are of the stage with the most parameters.
- Placement: ranks ordered tp, cp, (ep,) dp, pp, tp innermost (Megatron-Core's default
  tp-cp-ep-dp-pp); a group runs at the NVLink bandwidth when the ranks it spans fit in an
  NVLink domain (``HardwareSpec.nvlink_domain``: a node of 8, or a 72-GPU NVL72 rack) — tp;
  tp x cp; tp x ep; tp x cp x dp; the whole tp x cp x dp x pp for the pipeline — and at the
  per-GPU network bandwidth otherwise. Link bandwidths are used as bus
  bandwidths (:mod:`rlmperf_lite.cost.collective`).
- Overlap: a share ``overlap`` of the DP traffic is hidden behind compute, at most: for the
  gradients' once-per-step all-reduce (stage 0) or reduce-scatter (stage 1), the last
  microbatch's backward (PyTorch DDP's bucketing, Megatron's --overlap-grad-reduce, ZeRO's
  overlap_comm); for the all-gather of the updated weights (stages 1-2), which can only start
  after the optimizer step, the next step's first microbatch forward (Megatron's
  --overlap-param-gather); for stage 2's per-microbatch reduce-scatters, every microbatch's
  backward; for stage 3's gathers and reduce-scatters, the whole forward and backward. TP, CP,
  EP and PP traffic is exposed (on the critical path).
- Pipeline: the bubble (p - 1) / (v m) (:func:`rlmperf_lite.cost.pipeline_bubble_fraction`)
  of the per-microbatch work of the slowest stage, compute plus TP, CP and EP traffic.

    total = compute + TP + CP + EP + bubble + PP + exposed DP
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_efficiency, check_int, check_number
from .collective import bus_factor, collective_time_s_array
from .flops import forward_flops, matmul_weights_per_token, train_flops
from .hardware import HardwareSpec
from .model import ModelConfig
from .parallel_memory import stage_param_arrays
from .parallel_plan import (RECOMPUTE, ParallelPlan, TrainWorkload, plan_columns,
                            stage_layer_arrays)

__all__ = ["TrainStepTime", "train_step_time", "stage_train_flops", "COMM_KINDS"]

COMM_KINDS = ("dp", "tp", "pp", "cp", "ep")


@dataclass(frozen=True)
class TrainStepTime:
    """Seconds of one step and their parts (module docstring). ``comm_s`` and
    ``comm_bytes_per_gpu`` map "dp", "tp", "pp", "cp", "ep" to the seconds of that traffic and
    the bytes one GPU sends; ``dp_exposed_s`` is the DP time not hidden behind backward."""

    compute_s: float
    bubble_s: float
    comm_s: dict
    comm_bytes_per_gpu: dict
    dp_exposed_s: float
    total_s: float

    @property
    def comm_share(self) -> float:
        """Share of the step spent in exposed communication."""
        return (self.total_s - self.compute_s - self.bubble_s) / self.total_s

    @property
    def bubble_share(self) -> float:
        return self.bubble_s / self.total_s

    def as_dict(self) -> dict:
        return {"compute_s": self.compute_s, "bubble_s": self.bubble_s,
                **{f"{k}_comm_s": v for k, v in self.comm_s.items()},
                **{f"{k}_comm_bytes_per_gpu": v for k, v in self.comm_bytes_per_gpu.items()},
                "dp_exposed_s": self.dp_exposed_s, "total_s": self.total_s,
                "comm_share": self.comm_share, "bubble_share": self.bubble_share}


def _kv_width(m: ModelConfig) -> int:
    """Key plus value elements per token per layer as attention uses them (MLA decompressed)."""
    if m.is_mla:
        return m.num_attention_heads * (m.head_size + m.v_head_dim)
    return 2 * m.kv_heads * m.head_size


def check_links(hw: HardwareSpec) -> None:
    """ValueError unless ``hw`` has both link bandwidths a parallel step needs."""
    if hw.intra_node_bandwidth_bytes_per_s is None or hw.inter_node_bandwidth_bytes_per_s is None:
        raise ValueError(f"hardware {hw.name!r} has no intra/inter-node link bandwidths; "
                         f"a parallel step needs both (use a GPU preset such as 'h100')")


def step_time_arrays(m: ModelConfig, hw: HardwareSpec, cols: dict, workload: TrainWorkload,
                     efficiency: float = 1.0, overlap: float = 1.0, dtype: str = "bf16",
                     activation_bytes: int = 2, grad_bytes: int = 2,
                     weight_bytes: int = 2) -> dict:
    """:func:`train_step_time` for every plan in ``cols`` (:func:`plan_columns`) at once."""
    z, mb = cols["zero_stage"], cols["microbatches"].astype(np.float64)
    pp, v = cols["pp"].astype(np.float64), cols["interleave"].astype(np.float64)
    layers = stage_layer_arrays(m.num_hidden_layers, pp, cols["first_stage_layers"],
                                cols["last_stage_layers"])             # first, middle, last, n
    stage_compute, stage_backward = _stage_compute_s(m, hw, cols, workload, layers[:3],
                                                     efficiency, dtype)   # (3, plans) each
    nvl = hw.nvlink_domain
    intra, inter = hw.intra_node_bandwidth_bytes_per_s, hw.inter_node_bandwidth_bytes_per_s

    def bw(span):
        return np.where(span <= nvl, intra or np.inf, inter or np.inf)   # missing: n = 1 only

    sec, vol = _model_parallel_comm(m, cols, workload, activation_bytes, bw)   # L / p layers
    share = np.stack(layers[:3]) * pp / m.num_hidden_layers            # (3, plans) of L / p
    even_comm = sec["tp"] + sec["cp"] + sec["ep"]                      # per L / p layers
    slot = stage_compute + even_comm * share                           # each stage's work
    slot[1] = np.where(pp > 2, slot[1], -np.inf)                       # no middle stage
    slot[0] = np.where(pp > 1, slot[0], -np.inf)                       # pp = 1: the last only
    k = np.argmax(slot, axis=0)                                        # the slowest stage
    compute, backward, share = (np.choose(k, x) for x in (stage_compute, stage_backward, share))
    for key in ("tp", "cp", "ep"):
        sec[key], vol[key] = sec[key] * share, vol[key] * share
    params = stage_param_arrays(m, pp, *layers[:3])
    grad_step, param_step, micro_s, vol["dp"] = _dp_comm(cols, params, grad_bytes, weight_bytes,
                                                         bw)
    sec["dp"] = grad_step + param_step + micro_s
    forward = compute - backward
    exposed = (grad_step - np.minimum(overlap * grad_step, backward / mb)
               + param_step - np.minimum(overlap * param_step, forward / mb)
               + micro_s - np.minimum(overlap * micro_s, np.where(z == 3, compute, backward)))
    # pipeline bubble over the per-microbatch work
    bubble = (pp - 1) / (v * mb) * (compute + sec["tp"] + sec["cp"] + sec["ep"])
    total = compute + sec["tp"] + sec["cp"] + sec["ep"] + bubble + sec["pp"] + exposed
    return {"compute_s": compute, "bubble_s": bubble, "dp_exposed_s": exposed,
            "total_s": total, **{f"{k}_comm_s": sec[k] for k in COMM_KINDS},
            **{f"{k}_comm_bytes_per_gpu": vol[k] for k in COMM_KINDS}}


def stage_train_flops(model: ModelConfig, seq_len: int, recompute: str = "none") -> dict:
    """Training FLOPs per sequence of T = ``seq_len`` tokens that a pipeline stage runs, as a
    breakdown (module docstring): "layer" (one layer's forward and backward with the
    recomputation, 1 / L of the layers'), "layer_forward", and the extras of the first stage
    ("embedding": a lookup, 0 matmul FLOPs) and of the last ("lm_head": 3 x 2 V D T, the logits'
    matmul forward and backward, never recomputed; "lm_head_forward": 2 V D T). Qwen3-235B-A22B
    at T = 4,608: the head is 2.39 layers. Source: :func:`rlmperf_lite.cost.train_flops`.

    Raises:
        ValueError: a bad model, length or recompute mode.
    """
    check_choice("recompute", recompute, RECOMPUTE)
    body_fwd = forward_flops(model, seq_len, lm_head="none")            # the layers' forward
    head_fwd = forward_flops(model, seq_len) - body_fwd                 # 2 V D T, the logits
    attn = body_fwd - 2.0 * matmul_weights_per_token(model, lm_head=False) * seq_len
    extra = {"none": 0.0, "selective": attn, "full": body_fwd}[recompute]   # rerun forward
    L = model.num_hidden_layers
    return {"layer": (3.0 * body_fwd + extra) / L, "layer_forward": body_fwd / L,
            "embedding": 0.0, "lm_head": 3.0 * head_fwd, "lm_head_forward": head_fwd}


def _stage_compute_s(m, hw, cols, workload, layers, efficiency, dtype) -> tuple:
    """(compute, its backward part) in seconds of the first, middle and last stage per plan,
    (3, plans) each: the stage's layers' :func:`rlmperf_lite.cost.stage_train_flops` plus the
    first stage's embedding and the last's LM head, B sequences over the stage's dp x tp x cp
    GPUs at ``efficiency`` of the peak. pp = 1: the last "stage" holds every layer and the head."""
    dp, tp, cp = (cols[k].astype(np.float64) for k in ("dp", "tp", "cp"))
    B, s = workload.global_batch, workload.seq_len
    f = [stage_train_flops(m, s, r) for r in RECOMPUTE]
    per_layer = np.array([x["layer"] for x in f])[cols["recompute"]]       # (plans,)
    one = f[0]
    extra = np.array([[one["embedding"]], [0.0], [one["lm_head"]]])          # (3, 1)
    extra_fwd = np.array([[0.0], [0.0], [one["lm_head_forward"]]])
    n = np.stack(layers)                                                    # (3, plans) layers
    flops = B * (n * per_layer + extra)
    forward = B * (n * one["layer_forward"] + extra_fwd)
    # pp = 1: the step's FLOPs as train_flops sums them (the same value, bit for bit)
    attn = forward_flops(m, s, lm_head="none") - 2.0 * matmul_weights_per_token(
        m, lm_head=False) * s                                               # attention core
    plain = train_flops(m, s)
    whole = np.array([plain, plain + attn, train_flops(m, s, recompute=True)])
    one_stage = cols["pp"] == 1
    flops[2] = np.where(one_stage, B * whole[cols["recompute"]], flops[2])
    forward[2] = np.where(one_stage, B * forward_flops(m, s), forward[2])
    compute = flops / (dp * tp * cp * hw.peak(dtype) * efficiency)
    with np.errstate(divide="ignore", invalid="ignore"):
        backward = np.where(flops > 0, compute * (flops - forward) / flops, 0.0)
    return compute, backward


def _model_parallel_comm(m, cols, workload, A, bw) -> tuple:
    """({tp, cp, ep, pp: seconds}, {same: bytes per GPU}) of a step's model-parallel
    collectives per plan on a stage of L / pp layers (Megatron's counts; book section
    :ref:`sec-tp-workdepth`); TP, CP and EP scale with a stage's layers."""
    dp, tp, pp, cp, ep = (cols[k].astype(np.float64) for k in ("dp", "tp", "pp", "cp", "ep"))
    mb, v = cols["microbatches"].astype(np.float64), cols["interleave"].astype(np.float64)
    full = (cols["recompute"] == RECOMPUTE.index("full")).astype(np.float64)
    s, b, D = workload.seq_len, workload.micro_batch_size, m.hidden_size
    layers = m.num_hidden_layers / pp
    sec, vol = {}, {}
    # tensor parallel: 4 (+2) all-reduces of (T/cp) b D per layer and microbatch
    n = mb * layers * (4 + 2 * full)
    size = s / cp * b * D * A
    sec["tp"] = n * collective_time_s_array("all_reduce", size, tp, bw(tp))
    vol["tp"] = n * size * bus_factor("all_reduce", tp)
    # context parallel: K/V around the ring, 1 (+1) pass forward, 2 backward
    n = mb * layers * (3 + full)
    size = s * b * _kv_width(m) * A / tp
    sec["cp"] = n * collective_time_s_array("all_gather", size, cp, bw(tp * cp))
    vol["cp"] = n * size * bus_factor("all_gather", cp)
    # expert parallel: 4 (+2) all-to-alls of the GPU's tokens x top-k per MoE layer
    n = mb * (m.num_moe_layers / pp) * (4 + 2 * full)
    size = s * b * m.num_experts_per_tok * D * A / (cp * tp)
    sec["ep"] = n * collective_time_s_array("all_to_all", size, ep, bw(tp * ep))
    vol["ep"] = n * size * bus_factor("all_to_all", ep)
    # pipeline: activation forward and gradient backward per microbatch and chunk
    vol["pp"] = np.where(pp > 1, 2 * mb * v, 0.0) * s * b * D * A / (cp * tp)
    sec["pp"] = vol["pp"] / bw(tp * cp * dp * pp)
    return sec, vol


def _dp_comm(cols, p, grad_bytes, weight_bytes, bw) -> tuple:
    """Data parallelism's seconds per step (the gradients' sync, the weights' gather, ZeRO-2/3's
    per-micro-batch calls) and bytes per GPU, non-expert and expert parameters in their own
    groups (ZeRO stages: Rajbhandari et al. 2020), of the stage with the most parameters
    (``p``: :func:`rlmperf_lite.cost.parallel_memory.stage_param_arrays`)."""
    dp, tp, cp, ep = (cols[k].astype(np.float64) for k in ("dp", "tp", "cp", "ep"))
    z, mb = cols["zero_stage"], cols["microbatches"].astype(np.float64)
    dense = np.maximum(np.maximum(p["first"], p["last"]), p["middle"])
    expert = np.maximum(np.maximum(p["expert_first"], p["expert_last"]), p["expert_middle"])
    bw_dp = bw(tp * cp * dp)
    grad_step = param_step = micro_s = vol_dp = 0.0
    for params, group in ((dense / tp, dp * cp), (expert / (tp * ep), dp * cp / ep)):
        g, w = grad_bytes * params, weight_bytes * params
        ar, rs, ag = (collective_time_s_array(op, x, group, bw_dp) for op, x in
                      (("all_reduce", g), ("reduce_scatter", g), ("all_gather", w)))
        grad_step = grad_step + np.select([z == 0, z == 1], [ar, rs], 0.0)
        param_step = param_step + np.where((z == 1) | (z == 2), ag, 0.0)
        micro_s = micro_s + mb * np.select([z == 2, z == 3], [rs, rs + 2 * ag], 0.0)
        f = bus_factor("reduce_scatter", group)                      # = all-gather's = AR's / 2
        vol_dp = vol_dp + f * np.select([z == 0, z == 1, z == 2, z == 3],
                                        [2 * g, g + w, mb * g + w, mb * (g + 2 * w)])
    return grad_step, param_step, micro_s, vol_dp


def train_step_time(model: ModelConfig, hardware: HardwareSpec, plan: ParallelPlan,
                    workload: TrainWorkload, *, efficiency: float = 1.0, overlap: float = 1.0,
                    dtype: str = "bf16", activation_bytes: int = 2, grad_bytes: int = 2,
                    weight_bytes: int = 2) -> TrainStepTime:
    """Seconds of one training step and their parts (module docstring; sources: Narayanan et
    al. 2021 §2.2-2.3 and §4.1, Korthikanti et al. 2022 §4.2, ZeRO paper §7; book section
    :ref:`sec-choose-plan`).

    Args:
        efficiency: share of the peak FLOP/s the kernels reach (1.0 = peak, as the Part II
            estimate's default ``train_efficiency``).
        overlap: share of the data-parallel traffic that may hide behind backward compute.
        dtype: the peak used.
        activation_bytes, grad_bytes, weight_bytes: bytes per value sent for activations,
            gradients and weights.
    Raises:
        ValueError: a plan breaking a rule of :meth:`ParallelPlan.check` (with the hardware's
            NVLink domain), ``efficiency`` outside [1e-6, 1], ``overlap`` outside [0, 1], a
            dtype the hardware has no peak for, hardware without link bandwidths when gpus > 1.
    """
    if not isinstance(plan, ParallelPlan):
        raise ValueError(f"plan must be a ParallelPlan, got {type(plan).__name__}")
    if not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec (e.g. hardware_preset('h100')), got "
                         f"{type(hardware).__name__}")
    if not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")
    plan.validate(model, hardware, None, workload)
    check_efficiency("efficiency", efficiency)
    check_number("overlap", overlap, low=0, high=1)
    for label, x in (("activation_bytes", activation_bytes), ("grad_bytes", grad_bytes),
                     ("weight_bytes", weight_bytes)):
        check_int(label, x, 1)
    hardware.peak(dtype)
    if plan.gpus > 1:
        check_links(hardware)
    r = step_time_arrays(model, hardware, plan_columns([plan]), workload, efficiency, overlap,
                         dtype, activation_bytes, grad_bytes, weight_bytes)
    one = {k: float(np.asarray(x).reshape(-1)[0]) for k, x in r.items()}
    return TrainStepTime(one["compute_s"], one["bubble_s"],
                         {k: one[f"{k}_comm_s"] for k in COMM_KINDS},
                         {k: one[f"{k}_comm_bytes_per_gpu"] for k in COMM_KINDS},
                         one["dp_exposed_s"], one["total_s"])
