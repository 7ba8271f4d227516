"""Predicted against published (rlmperf_lite.sim.published): the table has every row of
sim/data/published_runs.json, its errors are (published - model) / published, its summary is the
median and worst of them, its published numbers are those of the library's own tables (NeMo-RL's
performance summary, verl's sync ablation, the staleness ablation of reproduce.py), and each row
names its source."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from rlmperf_lite.cost import VERL_SYNC_ROWS
from rlmperf_lite.sim.frameworks import NEMO_RL_PERF_V04
from rlmperf_lite.sim.published import (BASES, FAR_OFF, PUBLISHED_RUNS, load_published_runs,
                                        published_run_log, published_runs_table)
from rlmperf_lite.sim.reproduce import VERL_STALENESS_ABLATION, verl_ablation_workload
from rlmperf_lite.sim.runs import compare_run

DATA = Path(__file__).resolve().parents[1] / "rlmperf_lite" / "sim" / "data" / \
    "published_runs.json"
RAW = json.loads(DATA.read_text(encoding="utf-8"))
ROWS = {r["id"]: r for r in PUBLISHED_RUNS["rows"]}


@pytest.fixture(scope="module")
def table():
    return published_runs_table()


def test_the_table_has_every_row_of_the_data_file(table):
    assert [r.id for r in table.rows] == [r["id"] for r in RAW["rows"]]
    assert len(table.rows) == 40
    assert table.settings == {"train_efficiency": 0.4, "decode_efficiency": 0.6,
                              "sim_steps": None}


def test_errors_are_published_minus_model_over_published(table):
    checked = 0
    for r in table.rows:
        for model_s, error in ((r.estimated_s, r.estimate_error),
                               (r.simulated_s, r.simulation_error)):
            if model_s is None:
                assert error is None
            else:
                assert error == pytest.approx((r.published_s - model_s) / r.published_s)
                checked += 1
    assert checked > 40


def test_summary_is_the_median_and_worst_absolute_error(table):
    for kind in ("step", "weight_sync"):
        mine = [r for r in table.rows if r.kind == kind and not r.in_sample]
        for label in ("estimate", "simulation"):
            errs = {r.id: abs(getattr(r, f"{label}_error")) for r in mine
                    if getattr(r, f"{label}_error") is not None}
            got = table.summary[kind][label]
            assert got["rows"] == len(errs)
            assert got["median_abs_error"] == pytest.approx(float(np.median(list(errs.values()))))
            assert got["worst_abs_error"] == max(errs.values())
            assert errs[got["worst_row"]] == got["worst_abs_error"]
    # the sync rows the constants were fitted to (calibrate_weight_sync: 7B and 235B without
    # the checkpoint engine, 235B with it) are no test of the model and stay out
    assert {r.id for r in table.rows if r.in_sample} == {
        "verl-sync-qwen2.5-7b", "verl-sync-qwen3-235b-a22b",
        "verl-sync-qwen3-235b-a22b-checkpoint-engine"}


def test_why_is_given_exactly_where_a_model_is_far_off(table):
    for r in table.rows:
        far = [e for e in (r.estimate_error, r.simulation_error)
               if e is not None and abs(e) > FAR_OFF]
        if far:
            assert r.why is not None, r.id
        elif r.why is not None:          # else only a model that cannot set the run up
            assert r.why.startswith(("the models cannot", "the simulator cannot")), r.id
    # verl 128-card colocated baseline: gen 177.85 s of a 356.30-s step = 50% generating
    row = next(r for r in table.rows if r.id == "verl-fa-7b-colocated-128")
    assert row.published_generation_share == pytest.approx(177.85 / 356.30)
    assert "generation share 50% published" in row.why
    assert "the estimate gives every response the mean length" in row.why
    assert "assumed: prompt_len, mean_response_len, length_sigma" in row.why


def test_a_run_the_models_cannot_place_is_kept_with_the_reason(table):
    # NeMo-RL's DeepSeek-V3 generates at TP 32; the library's replicas stop at one node
    row = next(r for r in table.rows if r.id == "nemo-rl-deepseek-v3-on-policy")
    assert (row.published_s, row.gpus) == (154.0, 256)
    assert row.estimated_s is None and row.simulated_s is None
    assert "the models cannot set this run up" in row.why and "TP 32" in row.why


def test_the_json_is_strict(table):
    d = json.loads(json.dumps(table.as_dict(), allow_nan=False))
    assert len(d["rows"]) == 40 and "comparison" not in d["rows"][0]
    assert d["summary"]["step"]["simulation"]["rows"] > 20


# ---- one home for the published numbers -------------------------------------------------------

def test_nemo_rl_rows_are_loaded_from_the_performance_summary():
    raw = [r for r in RAW["rows"] if r.get("published_from", {}).get("table")
           == "nemo-rl-perf-v0.4.json"]
    assert len(raw) == 10
    for r in raw:
        assert "step" not in r["published"] and "gpus" not in r   # not copied
        ref = r["published_from"]
        assert (ROWS[r["id"]]["gpus"], ROWS[r["id"]]["published"]["step"]) == \
            NEMO_RL_PERF_V04["rows"][ref["row"]][ref["pair"]]
    # NeMo-RL v0.4, Llama3.1-8B on 16 H100s: 97.7 s on-policy, 74.6 s one step off
    assert ROWS["nemo-rl-llama3.1-8b-on-policy"]["published"]["step"] == 97.7
    assert ROWS["nemo-rl-llama3.1-8b-one-step-off"]["published"]["step"] == 74.6


def test_sync_rows_are_loaded_from_the_verl_sync_table():
    got = {(r["model"], r["published_from"]["checkpoint_engine"]): r["published"]["weight_sync"]
           for r in ROWS.values() if r["kind"] == "weight_sync"}
    want = {}
    for model, _, train, rollout, plain_s, engine_s in VERL_SYNC_ROWS:
        want[(model, False)], want[(model, True)] = plain_s, engine_s
    assert got == want
    assert got[("Qwen3-235B-A22B", False)] == 58.57         # fully_async.md: 64:64, 58.57 s


def test_the_staleness_ablation_has_its_home_here():
    # verl fully_async.md, '128-card Stale Ablation Experiment' and the colocated baseline
    assert VERL_STALENESS_ABLATION["step_s"] == {0.0: 231.34, 0.1: 171.30, 0.3: 146.11,
                                                 0.5: 150.63}
    assert VERL_STALENESS_ABLATION["colocated_sync_step_s"] == 356.30
    w = {k: f["value"] for k, f in ROWS["verl-fa-7b-async-64-64-s0.5"]["workload"].items()}
    wl = verl_ablation_workload()            # reproduce.py's workload for the same runs
    assert (w["prompts"], w["group_size"], w["prompt_len"], w["mean_response_len"],
            w["max_response_len"], w["length_sigma"]) == \
        (wl.prompts, wl.group_size, wl.prompt_len, wl.mean_response_len, wl.max_response_len,
         wl.length_sigma)


def test_derived_prompt_lengths_follow_from_the_stated_figures():
    # NeMo-RL: tokens/s/GPU x GPUs x step / G-GBS - mean generated = the prompt
    for r in ROWS.values():
        if not r["id"].startswith("nemo-rl-") or not r["id"].endswith("on-policy"):
            continue
        w = {k: f["value"] for k, f in r["workload"].items()}
        tokens = r["published_other"]["tokens_per_s_per_gpu"] * r["gpus"] * \
            r["published"]["step"]
        assert w["prompt_len"] == round(tokens / (w["prompts"] * w["group_size"])
                                        - w["mean_response_len"])
        assert r["workload"]["prompt_len"]["basis"].startswith("derived")
    assert ROWS["nemo-rl-llama3.1-8b-on-policy"]["workload"]["prompt_len"]["value"] == 132


# ---- sources and bases -------------------------------------------------------------------------

def test_every_row_names_its_source():
    bib = (Path(__file__).resolve().parents[1] / "book" / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    for src in PUBLISHED_RUNS["sources"].values():
        assert src["doc"] and re.fullmatch(r"[0-9a-f]{8}", src["commit"])
        assert src["url"].startswith("https://github.com/") and src["cite"] in keys
    for r in PUBLISHED_RUNS["rows"]:
        assert r["source"]["doc"] in PUBLISHED_RUNS["sources"] and r["source"]["section"]
        assert r["tables"] and all(t.strip() for t in r["tables"])


def test_every_workload_field_says_how_it_is_known():
    for r in PUBLISHED_RUNS["rows"]:
        for name, f in r.get("workload", {}).items():
            assert f["basis"].split(":")[0] in BASES, (r["id"], name)
            assert len(f["basis"]) > len("assumed: ")
    # the mean response lengths verl's documents never state are marked assumed
    assert all(r["workload"]["mean_response_len"]["basis"].startswith("assumed")
               for r in PUBLISHED_RUNS["rows"] if r["id"].startswith("verl-f"))


# ---- one path: a row is a run log -------------------------------------------------------------

def test_a_row_is_a_run_log_in_verls_timer_names(table):
    row = ROWS["verl-fa-7b-colocated-128"]
    log = published_run_log(row)
    assert log.timing_s == ({"timing_s/step": 356.30, "timing_s/gen": 177.85,
                             "timing_s/old_log_prob": 53.92,
                             "timing_s/update_actor": 113.81},)
    assert log.metrics == ({"response_length/max": 28672.0},) and log.kind == "table"
    c = compare_run(log, model="qwen2.5-7b", hardware="h20", gpus=128, algo="dapo",
                    prompts=512, group_size=16, prompt_len=512, response_len=1500,
                    warmup_steps=0)
    got = next(r for r in table.rows if r.id == row["id"])
    step = next(r for r in c.rows if r.phase == "step")
    assert (got.estimated_s, got.simulated_s) == pytest.approx((step.estimated_s,
                                                                 step.simulated_s))


def test_an_asynchronous_row_has_no_estimate(table):
    row = next(r for r in table.rows if r.id == "verl-fa-7b-async-64-64-s0.5")
    assert row.estimated_s is None and row.simulated_s > 0
    assert row.layout.startswith("preset 'verl-fully-async' (rollout 64, train 64; async")
    assert any(n.startswith("no estimate:") for n in row.comparison.notes)


# ---- bad input --------------------------------------------------------------------------------

def test_bad_data_files_name_the_file_and_row(tmp_path):
    rec = json.loads(DATA.read_text(encoding="utf-8"))
    dup = {**rec, "rows": rec["rows"][:2] + rec["rows"][:1]}
    (tmp_path / "dup.json").write_text(json.dumps(dup))
    with pytest.raises(ValueError, match=r"dup.json: row 2 \('verl-fa-7b-colocated-32'\): "
                                         r"duplicate id"):
        load_published_runs(tmp_path / "dup.json")
    bad = json.loads(json.dumps(rec))
    bad["rows"][0]["workload"]["prompts"]["basis"] = "guessed"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad.json: row 0 .*workload prompts's basis must "
                                         r"start with one of \('stated', 'derived', 'assumed'\)"):
        load_published_runs(tmp_path / "bad.json")
    (tmp_path / "no.json").write_text("{")
    with pytest.raises(ValueError, match="no.json: not a readable JSON file"):
        load_published_runs(tmp_path / "no.json")


def test_bad_settings_name_the_argument():
    with pytest.raises(ValueError, match="train_efficiency must be"):
        published_runs_table(train_efficiency=0)
    with pytest.raises(ValueError, match="sim_steps must be None or an int >= 2"):
        published_runs_table(sim_steps=1)
