"""Chapter 8 views: charts and tables carry the library's values, the widget shows the library's
ValueError, and the no-kernel grid equals memory_per_gpu and train_step_time at sample points
(book Chapter 8, tensor, sequence and context parallelism)."""
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.cost import (ModelConfig, ParallelPlan, TrainWorkload, activation_bytes_per_layer,
                               hardware_preset, memory_per_gpu, train_step_time)
from rlmperf_lite.nn import TinyLMConfig, init_params
from rlmperf_lite.parallel import ring_attention_work, shard_params_tp
from rlmperf_lite.book.tp_views import (TIME_PARTS, TP_WORKLOAD, activation_chart,
                                        bytes_by_axis_chart, ring_work_chart, shard_shapes_html,
                                        tp_grid, tp_grid_chart, tp_plan_results,
                                        tp_scaling_chart, tp_widget)

H100 = hardware_preset("h100")


def _plan(tp, sp, cp, gpus=64, batch=512):
    dp = gpus // (tp * cp)
    return ParallelPlan(dp=dp, tp=tp, cp=cp, sp=sp, zero_stage=TP_WORKLOAD["zero_stage"],
                        recompute=TP_WORKLOAD["recompute"], microbatches=batch // dp)


def test_shard_shapes_table_shows_megatron_shapes_per_rank():
    """Shoeybi et al. 2019 §3: wqkv and w_up split by columns, wo and w_down by rows."""
    cfg = TinyLMConfig(vocab_size=11, max_seq_len=8, hidden_size=16, num_heads=4,
                       intermediate_size=32)
    html = shard_shapes_html(shard_params_tp(init_params(cfg, np.random.default_rng(0)), cfg, 2))
    assert "<th>rank 1</th>" in html
    assert "<td><code>h0.wqkv</code></td><td>16 x 24</td><td>16 x 24</td>" in html
    assert "<td><code>h0.w_down</code></td><td>16 x 16</td>" in html
    assert "<td><code>h0.ln1</code></td><td>16</td>" in html           # replicated


def test_bytes_by_axis_chart_carries_every_rank_and_axis():
    by_axis = {"dp": np.array([10.0, 10.0, 12.0, 12.0]), "tp": np.array([5.0, 6.0, 5.0, 6.0])}
    rows = bytes_by_axis_chart(by_axis).to_dict()["data"]["values"]
    assert len(rows) == 8
    got = {(r["rank"], r["axis"]): r["bytes"] for r in rows}
    assert got[("rank 2", "dp")] == 12.0 and got[("rank 1", "tp")] == 6.0


def test_activation_chart_carries_korthikanti_values():
    """Korthikanti et al. 2022 Table 2 through activation_bytes_per_layer: TP + SP = 1/t."""
    m = ModelConfig.preset("llama-3.1-70b")
    act = {"none": activation_bytes_per_layer(m, 4608, 1),
           "tp=8 + sp": activation_bytes_per_layer(m, 4608, 1, tp=8, sp=True)}
    rows = activation_chart(act).to_dict()["data"]["values"]
    assert [r["bytes"] for r in rows] == list(act.values())
    assert rows[0]["bytes"] == 8 * rows[1]["bytes"]


def test_ring_work_chart_carries_ring_attention_work():
    work = {layout: ring_attention_work(4, layout) for layout in ("contiguous", "zigzag")}
    rows = ring_work_chart(work).to_dict()["data"]["values"]
    got = {(r["layout"], r["rank"]): r["blocks"] for r in rows}
    assert [got[("contiguous", r)] for r in range(4)] == [1, 2, 3, 4]
    assert {got[("zigzag", r)] for r in range(4)} == {2.5}


def test_tp_scaling_chart_parts_add_up_to_the_step_time():
    m = ModelConfig.preset("llama-3.1-70b")
    wl = TrainWorkload(global_batch=512, seq_len=4608)
    steps = {t: train_step_time(m, H100, _plan(t, t > 1, 1), wl) for t in (1, 8)}
    rows = tp_scaling_chart(steps).to_dict()["data"]["values"]
    for t, st in steps.items():
        parts = {r["part"]: r["seconds"] for r in rows if r["setting"] == str(t)}
        assert list(parts) == [label for label, _ in TIME_PARTS]
        assert parts["TP communication"] == st.comm_s["tp"]
        assert sum(parts.values()) == pytest.approx(st.total_s, rel=1e-12)


def test_tp_plan_results_apply_every_rule_and_equal_the_library():
    m = ModelConfig.preset("llama-3.1-70b")
    wl = TrainWorkload(global_batch=512, seq_len=8192)
    mem, step, hw = tp_plan_results("llama-3.1-70b", "h100", 8, True, 2, 8192)
    assert mem == memory_per_gpu(m, _plan(8, True, 2), wl)
    assert step == train_step_time(m, H100, _plan(8, True, 2), wl) and hw == H100
    with pytest.raises(ValueError, match="tp=16 exceeds nvlink_domain_gpus=8"):
        tp_plan_results("gpt3-175b", "h100", 16, True, 1, 4096)
    across = replace(H100, gpus_per_node=16)                       # a HardwareSpec is accepted
    assert tp_plan_results("gpt3-175b", across, 16, True, 1, 2048)[2] is across
    with pytest.raises(ValueError, match=r"dp\*tp\*pp\*cp=128 != gpus=64"):
        tp_plan_results("llama-3.1-70b", "h100", 8, True, 16, 4096)


def test_tp_widget_shows_the_library_values_and_its_errors():
    box = tp_widget()
    controls, message = box.children[0].children[0].children, box.children[0].children[1]
    step = train_step_time(ModelConfig.preset("llama-3.1-70b"), H100, _plan(8, True, 1),
                           TrainWorkload(global_batch=512, seq_len=4096))
    assert f"{step.total_s:.3f} s" in message.value and "fits" in message.value
    names = [c.description for c in controls]
    controls[names.index("model")].value = "qwen2.5-7b"           # 28 heads, 4 KV heads
    assert "tp=8 does not divide num_key_value_heads=4" in message.value
    assert "firebrick" in message.value
    controls[names.index("tp")].value = 4
    assert "firebrick" not in message.value
    controls[names.index("tp")].value = 1                          # sp still on
    assert "sp=True needs tp &gt; 1" in message.value


def test_tp_grid_equals_the_library_at_sample_points():
    grid = {"model": ("qwen2.5-7b", "llama-3.1-70b"), "tp": (1, 8), "sp": ("off", "on"),
            "cp": (1, 4), "seq_len": (4096, 32768)}
    rows = tp_grid(grid)
    for model, tp, sp, cp, s in (("llama-3.1-70b", 8, "on", 4, 32768),
                                 ("qwen2.5-7b", 1, "off", 4, 4096),
                                 ("llama-3.1-70b", 8, "off", 1, 4096)):
        m, wl = ModelConfig.preset(model), TrainWorkload(global_batch=512, seq_len=s)
        plan = _plan(tp, sp == "on", cp)
        mem, step = memory_per_gpu(m, plan, wl), train_step_time(m, H100, plan, wl)
        got = {(r["kind"], r["part"]): r["value"] for r in rows if (r["model"], r["tp"], r["sp"],
               r["cp"], r["seq_len"]) == (model, tp, sp, cp, s)}
        assert got[("time", "compute")] == step.compute_s
        assert got[("time", "TP communication")] == step.comm_s["tp"]
        assert got[("time", "CP communication")] == step.comm_s["cp"]
        assert got[("time", "DP exposed")] == step.dp_exposed_s
        assert got[("total", "step")] == step.total_s
        assert got[("memory", "activations")] == mem.activation_bytes
        assert got[("memory", "model states")] == pytest.approx(
            mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes, rel=1e-15)
        assert got[("hbm", "HBM")] == H100.hbm_bytes
    errors = {(r["model"], r["tp"], r["sp"]): r["part"] for r in rows if r["kind"] == "error"}
    assert errors[("qwen2.5-7b", 8, "on")].startswith("tp=8 does not divide num_attention_heads")
    assert errors[("llama-3.1-70b", 1, "on")] == "sp=True needs tp > 1"
    assert all("," not in msg for msg in errors.values())         # safe inside the CSV
    rejected = [r for r in rows if (r["model"], r["tp"], r["sp"]) == ("qwen2.5-7b", 8, "on")]
    assert {r["value"] for r in rejected if r["kind"] in ("time", "total", "memory")} == {0.0}
    assert [r["value"] for r in rejected if r["kind"] == "hbm"] == [H100.hbm_bytes] * 4


def test_tp_grid_chart_binds_one_control_per_grid_key():
    rows = tp_grid({"model": ("llama-3.1-70b",), "tp": (4, 8), "sp": ("on",), "cp": (1,),
                    "seq_len": (4096,)})
    spec = tp_grid_chart(rows, start={"tp": 8}).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert list(params) == ["model", "tp", "sp", "cp", "seq_len"]
    assert params["tp"]["value"] == 8 and params["tp"]["bind"]["options"] == [4, 8]
    with pytest.raises(ValueError, match="rows is empty"):
        tp_grid_chart([])
