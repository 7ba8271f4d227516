"""The shared work-depth calculator: live panel and no-kernel twin from one definition."""
import json

import pytest

from rlmperf_lite.cost import PhaseWorkDepth, rl_step_workdepth_s
from rlmperf_lite.book import (WorkDepthCalculator, step_workdepth_calculator,
                               workdepth_table_html)


def _toy(**v):
    """Two phases on p GPUs: a task-parallel phase of W = 8 GPU-s, a chain of D = 3 s."""
    p = v["p"]
    if p > 16:
        raise ValueError(f"p={p} exceeds 16")
    return [PhaseWorkDepth("wide", 0.0, 8.0, 0.5, p), PhaseWorkDepth("chain", 0.0, 3.0, 3.0, p)], \
        f"p = {p}", 5.0


def test_table_sums_the_phases_and_says_where_the_time_falls():
    phases, _, t = _toy(p=4)
    html = workdepth_table_html(phases, measured_s=t, measured_label="measured")
    # wide: max(2, 0.5) = 2, 2.5; chain: max(0.75, 3) = 3, 3.75 -> step 5 s <= T <= 6.25 s
    assert "<th>5 s</th><th>6.25 s</th>" in html and "measured: 5 s (inside the bounds)" in html
    assert "outside" in workdepth_table_html(phases, measured_s=7.0)


def test_widget_shows_the_table_and_a_bad_setting_as_a_message():
    calc = WorkDepthCalculator(compute=_toy, options={"p": (1, 4, 32)}, title="toy")
    box = calc.widget()
    slider, message = box.children[0].children[0].children[0], box.children[0].children[1]
    assert "wide" in message.value and "chain" in message.value
    slider.value = 32
    assert "p=32 exceeds 16" in message.value and "<table>" not in message.value


def test_static_twin_embeds_every_accepted_setting_with_its_bounds():
    calc = WorkDepthCalculator(compute=_toy, options={"p": (1, 4, 32)}, title="toy")
    rows = calc.grid()
    assert sorted({r["p"] for r in rows}) == [1, 4]          # p = 32 refused, no rows
    by_p = {r["p"]: r for r in rows}
    assert by_p[1]["lower_s"] == 8.0 + 3.0 and by_p[4]["upper_s"] == 2.5 + 3.75
    out = calc.static().data
    assert "rlmperf-vega-" in out and "vegaEmbed" in out
    with pytest.raises(ValueError, match="refused every setting"):
        WorkDepthCalculator(compute=_toy, options={"p": (32,)}, title="toy").static()


def test_step_calculator_is_the_library_and_its_grid_fits():
    calc = step_workdepth_calculator(("actor", "gpus"))
    phases, note, estimate = calc.compute(actor="qwen2.5-7b", gpus=64)
    want = rl_step_workdepth_s(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16,
                               prompt_len=512, response_len=4096, gpus=64, kl_coef=0.001)
    assert list(phases) == list(want.phases) and estimate == want.estimate_s
    assert "8 sequences per GPU" in note
    spec = json.dumps(calc.static().data)
    assert len(spec) < 400_000
    with pytest.raises(ValueError, match="unknown"):
        step_workdepth_calculator(("actors",))
