"""The taxonomy table of Part III as HTML (book section :ref:`sec-taxonomy-table`); the numbers
and formulas come from :func:`rlmperf_lite.cost.taxonomy.taxonomy_table`."""
from __future__ import annotations

import html

__all__ = ["taxonomy_table_html"]

_COLUMNS = (("ΔW (GPU-s)", "work_change_gpu_s", "work_formula", 1.0),
            ("ΔD (s)", "depth_change_s", "depth_formula", 1.0),
            ("comm per GPU (GB)", "comm_bytes_per_gpu", "comm_bytes_formula", 1e-9),
            ("comm depth (s)", "comm_s", "comm_s_formula", 1.0),
            ("memory per GPU (GB)", "memory_bytes_per_gpu", "memory_formula", 1e-9))


def _cell(value: float, formula: str) -> str:
    return (f"<td>{value:.4g}<br><small><code>{html.escape(formula)}</code></small></td>")


def taxonomy_table_html(rows, *, note: str = "") -> str:
    """One HTML row per :class:`~rlmperf_lite.cost.taxonomy.TaxonomyRow`: axis, setting, then
    each entry's number above its formula; ``note``, a line above (the inputs)."""
    head = "<tr><th>axis</th><th>setting</th>" + "".join(
        f"<th>{html.escape(label)}</th>" for label, *_ in _COLUMNS) + "</tr>"
    body = "".join(
        f"<tr><td><b>{html.escape(r.axis)}</b></td><td>{html.escape(r.setting)}</td>"
        + "".join(_cell(getattr(r, attr) * scale, getattr(r, formula))
                  for _, attr, formula, scale in _COLUMNS) + "</tr>" for r in rows)
    note = f"<p>{html.escape(note)}</p>" if note else ""
    return f"{note}<table>{head}{body}</table>"
