"""Chapter 7 views: charts and tables carry the library's values, the widget shows the
library's ValueError, and the no-kernel grid equals memory_per_gpu and train_step_time at sample
points (book Chapter 7, data parallelism and ZeRO/FSDP)."""
import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, ParallelPlan, TrainWorkload, hardware_preset,
                               memory_per_gpu, model_state_breakdown,
                               model_state_bytes_per_gpu, train_step_time)
from rlmperf_lite.parallel import ProcessGroup
from rlmperf_lite.book.dp_views import (DP_WORKLOAD, dp_grid, dp_grid_chart, dp_plan_results,
                                        dp_scaling_chart, dp_widget, ring_table_html,
                                        state_bytes_chart, zero_comm_chart)

WL = TrainWorkload(global_batch=DP_WORKLOAD["global_batch"], seq_len=DP_WORKLOAD["seq_len"],
                   micro_batch_size=DP_WORKLOAD["micro_batch_size"])


def _plan(dp, stage):
    return ParallelPlan(dp=dp, zero_stage=stage, recompute=DP_WORKLOAD["recompute"],
                        microbatches=DP_WORKLOAD["global_batch"] // dp)


def test_ring_table_shows_every_rank_and_the_bytes_each_sent():
    group = ProcessGroup(2)
    xs = [np.array(["a0", "a1"], dtype=object), np.array(["b0", "b1"], dtype=object)]
    out = group.reduce_scatter(xs)
    html = ring_table_html({"input": xs, "after": out},
                           sent_bytes={"after": group.log.sent_bytes})
    assert "<code>a0, a1</code>" in html and "<code>a0b0</code>" in html   # rank 0: chunk 0
    assert html.count("<tr>") == 4                        # header, 2 ranks, bytes row
    assert f"{group.log.sent_bytes[0]:,.0f}" in html


def test_zero_comm_chart_divides_the_logged_bytes_by_psi():
    rows = zero_comm_chart({0: {"all_reduce": 1500.0}, 3: {"all_gather": 1500.0,
                                                            "reduce_scatter": 750.0}},
                           1000.0).to_dict()["data"]["values"]
    assert {(r["stage"], r["op"]): r["psi"] for r in rows} == {
        ("0: DP", "all_reduce"): 1.5, ("3: +weights (FSDP)", "all_gather"): 1.5,
        ("3: +weights (FSDP)", "reduce_scatter"): 0.75}


def test_state_bytes_chart_carries_zero_fig1_breakdowns():
    # ZeRO paper Fig. 1: 7.5B parameters on 64 GPUs
    parts = {f"stage {s}": model_state_breakdown(7.5e9, 64, s) for s in range(4)}
    spec = state_bytes_chart(parts, hbm_bytes=80e9).to_dict()
    rows = spec["layer"][0]["data"]["values"]
    for s in range(4):
        total = sum(r["bytes"] for r in rows if r["setting"] == f"stage {s}")
        assert total == pytest.approx(model_state_bytes_per_gpu(7.5e9, 64, s))
    assert spec["layer"][1]["data"]["values"] == [{"bytes": 80e9}]
    assert "layer" not in state_bytes_chart(parts).to_dict()      # no HBM: bars only


def test_dp_scaling_chart_carries_the_step_times():
    m, hw = ModelConfig.preset("qwen2.5-7b"), hardware_preset("h100")
    steps = {d: train_step_time(m, hw, _plan(d, 1), WL) for d in (1, 16)}
    rows = dp_scaling_chart(steps).to_dict()["data"]["values"]
    got = {(r["dp"], r["time"]): r["seconds"] for r in rows}
    assert got[(16, "DP exposed")] == steps[16].dp_exposed_s
    assert got[(1, "compute")] == steps[1].compute_s
    assert (1, "DP communication") not in got                     # 0 s: nothing on a log axis


def test_dp_widget_shows_the_library_values_and_its_errors():
    box = dp_widget()
    controls, message = box.children[0].children[0].children, box.children[0].children[1]
    mem = memory_per_gpu(ModelConfig.preset("qwen2.5-7b"), _plan(8, 3), WL)
    assert f"{mem.total_bytes / 1e9:,.2f} GB" in message.value
    names = [c.description for c in controls]
    controls[names.index("batch (seqs)")].value = 100        # 100 sequences over 8 ranks
    assert "global_batch=100 is not divisible by dp*micro_batch_size=8" in message.value
    assert "firebrick" in message.value
    controls[names.index("batch (seqs)")].value = 512
    controls[names.index("zero_stage")].value = 0
    assert "does not fit" in message.value                   # 7B with plain DP on 80 GB


def test_dp_grid_equals_the_library_at_sample_points():
    grid = {"model": ("qwen2.5-7b", "llama-3.1-70b"), "hardware": ("h100-sxm", "h20"),
            "zero_stage": (1, 3), "dp": (8, 64)}
    rows = dp_grid(grid)
    assert len(rows) == 16 * 9
    for model, hw_name, stage, dp in (("qwen2.5-7b", "h100-sxm", 3, 8),
                                      ("llama-3.1-70b", "h20", 1, 64)):
        m, hw = ModelConfig.preset(model), hardware_preset(hw_name)
        mem = memory_per_gpu(m, _plan(dp, stage), WL)
        step = train_step_time(m, hw, _plan(dp, stage), WL)
        got = {(r["kind"], r["part"]): r["value"] for r in rows if r["model"] == model and
               r["hardware"] == hw_name and r["zero_stage"] == stage and r["dp"] == dp}
        assert got[("memory", "weights")] == mem.weights_bytes
        assert got[("memory", "optimizer states")] == mem.optimizer_bytes
        assert got[("memory", "activations")] == mem.activation_bytes
        assert got[("hbm", "HBM")] == hw.hbm_bytes
        assert got[("time", "compute")] == step.compute_s
        assert got[("time", "DP communication")] == step.comm_s["dp"]
        assert got[("time", "step")] == step.total_s
    mem, step, hw = dp_plan_results("qwen2.5-7b", "h100-sxm", 8, 3)
    assert mem == memory_per_gpu(ModelConfig.preset("qwen2.5-7b"), _plan(8, 3), WL)


def test_dp_grid_chart_binds_one_control_per_grid_key():
    rows = dp_grid({"model": ("qwen2.5-7b",), "hardware": ("h100-sxm",), "zero_stage": (0, 3),
                    "dp": (8,)})
    spec = dp_grid_chart(rows, start={"zero_stage": 3}).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert list(params) == ["model", "hardware", "zero_stage", "dp"]
    assert params["zero_stage"]["value"] == 3 and params["zero_stage"]["bind"]["options"] == [0, 3]
    assert dp_grid({"model": ("qwen2.5-7b",), "hardware": ("h100-sxm",), "zero_stage": (0,),
                    "dp": (3,)}) == []                       # 512 sequences do not split by 3
    with pytest.raises(ValueError, match="rows is empty"):
        dp_grid_chart([])
