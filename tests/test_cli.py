"""The command line: JSON output equals the library's, bad input is one clear line."""
import json
import subprocess
import sys
import time
import warnings

import pytest

from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.cost import grpo_step_workdepth
from test_runs import write_verl_jsonl          # a verl log written from the published names


def rlmperf(*args):
    return subprocess.run([sys.executable, "-m", "rlmperf_lite", *args], capture_output=True,
                          text=True)


def test_workdepth_json_equals_the_function():
    out = rlmperf("workdepth", "--json", "--response-len", "7", "--processors", "1000")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = grpo_step_workdepth(**TinyLMConfig().workdepth_kwargs(), num_prompts=32, group_size=4,
                               prompt_len=6, response_len=7, processors=1000).as_dict()
    assert got["phases"] == want["phases"] and got["work_flops"] == want["work_flops"]


def test_workdepth_table_lists_every_phase():
    out = rlmperf("workdepth")
    assert out.returncode == 0
    for phase in ("prefill", "decode", "train_forward", "train_backward", "optimizer", "total"):
        assert phase in out.stdout


def test_bad_input_is_one_clear_line_and_exit_2():
    out = rlmperf("workdepth", "--num-heads", "5")
    assert out.returncode == 2
    assert out.stderr.strip() == "rlmperf: error: --num-heads=5 must divide --hidden-size=64"
    out = rlmperf("train", "--group-size", "1", "--steps", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "rlmperf: error: --group-size must be an int >= 2, got 1"


def test_short_train_run_prints_steps_then_summary():
    out = rlmperf("train", "--steps", "3", "--json")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.strip().splitlines()]
    assert [r["step"] for r in lines[:-1]] == [0, 1, 2]
    assert {"final_reward_mean", "eval_accuracy", "wall_s"} <= set(lines[-1])


def test_train_on_ray_matches_the_in_process_run():
    """`rlmperf train --runtime ray` (a local Ray, one rollout worker, sync mode) logs the same
    rewards and losses as the in-process loop for the same seed; --address needs --runtime."""
    local = rlmperf("train", "--steps", "2", "--json")
    ray = rlmperf("train", "--steps", "2", "--json", "--runtime", "ray")
    assert local.returncode == 0 and ray.returncode == 0, ray.stderr[-2000:]
    rows = [[json.loads(x) for x in out.stdout.strip().splitlines()[:-1]] for out in (local, ray)]
    for a, b in zip(*rows):
        assert a["step"] == b["step"] and a["reward_mean"] == b["reward_mean"]
        assert a["loss"] == b["loss"]
    out = rlmperf("train", "--steps", "1", "--address", "auto")
    assert out.returncode == 2 and "--address" in out.stderr and "Traceback" not in out.stderr


def test_train_on_ray_async_matches_the_in_process_async_loop():
    """`--ray-mode async --staleness 1` logs the in-process asynchronous loop's rewards and
    losses at staleness 1; async without --staleness, or --staleness with another mode or without
    --runtime ray, is one clear line naming the option."""
    from rlmperf_lite.rl import AsyncGRPOConfig, train_async_grpo
    out = rlmperf("train", "--steps", "3", "--json", "--runtime", "ray", "--ray-mode", "async",
                  "--staleness", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(x) for x in out.stdout.strip().splitlines()[:-1]]
    want = train_async_grpo(AsyncGRPOConfig(steps=3, staleness=1)).history
    assert [r["staleness"] for r in rows] == [0, 1, 1]
    for a, b in zip(rows, want):
        assert a["reward_mean"] == b["reward_mean"] and a["loss"] == b["loss"]
    for args, name in ((("--runtime", "ray", "--ray-mode", "async"), "--staleness"),
                       (("--runtime", "ray", "--ray-mode", "sync", "--staleness", "2"),
                        "staleness"),
                       (("--staleness", "1"), "--staleness"),
                       (("--runtime", "ray", "--algo", "dapo"), "use --runtime local"),
                       (("--runtime", "ray", "--address", "127.0.0.1:1"), "address"),
                       (("--runtime", "ray", "--address", ""), "address"),
                       (("--runtime", "ray", "--cpus-per-actor", "4"), "--cpus-per-actor=4"),
                       (("--cpus-per-actor", "1"), "--cpus-per-actor")):
        out = rlmperf("train", "--steps", "1", *args)
        assert out.returncode == 2 and name in out.stderr and "Traceback" not in out.stderr


def test_every_json_output_is_strict_and_a_full_device_is_one_line():
    """`--json` never prints NaN or Infinity (strict parsers reject them); an efficiency that
    would give an infinite time is refused; writing to a full device is one line, exit 1."""
    for args in (("workdepth", "--json"), ("estimate", "--json"),
                 ("workdepth", "--model", "qwen2.5-7b", "--json")):
        out = rlmperf(*args)
        assert out.returncode == 0, out.stderr
        json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"{args}: {c}"))
    out = rlmperf("estimate", "--decode-efficiency", "1e-320", "--json")
    assert out.returncode == 2 and "--decode-efficiency" in out.stderr and not out.stdout
    assert "Traceback" not in out.stderr and "Warning" not in out.stderr
    for args in (("workdepth", "--json"), ("estimate",)):
        with open("/dev/full", "w") as full:
            out = subprocess.run([sys.executable, "-m", "rlmperf_lite", *args],
                                 stdout=full, stderr=subprocess.PIPE, text=True)
        assert out.returncode == 1 and out.stderr.strip() == (
            "rlmperf: error: cannot write the output (No space left on device)")


def test_train_refuses_more_samples_than_it_can_hold():
    for flag, value in (("--num-prompts", "1000000000"), ("--group-size", "100000000")):
        out = rlmperf("train", flag, value, "--steps", "1")
        assert out.returncode == 2 and "samples per step" in out.stderr and flag in out.stderr
        assert "Traceback" not in out.stderr


def _main(capsys, *argv):
    """(exit code, stdout, stderr) of ``rlmperf argv`` run in this process."""
    from rlmperf_lite.cli import main
    try:
        code = main(list(argv))
    except SystemExit as stop:                      # argparse: --version, --help, bad syntax
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version
    code, out, _ = _main(capsys, "--version")
    assert code == 0 and out.strip() == f"rlmperf {version('rlmperf_lite')}"


@pytest.mark.parametrize("argv, line", [
    (("estimate", "--gpus", "0"), "--gpus must be an int >= 1, got 0"),
    (("estimate", "--prompts", "0"), "--prompts must be an int >= 1, got 0"),
    (("estimate", "--group-size", "1"), "--group-size must be an int >= 2, got 1"),
    (("estimate", "--prompt-len", "0"), "--prompt-len must be an int >= 1, got 0"),
    (("estimate", "--kl-coef", "-1"), "--kl-coef must be a finite number in [0, inf), got -1.0"),
    (("estimate", "--train-efficiency", "2"),
     "--train-efficiency must be a finite number in (0, 1], got 2.0"),
    (("estimate", "--prompts", "100000", "--group-size", "1000"),
     "--prompts * --group-size = 100000000 samples per step exceeds 1e7"),
    (("workdepth", "--processors", "0"), "--processors must be an int >= 1, got 0"),
    (("workdepth", "--model", "qwen2.5-7b", "--gpus", "-3"), "--gpus must be an int >= 1, got -3"),
    (("train", "--lr", "-1"), "--lr must be a finite number in (0, inf), got -1.0"),
    (("train", "--seed", "-1"), "--seed must be an int >= 0, got -1"),
    (("train", "--num-prompts", "0"), "--num-prompts must be an int >= 1, got 0"),
    (("train", "--runtime", "ray", "--ray-mode", "sync", "--staleness", "2"),
     "--staleness=2 conflicts with --ray-mode='sync' (staleness 0); use --ray-mode='async'"),
])
def test_errors_name_the_flag_the_user_typed(capsys, argv, line):
    """The library's argument names (gpus, GRPOConfig.lr, mode) are written as the flags
    (--gpus, --lr, --ray-mode), in one line, exit 2."""
    code, out, err = _main(capsys, *argv)
    assert (code, out, err) == (2, "", f"rlmperf: error: {line}\n")


def test_a_diverged_run_names_the_flag_in_one_line(capsys):
    """--lr 1e10 failed with 'per_token_logps[0, 0] is nan' after numpy's overflow warnings;
    now the one line names the step and the flag, and nothing else reaches stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # numpy's overflows would raise
        code, _, err = _main(capsys, "train", "--lr", "1e10", "--steps", "3")
    assert code == 2 and err.endswith("\nrlmperf: error: training diverged at step 1: the "
                                      "rollout's log-probs became non-finite; --lr=1e+10 is too "
                                      "high: lower it\n")


def test_a_config_field_is_not_taken_for_a_flag(capsys, tmp_path):
    """ModelConfig.hidden_size in a config.json's error stays as it is with --model: the real
    model's step has no --hidden-size flag; the error names the file."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "vocab_size": 10, "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 5,
                                "intermediate_size": 128}))
    for cmd in ("estimate", "workdepth"):
        code, _, err = _main(capsys, cmd, "--model", str(path))
        assert code == 2 and err == (f"rlmperf: error: --model: config file {str(path)!r}: "
                                     "ModelConfig.num_attention_heads=5 must divide hidden_size="
                                     "64 (or give head_dim)\n")


def test_a_typo_gets_a_did_you_mean(capsys):
    """Issue 17 §2: the closest preset names (difflib), from the CLI and from Python."""
    from rlmperf_lite.cost import hardware_preset, model_preset
    code, _, err = _main(capsys, "estimate", "--model", "llama3.1-8b")
    assert code == 2 and err.startswith("rlmperf: error: --model: unknown model preset "
                                        "'llama3.1-8b' (did you mean 'llama-3.1-8b'")
    code, _, err = _main(capsys, "estimate", "--hardware", "h10")
    assert code == 2 and err.startswith("rlmperf: error: --hardware: unknown hardware preset "
                                        "'h10' (did you mean 'h100'")
    with pytest.raises(ValueError, match=r"did you mean 'qwen2\.5-7b'"):
        model_preset("qwen-2.5-7b")
    with pytest.raises(ValueError, match=r"unknown hardware preset 'H-100' \(did you mean "
                                         r"'h100'"):
        hardware_preset("H-100")
    with pytest.raises(ValueError, match=r"unknown model preset 'zzz'; known"):
        model_preset("zzz")                         # nothing close: no suggestion


@pytest.mark.parametrize("flag", ["--train-efficiency", "--decode-efficiency"])
def test_efficiencies_below_the_floor_are_refused(capsys, flag):
    """1e-300 printed 300-digit times: below 1e-6 of the peak is refused, naming the flag, in
    estimate and in workdepth --model; 1e-6 itself gives finite numbers."""
    for cmd in (("estimate",), ("workdepth", "--model", "qwen2.5-7b")):
        code, out, err = _main(capsys, *cmd, flag, "1e-300", "--json")
        assert code == 2 and not out and err == (
            f"rlmperf: error: {flag}=1e-300 is below 1e-06 of the peak, which no real run is: "
            "use a realistic fraction (e.g. 0.3-1)\n")
        code, out, _ = _main(capsys, *cmd, flag, "1e-6", "--json")
        assert code == 0 and json.loads(out)


@pytest.mark.parametrize("argv, line", [
    (("--group-size", "1"), "the toy model's GRPO step: --group-size must be an int >= 2, got 1"),
    (("--response-len", "100000"),
     "--prompt-len + --response-len = 100006 exceeds the toy model's 16 positions "
     "(TinyLMConfig.max_seq_len); shorten them, or give --model for a real model's step"),
    (("--num-prompts", "100000"), "the toy model's GRPO step: --num-prompts=100,000 exceeds "
                                  "65,536 samples per step: lower it"),
    (("--num-layers", "1000000"), "--num-layers must be an int in [1, 10,000], got 1000000"),
])
def test_toy_workdepth_refuses_what_the_toy_cannot_run(capsys, argv, line):
    """The 16-position toy model, and its GRPO trainer's G >= 2 and 65,536 samples."""
    code, out, err = _main(capsys, "workdepth", *argv)
    assert (code, out, err) == (2, "", f"rlmperf: error: {line}\n")
    code, out, _ = _main(capsys, "workdepth", "--group-size", "2", "--response-len", "10",
                         "--json")
    assert code == 0 and json.loads(out)["inputs"]["response_len"] == 10


def test_ray_flags_are_refused_before_ray_starts(capsys):
    """--cpus-per-actor -1 was checked only once Ray had started (~8 s); DAPO on Ray says what
    to type instead. None of these starts Ray."""
    ray = pytest.importorskip("ray")
    cases = [(("--cpus-per-actor", "-1"), "--cpus-per-actor must be a finite number in [0, inf)"
                                          ", got -1.0"),
             (("--cpus-per-actor", "nan"), "--cpus-per-actor must be a finite number in [0, inf)"
                                           ", got nan"),
             (("--ray-mode", "colocated", "--cpus-per-actor", "64"),
              "--cpus-per-actor=64 x 1 actors needs 64 CPUs, but Ray has"),
             (("--address", "nohost"), "--address='nohost' must be 'auto', 'host:port'"),
             (("--algo", "dapo"), "--algo dapo resamples groups whose rewards are all equal "
                                  "(dynamic sampling), which --runtime ray does not run yet: use "
                                  "--runtime local for DAPO, or --algo grpo, dr_grpo, rloo or "
                                  "reinforce_pp on Ray")]
    for argv, start in cases:
        t0 = time.perf_counter()
        code, _, err = _main(capsys, "train", "--runtime", "ray", *argv)
        assert code == 2 and err.startswith(f"rlmperf: error: {start}"), err
        assert time.perf_counter() - t0 < 3 and not ray.is_initialized()


def test_every_command_prints_strict_json(capsys, tmp_path):
    """Every sub-command's --json output parses with NaN and Infinity refused (Python's json
    accepts them, strict parsers do not); the list of sub-commands is the parser's, so a new one
    fails here until it is added."""
    from rlmperf_lite.cli import build_parser
    runs = {"train": [("train", "--steps", "1", "--json")],
            "workdepth": [("workdepth", "--json"),
                          ("workdepth", "--model", "qwen2.5-7b", "--json")],
            "estimate": [("estimate", "--json"), ("estimate", "--algo", "ppo", "--json"),
                         ("estimate", "--train-efficiency", "1e-6", "--decode-efficiency",
                          "1e-6", "--json")],
            "compare-run": [("compare-run", str(write_verl_jsonl(tmp_path / "m.jsonl")),
                             "--model", "qwen2.5-7b", "--hardware", "h100", "--gpus", "8",
                             "--group-size", "8", "--json")]}
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(commands) == set(runs)
    for argv in (a for cmd in runs.values() for a in cmd):
        code, out, err = _main(capsys, *argv)
        assert code == 0, err
        for line in out.strip().splitlines():
            json.loads(line, parse_constant=lambda c: pytest.fail(f"{argv}: {c}"))


def test_train_cot_summary_has_length_and_chain_share():
    """`rlmperf train --task cot` uses the CoT design's defaults and reports the held-out
    response length and chain share next to accuracy, for the base and the trained model."""
    out = rlmperf("train", "--task", "cot", "--seed", "0", "--steps", "2", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    *rows, summary = [json.loads(x) for x in out.stdout.strip().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and summary["task"] == "cot"
    for key in ("base_eval_accuracy", "base_eval_response_len_mean", "eval_accuracy",
                "eval_response_len_mean", "eval_cot_share"):
        assert 0 <= summary[key] <= 23, key
    assert 0 < summary["base_eval_accuracy"] < 1 and summary["base_eval_response_len_mean"] >= 4


def test_train_bad_task_names_the_flag():
    out = rlmperf("train", "--task", "sudoku", "--steps", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--task" in out.stderr and "sudoku" in out.stderr
    out = rlmperf("train", "--task", "cot", "--algo", "ppo", "--steps", "1")
    assert out.returncode == 2 and "--task cot runs the GRPO family" in out.stderr
