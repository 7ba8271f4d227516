"""Work and depth in seconds on a real machine, and Brent's bounds in seconds (book section
:ref:`sec-workdepth-seconds`).

A phase is a graph of tasks, each the smallest piece one processor runs without waiting for
another: a decode step of one sequence on an engine replica, one prompt's prefill, one
sequence's forward (and backward) pass on one GPU. A task's time is its roofline time at the
achieved rates (peak x ``train_efficiency``, bandwidth x ``decode_efficiency``). Then::

    W = sum of task times x GPUs per task   (GPU-seconds; p = the GPUs)
    D = the longest chain of dependent tasks, each at its latency floor (alone on its device),
        plus the collectives the chain waits for                            (seconds)
    max(W / p, D) <= T_p <= W / p + D                                      (Brent 1974)

Memory-bound batched work is charged at the batch the layout gives it: a task in a batch of b
pays its share of the batch's weight reads, 2 N / b bytes, plus its own. So W depends on the
batch per replica, and decode's W / p falls to its depth D as that batch falls to one. The PRAM
rounds of ``rlmperf_lite.cost.workdepth`` (:func:`~rlmperf_lite.cost.rl_step_workdepth`) are
the ideal-machine limit of the same graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_int, check_number
from .estimate import estimate_rl_step, sample_lengths
from .flops import forward_flops
from .hardware import HardwareSpec
from .phase import PhaseSequence
from .presets import resolve_model
from .rollout import decode_step_s, decode_tp_comm, prefill_s

__all__ = ["PhaseWorkDepth", "StepTotals", "StepWorkDepth", "rl_step_workdepth_s",
           "back_of_envelope", "pram_processors", "per_version_depth", "H100_CLOCK_HZ"]

#: The H100 SXM clock in Hz; 989.5 TFLOP/s dense bf16 = 132 SMs x 4,096 FLOPs a clock x 1.83 GHz.
H100_CLOCK_HZ = 1.83e9


@dataclass(frozen=True)
class PhaseWorkDepth:
    """One phase in seconds: ``work_gpu_s`` W, ``depth_s`` D, on ``processors`` p GPUs."""

    name: str
    work_flops: float
    work_gpu_s: float
    depth_s: float
    processors: int

    @property
    def work_per_processor_s(self) -> float:
        return self.work_gpu_s / self.processors

    @property
    def brent_lower_s(self) -> float:
        """The lower bound max(W/p, D); no schedule on p GPUs is faster."""
        return max(self.work_per_processor_s, self.depth_s)

    @property
    def brent_upper_s(self) -> float:
        """The upper bound W/p + D; a greedy schedule is at least this fast (Brent 1974)."""
        return self.work_per_processor_s + self.depth_s

    @property
    def parallelism(self) -> float:
        """The parallelism W / D, in GPUs; the most the phase keeps busy at this batch."""
        return self.work_gpu_s / self.depth_s if self.depth_s else math.inf

    def as_dict(self) -> dict:
        return {"name": self.name, "work_flops": self.work_flops, "work_gpu_s": self.work_gpu_s,
                "depth_s": self.depth_s, "brent_lower_s": self.brent_lower_s,
                "brent_upper_s": self.brent_upper_s}


class StepTotals(PhaseSequence):
    """W, D and Brent's bounds of phases that run one after another: the sums of theirs."""

    work_flops = property(lambda self: self.total("work_flops"))
    work_gpu_s = property(lambda self: self.total("work_gpu_s"))
    depth_s = property(lambda self: self.total("depth_s"))
    brent_lower_s = property(lambda self: self.total("brent_lower_s"))
    brent_upper_s = property(lambda self: self.total("brent_upper_s"))


@dataclass(frozen=True)
class StepWorkDepth(StepTotals):
    """The phases of a synchronous step, one after another (a barrier between two phases), so
    the step's bounds are the sums of the phases'. ``estimate_s`` is the step time of
    :func:`~rlmperf_lite.cost.estimate_rl_step` for the same inputs."""

    phases: tuple
    processors: int
    estimate_s: float
    sequences_per_replica: int
    rollout_tp: int
    inputs: dict = field(default_factory=dict, compare=False, repr=False)


    @property
    def sequences_per_gpu(self) -> float:
        """The decode batch per GPU, the sequences per replica over the replica's tp GPUs."""
        return self.sequences_per_replica / self.rollout_tp

    @property
    def brackets_estimate(self) -> bool:
        """Whether the bounds hold the estimate (not when the estimate splits a pass finer
        than one sequence per GPU, which the layout cannot do without TP or CP)."""
        return self.brent_lower_s <= self.estimate_s * (1 + 1e-9) and \
            self.estimate_s <= self.brent_upper_s * (1 + 1e-9)

    def as_dict(self) -> dict:
        step = {"name": "step", "work_flops": self.work_flops, "work_gpu_s": self.work_gpu_s,
                "depth_s": self.depth_s, "brent_lower_s": self.brent_lower_s,
                "brent_upper_s": self.brent_upper_s, "estimate_s": self.estimate_s,
                "processors": self.processors, "rollout_tp": self.rollout_tp,
                "sequences_per_replica": self.sequences_per_replica,
                "sequences_per_gpu": self.sequences_per_gpu}
        return {"phases": [p.as_dict() for p in self.phases], "step": step}


def _decode(actor, hw, P, R, replicas, rates) -> tuple:
    """(W in GPU-s, D in s) of decode: token j of a response costs its share of a step of the
    batch b per replica; the longest response's R - 1 steps each cost at least a step alone."""
    b = math.ceil(R.size / replicas)                            # sequences per replica
    ctx = P + np.arange(1, int(R.max()), dtype=np.float64)      # (R_max - 1,) contexts
    comm = decode_tp_comm(actor, hw, rates["tp"])              # the tp all-reduces, 0 at tp 1
    at_b = (decode_step_s(actor, hw, batch=b, context=ctx, **rates)
            + comm.latency_s + b * comm.per_seq_s) / b
    alone = decode_step_s(actor, hw, batch=1, context=ctx, **rates) + comm.total_s
    prefix = np.concatenate([[0.0], np.cumsum(at_b)])           # prefix[k]: first k tokens
    work = rates["tp"] * float(prefix[(R - 1).astype(np.int64)].sum())
    return work, float(alone.sum()), b


def _pass(hw, flops_per_seq, bytes_per_gpu, train_efficiency, dtype) -> float:
    """Seconds of one sequence's pass alone on one GPU (a training-side task's floor)."""
    return max(flops_per_seq / hw.peak(dtype),
               bytes_per_gpu / hw.hbm_bandwidth_bytes_per_s) / train_efficiency


def rl_step_workdepth_s(algo: str = "grpo", **estimate_kwargs) -> StepWorkDepth:
    """W (GPU-seconds), D (seconds) and Brent's bounds of each phase of the step that
    :func:`~rlmperf_lite.cost.estimate_rl_step` describes (same arguments), on its ``gpus``.

    Decode: W = tp sum_i sum_j t_step(b, P + j) / b with b = ceil(B G / replicas) sequences per
    replica; D = sum_j t_step(1, P + j) over the longest response. Prefill likewise per prompt.
    Forward passes and updates: W = p x the estimate's time (the batch per GPU reads the
    weights once); D = the longest sequence's pass alone on one GPU (x epochs). Weight sync: a
    collective everyone waits for, D = its time, W = 0. Advantages run on the controller's
    CPU, 0 as in the estimate.

    Raises:
        ValueError: as :func:`~rlmperf_lite.cost.estimate_rl_step`.
    """
    est = estimate_rl_step(algo, **estimate_kwargs)
    kw = {**est.inputs}
    hw: HardwareSpec = kw["hardware"]
    actor, gpus, tp = kw["actor"], est.gpus, est.rollout_tp
    te, de, dtype = kw["train_efficiency"], kw["decode_efficiency"], kw["dtype"]
    rates = dict(tp=tp, train_efficiency=te, decode_efficiency=de, dtype=dtype)
    P, n_seq = kw["prompt_len"], kw["prompts"] * kw["group_size"]
    R = sample_lengths(kw["response_len"], n_seq)
    T = int(P + R.max())
    replicas = gpus // tp
    models = {"actor": actor, "critic": actor if kw["critic"] is None else
              resolve_model(kw["critic"], "critic")}
    for key in ("reference", "reward"):
        models[key] = actor if kw[key] is None else resolve_model(kw[key], key)
    phases, b = [], 1
    for e in est.phases:
        m = models.get(e.model, actor)
        if e.name == "rollout_prefill":
            n_pf = n_seq if algo == "ppo" else kw["prompts"]
            per_rep = math.ceil(n_pf / replicas)
            at_b = prefill_s(actor, hw, prompts=per_rep, prompt_len=P, **rates) / per_rep
            work = tp * n_pf * at_b
            depth = prefill_s(actor, hw, prompts=1, prompt_len=P, **rates)
        elif e.name == "rollout_decode":
            work, depth, b = _decode(actor, hw, P, R, replicas, rates)
        elif e.name == "weight_sync":
            work, depth = 0.0, e.time_s                        # a collective on the links
        elif e.name == "advantages":
            work, depth = 0.0, 0.0                              # on the controller's CPU
        elif e.name.endswith("_update"):                        # fwd + bwd of one sequence
            head = "all" if e.model == "actor" else "none"
            f = 3 * forward_flops(m, [T], lm_head=head)
            work = gpus * e.time_s
            depth = kw["ppo_epochs"] * _pass(hw, f, 18.0 * m.num_params(), te, dtype)
        else:                                                   # log-probs, values, reward
            head = "all" if e.name.endswith("logprobs") else "none"
            f = forward_flops(m, [T], lm_head=head)
            work = gpus * e.time_s
            depth = _pass(hw, f, 2.0 * m.num_params(), te, dtype)
        phases.append(PhaseWorkDepth(e.name, e.flops, float(work), float(depth), gpus))
    return StepWorkDepth(tuple(phases), gpus, est.time_s, b, tp, inputs=est.inputs)


def back_of_envelope(algo: str = "grpo", **estimate_kwargs) -> dict:
    """The step by hand, as in "How to Scale Your Model": decode = (R_max - 1) steps x the
    weights' bytes / (tp x bandwidth); each forward pass = 2 N tokens / (p x peak); the update
    = 6 N tokens / (p x peak); the step's MFU = its FLOPs / (step x p x peak). Attention, KV
    reads and efficiencies left out; generation's share = decode / step. Same arguments as
    :func:`~rlmperf_lite.cost.estimate_rl_step`.

    Returns:
        dict of ``decode_step_s``, ``decode_s``, ``forward_pass_s``, ``forward_passes``,
        ``update_s``, ``step_s``, ``step_mfu``, ``generation_share``.
    """
    est = estimate_rl_step(algo, **estimate_kwargs)
    kw, hw = est.inputs, est.inputs["hardware"]
    N, p, peak = kw["actor"].num_params(), est.gpus, hw.peak(kw["dtype"])
    n_seq = kw["prompts"] * kw["group_size"]
    R = sample_lengths(kw["response_len"], n_seq)
    tokens = float((kw["prompt_len"] + R).sum())
    decode_step = 2.0 * N / (est.rollout_tp * hw.hbm_bandwidth_bytes_per_s)
    passes = sum(e.name.endswith(("logprobs", "values")) or e.name == "reward"
                 for e in est.phases)
    fwd = 2.0 * N * tokens / (p * peak)
    update = kw["ppo_epochs"] * 6.0 * N * tokens / (p * peak)
    step = (R.max() - 1) * decode_step + passes * fwd + update
    flops = 2.0 * N * float(R.sum()) + passes * 2.0 * N * tokens + update * p * peak
    return {"decode_step_s": decode_step, "decode_s": float((R.max() - 1) * decode_step),
            "forward_pass_s": fwd, "forward_passes": int(passes), "update_s": update,
            "step_s": float(step), "step_mfu": float(flops / (step * p * peak)),
            "generation_share": float((R.max() - 1) * decode_step / step)}


def pram_processors(hardware: HardwareSpec, gpus: int, *, clock_hz: float = H100_CLOCK_HZ,
                    dtype: str = "bf16") -> float:
    """The PRAM processors that ``gpus`` devices amount to: one FLOP per processor per clock,
    so p = gpus x peak / clock (64 H100s: 3.5e7). A round then lasts 1 / clock seconds.

    Raises:
        ValueError: naming a bad ``gpus`` or ``clock_hz``."""
    check_int("gpus", gpus, 1)
    check_number("clock_hz", clock_hz, low=0, low_open=True)
    return gpus * hardware.peak(dtype) / clock_hz


def per_version_depth(gen_depth: float, train_depth: float, staleness: int) -> float:
    """The steady time per weight version when generation (depth ``gen_depth``) may run
    ``staleness`` k versions ahead of a trainer whose chain per version is ``train_depth``
    (same unit, e.g. seconds): max(D_train, (D_gen + D_train) / (k + 1)), with unlimited
    processors. Derived in book section :ref:`sec-async-workdepth`; the simulator reproduces
    it and the Ray controller's work-depth uses it.

    Raises:
        ValueError: naming ``gen_depth`` or ``train_depth`` (negative) or ``staleness`` (not an
            int >= 0).
    """
    check_number("gen_depth", gen_depth, low=0)
    check_number("train_depth", train_depth, low=0)
    check_int("staleness", staleness, 0)
    return max(train_depth, (gen_depth + train_depth) / (staleness + 1))
