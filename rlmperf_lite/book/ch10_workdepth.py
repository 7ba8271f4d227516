"""The work-depth calculator of Chapter 10, placement (book section
:ref:`sec-placement-workdepth`): W, D and Brent's bounds in seconds of one synchronous GRPO step,
colocated or disaggregated (generation, training and the weight sync), from
:func:`~rlmperf_lite.sim.workdepth.layout_workdepth`, with the simulator's steady step set
against them. Built on
:class:`~rlmperf_lite.book.workdepth_calc.WorkDepthCalculator`: the live widget and its
no-kernel twin share one definition."""
from __future__ import annotations

from ..sim import Workload
from ..sim.workdepth import layout_workdepth
from .workdepth_calc import WorkDepthCalculator

__all__ = ["PLACEMENT_WD_OPTIONS", "PLACEMENT_WD_SYSTEM", "placement_workdepth_calculator",
           "placement_workdepth_widget", "placement_workdepth_static"]

PLACEMENT_WD_OPTIONS = {
    "placement": ("colocated", "disaggregated"),
    "rollout_gpus": (4, 8, 12, 16, 20, 24, 28),
    "seqs_per_gpu": (4, 8, 16, 32, 64),
}
"""The settings, each with its options. The placement, the GPUs that generate when
disaggregated (of 32), and the sequences per step per GPU, B G / p (B = that x 32 / 16 prompts)."""
PLACEMENT_WD_SYSTEM = dict(actor="qwen2.5-7b", hardware="h100-sxm", gpus=32, group_size=16,
                           prompt_len=512, mean_response_len=2048.0, max_response_len=8192,
                           length_sigma=1.0, kl_coef=0.001, steps=8)
"""Chapter 10's step (GRPO of Qwen2.5-7B on 32 H100s, section 10.5), 8 simulated steps."""
_LABELS = {"placement": "placement", "rollout_gpus": "rollout GPUs (disaggregated)",
           "seqs_per_gpu": "sequences per GPU (B G / p)"}
_START = {"placement": "disaggregated", "rollout_gpus": 8, "seqs_per_gpu": 16}
_WORKLOAD = ("group_size", "prompt_len", "mean_response_len", "max_response_len",
             "length_sigma")


def _compute(fixed: dict):
    kw = {**PLACEMENT_WD_SYSTEM, **fixed}
    wl_kw = {k: kw.pop(k) for k in _WORKLOAD}
    cache = {}                                          # colocated ignores the split

    def compute(placement, rollout_gpus, seqs_per_gpu):
        n_seq = seqs_per_gpu * kw["gpus"]
        if n_seq % wl_kw["group_size"]:
            raise ValueError(f"seqs_per_gpu = {seqs_per_gpu} x {kw['gpus']} GPUs is not a "
                             f"whole number of groups of {wl_kw['group_size']}")
        rg = None if placement == "colocated" else rollout_gpus
        key = (placement, rg, n_seq)
        if key not in cache:
            wl = Workload(prompts=n_seq // wl_kw["group_size"], **wl_kw)
            wd = layout_workdepth(workload=wl, placement=placement, rollout_gpus=rg, **kw)
            cache[key] = (wd, wd.simulate().step_time_s)
        wd, sim_s = cache[key]
        where = "all" if rg is None else f"{rg}"
        note = (f"decode at {wd.sequences_per_gpu:g} sequences per rollout GPU on {where} of "
                f"{wd.system.gpus} GPUs; W/p over all the GPUs {wd.work_per_processor_s:.3g} s, "
                f"generation's D {wd.generation['depth_s']:.3g} s; upper bounds on each phase's "
                f"own pool; the pools' own lower bound {wd.pool_lower_s:.3g} s")
        return wd.phases, note, sim_s
    return compute


def placement_workdepth_calculator(*, static_options=None, start=None,
                                   **fixed) -> WorkDepthCalculator:
    """W (GPU-s), D (s) and Brent's bounds of each phase of a synchronous step on the
    settings of :data:`PLACEMENT_WD_OPTIONS`, the others fixed (``fixed`` overrides
    :data:`PLACEMENT_WD_SYSTEM`); the simulator's steady step is set against the bounds.
    ``static_options``: the no-kernel twin's grid (default all options)."""
    return WorkDepthCalculator(
        compute=_compute(fixed), options=PLACEMENT_WD_OPTIONS, static_options=static_options,
        title="One synchronous step by placement: W/p and D per phase",
        start={**_START, **(start or {})}, labels=_LABELS, measured_label="simulated step")


def placement_workdepth_widget(**kwargs):
    """The live panel of :func:`placement_workdepth_calculator` (same arguments)."""
    return placement_workdepth_calculator(**kwargs).widget()


def placement_workdepth_static(**kwargs):
    """The no-kernel twin of :func:`placement_workdepth_calculator` (same arguments)."""
    return placement_workdepth_calculator(**kwargs).static()
