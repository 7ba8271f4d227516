"""The work-depth calculators of Chapters 12, 13 and 14: their numbers are the library's
(system_workdepth, controller_workdepth) and the simulator's, Chapter 13's work bound and
Chapter 12's W come from one function, the bounds hold the chapters' headline systems, a bad
setting is a message, and the no-kernel grids hold what the chapters quote."""
import math

import pytest

from rlmperf_lite.distributed import REFERENCE_COSTS, controller_workdepth, predict_run
from rlmperf_lite.sim import simulate
from rlmperf_lite.sim.frameworks import DEFAULT_WORKLOAD, framework_names, framework_system
from rlmperf_lite.sim.sizing import (EXAMPLE, example_workload, generation_bounds,
                                     simulate_placement)
from rlmperf_lite.sim.workdepth import chain_window, generation_workdepth, system_workdepth
from rlmperf_lite.book.ch12_workdepth import framework_workdepth_calculator
from rlmperf_lite.book.ch13_workdepth import guideline_workdepth_calculator
from rlmperf_lite.book.ch14_workdepth import controller_workdepth_calculator
from rlmperf_lite.cost import per_version_depth

EFF = {k: EXAMPLE[k] for k in ("train_efficiency", "decode_efficiency")}
SLACK = 1e-9


def _inside(lower, upper, t):
    return lower * (1 - SLACK) <= t <= upper * (1 + SLACK)


@pytest.fixture(scope="module")
def presets():
    """Every preset on the chapter's workload (Qwen2.5-7B, 64 H100), 12 steps, as Lab 12."""
    return {n: simulate(framework_system(n), DEFAULT_WORKLOAD, 12) for n in framework_names()}


@pytest.fixture(scope="module")
def ch12_grid(presets):
    return framework_workdepth_calculator(results=presets).grid()


# ---- the definition -------------------------------------------------------------------------

def test_decode_work_and_depth_are_the_engines_roofline_at_the_layouts_batch():
    """verl on 64 H100s: 64 one-GPU replicas, 128 x 16 sequences -> 32 per replica; W_gen =
    sum_i R_i iteration_s(32) / 32 GPU-s, D_gen = 8,192 x iteration_s(1) = 62.6 s, the figure
    of book Chapter 10 (one sequence decoding 8,192 tokens alone; 62.4 s before the engine
    charged the length-biased mean context, issue 16 item 6)."""
    system = framework_system("verl")
    gen = generation_workdepth(system, DEFAULT_WORKLOAD, range(6, 12))
    lengths = DEFAULT_WORKLOAD.response_lengths(12 * 128).reshape(12, -1)[6:]
    it = system.engine.iteration_s
    assert gen["batch_per_replica"] == 32
    assert gen["work_gpu_s"] == pytest.approx(lengths.sum(1).mean() * it(32) / 32, rel=1e-12)
    assert gen["depth_s"] == pytest.approx(8192 * it(1), rel=1e-12)
    assert round(gen["depth_s"], 1) == 62.6


def test_chapter_13s_work_bound_is_the_same_function():
    """generation_bounds (Chapter 13's 19.2 s and 104.9 s; 18.6 and 104.5 before issue 16
    item 6) = W_gen / p_gen and D_gen of
    generation_workdepth over the first two batches."""
    c = simulate_placement("qwen2.5-7b", "h20", example_workload(), 32, **EFF)
    work, depth = generation_bounds(c.system, example_workload())
    gen = generation_workdepth(c.system, example_workload(), range(2))
    assert (work, depth) == (gen["work_gpu_s"] / 32, gen["depth_s"])
    assert (round(work, 1), round(depth, 1)) == (19.2, 104.9)


def test_streaming_takes_the_straggler_off_the_chain():
    """128 H20s, 35:93, staleness 1, streaming: the simulated step (38.1 s) is below the
    straggler's D_k = per_version_depth(D_straggler, tail, 1); the chain a version must wait
    for is the B-th quickest of the 2 B groups it may take (chain_window), and the bound
    with it holds."""
    p = simulate_placement("qwen2.5-7b", "h20", example_workload(), 128, rollout_gpus=35,
                           mode="async", staleness=1.0, minibatches=4, **EFF)
    wd = system_workdepth(p.system, example_workload())
    naive = per_version_depth(wd.generation["straggler_s"], wd.train["tail_s"], 1)
    assert round(p.step_time_s, 1) == 38.8 and p.step_time_s < naive    # 38.1 before 16.9
    assert wd.brackets(p.step_time_s)
    assert chain_window(p.system, 128, 5) == (5 * 128, 7 * 128, 128, 1)      # c = B of 2 B
    sync = framework_system("verl")
    assert chain_window(sync, 128, 5) == (5 * 128, 6 * 128, 128, 0)         # its own batch


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="system must be an RLSystem"):
        system_workdepth("verl", DEFAULT_WORKLOAD)
    with pytest.raises(ValueError, match="steps"):
        system_workdepth(framework_system("verl"), DEFAULT_WORKLOAD, steps=1)
    with pytest.raises(ValueError, match="minibatches = 4 must divide"):
        system_workdepth(framework_system("verl-fully-async"),
                         DEFAULT_WORKLOAD.__class__(prompts=6), steps=8)


# ---- Chapter 12 -----------------------------------------------------------------------------

def test_ch12_calculator_is_the_library_and_the_simulator(presets):
    calc = framework_workdepth_calculator(results=presets)
    phases, note, measured = calc.compute(preset="verl", actor="qwen2.5-7b", gpus=64)
    want = system_workdepth(framework_system("verl"), DEFAULT_WORKLOAD, steps=12)
    assert list(phases) == list(want.phases) and measured == presets["verl"].step_time_s
    assert "pools {'all': 64}" in note and "straggler 62.6 s" in note
    # verl: W/p 30.6 s, D 64.6 s; 74.8 <= 79.8 <= 94.6 (book section 12.5; with the
    # bandwidth-bound sync and no switches, before issue 16 item 9: 30.0, 64.2; 74.4 <= 79.4
    # <= 94.2; before issue 16 item 6: 28.5, 64.0; 74.2 <= 77.4 <= 92.5)
    assert [round(x, 1) for x in (want.work_per_processor_s, want.depth_s, want.lower_s,
                                  measured, want.upper_s)] == [30.6, 64.6, 74.8, 79.8, 94.6]
    fresh = framework_workdepth_calculator().compute(preset="areal", actor="qwen2.5-7b",
                                                     gpus=64)[2]
    assert fresh == presets["areal"].step_time_s                     # cache = a new run


def test_ch12_every_preset_lies_in_its_bounds(presets, ch12_grid):
    """The 25 presets on the chapter's workload: max(W/p, D) <= simulated step <= the pools'
    Brent bound; the pools' own lower bound too, and W/p below every step."""
    rows = {r["preset"]: r for r in ch12_grid}
    assert set(rows) == set(framework_names())
    for name, r in presets.items():
        wd = system_workdepth(r.system, DEFAULT_WORKLOAD, steps=12)
        assert rows[name]["measured_s"] == pytest.approx(r.step_time_s, rel=1e-12)
        assert (rows[name]["lower_s"], rows[name]["upper_s"]) == (wd.lower_s, wd.upper_s)
        assert _inside(wd.lower_s, wd.upper_s, r.step_time_s), name
        assert wd.pool_lower_s <= r.step_time_s * (1 + SLACK), name
    pool = {n: system_workdepth(presets[n].system, DEFAULT_WORKLOAD, steps=12).pool_lower_s
            for n in ("areal", "slime")}
    assert round(pool["areal"], 1) == 67.6    # the 11-GPU trainer is the step (66.9 before 16.9)


def test_ch12_bad_setting_is_a_message():
    box = framework_workdepth_calculator().widget()
    controls = box.children[0].children[0].children
    message = box.children[0].children[1]
    assert "version" not in message.value and "generation" in message.value
    controls[0].value, controls[1].value, controls[2].value = "areal", "qwen2.5-32b", 16
    assert "GB of states per GPU" in message.value and "<table>" not in message.value


# ---- Chapter 13 -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ch13_grid():
    return guideline_workdepth_calculator().grid()


def test_ch13_calculator_is_the_library_and_the_simulator():
    calc = guideline_workdepth_calculator()
    phases, note, measured = calc.compute(split="9:23", mode="async", staleness=1.0,
                                          group_size=16)
    p = simulate_placement("qwen2.5-7b", "h20", example_workload(), 32, rollout_gpus=9,
                           mode="async", staleness=1.0, minibatches=4, **EFF)
    wd = system_workdepth(p.system, example_workload())
    assert list(phases) == list(wd.phases) and measured == p.step_time_s
    # at staleness 1 the step is the trainer's pool: 139.8 s, the pools' bound exactly
    assert abs(wd.pool_lower_s / measured - 1) < 1e-9 and "k = 1" in note


def test_ch13_grid_holds_the_guidelines_numbers_in_their_bounds(ch13_grid):
    points = {}
    for r in ch13_grid:
        points[(r["split"], r["mode"], r["staleness"], r["group_size"])] = r
    assert len(points) == 26                          # the settings the library accepts
    for key, r in points.items():
        assert _inside(r["lower_s"], r["upper_s"], r["measured_s"]), key
    colo = points[("colocated", "sync", 0.0, 16)]
    assert [round(colo[k], 1) for k in ("lower_s", "measured_s", "upper_s")] == \
        [205.9, 212.4, 238.5]         # sec-guidelines-workdepth (205.5, 212.0, 238.1 before 16.9;
    #                                   205.0, 209.8, 237.1 before 16.6)
    assert round(points[("9:23", "async", 0.5, 16)]["measured_s"], 1) == 145.3  # 144.7, 142.5
    assert ("colocated", "async", 0.0, 16) not in points       # refused: runs synchronously
    assert {r["engine_tp"] for r in ch13_grid} == {1}          # the no-kernel grid keeps tp 1


def test_ch13_calculator_engine_tp_is_system_from_cost():
    """Book section sec-guideline-depth: the live panel's engine tp is system_from_cost's;
    at tp 4 the colocated generation chain is shorter than at tp 1, and "best" picks tp 4."""
    calc = guideline_workdepth_calculator()
    one = calc.compute(split="colocated", mode="sync", staleness=0.0, group_size=16,
                       engine_tp=1)
    four = calc.compute(split="colocated", mode="sync", staleness=0.0, group_size=16,
                        engine_tp=4)
    best = calc.compute(split="colocated", mode="sync", staleness=0.0, group_size=16,
                        engine_tp="best")
    p = simulate_placement("qwen2.5-7b", "h20", example_workload(), 32, engine_tp=4, **EFF)
    assert four[2] == p.step_time_s == best[2] and "engine tp 4 x 8" in four[1]
    gen = {t: next(x for x in r[0] if x.name == "generation") for t, r in ((1, one), (4, four))}
    assert gen[4].depth_s < gen[1].depth_s and gen[4].work_per_processor_s > \
        gen[1].work_per_processor_s                                   # D falls, W/p rises
    with pytest.raises(ValueError, match="engine_tp=4 must be a divisor of the pool's 9"):
        calc.compute(split="9:23", mode="async", staleness=0.5, group_size=16, engine_tp=4)


def test_ch13_views_show_the_library_values():
    from rlmperf_lite.book.guideline_views import engine_tp_table_html, sync_table_html
    from rlmperf_lite.cost import calibrate_weight_sync
    from rlmperf_lite.sim.sizing import engine_tp_sweep, weight_sync_against_verl
    rows = engine_tp_sweep("qwen2.5-7b", "h20", example_workload(), 32, tps=(1, 2), steps=4,
                           **EFF)
    html = engine_tp_table_html(rows)
    for r in rows:
        assert f"<td>{r.generation_depth_s:.1f}</td>" in html
        assert f"<td>{r.step_time_s:.1f}</td>" in html
    sync = weight_sync_against_verl()
    table = sync_table_html(sync, fit=calibrate_weight_sync()["rows"])
    # verl docs/advance/fully_async.md checkpoint-engine ablation: 58.57 s for 235B, fitted;
    # Qwen3-30B-A3B held out on both columns
    assert "<td>58.57 (fitted)</td>" in table and table.count("(held out)") == 3
    assert f"<td>{sync[-1]['bandwidth_s']:.2f}</td>" in table
    assert "(fitted)" not in sync_table_html(sync)          # without fit: no marks


def test_ch13_bad_settings_are_messages():
    calc = guideline_workdepth_calculator()
    with pytest.raises(ValueError, match="mode must be 'sync' for a colocated system"):
        calc.compute(split="colocated", mode="async", staleness=0.0, group_size=16)
    with pytest.raises(ValueError, match="staleness=0.5: a synchronous system"):
        calc.compute(split="9:23", mode="sync", staleness=0.5, group_size=16)


# ---- Chapter 14 -----------------------------------------------------------------------------

def test_ch14_calculator_is_controller_workdepth_and_the_prediction():
    """Reference costs, one-step-off on 3 actors: W 16.7 ms, D_1 11.7 ms = the simulator's
    step (book section 14.7); the toy's pull gives 9.7 ms and no prediction."""
    calc = controller_workdepth_calculator()
    (phase,), note, predicted = calc.compute(mode="one_step_off", rollout_workers=1,
                                             learners=1, sync="broadcast")
    wd = controller_workdepth(REFERENCE_COSTS, staleness=1)
    assert (phase.work_gpu_s, phase.depth_s, phase.processors) == (wd.work_s,
                                                                   wd.per_version_s, 3)
    assert predicted == predict_run(REFERENCE_COSTS, "one_step_off", 12).step_time_s
    assert [round(x * 1e3, 1) for x in (wd.work_s, wd.per_version_s, predicted)] == \
        [16.7, 11.7, 11.7]
    (pull,), note, none = calc.compute(mode="one_step_off", rollout_workers=1, learners=1,
                                       sync="pull")
    assert none is None and round(pull.depth_s * 1e3, 1) == 9.7 and "broadcast" in note


def test_ch14_grid_every_prediction_is_the_depth_per_version():
    rows = controller_workdepth_calculator().grid()
    points = {(r["mode"], r["rollout_workers"], r["learners"], r["sync"]): r for r in rows}
    assert len(points) == 52                         # colocated only where W = L
    assert ("colocated", 2, 1, "broadcast") not in points
    for key, r in points.items():
        if key[3] == "broadcast":                    # the simulator = the depth per version
            assert r["measured_s"] == pytest.approx(r["lower_s"], rel=1e-9), key
        else:
            assert r["measured_s"] == -1.0
    assert math.isclose(points[("sync", 2, 1, "broadcast")]["measured_s"], 12.7e-3,
                        rel_tol=1e-9)                 # exercise 14.1's 12.7 ms


def test_ch14_bad_setting_is_a_message():
    box = controller_workdepth_calculator().widget()
    controls = box.children[0].children[0].children
    message = box.children[0].children[1]
    controls[0].value = "colocated"
    controls[1].value = 2
    assert "must equal num_learners" in message.value and "<table>" not in message.value
    with pytest.raises(ValueError, match="costs must be a ToyCosts"):
        controller_workdepth_calculator(costs={"generate": 1.0})
    with pytest.raises(ValueError, match="num_scorers"):
        controller_workdepth(REFERENCE_COSTS, num_scorers=0)


def test_colocated_actors_split_the_scoring():
    """Two colocated actors each score half the batch: D = sync 2 + generation 2 / 2 +
    scoring 3.3 / 2 + update 6.4 / 2 = 7.85 ms, the simulator's step (reference costs)."""
    wd = controller_workdepth(REFERENCE_COSTS, num_rollout_workers=2, num_learners=2,
                              num_scorers=2)
    sim = predict_run(REFERENCE_COSTS, "colocated", 12, num_rollout_workers=2, num_learners=2)
    assert wd.per_version_s == pytest.approx(7.85e-3, rel=1e-12)
    assert sim.step_time_s == pytest.approx(wd.per_version_s, rel=1e-9)
