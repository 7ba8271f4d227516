"""Chapter 10 views: the timeline, utilisation, comparison and split charts carry the
simulator's values (intervals, weight syncs, the samples' slot intervals, utilisation shares,
step times), placement_system assembles the library's systems, the widget shows the library's
ValueError messages, and the no-kernel grid equals the simulator at sample points."""
import numpy as np
import pytest

from rlmperf_lite.sim import Workload, simulate
from rlmperf_lite.sim.from_cost import system_from_cost
from rlmperf_lite.book.sim_views import (PHASES, STEP_TIME, THROUGHPUT, compare_rows,
                                         compare_table_html, placement_grid,
                                         placement_grid_chart, placement_system,
                                         placement_widget, running_rows, split_chart,
                                         timeline_chart, timeline_rows, utilisation_chart,
                                         utilisation_rows)

WL = Workload(prompts=8, group_size=4, prompt_len=256, mean_response_len=512.0,
              max_response_len=2048)
KW = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=WL, gpus=8, kl_coef=0.001)


@pytest.fixture(scope="module")
def runs():
    col = simulate(placement_system("colocated", **KW, switch_s=0.5), WL, 4)
    dis = simulate(placement_system("disaggregated", rollout_gpus=2, **KW), WL, 4)
    return {"colocated": col, "disaggregated": dis}


def _union(spans):
    total, reach = 0.0, -np.inf
    for a, b in sorted(spans):
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def test_timeline_rows_carry_intervals_syncs_and_sample_spans(runs):
    r = runs["colocated"]
    rows = timeline_rows(r, max_replicas=3)
    assert {row["phase"] for row in rows} <= set(PHASES)
    phases = [(row["phase"], row["start_s"], row["end_s"]) for row in rows
              if row["lane"] == "all" and row["phase"] != "weight_sync"]
    assert phases == [(iv.phase, iv.start_s, iv.end_s) for iv in r.intervals]
    assert "switch" in {p for p, _, _ in phases}                 # switch_s = 0.5 is charged
    syncs = [(row["start_s"], row["end_s"]) for row in rows if row["phase"] == "weight_sync"]
    assert syncs == [tuple(w) for w in r.sync_windows]
    lanes = {row["lane"] for row in rows if row["phase"] == "generate"}
    assert lanes == {"all/r0", "all/r1", "all/r2"}              # max_replicas = 3 of 8
    s = r.samples
    for k in range(3):                                           # spans = union of samples
        spans = [(row["start_s"], row["end_s"]) for row in rows if row["lane"] == f"all/r{k}"]
        mine = s["replica"] == k
        assert sum(b - a for a, b in spans) == pytest.approx(
            _union(zip(s["start_s"][mine], s["end_s"][mine])), rel=1e-12)
    one = timeline_rows(r, steps=2)
    assert {row["step"] for row in one} == {2}
    assert [row for row in one if row["phase"] == "weight_sync"][0]["start_s"] == \
        r.sync_windows[2][0]
    with pytest.raises(ValueError, match="steps must be"):
        timeline_rows(r, steps="two")
    with pytest.raises(ValueError, match="steps must be"):     # not silently step 1
        timeline_rows(r, steps=[1.5])
    with pytest.raises(ValueError, match="result must be a SimResult"):
        timeline_rows({"not": "a result"})


def test_running_rows_count_the_samples_slot_seconds(runs):
    r = runs["disaggregated"]
    rows = running_rows(r)
    t = np.array([row["t_s"] for row in rows] + [rows[-1]["t_s"]])
    n = np.array([row["running"] for row in rows])
    s = r.samples
    assert np.sum(n * np.diff(t)) == pytest.approx(np.sum(s["end_s"] - s["start_s"]), rel=1e-9)
    assert rows[-1]["running"] == 0 and min(n) >= 0
    assert max(n) <= r.system.replicas * r.system.engine.slots
    first = [row for row in running_rows(r, steps=0)][0]
    assert first["running"] == np.sum(s["start_s"][s["consumed_step"] == 0] == first["t_s"])


def test_timeline_chart_layers_the_rows_and_the_running_count(runs):
    r = runs["disaggregated"]
    spec = timeline_chart(r, steps=(1, 2)).to_dict()
    gantt, area = spec["vconcat"]
    assert gantt["data"]["values"] == timeline_rows(r, steps=(1, 2))
    assert area["data"]["values"] == running_rows(r, steps=(1, 2))
    assert f"step {r.step_time_s:.2f} s" in gantt["title"]
    assert gantt["encoding"]["y"]["sort"][:2] == ["rollout", "rollout/r0"]
    assert "vconcat" not in timeline_chart(r, running=False).to_dict()
    with pytest.raises(ValueError, match="no bars for steps"):
        timeline_chart(r, steps=99)


def test_utilisation_and_comparison_carry_the_results(runs):
    rows = utilisation_rows(runs)
    for name, r in runs.items():
        for pool, shares in r.utilisation().items():
            mine = {row["state"]: row["share"] for row in rows
                    if (row["system"], row["pool"]) == (name, pool)}
            assert mine == pytest.approx({k: float(v) for k, v in shares.items()})
            assert sum(mine.values()) == pytest.approx(1.0)
    assert utilisation_chart(runs).to_dict()["data"]["values"] == rows
    table = compare_table_html(runs)
    for row, r in zip(compare_rows(runs), runs.values()):
        assert row["step_time_s"] == r.step_time_s
        assert f"<td>{r.step_time_s:.4g}</td>" in table
        assert f"{r.throughput_tokens_per_s_per_gpu:,.1f}" in table
    with pytest.raises(ValueError, match="non-empty dict"):
        compare_table_html({})


def test_split_chart_rings_the_best_split(runs):
    sweep = {rg: simulate(placement_system("disaggregated", rollout_gpus=rg, **KW), WL, 4)
             for rg in (2, 4, 6)}
    spec = split_chart(sweep, reference=runs["colocated"]).to_dict()
    line, ring, rule = spec["layer"]
    assert [v["value"] for v in line["data"]["values"]] == [r.step_time_s for r in
                                                            sweep.values()]
    best = min(sweep, key=lambda k: sweep[k].step_time_s)
    assert ring["data"]["values"][0]["rollout_gpus"] == best
    assert rule["data"]["values"][0]["value"] == runs["colocated"].step_time_s
    tput = split_chart(sweep, measure="throughput_tokens_per_s_per_gpu").to_dict()["layer"][1]
    assert tput["data"]["values"][0]["rollout_gpus"] == best      # same work: same ordering
    with pytest.raises(ValueError, match="measure must be one of"):
        split_chart(sweep, measure="mfu")
    with pytest.raises(ValueError, match="keyed by the number of rollout GPUs"):
        split_chart({str(k): r for k, r in sweep.items()})


def test_placement_system_assembles_the_library_systems():
    col = placement_system("colocated", **KW)
    assert col == system_from_cost("qwen2.5-7b", "h100-sxm", WL, placement="colocated",
                                   gpus=8, kl_coef=0.001)
    dis = placement_system("disaggregated", rollout_gpus=2, **KW)
    assert dis == system_from_cost("qwen2.5-7b", "h100-sxm", WL, placement="disaggregated",
                                   gpus=8, rollout_gpus=2, kl_coef=0.001)
    hyb = placement_system("hybrid", rollout_gpus=6, algo="ppo", reward_model="qwen2.5-7b",
                           overlap_reward=True, **KW)
    base = system_from_cost("qwen2.5-7b", "h100-sxm", WL, placement="colocated", gpus=6,
                            algo="ppo", reward_model="qwen2.5-7b", kl_coef=0.001)
    assert hyb.pools == {"actor": 6, "critic": 2} and hyb.overlap_reward
    assert {r: hyb.placement[r] for r in ("rollout", "actor", "ref")} == dict.fromkeys(
        ("rollout", "actor", "ref"), "actor")
    assert hyb.placement["critic"] == hyb.placement["reward"] == "critic"
    assert (hyb.engine, hyb.costs, hyb.weight_sync_s) == (base.engine, base.costs,
                                                          base.weight_sync_s)
    with pytest.raises(ValueError, match="use algo='ppo' or give a reward_model"):
        placement_system("hybrid", rollout_gpus=6, **KW)
    with pytest.raises(ValueError, match=r"rollout_gpus must be an int in \[1, gpus - 1\]"):
        placement_system("disaggregated", rollout_gpus=8, **KW)
    with pytest.raises(ValueError, match="placement must be one of"):
        placement_system("standalone", **KW)
    with pytest.raises(ValueError, match="mode='async' needs the rollout on a pool of its own"):
        placement_system("hybrid", rollout_gpus=6, algo="ppo", mode="async", **KW)


def test_placement_widget_shows_the_table_and_the_library_errors():
    box = placement_widget(gpus=8, rollout_gpus=2, prompts=8, group_size=4,
                           mean_response_len=512, max_response_len=2048)
    columns, message = box.children[0].children, box.children[1]
    controls = {c.description: c for col in columns for c in col.children}
    assert "colocated 8" in message.value and "tokens/s/GPU" in message.value
    controls["placement"].value = "disaggregated"
    assert "disaggregated 2+6" in message.value
    controls["rollout GPUs"].value = 9
    assert "rollout_gpus must be an int" in message.value and "firebrick" in message.value
    controls["rollout GPUs"].value = 2
    controls["placement"].value = "colocated"
    controls["mode"].value = "async"
    assert "needs the rollout on a pool of its own" in message.value
    controls["mode"].value = "sync"
    controls["mean R"].value = 4096                               # above max R = 2048
    assert "Workload.mean_response_len" in message.value


def test_placement_widget_switch_is_the_model_unless_typed_in():
    """The widget's step at its defaults is the library's system, modelled switch included
    (issue 16 item 9); unticking "modelled switch" charges the seconds typed in."""
    kw = dict(gpus=8, rollout_gpus=2, prompts=8, group_size=4, mean_response_len=512,
              max_response_len=2048)
    box = placement_widget(**kw)
    columns, message = box.children[0].children, box.children[1]
    controls = {c.description: c for col in columns for c in col.children}
    wl = Workload(prompts=8, group_size=4, mean_response_len=512.0, max_response_len=2048)
    args = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=wl, gpus=8)
    modelled = simulate(placement_system("colocated", **args), wl, steps=6)
    assert modelled.system.switch_s > 0
    assert f"<td>{modelled.step_time_s:.4g}</td>" in message.value
    controls["switch (s)"].value = 2.0
    controls["modelled switch"].value = False
    typed = simulate(placement_system("colocated", **args, switch_s=2.0), wl, steps=6)
    assert f"<td>{typed.step_time_s:.4g}</td>" in message.value
    assert typed.step_time_s > modelled.step_time_s


def test_placement_grid_equals_the_simulator_and_lands_on_the_controls():
    grid = {"actor": ("qwen2.5-7b",), "gpus": (8, 16), "switch_s": (0.0, 1.0),
            "eighths": (2, 4)}
    rows = placement_grid(grid, workload=WL, steps=4)
    assert sorted({r["gpus"] for r in rows}) == [8, 16]
    assert sorted({r["switch_s"] for r in rows}) == [0.0, 1.0]
    assert sorted({r["rollout_share"] for r in rows}) == [0.25, 0.5, 1.0]
    got = {(r["gpus"], r["switch_s"], r["placement"], r["rollout_gpus"], r["measure"]):
           r["value"] for r in rows}
    for gpus, sw, placement, rollout in ((16, 1.0, "colocated", None),
                                         (8, 0.0, "disaggregated", 4)):
        r = simulate(placement_system(placement, actor="qwen2.5-7b", hardware="h100-sxm",
                                      workload=WL, gpus=gpus, rollout_gpus=rollout,
                                      switch_s=sw), WL, 4)
        key = (gpus, sw, placement, rollout or gpus)
        assert got[key + (STEP_TIME,)] == r.step_time_s
        assert got[key + (THROUGHPUT,)] == r.throughput_tokens_per_s_per_gpu
    spec = placement_grid_chart(rows, start={"gpus": 16}).to_dict()
    assert [p["name"] for p in spec["params"]] == ["actor", "gpus", "switch_s", "measure"]
    assert spec["params"][1]["value"] == 16
    csv = spec["datasets"][spec["data"]["name"]]
    assert csv.count("\n") == len(rows)                          # header + one line per row
    with pytest.raises(ValueError, match="rows is empty"):
        placement_grid_chart([])
