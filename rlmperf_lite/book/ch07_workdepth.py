"""The work-depth calculator of Chapter 7: one data-parallel update (plain DP, ZeRO-1/2/3) on
dp GPUs, in seconds, and whether its communication hides behind compute (book section
:ref:`sec-dp-workdepth`). Built on
:class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`, so the live widget and its
no-kernel twin share one definition; the maths is
:mod:`rlmperf_lite.cost.dp_workdepth`'s."""
from __future__ import annotations

from ..cost.dp_workdepth import dp_update_workdepth, overlap_threshold_tokens
from ..cost.hardware import resolve_hardware
from .workdepth_calc import WorkDepthCalculator

__all__ = ["dp_workdepth_calculator", "dp_workdepth_widget", "dp_workdepth_static",
           "DP_WD_OPTIONS", "DP_WD_STATIC_OPTIONS", "DP_WD_SEQ_LEN"]

DP_WD_SEQ_LEN = 1024
"""Tokens per sequence; a GPU's tokens are whole sequences of this length, in one micro-batch."""

DP_WD_OPTIONS = {
    "model": ("qwen2.5-7b", "llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b"),
    "dp": (2, 4, 8, 16, 64, 512),
    "zero_stage": (0, 1, 2, 3),
    "tokens_per_gpu": (1024, 2048, 4096, 8192, 16384, 32768, 65536),
    "link": ("nvlink", "network"),
    "recompute": ("none", "full"),
}
"""The options each setting of the live widget takes; ``start`` (or the first) is shown first."""
DP_WD_STATIC_OPTIONS = {**DP_WD_OPTIONS, "model": ("qwen2.5-7b", "llama-3.1-70b"),
                        "dp": (8, 64, 512)}
"""The no-kernel twin's grid, with fewer options, so that every combination can be embedded."""
_LABELS = {"model": "model", "dp": "dp (GPUs)", "zero_stage": "ZeRO stage",
           "tokens_per_gpu": "tokens per GPU", "link": "link", "recompute": "recompute"}
_START = {"model": "qwen2.5-7b", "dp": 8, "zero_stage": 3, "tokens_per_gpu": 2048,
          "link": "nvlink", "recompute": "none"}


def _compute(hardware, seq_len: int, first: dict, fixed: dict):
    hw = resolve_hardware(hardware)

    def compute(**values):
        kw = {**first, **values}
        tokens = kw.pop("tokens_per_gpu")
        if tokens % seq_len:
            raise ValueError(f"tokens_per_gpu={tokens} must be a multiple of the sequence "
                             f"length {seq_len}")
        common = dict(dp=kw["dp"], zero_stage=kw["zero_stage"], seq_len=seq_len,
                      link=kw["link"], recompute=kw["recompute"], **fixed)
        wd = dp_update_workdepth(kw["model"], hw, micro_batch_size=tokens // seq_len, **common)
        th = overlap_threshold_tokens(kw["model"], hw, **common)
        gb, fits = wd.memory.total_bytes / 1e9, wd.memory.total_bytes <= hw.hbm_bytes
        where = ("above it: hidden" if wd.hidden else
                 f"below it: {wd.exposed_s:.3g} s exposed")
        kappa = th.kappa.get(th.binding, 0.0)
        latency = th.latency_tokens.get(th.binding, 0.0)
        note = (f"hidden from {th.tokens:,.0f} tokens per GPU = (n-1)/n {th.ring_factor:.3f} x "
                f"peak/beta {th.flops_per_byte:,.0f} FLOP/B x {kappa:.3f}"
                + (f" + latency {latency:,.0f}" if latency else "") + "; "
                f"{tokens:,} is {where}; {gb:.1f} GB per GPU "
                f"({'fits' if fits else 'does not fit'} in {hw.hbm_bytes / 1e9:.0f} GB)")
        return wd.phases, note, wd.train_step.total_s + wd.optimizer_s
    return compute


def dp_workdepth_calculator(settings=tuple(DP_WD_OPTIONS), *, static_settings=None,
                            hardware: str = "h100", seq_len: int = DP_WD_SEQ_LEN, start=None,
                            **fixed) -> WorkDepthCalculator:
    """W, D and Brent's bounds of one data-parallel update
    (:func:`~rlmperf_lite.cost.dp_update_workdepth`): each GPU's tokens in one
    micro-batch of sequences of ``seq_len``, a control for each of ``settings`` (keys of
    :data:`DP_WD_OPTIONS`), ``fixed`` passed on (efficiency, latency_s, ...). The
    note gives the hiding threshold (:func:`~rlmperf_lite.cost.overlap_threshold_tokens`) and the
    memory per GPU;
    the time set against the bounds is train_step_time's plus the optimizer step (with
    ``latency_s`` > 0 the bounds hold the ring latency that train_step_time leaves out).
    ``static_settings``: the settings the no-kernel twin varies, over
    :data:`DP_WD_STATIC_OPTIONS` (default all of ``settings``).

    Raises:
        ValueError: a setting that is not a key of :data:`DP_WD_OPTIONS`.
    """
    unknown = [s for s in settings if s not in DP_WD_OPTIONS]
    if unknown:
        raise ValueError(f"settings {unknown} unknown; choose among {list(DP_WD_OPTIONS)}")
    first = {**_START, **(start or {})}
    varied = settings if static_settings is None else static_settings
    static = {s: DP_WD_STATIC_OPTIONS[s] if s in varied else (first[s],) for s in settings}
    return WorkDepthCalculator(
        compute=_compute(hardware, seq_len, first, fixed),
        options={s: DP_WD_OPTIONS[s] for s in settings}, static_options=static,
        title="One data-parallel update: W/p and D per phase", start=first, labels=_LABELS,
        measured_label="train_step_time + optimizer step")


def dp_workdepth_widget(settings=tuple(DP_WD_OPTIONS), **kwargs):
    """The live panel of :func:`dp_workdepth_calculator` (same arguments)."""
    return dp_workdepth_calculator(settings, **kwargs).widget()


def dp_workdepth_static(settings=tuple(DP_WD_OPTIONS), **kwargs):
    """The no-kernel twin of :func:`dp_workdepth_calculator` (same arguments)."""
    return dp_workdepth_calculator(settings, **kwargs).static()
