"""Chapter 9 views: the charts and tables carry the library's values (schedule timelines,
bytes per rank, expert loads, the planner's ranking and rejections), the widgets show the
library's ValueError messages, and the no-kernel grids equal the library at sample points
(Narayanan et al. 2021 §2.2: bubble (p - 1) / m, and (p - 1) / (v m) interleaved)."""
import numpy as np
import pytest

from rlmperf_lite.cost import (ParallelPlan, TrainWorkload, hardware_preset, model_preset,
                               pipeline_bubble_fraction, search_plans)
from rlmperf_lite.parallel import expert_load, schedule_timeline
from rlmperf_lite.parallel.schedules import (gpipe_schedule, interleaved_schedule,
                                             one_f_one_b_schedule)
from rlmperf_lite.book.pp_views import (BUBBLE, IN_FLIGHT, bytes_per_rank_chart,
                                        expert_load_chart, gantt_grid_chart, make_schedule,
                                        pipeline_bubble_chart, pipeline_bubble_grid,
                                        pipeline_gantt_chart, pipeline_gantt_grid,
                                        pipeline_widget, plan_table_html, planner_widget,
                                        rejection_summary, rejection_table_html,
                                        stage_layout_text)

H100 = hardware_preset("h100")
WORK = TrainWorkload(global_batch=512, seq_len=4608)


@pytest.fixture(scope="module")
def search():
    return search_plans(model_preset("qwen2.5-72b"), H100, 64, WORK)


def test_make_schedule_is_the_library_schedule():
    assert make_schedule("gpipe", 4, 8) == gpipe_schedule(4, 8)
    assert make_schedule("1f1b", 4, 8, 3) == one_f_one_b_schedule(4, 8)   # v ignored
    assert make_schedule("interleaved", 4, 8, 2) == interleaved_schedule(4, 8, 2)
    with pytest.raises(ValueError, match="schedule must be one of"):
        make_schedule("zero-bubble", 4, 8)


def test_gantt_chart_carries_the_timeline_records_and_bubble():
    tls = {name: schedule_timeline(make_schedule(name, 4, 8, 2))
           for name in ("gpipe", "1f1b", "interleaved")}
    spec = pipeline_gantt_chart(tls).to_dict()
    for panel, (name, tl) in zip(spec["vconcat"], tls.items()):
        rows = panel["data"]["values"]
        assert rows == [{**r, "schedule": name} for r in tl.records]
        assert f"bubble {tl.bubble_fraction:.1%}" in panel["title"]
    assert "bubble 37.5%" in spec["vconcat"][1]["title"]            # (4 - 1) / 8, 1F1B
    assert "bubble 18.8%" in spec["vconcat"][2]["title"]            # (4 - 1) / (2 * 8)
    with pytest.raises(ValueError, match="timelines is empty"):
        pipeline_gantt_chart({})


def test_bubble_lines_bytes_and_load_charts_carry_their_values():
    rows = [{"pp": 8, "microbatches": 32, "bubble": pipeline_bubble_fraction(8, 32),
             "source": "(p - 1) / m"},
            {"pp": 8, "microbatches": 32, "source": "simulated timeline",
             "bubble": schedule_timeline(one_f_one_b_schedule(8, 32)).bubble_fraction}]
    layers = pipeline_bubble_chart(rows).to_dict()["layer"]
    assert [layer["data"]["values"][0]["bubble"] for layer in layers] == [0.21875, 0.21875]
    spec = bytes_per_rank_chart({"counted": np.array([163840.0, 163840.0])}).to_dict()
    assert spec["data"]["values"] == [{"rank": 0, "what": "counted", "bytes": 163840.0},
                                      {"rank": 1, "what": "counted", "bytes": 163840.0}]
    load = expert_load(np.array([[0, 1], [0, 2], [0, 3]]), 4)
    values = expert_load_chart({"toy": load}).to_dict()["data"]["values"]
    assert [v["assignments"] for v in values] == load.tolist() == [3, 1, 1, 1]


def test_plan_table_shows_the_ranked_plans(search):
    text = plan_table_html(search, limit=3)
    assert f"{search.num_valid:,} valid plans of {search.num_enumerated:,}" in text
    best = search.table(1)[0]
    first = text.split("<tr>")[2]                               # header, then rank 1
    assert f"<td>{best['pp']}</td>" in first and f"<td>{best['step_time_s']:.3f}</td>" in first
    assert text.count("<tr>") == 1 + 3


def test_plan_table_shows_the_stage_layout(search):
    """The best Qwen2.5-72B plan on 64 GPUs balances the LM head's work: first 11, last 9
    layers (Megatron's first/last-stage flags), shown as the row's stage column."""
    best = search.table(1)[0]
    assert (best["first_stage_layers"], best["last_stage_layers"]) == (11, 9)
    assert "<td>11 ... 9</td>" in plan_table_html(search, limit=1).split("<tr>")[2]
    even = search_plans(model_preset("qwen2.5-72b"), H100, 64, WORK, uneven_stages=False)
    assert "<td>even</td>" in plan_table_html(even, limit=1)


def test_stage_layout_text_is_the_plans_stage_layers():
    qwen = model_preset("qwen2.5-72b")
    assert stage_layout_text(ParallelPlan(microbatches=8), qwen) == "80"
    assert stage_layout_text(ParallelPlan(pp=8, microbatches=8), qwen) == "10 x 8"
    plan = ParallelPlan(pp=8, microbatches=8, first_stage_layers=11, last_stage_layers=9)
    assert plan.stage_layers(qwen) == (11,) + (10,) * 6 + (9,)
    assert stage_layout_text(plan, qwen) == "11/10 x 6/9"
    two = ParallelPlan(pp=2, microbatches=8, first_stage_layers=41, last_stage_layers=39)
    assert stage_layout_text(two, qwen) == "41/39"


def test_rejection_summary_counts_every_reason_once_per_plan(search):
    summary = dict(rejection_summary(search))
    assert sum(summary.values()) == sum(len(why) for _, why in search.rejected)
    node = sum(1 for _, why in search.rejected
               if any("exceeds nvlink_domain_gpus=8" in w for w in why))
    assert summary["tp=N exceeds nvlink_domain_gpus=N (a TP group must fit in an NVLink "
                   "domain)"] == node
    oom = sum(1 for _, why in search.rejected if any(w.startswith("out of memory") for w in why))
    assert summary["out of memory: N GB > N GB"] == oom > 0
    assert "out of memory: N GB &gt; N GB" in rejection_table_html(search)


def test_pipeline_widget_shows_bubble_and_the_library_error():
    box = pipeline_widget(pp=8, microbatches=32, schedule="1f1b")
    controls, message = box.children[0].children, box.children[1]
    assert "simulated bubble 0.2188" in message.value and "= 0.2188" in message.value
    controls[2].value = "interleaved"                            # v = 2: 7 / 64
    assert "simulated bubble 0.1094" in message.value
    controls[1].value = 30                                       # not a multiple of pp = 8
    assert "microbatches=30 must be a multiple of pp=8" in message.value
    assert "color:firebrick" in message.value


def test_planner_widget_tables_plans_and_shows_the_library_error():
    box = planner_widget(model="qwen3-30b-a3b", gpus=64)
    controls, message = box.children[0].children[0].children, box.children[1]
    assert "valid plans of" in message.value and "plans per broken rule" in message.value
    controls[2].value = 0                                        # gpus
    assert "gpus" in message.value and "color:firebrick" in message.value
    controls[2].value = 64
    controls[4].value = 0                                        # seq_len
    assert "TrainWorkload.seq_len" in message.value
    controls[4].value = 4096
    assert controls[5].description == "backend" and controls[5].value == "megatron"
    controls[5].value = "deepspeed"                              # its rules name it
    assert "deepspeed does not support" in message.value


@pytest.mark.parametrize("pp, m", [(8, 32), (2, 16), (16, 128)])
def test_bubble_grid_equals_the_library(pp, m):
    rows = pipeline_bubble_grid()
    got = {(r["schedule"], r["measure"]): r["value"] for r in rows
           if r["pp"] == pp and r["microbatches"] == m}
    for label, v in (("GPipe", 1), ("1F1B", 1), ("interleaved v=2", 2),
                     ("interleaved v=4", 4)):
        assert got[(label, BUBBLE)] == pytest.approx(pipeline_bubble_fraction(pp, m, v),
                                                     rel=1e-12)
    assert got[("1F1B", BUBBLE)] == schedule_timeline(one_f_one_b_schedule(pp, m)).bubble_fraction
    assert got[("GPipe", IN_FLIGHT)] == m and got[("1F1B", IN_FLIGHT)] == pp
    assert got[("interleaved v=2", IN_FLIGHT)] == \
        schedule_timeline(interleaved_schedule(pp, m, 2)).peak_in_flight[0]
    if (pp, m) == (8, 32):
        assert got[("1F1B", BUBBLE)] == 0.21875
    # the grid lands exactly on the control values
    assert sorted({r["pp"] for r in rows}) == [2, 4, 8, 16]
    assert sorted({r["microbatches"] for r in rows}) == [16, 32, 64, 128]


def test_gantt_grid_equals_the_timelines_and_builds_a_chart():
    rows = pipeline_gantt_grid({"pp": (2, 4), "microbatches": (4, 8)})
    pick = [r for r in rows if (r["pp"], r["microbatches"], r["schedule"]) == (4, 8, "1F1B")]
    tl = schedule_timeline(one_f_one_b_schedule(4, 8))
    keys = ("stage", "op", "microbatch", "chunk", "start", "end")
    assert [{k: r[k] for k in keys} for r in pick] == tl.records
    assert {r["bubble"] for r in pick} == {tl.bubble_fraction}
    inter = [r for r in rows if (r["pp"], r["microbatches"], r["schedule"]) ==
             (4, 8, "interleaved v=2")]
    assert inter[0]["bubble"] == pipeline_bubble_fraction(4, 8, 2)
    spec = gantt_grid_chart(rows, start={"pp": 4, "microbatches": 8,
                                         "schedule": "1F1B"}).to_dict()
    assert [p["name"] for p in spec["params"]] == ["pp", "microbatches", "schedule"]
    csv = spec["datasets"][spec["data"]["name"]]
    assert csv.count("\n") == len(rows)                        # header + one line per row
    with pytest.raises(ValueError, match="rows is empty"):
        gantt_grid_chart([])
