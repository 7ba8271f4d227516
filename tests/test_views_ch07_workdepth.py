"""Chapter 7's work-depth calculator: its phases, note and time are the library's
(dp_update_workdepth, overlap_threshold_tokens, train_step_time), a bad setting is shown as the
library's message, and the no-kernel grid holds only the settings the library accepts."""
import json

import pytest

from rlmperf_lite.cost.dp_workdepth import dp_update_workdepth, overlap_threshold_tokens
from rlmperf_lite.book.ch07_workdepth import (DP_WD_SEQ_LEN, dp_workdepth_calculator,
                                              dp_workdepth_static, dp_workdepth_widget)


def test_calculator_is_the_library():
    calc = dp_workdepth_calculator()
    phases, note, measured = calc.compute(model="qwen2.5-7b", dp=64, zero_stage=3,
                                          tokens_per_gpu=8192, link="network")
    wd = dp_update_workdepth("qwen2.5-7b", dp=64, zero_stage=3, seq_len=DP_WD_SEQ_LEN,
                             micro_batch_size=8192 // DP_WD_SEQ_LEN, link="network")
    th = overlap_threshold_tokens("qwen2.5-7b", dp=64, zero_stage=3, seq_len=DP_WD_SEQ_LEN,
                                  link="network")
    assert list(phases) == list(wd.phases)
    assert measured == pytest.approx(wd.train_step.total_s + wd.optimizer_s, rel=1e-12)
    assert sum(p.brent_lower_s for p in phases) == pytest.approx(measured, rel=1e-12)
    assert f"hidden from {th.tokens:,.0f} tokens per GPU" in note
    assert f"below it: {wd.exposed_s:.3g} s exposed" in note and "fits in 80 GB" in note
    _, above, _ = calc.compute(model="qwen2.5-7b", dp=8, zero_stage=0, tokens_per_gpu=4096,
                               link="nvlink")
    assert "above it: hidden" in above and "does not fit" in above      # 122 GB of states


def test_widget_shows_a_bad_setting_as_the_librarys_message():
    box = dp_workdepth_widget()
    controls = box.children[0].children[0].children
    message = box.children[0].children[1]
    assert "<table>" in message.value and "per-layer gathers" in message.value
    dp = next(c for c in controls if c.description == "dp (GPUs)")
    dp.value = 16                                   # NVLink links: one node of 8 GPUs
    assert "link=&#x27;nvlink&#x27; needs dp" in message.value    # html-escaped quotes
    assert "<table>" not in message.value


def test_static_twin_embeds_only_accepted_settings_and_fits():
    calc = dp_workdepth_calculator()
    rows = calc.grid()
    assert {(r["dp"], r["link"]) for r in rows} == {(8, "nvlink"), (8, "network"),
                                                    (64, "network"), (512, "network")}
    spec = json.dumps(dp_workdepth_static().data)
    assert "rlmperf-vega-" in spec and len(spec) < 400_000


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="unknown"):
        dp_workdepth_calculator(("gpus",))
    with pytest.raises(ValueError, match="multiple of the sequence length"):
        dp_workdepth_calculator().compute(tokens_per_gpu=1500)
