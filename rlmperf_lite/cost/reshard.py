"""Moving the trained weights from the training layout to the rollout engine's layout (book
section :ref:`sec-rollout-layout`).

RL frameworks train and generate with different parallelism: verl, for instance, trains with
FSDP (ZeRO-3) or Megatron TP/PP and generates with vLLM at another TP size. Before each rollout
every inference GPU must hold its inference shard: weights / (tp_i pp_i) bytes (all parameters
split evenly, experts by tp_i too, in ``weight_bytes`` per value).

Model of the bytes each GPU receives (:func:`reshard_bytes_per_gpu`):

- ``mode="colocated"`` (training and generation on the same GPUs): a GPU keeps what it already
  holds of its inference shard and receives the rest from the GPUs of its group, an
  all-gather. With the grouping of HybridFlow's 3D-HybridEngine (Sheng et al. 2024, verl,
  arXiv 2409.19256, §5), a GPU's training slice lies inside its inference slice when the
  inference layout is coarser (tp_i <= tp, pp_i <= pp), and contains it when finer. So along
  TP and PP the useful overlap is 1 / (max(tp, tp_i) max(pp, pp_i)) of the weights. Routed
  experts are also split over ep in training (tp x ep against tp_i). Under ZeRO-3 a GPU holds
  only a flat 1 / (dp cp) slice of its training slice (dp cp / ep for experts), taken as spread
  evenly over it. Received = inference shard - useful overlap; 0 when the layouts are equal
  and weights are not ZeRO-3-sharded.
- ``mode="disaggregated"`` (generation on other GPUs): every inference GPU receives its whole
  shard from the trainers.

Time (:func:`reshard_time_s`): received bytes / link bandwidth — the ring all-gather's per-rank
volume over the bus bandwidth (:mod:`rlmperf_lite.cost.collective`) — over NVLink when the
ranks the all-gather spans fit in an NVLink domain, else the network. Ranks are placed in
Megatron-Core's order tp-cp-ep-dp-pp, so merging pipeline stages spans tp cp dp pp / pp_i
ranks, gathering ZeRO-3 shards tp cp dp ranks, routed experts over ep tp cp ranks, and merging
tensor shards only max(tp, tp_i) consecutive ranks; disaggregated transfers use the network.
Latencies and the trainers' send bandwidth are not modelled.
"""
from __future__ import annotations

from dataclasses import replace

from ..checks import check_choice, check_int
from .hardware import HardwareSpec
from .model import ModelConfig
from .parallel_plan import ParallelPlan

__all__ = ["RESHARD_MODES", "reshard_bytes_per_gpu", "reshard_time_s"]

RESHARD_MODES = ("colocated", "disaggregated")


def _nested(label: str, a: int, b: int) -> None:
    if a % b and b % a:
        raise ValueError(f"{label}: {a} and {b} must divide one another to reshard "
                         f"(slices of the same axis)")


def _reshard(model, plan, infer_tp, infer_pp, mode, weight_bytes) -> dict:
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    if not isinstance(plan, ParallelPlan):
        raise ValueError(f"train_plan must be a ParallelPlan, got {type(plan).__name__}")
    check_int("infer_tp", infer_tp, 1)
    check_int("infer_pp", infer_pp, 1)
    check_choice("mode", mode, RESHARD_MODES)
    check_int("weight_bytes", weight_bytes, 1)
    # the layout rules only: the schedule (microbatches) does not change where weights live
    broken = replace(plan, microbatches=plan.pp).check(model, None)
    if broken:
        raise ValueError(f"train_plan is invalid for {model.name}: " + "; ".join(broken))
    if model.num_attention_heads % infer_tp:
        raise ValueError(f"infer_tp={infer_tp} must divide num_attention_heads="
                         f"{model.num_attention_heads}")
    if model.num_hidden_layers % infer_pp:
        raise ValueError(f"infer_pp={infer_pp} must divide num_hidden_layers="
                         f"{model.num_hidden_layers}")
    experts = weight_bytes * float(model.param_breakdown()["routed_experts"])
    dense = weight_bytes * float(model.num_params()) - experts
    needed = (dense + experts) / (infer_tp * infer_pp)
    if mode == "disaggregated":
        return {"needed": needed, "useful": 0.0, "received": needed, "group": float("inf"),
                "span": float("inf")}
    if plan.gpus % (infer_tp * infer_pp):
        raise ValueError(f"colocated: infer_tp*infer_pp={infer_tp * infer_pp} must divide the "
                         f"training GPUs dp*tp*pp*cp={plan.gpus}")
    _nested("tp and infer_tp", plan.tp, infer_tp)
    _nested("pp and infer_pp", plan.pp, infer_pp)
    pp = max(plan.pp, infer_pp)
    zero3 = plan.zero_stage == 3
    useful_d = dense / (max(plan.tp, infer_tp) * pp * (plan.dp * plan.cp if zero3 else 1))
    useful_e = 0.0
    if experts:
        _nested("tp*ep and infer_tp", plan.tp * plan.ep, infer_tp)
        useful_e = experts / (max(plan.tp * plan.ep, infer_tp) * pp
                              * (plan.dp * plan.cp // plan.ep if zero3 else 1))
    useful = useful_d + useful_e
    # ranks the all-gather spans, in Megatron-Core's order tp-cp-ep-dp-pp (tp innermost):
    # pipeline stages lie tp cp dp ranks apart, ZeRO-3 shards tp apart over dp cp
    if plan.pp > infer_pp:
        span = plan.tp * plan.cp * plan.dp * plan.pp // infer_pp
    elif zero3:
        span = max(plan.tp * plan.cp * plan.dp, infer_tp)
    else:
        span = max(plan.tp, infer_tp)
    if experts and plan.ep > 1:             # routed experts are gathered over the ep ranks too
        span = max(span, plan.tp * plan.cp * plan.ep)
    return {"needed": needed, "useful": useful, "received": max(needed - useful, 0.0),
            "group": needed / useful, "span": span}


def reshard_bytes_per_gpu(model: ModelConfig, train_plan: ParallelPlan, infer_tp: int,
                          infer_pp: int = 1, *, mode: str = "colocated",
                          weight_bytes: int = 2) -> float:
    """Bytes each GPU receives to go from ``train_plan``'s weight shards to an inference
    layout of tp ``infer_tp`` and pp ``infer_pp`` (module docstring; HybridFlow §5's
    3D-HybridEngine for the colocated grouping; book section :ref:`sec-rollout-layout`).

    Raises:
        ValueError: bad types or sizes, an unknown mode, an invalid training plan, inference
            sizes that do not divide the heads or layers, or (colocated) tp / pp sizes that do
            not nest or do not divide the training GPUs.
    """
    return _reshard(model, train_plan, infer_tp, infer_pp, mode, weight_bytes)["received"]


def reshard_time_s(model: ModelConfig, hardware: HardwareSpec, train_plan: ParallelPlan,
                   infer_tp: int, infer_pp: int = 1, *, mode: str = "colocated",
                   weight_bytes: int = 2) -> float:
    """Seconds of the reshard: :func:`reshard_bytes_per_gpu` over the intra-node link when the
    colocated all-gather group fits in an NVLink domain, over the per-GPU network bandwidth
    otherwise
    and when disaggregated.

    Raises:
        ValueError: as :func:`reshard_bytes_per_gpu`, or hardware without the link needed.
    """
    if not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec, got {type(hardware).__name__}")
    r = _reshard(model, train_plan, infer_tp, infer_pp, mode, weight_bytes)
    if r["received"] == 0:
        return 0.0
    intra = mode == "colocated" and r["span"] <= hardware.nvlink_domain
    bw = (hardware.intra_node_bandwidth_bytes_per_s if intra
          else hardware.inter_node_bandwidth_bytes_per_s)
    if bw is None:
        raise ValueError(f"hardware {hardware.name!r} has no "
                         f"{'intra' if intra else 'inter'}-node bandwidth")
    return r["received"] / bw
