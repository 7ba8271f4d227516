"""The live work-depth calculator every lab shows, and its no-kernel twin, from one definition.

A :class:`WorkDepthCalculator` is a function of a few named settings that returns phases in
seconds (:class:`~rlmperf_lite.cost.PhaseWorkDepth`: W, D, p), with the options of each setting.
``.widget()`` is the ipywidgets panel (a kernel recomputes on every move); ``.static()`` is the
same calculator evaluated on every combination of the options when the book is built, drawn by
a chart whose own dropdowns pick the setting (it works on the published page with no kernel).
Both show W/p and D per phase and the step's Brent bounds, max(W/p, D) <= T <= W/p + D.
"""
from __future__ import annotations

import html
import itertools
from dataclasses import dataclass, field
from typing import Callable

import altair as alt

from .static_calculators import bound_controls, grid_data, static_chart

__all__ = ["WorkDepthCalculator", "workdepth_table_html", "workdepth_bounds_chart"]

_MAX_GRID = 2000           # settings evaluated for the no-kernel twin


def _totals(phases) -> dict:
    lower = sum(p.brent_lower_s for p in phases)
    upper = sum(p.brent_upper_s for p in phases)
    return {"work_gpu_s": sum(p.work_gpu_s for p in phases),
            "depth_s": sum(p.depth_s for p in phases), "lower_s": lower, "upper_s": upper}


def _fmt(seconds: float) -> str:
    if seconds == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def workdepth_table_html(phases, *, measured_s: float | None = None, note: str = "",
                         measured_label: str = "set against") -> str:
    """An HTML table of W, W/p, D, the bounds and W/D per phase, the step's sums below (phases
    run one after another). ``measured_s``: a time to set against the bounds (an estimate or a
    measurement); ``note``: a line above the table (the inputs the claim rests on)."""
    head = ("<tr><th>phase</th><th>W (GPU-s)</th><th>W/p</th><th>D</th>"
            "<th>max(W/p, D)</th><th>W/p + D</th><th>W/D (GPUs)</th></tr>")
    rows = "".join(
        f"<tr><td>{p.name}</td><td>{p.work_gpu_s:.4g}</td><td>{_fmt(p.work_per_processor_s)}"
        f"</td><td>{_fmt(p.depth_s)}</td><td>{_fmt(p.brent_lower_s)}</td>"
        f"<td>{_fmt(p.brent_upper_s)}</td><td>{p.parallelism:.3g}</td></tr>" for p in phases)
    t = _totals(phases)
    p = phases[0].processors if phases else 1
    total = (f"<tr><th>step (p = {p:g})</th><th>{t['work_gpu_s']:.4g}</th>"
             f"<th>{_fmt(t['work_gpu_s'] / p)}</th><th>{_fmt(t['depth_s'])}</th>"
             f"<th>{_fmt(t['lower_s'])}</th><th>{_fmt(t['upper_s'])}</th><th></th></tr>")
    line = ""
    if measured_s is not None:
        inside = t["lower_s"] * (1 - 1e-9) <= measured_s <= t["upper_s"] * (1 + 1e-9)
        line = (f"<p>{html.escape(measured_label)}: {_fmt(measured_s)} "
                f"({'inside' if inside else 'outside'} the bounds)</p>")
    note = f"<p>{html.escape(note)}</p>" if note else ""
    return f"{note}<table>{head}{rows}{total}</table>{line}"


def _long_rows(phases) -> list[dict]:
    rows = []
    for p in phases:
        rows.append({"phase": p.name, "quantity": "W/p", "seconds": p.work_per_processor_s})
        rows.append({"phase": p.name, "quantity": "D", "seconds": p.depth_s})
    return rows


def _bars(chart, order):
    return chart.mark_bar().encode(
        y=alt.Y("phase:N", sort=order, title=None),
        x=alt.X("seconds:Q", title="seconds"),
        color=alt.Color("quantity:N", title=None, sort=["W/p", "D"],
                        scale=alt.Scale(domain=["W/p", "D"], range=["#4c78a8", "#f58518"])),
        yOffset=alt.YOffset("quantity:N", sort=["W/p", "D"]),
        tooltip=["phase:N", "quantity:N", alt.Tooltip("seconds:Q", format=".4g")])


def _size(order) -> dict:
    return {"width": 420, "height": max(120, 26 * len(order))}


def workdepth_bounds_chart(phases, *, title: str = "W/p and D per phase"):
    """Bars of W/p and D (seconds) per phase: where W/p is longer, more GPUs help; where D is,
    only a shorter chain does."""
    order = [p.name for p in phases]
    return _bars(alt.Chart(alt.Data(values=_long_rows(phases))), order).properties(
        title=title, **_size(order))


@dataclass(frozen=True)
class WorkDepthCalculator:
    """One lab's work-depth calculator.

    Attributes:
        compute: settings (keywords) -> (phases, note, measured_s): phases a sequence of
            :class:`~rlmperf_lite.cost.PhaseWorkDepth`, note a line naming the inputs the
            result rests on, measured_s a time to set against the bounds (an estimate or a
            measurement) or None; a ValueError for a bad setting.
        options: {setting: tuple of options}, in the order the controls appear; numbers get a
            slider over the options, strings a dropdown.
        start: the first setting (default the first option of each).
        labels: {setting: the control's label}.
        title: the chart's title.
        static_options: the options of the no-kernel twin's grid (default ``options``; fewer
            when their product is too large to embed).
        measured_label: what the time that ``compute`` returns is ("the estimate",
            "measured").
    """

    compute: Callable
    options: dict
    title: str
    start: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    static_options: dict | None = None
    measured_label: str = "set against"

    def _start(self, name, options=None):
        opts = (options or self.options)[name]
        value = self.start.get(name, opts[0])
        return value if value in opts else opts[0]

    def widget(self):
        """The live panel: one control per setting, the table and the chart redrawn on every
        move, a bad setting shown as the library's message."""
        import ipywidgets as w

        from .widgets import wire
        controls = {}
        for name, opts in self.options.items():
            label = self.labels.get(name, name)
            style = {"description_width": "initial"}
            if all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in opts):
                controls[name] = w.SelectionSlider(options=list(opts), value=self._start(name),
                                                   description=label, style=style)
            else:
                controls[name] = w.Dropdown(options=list(opts), value=self._start(name),
                                            description=label, style=style)

        def update(values):
            phases, note, measured = self.compute(**values)
            return (workdepth_table_html(phases, measured_s=measured, note=note,
                                         measured_label=self.measured_label),
                    [workdepth_bounds_chart(phases, title=self.title)])

        message, out = wire(controls, update)
        return w.VBox([w.HBox([w.VBox(list(controls.values())), message]), out])

    def grid(self) -> list[dict]:
        """Rows of the no-kernel twin: every combination of the options (settings the
        calculator refuses give none), W/p and D per phase and the step's bounds."""
        options = self.static_options or self.options
        combos = list(itertools.product(*options.values()))
        if len(combos) > _MAX_GRID:
            raise ValueError(f"{len(combos)} settings exceed the no-kernel grid's {_MAX_GRID}: "
                             "give fewer options")
        rows = []
        for combo in combos:
            values = dict(zip(options, combo))
            try:
                phases, _, measured = self.compute(**values)
            except ValueError:
                continue
            t = _totals(phases)
            for r in _long_rows(phases):
                rows.append({**values, **r, "lower_s": t["lower_s"], "upper_s": t["upper_s"],
                             "measured_s": -1.0 if measured is None else float(measured)})
        return rows

    def static(self):
        """The no-kernel twin: the grid drawn with the chart's own dropdowns (an HTML output
        that stays interactive on the published page)."""
        rows = self.grid()
        if not rows:
            raise ValueError("the calculator refused every setting of its grid")
        controls = list(self.static_options or self.options)
        start = {k: self._start(k, self.static_options) for k in controls}
        params, predicate = bound_controls(rows, controls, start)
        first = [r["phase"] for r in rows if all(r[k] == start[k] for k in controls)]
        order = list(dict.fromkeys(first + [r["phase"] for r in rows]))
        data = grid_data(rows, controls + ["phase", "quantity", "seconds", "lower_s",
                                           "upper_s", "measured_s"])
        base = alt.Chart(data).transform_filter(predicate)
        label = base.transform_aggregate(
            lo="max(lower_s)", up="max(upper_s)", t="max(measured_s)", n="count()"
        ).transform_calculate(
            text="datum.n == 0 ? 'the calculator refuses this setting' : "
                 "'step: ' + format(datum.lo, '.3g') + ' s <= T <= ' + format(datum.up, '.3g')"
                 " + ' s' + (datum.t >= 0 ? ';  " + self.measured_label.replace("'", "") +
                 ": ' + format(datum.t, '.3g') + ' s'"
                 " : '')"
        ).mark_text(align="left", x=0, y=-12, fontSize=12).encode(text="text:N")
        return static_chart(alt.layer(_bars(base, order), label).add_params(*params).properties(
            title=self.title + " (no kernel needed)", **_size(order)))
