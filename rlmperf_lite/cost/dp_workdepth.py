"""Work and depth in seconds of a data-parallel training update — plain data parallelism and
ZeRO-1/2/3 (FSDP) on p = dp GPUs — and when its communication hides behind compute (book
section :ref:`sec-dp-workdepth`).

A rank's step is m micro-batches of b sequences of T tokens, then its optimizer step. The
phases, in the terms of :mod:`rlmperf_lite.cost.workdepth_s`:

- Compute. A task is one micro-batch's forward and backward on one GPU, t_mb seconds (the
  compute of :func:`~rlmperf_lite.cost.train_step_time` over m; the forward's share from
  :func:`~rlmperf_lite.cost.forward_flops`). W = dp m t_mb GPU-seconds, D = t_mb.
- Collectives over the dp ranks, on the gradients (grad_bytes x N) and weights
  (weight_bytes x N) of the model's N parameters (ZeRO paper §7), each call
  :func:`~rlmperf_lite.cost.collective_time_s`: ring steps x alpha + bytes / bus bandwidth::

    stage  collective (calls)                       hides behind, per occurrence
    0      grads all-reduce (1 per step)            the last micro-batch's backward
    1      grads reduce-scatter (1 per step)        the last micro-batch's backward
           weights all-gather (1 per step)          the next step's first forward
    2      grads reduce-scatter (1 per micro-batch) that micro-batch's backward
           weights all-gather (1 per step)          the next step's first forward
    3      weights all-gather, forward (L per mb)   that micro-batch's forward and backward,
           weights all-gather, backward (L per mb)  the three together
           grads reduce-scatter (L per mb)

  This is train_step_time's overlap rule (``overlap=1``) with each collective named and
  ZeRO-3's split per layer (L calls of N / L: the same bytes, L times the latency). A
  collective is the links' time, not the GPUs': W = 0, D = what it adds to the chain,
  occurrences x max(0, comm - window).
- Optimizer step: AdamW over the parameters the rank owns (N, or N / dp from stage 1 on),
  memory-bound at :data:`~rlmperf_lite.cost.ADAM_STEP_BYTES_PER_PARAM` bytes each.
  W = dp t_opt, D = t_opt.

The step is compute + exposed communication + t_opt, the sum of the phases' max(W/p, D); with
alpha = 0 it is train_step_time's total plus the optimizer step (which train_step_time leaves
out). A window's compute grows with the tokens t = b T of a micro-batch on one GPU and its
communication does not, so it hides once (derived in :ref:`sec-dp-workdepth`)

    t >= t*_w = (n - 1)/n x (peak eta / beta) x B_w / phi_w  +  s_w alpha peak eta / phi_w

with beta the link's bus bandwidth, B_w the bytes its collectives move in units of one ring
pass (an all-reduce counts twice), phi_w the window's FLOPs per token and s_w its ring steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..checks import check_choice, check_efficiency, check_int, check_number
from .flops import ADAMW_FLOPS_PER_PARAM
from .collective import collective_bytes_per_rank, collective_time_s
from .flops import forward_flops
from .hardware import resolve_hardware
from .parallel_memory import TrainMemory, memory_per_gpu
from .parallel_plan import RECOMPUTE, ParallelPlan, TrainWorkload
from .parallel_step import TrainStepTime, train_step_time
from .presets import resolve_model
from .workdepth_s import PhaseWorkDepth

__all__ = ["DP_LINKS", "ADAM_STEP_BYTES_PER_PARAM", "DPCollective", "OverlapWindow",
           "DPUpdateWorkDepth", "dp_update_workdepth", "OverlapThreshold",
           "overlap_threshold_tokens", "overlap_threshold_search"]

DP_LINKS = ("auto", "nvlink", "network")
"""Where the dp ring runs: "auto" as the library places ranks (NVLink while dp fits in an
NVLink domain), "nvlink" (dp must fit in one), "network" (every rank in its own node)."""

ADAM_STEP_BYTES_PER_PARAM = 28
"""Bytes a mixed-precision AdamW step reads and writes per parameter: the bf16 gradient (2), the
fp32 master weight, momentum and variance read (12) and written (12), the new bf16 weight (2)."""

_WINDOWS = {"last backward": "the last micro-batch's backward",
            "first forward": "the next step's first forward",
            "each backward": "each micro-batch's backward",
            "each micro-batch": "each micro-batch's forward and backward"}
_PASSES = {"last backward": "backward", "first forward": "forward",
           "each backward": "backward", "each micro-batch": "micro-batch"}
# (collective name, op, tensor, window, calls per occurrence: 1 or "L") per ZeRO stage
_PLAN = {
    0: (("grads all-reduce", "all_reduce", "grads", "last backward", 1),),
    1: (("grads reduce-scatter", "reduce_scatter", "grads", "last backward", 1),
        ("weights all-gather", "all_gather", "weights", "first forward", 1)),
    2: (("grads reduce-scatter", "reduce_scatter", "grads", "each backward", 1),
        ("weights all-gather", "all_gather", "weights", "first forward", 1)),
    3: (("weights all-gather (forward)", "all_gather", "weights", "each micro-batch", "L"),
        ("weights all-gather (backward)", "all_gather", "weights", "each micro-batch", "L"),
        ("grads reduce-scatter", "reduce_scatter", "grads", "each micro-batch", "L")),
}


@dataclass(frozen=True)
class DPCollective:
    """One collective of the update: per call ``size_bytes`` S (nccl-tests' meaning), the
    ``bytes_per_rank`` each rank sends, its ``ring_steps``, ``latency_s`` (steps x alpha) and
    ``bandwidth_s`` (bytes / bus bandwidth); ``calls`` per occurrence of its ``window``."""

    name: str
    op: str
    size_bytes: float
    ranks: int
    calls: int
    occurrences: int
    window: str
    bytes_per_rank: float
    ring_steps: float
    latency_s: float
    bandwidth_s: float

    @property
    def time_s(self) -> float:
        """The depth of one call, ring steps x alpha + bytes / bandwidth."""
        return self.latency_s + self.bandwidth_s

    @property
    def step_bytes_per_rank(self) -> float:
        return self.calls * self.occurrences * self.bytes_per_rank

    @property
    def step_s(self) -> float:
        return self.calls * self.occurrences * self.time_s


@dataclass(frozen=True)
class OverlapWindow:
    """The compute a group of collectives hides behind: ``window_s`` and ``comm_s`` per
    occurrence, ``occurrences`` per step, ``flops_per_token`` phi of the pass it is."""

    name: str
    window_s: float
    comm_s: float
    occurrences: int
    flops_per_token: float

    @property
    def description(self) -> str:
        """The compute it is, in words ("the last micro-batch's backward", ...)."""
        return _WINDOWS[self.name]

    @property
    def hidden(self) -> bool:
        return self.comm_s <= self.window_s

    @property
    def exposed_s(self) -> float:
        """What the collectives add to the chain, occurrences x max(0, comm - window)."""
        return self.occurrences * max(0.0, self.comm_s - self.window_s)


@dataclass(frozen=True)
class DPUpdateWorkDepth:
    """One data-parallel update (module docstring). ``phases``: compute, the exposed part of
    each window's collectives, the optimizer step (PhaseWorkDepth, p = dp); per micro-batch
    ``microbatch_s`` = ``forward_s`` + ``backward_s``; ``flops_per_s`` the achieved rate peak x
    efficiency; ``train_step`` and ``memory`` are the library's :func:`train_step_time` and
    :func:`memory_per_gpu` for the same plan."""

    phases: tuple
    collectives: tuple
    windows: tuple
    dp: int
    zero_stage: int
    link: str
    bus_bandwidth_bytes_per_s: float
    flops_per_s: float
    microbatches: int
    tokens_per_microbatch: int
    forward_s: float
    backward_s: float
    optimizer_s: float
    train_step: TrainStepTime
    memory: TrainMemory

    @property
    def microbatch_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def compute_s(self) -> float:
        return self.microbatches * self.microbatch_s

    @property
    def exposed_s(self) -> float:
        return float(sum(w.exposed_s for w in self.windows))

    @property
    def comm_s(self) -> float:
        return float(sum(c.step_s for c in self.collectives))

    @property
    def comm_bytes_per_rank(self) -> float:
        return float(sum(c.step_bytes_per_rank for c in self.collectives))

    @property
    def step_s(self) -> float:
        """compute + exposed communication + optimizer step = the sum of max(W/p, D)."""
        return self.compute_s + self.exposed_s + self.optimizer_s

    @property
    def hidden(self) -> bool:
        return all(w.hidden for w in self.windows)


def _setup(model, hardware, dp, zero_stage, link, recompute, efficiency, latency_s):
    m, hw = resolve_model(model, "model"), resolve_hardware(hardware)
    check_int("dp", dp, 1)
    check_choice("zero_stage", zero_stage, (0, 1, 2, 3))
    check_choice("link", link, DP_LINKS)
    check_choice("recompute", recompute, RECOMPUTE)
    check_efficiency("efficiency", efficiency)
    check_number("latency_s", latency_s, low=0)
    if link == "nvlink" and dp > hw.nvlink_domain:
        raise ValueError(f"link='nvlink' needs dp <= nvlink_domain_gpus={hw.nvlink_domain} (one "
                         f"NVLink domain), got dp={dp}; choose link='network'")
    if link == "network":                      # every rank in its own node: the network's links
        hw = replace(hw, gpus_per_node=1, nvlink_domain_gpus=None)
    return m, hw


def _collectives(m, dp, stage, mb, bw, latency_s, grad_bytes, weight_bytes) -> tuple:
    """The stage's collectives (table of the module docstring); none on one rank."""
    if dp == 1:
        return ()
    N, L = float(m.num_params()), m.num_hidden_layers
    out = []
    for name, op, tensor, window, calls in _PLAN[stage]:
        calls = L if calls == "L" else 1
        size = (grad_bytes if tensor == "grads" else weight_bytes) * N / calls
        bandwidth_s = collective_time_s(op, size, dp, bw)
        steps = collective_time_s(op, 0.0, dp, bw, latency_s=1.0)     # latency 1: the steps
        out.append(DPCollective(name, op, size, dp, calls, mb if window.startswith("each")
                                else 1, window, collective_bytes_per_rank(op, size, dp),
                                steps, steps * latency_s, bandwidth_s))
    return tuple(out)


def dp_update_workdepth(model, hardware="h100", *, dp: int, zero_stage: int = 0,
                        seq_len: int = 4096, micro_batch_size: int = 1, microbatches: int = 1,
                        link: str = "auto", recompute: str = "none", efficiency: float = 1.0,
                        latency_s: float = 0.0, dtype: str = "bf16", grad_bytes: int = 2,
                        weight_bytes: int = 2) -> DPUpdateWorkDepth:
    """W, D and the collectives of one update of ``model`` on ``dp`` data-parallel GPUs with
    ZeRO ``zero_stage``: each rank runs ``microbatches`` m micro-batches of
    ``micro_batch_size`` b sequences of ``seq_len`` T tokens (module docstring; ZeRO paper §7,
    nccl-tests PERFORMANCE.md, book section :ref:`sec-dp-workdepth`).

    Args:
        link: "auto", "nvlink" or "network" (:data:`DP_LINKS`).
        latency_s: alpha, seconds per ring step (train_step_time has none: 0 matches it).
        efficiency: share of the peak FLOP/s the kernels reach, as train_step_time's.
    Raises:
        ValueError: an unknown model, hardware or link, dp > the NVLink domain with
            link="nvlink", and as :func:`train_step_time` and :func:`memory_per_gpu`.
    """
    m, hw = _setup(model, hardware, dp, zero_stage, link, recompute, efficiency, latency_s)
    for label, v in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size),
                     ("microbatches", microbatches)):
        check_int(label, v, 1)
    plan = ParallelPlan(dp=dp, zero_stage=zero_stage, microbatches=microbatches,
                        recompute=recompute)
    wl = TrainWorkload(global_batch=dp * micro_batch_size * microbatches, seq_len=seq_len,
                       micro_batch_size=micro_batch_size)
    step = train_step_time(m, hw, plan, wl, efficiency=efficiency, dtype=dtype,
                           grad_bytes=grad_bytes, weight_bytes=weight_bytes)
    rate = hw.peak(dtype) * efficiency                        # achieved FLOP/s
    t_mb = step.compute_s / microbatches                      # one task: a micro-batch's pass
    t_fwd = micro_batch_size * forward_flops(m, [seq_len]) / rate
    bw = hw.group_bandwidth(dp) if dp > 1 else math.inf
    colls = _collectives(m, dp, zero_stage, microbatches, bw, latency_s, grad_bytes,
                         weight_bytes)
    passes = {"forward": t_fwd, "backward": t_mb - t_fwd, "micro-batch": t_mb}
    windows = _windows(colls, passes, rate / (micro_batch_size * seq_len))
    owned = m.num_params() / (dp if zero_stage >= 1 else 1)  # the parameters a rank updates
    t_opt = ADAM_STEP_BYTES_PER_PARAM * owned / hw.hbm_bandwidth_bytes_per_s
    phases = [_phase("forward + backward", dp * step.compute_s * rate, dp * step.compute_s,
                     t_mb, dp)]
    for w in windows:
        mine = [c.name for c in colls if c.window == w.name]
        label = mine[0] if len(mine) == 1 else "per-layer gathers + reduce-scatters"
        phases.append(_phase(f"{label} (exposed)", 0.0, 0.0, w.exposed_s, dp))
    phases.append(_phase("optimizer step", dp * ADAMW_FLOPS_PER_PARAM * owned, dp * t_opt,
                         t_opt, dp))
    return DPUpdateWorkDepth(tuple(phases), colls, windows, dp, zero_stage, link, bw, rate,
                             microbatches, micro_batch_size * seq_len, t_fwd, t_mb - t_fwd,
                             t_opt, step, memory_per_gpu(m, plan, wl, grad_bytes=grad_bytes,
                                                         weight_bytes=weight_bytes))


def _windows(colls, passes: dict, rate_per_token: float) -> tuple:
    """One OverlapWindow per window the collectives name: the pass's seconds, the collectives'
    seconds per occurrence, the pass's FLOPs per token (seconds x FLOP/s / tokens, the FLOP/s
    over the micro-batch's tokens given as ``rate_per_token``)."""
    out = []
    for w in dict.fromkeys(c.window for c in colls):
        mine = [c for c in colls if c.window == w]
        window_s = passes[_PASSES[w]]
        out.append(OverlapWindow(w, window_s, sum(c.calls * c.time_s for c in mine),
                                 mine[0].occurrences, window_s * rate_per_token))
    return tuple(out)


def _phase(name, flops, gpu_s, depth_s, p):
    return PhaseWorkDepth(name, float(flops), float(gpu_s), float(depth_s), p)


@dataclass(frozen=True)
class OverlapThreshold:
    """t* (``tokens``): the tokens of a micro-batch on one GPU from which every window's
    collectives hide; per window t*_w = ``ring_factor`` x ``flops_per_byte`` x ``kappa[w]`` +
    ``latency_tokens[w]`` (module docstring), in ``by_window``; ``binding`` names the largest
    (None on one rank, where nothing is sent)."""

    tokens: float
    binding: str | None
    by_window: dict
    ring_factor: float
    flops_per_byte: float
    kappa: dict
    latency_tokens: dict
    seq_len: int

    @property
    def sequences(self) -> int:
        """The smallest micro-batch, in sequences of ``seq_len`` tokens, that hides."""
        return max(1, math.ceil(self.tokens / self.seq_len * (1 - 1e-12)))


def overlap_threshold_tokens(model, hardware="h100", *, dp: int, zero_stage: int = 0,
                             seq_len: int = 4096, **kwargs) -> OverlapThreshold:
    """The closed form t*_w = (n - 1)/n x (peak eta / beta) x B_w / phi_w + s_w alpha peak eta
    / phi_w for each window of the stage (derived in :ref:`sec-dp-workdepth`): B_w the bytes of
    its collectives in one-pass units (an all-reduce counts twice), phi_w the FLOPs per token
    of the pass it hides behind, s_w its ring steps. Stage 0: B = 2 grad_bytes N over the
    backward; stage 3: (grad_bytes + 2 weight_bytes) N over forward and backward.

    Args:
        kwargs: as :func:`dp_update_workdepth` (link, recompute, efficiency, latency_s, dtype,
            grad_bytes, weight_bytes); b and m do not change t*.
    Raises:
        ValueError: as :func:`dp_update_workdepth`.
    """
    wd = dp_update_workdepth(model, hardware, dp=dp, zero_stage=zero_stage, seq_len=seq_len,
                             **kwargs)
    rate = wd.flops_per_s
    ring, fpb = (dp - 1) / dp, rate / wd.bus_bandwidth_bytes_per_s
    alpha = kwargs.get("latency_s", 0.0)
    kappa, lat, by = {}, {}, {}
    for w in wd.windows:
        mine = [c for c in wd.collectives if c.window == w.name]
        kappa[w.name] = sum(c.calls * c.size_bytes * (2 if c.op == "all_reduce" else 1)
                            for c in mine) / w.flops_per_token
        lat[w.name] = sum(c.calls * c.ring_steps for c in mine) * alpha * rate / \
            w.flops_per_token
        by[w.name] = ring * fpb * kappa[w.name] + lat[w.name]
    binding = max(by, key=by.get) if by else None
    return OverlapThreshold(by[binding] if by else 0.0, binding, by, ring, fpb, kappa, lat,
                            seq_len)


def overlap_threshold_search(model, hardware="h100", *, dp: int, zero_stage: int = 0,
                             seq_len: int = 4096, max_micro_batch_size: int = 4096,
                             **kwargs) -> int:
    """Brute force: the tokens b T of the smallest micro-batch (b = 1, 2, ... sequences of
    ``seq_len``) whose update :func:`dp_update_workdepth` finds with no exposed communication.
    The numerical check of :func:`overlap_threshold_tokens`: b = ceil(t* / T).

    Raises:
        ValueError: none up to ``max_micro_batch_size`` sequences, and as
            :func:`dp_update_workdepth`.
    """
    check_int("max_micro_batch_size", max_micro_batch_size, 1)
    for b in range(1, max_micro_batch_size + 1):
        wd = dp_update_workdepth(model, hardware, dp=dp, zero_stage=zero_stage,
                                 seq_len=seq_len, micro_batch_size=b, **kwargs)
        if wd.exposed_s == 0:
            return b * seq_len
    raise ValueError(f"communication still exposed at micro_batch_size={max_micro_batch_size}"
                     f" sequences of {seq_len} tokens; raise max_micro_batch_size")
