"""FSDP2's options on a data-parallel step (book section :ref:`sec-zero-fsdp`): what
``reshard_after_forward`` and HSDP change in ZeRO-3's traffic and memory.

PyTorch FSDP2 (``fully_shard``) shards each parameter on dim 0 as a DTensor over the mesh
(FSDP1 flattened a unit's parameters into one sharded vector; Zhao et al. 2023), all-gathers a
unit before its forward and backward and reduce-scatters its gradients (PyTorch docs,
torch.distributed.fsdp.fully_shard). Per micro-batch of a rank's m, with w the bf16 weights
and g the bf16 gradients of the model, over a shard group of s ranks::

    reshard_after_forward=True   (ZeRO-3)   all-gather w twice (forward, backward), reduce-scatter g
    reshard_after_forward=False             all-gather w once; the unsharded weights stay from
                                            the unit's forward to its backward: (1 - 1/s) w more
    HSDP, s < dp                            the same over s ranks of a node, then an all-reduce of
                                            the gradient shard g / s over the dp / s replicas

Model states per GPU are those of ZeRO-3 over s ranks, (2 + 2 + 12) N / s.
"""
from __future__ import annotations

from ..checks import check_bool, check_int
from .collective import collective_time_s
from .hardware import resolve_hardware
from .parallel_memory import model_state_bytes_per_gpu
from .presets import resolve_model

__all__ = ["fsdp_step_comm"]


def fsdp_step_comm(actor, hardware, dp: int, microbatches: int, *,
                   reshard_after_forward: bool = True, shard_size: int | None = None,
                   weight_bytes: int = 2, grad_bytes: int = 2) -> dict:
    """Seconds and bytes per GPU of one step's FSDP collectives for ``actor`` on ``dp`` GPUs of
    ``hardware``, pure data parallelism, gradients synced every micro-batch (the module
    docstring's table; ring collectives of :func:`~rlmperf_lite.cost.collective_time_s`).
    ``shard_size`` None: FSDP over all ``dp`` ranks; an int s: HSDP, shard over s, replicate
    over dp / s. With the defaults, ZeRO-3's ``comm_s["dp"]`` of
    :func:`~rlmperf_lite.cost.train_step_time`.

    Returns:
        dict of ``all_gather_s``, ``reduce_scatter_s``, ``replicate_all_reduce_s``,
        ``total_s``, ``bytes_per_gpu`` (sent), ``all_gathers`` (per step),
        ``model_state_bytes_per_gpu`` and ``unsharded_weight_bytes`` (held from a unit's
        forward to its backward; 0 counts only one unit at a time, as ZeRO-3's model does).

    Raises:
        ValueError: naming ``dp``, ``microbatches``, ``shard_size`` (an int dividing ``dp``),
            ``reshard_after_forward``, the byte counts, or from resolving ``actor`` and
            ``hardware`` (a preset without link bandwidths).
    """
    check_int("dp", dp, 1)
    check_int("microbatches", microbatches, 1)
    check_bool("reshard_after_forward", reshard_after_forward)
    check_int("weight_bytes", weight_bytes, 1)
    check_int("grad_bytes", grad_bytes, 1)
    s = dp if shard_size is None else shard_size
    check_int("shard_size", s, 1)
    if dp % s:
        raise ValueError(f"shard_size = {s} must divide dp = {dp} (HSDP replicates the shard "
                         f"group dp / shard_size times)")
    model, hw = resolve_model(actor, "actor"), resolve_hardware(hardware)
    n = model.num_params()
    w, g, replicas = weight_bytes * n, grad_bytes * n, dp // s
    bw_shard, bw_dp = hw.group_bandwidth(s), hw.group_bandwidth(dp)
    gathers = microbatches * (2 if reshard_after_forward else 1)
    ag = gathers * collective_time_s("all_gather", w, s, bw_shard)
    rs = microbatches * collective_time_s("reduce_scatter", g, s, bw_shard)
    ar = microbatches * collective_time_s("all_reduce", g / s, replicas, bw_dp)
    sent = ((s - 1) / s * (gathers * w + microbatches * g)
            + microbatches * 2 * (replicas - 1) / replicas * g / s)
    return {"all_gather_s": ag, "reduce_scatter_s": rs, "replicate_all_reduce_s": ar,
            "total_s": ag + rs + ar, "bytes_per_gpu": sent, "all_gathers": gathers,
            "model_state_bytes_per_gpu": model_state_bytes_per_gpu(n, s, 3),
            "unsharded_weight_bytes": 0.0 if reshard_after_forward else (1 - 1 / s) * w}
