"""Generation's share of the step against the decode batch, on the reader's CPU and on GPUs
(Chapters 5 and 6): the toy's share, predicted from per-op costs and
measured (:func:`~rlmperf_lite.cost.generation_share_sweep`), next to the library's share for a
7B-class model per sequences per GPU (:func:`~rlmperf_lite.cost.generation_share` of
:func:`~rlmperf_lite.cost.profile_step_workdepth_s`). On both machines the decode batch
per replica sets the share: the larger it is, the smaller generation's share."""
from __future__ import annotations

import altair as alt

from ..checks import check_int
from ..cost.profiles import generation_share, profile_step_workdepth_s

__all__ = ["GPU_SHARE_STEP", "gpu_share_rows", "share_rows", "share_by_batch_chart"]

GPU_SHARE_STEP = {"actor": "qwen2.5-7b", "hardware": "h100", "group_size": 16,
                  "prompt_len": 512, "response_len": 4096, "gpus": 64, "kl_coef": 0.001}
"""Lab 6's GRPO step (Qwen2.5-7B on 64 H100s, groups of 16, P = 512, R = 4,096, KL 0.001), the
batch left to the sequences per GPU."""


def gpu_share_rows(sequences_per_gpu=(1, 2, 4, 8, 16, 32, 64, 128), **step) -> list[dict]:
    """One row per decode batch s: ``machine`` ("GPU (hardware), actor"), ``sequences`` = s and
    ``share``, GRPO's generation share of the lower Brent bound at s sequences per GPU, ``step``
    overriding
    :data:`GPU_SHARE_STEP` (any argument of :func:`~rlmperf_lite.cost.estimate_rl_step` but
    ``prompts``). ValueError for an empty list or s < 1, and as the profile."""
    if not isinstance(sequences_per_gpu, (list, tuple)) or not sequences_per_gpu:
        raise ValueError(f"sequences_per_gpu must be a non-empty list of ints >= 1, got "
                         f"{sequences_per_gpu!r}")
    kw = {**GPU_SHARE_STEP, **step}
    rows = []
    for s in sequences_per_gpu:
        check_int("sequences_per_gpu", s, 1)
        rows.append({"machine": f"GPU ({kw['hardware']}), {kw['actor']}", "sequences": s,
                     "share": generation_share(
            profile_step_workdepth_s("grpo", sequences_per_gpu=s, **kw))})
    return rows


def share_rows(cpu_rows: list, gpu_rows: list) -> list[dict]:
    """The chart's data: one row per point, ``machine`` ("CPU (this machine), toy" or the GPU
    rows' own), ``series`` ("predicted", "measured" or "library"), ``sequences`` and
    ``share``, from :func:`~rlmperf_lite.cost.generation_share_sweep`'s rows and
    :func:`gpu_share_rows`'. ValueError for rows missing their keys."""
    out = []
    for name, rows, keys, source in (
            ("cpu_rows", cpu_rows, ("predicted_share", "measured_share"), "generation_share_sweep"),
            ("gpu_rows", gpu_rows, ("machine", "share"), "gpu_share_rows")):
        if not isinstance(rows, list) or not rows or any(
                not isinstance(r, dict) or {"sequences", *keys} - set(r) for r in rows):
            raise ValueError(f"{name} must be a non-empty list of dicts with sequences and "
                             f"{', '.join(keys)} (from {source})")
    for r in cpu_rows:
        for series in ("predicted", "measured"):
            out.append({"machine": "CPU (this machine), toy", "series": series,
                        "sequences": r["sequences"], "share": r[f"{series}_share"]})
    out += [{"machine": r["machine"], "series": "library",
             "sequences": r["sequences"], "share": r["share"]} for r in gpu_rows]
    return out


def share_by_batch_chart(cpu_rows: list, gpu_rows: list, *,
                         title: str = "Generation's share of the step vs the decode batch"):
    """Two panels, one per machine: generation's share of the step against the sequences per
    step (CPU, one core: predicted and measured) and per GPU (the library), x on a log scale.
    Arguments as :func:`share_rows`."""
    rows = share_rows(cpu_rows, gpu_rows)
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("sequences:Q", title="sequences in decode (per step on the CPU, per GPU)",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted({r["sequences"] for r in rows}))),  # the points
        y=alt.Y("share:Q", title="generation share of the step", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("series:N", title=None, sort=["predicted", "measured", "library"]),
        tooltip=["machine:N", "series:N", "sequences:Q", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=260, height=200).facet(
        column=alt.Column("machine:N", title=None)).resolve_scale(x="independent").properties(
        title=title)
