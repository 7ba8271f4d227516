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
from rlmperf_lite.book.dp_views import zero_shard_chart, zero_shard_rows
from rlmperf_lite.book.sim_views import SYNC_HOPS, weight_sync_path_chart, weight_sync_path_rows
from rlmperf_lite.book.tp_views import (ring_steps_chart, ring_steps_rows, tp_block_chart,
                                        tp_block_rows)
from rlmperf_lite.nn import init_params
from rlmperf_lite.rl import GRPOConfig
from rlmperf_lite.parallel import (ProcessGroup, ring_attention_forward, ring_attention_work,
                                   sequence_shards, shard_params_tp, split_sequence,
                                   tp_block_backward, tp_block_forward)
from rlmperf_lite.cost import (ModelConfig, ParallelPlan, TrainWorkload, estimate_rl_step,
                               expected_max_length, hardware_preset, memory_per_gpu,
                               model_state_breakdown, reshard_bytes_per_gpu, rl_step_workdepth,
                               switch_breakdown, weight_sync_breakdown, weight_sync_time_s)

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


def test_zero_shard_rows_are_memory_per_gpu_and_shard_what_the_zero_paper_says():
    qwen = ModelConfig.preset("qwen2.5-7b")                 # Chapter 7's node: 8 H100s
    wl = TrainWorkload(global_batch=512, seq_len=4608, micro_batch_size=1)
    node = {s: memory_per_gpu(qwen, ParallelPlan(dp=8, zero_stage=s, microbatches=64,
                                                 recompute="full"), wl) for s in range(4)}
    rows = zero_shard_rows(node)
    by = {(r["stage"], r["part"]): r for r in rows}
    names = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
    for s, name in enumerate(names):
        ends = [r for r in rows if r["stage"] == name]
        assert ends[-1]["end_bytes"] == pytest.approx(node[s].total_bytes, rel=1e-12)
        assert [round(r["bytes"]) for r in ends] == [round(node[s].weights_bytes),
                                                      round(node[s].grads_bytes),
                                                      round(node[s].optimizer_bytes),
                                                      round(node[s].activation_bytes)]
        states = model_state_breakdown(qwen.num_params(), 8, s)   # ZeRO paper, Section 5
        assert by[name, "weights"]["bytes"] == pytest.approx(states["weights_bytes"], rel=1e-12)
        assert by[name, "optimizer states"]["bytes"] == pytest.approx(states["optimizer_bytes"],
                                                                      rel=1e-12)
    sharded = {(r["stage"], r["part"]) for r in rows if r["sharded"]}
    assert sharded == {("ZeRO-1", "optimizer states"), ("ZeRO-2", "optimizer states"),
                       ("ZeRO-2", "gradients"), ("ZeRO-3", "optimizer states"),
                       ("ZeRO-3", "gradients"), ("ZeRO-3", "weights")}
    assert all(r["factor"] == pytest.approx(8) for r in rows if r["sharded"])
    assert [round(node[s].total_bytes / 1e9, 1) for s in range(4)] == [126.4, 46.4, 33.1, 19.8]
    values = _values(zero_shard_chart(node))
    assert any(len(v) == 16 and v[0]["bytes"] == rows[0]["bytes"] for v in values)
    with pytest.raises(ValueError, match="stage 0"):
        zero_shard_rows({1: node[1]})


def test_ring_steps_rows_are_the_forward_pass_own_schedule_and_work():
    """Each cell is what ring_attention_forward did at that step: the K/V chunk of rank
    (r - step) mod cp (Liu et al. 2023, Algorithm 1), and the causal blocks it computed."""
    cp = 4
    q, k, v = np.random.default_rng(0).standard_normal((3, 2, 4, 16, 8))   # (n, H, T, Dh)
    caches = {}
    for layout in ("contiguous", "zigzag"):
        _, caches[layout] = ring_attention_forward(
            *(split_sequence(a, cp, layout) for a in (q, k, v)), ProcessGroup(cp), layout=layout)
    rows = ring_steps_rows(caches)
    assert len(rows) == 2 * cp * cp
    for layout, cache in caches.items():
        got = {(r["step"], r["rank"]): r for r in rows if r["layout"] == layout}
        for step in range(cp):
            assert sorted(got[step, r]["kv_owner"] for r in range(cp)) == list(range(cp))
            for r in range(cp):
                assert got[step, r]["kv_owner"] == (r - step) % cp
                assert got[step, r]["blocks"] == cache["work_by_step"][step, r]
        per_rank = [sum(got[s, r]["blocks"] for s in range(cp)) for r in range(cp)]
        np.testing.assert_array_equal(per_rank, ring_attention_work(cp, layout))
        assert all(got[0, r]["blocks"] == 1 for r in range(cp))     # its own diagonal block
    contiguous = {(r["step"], r["rank"]): r["blocks"] for r in rows if r["layout"] == "contiguous"}
    assert all(contiguous[s, r] == (1.0 if s <= r else 0.0)          # the future is masked
               for s in range(cp) for r in range(cp))
    assert {r["blocks"] for r in rows if r["layout"] == "zigzag" and r["step"] > 0} == {0.5}
    assert any(len(vals) == len(rows) and vals[0]["kv_owner"] == rows[0]["kv_owner"]
               for vals in _values(ring_steps_chart(caches)))
    with pytest.raises(ValueError, match="caches"):
        ring_steps_rows({"contiguous": {"work": np.ones(cp)}})


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_block_rows_show_each_ranks_shards_and_the_logged_all_reduces(tp):
    """Shoeybi et al. 2019, Section 3: w_up by columns, w_down by rows, attention by heads;
    f and g each one all-reduce of the (n, T, D) activation, 2 (tp - 1) / tp S bytes a rank."""
    cfg = GRPOConfig().model                                 # the toy LM: D 64, F 256, 4 heads
    rng = np.random.default_rng(0)
    params = init_params(cfg, rng, dtype=np.float64)
    x = rng.standard_normal((3, 8, cfg.hidden_size))          # (n, T, D)
    shards, group = shard_params_tp(params, cfg, tp), ProcessGroup(tp)
    _, cache = tp_block_forward([x] * tp, shards, 1, cfg, group)
    tp_block_backward([x] * tp, cache)
    rows = tp_block_rows(cache, group.log)
    ops = [r for r in rows if r["rank"] is None]
    assert [(r["block"], r["lines"][0]) for r in ops] == [("attention", "f"), ("attention", "g"),
                                                          ("MLP", "f"), ("MLP", "g")]
    assert {r["bytes"] for r in ops} == {2 * (tp - 1) / tp * x.nbytes}
    assert sum(r["bytes"] for r in ops) == group.log.bytes_by_op()["all_reduce"][0]
    F, D, n_T = cfg.intermediate_size, cfg.hidden_size, 3 * 8
    for r in range(tp):
        box = {(b["block"], b["column"]): b["lines"] for b in rows if b["rank"] == r}
        assert box["MLP", 2][1:] == [f"({n_T}, {F // tp})",
                                     f"A_{r} = w_up {tuple(shards[r]['h1.w_up'].shape)}"]
        assert shards[r]["h1.w_up"].shape == (D, F // tp)       # column-parallel
        assert box["MLP", 3][2] == f"B_{r} = w_down {(F // tp, D)}"  # row-parallel
        assert box["attention", 2][1] == f"(3, {cfg.num_heads // tp}, 8, {D // cfg.num_heads}) each"
        assert box["attention", 2][2] == f"wqkv {tuple(shards[r]['h1.wqkv'].shape)}"
        assert box["MLP", 0] == ["X", "(3, 8, 64)"] and box["MLP", 5] == ["output", "(3, 8, 64)"]
    assert any(len(v) == len(rows) for v in _values(tp_block_chart(cache, group.log)))
    _, sp_cache = tp_block_forward(sequence_shards(x, tp), shards, 1, cfg, ProcessGroup(tp),
                                   sp=True)
    with pytest.raises(ValueError, match="without sp"):
        tp_block_rows(sp_cache, group.log)


def test_weight_sync_path_rows_are_the_breakdowns_hops():
    m = ModelConfig.preset("qwen2.5-7b")                     # Chapter 10's two systems
    setups = {"colocated": (ParallelPlan(dp=32, zero_stage=3), {}),
              "apart": (ParallelPlan(dp=24, zero_stage=3),
                        {"mode": "disaggregated", "rollout_gpus": 8})}
    syncs = {k: weight_sync_breakdown(m, "h100", plan, 1, **kw) for k, (plan, kw) in setups.items()}
    rows = weight_sync_path_rows(syncs)
    w = 2.0 * m.num_params()
    for label, b in syncs.items():
        mine = sorted((r for r in rows if r["sync"] == label), key=lambda r: r["column"])
        assert [r["name"] for r in mine] == ["trainer shards", *SYNC_HOPS, "engine layout"]
        assert [r["seconds"] for r in mine[1:5]] == [b.stages[h] for h in SYNC_HOPS]
        plan, kw = setups[label]
        assert sum(r["seconds"] for r in mine[1:5]) == pytest.approx(
            weight_sync_time_s(m, "h100", plan, 1, **kw))
        assert sum(r["share"] for r in mine[1:5]) == pytest.approx(1.0)
        assert mine[0]["bytes"] == pytest.approx(w / b.inputs["gather_ranks"])   # ZeRO-3 shard
        assert mine[-1]["bytes"] == reshard_bytes_per_gpu(m, plan, 1, mode="disaggregated")
        assert mine[-1]["bytes"] == w                        # an engine of one GPU per replica
    apart = {r["name"]: r for r in rows if r["sync"] == "apart"}
    assert apart["transfer"]["bytes"] == w and apart["transfer"]["share"] > 0.8   # the network
    assert {r["name"]: r["bytes"] for r in rows if r["sync"] == "colocated"}["transfer"] == 0.0
    assert any(len(v) == len(rows) for v in _values(weight_sync_path_chart(syncs)))
    with pytest.raises(ValueError, match="weight_sync_breakdown"):
        weight_sync_path_rows({"switch": switch_breakdown(m, "h100", 8, 1)})


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
