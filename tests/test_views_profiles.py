"""Chapters 2 and 6 calculators: the no-kernel grids equal the library (ppo_step_workdepth,
grpo_step_workdepth, estimate_rl_step) at sample points, the charts and tables carry the
library's values, and the widgets show the library's ValueError instead of a traceback (book
section 2.4, what the critic costs; sections 6.1-6.2, compute profiles)."""
import csv
import io

import pytest

from rlmperf_lite.cost import ALGOS, estimate_rl_step
from rlmperf_lite.book.grid_charts import LLAMA2_7B
from rlmperf_lite.book.profile_views import (GENERATION, PROFILE_GRID, phase_share_grid,
                                             phase_share_grid_chart, ppo_grpo_grid_chart,
                                             ppo_grpo_table_html, ppo_grpo_widget,
                                             ppo_grpo_workdepth, ppo_grpo_workdepth_grid,
                                             profile_chart, profile_estimates,
                                             profile_table_html, profile_widget)
from rlmperf_lite.cost import grpo_step_workdepth, ppo_step_workdepth

# the Chapter 2 lab's 7B comparison: GRPO 32 x 16, PPO 512 x 1, P = 512, R = 4096
LAB2 = dict(prompt_len=512, response_len=4096)
# the Chapter 6 lab's step: Qwen2.5-7B, 32 prompts x 16 of 512 + 4,096 tokens, 64 GPUs, KL term
LAB6 = dict(actor="qwen2.5-7b", hardware="h100-sxm", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64, kl_coef=0.001)


def _csv_rows(spec: dict) -> list[dict]:
    """The rows a grid chart embeds (CSV) as the page's controls filter them."""
    (text,) = spec["datasets"].values()
    return list(csv.DictReader(io.StringIO(text)))


def test_ppo_grpo_grid_equals_the_workdepth_functions_at_sample_points():
    grid = {"response_len": (256, 4096), "ppo_epochs": (1, 2), "num_minibatches": (2,),
            "log10_p": (0, 9)}
    rows = ppo_grpo_workdepth_grid(grid)
    for R, E, k in ((4096, 2, 9), (256, 1, 0)):
        ppo = ppo_step_workdepth(**LLAMA2_7B, num_prompts=512, prompt_len=512, response_len=R,
                                 ppo_epochs=E, num_minibatches=2, processors=10**k)
        grpo = grpo_step_workdepth(**LLAMA2_7B, num_prompts=32, group_size=16, prompt_len=512,
                                   response_len=R, processors=10**k)
        got = {r["phase"]: r for r in rows if (r["response_len"], r["ppo_epochs"],
                                               r["log10_p"]) == (R, E, k)}
        for label, wd in (("PPO", ppo), ("GRPO", grpo)):
            assert got[f"{label} step"]["brent_rounds"] == wd.brent_rounds
            assert got[f"{label} step"]["work_flops"] == wd.work_flops
            for p in wd.phases:
                assert got[f"{label} {p.name}"]["brent_rounds"] == p.brent_rounds
                assert got[f"{label} {p.name}"]["depth_rounds"] == p.depth_rounds
        assert len(got) == 2 + len(ppo.phases) + len(grpo.phases)
    assert ppo_grpo_workdepth(num_prompts=32, group_size=16, ppo_epochs=2, num_minibatches=2,
                              **LAB2)["PPO"] == ppo_step_workdepth(
        **LLAMA2_7B, num_prompts=512, ppo_epochs=2, num_minibatches=2, **LAB2)


def test_ppo_grpo_chart_and_table_carry_the_library_values():
    grid = {"response_len": (4096,), "ppo_epochs": (1, 2), "num_minibatches": (2,),
            "log10_p": (9,)}
    rows = ppo_grpo_workdepth_grid(grid)
    spec = ppo_grpo_grid_chart(rows, start={"ppo_epochs": 2}).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert list(params) == list(grid) and params["ppo_epochs"]["value"] == 2
    assert params["ppo_epochs"]["bind"]["options"] == [1, 2]
    ppo = ppo_step_workdepth(**LLAMA2_7B, num_prompts=512, ppo_epochs=2, num_minibatches=2,
                             processors=10**9, **LAB2)
    shown = {r["phase"]: float(r["brent_rounds"]) for r in _csv_rows(spec)
             if r["ppo_epochs"] == "2"}
    assert shown["PPO critic_forward"] == pytest.approx(
        ppo.phase("critic_forward").brent_rounds, rel=1e-3)         # 4 significant digits
    assert shown["PPO step"] == pytest.approx(ppo.brent_rounds, rel=1e-3)
    with pytest.raises(ValueError, match="rows is empty"):
        ppo_grpo_grid_chart([])
    results = ppo_grpo_workdepth(num_prompts=32, group_size=16, **LAB2)
    html = ppo_grpo_table_html(results)
    assert f"<td>{results['PPO'].phase('values').work_flops:.3g}</td>" in html
    assert "<td>values</td><td>" in html and html.count("&ndash;") == 3 * 4   # no critic in GRPO


def test_ppo_grpo_widget_shows_the_tables_and_the_library_error():
    box = ppo_grpo_widget()
    sliders, message = box.children[0].children[0].children, box.children[0].children[1]
    names = [s.description for s in sliders]
    wd = ppo_grpo_workdepth(num_prompts=32, group_size=16, ppo_epochs=2, num_minibatches=2,
                            processors=10**9, **LAB2)
    assert f"<th>{wd['PPO'].brent_rounds:.3g}</th>" in message.value
    assert "PPO: 512 prompts x 1 sample" in message.value
    sliders[names.index("B prompts")].value = 1
    sliders[names.index("G group")].value = 1
    sliders[names.index("minibatches")].value = 4               # 4 minibatches of 1 prompt
    assert "num_minibatches=4 exceeds num_prompts=1" in message.value
    assert "firebrick" in message.value and "Traceback" not in message.value


def test_phase_share_grid_equals_estimate_rl_step_at_sample_points():
    grid = {"actor": ("qwen2.5-7b",), "hardware": ("h100-sxm", "h20"), "algo": ("ppo", "grpo"),
            "response_len": (1024, 4096), "group_size": (16,)}
    rows = phase_share_grid(grid)
    for hw, algo, R in (("h20", "ppo", 1024), ("h100-sxm", "grpo", 4096)):
        est = estimate_rl_step(algo, **{**LAB6, "hardware": hw, "response_len": R})
        got = {r["phase"]: r["time_share"] for r in rows
               if (r["hardware"], r["algo"], r["response_len"]) == (hw, algo, R)}
        assert got.pop(GENERATION) == est.generation_time_share
        assert got == {p.name: p.time_s / est.time_s for p in est.phases}
    assert len(rows) == 8 + sum(len(estimate_rl_step(a, **LAB6).phases) * 4
                                for a in ("ppo", "grpo"))
    assert phase_share_grid({**grid, "group_size": (1,), "algo": ("grpo",)}) == []   # G >= 2


def test_phase_share_chart_and_profile_views_carry_the_library_values():
    grid = {"actor": ("qwen2.5-7b",), "hardware": ("h100-sxm", "h20"), "algo": ("ppo", "grpo"),
            "response_len": (4096,), "group_size": (16,)}
    spec = phase_share_grid_chart(phase_share_grid(grid), start={"algo": "grpo"}).to_dict()
    assert [p["name"] for p in spec["params"]] == list(PROFILE_GRID)
    h20 = estimate_rl_step("grpo", **{**LAB6, "hardware": "h20"})
    shown = {r["phase"]: float(r["time_share"]) for r in _csv_rows(spec)
             if (r["hardware"], r["algo"]) == ("h20", "grpo")}
    assert shown[GENERATION] == pytest.approx(h20.generation_time_share, rel=1e-3)
    assert shown["actor_update"] == pytest.approx(
        h20.phase("actor_update").time_s / h20.time_s, rel=1e-3)
    with pytest.raises(ValueError, match="rows is empty"):
        phase_share_grid_chart([])
    estimates, errors = profile_estimates(**{**LAB6, "group_size": 1})
    assert set(errors) == {"grpo", "dr_grpo", "dapo", "rloo"}           # G = 1: PPO, REINFORCE++
    assert "group_size must be an int >= 2" in str(errors["grpo"])
    estimates, errors = profile_estimates(**LAB6)
    assert list(estimates) == list(ALGOS) and errors == {}
    html = profile_table_html(estimates)
    assert f"<td>{estimates['ppo'].generation_time_share:.1%}</td>" in html
    charts = profile_chart(estimates).to_dict()["hconcat"]
    assert [c["title"] for c in charts] == ["grpo: share of the step", "ppo: share of the step"]
    values = {(r["phase"], r["measure"]): r["share"] for r in charts[1]["data"]["values"]}
    ppo = estimates["ppo"]
    assert values[("critic_update", "time")] == ppo.phase("critic_update").time_s / ppo.time_s


def test_profile_widget_shows_every_algorithm_and_the_library_errors():
    box = profile_widget()
    controls, message = box.children[0].children[0].children, box.children[0].children[1]
    names = [c.description for c in controls]
    est = estimate_rl_step("grpo", **LAB6)
    assert f"<td>{est.generation_time_share:.1%}</td>" in message.value
    assert all(f"<td>{a}</td>" in message.value for a in ALGOS)
    controls[names.index("G group")].value = 1                  # the GRPO family needs G >= 2
    assert "grpo, dr_grpo, dapo, rloo: group_size must be an int &gt;= 2" in message.value
    assert "<td>ppo</td>" in message.value                      # PPO still estimated
    controls[names.index("G group")].value = 16
    controls[names.index("model")].value = "llama-2-7b"         # 4,096 positions < 512 + 4,096
    assert "prompt_len + response_len = 4608 exceeds" in message.value
    assert "max_position_embeddings=4096" in message.value and message.value.count("<p>") == 1
    assert "<table>" not in message.value and "Traceback" not in message.value
