"""A parallel layout for training — data, tensor, pipeline, context and expert parallelism,
ZeRO, recomputation and the pipeline's stage layout — and the rules a layout must obey (book
section :ref:`sec-choose-plan`).

Conventions (Megatron-Core's, ``megatron/core/parallel_state.py``, ``initialize_model_parallel``):

- GPUs = dp x tp x pp x cp. Expert parallelism is carved out of the data- and context-parallel
  ranks: the expert layers use tensor parallelism tp (Megatron's default
  ``expert_tensor_parallel_size = tp``), ep expert-parallel ranks and dp x cp / ep
  expert-data-parallel ranks, so ep must divide dp x cp.
- Rank order tp-cp-ep-dp-pp (Megatron-Core's default ``order``), tp innermost: a TP group is tp
  consecutive ranks, a CP group spans tp x cp, an EP group tp x ep, the data-parallel group
  tp x cp x dp, and pipeline stages are outermost. Consecutive ranks share an NVLink domain.
- ``microbatches`` m is per data-parallel rank: global_batch = dp x micro_batch_size x m.
- Stages: L / pp layers each, or Megatron-Core's uneven split (``first_stage_layers``,
  ``last_stage_layers`` = ``--decoder-first/last-pipeline-num-layers``), the other stages even.

The rules (:meth:`ParallelPlan.check`) and where they come from:

- tp divides num_attention_heads and num_key_value_heads (Megatron-Core
  ``transformer/attention.py``: ``divide(num_query_groups, tp)``; it does not replicate KV heads
  for training, unlike vLLM for inference), and tp <= the hardware's NVLink domain
  (``HardwareSpec.nvlink_domain``: TP's per-layer all-reduces need NVLink).
- Even stages: pp x interleave divides num_hidden_layers. Uneven (Megatron-Core
  ``TransformerConfig.__post_init__``, "Uneven PP", NVIDIA/Megatron-LM
  ``megatron/core/transformer/transformer_config.py``, commit
  002526d81b81f6ab534e93844f9a228709887494): pp > 1; the layers left after the first and last
  stages go to the stages in between, none left iff no stage is in between, evenly; with
  interleave v, the first, last and each middle stage's layers divisible by v.
- ep > 1 only for a MoE model, ep divides num_experts (Megatron ``arguments.py``) and dp x cp.
- sp needs tp > 1; a MoE model with tp > 1 needs sp (Megatron: "When using MoE and tensor
  parallelism, sequence parallelism must be used").
- interleave > 1 needs pp > 1 and m divisible by pp (Megatron-LM schedules.py); pp > 1 needs
  m >= pp, or the 1F1B pipeline never fills (Narayanan et al. 2021 §2.2).
- The ``backend``'s own rules (``rlmperf_lite.cost.backends``): which ZeRO stages it offers
  with and without a pipeline, whether it interleaves, when it allows plain DDP.
- with a workload: seq_len divisible by 2 cp (Megatron splits each sequence into 2 cp chunks
  for load-balanced causal attention), by tp x cp with sp; global_batch = dp x b x m.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..checks import check_bool, check_choice, check_int
from .backends import DEFAULT_BACKEND, training_backend
from .hardware import HardwareSpec
from .model import MAX_POSITIONS, MAX_SIZE, ModelConfig

__all__ = ["ParallelPlan", "TrainWorkload", "RECOMPUTE", "plan_columns", "plan_rules",
           "balanced_stage_layers", "stage_layer_arrays"]

RECOMPUTE = ("none", "selective", "full")
MAX_GPUS = 10**8                # a plan's GPUs: 100x the largest clusters


@dataclass(frozen=True)
class TrainWorkload:
    """One training step's batch.

    Attributes:
        global_batch: B sequences per optimizer step.
        seq_len: T tokens per sequence.
        micro_batch_size: b sequences per microbatch on one data-parallel rank.
    Raises (on construction):
        ValueError: a size below 1, above 1e9, or a seq_len above 1e8.
    """

    global_batch: int
    seq_len: int
    micro_batch_size: int = 1

    def __post_init__(self):
        for f in ("global_batch", "micro_batch_size"):
            check_int(f"TrainWorkload.{f}", getattr(self, f), 1, high=MAX_SIZE)
        check_int("TrainWorkload.seq_len", self.seq_len, 1, high=MAX_POSITIONS)

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
        first_stage_layers, last_stage_layers: layers of the first / last pipeline stage, the
            stages in between sharing the rest evenly (Megatron-Core's
            ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``);
            None: that stage is like the others (both None: L / pp each).
        backend: the training library whose rules apply (``rlmperf_lite.cost.backends``),
            "megatron" (default), "deepspeed" or "fsdp2" / "torchtitan".
    Raises (on construction):
        ValueError: a field of the wrong type or out of range (a size above 1e8, a plan of more
            than 1e8 GPUs, more than 1e9 microbatches; rules between fields and with a model
            are :meth:`check`'s).
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
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    backend: str = DEFAULT_BACKEND

    def __post_init__(self):
        for f in ("dp", "tp", "pp", "cp", "ep", "interleave"):
            check_int(f"ParallelPlan.{f}", getattr(self, f), 1, high=MAX_GPUS)
        check_int("ParallelPlan.microbatches", self.microbatches, 1, high=MAX_SIZE)
        if self.gpus > MAX_GPUS:                    # the rules' int64 products stay exact
            raise ValueError(f"ParallelPlan spans dp*tp*pp*cp = {self.gpus:.3g} GPUs, above the "
                             f"{MAX_GPUS:.0e} this cost model accepts: lower dp, tp, pp or cp")
        for f in ("first_stage_layers", "last_stage_layers"):
            check_int(f"ParallelPlan.{f}", getattr(self, f), 1, optional=True)
        check_bool("ParallelPlan.sp", self.sp)
        check_choice("ParallelPlan.zero_stage", self.zero_stage, (0, 1, 2, 3))
        check_choice("ParallelPlan.recompute", self.recompute, RECOMPUTE)
        try:
            name = training_backend(self.backend).name
        except ValueError as e:
            raise ValueError(f"ParallelPlan.{e}") from None
        object.__setattr__(self, "backend", name)   # one spelling: 'TorchTitan' == 'fsdp2'

    def stage_layers(self, model) -> tuple:
        """Layers of each of the pp stages for ``model`` (a ModelConfig or its layer count L).
        Example: DeepSeek-V3's 61 layers, pp = 4, last_stage_layers = 13 -> (16, 16, 16, 13).

        Raises:
            ValueError: a layout that breaks a stage rule of the module docstring.
        """
        L = model.num_hidden_layers if isinstance(model, ModelConfig) else model
        check_int("num_hidden_layers", L, 1)
        cols = plan_columns([self])
        broken = [msg(0) for mask, msg in _stage_rules(L, cols) if mask[0]]
        if broken:
            raise ValueError("; ".join(broken))
        first, middle, last, _ = (float(a[0]) for a in stage_layer_arrays(
            L, cols["pp"], cols["first_stage_layers"], cols["last_stage_layers"]))
        if self.pp == 1:
            return (L,)
        return (int(first),) + (int(middle),) * (self.pp - 2) + (int(last),)

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
        NVLink-domain rule. Memory is not checked here
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
    :data:`RECOMPUTE` (0 none, 1 selective, 2 full), unset stage layers as 0, ``backend`` its
    canonical name."""
    cols = {k: np.array([getattr(p, k) for p in plans]) for k in
            ("dp", "tp", "pp", "cp", "ep", "sp", "zero_stage", "microbatches", "interleave")}
    cols["recompute"] = np.array([RECOMPUTE.index(p.recompute) for p in plans])
    for k in ("first_stage_layers", "last_stage_layers"):
        cols[k] = np.array([getattr(p, k) or 0 for p in plans], dtype=np.int64)
    cols["backend"] = np.array([training_backend(p.backend).name for p in plans])
    return cols


def stage_layer_arrays(num_layers: int, pp, first, last) -> tuple:
    """(first stage's layers, each middle stage's, last stage's, number of stages sharing the
    rest) per plan, as float arrays: ``first`` / ``last`` the plans' stage layers (0 = unset,
    that stage then one of those sharing the rest evenly with the middle ones; Megatron's
    count, module docstring). A plan whose layout breaks the stage rules gets non-integer or
    negative values (the rules reject it). pp = 1: the one stage holds every layer."""
    pp, f, la = (np.asarray(a, dtype=np.float64) for a in (pp, first, last))
    n_mid = pp - (f > 0) - (la > 0)                                   # stages sharing the rest
    with np.errstate(divide="ignore", invalid="ignore"):
        mid = np.where(n_mid > 0, (num_layers - f - la) / n_mid, 0.0)
    one = pp == 1
    first_l = np.where(one, num_layers, np.where(f > 0, f, mid))
    last_l = np.where(one, num_layers, np.where(la > 0, la, mid))
    return first_l, np.where(one, 0.0, mid), last_l, np.where(one, 0.0, n_mid)


def balanced_stage_layers(num_layers: int, pp: int, interleave: int = 1) -> tuple | None:
    """The layers of each of ``pp`` stages: L / pp each when pp x v divides L; else Megatron's
    first/last-stage layout in which no stage exceeds c, the least multiple of v >= L / pp:
    the pp - 2 middle stages hold the most they can, k <= c (a multiple of v), and the first
    and last share the rest, each <= c, in multiples of v, the last (with the LM head) the
    smaller share; None when no such layout exists. Examples: 94 layers, pp = 4 ->
    (23, 24, 24, 23); 61, pp = 12 -> (6, 5 x 10, 5).

    Raises:
        ValueError: sizes not ints >= 1.
    """
    for label, v in (("num_layers", num_layers), ("pp", pp), ("interleave", interleave)):
        check_int(label, v, 1)
    v = interleave
    if num_layers % (pp * v) == 0:
        return (num_layers // pp,) * pp
    if pp == 1:
        return None
    c = -(-num_layers // (pp * v)) * v                   # least multiple of v >= L / pp
    for k in range(c, 0, -v) if pp > 2 else (0,):        # each middle stage's layers
        rest = num_layers - (pp - 2) * k                 # for the first and last stages
        if 2 * v <= rest <= 2 * c and rest % v == 0:
            first = -(-rest // (2 * v)) * v              # the larger half, in multiples of v
            return (first,) + (k,) * (pp - 2) + (rest - first,)
    return None


def _inputs(model, hardware, gpus, workload):
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    if hardware is not None and not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec, got {type(hardware).__name__}")
    check_int("gpus", gpus, 1, optional=True)
    if workload is not None and not isinstance(workload, TrainWorkload):
        raise ValueError(f"workload must be a TrainWorkload, got {type(workload).__name__}")


def _stage_rules(L: int, cols: dict) -> list:
    """The stage-layout rules (module docstring) as [(broken, message)]."""
    pp, v = cols["pp"], cols["interleave"]
    f, la = cols["first_stage_layers"], cols["last_stage_layers"]
    even, uneven = (f == 0) & (la == 0), (f > 0) | (la > 0)
    _, mid, _, n_mid = stage_layer_arrays(L, pp, f, la)
    rest = L - f - la
    hint = " (set first_stage_layers / last_stage_layers for uneven stages)"
    return [
        (even & (L % (pp * v) != 0),
         lambda i: (f"pp*interleave={pp[i] * v[i]}" if v[i] > 1 else f"pp={pp[i]}")
         + f" does not divide num_hidden_layers={L}" + hint),
        (uneven & (pp == 1), lambda i: "first_stage_layers / last_stage_layers need pp > 1"),
        (uneven & (pp > 1) & ((rest < 0) | ((rest > 0) != (n_mid > 0))),
         lambda i: f"first_stage_layers={f[i] or None}, last_stage_layers={la[i] or None} leave "
                   f"{rest[i]} of num_hidden_layers={L} for {int(n_mid[i])} middle stages "
                   f"(Megatron: none left iff no middle stage)"),
        (uneven & (pp > 1) & (rest > 0) & (n_mid > 0) & (rest % np.maximum(n_mid, 1) != 0),
         lambda i: f"the {rest[i]} middle layers do not split evenly over {int(n_mid[i])} "
                   f"middle stages (Megatron's uneven pipeline rule)"),
        (uneven & (v > 1) & ((f % v != 0) | (la % v != 0) | (np.mod(mid, v) != 0)),
         lambda i: f"interleave={v[i]} does not divide every stage's layers "
                   f"(first {f[i] or mid[i]:g}, middle {mid[i]:g}, last {la[i] or mid[i]:g})"),
    ]


def _backend_rules(cols: dict) -> list:
    """The rules of each plan's training backend (``rlmperf_lite.cost.backends``)."""
    names, z, pp, v = cols["backend"], cols["zero_stage"], cols["pp"], cols["interleave"]
    dp, other = cols["dp"], cols["tp"] * cols["pp"] * cols["cp"]
    rules = []
    for key in np.unique(names):
        b, sel = training_backend(str(key)), names == key
        why = {k: f" ({t})" for k, t in b.why.items()}
        offered = np.where(pp > 1, np.isin(z, b.zero_stages_with_pp), np.isin(z, b.zero_stages))
        rules.append((sel & ~offered & (pp > 1) & np.isin(z, b.zero_stages),
                      lambda i, b=b, w=why: f"{b.name} does not support zero_stage={z[i]} with "
                                            f"pp={pp[i]}" + w.get("zero_with_pp", "")))
        rules.append((sel & ~np.isin(z, b.zero_stages),
                      lambda i, b=b, w=why: f"{b.name} does not support zero_stage={z[i]}"
                                            + w.get("zero", "")))
        if not b.interleaved_schedule:
            rules.append((sel & (v > 1), lambda i, b=b, w=why: f"{b.name} does not support "
                          f"interleave={v[i]}" + w.get("interleave", "")))
        if b.ddp_needs_pure_dp:
            rules.append((sel & (z == 0) & (dp > 1) & (other > 1),
                          lambda i, b=b, w=why: f"{b.name} does not support zero_stage=0 (DDP) "
                          f"with dp={dp[i]} and tp*pp*cp={other[i]}" + w.get("ddp", "")))
    return rules


def plan_rules(model: ModelConfig, hardware: HardwareSpec | None, cols: dict, gpus=None,
               workload=None) -> list:
    """The rules over many plans at once: ``cols`` as :func:`plan_columns` makes them (equal-
    length arrays, one entry per plan). Returns [(broken, message)]: ``broken`` a bool array,
    ``message(i)`` the text for plan i. ``hardware`` None skips the NVLink-domain rule."""
    _inputs(model, hardware, gpus, workload)
    dp, tp, pp, cp, ep = (cols[k] for k in ("dp", "tp", "pp", "cp", "ep"))
    sp, m, v = cols["sp"], cols["microbatches"], cols["interleave"]
    H, KV, L, E = (model.num_attention_heads, model.kv_heads, model.num_hidden_layers,
                   model.num_experts)
    nvl = hardware.nvlink_domain if hardware is not None else np.inf
    rules = [
        (H % tp != 0, lambda i: f"tp={tp[i]} does not divide num_attention_heads={H}"),
        (KV % tp != 0, lambda i: f"tp={tp[i]} does not divide num_key_value_heads={KV} "
                                 f"(Megatron splits the KV heads over tp)"),
        (tp > nvl, lambda i: f"tp={tp[i]} exceeds nvlink_domain_gpus={nvl} (a TP group must "
                             f"fit in an NVLink domain)"),
        *_stage_rules(L, cols),
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
        *_backend_rules(cols),
    ]
    return rules + _size_rules(cols, gpus, workload)


def _size_rules(cols: dict, gpus, workload) -> list:
    """The rules that need the GPU count or the workload."""
    dp, tp, pp, cp = (cols[k] for k in ("dp", "tp", "pp", "cp"))
    sp, m = cols["sp"], cols["microbatches"]
    rules = []
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
