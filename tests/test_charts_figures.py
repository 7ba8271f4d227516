"""The prose pages' figures (rlmperf_lite.book.charts): each chart's data are the model's numbers,
and book/_ext/glue_figure.py puts a lab's glued chart into a numbered figure on another page."""
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from rlmperf_lite.book import (brent_bounds_chart, figure_html, length_histogram_chart,
                               phase_roofline_chart, step_timeline_chart)
from rlmperf_lite.book.charts import (brent_bound_rows, length_histogram_rows,
                                      phase_roofline_rows, step_timeline_rows)
from rlmperf_lite.cost import (estimate_rl_step, expected_max_length, hardware_preset,
                               rl_step_workdepth)

REPO = Path(__file__).resolve().parents[1]
STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64, kl_coef=0.001)          # the labs' step (Chapters 4-6)


@pytest.fixture(scope="module")
def est():
    return estimate_rl_step("grpo", **STEP)


def _values(chart):
    """Every inline data set of a (layered or faceted) chart's spec."""
    spec, out = chart.to_dict(), []

    def walk(node):
        if isinstance(node, dict):
            if "values" in node.get("data", {}):
                out.append(node["data"]["values"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return out


def test_timeline_runs_the_estimates_phases_back_to_back(est):
    rows = step_timeline_rows(est)
    assert [r["phase"] for r in rows] == [p.name for p in est.phases]
    assert [r["seconds"] for r in rows] == [p.time_s for p in est.phases]
    assert rows[0]["start_s"] == 0.0
    assert all(a["end_s"] == b["start_s"] for a, b in zip(rows, rows[1:]))
    assert rows[-1]["end_s"] == pytest.approx(est.time_s, rel=1e-12)   # colocated: the sum
    assert {r["model"] for r in rows} == {"actor", "reference", "no model"}
    assert rows in _values(step_timeline_chart(est))


def test_brent_rows_are_the_bounds_of_each_p():
    by_p = {10**k: rl_step_workdepth("grpo", processors=10**k, **STEP) for k in (0, 8, 14)}
    rows = brent_bound_rows(by_p)
    got = {(r["phase"], r["p"], r["term"]): r["rounds"] for r in rows}
    for p, wd in by_p.items():
        d = wd.phase("rollout_decode")
        assert got["rollout_decode", p, "W/p"] == d.work_flops / p
        assert got["rollout_decode", p, "𝒟"] == d.depth_rounds
        assert got["rollout_decode", p, "max(W/p, 𝒟)"] == max(d.work_flops / p, d.depth_rounds)
        assert got["rollout_decode", p, "W/p + 𝒟"] == d.work_flops / p + d.depth_rounds
    assert got["rollout_decode", 10**14, "max(W/p, 𝒟)"] == got["rollout_decode", 10**14, "𝒟"]
    assert rows in _values(brent_bounds_chart(by_p))
    with pytest.raises(ValueError, match="phases"):
        brent_bound_rows(by_p, phases=("decode",))
    with pytest.raises(ValueError, match="model_wd"):
        brent_bound_rows({})


def test_histogram_counts_every_response_and_marks_the_expected_longest():
    lengths = np.random.default_rng(0).lognormal(7.0, 0.8, size=20_000).clip(1, 16384).round()
    bars, marks = length_histogram_rows(lengths, (16, 512), bins=32)
    assert len(bars) == 32 and sum(b["share"] for b in bars) == pytest.approx(1.0, abs=1e-12)
    assert bars[0]["start"] == 0 and bars[-1]["end"] == lengths.max()
    counts, _ = np.histogram(lengths, bins=32, range=(0, lengths.max()))
    assert [b["share"] * lengths.size for b in bars] == pytest.approx(counts)
    by = {m["mark"]: m["tokens"] for m in marks}
    assert by["mean"] == lengths.mean()
    assert by["longest of 16 (expected)"] == expected_max_length(lengths, 16)
    assert by["mean"] < by["longest of 16 (expected)"] < by["longest of 512 (expected)"]
    values = _values(length_histogram_chart(lengths, (16, 512), bins=32))
    assert bars in values and marks in values
    for bad, match in (({"group_sizes": (0,)}, "group_size"), ({"group_sizes": ()}, "group_sizes"),
                       ({"bins": 0}, "bins")):
        with pytest.raises(ValueError, match=match):
            length_histogram_rows(lengths, **{"group_sizes": (16,), **bad})
    with pytest.raises(ValueError, match="lengths"):
        length_histogram_rows([-1.0, 2.0])


def test_roofline_places_each_phase_at_its_intensity_and_estimated_rate(est):
    roof, phases = phase_roofline_rows(est)
    h100 = hardware_preset("h100")
    assert max(r["flops_per_s"] for r in roof) == h100.peak("bf16")
    assert all(r["flops_per_s"] == min(h100.peak("bf16"),
                                       r["intensity"] * h100.hbm_bandwidth_bytes_per_s)
               for r in roof)
    by = {r["phase"]: r for r in phases}
    assert "weight_sync" not in by                            # no FLOPs: off a log axis
    decode = est.phase("rollout_decode")
    assert by["rollout_decode"]["intensity"] == decode.flops / decode.bytes_moved
    assert by["rollout_decode"]["flops_per_s"] == decode.flops / (decode.time_s * 64)
    assert by["rollout_decode"]["intensity"] < h100.ridge_intensity < \
        by["actor_update"]["intensity"]                      # memory- against compute-bound
    for r in phases:                                          # no phase above its roof
        assert r["flops_per_s"] <= min(h100.peak("bf16"),
                                       r["intensity"] * h100.hbm_bandwidth_bytes_per_s) * 1.000001
    assert phases in _values(phase_roofline_chart(est))


def test_figure_html_is_an_inline_svg_with_no_script(est):
    html = figure_html(step_timeline_chart(est))
    bundle = html._repr_html_()
    assert bundle.startswith("<svg") and "<script" not in bundle and "rollout_decode" in bundle


def _sphinx_project(root: Path) -> None:
    """A two-page project: a notebook that glues a figure, a page that shows it with :doc:."""
    from myst_nb import glue  # noqa: F401  (installed: the project's reader)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    svg = "<svg xmlns='http://www.w3.org/2000/svg' class='marks'><rect width='5' height='5'/></svg>"
    out = nbformat.v4.new_output("display_data", data={
        "application/papermill.record/text/html": svg,
        "application/papermill.record/text/plain": "<HTML>"},
        metadata={"scrapbook": {"name": "fig-key", "mime_prefix":
                                "application/papermill.record/"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab"),
                nbformat.v4.new_code_cell("glue('fig-key', x, display=False)", outputs=[out])]
    (root / "lab").mkdir()
    nbformat.write(nb, root / "lab" / "lab.ipynb")
    (root / "page.md").write_text(
        "# Page\n\nSee {numref}`fig-test`.\n\n```{glue:figure} fig-key\n:doc: lab/lab.ipynb\n"
        ":name: fig-test\nA caption from the model.\n```\n", encoding="utf-8")
    (root / "index.md").write_text("# Index\n\n```{toctree}\npage\nlab/lab\n```\n",
                                   encoding="utf-8")
    (root / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'glue_figure']\nnb_execution_mode = 'off'\n"
        "numfig = True\nmyst_enable_extensions = ['colon_fence']\n", encoding="utf-8")


def test_glue_figure_with_doc_shows_another_documents_output_as_a_numbered_figure(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _sphinx_project(src)
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html",
                           str(src), str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = (out / "page.html").read_text(encoding="utf-8")
    figure = page[page.index('<figure'):page.index('</figure>')]
    assert 'id="fig-test"' in figure and "<svg" in figure and "A caption from the model." in figure
    assert "Fig. 1" in page                                 # numbered, and the {numref} resolves


def test_mismatch_curves_hold_each_runs_logged_accuracy_and_kl():
    from rlmperf_lite.book import mismatch_curves_chart
    from rlmperf_lite.book.charts import MISMATCH_METRICS, mismatch_curve_rows
    from rlmperf_lite.rl import GRPOConfig, train_grpo
    short = dict(steps=2, num_prompts=4, warmstart_max_steps=10, lr_warmup_steps=0,
                 rollout_dtype="bfloat16")
    first = train_grpo(GRPOConfig(**short), eval_every=1)
    runs = {("trust", 0): first,
            ("recompute", 0): train_grpo(GRPOConfig(bypass_mode=False, **short), eval_every=1,
                                         base_params=first.base_params)}
    rows = mismatch_curve_rows(runs)
    for (method, seed), run in runs.items():
        for m in MISMATCH_METRICS:
            got = [r["value"] for r in rows if r["method"] == method and r["metric"] == m]
            assert got == [h[m] for h in run.history]          # every step, in order
    assert all(r["value"] > 0 for r in rows if r["metric"] == "mismatch_k3_kl")   # bf16 engine
    data = _values(mismatch_curves_chart(runs))
    assert sorted(map(str, sum(data, []))) == sorted(map(str, rows))
    with pytest.raises(ValueError, match="eval_every"):
        mismatch_curve_rows({("x", 0): train_grpo(GRPOConfig(**{**short, "steps": 1}))})
    with pytest.raises(ValueError, match="runs"):
        mismatch_curve_rows({"x": first})
