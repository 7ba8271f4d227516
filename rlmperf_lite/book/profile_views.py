"""Calculators of Chapters 2 and 6, live (ipywidgets) and with no kernel (a grid the library
evaluates when the book is built, drawn by :func:`~rlmperf_lite.book.grid_chart`).

- Chapter 2 (book section 2.4, what the critic costs): work W, depth 𝒟 and Brent's bound
  W/p + 𝒟 of each phase of a PPO step against a GRPO step with the same samples, from
  :func:`~rlmperf_lite.cost.ppo_step_workdepth` and
  :func:`~rlmperf_lite.cost.grpo_step_workdepth`.
- Chapter 6 (book sections 6.1-6.2, compute profiles): each phase's share of the step's time
  and the share of generation, from :func:`~rlmperf_lite.cost.estimate_rl_step` (the grid is
  :func:`~rlmperf_lite.book.estimate_grid`'s, Chapter 4's calculator).

They call the library and hold no formulas of their own.
"""
from __future__ import annotations

import altair as alt

from ..cost import ALGOS, estimate_rl_step, hardware_presets, model_presets
from ..cost.workdepth import grpo_step_workdepth, ppo_step_workdepth
from .charts import brent_terms_chart, workdepth_chart
from .cost_views import phase_share_chart
from .grid_charts import LLAMA2_7B, grid_chart, grid_points
from .static_calculators import estimate_grid
from .widgets import error_html, length_slider, wire

__all__ = ["PPO_GRPO_GRID", "PROFILE_GRID", "GENERATION", "ppo_grpo_workdepth",
           "ppo_grpo_table_html", "ppo_grpo_widget", "ppo_grpo_workdepth_grid",
           "ppo_grpo_grid_chart",
           "profile_estimates", "profile_table_html", "profile_chart", "profile_widget",
           "phase_share_grid", "phase_share_grid_chart"]

# ---- Chapter 2: PPO against GRPO, work and depth ------------------------------------------

PPO_GRPO_GRID = {"response_len": (256, 1024, 4096, 16384), "ppo_epochs": (1, 2, 4),
                 "num_minibatches": (1, 2, 4, 8), "log10_p": (0, 3, 6, 9, 12, 15)}
"""The no-kernel calculator's grid of Chapter 2 — R, PPO's epochs and minibatches, log10 p."""


def ppo_grpo_workdepth(*, model: dict = LLAMA2_7B, num_prompts: int, group_size: int,
                       prompt_len: int, response_len: int, ppo_epochs: int = 1,
                       num_minibatches: int = 1, kl_coef: float = 0.0,
                       processors: int = 1) -> dict:
    """A PPO step and a GRPO step with the same samples (book section 2.4): GRPO samples G
    completions for each of B prompts; PPO one for each of B G prompts, with ``ppo_epochs`` x
    ``num_minibatches`` updates. GRPO makes one update per batch.

    Args:
        model: the shape keywords of :func:`~rlmperf_lite.cost.grpo_step_workdepth`
            (default the Llama-2-7B shape of the labs).
        num_prompts, group_size, prompt_len, response_len: B, G, P, R.
        ppo_epochs, num_minibatches, kl_coef, processors: as the library's.
    Returns:
        A dict with a WorkDepth for each of "PPO" and "GRPO".
    Raises:
        ValueError: the library's, e.g. ``num_minibatches`` above PPO's B G prompts.
    """
    ppo = ppo_step_workdepth(**model, num_prompts=num_prompts * group_size,
                             prompt_len=prompt_len, response_len=response_len,
                             ppo_epochs=ppo_epochs, num_minibatches=num_minibatches,
                             kl_coef=kl_coef, processors=processors)
    grpo = grpo_step_workdepth(**model, num_prompts=num_prompts, group_size=group_size,
                               prompt_len=prompt_len, response_len=response_len,
                               kl_coef=kl_coef, processors=processors)
    return {"PPO": ppo, "GRPO": grpo}


def ppo_grpo_table_html(results: dict) -> str:
    """An HTML table of ``results`` ({label: WorkDepth}, e.g. :func:`ppo_grpo_workdepth`'s):
    per phase, each step's W (FLOPs), 𝒟 (rounds) and W/p + 𝒟 (rounds); a dash where a step
    has no such phase; the steps' totals last."""
    order = list(dict.fromkeys(p.name for wd in results.values() for p in wd.phases))
    head = "".join(f"<th>{label} W</th><th>{label} 𝒟</th><th>{label} W/p + 𝒟</th>"
                   for label in results)

    def cells(wd, name):
        names = [p.name for p in wd.phases]
        if name not in names:
            return "<td>&ndash;</td>" * 3
        p = wd.phase(name)
        return (f"<td>{p.work_flops:.3g}</td><td>{p.depth_rounds:.4g}</td>"
                f"<td>{p.brent_rounds:.3g}</td>")

    rows = "".join(f"<tr><td>{name}</td>" + "".join(cells(wd, name) for wd in results.values())
                   + "</tr>" for name in order)
    total = "".join(f"<th>{wd.work_flops:.3g}</th><th>{wd.depth_rounds:.4g}</th>"
                    f"<th>{wd.brent_rounds:.3g}</th>" for wd in results.values())
    return (f"<table><tr><th>phase</th>{head}</tr>{rows}<tr><th>step</th>{total}</tr>"
            "</table>")


def ppo_grpo_widget(model: dict = LLAMA2_7B, **defaults):
    """Sliders for B, G, P, R, PPO's epochs and minibatches and log10 p driving
    :func:`ppo_grpo_workdepth` for a fixed model shape (Chapter 2 lab): the phases of both steps
    as a table, their shares of W and 𝒟 as bars (which p does not change) and their terms W/p
    and 𝒟 (which it does); P and R step through powers of two. Defaults: the lab's 7B
    comparison (GRPO 32 x 16, PPO 512 x 1 with 2 epochs x 2 minibatches, P = 512, R = 4096).
    Bad settings show the library's ValueError message instead of a traceback."""
    import ipywidgets as w

    c = {"num_prompts": 32, "group_size": 16, "prompt_len": 512, "response_len": 4096,
         "ppo_epochs": 2, "num_minibatches": 2, "log10_p": 9.0, **defaults}
    sliders = {
        "num_prompts": w.IntSlider(value=c["num_prompts"], min=1, max=512,
                                   description="B prompts"),
        "group_size": w.IntSlider(value=c["group_size"], min=1, max=64, description="G group"),
        "prompt_len": length_slider(c["prompt_len"], "P prompt"),
        "response_len": length_slider(c["response_len"], "R response"),
        "ppo_epochs": w.IntSlider(value=c["ppo_epochs"], min=1, max=8, description="epochs"),
        "num_minibatches": w.IntSlider(value=c["num_minibatches"], min=1, max=64,
                                       description="minibatches"),
        "log10_p": w.FloatSlider(value=c["log10_p"], min=0.0, max=16.0, step=0.5,
                                 description="log10 p"),
    }

    def compute(kw):
        log10_p = kw.pop("log10_p")
        results = ppo_grpo_workdepth(model=model, **kw, processors=int(round(10 ** log10_p)))
        n = kw["num_prompts"] * kw["group_size"]
        return (f"<p>PPO: {n:,} prompts x 1 sample; GRPO: {kw['num_prompts']:,} "
                f"prompts x {kw['group_size']} samples</p>" + ppo_grpo_table_html(results),
                [workdepth_chart(results, title="Shares of W and 𝒟 per phase"),
                 brent_terms_chart(results)])

    message, out = wire(sliders, compute)
    return w.VBox([w.HBox([w.VBox(list(sliders.values())), message]), out])


def ppo_grpo_workdepth_grid(grid: dict | None = None, *, model: dict = LLAMA2_7B,
                            num_prompts: int = 32, group_size: int = 16,
                            prompt_len: int = 512) -> list[dict]:
    """Chapter 2's no-kernel calculator: :func:`ppo_grpo_workdepth` (default GRPO 32 x 16, PPO
    512 x 1, P = 512, the Llama-2-7B shape) over ``grid`` (default :data:`PPO_GRPO_GRID`: R,
    ppo_epochs, num_minibatches and log10 p). GRPO's rows repeat for every epochs and
    minibatches setting (it makes one update per batch).

    Returns:
        dicts with the grid's keys, ``algo``, ``phase`` (the algorithm's label, then the phase
        name, or "step" for the step's totals), ``work_flops``, ``depth_rounds`` and
        ``brent_rounds`` (W/p + 𝒟).
    """
    grid = grid or PPO_GRPO_GRID
    rows = []
    for point in grid_points(grid):
        args = {k: v for k, v in point.items() if k != "log10_p"}
        results = ppo_grpo_workdepth(model=model, num_prompts=num_prompts,
                                     group_size=group_size, prompt_len=prompt_len,
                                     processors=10 ** point["log10_p"], **args)
        for algo, wd in results.items():
            rows.append({**point, "algo": algo, "phase": f"{algo} step",
                         "work_flops": wd.work_flops, "depth_rounds": wd.depth_rounds,
                         "brent_rounds": wd.brent_rounds})
            rows += [{**point, "algo": algo, "phase": f"{algo} {p.name}",
                      "work_flops": p.work_flops, "depth_rounds": p.depth_rounds,
                      "brent_rounds": p.brent_rounds} for p in wd.phases]
    return rows


def ppo_grpo_grid_chart(rows: list[dict], *, start: dict | None = None,
                        title: str = "W/p + 𝒟 per phase, PPO against GRPO (no kernel needed)"):
    """Chapter 2's no-kernel calculator: :func:`~rlmperf_lite.book.grid_chart` of
    :func:`ppo_grpo_workdepth_grid`'s rows, one dropdown per grid key, Brent's bound W/p + 𝒟 of
    each phase and step on a log axis (bars from 1 round, unstacked: stacked bars have no
    extent on a log scale), coloured by algorithm.

    Raises:
        ValueError: empty ``rows`` (pass :func:`ppo_grpo_workdepth_grid`'s result).
    """
    if not rows:
        raise ValueError("rows is empty: pass ppo_grpo_workdepth_grid()'s result")
    controls = [k for k in PPO_GRPO_GRID if k in rows[0]]
    return grid_chart(rows, controls=controls, category="phase", value="brent_rounds",
                      value_title="W/p + 𝒟 (rounds)", start=start, title=title).encode(
        x=alt.X("brent_rounds:Q", title="W/p + 𝒟 (rounds, log scale)", stack=None,
                scale=alt.Scale(type="log", domainMin=1), axis=alt.Axis(format="~s")),
        color=alt.Color("algo:N", title=None, sort=["PPO", "GRPO"]),
        tooltip=["phase:N", alt.Tooltip("brent_rounds:Q", format=".4~s")],
    ).transform_calculate(algo="split(datum.phase, ' ')[0]").properties(height=360)


# ---- Chapter 6: shares of the step per phase -------------------------------------------------

PROFILE_GRID = {"actor": ("qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b"),
                "hardware": ("h100-sxm", "a100-80gb", "h20", "b200"),
                "algo": ("ppo", "grpo", "dapo", "reinforce_pp"),
                "response_len": (256, 1024, 4096, 16384),
                "group_size": (2, 4, 16, 64)}
"""The no-kernel calculator's grid of Chapter 6 (PPO first, so that the phase axis follows its
execution order, a superset of the others')."""

GENERATION = "generation (prefill + decode)"
"""The label of the rows holding the estimate's ``generation_time_share``."""


def phase_share_grid(grid: dict | None = None, **fixed) -> list[dict]:
    """Chapter 6's no-kernel calculator: :func:`~rlmperf_lite.book.estimate_grid` over
    ``grid`` (default :data:`PROFILE_GRID`; 32 prompts of 512 tokens, kl_coef 0.001 and 64 GPUs
    unless given in ``fixed``), with each phase's share of the step's time, and one row per
    setting for the share of generation (``phase`` = :data:`GENERATION`).

    Returns:
        :func:`~rlmperf_lite.book.estimate_grid`'s rows with ``time_share`` added
        (``time_s`` / ``step_time_s``), each setting's :data:`GENERATION` row first (the
        grid's keys, ``phase``, ``time_share``, ``step_time_s``,
        ``generation_time_share`` and ``fits``).
    """
    grid = grid or PROFILE_GRID
    rows, last = [], None
    for r in estimate_grid(grid, **{"gpus": 64, **fixed}):
        point = {k: r[k] for k in grid}
        if point != last:
            rows.append({**point, "phase": GENERATION,
                         "time_share": r["generation_time_share"],
                         "step_time_s": r["step_time_s"],
                         "generation_time_share": r["generation_time_share"], "fits": r["fits"]})
            last = point
        rows.append({**r, "time_share": r["time_s"] / r["step_time_s"]})
    return rows


def phase_share_grid_chart(rows: list[dict], *, start: dict | None = None,
                           title: str = "Share of the step's time per phase (no kernel needed)"):
    """Chapter 6's no-kernel calculator: :func:`~rlmperf_lite.book.grid_chart` of
    :func:`phase_share_grid`'s rows, one dropdown per grid key, the shares in percent.

    Raises:
        ValueError: empty ``rows`` (pass :func:`phase_share_grid`'s result).
    """
    if not rows:
        raise ValueError("rows is empty: pass phase_share_grid()'s result")
    controls = [k for k in PROFILE_GRID if k in rows[0]]
    return grid_chart(rows, controls=controls, category="phase", value="time_share",
                      value_title="share of the step's time", start=start, title=title).encode(
        x=alt.X("time_share:Q", title="share of the step's time", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        tooltip=["phase:N", alt.Tooltip("time_share:Q", format=".1%")])


def profile_estimates(algos=ALGOS, **step) -> tuple[dict, dict]:
    """:func:`~rlmperf_lite.cost.estimate_rl_step` of the same ``step`` for each of ``algos``.

    Returns:
        A pair of dicts keyed by algorithm — the estimates (RLStepEstimate), and the ValueErrors
        of the algorithms the estimator rejects for this step (e.g. GRPO with G = 1).
    """
    estimates, errors = {}, {}
    for algo in algos:
        try:
            estimates[algo] = estimate_rl_step(algo, **step)
        except ValueError as err:
            errors[algo] = err
    return estimates, errors


def profile_table_html(estimates: dict) -> str:
    """An HTML table of ``estimates`` ({algo: RLStepEstimate}): step time, generation time and
    generation's share of the time and of the FLOPs, and whether the step fits in memory."""
    rows = "".join(
        f"<tr><td>{a}</td><td>{e.time_s:.3g}</td><td>{e.generation_time_s:.3g}</td>"
        f"<td>{e.generation_time_share:.1%}</td><td>{e.generation_flops_share:.1%}</td>"
        f"<td>{'yes' if e.fits else 'no'}</td></tr>" for a, e in estimates.items())
    return ("<table><tr><th>algo</th><th>step (s)</th><th>generation (s)</th>"
            "<th>share of time</th><th>share of FLOPs</th><th>fits</th></tr>"
            f"{rows}</table>")


def profile_chart(estimates: dict, algos=("grpo", "ppo")):
    """Side by side, :func:`~rlmperf_lite.book.phase_share_chart` of each of ``algos`` found
    in ``estimates``."""
    return alt.hconcat(*(phase_share_chart(estimates[a], title=f"{a}: share of the step")
                         for a in algos if a in estimates))


def profile_widget(**defaults):
    """Model, accelerator, B, G, P, R, GPUs and the two efficiencies driving
    :func:`profile_estimates` for every algorithm of :data:`~rlmperf_lite.cost.ALGOS` (Chapter 6
    lab): the step time and generation's share for each, and each phase's share of the time
    and FLOPs for GRPO and PPO. Defaults: the lab's step (Qwen2.5-7B, 64 H100s, 32 x 16
    samples of 512 + 4,096 tokens, kl_coef 0.001, at the roofline). An algorithm the estimator
    rejects for the setting shows its ValueError message; the charts go when all do."""
    import ipywidgets as w

    c = {"actor": "qwen2.5-7b", "hardware": "h100-sxm", "prompts": 32, "group_size": 16,
         "prompt_len": 512, "response_len": 4096, "gpus": 64, "kl_coef": 0.001,
         "train_efficiency": 1.0, "decode_efficiency": 1.0, **defaults}
    controls = {
        "actor": w.Dropdown(options=model_presets(), value=c["actor"], description="model"),
        "hardware": w.Dropdown(options=hardware_presets(), value=c["hardware"],
                               description="GPU"),
        "prompts": w.IntSlider(value=c["prompts"], min=1, max=1024, description="B prompts"),
        "group_size": w.IntSlider(value=c["group_size"], min=1, max=256, description="G group"),
        "prompt_len": w.IntSlider(value=c["prompt_len"], min=1, max=8192, description="P"),
        "response_len": w.IntSlider(value=c["response_len"], min=1, max=32768, description="R"),
        "gpus": w.IntSlider(value=c["gpus"], min=1, max=1024, description="GPUs"),
        "train_efficiency": w.FloatSlider(value=c["train_efficiency"], min=0.05, max=1.0,
                                          step=0.05, description="train eff."),
        "decode_efficiency": w.FloatSlider(value=c["decode_efficiency"], min=0.05, max=1.0,
                                           step=0.05, description="decode eff."),
    }

    def compute(step):
        estimates, errors = profile_estimates(**step, kl_coef=c["kl_coef"])
        by_message = {}                                     # one line per distinct error
        for a, err in errors.items():
            by_message.setdefault(str(err), []).append(a)
        notes = "".join(f"<p>{error_html(ValueError(', '.join(algos) + ': ' + text))}</p>"
                        for text, algos in by_message.items())
        if not estimates:
            return notes, ()
        return profile_table_html(estimates) + notes, [profile_chart(estimates)]

    message, out = wire(controls, compute)
    return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])
