"""A parallel layout for training — data, tensor, pipeline, context and expert parallelism,
ZeRO and recomputation — and the rules a layout must obey (book section :ref:`sec-choose-plan`).

Conventions (Megatron-Core's, ``megatron/core/parallel_state.py``, ``initialize_model_parallel``):

- GPUs = dp x tp x pp x cp. Expert parallelism is carved out of the data- and context-parallel
  ranks: the expert layers use tensor parallelism tp (Megatron's default
  ``expert_tensor_parallel_size = tp``), ep expert-parallel ranks and dp x cp / ep
  expert-data-parallel ranks, so ep must divide dp x cp.
- Rank order tp-cp-ep-dp-pp (Megatron-Core's default ``order``), tp innermost: a TP group is tp
  consecutive ranks, a CP group spans tp x cp, an EP group tp x ep, the data-parallel group
  tp x cp x dp, and pipeline stages are outermost. Consecutive ranks share a node.
- ``microbatches`` m is per data-parallel rank: global_batch = dp x micro_batch_size x m.

The rules (:meth:`ParallelPlan.check`) and where they come from:

- tp divides num_attention_heads and num_key_value_heads (Megatron-Core
  ``transformer/attention.py``: ``divide(num_query_groups, tp)``; it does not replicate KV heads
  for training, unlike vLLM for inference), and tp <= gpus_per_node (TP traffic needs NVLink).
- pp x interleave divides num_hidden_layers (equal stages and model chunks).
- ep > 1 only for a MoE model, ep divides num_experts (Megatron ``arguments.py``) and dp x cp.
- sp needs tp > 1; a MoE model with tp > 1 needs sp (Megatron: "When using MoE and tensor
  parallelism, sequence parallelism must be used").
- interleave > 1 needs pp > 1 and m divisible by pp (Megatron-LM schedules.py); pp > 1 needs
  m >= pp, or the 1F1B pipeline never fills (Narayanan et al. 2021 §2.2).
- zero_stage >= 2 needs pp = 1 (DeepSpeed's pipeline engine: "ZeRO-2 and ZeRO-3 are
  incompatible with pipeline parallelism").
- with a workload: seq_len divisible by 2 cp (Megatron splits each sequence into 2 cp chunks
  for load-balanced causal attention), by tp x cp with sp; global_batch = dp x b x m.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..checks import check_bool, check_choice, check_int
from .hardware import HardwareSpec
from .model import ModelConfig

__all__ = ["ParallelPlan", "TrainWorkload", "RECOMPUTE", "plan_columns", "plan_rules"]

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class TrainWorkload:
    """One training step's batch.

    Attributes:
        global_batch: B sequences per optimizer step.
        seq_len: T tokens per sequence.
        micro_batch_size: b sequences per microbatch on one data-parallel rank.
    """

    global_batch: int
    seq_len: int
    micro_batch_size: int = 1

    def __post_init__(self):
        for f in ("global_batch", "seq_len", "micro_batch_size"):
            check_int(f"TrainWorkload.{f}", getattr(self, f), 1)

    def microbatches_per_rank(self, dp: int) -> int:
        """m = B / (dp b), the micro-batches each data-parallel rank runs per step (at least 1;
        a batch that does not split evenly is rejected by :meth:`ParallelPlan.check`).

        Raises:
            ValueError: ``dp`` not an int >= 1.
        """
        check_int("dp", dp, 1)
        return max(1, self.global_batch // (dp * self.micro_batch_size))


@dataclass(frozen=True)
class ParallelPlan:
    """A training layout (module docstring for the conventions).

    Attributes:
        dp, tp, pp, cp: data-, tensor-, pipeline- and context-parallel sizes.
        ep: expert-parallel size, carved out of dp x cp (1 for a dense model).
        sp: sequence parallelism (Korthikanti et al. 2022) in the TP group.
        zero_stage: 0 (none), 1 (optimizer states), 2 (+ gradients), 3 (+ weights) sharded
            over the data-parallel ranks (Rajbhandari et al. 2020).
        microbatches: m per data-parallel rank per step. interleave: model chunks per stage v.
        recompute: activation recomputation, "none", "selective" or "full".
    Raises (on construction):
        ValueError: a field of the wrong type or out of range (rules between fields and with a
            model are :meth:`check`'s).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero_stage: int = 0
    microbatches: int = 1
    interleave: int = 1
    recompute: str = "none"

    def __post_init__(self):
        for f in ("dp", "tp", "pp", "cp", "ep", "microbatches", "interleave"):
            check_int(f"ParallelPlan.{f}", getattr(self, f), 1)
        check_bool("ParallelPlan.sp", self.sp)
        check_choice("ParallelPlan.zero_stage", self.zero_stage, (0, 1, 2, 3))
        check_choice("ParallelPlan.recompute", self.recompute, RECOMPUTE)

    @property
    def gpus(self) -> int:
        """dp x tp x pp x cp (ep lives inside dp x cp)."""
        return self.dp * self.tp * self.pp * self.cp

    def as_dict(self) -> dict:
        return asdict(self)

    def check(self, model: ModelConfig, hardware: HardwareSpec | None, gpus: int | None = None,
              workload: TrainWorkload | None = None) -> list[str]:
        """The rules (module docstring) this plan breaks, one message each; [] when valid.
        ``gpus`` and ``workload`` add the rules that need them; ``hardware`` None skips the
        node-size rule. Memory is not checked here
        (see :func:`rlmperf_lite.cost.memory_per_gpu` and the planner).

        Raises:
            ValueError: ``model``, ``hardware`` or ``workload`` of the wrong type, bad ``gpus``.
        """
        cols = plan_columns([self])
        return [msg(0) for mask, msg in plan_rules(model, hardware, cols, gpus, workload)
                if mask[0]]

    def validate(self, model: ModelConfig, hardware: HardwareSpec | None, gpus: int | None = None,
                 workload: TrainWorkload | None = None) -> ParallelPlan:
        """Return self, or raise a ValueError listing every broken rule (:meth:`check`)."""
        broken = self.check(model, hardware, gpus, workload)
        if broken:
            raise ValueError(f"invalid ParallelPlan {self}: " + "; ".join(broken))
        return self


def plan_columns(plans) -> dict:
    """Plans as columns: {field: array with one entry per plan}; ``recompute`` as its index in
    :data:`RECOMPUTE` (0 none, 1 selective, 2 full)."""
    cols = {k: np.array([getattr(p, k) for p in plans]) for k in
            ("dp", "tp", "pp", "cp", "ep", "sp", "zero_stage", "microbatches", "interleave")}
    cols["recompute"] = np.array([RECOMPUTE.index(p.recompute) for p in plans])
    return cols


def _inputs(model, hardware, gpus, workload):
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    if hardware is not None and not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec, got {type(hardware).__name__}")
    check_int("gpus", gpus, 1, optional=True)
    if workload is not None and not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")


def plan_rules(model: ModelConfig, hardware: HardwareSpec | None, cols: dict, gpus=None,
               workload=None) -> list:
    """The rules over many plans at once: ``cols`` as :func:`plan_columns` makes them (equal-
    length arrays, one entry per plan). Returns [(broken, message)]: ``broken`` a bool array,
    ``message(i)`` the text for plan i. ``hardware`` None skips the node-size rule."""
    _inputs(model, hardware, gpus, workload)
    dp, tp, pp, cp, ep = (cols[k] for k in ("dp", "tp", "pp", "cp", "ep"))
    sp, z, m, v = cols["sp"], cols["zero_stage"], cols["microbatches"], cols["interleave"]
    H, KV, L, E = (model.num_attention_heads, model.kv_heads, model.num_hidden_layers,
                   model.num_experts)
    gpn = hardware.gpus_per_node if hardware is not None else np.inf
    rules = [
        (H % tp != 0, lambda i: f"tp={tp[i]} does not divide num_attention_heads={H}"),
        (KV % tp != 0, lambda i: f"tp={tp[i]} does not divide num_key_value_heads={KV} "
                                 f"(Megatron splits the KV heads over tp)"),
        (tp > gpn, lambda i: f"tp={tp[i]} exceeds gpus_per_node={gpn} (a TP group must fit in "
                             f"a node)"),
        (L % (pp * v) != 0, lambda i: (f"pp*interleave={pp[i] * v[i]}" if v[i] > 1 else
                                       f"pp={pp[i]}") + f" does not divide num_hidden_layers={L}"),
        ((ep > 1) & (E == 0), lambda i: f"ep={ep[i]} needs a MoE model ({model.name} has no "
                                        f"experts)"),
        ((ep > 1) & (E > 0) & (E % ep != 0),
         lambda i: f"ep={ep[i]} does not divide num_experts={E}"),
        ((dp * cp) % ep != 0, lambda i: f"ep={ep[i]} does not divide dp*cp={dp[i] * cp[i]} "
                                        f"(experts are spread over the data-parallel ranks)"),
        (sp & (tp == 1), lambda i: "sp=True needs tp > 1"),
        ((E > 0) & (tp > 1) & ~sp, lambda i: f"a MoE model with tp={tp[i]} needs sp=True "
                                             f"(Megatron)"),
        ((v > 1) & (pp == 1), lambda i: f"interleave={v[i]} needs pp > 1"),
        ((v > 1) & (pp > 1) & (m % pp != 0),
         lambda i: f"interleave={v[i]} needs microbatches={m[i]} divisible by pp={pp[i]} "
                   f"(Megatron's interleaved schedule)"),
        ((pp > 1) & (m < pp), lambda i: f"microbatches={m[i]} < pp={pp[i]}: the pipeline "
                                        f"never fills"),
        ((z >= 2) & (pp > 1), lambda i: f"zero_stage={z[i]} with pp={pp[i]} (DeepSpeed: ZeRO-2 "
                                        f"and ZeRO-3 are incompatible with pipeline "
                                        f"parallelism)"),
    ]
    if gpus is not None:
        n = dp * tp * pp * cp
        rules.append((n != gpus, lambda i: f"dp*tp*pp*cp={n[i]} != gpus={gpus}"))
    if workload is not None:
        s, B, b = workload.seq_len, workload.global_batch, workload.micro_batch_size
        rules += [
            ((cp > 1) & (s % (2 * cp) != 0),
             lambda i: f"seq_len={s} is not divisible by 2*cp={2 * cp[i]} (Megatron's "
                       f"load-balanced context parallelism)"),
            (sp & (s % (tp * cp) != 0),
             lambda i: f"seq_len={s} is not divisible by tp*cp={tp[i] * cp[i]} (sequence "
                       f"parallelism splits it)"),
            (B % (dp * b) != 0, lambda i: f"global_batch={B} is not divisible by "
                                          f"dp*micro_batch_size={dp[i] * b}"),
            ((B % (dp * b) == 0) & (m * dp * b != B),
             lambda i: f"microbatches={m[i]} != global_batch/(dp*micro_batch_size)="
                       f"{B // (dp[i] * b)}"),
        ]
    return rules
