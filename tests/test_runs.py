"""A training log against the models (rlmperf_lite.sim.runs): small logs written here in each
framework's format, from the metric names and print statements of its sources (recorded in
rlmperf_lite/sim/data/run_formats.json), with made-up seconds, not copied from anyone's run."""
import json
import math

import numpy as np
import pytest

from rlmperf_lite.cli import main
from rlmperf_lite.cost import estimate_rl_step
from rlmperf_lite.sim import Workload, simulate, steady_steps
from rlmperf_lite.sim.from_cost import system_from_cost
from rlmperf_lite.sim.runs import (BOOK_PHASES, RUN_FORMATS, RunLog, compare_run,
                                   estimated_phase_s, read_run_log, simulated_phase_s)

# verl's timer names (ray_trainer.py's marked_timer, metric_utils.compute_timing_metrics adds
# "timing_s/"); step 1 is slow (warm-up), steps 2-5 have medians gen 30.2, step 54.2
VERL_STEPS = {1: dict(gen=45.0, step=80.0), 2: dict(gen=30.0, step=54.0),
              3: dict(gen=30.4, step=54.4), 4: dict(gen=29.6, step=53.6),
              5: dict(gen=31.0, step=55.0)}
VERL_FIXED = dict(reward=1.25, old_log_prob=4.0, ref=3.875, adv=0.0625, update_actor=12.0,
                  update_weights=2.5)
P, R, B, G = 256, 600, 64, 8                         # the workload the logs state


def verl_metrics(step, steps=VERL_STEPS, drop=(), **timers):
    """One step's metrics as verl's fit() logs them: timing_s/*, timing_per_token_ms/*,
    response_length/*, prompt_length/*, perf/* (metric_utils.py) and an actor metric."""
    t = {**VERL_FIXED, **steps[step], **timers}
    data = {f"timing_s/{k}": v for k, v in t.items() if k not in drop}
    data["timing_per_token_ms/gen"] = t["gen"] * 1000 / (B * G * R)
    data.update({"response_length/mean": R + (1 if step % 2 else -1), "response_length/max": 1024.0,
                 "prompt_length/mean": float(P), "perf/total_num_tokens": B * G * (P + R),
                 "perf/time_per_step": t["step"],
                 "perf/throughput": B * G * (P + R) / (t["step"] * 8), "actor/entropy": 0.5})
    return data


def write_verl_jsonl(path, steps=VERL_STEPS, **kw):
    """verl's FileLogger: one {"step": step, "data": metrics} per line (tracking.py)."""
    lines = [json.dumps({"step": 0, "data": {"val-core/gsm8k/reward/mean@1": 0.25}})]
    lines += [json.dumps({"step": s, "data": verl_metrics(s, steps, **kw)}) for s in steps]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_verl_console(path, steps=VERL_STEPS, **kw):
    """verl's LocalLogger: 'step:N - key:value:.3f - ...' (aggregate_logger.py), as Ray's
    driver prints it, between other output."""
    lines = ["(TaskRunner pid=2114) Training Progress:   0%|          | 0/5"]
    for s in steps:
        body = " - ".join(f"{k}:{v:.3f}" for k, v in verl_metrics(s, steps, **kw).items())
        lines += [f"(TaskRunner pid=2114) step:{s} - {body}", "(TaskRunner pid=2114) done"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


NEMO_STEPS = [dict(total_step_time=80.0, generation=40.0), dict(total_step_time=60.0,
              generation=30.0), dict(total_step_time=61.0, generation=31.0)]
NEMO_FIXED = {"policy_training": 15.0, "policy_and_reference_logprobs": 8.0,
              "prepare_for_generation/total": 3.0,
              "prepare_for_generation/transfer_and_update_weights": 2.0, "training_prep": 2.0,
              "logprob_inference_prep": 1.5, "reward_calculation": 0.5,
              "advantage_calculation": 0.1, "data_processing": 0.4}


NEMO_LENGTHS = [R + 5, R, R + 2]                      # medians of steps 2-3: R + 1


def write_nemo_console(path, steps=NEMO_STEPS, drop=(), epochs=1):
    """grpo_train's prints (grpo.py): the step header, the training results with the mean
    generation length, then the timing block, largest first; a validation block at the end."""
    lines = ["Initialized WandbLogger for project grpo"]
    for e in range(epochs):
        lines.append(f"\n{'=' * 25} Epoch {e + 1}/{epochs} {'=' * 25}")
        for i, step in enumerate(steps):
            t = {k: v for k, v in {**NEMO_FIXED, **step}.items() if k not in drop}
            total = t.pop("total_step_time")
            lines += [f"\n{'=' * 25} Step {i + 1}/{len(steps)} {'=' * 25}",
                      "▶ Preparing batch...", "\n📊 Training Results:", "  • Loss: 0.0123",
                      "  • Avg Reward: 0.4500", f"  • Mean Generation Length: {NEMO_LENGTHS[i]:.4f}",
                      "\n⏱️  Timing:", f"  • Total step time: {total:.2f}s"]
            lines += [f"  • {k}: {v:.2f}s ({v / total * 100:.1f}%)"
                      for k, v in sorted(t.items(), key=lambda kv: kv[1], reverse=True)]
    lines += ["\n  ⏱️  Validation Timing:", "    • Total validation time: 12.00s"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


MODEL = dict(model="qwen2.5-7b", hardware="h100", gpus=8)


# ---- reading ----------------------------------------------------------------------------------

def test_verl_jsonl_round_trip(tmp_path):
    log = read_run_log(write_verl_jsonl(tmp_path / "metrics.jsonl"))
    assert (log.format, log.kind, log.steps) == ("verl", "jsonl", (1, 2, 3, 4, 5))
    # the validation line at step 0 has no timer; timing_per_token_ms/* is not a timer in s
    assert log.timing_s[2] == {f"timing_s/{k}": v for k, v in
                               {**VERL_FIXED, **VERL_STEPS[3]}.items()}
    assert log.metrics[2] == {"response_length/mean": R + 1, "response_length/max": 1024.0,
                              "prompt_length/mean": P, "perf/total_num_tokens": B * G * (P + R),
                              "perf/throughput": B * G * (P + R) / (54.4 * 8)}


def test_verl_console_round_trip_is_rounded_to_three_decimals(tmp_path):
    log = read_run_log(write_verl_console(tmp_path / "stdout.log"))
    assert (log.format, log.kind, log.steps) == ("verl", "console", (1, 2, 3, 4, 5))
    assert log.timing_s[0]["timing_s/adv"] == 0.062          # 0.0625 printed with :.3f
    assert log.timing_s[1]["timing_s/gen"] == 30.0
    assert log.metrics[0]["perf/throughput"] == round(B * G * (P + R) / (80.0 * 8), 3)


def test_nemo_console_round_trip(tmp_path):
    log = read_run_log(write_nemo_console(tmp_path / "grpo.log", epochs=2))
    # the header restarts each epoch: steps are numbered in order; validation is no step
    assert (log.format, log.kind, log.steps) == ("nemo-rl", "console", (1, 2, 3, 4, 5, 6))
    assert log.timing_s[1] == {**NEMO_FIXED, **NEMO_STEPS[1]}
    # the mean generation length printed before a step's timing block belongs to it
    assert [m["mean_gen_tokens_per_sample"] for m in log.metrics] == NEMO_LENGTHS * 2


@pytest.mark.parametrize("writer, fmt", [(write_verl_jsonl, "verl"), (write_verl_console, "verl"),
                                         (write_nemo_console, "nemo-rl")])
def test_format_is_detected_and_can_be_named(tmp_path, writer, fmt):
    path = writer(tmp_path / "run.log")
    assert read_run_log(path).format == fmt
    assert read_run_log(path, format=fmt) == read_run_log(path)
    other = {"verl": "nemo-rl", "nemo-rl": "verl"}[fmt]
    with pytest.raises(ValueError, match=f"run.log: no step with {other} timers"):
        read_run_log(path, format=other)


# ---- mapping ----------------------------------------------------------------------------------

def test_verl_timers_map_onto_the_books_phases(tmp_path):
    log = read_run_log(write_verl_jsonl(tmp_path / "m.jsonl", testing=20.0))
    assert log.phase_keys() == {"rollout": ["timing_s/gen"], "reward": ["timing_s/reward"],
                                "old_logprobs": ["timing_s/old_log_prob"],
                                "ref_logprobs": ["timing_s/ref"],
                                "advantages": ["timing_s/adv"],
                                "actor_update": ["timing_s/update_actor"],
                                "weight_sync": ["timing_s/update_weights"],
                                "step": ["timing_s/step"]}
    assert log.unmapped == ("timing_s/testing",)
    assert log.phase_seconds()["rollout"].tolist() == [45.0, 30.0, 30.4, 29.6, 31.0]
    assert set(RUN_FORMATS["verl"]["timing"]) == {
        f"timing_s/{k}" for k in ("gen", "reward", "old_log_prob", "ref", "values", "adv",
                                  "update_critic", "update_actor", "update_weights", "step")}


def test_older_verl_syncs_inside_gen_and_ppo_logs_its_critic(tmp_path):
    # before timing_s/update_weights, the sharding manager synced the weights inside gen
    log = read_run_log(write_verl_jsonl(tmp_path / "m.jsonl", drop=("update_weights",),
                                        values=2.0, update_critic=6.0))
    rows = log.phase_keys()
    assert rows["rollout+weight_sync"] == ["timing_s/gen"] and "weight_sync" not in rows
    assert rows["critic_values"] == ["timing_s/values"]
    assert rows["critic_update"] == ["timing_s/update_critic"]


def test_nemo_timers_map_onto_the_books_phases(tmp_path):
    log = read_run_log(write_nemo_console(tmp_path / "grpo.log"))
    rows = log.phase_keys()
    assert rows["old_logprobs+ref_logprobs"] == ["policy_and_reference_logprobs"]
    assert rows["switch"] == ["logprob_inference_prep", "training_prep"]
    assert log.phase_seconds()["switch"].tolist() == [3.5, 3.5, 3.5]
    assert rows["weight_sync"] == ["prepare_for_generation/total"]
    assert log.unmapped == ("data_processing", "prepare_for_generation/transfer_and_update_weights")
    # grpo.py before advantage_calculation: reward_calculation computed the advantages too
    old = read_run_log(write_nemo_console(tmp_path / "old.log", drop=("advantage_calculation",)))
    assert old.phase_keys()["reward+advantages"] == ["reward_calculation"]


def test_every_mapped_phase_is_a_book_phase():
    for spec in RUN_FORMATS.values():
        phases = {p for ps in spec["timing"].values() for p in ps}
        phases |= {p for d in spec["contains_when_absent"].values() for p in d.values()}
        assert phases <= set(BOOK_PHASES)
        assert set(spec["sources"]) and all(s.strip() for s in spec["sources"].values())


# ---- the comparison ---------------------------------------------------------------------------

def test_errors_are_measured_minus_model_over_measured(tmp_path):
    c = compare_run(write_verl_jsonl(tmp_path / "m.jsonl"), group_size=G, **MODEL)
    assert c.steps_used == (2, 3, 4, 5)                 # warmup_steps=1 drops step 1
    rows = {r.phase: r for r in c.rows}
    assert rows["rollout"].measured_s == pytest.approx(30.2)   # median of 30, 30.4, 29.6, 31
    assert rows["step"].measured_s == pytest.approx(54.2)
    for r in c.rows:
        for model_s, error in ((r.estimated_s, r.estimate_error),
                               (r.simulated_s, r.simulation_error)):
            if model_s is not None:
                assert error == pytest.approx((r.measured_s - model_s) / r.measured_s)
    # a rule-based reward is no GPU work in either model: no number, and a note says so
    assert rows["reward"].estimated_s is None and rows["reward"].estimate_error is None
    assert any(n.startswith("reward: a rule-based reward") for n in c.notes)


def test_the_workload_and_models_are_those_the_log_states(tmp_path):
    c = compare_run(write_verl_jsonl(tmp_path / "m.jsonl"), group_size=G, **MODEL)
    # the logged means (medians over steps 2-5), B = tokens / (P + R) / G
    assert (c.inputs["prompt_len"], c.inputs["response_len"], c.inputs["prompts"]) == (P, R, B)
    assert c.inputs["kl_coef"] > 0 and c.inputs["recompute_old_logprobs"]   # ref, old logged
    est = estimate_rl_step("grpo", actor="qwen2.5-7b", hardware="h100", prompts=B,
                           group_size=G, prompt_len=P, response_len=R, gpus=8, kl_coef=0.001,
                           train_efficiency=0.4, decode_efficiency=0.6)
    by_name = {p.name: p.time_s for p in est.phases}
    rows = {r.phase: r for r in c.rows}
    assert rows["rollout"].estimated_s == pytest.approx(by_name["rollout_prefill"]
                                                       + by_name["rollout_decode"])
    assert rows["actor_update"].estimated_s == pytest.approx(by_name["actor_update"])
    assert rows["step"].estimated_s == pytest.approx(est.time_s)
    wl = Workload(prompts=B, group_size=G, prompt_len=P, mean_response_len=R,
                  max_response_len=1024)                 # the log's response_length/max
    system = system_from_cost("qwen2.5-7b", "h100", wl, gpus=8, kl_coef=0.001)
    sim = simulate(system, wl, steady_steps(system))          # the book's steady window
    assert rows["step"].simulated_s == pytest.approx(sim.step_time_s)
    assert rows["weight_sync"].simulated_s == pytest.approx(sim.system.weight_sync_s)


def test_not_inferred_names_the_defaults(tmp_path):
    c = compare_run(write_verl_jsonl(tmp_path / "m.jsonl"), prompts=B, **MODEL)
    assert c.inputs["group_size"] == G and "group_size" in c.inferred
    text = " ".join(c.not_inferred)
    for word in ("train_efficiency=0.4", "decode_efficiency=0.6", "sequences per GPU",
                 "rollout tp=1", "colocated", "algo='grpo'"):
        assert word in text
    assert "max_response_len" not in text               # the log gives response_length/max


def test_ppo_and_no_recompute_are_read_from_the_timers(tmp_path):
    c = compare_run(write_verl_jsonl(tmp_path / "m.jsonl", drop=("old_log_prob",), values=2.0,
                                     update_critic=6.0), group_size=1, **MODEL)
    assert c.inputs["algo"] == "ppo" and not c.inputs["recompute_old_logprobs"]
    assert {"critic_values", "critic_update"} <= {r.phase for r in c.rows}
    assert all(r.estimated_s is not None for r in c.rows if r.phase.startswith("critic"))


def test_nemo_run_needs_the_batch_and_prompt_length(tmp_path):
    path = write_nemo_console(tmp_path / "grpo.log")
    with pytest.raises(ValueError, match=r"prompt_len: .*grpo.log logs no prompt len.*"
                                         r"pass prompt_len$"):
        compare_run(path, **MODEL)
    with pytest.raises(ValueError, match=r"prompts and group_size: .*does not log the batch"):
        compare_run(path, prompt_len=P, **MODEL)
    c = compare_run(path, prompt_len=P, prompts=B, group_size=G, **MODEL)
    assert c.inputs["response_len"] == R + 1             # median of R, R + 2 (step 1 dropped)
    rows = {r.phase: r for r in c.rows}
    # the fused row is set against the estimate's old + reference passes
    est = estimated_phase_s(estimate_rl_step(
        "grpo", actor="qwen2.5-7b", hardware="h100", prompts=B, group_size=G, prompt_len=P,
        response_len=R + 1, gpus=8, kl_coef=0.001, train_efficiency=0.4, decode_efficiency=0.6))
    assert rows["old_logprobs+ref_logprobs"].estimated_s == pytest.approx(
        est["old_logprobs"] + est["ref_logprobs"])
    assert rows["switch"].estimated_s is None and rows["switch"].simulated_s > 0
    assert "console values are rounded to 2 decimals" in c.notes


def test_json_is_strict_and_round_trips(tmp_path):
    c = compare_run(write_verl_console(tmp_path / "out.log"), group_size=G, **MODEL)
    d = json.loads(json.dumps(c.as_dict(), allow_nan=False))
    assert d["rows"][0]["phase"] == "rollout" and d["rows"][0]["logged_as"] == ["timing_s/gen"]
    assert d["inputs"]["prompts"] == B and d["kind"] == "console"


def test_simulated_phases_are_the_timelines():
    wl = Workload(prompts=8, group_size=4, prompt_len=128, mean_response_len=300,
                  max_response_len=1024)
    r = simulate(system_from_cost("qwen2.5-7b", "h100", wl, gpus=8), wl, 6)
    s = simulated_phase_s(r)
    window = range(r.warmup_steps, 6)
    assert s["rollout"] == pytest.approx(np.mean([r.generation_span_s(k) for k in window]))
    assert s["step"] == r.step_time_s and s["weight_sync"] == pytest.approx(r.system.weight_sync_s)
    assert s["advantages"] == 0.0 and "ref_logprobs" not in s          # no KL, no reference
    with pytest.raises(ValueError, match="result must be the SimResult of a run"):
        simulated_phase_s("not a result")


# ---- bad input --------------------------------------------------------------------------------

def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"log file '.*nope.jsonl' does not exist"):
        read_run_log(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="is a directory"):
        read_run_log(tmp_path)
    (tmp_path / "empty.log").write_text(" \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'.*empty.log' is empty"):
        read_run_log(tmp_path / "empty.log")
    (tmp_path / "events.out").write_bytes(b"\x89\xff\xfe\x00tfevents")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_run_log(tmp_path / "events.out")
    (tmp_path / "other.log").write_text("epoch 1 loss 0.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"other.log: the format is none of \('verl', "
                                         r"'nemo-rl'\).*pass format="):
        read_run_log(tmp_path / "other.log")
    with pytest.raises(ValueError, match=r"format must be one of \('verl', 'nemo-rl'\), got 'trl'"):
        read_run_log(tmp_path / "other.log", format="trl")
    with pytest.raises(ValueError, match="path must be the path of a log file, got None"):
        read_run_log(None)


def test_a_log_without_timers_is_refused(tmp_path):
    path = tmp_path / "val.jsonl"
    path.write_text(json.dumps({"step": 0, "data": {"val-core/reward/mean@1": 0.5}}) + "\n")
    with pytest.raises(ValueError, match=r"val.jsonl: no step with verl timers "
                                         r"\('timing_s/\.\.\.' metrics\)"):
        read_run_log(path)


@pytest.mark.parametrize("writer, line, bad, field", [
    (write_verl_jsonl, 4, dict(gen=math.nan), "timing_s/gen"),        # json.dumps: NaN
    (write_verl_console, 6, dict(step=math.inf), "timing_s/step"),
    (write_verl_jsonl, 2, dict(update_actor=-1.0), "timing_s/update_actor"),
])
def test_non_finite_or_negative_timers_name_the_line_and_field(tmp_path, writer, line, bad,
                                                               field):
    step = {2: 1, 4: 3, 6: 3}[line]
    steps = {**VERL_STEPS, step: {**VERL_STEPS[step], **bad}}
    with pytest.raises(ValueError, match=rf"run.log:{line}: timer '{field}' is .*not a finite"):
        read_run_log(writer(tmp_path / "run.log", steps=steps))


def test_null_and_nan_timers_of_the_other_writers(tmp_path):
    # verl's FileLogger writes NaN as null (orjson); NeMo-RL prints nan with :.2f
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1, "data": {"timing_s/gen": None}}) + "\n")
    with pytest.raises(ValueError, match=r"m.jsonl:1: timer 'timing_s/gen' is None"):
        read_run_log(path)
    nemo = write_nemo_console(tmp_path / "g.log", steps=[dict(total_step_time=60.0,
                                                              generation=math.nan)])
    with pytest.raises(ValueError, match=r"g.log:\d+: timer 'generation' is nan"):
        read_run_log(nemo)


def test_bad_arguments_name_the_argument(tmp_path):
    path = write_verl_jsonl(tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match=r"warmup_steps=5 leaves none of the 5 steps.*"
                                         r"pass a smaller warmup_steps"):
        compare_run(path, group_size=G, warmup_steps=5, **MODEL)
    with pytest.raises(ValueError, match=r"group_size: .*logs the tokens per step "
                                         r"\(perf/total_num_tokens\).*pass group_size"):
        compare_run(path, **MODEL)
    with pytest.raises(ValueError, match="gpus must be an int >= 1, got 0"):
        compare_run(path, group_size=G, **{**MODEL, "gpus": 0})
    with pytest.raises(ValueError, match="algo must be one of"):
        compare_run(path, group_size=G, algo="trpo", **MODEL)
    with pytest.raises(ValueError, match="response_len must be an int >= 1"):
        compare_run(path, group_size=G, response_len=0, **MODEL)


# ---- the command line -------------------------------------------------------------------------

def test_cli_prints_the_table_and_strict_json(tmp_path, capsys):
    path = str(write_verl_jsonl(tmp_path / "m.jsonl"))
    flags = ["compare-run", path, "--model", "qwen2.5-7b", "--hardware", "h100", "--gpus", "8",
             "--group-size", "8"]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert "median of 4 of 5 steps (2-5)" in out and "not inferred (defaults):" in out
    rollout = next(line for line in out.splitlines() if line.startswith("rollout"))
    assert rollout.split()[1] == "30.200"
    assert main(flags + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = compare_run(path, group_size=8, **MODEL).as_dict()
    assert got == json.loads(json.dumps(want, allow_nan=False))


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    path = str(write_verl_jsonl(tmp_path / "m.jsonl"))
    assert main(["compare-run", path, "--model", "qwen2.5-7b", "--hardware", "h100",
                 "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlmperf: error: --group-size:")
    assert "--group-size" in err[0]
    assert main(["compare-run", str(tmp_path / "none.log"), "--model", "qwen2.5-7b",
                 "--hardware", "h100", "--gpus", "8"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_runlog_is_a_plain_record(tmp_path):
    log = read_run_log(write_verl_jsonl(tmp_path / "m.jsonl"))
    assert isinstance(log, RunLog) and log.path.endswith("m.jsonl")
    assert compare_run(log, group_size=G, **MODEL).log == log.path


def test_notes_flag_what_the_log_contradicts(tmp_path):
    path = write_verl_jsonl(tmp_path / "m.jsonl")
    # perf/throughput = tokens / (step x n_gpus) was logged for 8 GPUs
    c = compare_run(path, group_size=G, **{**MODEL, "gpus": 6})
    assert "perf/throughput implies 8.0 GPUs, not gpus=6" in c.notes
    c = compare_run(path, prompts=32, group_size=G, **MODEL)
    assert "prompts x group_size = 256 but the log's tokens per step / (P + R) give 512 " \
           "samples" in c.notes
    assert c.inputs["prompts"] == 32                        # the arguments win


# ---- a framework's layout ---------------------------------------------------------------------

def test_a_preset_sets_the_simulated_layout_and_drops_the_estimate(tmp_path):
    path = write_verl_jsonl(tmp_path / "m.jsonl", drop=("old_log_prob", "ref"))
    c = compare_run(path, group_size=G, preset="verl-fully-async",
                    layout=dict(rollout_share=0.5, staleness=0.5, minibatches=4), **MODEL)
    assert c.inputs["mode"] == "async" and c.inputs["preset"] == "verl-fully-async"
    assert all(r.estimated_s is None for r in c.rows) and c.estimated_phases_s == {}
    assert any(n.startswith("no estimate: estimate_rl_step models the colocated") for n in c.notes)
    assert "the layout: preset 'verl-fully-async' (rollout 4, train 4; async, staleness 0.5)" \
        in " ".join(c.not_inferred)
    # a colocated preset keeps the estimate, at the given engine tp
    c = compare_run(path, group_size=G, preset="verl", layout=dict(engine_tp=2), **MODEL)
    assert c.estimated_phases_s and "rollout tp=2 (given)" in c.not_inferred


def test_async_rollout_is_the_trainers_wait():
    # verl's fully-async gen timer: the trainer waiting for samples (step ~ gen + update_actor)
    wl = Workload(prompts=8, group_size=4, prompt_len=128, mean_response_len=300,
                  max_response_len=1024)
    system = system_from_cost("qwen2.5-7b", "h100", wl, placement="disaggregated", gpus=8,
                              rollout_gpus=4, mode="async", staleness=1.0)
    r = simulate(system, wl, 8)
    s = simulated_phase_s(r)
    window = range(r.warmup_steps, 8)
    busy = sum(iv.end_s - iv.start_s for iv in r.intervals
               if iv.step in window and iv.pool == system.placement["actor"]) / len(window)
    assert s["rollout"] == pytest.approx(max(0.0, r.step_time_s - busy - s["weight_sync"]))
    assert s["step"] == r.step_time_s


def test_given_reference_and_recompute_override_the_timers(tmp_path):
    path = write_verl_jsonl(tmp_path / "m.jsonl")            # old_log_prob and ref logged
    c = compare_run(path, group_size=G, kl_coef=0.0, recompute_old_logprobs=False, **MODEL)
    assert c.inputs["kl_coef"] == 0.0 and not c.inputs["recompute_old_logprobs"]
    assert "reference" not in c.inferred and "recompute_old_logprobs" not in c.inferred
    rows = {r.phase: r for r in c.rows}
    assert rows["old_logprobs"].estimated_s is None and rows["ref_logprobs"].simulated_s is None


def test_bad_presets_and_layouts_name_the_argument(tmp_path):
    path = write_verl_jsonl(tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match="preset must be one of"):
        compare_run(path, group_size=G, preset="verl-v9", **MODEL)
    with pytest.raises(ValueError, match=r"layout=\{'staleness': 1\} sets a preset's knobs: "
                                         r"pass preset= too"):
        compare_run(path, group_size=G, layout={"staleness": 1}, **MODEL)
    with pytest.raises(ValueError, match=r"layout: \['kl_coef'\] are arguments of compare_run"):
        compare_run(path, group_size=G, preset="verl", layout={"kl_coef": 0.1}, **MODEL)
    with pytest.raises(ValueError, match=r"layout: \['tp'\] are no knobs of a preset"):
        compare_run(path, group_size=G, preset="verl", layout={"tp": 2}, **MODEL)
    with pytest.raises(ValueError, match="recompute_old_logprobs must be True or False, got .yes."):
        compare_run(path, group_size=G, recompute_old_logprobs="yes", **MODEL)
