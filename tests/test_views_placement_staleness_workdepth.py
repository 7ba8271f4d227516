"""The work-depth calculators of Chapters 10 (placement) and 11 (staleness): the library's
numbers, the simulator's step inside the bounds, bad settings as messages, a grid that fits."""
import json

import pytest

from rlmperf_lite.sim import Workload
from rlmperf_lite.sim.workdepth import layout_workdepth
from rlmperf_lite.book.ch10_workdepth import (placement_workdepth_calculator,
                                              placement_workdepth_static,
                                              placement_workdepth_widget)
from rlmperf_lite.book.ch11_workdepth import (staleness_workdepth_calculator,
                                              staleness_workdepth_static,
                                              staleness_workdepth_widget)

WL = Workload(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
              max_response_len=8192, length_sigma=1.0, seed=0)
STEP = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=WL, gpus=32, kl_coef=0.001)


def test_placement_calculator_is_the_library_and_the_simulator():
    calc = placement_workdepth_calculator()
    phases, note, sim_s = calc.compute(placement="disaggregated", rollout_gpus=8,
                                       seqs_per_gpu=16)
    want = layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=8)
    assert list(phases) == list(want.phases)
    assert sim_s == want.simulate().step_time_s and want.brackets(sim_s)
    # section 10.5's 8 + 24 split (81.8 with the bandwidth-bound sync, before issue 16.9;
    # 78.3 before issue 16.6)
    assert round(sim_s, 1) == 82.4
    assert "64 sequences per rollout GPU on 8 of 32" in note
    colo = calc.compute(placement="colocated", rollout_gpus=28, seqs_per_gpu=16)
    assert colo == calc.compute(placement="colocated", rollout_gpus=4, seqs_per_gpu=16)
    # the split is ignored colocated (72.9 before the mechanism sync and switches of 16.9,
    # 71.7 before 16.6)
    assert round(colo[2], 1) == 73.9
    with pytest.raises(ValueError, match="whole number of groups"):
        placement_workdepth_calculator(gpus=3).compute(placement="colocated", rollout_gpus=4,
                                                       seqs_per_gpu=4)


def test_staleness_calculator_is_the_library_and_the_simulator():
    calc = staleness_workdepth_calculator()
    phases, note, sim_s = calc.compute(staleness=8, rollout_gpus=16,
                                       schedule="partial rollout, streaming", minibatches=1)
    want = layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=16, staleness=8,
                            steps=16)
    assert list(phases) == list(want.phases) and want.brackets(sim_s)
    assert round(sim_s, 1) == 15.2          # section 11.3's flat end (14.6 before 16.9)
    assert "trainer W_train/p_train + sync 15.4 s" in note          # 14.8 before 16.9
    with pytest.raises(ValueError, match="schedule must be one of"):
        calc.compute(staleness=1, rollout_gpus=16, schedule="eager", minibatches=1)


def test_widgets_build_and_twins_embed_their_grids():
    for widget in (placement_workdepth_widget, staleness_workdepth_widget):
        box = widget()
        assert "<table>" in box.children[0].children[1].value
    small = {"placement": ("colocated", "disaggregated"), "rollout_gpus": (8, 16),
             "seqs_per_gpu": (16,)}
    out = placement_workdepth_static(static_options=small).data
    assert "rlmperf-vega-" in out
    rows = staleness_workdepth_calculator(static_options={
        "staleness": (0, 8), "rollout_gpus": (16,), "schedule": ("drained, own batch",),
        "minibatches": (1,)}).grid()
    for r in rows:                                       # every setting bracketed
        assert r["lower_s"] <= r["measured_s"] <= r["upper_s"]
    spec = json.dumps(staleness_workdepth_static(static_options={
        "staleness": (0, 2), "rollout_gpus": (16, 24), "schedule": ("drained, own batch",),
        "minibatches": (1,)}).data)
    assert len(spec) < 400_000
