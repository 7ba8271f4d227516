"""Chapter 9's work-depth calculators, in seconds, on
:class:`~rlmperf_lite.book.WorkDepthCalculator`: a pipelined pass
(:func:`~rlmperf_lite.cost.pipeline_workdepth_s`, the simulated schedule's makespan
set against the bounds) and an expert-parallel MoE layer
(:func:`~rlmperf_lite.cost.moe_layer_workdepth_s` on a skewed routing); and the
chart of the pipelined GRPO loop's learning curve over the single-rank one (book section
:ref:`sec-pp-workdepth`)."""
from __future__ import annotations

from functools import lru_cache

from ..cost.pp_workdepth import moe_layer_workdepth_s, pipeline_workdepth_s, skewed_routing
from ..cost.presets import resolve_model
from .charts import lines_chart
from .workdepth_calc import WorkDepthCalculator

__all__ = ["pp_workdepth_calculator", "pp_workdepth_widget", "pp_workdepth_static",
           "ep_workdepth_calculator", "ep_workdepth_widget", "ep_workdepth_static",
           "pipeline_curve_chart", "PP_OPTIONS", "PP_STATIC_OPTIONS", "EP_OPTIONS"]

PP_OPTIONS = {              # the stages first: GPipe and 1F1B draw the same bars (same depth)
    "pp": (1, 2, 4, 8, 16),
    "schedule": ("1f1b", "gpipe", "interleaved"),
    "microbatches": (8, 16, 32, 64, 128),
    "interleave": (1, 2, 4),
    "model": ("qwen2.5-72b", "gpt3-175b", "llama-3.1-8b"),
}
# the no-kernel twin: every schedule and stage count, fewer micro-batch counts
PP_STATIC_OPTIONS = {**PP_OPTIONS, "microbatches": (8, 32, 128)}
_PP_LABELS = {"schedule": "schedule", "pp": "stages p", "microbatches": "micro-batches m",
              "interleave": "chunks v", "model": "model"}
_PP_START = {"schedule": "1f1b", "pp": 8, "microbatches": 32, "interleave": 1,
             "model": "qwen2.5-72b"}

EP_OPTIONS = {
    "model": ("qwen3-235b-a22b", "qwen3-30b-a3b"),
    "ep": (1, 2, 4, 8, 16, 32),
    "skew": (0.0, 0.5, 1.0),
}
_EP_LABELS = {"model": "model", "ep": "GPUs ep", "skew": "routing skew"}
_EP_START = {"model": "qwen3-235b-a22b", "ep": 8, "skew": 0.5}


def _pp_compute(**fixed):
    def compute(*, schedule, pp, microbatches, interleave, model):
        r = pipeline_workdepth_s(model, pp=pp, microbatches=microbatches, schedule=schedule,
                                 interleave=interleave, **fixed)
        note = (f"t_f {r.forward_s * 1e3:.3g} ms, t_b {r.backward_s * 1e3:.3g} ms per "
                f"micro-batch and stage; bubble D/(W/p) - 1 = {r.bubble_fraction:.4f} "
                f"= (p - 1)/(v m); {r.sends_on_path} sends of {r.hop_s * 1e3:.3g} ms on the "
                f"chain")
        return r.phases, note, r.makespan_s
    return compute


def pp_workdepth_calculator(**fixed) -> WorkDepthCalculator:
    """W, D and Brent's bounds in seconds of one pipeline's pass over m micro-batches
    (:func:`~rlmperf_lite.cost.pipeline_workdepth_s`; ``fixed``: its other
    keywords, e.g. ``seq_len``, ``link``), with the simulated schedule's makespan
    (``schedule_timeline``, each op followed by its send) set against the bounds."""
    return WorkDepthCalculator(
        compute=_pp_compute(**fixed), options=PP_OPTIONS, static_options=PP_STATIC_OPTIONS,
        title="One pipeline's pass: W/p and D", start=_PP_START, labels=_PP_LABELS,
        measured_label="schedule_timeline makespan")


def pp_workdepth_widget(**fixed):
    """The live panel of :func:`pp_workdepth_calculator` (same arguments)."""
    return pp_workdepth_calculator(**fixed).widget()


def pp_workdepth_static(**fixed):
    """The no-kernel twin of :func:`pp_workdepth_calculator` (same arguments)."""
    return pp_workdepth_calculator(**fixed).static()


@lru_cache(maxsize=8)
def _routing(num_tokens: int, num_experts: int, top_k: int, skew: float):
    """One draw per routing law; smaller ep take its first tokens (a view, not a copy)."""
    return skewed_routing(num_tokens, num_experts, top_k, skew=skew, seed=0)


def _ep_compute(tokens_per_rank: int = 4608, **fixed):
    most = max(EP_OPTIONS["ep"])

    def compute(*, model, ep, skew):
        m = resolve_model(model, "model")
        routing = _routing(most * tokens_per_rank, m.num_experts, m.num_experts_per_tok,
                           float(skew))[:ep * tokens_per_rank]
        r = moe_layer_workdepth_s(m, ep=ep, tokens_per_rank=tokens_per_rank, routing=routing,
                                  **fixed)
        note = (f"busiest GPU {r.rank_pairs.max():,.0f} (token, choice) pairs, "
                f"{r.imbalance:.2f} x the mean; experts' D/(W/p) = "
                f"{r.experts.depth_s / r.experts.work_per_processor_s:.2f}; all-to-all of "
                f"{r.all_to_all_bytes / 1e6:.1f} MB over the {r.inputs['link']}-node link")
        return r.phases, note, None
    return compute


def ep_workdepth_calculator(tokens_per_rank: int = 4608, **fixed) -> WorkDepthCalculator:
    """W, D and Brent's bounds in seconds of one MoE layer's routed experts on ep GPUs
    (:func:`~rlmperf_lite.cost.moe_layer_workdepth_s`) for the routing
    :func:`~rlmperf_lite.cost.skewed_routing` draws at each skew (seed 0)."""
    return WorkDepthCalculator(
        compute=_ep_compute(tokens_per_rank, **fixed), options=EP_OPTIONS,
        title="One MoE layer, forward + backward: W/p and D", start=_EP_START,
        labels=_EP_LABELS)


def ep_workdepth_widget(tokens_per_rank: int = 4608, **fixed):
    """The live panel of :func:`ep_workdepth_calculator` (same arguments)."""
    return ep_workdepth_calculator(tokens_per_rank, **fixed).widget()


def ep_workdepth_static(tokens_per_rank: int = 4608, **fixed):
    """The no-kernel twin of :func:`ep_workdepth_calculator` (same arguments)."""
    return ep_workdepth_calculator(tokens_per_rank, **fixed).static()


def pipeline_curve_chart(runs: dict, *, metric: str = "reward_mean",
                         title: str = "GRPO on pipeline ranks and on one rank"):
    """``runs``: {name: RLResult}; ``metric`` per step, one line per run, every run after the
    first dashed (equal curves show as one line with dashes on it).

    Raises:
        ValueError: naming ``runs`` or ``metric``.
    """
    if not isinstance(runs, dict) or not runs or not all(
            getattr(r, "history", None) for r in runs.values()):
        raise ValueError("runs must be a non-empty dict {name: RLResult with a history}")
    rows = []
    for name, run in runs.items():
        if metric not in run.history[0]:
            raise ValueError(f"metric {metric!r} is not in the history of {name!r}; it has "
                             f"{sorted(run.history[0])}")
        rows += [{"run": name, "step": h["step"], metric: float(h[metric])}
                 for h in run.history]
    return lines_chart(rows, x="step", y=metric, color="run", x_title="step", y_title=metric,
                       title=title, dashed=tuple(list(runs)[1:]))
