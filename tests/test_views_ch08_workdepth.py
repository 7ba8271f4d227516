"""Chapter 8's work-depth calculator: its phases are the library's, its training time is Lab 8's
tp_plan_results step, bad settings are the library's messages, and the no-kernel grid fits."""
import json

import pytest

from rlmperf_lite.cost import ParallelPlan, TrainWorkload
from rlmperf_lite.cost.tp_workdepth import decode_tp_floor, tp_decode_workdepth, tp_train_workdepth
from rlmperf_lite.book.ch08_workdepth import (TP_WD_OPTIONS, tp_workdepth_calculator,
                                              tp_workdepth_static, tp_workdepth_widget)
from rlmperf_lite.book.tp_views import tp_plan_results

START = {"model": "llama-3.1-70b", "tp": 8, "sp": "on", "cp": 1, "seq_len": 4096,
         "mode": "training"}


def test_training_phases_are_the_library_and_measured_is_lab8s_step():
    calc = tp_workdepth_calculator()
    for kw in (START, {**START, "cp": 4, "seq_len": 32768}, {**START, "tp": 2, "sp": "off"}):
        phases, note, measured = calc.compute(**kw)
        _, step, _ = tp_plan_results(kw["model"], "h100", kw["tp"], kw["sp"] == "on", kw["cp"],
                                     kw["seq_len"])
        assert measured == step.total_s
        dp = 64 // (kw["tp"] * kw["cp"])
        plan = ParallelPlan(dp=dp, tp=kw["tp"], cp=kw["cp"], sp=kw["sp"] == "on", zero_stage=1,
                            recompute="selective", microbatches=512 // dp)
        want = tp_train_workdepth(kw["model"], "h100", plan, TrainWorkload(512, kw["seq_len"]))
        assert list(phases) == list(want.phases)
        assert sum(p.brent_lower_s for p in phases) == pytest.approx(measured, rel=1e-12)
        assert f"ratio {want.comm_compute_ratio:.3f}" in note and "GB per GPU" in note
    _, note, _ = calc.compute(**{**START, "cp": 4, "seq_len": 32768})
    assert "the ring hides behind attention from T/cp = 4,948 tokens (here 8,192)" in note


def test_decode_phases_are_the_library_and_no_step_time_is_claimed():
    calc = tp_workdepth_calculator()
    phases, note, measured = calc.compute(**{**START, "sp": "off", "mode": "decode"})
    want = tp_decode_workdepth("llama-3.1-70b", "h100", 8, response_len=4096)
    assert list(phases) == list(want.phases) and measured is None
    floor = decode_tp_floor("llama-3.1-70b", "h100", response_len=4096)     # NCCL's alpha: 6.2
    assert "64 sequences per replica" in note and f"stops shortening at tp = {floor:.1f}" in note
    assert round(floor, 1) == 6.2
    assert f"(ratio {want.comm_compute_ratio:.3g};" in note
    with pytest.raises(ValueError, match="sp off and cp = 1"):
        calc.compute(**{**START, "mode": "decode"})
    with pytest.raises(ValueError, match="tp=8 does not divide num_key_value_heads=4"):
        calc.compute(**{**START, "model": "qwen2.5-7b"})


def test_widget_shows_the_table_and_the_librarys_message():
    box = tp_workdepth_widget()
    controls, message = box.children[0].children[0].children, box.children[0].children[1]
    assert "tp_collectives" in message.value and "train_step_time" in message.value
    names = [c.description for c in controls]
    controls[names.index("pass")].value = "decode"
    assert "sp off and cp = 1" in message.value
    controls[names.index("sequence parallel")].value = "off"
    assert "decode_all_reduces" in message.value


def test_static_twin_embeds_the_grid_under_the_limit():
    calc = tp_workdepth_calculator()
    n = 1
    for opts in TP_WD_OPTIONS.values():
        n *= len(opts)
    assert n < 2000
    rows = calc.grid()
    settings = {tuple(r[k] for k in TP_WD_OPTIONS) for r in rows}
    assert ("llama-3.1-70b", 8, "on", 1, 4096, "training") in settings
    assert ("llama-3.1-70b", 8, "on", 1, 4096, "decode") not in settings     # refused
    out = tp_workdepth_static(static_options={**TP_WD_OPTIONS, "model": ("llama-3.1-70b",)})
    assert "vegaEmbed" in out.data and len(json.dumps(out.data)) < 400_000
