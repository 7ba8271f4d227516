"""Work and depth in seconds of a pipelined training pass and of an expert-parallel MoE layer
(book section :ref:`sec-pp-workdepth`).

Pipeline. A task is one micro-batch's forward (t_f) or backward (t_b) on one stage (on one of
its v chunks when interleaved, t_f / v and t_b / v). Each stage is one GPU and runs its own
tasks in the schedule's order, so the graph is the schedule of
``rlmperf_lite.parallel.schedules``: data edges (F after the previous stage's F, B after
the next stage's B) plus each stage's order. With p = pp stages and m micro-batches::

    W = m p (t_f + t_b)                                  (GPU-seconds, on p GPUs)
    D = (m + (p - 1) / v) (t_f + t_b)                    (v = 1: GPipe and 1F1B)
        + 2 (v m + p - 1) (alpha + activation bytes / bandwidth)

the first line of D the simulator's makespan (:func:`~rlmperf_lite.parallel.schedule_timeline`),
the second the blocking sends on the chain (every op on it sends its output: ncclSend "is
blocking for the GPU", NCCL user guide, Point-to-point communication functions). Then
D >= W / p, so T = max(W / p, D) = D, and the first line D_c of D gives

    D_c / (W / p) - 1 = (p - 1) / (v m)                  (Narayanan et al. 2021, §2.2.1-2.2.2)

the bubble is the depth beyond the work. Stages are equal: the model's FLOPs / p each, the
embeddings and the LM head spread like the layers (the simulator's assumption too).

Expert parallelism. One MoE layer on ep GPUs, one micro-batch of N tokens per GPU with top-k
routing: a task is one GPU's experts (E / ep of them, one grouped GEMM) on the (token, choice)
pairs routed to them, forward and backward; four all-to-alls (dispatch and combine, forward and
backward) on the chain. W = the sum of the GPUs' expert times, D = the busiest GPU's plus the
all-to-alls, each as long as the busiest GPU's buffer (it receives, then sends back, the most
rows). When every GPU is compute-bound, the experts' D / (W / ep) - 1 is the load imbalance
max / mean - 1 of the GPUs' pairs: imbalance is depth, as the bubble is.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_efficiency, check_int, check_number
from ..parallel.expert import expert_load
from ..parallel.schedules import SCHEDULES, make_schedule, schedule_timeline
from .collective import NET_HOP_LATENCY_S, NVLINK_HOP_LATENCY_S, collective_time_s
from .flops import forward_flops, train_flops
from .hardware import HardwareSpec, resolve_hardware
from .model import ModelConfig
from .pipeline import pipeline_bubble_fraction
from .presets import resolve_model
from .roofline import roofline_time
from .workdepth_s import PhaseWorkDepth

__all__ = ["LINKS", "pipeline_depth_slots",
           "PipelineWorkDepth", "pipeline_workdepth_s", "MoEWorkDepth", "moe_layer_workdepth_s",
           "skewed_routing"]

LINKS = ("intra", "inter")


def pipeline_depth_slots(pp: int, microbatches: int, interleave: int = 1) -> float:
    """m + (p - 1) / v: the makespan of GPipe, 1F1B (v = 1) or interleaved 1F1B in units of
    one micro-batch's t_f + t_b on a stage (derived in book section :ref:`sec-pp-workdepth`;
    equal to :func:`~rlmperf_lite.parallel.schedule_timeline`'s makespan, tested).

    Raises:
        ValueError: as :func:`~rlmperf_lite.cost.pipeline_bubble_fraction`.
    """
    return microbatches * (1.0 + pipeline_bubble_fraction(pp, microbatches, interleave))


def _link(hw: HardwareSpec, link: str, latency_s):
    """(bandwidth B/s, alpha s) of a hop over ``link``; alpha defaults to NCCL's."""
    check_choice("link", link, LINKS)
    bw = (hw.intra_node_bandwidth_bytes_per_s if link == "intra"
          else hw.inter_node_bandwidth_bytes_per_s)
    if bw is None:
        raise ValueError(f"hardware {hw.name!r} has no {link}-node bandwidth; use a GPU preset "
                         f"such as 'h100'")
    if latency_s is None:
        latency_s = NVLINK_HOP_LATENCY_S if link == "intra" else NET_HOP_LATENCY_S
    check_number("latency_s", latency_s, low=0)
    return float(bw), float(latency_s)


@dataclass(frozen=True)
class PipelineWorkDepth:
    """A pipelined pass in seconds: ``phases`` (compute, then the sends on the chain),
    ``forward_s`` / ``backward_s`` (t_f, t_b of one micro-batch on one stage), ``hop_s`` (one
    activation's send), ``sends_on_path`` (2 (v m + p - 1), 0 for p = 1) and ``makespan_s``
    (the simulated schedule, each op followed by its blocking send)."""

    phases: tuple
    forward_s: float
    backward_s: float
    hop_s: float
    sends_on_path: int
    makespan_s: float
    inputs: dict

    @property
    def compute(self) -> PhaseWorkDepth:
        return self.phases[0]

    @property
    def bubble_fraction(self) -> float:
        """The bubble over the ideal time, D / (W / p) - 1 of the compute."""
        return self.compute.depth_s / self.compute.work_per_processor_s - 1.0

    @property
    def brent_lower_s(self) -> float:
        return float(sum(p.brent_lower_s for p in self.phases))

    @property
    def brent_upper_s(self) -> float:
        return float(sum(p.brent_upper_s for p in self.phases))


def _check_pipeline(m: ModelConfig, pp, microbatches, schedule, interleave):
    check_choice("schedule", schedule, SCHEDULES)
    check_int("interleave", interleave, 1)
    if schedule != "interleaved" and interleave != 1:
        raise ValueError(f"interleave={interleave} needs schedule='interleaved', got "
                         f"schedule={schedule!r}")
    pipeline_bubble_fraction(pp, microbatches, interleave)          # pp, m, v, m % pp
    if m.num_hidden_layers % (pp * interleave):
        raise ValueError(f"pp*interleave={pp * interleave} must divide num_hidden_layers="
                         f"{m.num_hidden_layers} (equal stages)")


def pipeline_workdepth_s(model, hardware="h100", *, pp: int, microbatches: int,
                         schedule: str = "1f1b", interleave: int = 1, seq_len: int = 4608,
                         micro_batch_size: int = 1, efficiency: float = 1.0,
                         link: str = "inter", latency_s: float | None = None,
                         activation_bytes: int = 2, dtype: str = "bf16") -> PipelineWorkDepth:
    """W, D (seconds) of one pipeline's forward and backward over m micro-batches of b
    sequences of T tokens (module docstring; Narayanan et al. 2021 §2.2; book section
    :ref:`sec-pp-workdepth`). t_f = the roofline of the stage's forward FLOPs (the model's / p)
    and its weights' bytes (2 N / p), over ``efficiency``; t_b likewise with twice the FLOPs and
    bytes. A hop sends b T D ``activation_bytes`` over ``link`` ("inter": the stages on
    different nodes, the usual placement; "intra": NVLink) plus ``latency_s`` (default NCCL's).

    Raises:
        ValueError: naming the argument: an unknown model, hardware, schedule or link,
            ``interleave`` > 1 without the interleaved schedule, sizes < 1, pp v not dividing
            the layers, m not a multiple of pp when interleaved, ``efficiency`` outside [1e-6, 1].
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    _check_pipeline(m, pp, microbatches, schedule, interleave)
    for label, x in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size),
                     ("activation_bytes", activation_bytes)):
        check_int(label, x, 1)
    check_efficiency("efficiency", efficiency)
    bw, alpha = _link(hw, link, latency_s)
    lens = [seq_len] * micro_batch_size
    fwd = forward_flops(m, lens) / pp                               # one micro-batch, a stage
    bwd = train_flops(m, lens) / pp - fwd                           # = 2 x the forward
    weights = 2.0 * m.num_params() / pp                             # bf16 bytes of a stage
    t_f = roofline_time(fwd, weights, hw, dtype=dtype)["time_s"] / efficiency
    t_b = roofline_time(bwd, 2 * weights, hw, dtype=dtype)["time_s"] / efficiency
    hop = alpha + micro_batch_size * seq_len * m.hidden_size * activation_bytes / bw
    hop = hop if pp > 1 else 0.0
    v = interleave
    sends = 2 * (v * microbatches + pp - 1) if pp > 1 else 0
    compute = PhaseWorkDepth(
        "pipeline forward + backward", microbatches * (fwd + bwd) * pp,
        microbatches * pp * (t_f + t_b),
        pipeline_depth_slots(pp, microbatches, v) * (t_f + t_b), pp)
    p2p = PhaseWorkDepth("activation sends on the chain", 0.0, 0.0, sends * hop, pp)
    # the simulator with each op lengthened by its blocking send (a chunk's op: t / v + hop)
    timeline = schedule_timeline(make_schedule(schedule, pp, microbatches, v),
                                 t_f + v * hop, t_b + v * hop)
    inputs = dict(model=m.name, hardware=hw.name, pp=pp, microbatches=microbatches,
                  schedule=schedule, interleave=v, seq_len=seq_len,
                  micro_batch_size=micro_batch_size, efficiency=efficiency, link=link,
                  latency_s=alpha, bandwidth_bytes_per_s=bw)
    return PipelineWorkDepth((compute, p2p), t_f, t_b, hop, sends, float(timeline.makespan),
                             inputs)


# ---- expert parallelism ----------------------------------------------------------------------
def skewed_routing(num_tokens: int, num_experts: int, top_k: int, *, skew: float = 0.0,
                   seed: int = 0) -> np.ndarray:
    """(N, k) int: each token's k distinct experts, drawn without replacement with weights
    (rank + 1)^-skew over a random order of the E experts (skew 0: uniform), as the k smallest
    of Exp(1) / weight (Efraimidis and Spirakis 2006, the exponential form of their keys). A
    synthetic stand-in for a router whose popular experts take more than their share.

    Raises:
        ValueError: sizes < 1, top_k > num_experts, skew < 0.
    """
    check_int("num_tokens", num_tokens, 1)
    check_int("num_experts", num_experts, 1)
    check_int("top_k", top_k, 1)
    if top_k > num_experts:
        raise ValueError(f"top_k={top_k} must be <= num_experts={num_experts}")
    check_number("skew", skew, low=0)
    rng = np.random.default_rng(seed)
    weight = (1.0 + rng.permutation(num_experts)) ** -skew                     # (E,)
    keys = rng.standard_exponential((num_tokens, num_experts), dtype=np.float32)  # (N, E)
    keys /= weight.astype(np.float32)
    return np.argpartition(keys, top_k - 1, axis=1)[:, :top_k]                 # (N, k)


@dataclass(frozen=True)
class MoEWorkDepth:
    """One MoE layer's forward and backward on ep GPUs: ``phases`` (the all-to-alls, the
    experts), ``rank_pairs`` (ep,) (token, choice) pairs per GPU, ``all_to_all_s`` (one of the
    four), ``all_to_all_bytes`` (the busiest GPU's buffer) and ``imbalance`` (max / mean of
    ``rank_pairs``)."""

    phases: tuple
    rank_pairs: np.ndarray
    all_to_all_s: float
    all_to_all_bytes: float
    imbalance: float
    inputs: dict

    @property
    def experts(self) -> PhaseWorkDepth:
        return self.phases[1]

    @property
    def layer_s(self) -> float:
        """The layer's time, set by the busiest GPU, so T = D = max(W/p, D)."""
        return float(sum(p.depth_s for p in self.phases))


def _rank_pairs(m: ModelConfig, ep: int, tokens_per_rank: int, expert_tokens):
    """(ep,) pairs per GPU from the (E,) pairs per expert (default: balanced)."""
    E, total = m.num_experts, ep * tokens_per_rank * m.num_experts_per_tok
    if expert_tokens is None:
        return np.full(ep, total / ep)
    load = np.asarray(expert_tokens, dtype=np.float64)
    if load.shape != (E,) or np.any(load < 0) or not np.isclose(load.sum(), total):
        raise ValueError(f"expert_tokens must be (E,) = ({E},) non-negative pairs per expert "
                         f"summing to ep x tokens_per_rank x top_k = {total} (e.g. "
                         f"expert_load(routing, {E})), got shape {load.shape}, sum "
                         f"{load.sum():g}")
    return load.reshape(ep, E // ep).sum(axis=1)                 # rank r owns r E/ep ...


def moe_layer_workdepth_s(model, hardware="h100", *, ep: int, tokens_per_rank: int = 4608,
                          expert_tokens=None, routing=None, efficiency: float = 1.0,
                          link: str | None = None, latency_s: float | None = None,
                          activation_bytes: int = 2, dtype: str = "bf16") -> MoEWorkDepth:
    """W, D (seconds) of one MoE layer's routed experts, forward and backward, on ep GPUs each
    holding E / ep experts and ``tokens_per_rank`` tokens (module docstring; Megatron-Core's
    all-to-all dispatcher; book section :ref:`sec-pp-workdepth`).

    A GPU's task: roofline of 3 x 2 P_e FLOPs per pair (P_e = one expert's weights) and 3 x 2
    P_e bytes per expert it holds (its weights read in the forward, read and their gradient
    written in the backward), over ``efficiency``. An all-to-all:
    :func:`~rlmperf_lite.cost.collective_time_s` of the busiest GPU's buffer (max(N k, its
    pairs) x D x ``activation_bytes``) over ep ranks on ``link`` (default "intra" when ep fits
    in an NVLink domain), ``latency_s`` per step (NCCL's).

    Args:
        expert_tokens: (E,) pairs per expert, e.g. :func:`~rlmperf_lite.parallel.expert_load`
            of a routing; default balanced, N ep k / E each.
        routing: instead, the (ep N, k) expert ids themselves (their ``expert_load``).
    Raises:
        ValueError: a dense model, ep not dividing E, both or bad ``expert_tokens`` /
            ``routing``, sizes < 1, ``efficiency`` outside [1e-6, 1].
    """
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    if not m.is_moe:
        raise ValueError(f"model {m.name!r} has no experts; choose a MoE model such as "
                         f"'qwen3-235b-a22b'")
    check_int("ep", ep, 1)
    check_int("tokens_per_rank", tokens_per_rank, 1)
    check_int("activation_bytes", activation_bytes, 1)
    check_efficiency("efficiency", efficiency)
    E, k, D = m.num_experts, m.num_experts_per_tok, m.hidden_size
    if E % ep:
        raise ValueError(f"ep={ep} must divide the model's {E} experts")
    if routing is not None:
        if expert_tokens is not None:
            raise ValueError("give expert_tokens or routing, not both")
        expert_tokens = expert_load(routing, E)
    pairs = _rank_pairs(m, ep, tokens_per_rank, expert_tokens)       # (ep,)
    link = link or ("intra" if ep <= hw.nvlink_domain else "inter")
    bw, alpha = _link(hw, link, latency_s)
    p_e = m.mlp_params(m.moe_intermediate_size)                      # one expert's weights
    t_rank = np.array([roofline_time(6.0 * p_e * n, 6.0 * p_e * E / ep, hw,
                                     dtype=dtype)["time_s"] for n in pairs]) / efficiency
    size = max(tokens_per_rank * k, float(pairs.max())) * D * activation_bytes
    a2a = collective_time_s("all_to_all", size, ep, bw, alpha)
    experts = PhaseWorkDepth("experts forward + backward", 6.0 * p_e * float(pairs.sum()),
                             float(t_rank.sum()), float(t_rank.max()), ep)
    comm = PhaseWorkDepth("all-to-alls (dispatch, combine; x2 backward)", 0.0, 0.0,
                          4 * a2a, ep)
    inputs = dict(model=m.name, hardware=hw.name, ep=ep, tokens_per_rank=tokens_per_rank,
                  efficiency=efficiency, link=link, latency_s=alpha, bandwidth_bytes_per_s=bw)
    return MoEWorkDepth((comm, experts), pairs, a2a, size, float(pairs.max() / pairs.mean()),
                        inputs)
