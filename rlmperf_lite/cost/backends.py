"""Training backends and the layout rules each one imposes (book section :ref:`sec-choose-plan`).

Which ZeRO stages combine with a pipeline is a property of the library that trains, not of
parallelism itself, so :meth:`rlmperf_lite.cost.ParallelPlan.check` asks the plan's backend.
Each entry lists the sources read (repository, file, commit or URL):

- ``megatron`` (Megatron-Core, NVIDIA/Megatron-LM): stage 0 is its DDP, stage 1 its distributed
  optimizer (``--use-distributed-optimizer``: optimizer states sharded, gradients
  reduce-scattered), used with pipelines. Stages 2 and 3 are Megatron-FSDP
  (``--use-megatron-fsdp``, ``data_parallel_sharding_strategy`` ``optim_grads`` /
  ``optim_grads_params``; "custom FSDP" renamed Megatron FSDP in Megatron-Core 0.14), documented
  as composing with TP, CP and EP but not PP; Megatron's other FSDP, ``--use-torch-fsdp2``,
  asserts "not supported with pipeline parallelism" (``megatron/training/arguments.py``).
  This is the default backend: its rules are the ones this library applied before backends
  were named, so results do not move.
- ``deepspeed`` (deepspeedai/DeepSpeed): its ``PipelineEngine`` asserts "ZeRO-2 and ZeRO-3 are
  incompatible with pipeline parallelism" and runs one schedule, ``TrainSchedule`` (1F1B),
  with no interleaved virtual stages (``deepspeed/runtime/pipe/engine.py``).
- ``fsdp2`` (alias ``torchtitan``; pytorch/torchtitan): FSDP2 ``fully_shard`` with
  ``reshard_after_forward=True`` (ZeRO-3) or ``False`` (ZeRO-2-like, TorchTitan's default
  when a pipeline is on, "to avoid per-microbatch all-gathers"), with pipelines; no
  optimizer-only sharding (no ZeRO-1); plain DDP only when every GPU is a data-parallel rank
  ("DDP has not supported > 1D parallelism"; ``torchtitan/models/llama3/infra/parallelize.py``).

Not modelled: how a backend schedules its collectives (every backend is costed with the same
per-stage traffic, :mod:`rlmperf_lite.cost.parallel_step`), DeepSpeed-Ulysses versus ring
context parallelism, and the backends' other options.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TrainingBackend", "TRAINING_BACKENDS", "BACKEND_ALIASES", "DEFAULT_BACKEND",
           "training_backend"]

DEFAULT_BACKEND = "megatron"


@dataclass(frozen=True)
class TrainingBackend:
    """One training library's layout rules.

    Attributes:
        name: the key in :data:`TRAINING_BACKENDS`.
        zero_stages: ZeRO stages it offers without a pipeline (pp = 1).
        zero_stages_with_pp: the stages it offers with pp > 1.
        interleaved_schedule: whether it runs interleaved (virtual-stage) 1F1B.
        ddp_needs_pure_dp: stage 0 with dp > 1 only when tp = pp = cp = 1.
        why: {rule: the reason quoted in a rejection message}, rules "zero", "zero_with_pp",
            "interleave", "ddp".
        sources: {rule: where it was read}.
    """

    name: str
    zero_stages: tuple
    zero_stages_with_pp: tuple
    interleaved_schedule: bool
    ddp_needs_pure_dp: bool
    why: dict = field(default_factory=dict, compare=False)
    sources: dict = field(default_factory=dict, compare=False)


_MCORE = ("NVIDIA/Megatron-LM megatron/training/arguments.py "
          "(commit 000c4ac24f61159c138b0975def722c65245983c)")
_FSDP_DOC = ("Megatron-Core developer guide, Megatron FSDP "
             "https://docs.nvidia.com/megatron-core/developer-guide/nightly/user-guide/features/"
             "custom_fsdp.html ('In M-Core 0.14, the custom FSDP ... was also renamed Megatron "
             "FSDP'; 'Compatible with TP, EP, and CP'); sharding strategies 0-3 ~ ZeRO "
             "https://docs.nvidia.com/megatron-core/developer-guide/latest/apidocs/core/"
             "core.distributed.fsdp.src.megatron_fsdp.fully_shard.html")
_DS = ("deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py "
       "(commit 03f6f75c5caadf213b53a7b3f5438bb46a30d278)")
_TT = ("pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py "
       "(commit 018740b7aae7846d24954539244c78215dbd181f)")

TRAINING_BACKENDS = {
    "megatron": TrainingBackend(
        "megatron", (0, 1, 2, 3), (0, 1), True, False,
        {"zero_with_pp": "Megatron-FSDP, its ZeRO-2/3, is documented with TP, CP and EP, not "
                         "PP; the distributed optimizer, ZeRO-1, runs with PP"},
        {"zero_stages_with_pp": f"{_MCORE}: '--use-torch-fsdp2 is not supported with pipeline "
                                f"parallelism'; {_FSDP_DOC}",
         "zero_stages": f"{_MCORE}: --use-distributed-optimizer, --use-megatron-fsdp"}),
    "deepspeed": TrainingBackend(
        "deepspeed", (0, 1, 2, 3), (0, 1), False, False,
        {"zero_with_pp": "its PipelineEngine: 'ZeRO-2 and ZeRO-3 are incompatible with "
                         "pipeline parallelism'",
         "interleave": "its PipelineEngine runs TrainSchedule, plain 1F1B"},
        {"zero_stages_with_pp": f"{_DS}: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                                f"parallelism'",
         "interleaved_schedule": f"{_DS}: train_batch runs schedule.TrainSchedule"}),
    "fsdp2": TrainingBackend(
        "fsdp2", (0, 2, 3), (0, 2, 3), True, True,
        {"zero": "FSDP2 shards the weights (ZeRO-3) or keeps them gathered from forward to "
                 "backward (ZeRO-2); it never shards the optimizer states alone",
         "ddp": "TorchTitan: 'DDP has not supported > 1D parallelism'"},
        {"zero_stages": f"{_TT}: apply_fsdp, reshard_after_forward = not pp_enabled by default",
         "ddp_needs_pure_dp": f"{_TT}: apply_ddp, 'DDP has not supported > 1D parallelism'"}),
}
BACKEND_ALIASES = {"torchtitan": "fsdp2", "megatron-core": "megatron", "mcore": "megatron"}


def training_backend(name: str) -> TrainingBackend:
    """The :class:`TrainingBackend` named ``name`` (case-insensitive; aliases in
    ``BACKEND_ALIASES``).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    key = BACKEND_ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else None
    if key not in TRAINING_BACKENDS:
        raise ValueError(f"backend must be one of {tuple(TRAINING_BACKENDS)} (aliases "
                         f"{tuple(BACKEND_ALIASES)}), got {name!r}")
    return TRAINING_BACKENDS[key]
