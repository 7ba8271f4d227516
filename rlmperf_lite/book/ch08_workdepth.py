"""Chapter 8's work-depth calculator (book section :ref:`sec-tp-workdepth`): W/p and D in
seconds of a training step or of decode under TP, SP and CP
(:mod:`rlmperf_lite.cost.tp_workdepth`), live and with no kernel from one definition
(:class:`~rlmperf_lite.book.WorkDepthCalculator`). Training uses the plan of
Lab 8's other calculator (:func:`~rlmperf_lite.book.tp_views.tp_plan_results`: 512 sequences
on 64 H100s, ZeRO-1, selective recompute), whose step time it sets against the bounds."""
from __future__ import annotations

from ..cost import ParallelPlan, TrainWorkload, resolve_hardware, resolve_model
from ..cost.tp_workdepth import tp_decode_workdepth, tp_train_workdepth
from .tp_views import TP_WORKLOAD
from .workdepth_calc import WorkDepthCalculator

__all__ = ["tp_workdepth_calculator", "tp_workdepth_widget", "tp_workdepth_static",
           "TP_WD_OPTIONS"]

#: The options of each setting; the no-kernel grid holds all 1,024 combinations.
TP_WD_OPTIONS = {
    "model": ("qwen2.5-7b", "llama-3.1-8b", "qwen2.5-32b", "llama-3.1-70b"),
    "tp": (1, 2, 4, 8),
    "sp": ("off", "on"),
    "cp": (1, 2, 4, 8),
    "seq_len": (4096, 8192, 16384, 32768),
    "mode": ("training", "decode"),
}
_LABELS = {"tp": "tp", "sp": "sequence parallel", "cp": "cp",
           "seq_len": "T (training) / R (decode)", "mode": "pass"}
_START = {"model": "llama-3.1-70b", "tp": 8, "sp": "on", "cp": 1, "seq_len": 4096,
          "mode": "training"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _gb(hw, n_bytes: float) -> str:
    fits = "fits" if n_bytes <= hw.hbm_bytes else "does not fit"
    return f"{n_bytes / 1e9:.1f} GB per GPU ({fits} in {hw.hbm_bytes / 1e9:.0f} GB)"


def _train(model, hw, tp, sp, cp, seq_len):
    wl = TrainWorkload(global_batch=TP_WORKLOAD["global_batch"], seq_len=seq_len,
                       micro_batch_size=TP_WORKLOAD["micro_batch_size"])
    dp = max(1, TP_WORKLOAD["gpus"] // (tp * cp))
    plan = ParallelPlan(dp=dp, tp=tp, cp=cp, sp=sp, zero_stage=TP_WORKLOAD["zero_stage"],
                        recompute=TP_WORKLOAD["recompute"],
                        microbatches=wl.microbatches_per_rank(dp))
    plan.validate(resolve_model(model, "model"), hw, TP_WORKLOAD["gpus"], wl)
    r = tp_train_workdepth(model, hw, plan, wl)
    note = (f"per layer of a micro-batch on its {tp * cp} GPUs: compute "
            f"{_ms(r.layer_compute_s)}, TP collectives {_ms(r.layer_comm_s)} (ratio "
            f"{r.comm_compute_ratio:.3f}; it reaches 1 at tp = {r.threshold_tp:.1f})")
    if cp > 1:
        chunk = r.inputs["cp_min_chunk_tokens"]
        note += (f"; the ring hides behind attention from T/cp = {chunk:,.0f} tokens "
                 f"(here {seq_len // cp:,})")
    return r, note + f"; {_gb(hw, r.memory_bytes_per_gpu)}"


def _decode(model, hw, tp, seq_len):
    r = tp_decode_workdepth(model, hw, tp, sequences=TP_WORKLOAD["global_batch"],
                            gpus=TP_WORKLOAD["gpus"], response_len=seq_len)
    i = r.inputs
    note = (f"a step at {i['batch_per_replica']} sequences per replica: weights and KV "
            f"{_ms(i['step_s'])}, all-reduces {_ms(i['all_reduce_s'])} (ratio "
            f"{r.comm_compute_ratio:.3g}; alpha {i['latency_s'] * 1e6:g} us a ring step); the "
            f"chain stops shortening at tp = {r.threshold_tp:.1f}; "
            f"{_gb(hw, r.memory_bytes_per_gpu)}")
    return r, note


def _compute(hardware):
    hw = resolve_hardware(hardware)

    def compute(model, tp, sp, cp, seq_len, mode):
        if mode == "decode":
            if sp == "on" or cp > 1:
                raise ValueError("sp and cp split training passes: a decode replica uses tp "
                                 "only; set sp off and cp = 1")
            r, note = _decode(model, hw, tp, seq_len)
        else:
            r, note = _train(model, hw, tp, sp == "on", cp, seq_len)
        return r.phases, note, r.measured_s
    return compute


def tp_workdepth_calculator(*, hardware="h100", start: dict | None = None,
                            static_options: dict | None = None) -> WorkDepthCalculator:
    """W/p and D per phase of a training step (layers, TP collectives, CP ring, exposed DP
    sync) or of decode (steps, all-reduces) for the settings of :data:`TP_WD_OPTIONS`; for
    training, train_step_time's step set against the bounds. ``static_options``: the no-kernel
    grid (default all of :data:`TP_WD_OPTIONS`, 1,024 settings)."""
    return WorkDepthCalculator(
        compute=_compute(hardware), options=TP_WD_OPTIONS, static_options=static_options,
        title="TP, SP and CP: W/p and D per phase", start={**_START, **(start or {})},
        labels=_LABELS, measured_label="train_step_time")


def tp_workdepth_widget(**kwargs):
    """The live panel of :func:`tp_workdepth_calculator` (same keywords)."""
    return tp_workdepth_calculator(**kwargs).widget()


def tp_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`tp_workdepth_calculator` (same keywords)."""
    return tp_workdepth_calculator(**kwargs).static()
