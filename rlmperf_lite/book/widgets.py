"""ipywidgets front ends of the calculators: work and depth of a GRPO step (Chapter 1 lab), the
cost of each GRPO variant and PPO (Chapter 3 lab); and the wiring every live widget of the library
shares (:func:`wire`, :func:`error_html`)."""
from __future__ import annotations

import html
from typing import Callable

from ..cost.variants import compare_variants
from ..cost.workdepth import grpo_step_workdepth
from .charts import brent_terms_chart, workdepth_chart

LENGTHS = tuple(2 ** k for k in range(16))
"""The options of a length slider, 1 to 32,768 tokens in powers of two."""


def error_html(err: Exception) -> str:
    """How every calculator widget shows a ValueError: its message, in red, escaped."""
    return f"<b style='color:firebrick'>{html.escape(str(err))}</b>"


def wire(controls: dict, compute: Callable[[dict], tuple], *, message=None) -> tuple:
    """Connect ``controls`` ({name: ipywidget}) to a calculator, the wiring of every live widget
    of the library: on every change of a control's value, and once now, ``compute(values)``
    with ``values`` {name: control.value} returns ``(html, outputs)`` — the HTML shown in the
    message and the objects displayed below it (charts; an empty sequence clears the area).
    A ValueError it raises is shown instead as the library's message (:func:`error_html`) and
    the outputs are cleared, so a bad setting never prints a traceback.

    Args:
        controls: {name: ipywidget with a ``value``}, in the order ``values`` lists them.
        compute: the calculator, ``values -> (html, outputs)``; it holds any check of the
            values beyond the library's (e.g. a bound on the steps a widget runs).
        message: an existing HTML widget (e.g. one ``compute`` writes a progress note to);
            default a new one.
    Returns:
        ``(message, out)``: the ipywidgets HTML and Output for the caller to lay out (a widget
        whose ``compute`` displays nothing may leave ``out`` out of its layout).
    Raises:
        Exception: any other exception of ``compute`` (a bug, not a bad setting), from the
            first call.
    """
    import ipywidgets as w
    from IPython.display import display

    message = w.HTML() if message is None else message
    out = w.Output()

    def update(_=None):
        try:
            message_html, outputs = compute({k: c.value for k, c in controls.items()})
        except ValueError as err:
            message_html, outputs = error_html(err), ()
        message.value = message_html
        if not outputs:
            out.clear_output()
            return
        with out:
            out.clear_output(wait=True)
            for obj in outputs:
                display(obj)

    for c in controls.values():
        c.observe(update, names="value")
    update()
    return message, out


def length_slider(value: int, description: str):
    """A slider over :data:`LENGTHS` starting at ``value``: a length spans four decades, and
    on a linear slider a small drag jumps from 4,096 to 1.

    Raises:
        ValueError: ``value`` not a power of two from 1 to 32,768.
    """
    import ipywidgets as w

    if value not in LENGTHS:
        raise ValueError(f"{description}: value must be a power of two from 1 to "
                         f"{LENGTHS[-1]:,} (a length slider's options), got {value!r}")
    return w.SelectionSlider(options=list(LENGTHS), value=value, description=description)


def _table(wd) -> str:
    rows = "".join(
        f"<tr><td>{p.name}</td><td>{p.work_flops:.3g}</td><td>{p.depth_rounds:.4g}</td>"
        f"<td>{p.parallelism:.3g}</td><td>{p.brent_rounds:.3g}</td></tr>" for p in wd.phases)
    return ("<table><tr><th>phase</th><th>work W (FLOPs)</th><th>depth 𝒟 (rounds)</th>"
            "<th>W/𝒟</th><th>W/p + 𝒟 (rounds)</th></tr>" + rows +
            f"<tr><th>step</th><th>{wd.work_flops:.3g}</th><th>{wd.depth_rounds:.4g}</th><th></th>"
            f"<th>{wd.brent_rounds:.3g}</th></tr></table>")


def workdepth_widget(**model):
    """Sliders for B, G, P, R and log10 p driving the calculator for a fixed model shape: the
    table, the shares of W and 𝒟 (which p does not change) and the terms W/p and 𝒟 (which it
    does). P and R step through powers of two
    (:func:`~rlmperf_lite.book.widgets.length_slider`).

    Defaults: the DeepSeek-R1-like batch of the Chapter 1 lab (B=32, G=16, P=512, R=4096).

    ``model``: the shape keywords of :func:`~rlmperf_lite.cost.grpo_step_workdepth`
    (num_layers, hidden_size, ...).
    Bad combinations show the calculator's ValueError message instead of a traceback.
    """
    import ipywidgets as w

    sliders = {
        "num_prompts": w.IntSlider(value=32, min=1, max=512, description="B prompts"),
        "group_size": w.IntSlider(value=16, min=1, max=64, description="G group"),
        "prompt_len": length_slider(512, "P prompt"),
        "response_len": length_slider(4096, "R response"),
        "log10_p": w.FloatSlider(value=6.0, min=0.0, max=13.0, step=0.5, description="log10 p"),
    }

    def compute(v):
        log10_p = v.pop("log10_p")
        wd = grpo_step_workdepth(**model, **v, processors=int(round(10 ** log10_p)))
        return _table(wd), [workdepth_chart({"this model": wd}, title="Shares of W and 𝒟"),
                            brent_terms_chart({"this model": wd})]

    message, out = wire(sliders, compute)
    return w.VBox([w.HBox([w.VBox(list(sliders.values())), message]), out])


def variant_cost_html(costs: list) -> str:
    """An HTML table of :class:`~rlmperf_lite.cost.VariantCost` rows (the widget's and
    the lab's view)."""
    def cell(v):
        return "&ndash;" if v is None else f"{v:,.4g}"
    head = ("<tr><th>variant</th><th>models held (trainable / frozen)</th><th>state GB</th>"
            "<th>samples</th><th>groups with signal</th><th>fwd seqs</th><th>bwd seqs</th>"
            "<th>work W (FLOPs)</th><th>depth 𝒟 (rounds)</th></tr>")
    rows = "".join(
        f"<tr><td>{c.variant}</td><td>{' + '.join(c.trainable_models)} / "
        f"{' + '.join(c.frozen_models) or '&ndash;'}</td><td>{c.model_state_bytes / 1e9:,.4g}</td>"
        f"<td>{cell(c.samples_generated)}</td><td>{cell(c.informative_groups)}</td>"
        f"<td>{c.passes['forward']:,}</td><td>{c.passes['backward']:,}</td>"
        f"<td>{c.workdepth.work_flops:.3g}</td><td>{c.workdepth.depth_rounds:.4g}</td></tr>"
        for c in costs)
    return f"<table>{head}{rows}</table>"


def variant_cost_widget(**model):
    """Sliders for B, G, P, R, the per-prompt pass rate, the KL coefficient and DAPO's resampling
    limit, driving :func:`rlmperf_lite.cost.compare_variants` for a fixed model shape
    (Chapter 3 lab). Bad combinations show the calculator's ValueError message instead of a
    traceback."""
    import ipywidgets as w

    missing = [k for k in ("num_layers", "hidden_size", "num_heads", "vocab_size")
               if k not in model]
    if missing:
        raise ValueError(f"variant_cost_widget needs the model's shape; missing {missing} "
                         "(e.g. variant_cost_widget(**LLAMA2_7B) in the Chapter 3 lab)")
    sliders = {
        "num_prompts": w.IntSlider(value=32, min=1, max=512, description="B prompts"),
        "group_size": w.IntSlider(value=16, min=1, max=64, description="G group"),
        "prompt_len": w.IntSlider(value=512, min=1, max=8192, description="P prompt"),
        "response_len": w.IntSlider(value=4096, min=1, max=32768, description="R response"),
        "pass_rate": w.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05,
                                   description="pass rate q"),
        "kl_coef": w.FloatSlider(value=0.0, min=0.0, max=0.1, step=0.001, readout_format=".3f",
                                 description="kl_coef"),
        "max_resample_rounds": w.IntSlider(value=3, min=0, max=20, description="DAPO extra"),
    }
    message, _ = wire(sliders, lambda v: (variant_cost_html(compare_variants(**model, **v)), ()))
    return w.VBox([w.VBox(list(sliders.values())), message])
