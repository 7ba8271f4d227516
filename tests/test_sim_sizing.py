"""Sizing an RL system from the simulator (rlmperf_lite.sim.sizing, book Chapter 13): the
candidate splits, Brent's bounds on generation, the searches, verl's balance rule, staleness
and group-size sweeps, the weight-sync comparison; and the chapter's views (guideline_views):
charts carry the library's values, the widget shows a ValueError's message, the no-kernel grid
equals the library at sample points."""
import math

import numpy as np
import pytest

from rlmperf_lite.cost import ParallelPlan, expected_max_length, hardware_preset, model_preset
from rlmperf_lite.cost import reshard_time_s, weight_sync_time_s
from rlmperf_lite.sim import Workload, simulate
from rlmperf_lite.sim.from_cost import system_from_cost
from rlmperf_lite.sim.sizing import (EXAMPLE, VERL_WEIGHT_SYNC, PlacementResult, SplitSearch,
                                     best_split, crossover_value, example_workload,
                                     expected_group_wait, generation_bounds, group_max_mean,
                                     group_size_sweep, min_train_gpus, placement_comparison,
                                     placement_gain_sweep, simulate_placement, split_candidates,
                                     staleness_knee, staleness_sweep, weight_sync_against_verl,
                                     weight_sync_comparison)

EFF = {k: EXAMPLE[k] for k in ("train_efficiency", "decode_efficiency")}
# a small, fast setting: 16 GPUs, 32 prompts x 8, responses up to 4,096 tokens
SMALL = Workload(prompts=32, group_size=8, prompt_len=512, mean_response_len=1000,
                 max_response_len=4096, length_sigma=1.0)
H20 = "h20"
Q7 = "qwen2.5-7b"


def _point(**kw) -> PlacementResult:
    return simulate_placement(Q7, H20, SMALL, 16, steps=6, **EFF, **kw)


# ---- candidates and floors ----------------------------------------------------------------

def test_min_train_gpus_is_the_zero3_floor():
    """16 bytes per parameter (ZeRO paper §5) over HBM: Qwen2.5-7B (7.6e9 parameters, 122 GB
    of states) needs 2 H20s (96 GB) and 2 H100s (80 GB); Qwen2.5-72B needs 13 H20s."""
    for model, hw in ((Q7, H20), (Q7, "h100-sxm"), ("qwen2.5-72b", H20)):
        t = min_train_gpus(model, hw)
        states = 16 * model_preset(model).num_params()
        assert states / t <= hardware_preset(hw).hbm_bytes < states / (t - 1 or 0.5)
    assert min_train_gpus(Q7, H20) == 2 and min_train_gpus("qwen2.5-72b", H20) == 13


def test_min_train_gpus_is_where_the_library_starts_accepting():
    """system_from_cost refuses a GRPO training pool below the floor and accepts it at the
    floor (one trained model)."""
    for model in (Q7, "qwen2.5-72b"):
        t = min_train_gpus(model, H20)
        system_from_cost(model, H20, SMALL, placement="colocated", gpus=t + 3, **EFF)
        with pytest.raises(ValueError, match="give training more GPUs"):
            system_from_cost(model, H20, SMALL, placement="colocated", gpus=t - 1, **EFF)


def test_split_candidates_are_tp_multiples_that_leave_the_trainer_room():
    assert split_candidates(Q7, H20, 8) == tuple(range(1, 7))               # tp 1, 2 to train
    big = split_candidates("qwen2.5-72b", H20, 64)                           # tp 4 (145 GB)
    assert big == tuple(range(4, 64 - 13 + 1, 4))
    assert split_candidates(Q7, H20, 32, count=8) == (1, 5, 9, 13, 18, 22, 26, 30)
    assert split_candidates(Q7, H20, 64, stride=8, max_rollout_share=0.375) == (8, 16, 24)
    assert split_candidates("qwen2.5-72b", H20, 64, stride=6) == (12, 24, 36, 48)   # lcm 12


def test_split_candidates_are_the_splits_the_library_builds():
    """The candidates are the disaggregated systems system_from_cost accepts: with PPO two
    trained models need twice the training states, so the largest rollout pools drop out."""
    assert split_candidates(Q7, H20, 8, algo="ppo") == tuple(range(1, 6))      # 4 to train
    for rg in (6, 7):
        with pytest.raises(ValueError, match="give training more GPUs"):
            system_from_cost(Q7, H20, SMALL, placement="disaggregated", gpus=8,
                             rollout_gpus=rg, algo="ppo", **EFF)
    with pytest.raises(ValueError, match="leaves no split.*give training more GPUs"):
        split_candidates("qwen2.5-72b", H20, 16)
    s = best_split(Q7, H20, SMALL, 8, count=None, steps=4, colocated=False, algo="ppo", **EFF)
    assert [p.rollout_gpus for p in s.points] == list(range(1, 6))


@pytest.mark.parametrize("kwargs, match", [
    (dict(actor="qwen2.5-72b", hardware=H20, gpus=16), "gpus=16 leaves no split"),
    (dict(actor=Q7, hardware=H20, gpus=1), "gpus"),
    (dict(actor=Q7, hardware=H20, gpus=8, count=1), "count"),
    (dict(actor=Q7, hardware=H20, gpus=8, stride=0), "stride"),
    (dict(actor=Q7, hardware=H20, gpus=8, max_rollout_share=0.0), "max_rollout_share"),
    (dict(actor=42, hardware=H20, gpus=8), "actor"),
])
def test_split_candidates_bad_input_names_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        split_candidates(**kwargs)


# ---- one system -----------------------------------------------------------------------------

def test_placement_result_carries_the_simulation():
    """The step time, throughput and idle shares are the SimResult's; the train time is the
    phases' makespan on the training pool; staleness is 0 for a synchronous system."""
    p = _point(rollout_gpus=4)
    system = system_from_cost(Q7, H20, SMALL, placement="disaggregated", gpus=16,
                              rollout_gpus=4, **EFF)
    r = simulate(system, SMALL, 6)
    u = r.utilisation()
    assert p.step_time_s == r.step_time_s
    assert p.throughput_tokens_per_s_per_gpu == r.throughput_tokens_per_s_per_gpu
    assert (p.rollout_idle, p.train_idle) == (u["rollout"]["idle"], u["train"]["idle"])
    assert (p.rollout_gpus, p.train_gpus, p.gpus) == (4, 12, 16)
    assert p.mean_staleness == 0 and p.max_staleness == 0
    assert p.weight_sync_s == system.weight_sync_s
    tokens = r.tokens_per_step
    phases = sum(c.time_s(tokens, 12) for c in system.costs.values())   # serial on one pool
    assert p.train_time_s == pytest.approx(phases, rel=1e-12)
    assert p.balance == p.rollout_time_s / p.train_time_s
    assert set(p.as_dict()) >= {"step_time_s", "rollout_time_s", "balance", "sync_share"}


def test_generation_bounds_hold_and_are_brents():
    """Work bound = tokens / replicas x iteration_s(n) / n, depth bound = R_max x
    iteration_s(1); a synchronous generation lies above both (book Chapter 5)."""
    system = system_from_cost(Q7, H20, SMALL, placement="colocated", gpus=16, **EFF)
    work, depth = generation_bounds(system, SMALL, batches=2)
    lengths = SMALL.response_lengths(64).reshape(2, -1)
    eng = system.engine
    n = min(eng.slots, math.ceil(32 / 16) * 8)
    assert work == pytest.approx(lengths.sum(1).mean() / 16 * eng.iteration_s(n) / n)
    assert depth == pytest.approx(lengths.max(1).mean() * eng.iteration_s(1))
    p = simulate_placement(Q7, H20, SMALL, 16, steps=6, **EFF)
    assert p.generation_work_s <= p.rollout_time_s and p.generation_depth_s <= p.rollout_time_s
    with pytest.raises(ValueError, match="batches"):
        generation_bounds(system, SMALL, batches=0)


def test_colocated_must_be_synchronous():
    with pytest.raises(ValueError, match="mode must be 'sync'"):
        simulate_placement(Q7, H20, SMALL, 16, mode="async")


def test_placement_comparison_order_and_modes():
    rows = placement_comparison(Q7, H20, SMALL, 16, rollout_gpus=(4, 8), steps=6, **EFF)
    assert [(p.placement, p.mode, p.rollout_gpus) for p in rows] == [
        ("colocated", "sync", 16), ("disaggregated", "sync", 4), ("disaggregated", "async", 4),
        ("disaggregated", "sync", 8), ("disaggregated", "async", 8)]
    assert rows[2].staleness == 0.5 and rows[2].mean_staleness > 0


# ---- searches -------------------------------------------------------------------------------

def test_exhaustive_search_finds_the_minimum_and_the_balanced_split():
    s = best_split(Q7, H20, SMALL, 16, count=None, steps=6, **EFF)
    assert [p.rollout_gpus for p in s.points] == list(split_candidates(Q7, H20, 16))
    assert s.best.step_time_s == min(p.step_time_s for p in s.points)
    assert abs(math.log(s.balanced.balance)) == min(abs(math.log(p.balance)) for p in s.points)
    assert s.gain == s.colocated.step_time_s / s.best.step_time_s


def test_coarse_search_refines_around_the_best():
    """The coarse grid plus halving strides reaches the exhaustive optimum here, and evaluates
    fewer splits."""
    full = best_split(Q7, H20, SMALL, 16, count=None, steps=6, colocated=False, **EFF)
    coarse = best_split(Q7, H20, SMALL, 16, count=4, steps=6, colocated=False, **EFF)
    assert len(coarse.points) < len(full.points)
    assert coarse.best.rollout_gpus == full.best.rollout_gpus
    assert set(split_candidates(Q7, H20, 16, count=4)) <= {p.rollout_gpus for p in coarse.points}
    with pytest.raises(ValueError, match="no colocated system"):
        _ = coarse.gain


def test_example_system_guidelines():
    """The chapter's example (Qwen2.5-7B, 32 H20s, sigma 1): the best asynchronous split is 9:23,
    1.46x faster than colocation; verl's balance rule picks its neighbour 10:22, within 2% of
    it. (Before the engine charged the length-biased mean context, issue 16 item 6, the rule
    picked 9:23 itself and the gain was 1.47.)"""
    s = best_split(EXAMPLE["actor"], EXAMPLE["hardware"], example_workload(), EXAMPLE["gpus"],
                   **EFF)
    assert s.best.rollout_gpus == 9 and s.balanced.rollout_gpus == 10
    assert s.balanced.step_time_s < 1.02 * s.best.step_time_s
    assert round(s.gain, 2) == 1.46
    assert round(s.best.rollout_time_s / s.best.train_time_s, 2) == 1.04


def test_gain_sweep_and_crossover():
    """On the example's step on 16 H20s: without a length tail colocation wins; with one the
    best split wins (the crossover)."""
    sigmas = (0.0, 1.0)
    searches = placement_gain_sweep("length_sigma", sigmas, actor=Q7, hardware=H20,
                                    workload=example_workload(), gpus=16, steps=6, count=4,
                                    **EFF)
    assert [s.colocated.workload.length_sigma for s in searches] == list(sigmas)
    assert searches[0].gain < 1 < searches[1].gain
    assert crossover_value(sigmas, searches) == 1.0
    fake = [SplitSearch((_fake(1.0),), _fake(g)) for g in (1.2, 0.9, 1.1, 1.3)]
    assert crossover_value("abcd", fake) == "c"                 # from c on, every gain > 1
    assert crossover_value("ab", fake[:2]) is None
    with pytest.raises(ValueError, match="searches"):
        crossover_value("abc", fake)
    with pytest.raises(ValueError, match="param"):
        placement_gain_sweep("prompts", (1,), actor=Q7, hardware=H20, workload=SMALL, gpus=16)


def _fake(step_time_s: float) -> PlacementResult:
    return PlacementResult("x", "disaggregated", "async", 0.5, 1, 1, 2, step_time_s, 1.0, 0.0,
                           0.0, 0.0, 0, 1.0, 0.0, 0.0, 0.0, system=None, workload=None)


# ---- staleness and group size ---------------------------------------------------------------

def test_staleness_sweep_falls_then_the_trainer_bounds_it():
    pts = staleness_sweep(Q7, H20, SMALL, 16, rollout_gpus=4, stalenesses=(0.0, 0.5, 1.0, 2.0),
                          steps=8, **EFF)
    assert [p.staleness for p in pts] == [0.0, 0.5, 1.0, 2.0]
    assert pts[1].step_time_s < pts[0].step_time_s
    assert all(p.step_time_s >= 0.98 * p.trainer_bound_s for p in pts)   # trainer's floor
    means = [p.mean_staleness for p in pts]
    assert means[0] == 0 and means == sorted(means)
    knee = staleness_knee(pts, tolerance=0.05)
    fastest = min(p.step_time_s for p in pts)
    assert knee.step_time_s <= 1.05 * fastest
    assert all(p.step_time_s > 1.05 * fastest for p in pts if p.staleness < knee.staleness)
    with pytest.raises(ValueError, match="points"):
        staleness_knee([])
    with pytest.raises(ValueError, match="tolerance"):
        staleness_knee(pts, tolerance=-1)


def test_group_wait_is_expected_max_length_of_the_stream():
    wl = example_workload(0.5)
    draws = wl.__class__(**{**wl.__dict__, "group_size": 1}).response_lengths(1 << 16)
    assert expected_group_wait(wl, 16) == expected_max_length(draws.reshape(-1), 16)
    assert expected_group_wait(wl, 1) == pytest.approx(draws.mean())
    waits = [expected_group_wait(wl, g) for g in (1, 2, 4, 8, 16)]
    assert waits == sorted(waits) and waits[-1] <= wl.max_response_len
    with pytest.raises(ValueError, match="group_size"):
        expected_group_wait(wl, 0)


def test_group_max_mean_by_hand():
    assert group_max_mean([1, 3, 2, 2, 5, 0], 2) == (3 + 2 + 5) / 3
    assert group_max_mean(np.arange(6), 3) == (2 + 5) / 2
    for bad in ([1, 2, 3], [[1, 2], [3, 4]], []):
        with pytest.raises(ValueError, match="lengths"):
            group_max_mean(bad, 2)


def test_group_size_sweep_keeps_samples_per_step():
    pts = group_size_sweep(Q7, H20, SMALL, 16, group_sizes=(4, 8), rollout_gpus=4, steps=6,
                           **EFF)
    for p in pts:
        assert p.prompts * p.group_size == SMALL.samples_per_step
        assert set(p.results) == {"colocated sync", "disaggregated sync", "disaggregated async"}
        assert p.results["colocated sync"].workload.group_size == p.group_size
    assert pts[0].expected_wait_tokens < pts[1].expected_wait_tokens
    with pytest.raises(ValueError, match="group_sizes"):
        group_size_sweep(Q7, H20, SMALL, 16, group_sizes=(3,), rollout_gpus=4)
    with pytest.raises(ValueError, match="group_sizes"):
        group_size_sweep(Q7, H20, SMALL, 16, group_sizes=(128,), rollout_gpus=4)  # B=2, mb 4


# ---- weight sync ------------------------------------------------------------------------------

def test_weight_sync_is_the_mechanism_model_or_the_reshard_bound():
    """Disaggregated, weight_sync="bandwidth": the engine's whole shard over the network,
    reshard_time_s from a ZeRO-3 trainer on the training GPUs (Chapter 9); by default the
    mechanism model (tests/test_weight_sync.py) of the same trainer and engine."""
    bound = weight_sync_comparison("qwen2.5-72b", H20, SMALL, 64, rollout_gpus=32,
                                   weight_sync="bandwidth", **EFF)
    m, hw = model_preset("qwen2.5-72b"), hardware_preset(H20)
    expected = reshard_time_s(m, hw, ParallelPlan(dp=32, zero_stage=3), 4, mode="disaggregated")
    assert bound["disaggregated"] == expected and bound["colocated_switch"] == 0.0
    sync = weight_sync_comparison("qwen2.5-72b", H20, SMALL, 64, rollout_gpus=32, **EFF)
    assert sync["disaggregated"] == weight_sync_time_s(
        m, hw, ParallelPlan(dp=32, zero_stage=3), 4, mode="disaggregated", rollout_gpus=32)
    assert sync["disaggregated"] > expected and sync["colocated_switch"] > 0
    assert expected == pytest.approx(2 * m.num_params() / 4 / hw.inter_node_bandwidth_bytes_per_s)
    rows = weight_sync_against_verl(**EFF)
    assert [(r["model"], r["measured_checkpoint_engine_s"]) for r in rows] == [
        (v[0], v[5]) for v in VERL_WEIGHT_SYNC]
    assert rows[-1]["measured_s"] == 58.57           # verl fully_async.md, 235B 64:64 H20


# ---- views ------------------------------------------------------------------------------------

def test_charts_carry_the_library_values():
    from rlmperf_lite.book.guideline_views import (idle_chart, placement_table_html,
                                                   split_search_chart, staleness_chart)
    s = best_split(Q7, H20, SMALL, 16, count=3, steps=6, **EFF)
    spec = split_search_chart(s).to_dict()
    values = [r["seconds"] for r in spec["layer"][0]["data"]["values"]
              if r["series"] == "step time (simulated)"]
    assert values == [p.step_time_s for p in s.points]
    assert spec["layer"][1]["data"]["values"][0]["seconds"] == s.colocated.step_time_s
    idle = idle_chart(s).to_dict()["data"]["values"]
    assert [r["idle"] for r in idle if r["pool"] == "train"] == [p.train_idle for p in s.points]
    html = placement_table_html([s.colocated, s.best])
    assert f"{s.best.step_time_s:,.1f}" in html and "colocated" in html
    pts = staleness_sweep(Q7, H20, SMALL, 16, rollout_gpus=4, stalenesses=(0.0, 1.0), steps=6,
                          **EFF)
    left = staleness_chart(pts).to_dict()["hconcat"][0]["data"]["values"]
    assert [r["seconds"] for r in left if r["series"] == "trainer bound"] == [
        p.trainer_bound_s for p in pts]


def test_widget_shows_the_value_error_message():
    pytest.importorskip("ipywidgets")
    from rlmperf_lite.book.guideline_views import sizing_widget
    box = sizing_widget(actor="qwen2.5-72b", gpus=8)        # 72B: 13 training GPUs needed
    message = box.children[0].children[1]
    assert "leaves no split" in message.value and "firebrick" in message.value


def test_grid_equals_the_library_at_sample_points():
    from rlmperf_lite.book.guideline_views import GRID_STEPS, guideline_grid
    grid = {"actor": (Q7,), "gpus": (16,), "length_sigma": (0.0, 1.0), "staleness": (0.5,)}
    rows = guideline_grid(grid)
    assert {r["placement"] for r in rows} == {"colocated", "2:14", "4:12", "6:10"}
    wl = example_workload(1.0)
    colo = next(r for r in rows if r["length_sigma"] == 1.0 and r["placement"] == "colocated")
    assert colo["step_time_s"] == simulate_placement(Q7, H20, wl, 16, steps=GRID_STEPS,
                                                     **EFF).step_time_s
    split = next(r for r in rows if r["length_sigma"] == 1.0 and r["placement"] == "4:12")
    assert split["step_time_s"] == simulate_placement(
        Q7, H20, wl, 16, rollout_gpus=4, mode="async", staleness=0.5, minibatches=4,
        steps=GRID_STEPS, **EFF).step_time_s
    assert guideline_grid({**grid, "actor": ("qwen2.5-72b",)}) == []   # rejected: no rows
