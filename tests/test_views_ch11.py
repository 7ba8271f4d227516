"""Chapter 11 views: the learning-curve, final-accuracy, staleness, sweep, ablation and trade
charts carry the values of train_async_grpo's histories and of the simulator's results,
async_system assembles the library's systems, the widget shows the library's ValueError
messages, and the no-kernel grid equals the simulator at sample points."""
import numpy as np
import pytest

from rlmperf_lite.rl import AsyncGRPOConfig, train_async_grpo
from rlmperf_lite.sim import Workload, simulate
from rlmperf_lite.sim.from_cost import system_from_cost
from rlmperf_lite.sim.reproduce import VERL_STALENESS_ABLATION
from rlmperf_lite.book.async_views import (MEAN_STALENESS, STEP_TIME, THROUGHPUT,
                                           ablation_chart, ablation_rows, async_grid,
                                           async_grid_chart, async_system, async_widget,
                                           final_accuracy_chart, final_rows,
                                           learning_curve_chart, learning_rows,
                                           staleness_chart, staleness_rows,
                                           staleness_sweep_chart, sweep_rows, trade_chart,
                                           trade_rows)

WL = Workload(prompts=8, group_size=4, prompt_len=256, mean_response_len=512.0,
              max_response_len=2048)
KW = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=WL, gpus=8)


@pytest.fixture(scope="module")
def toy_runs():
    """Tiny asynchronous GRPO runs (k = 0 and 1, two objectives), evaluated at the end."""
    small = dict(steps=3, warmstart_max_steps=20, num_prompts=4)
    base = train_async_grpo(AsyncGRPOConfig(**small)).base_params
    runs = {}
    for k, objective in ((0, "naive"), (1, "naive"), (1, "behaviour")):
        runs[(k, objective, 0)] = train_async_grpo(
            AsyncGRPOConfig(staleness=k, objective=objective, **small), base_params=base,
            eval_every=small["steps"])
    return runs


@pytest.fixture(scope="module")
def sims():
    one_off = async_system(rollout_gpus=4, staleness=1, consume="batch", partial_rollout=False,
                           **KW)
    eta = async_system(rollout_gpus=4, staleness=2, **KW)
    return {"one-step-off": simulate(one_off, WL, 6), "eta=2": simulate(eta, WL, 6)}


def test_learning_rows_and_chart_carry_the_histories(toy_runs):
    rows = learning_rows(toy_runs)
    for (k, objective, seed), run in toy_runs.items():
        mine = [r["value"] for r in rows if (r["k"], r["objective"], r["seed"]) ==
                (k, objective, seed)]
        assert mine == [h["reward_mean"] for h in run.history]
    spec = learning_curve_chart(toy_runs, window=2).to_dict()
    assert spec["data"]["values"] == rows
    assert spec["spec"]["transform"][0]["window"][0]["op"] == "mean"
    with pytest.raises(ValueError, match="metric 'mfu' is not in the history"):
        learning_rows(toy_runs, "mfu")
    with pytest.raises(ValueError, match="seed must be one of"):
        learning_curve_chart(toy_runs, seed=7)
    with pytest.raises(ValueError, match="objective must be one of"):
        learning_rows({(0, "greedy", 0): next(iter(toy_runs.values()))})
    with pytest.raises(ValueError, match="non-empty dict"):
        learning_rows({})


def test_final_rows_read_the_last_evaluation(toy_runs):
    rows = final_rows(toy_runs)
    assert [r["value"] for r in rows] == [run.history[-1]["eval_accuracy"]
                                          for run in toy_runs.values()]
    spec = final_accuracy_chart(toy_runs, base_accuracy=0.4).to_dict()
    assert spec["layer"][0]["data"]["values"] == rows
    assert spec["layer"][2]["data"]["values"][0]["value"] == 0.4
    with pytest.raises(ValueError, match="train with eval_every"):
        final_rows(toy_runs, "eval_reward")


def test_trade_rows_pair_accuracy_with_the_predicted_time(toy_runs):
    wall = {(0, "naive"): 3.0, (1, "naive"): 2.5, (1, "behaviour"): 2.0}
    rows = trade_rows(toy_runs, wall)
    assert [(r["k"], r["objective"], r["wall_s"]) for r in rows] == \
        [(k, o, wall[(k, o)]) for (k, o, _) in toy_runs]
    assert trade_chart(toy_runs, wall).to_dict()["data"]["values"] == rows
    with pytest.raises(ValueError, match=r"wall_s has no time for \(k, objective\)"):
        trade_rows(toy_runs, {(0, "naive"): 1.0})


def test_staleness_rows_are_the_results_counts(sims):
    rows = staleness_rows(sims)
    for name, r in sims.items():
        mine = {row["staleness"]: row["samples"] for row in rows if row["system"] == name}
        assert mine == r.staleness_counts()
        assert sum(row["share"] for row in rows if row["system"] == name) == pytest.approx(1)
    assert staleness_chart(sims).to_dict()["data"]["values"] == rows
    assert max(r["staleness"] for r in rows if r["system"] == "one-step-off") == 1
    with pytest.raises(ValueError, match="SimResults"):
        staleness_rows({"x": 1.0})


def test_sweep_chart_carries_step_times_and_bounds(sims):
    sweeps = {"4+4": {1: sims["one-step-off"], 2: sims["eta=2"]}}
    rows = sweep_rows(sweeps)
    assert [r["value"] for r in rows] == [sims["one-step-off"].step_time_s,
                                          sims["eta=2"].step_time_s]
    assert rows[1]["mean_staleness"] == float(sims["eta=2"].staleness.mean())
    tput = sweep_rows(sweeps, "throughput_tokens_per_s_per_gpu")
    assert tput[0]["value"] == sims["one-step-off"].throughput_tokens_per_s_per_gpu
    spec = staleness_sweep_chart(sweeps, bounds={"4+4": 1.5},
                                 reference=sims["one-step-off"]).to_dict()
    line, rule, ref = spec["layer"]
    assert line["data"]["values"] == rows
    assert rule["data"]["values"] == [{"label": "4+4", "value": 1.5}]
    assert ref["data"]["values"][0]["value"] == sims["one-step-off"].step_time_s
    with pytest.raises(ValueError, match="bounds keys must be labels"):
        staleness_sweep_chart(sweeps, bounds={"8+8": 1.0})
    with pytest.raises(ValueError, match="measure must be one of"):
        sweep_rows(sweeps, "mfu")


def test_ablation_rows_keep_the_published_and_simulated_seconds():
    published = VERL_STALENESS_ABLATION["step_s"]
    rows = [{"staleness": None, "simulated_step_s": 289.0, "published_step_s": 356.3}] + \
        [{"staleness": s, "simulated_step_s": 200.0 + 10 * s, "published_step_s": v}
         for s, v in published.items()]
    long = ablation_rows(rows)
    assert [r["step_s"] for r in long if r["source"] == "published"] == list(published.values())
    assert all(r["staleness"] is not None for r in long)          # the baseline is left out
    spec = ablation_chart(rows).to_dict()
    assert spec["data"]["values"] == long
    assert [t.get("joinaggregate", [{}])[0].get("as") for t in spec["transform"]
            if "joinaggregate" in t] == ["base"]
    with pytest.raises(ValueError, match="staleness 0 row"):
        ablation_rows(rows[2:])


def test_async_system_is_the_library_system():
    s = async_system(rollout_gpus=2, staleness=2, minibatches=4, **KW)
    ref = system_from_cost("qwen2.5-7b", "h100-sxm", WL, placement="disaggregated", gpus=8,
                           rollout_gpus=2, kl_coef=0.001, mode="async", staleness=2,
                           minibatches=4, partial_rollout=True, consume="ready")
    assert s == ref and s.name == "async 2+6, k=2, partial, ready, 4 updates/version"
    sync = async_system(rollout_gpus=2, mode="sync", **KW)
    assert sync.mode == "sync" and sync.name == "sync 2+6"
    with pytest.raises(ValueError, match="mode must be one of"):
        async_system(rollout_gpus=2, mode="overlapped", **KW)


def test_async_widget_shows_the_table_and_the_library_errors():
    box = async_widget(gpus=8, rollout_gpus=2, prompts=8, group_size=4, mean_response_len=512,
                       max_response_len=2048)
    columns, message = box.children[0].children, box.children[1]
    controls = {c.description: c for col in columns for c in col.children}
    assert "async 2+6, k=2" in message.value and "colocated 8 (sync)" in message.value
    controls["staleness"].value = -1.0
    assert "RLSystem.staleness" in message.value and "firebrick" in message.value
    controls["staleness"].value = 1.0
    controls["updates/ver."].value = 3                            # does not divide 8 prompts
    assert "must divide" in message.value
    controls["updates/ver."].value = 1
    controls["mean R"].value = 4096                               # above max R = 2048
    assert "Workload.mean_response_len" in message.value
    controls["mean R"].value = 512
    assert "tokens/s/GPU" in message.value


def test_async_grid_equals_the_simulator_and_lands_on_the_controls():
    grid = {"rollout_gpus": (2, 4), "staleness": (0.0, 2.0), "partial": ("on", "off"),
            "minibatches": (1,)}
    rows = async_grid(grid, workload=WL, gpus=8, steps=4)
    got = {(r["rollout_gpus"], r["staleness"], r["partial"], r["placement"], r["measure"]):
           r["value"] for r in rows}
    for rollout, s, partial in ((2, 2.0, "off"), (4, 0.0, "on")):
        r = simulate(async_system(rollout_gpus=rollout, staleness=s,
                                  partial_rollout=partial == "on", **KW), WL, 4)
        key = (rollout, s, partial, "disaggregated")
        assert got[key + (STEP_TIME,)] == r.step_time_s
        assert got[key + (THROUGHPUT,)] == r.throughput_tokens_per_s_per_gpu
        assert got[key + (MEAN_STALENESS,)] == float(r.staleness.mean())
    col = simulate(system_from_cost("qwen2.5-7b", "h100-sxm", WL, gpus=8, kl_coef=0.001), WL, 4)
    assert got[(2, 2.0, "off", "colocated", STEP_TIME)] == col.step_time_s
    assert sorted({r["staleness"] for r in rows}) == [0.0, 2.0]
    spec = async_grid_chart(rows, start={"rollout_gpus": 4}).to_dict()
    assert [p["name"] for p in spec["params"]] == ["rollout_gpus", "partial", "minibatches",
                                                   "measure"]
    assert spec["params"][0]["value"] == 4
    csv = spec["datasets"][spec["data"]["name"]]
    assert csv.count("\n") == len(rows)
    assert np.isclose(float(csv.splitlines()[1].split(",")[-1]), rows[0]["value"], rtol=1e-3)
    with pytest.raises(ValueError, match="rows is empty"):
        async_grid_chart([])


def test_exercise_5_answers_are_the_best_engine_tp_systems():
    """Lab 11 exercise 5 (book section sec-async-engine-tp): engine_tp='best' is the fastest
    of the engine's tp choices for one-step-off, and 5b is the colocated step over it, both at
    their best tp."""
    from rlmperf_lite.book.exercises import expected_answer
    from rlmperf_lite.book.exercises.labs11 import SIM_STEP, SIM_WORKLOAD
    from rlmperf_lite.sim import steady_step_time_s, steady_steps
    from rlmperf_lite.sim.from_cost import engine_tp_choices
    wl = Workload(**SIM_WORKLOAD)
    kw = dict(SIM_STEP, workload=wl)

    def steady(system):                      # the steady window of every quoted step time
        return steady_step_time_s(simulate(system, wl, steady_steps(system)))

    off = {tp: steady(async_system(rollout_gpus=16, staleness=1, consume="batch",
                                   partial_rollout=False, engine_tp=tp, **kw))
           for tp in engine_tp_choices("qwen2.5-7b", "h100-sxm", 16)}
    assert expected_answer("ch11.5a") == min(off.values())
    col = steady(system_from_cost("qwen2.5-7b", "h100-sxm", wl, gpus=32, kl_coef=0.001,
                                  engine_tp="best"))
    assert expected_answer("ch11.5b") == pytest.approx(col / min(off.values()), rel=1e-12)
    assert expected_answer("ch11.5b") > 1                 # one-step-off still beats colocation
