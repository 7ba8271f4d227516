"""Chapter 9's work-depth calculators (live panel and no-kernel twin) are the library's
pipeline and MoE work and depth, and the simulated schedule lies inside the bounds."""
import json

import pytest

from rlmperf_lite.cost.pp_workdepth import pipeline_workdepth_s
from rlmperf_lite.parallel import make_schedule, schedule_timeline
from rlmperf_lite.rl import GRPOResult
from rlmperf_lite.book.ch09_workdepth import (PP_STATIC_OPTIONS, ep_workdepth_calculator,
                                              pipeline_curve_chart, pp_workdepth_calculator,
                                              pp_workdepth_static, pp_workdepth_widget)


def test_pp_calculator_is_the_library_and_the_simulator():
    calc = pp_workdepth_calculator()
    phases, note, measured = calc.compute(schedule="1f1b", pp=8, microbatches=32,
                                          interleave=1, model="qwen2.5-72b")
    want = pipeline_workdepth_s("qwen2.5-72b", pp=8, microbatches=32)
    assert list(phases) == list(want.phases) and measured == want.makespan_s
    hop = want.hop_s
    tl = schedule_timeline(make_schedule("1f1b", 8, 32), want.forward_s + hop,
                           want.backward_s + hop)
    assert measured == tl.makespan
    assert "bubble D/(W/p) - 1 = 0.2188" in note and "78 sends" in note


def test_every_grid_setting_puts_the_simulated_makespan_inside_the_bounds():
    rows = pp_workdepth_calculator().grid()
    settings = {tuple(r[k] for k in PP_STATIC_OPTIONS) for r in rows}
    assert len(settings) > 100
    for r in rows:
        assert r["lower_s"] * (1 - 1e-9) <= r["measured_s"] <= r["upper_s"] * (1 + 1e-9)
        assert r["measured_s"] == pytest.approx(r["lower_s"], rel=1e-9)    # T = D


def test_pp_twin_fits_and_the_widget_shows_a_bad_setting_as_a_message():
    spec = json.dumps(pp_workdepth_static().data)
    assert "rlmperf-vega-" in spec and len(spec) < 400_000
    box = pp_workdepth_widget()
    controls = box.children[0].children[0].children
    message = box.children[0].children[1]
    assert "<table>" in message.value and "pipeline forward + backward" in message.value
    interleave = next(c for c in controls if c.description == "chunks v")
    interleave.value = 2                                  # with 1F1B: refused, named
    assert "interleave=2 needs schedule=&#x27;interleaved&#x27;" in message.value


def test_ep_calculator_names_the_imbalance_and_the_link():
    calc = ep_workdepth_calculator()
    phases, note, measured = calc.compute(model="qwen3-235b-a22b", ep=8, skew=0.0)
    assert measured is None and [p.name for p in phases][1] == "experts forward + backward"
    assert "intra-node link" in note
    skewed = calc.compute(model="qwen3-235b-a22b", ep=8, skew=1.0)[0][1]
    assert skewed.depth_s / skewed.work_per_processor_s > \
        phases[1].depth_s / phases[1].work_per_processor_s
    assert "inter-node" in calc.compute(model="qwen3-235b-a22b", ep=16, skew=0.0)[1]
    assert len(json.dumps(calc.static().data)) < 400_000


def test_curve_chart_refuses_runs_without_history_or_metric():
    run = GRPOResult(params={}, base_params={})
    run.history.append({"step": 0, "reward_mean": 0.5})
    chart = pipeline_curve_chart({"one rank": run, "pp = 2": run}).to_dict()
    assert chart["title"] == "GRPO on pipeline ranks and on one rank"
    with pytest.raises(ValueError, match="non-empty dict"):
        pipeline_curve_chart({})
    with pytest.raises(ValueError, match="metric 'loss'"):
        pipeline_curve_chart({"one rank": run}, metric="loss")
