"""Views: charts build valid Vega-Lite specs from library results; the widget shows errors."""
import pytest

from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.rl import GRPOConfig, train_grpo
from rlmperf_lite.book import (learning_curve_chart, phase_time_chart, workdepth_chart,
                               workdepth_widget)
from rlmperf_lite.cost import grpo_step_workdepth

TOY = TinyLMConfig().workdepth_kwargs()


def test_charts_carry_the_library_values():
    history = train_grpo(GRPOConfig(steps=3, warmstart_max_steps=10)).history
    spec = learning_curve_chart(history).to_dict()
    assert [r["reward_mean"] for r in spec["data"]["values"]] == [h["reward_mean"] for h in history]
    rows = phase_time_chart(history).to_dict()["data"]["values"]
    assert rows[0] == {"phase": "rollout", "seconds": sum(h["rollout_s"] for h in history)}
    wd = grpo_step_workdepth(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3)
    values = workdepth_chart({"toy": wd}).to_dict()["data"]["values"]
    shares = {(v["phase"], v["measure"]): v["share"] for v in values}
    assert shares[("decode", "work W")] == wd.phase("decode").work_flops / wd.work_flops
    assert abs(sum(v for (_, m), v in shares.items() if m == "depth 𝒟") - 1) < 1e-12


def test_widget_shows_the_calculators_error_instead_of_a_traceback():
    box = workdepth_widget(**{**TOY, "num_heads": 5})      # 5 does not divide 64
    message = box.children[0].children[1]
    assert "num_heads=5 must divide hidden_size=64" in message.value
    box = workdepth_widget(**TOY)
    assert "<table>" in box.children[0].children[1].value
    sliders = box.children[0].children[0].children
    sliders[3].value = 1                                   # R = 1: no decode step
    assert "decode</td><td>0</td>" in box.children[0].children[1].value


def test_workdepth_widget_steps_lengths_in_powers_of_two_and_redraws_with_p(monkeypatch):
    import IPython.display
    import ipywidgets as w
    from rlmperf_lite.book.widgets import LENGTHS, length_slider
    shown = []                                               # what the widget displays
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.to_dict()))
    assert LENGTHS[0] == 1 and LENGTHS[-1] == 32768 and len(LENGTHS) == 16
    box = workdepth_widget(**TOY)
    controls = {c.description: c for c in box.children[0].children[0].children}
    r = controls["R response"]
    assert isinstance(r, w.SelectionSlider) and r.value == 4096
    assert list(r.options) == list(LENGTHS)                  # one step from 4,096 is 2,048
    assert isinstance(controls["P prompt"], w.SelectionSlider)
    assert len(shown) == 2                                   # the shares, and W/p and D
    before = list(shown)
    controls["log10 p"].value = 9.0
    after = shown[2:]
    assert after[0] == before[0]                             # the shares do not depend on p
    assert after[1]["data"] != before[1]["data"]             # W/p does
    assert "p = 1,000,000,000" in after[1]["title"]
    with pytest.raises(ValueError, match="power of two"):
        length_slider(4000, "R response")


def test_brent_terms_chart_carries_w_over_p_and_depth():
    from rlmperf_lite.book import brent_terms_chart
    wd = grpo_step_workdepth(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3,
                             processors=1000)
    spec = brent_terms_chart({"toy": wd}).to_dict()
    got = {(v["phase"], v["term"]): v["rounds"] for v in spec["data"]["values"]}
    decode = wd.phase("decode")
    assert got[("decode", "W/p")] == decode.work_flops / 1000
    assert got[("decode", "𝒟")] == decode.depth_rounds
    assert got[("decode", "W/p")] + got[("decode", "𝒟")] == pytest.approx(decode.brent_rounds)
    assert "p = 1,000" in spec["title"]
    assert spec["encoding"]["x"]["stack"] is None            # bars on a log scale: no stack
    other = grpo_step_workdepth(**TOY, num_prompts=2, group_size=2, prompt_len=6, response_len=3)
    with pytest.raises(ValueError, match="one processor count"):
        brent_terms_chart({"a": wd, "b": other})
    with pytest.raises(ValueError, match="empty"):
        brent_terms_chart({})


def test_variant_cost_widget_tables_every_variant_and_shows_errors():
    from rlmperf_lite.book import variant_cost_widget
    box = variant_cost_widget(**TOY)
    sliders, message = box.children[0].children, box.children[1]
    for variant in ("grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo"):
        assert f"<td>{variant}</td>" in message.value
    assert "policy + critic / &ndash;" in message.value
    sliders[5].value = 0.01                                # kl_coef > 0: a frozen reference
    assert "policy / reference" in message.value
    sliders[1].value = 1                                   # G = 1: no group baseline
    assert "group_size must be an int &gt;= 2, got 1" in message.value
    with pytest.raises(ValueError, match="needs the model's shape"):
        variant_cost_widget()


def test_sweep_charts_carry_the_runs_values():
    from rlmperf_lite.rl import SweepRun
    from rlmperf_lite.book import sweep_curves_chart, sweep_spread_chart
    h = ({"step": 0, "resample_rounds": 0, "step_s": 1.0, "decode_flops": 5.0,
          "eval_accuracy": 0.95},)
    runs = [SweepRun("grpo", 0, 8, 0.9, h), SweepRun("grpo", 1, 8, 0.9, h[:0])]
    curve = sweep_curves_chart(runs).to_dict()["data"]["values"]
    assert curve == [{"step": 1, "samples": 8, "train_s": 1.0, "eval_accuracy": 0.95,
                      "variant": "grpo", "seed": "0"}]
    spread = sweep_spread_chart(runs).to_dict()["data"]["values"]
    assert sorted(r["value"] for r in spread) == [5.0, 8]     # seed 1 never reached: left out
    assert {r["measure"] for r in spread} == {"completions generated", "FLOPs counted"}
    for call in (lambda: sweep_curves_chart([]), lambda: sweep_spread_chart([]),
                 lambda: sweep_curves_chart(runs, x="steps")):
        with pytest.raises(ValueError, match="runs is empty|x must be one of"):
            call()


def test_cost_views_carry_the_estimates_values_and_the_widget_shows_errors():
    from rlmperf_lite.cost import estimate_rl_step
    from rlmperf_lite.book import (estimate_table_html, estimate_widget, memory_chart,
                                   phase_share_chart, roofline_chart)
    est = estimate_rl_step("grpo", actor="qwen2.5-7b", hardware="h100", prompts=4, group_size=4,
                           prompt_len=64, response_len=128, gpus=8)
    shares = {(r["phase"], r["measure"]): r["share"]
              for r in phase_share_chart(est).to_dict()["data"]["values"]}
    assert shares[("rollout_decode", "time")] == est.phase("rollout_decode").time_s / est.time_s
    parts = memory_chart(est, "h100").layer[0].to_dict()["data"]["values"]
    assert sum(r["GB"] for r in parts if r["phase"] == "rollout_decode") == pytest.approx(
        est.phase("rollout_decode").per_gpu_memory_bytes / 1e9)
    assert "<td>rollout_decode</td>" in estimate_table_html(est)
    spec = roofline_chart("h100", {"k": (1e12, 1e9)}).to_dict()
    assert spec["layer"][1]["data"]["values"][0]["bound"] == "compute"   # 1000 FLOPs/B > ridge
    box = estimate_widget()
    controls, message = box.children[0].children[0].children, box.children[0].children[1]
    assert "rollout_decode" in message.value
    controls[4].value = 1                                   # G = 1 for GRPO
    assert "group_size must be an int &gt;= 2" in message.value


def test_brent_chart_and_rl_workdepth_widget():
    from rlmperf_lite.cost import rl_step_workdepth
    from rlmperf_lite.book import brent_chart, rl_workdepth_widget
    step = dict(actor="qwen2.5-7b", hardware="h100", prompts=4, group_size=4, prompt_len=64,
                response_len=128, gpus=8)
    by_p = {p: rl_step_workdepth("grpo", processors=p, **step) for p in (1, 10**6)}
    rows = brent_chart(by_p).to_dict()["data"]["values"]
    decode = [r["rounds"] for r in rows if r["phase"] == "rollout_decode"]
    assert decode == [by_p[p].phase("rollout_decode").lower_rounds for p in (1, 10**6)]
    box = rl_workdepth_widget()
    controls, message = box.children[0].children, box.children[1]
    assert "rollout_decode" in message.value
    controls[1].value = 1                                   # G = 1 for GRPO
    assert "group_size must be an int &gt;= 2" in message.value


def test_step_time_chart_stacks_phase_times():
    from rlmperf_lite.cost import estimate_rl_step
    from rlmperf_lite.book import step_time_chart
    est = estimate_rl_step("ppo", actor="qwen2.5-7b", hardware="h100", prompts=4, group_size=4,
                           prompt_len=64, response_len=128, gpus=8)
    rows = step_time_chart({"ppo": est}).to_dict()["data"]["values"]
    assert sum(r["seconds"] for r in rows) == pytest.approx(est.time_s)


def test_static_calculator_grid_chart_and_page_output():
    """The no-kernel calculator's data are the library's estimates; its controls are bound
    parameters; its page output holds the initial SVG and a script with no '</' inside."""
    from rlmperf_lite.cost import estimate_rl_step
    from rlmperf_lite.book import estimate_calculator_chart, estimate_grid, static_chart_html
    grid = {"actor": ("qwen2.5-7b",), "hardware": ("h100-sxm", "h20"), "algo": ("grpo",),
            "gpus": (8, 64), "response_len": (1024,), "group_size": (16,)}
    rows = estimate_grid(grid)
    est = estimate_rl_step("grpo", actor="qwen2.5-7b", hardware="h20", gpus=64, prompts=32,
                           group_size=16, prompt_len=512, response_len=1024, kl_coef=0.001)
    sample = [r for r in rows if r["hardware"] == "h20" and r["gpus"] == 64]
    assert [r["time_s"] for r in sample] == [p.time_s for p in est.phases]
    spec = estimate_calculator_chart(rows).to_dict()
    assert [p["name"] for p in spec["params"]] == list(grid)
    assert spec["data"]["format"]["type"] == "csv"
    page = static_chart_html(estimate_calculator_chart(rows))
    script = page.split("<script>", 1)[1]
    assert "<svg" in page.split("<script>")[0] and "</" not in script.rsplit("</script>", 1)[0]
    with pytest.raises(ValueError, match="rows is empty"):
        estimate_calculator_chart([])


def test_grid_calculators_hold_the_library_values():
    from rlmperf_lite.cost.variants import compare_variants
    from rlmperf_lite.book import grid_chart, grpo_workdepth_grid, variant_cost_grid
    from rlmperf_lite.book.grid_charts import LLAMA2_7B
    rows = grpo_workdepth_grid({"num_prompts": (32,), "group_size": (16,),
                                "response_len": (4096,), "log10_p": (6,)})
    wd = grpo_step_workdepth(**LLAMA2_7B, num_prompts=32, group_size=16, prompt_len=512,
                             response_len=4096, processors=10**6)
    assert [r["brent"] for r in rows] == [p.brent_rounds for p in wd.phases]
    rows = variant_cost_grid({"pass_rate": (0.8,), "group_size": (16,), "kl_coef": (0.0,)})
    dapo = compare_variants(**LLAMA2_7B, num_prompts=32, prompt_len=512, response_len=4096,
                            pass_rate=0.8, group_size=16)[2]
    assert {r["value"] for r in rows if r["variant"] == "dapo"
            and r["measure"] == "completions generated"} == {dapo.samples_generated}
    spec = grid_chart(rows, controls=["measure", "pass_rate"], category="variant",
                      value="value", value_title="v", title="t").to_dict()
    assert [p["name"] for p in spec["params"]] == ["measure", "pass_rate"]
    with pytest.raises(ValueError, match="rows lack the columns"):
        grid_chart(rows, controls=["gpus"], category="variant", value="value",
                   value_title="v", title="t")
