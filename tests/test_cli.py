"""The command line: JSON output equals the library's, bad input is one clear line."""
import json
import subprocess
import sys

import pytest

from rlmperf_lite.nn import TinyLMConfig
from rlmperf_lite.cost import grpo_step_workdepth


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
    assert out.stderr.strip() == "rlmperf: error: num_heads=5 must divide hidden_size=64"
    out = rlmperf("train", "--group-size", "1", "--steps", "1")
    assert out.returncode == 2 and "group_size" in out.stderr and "Traceback" not in out.stderr


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
                       (("--runtime", "ray", "--algo", "dapo"), "dynamic_sampling"),
                       (("--runtime", "ray", "--address", "127.0.0.1:1"), "address"),
                       (("--runtime", "ray", "--address", ""), "address"),
                       (("--runtime", "ray", "--cpus-per-actor", "4"), "cpus_per_actor"),
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
    assert out.returncode == 2 and "decode_efficiency" in out.stderr and not out.stdout
    assert "Traceback" not in out.stderr and "Warning" not in out.stderr
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "rlmperf_lite", "workdepth", "--json"],
                             stdout=full, stderr=subprocess.PIPE, text=True)
    assert out.returncode == 1 and out.stderr.strip() == (
        "rlmperf: error: cannot write the output (No space left on device)")


def test_train_refuses_more_samples_than_it_can_hold():
    for flag, value in (("--num-prompts", "1000000000"), ("--group-size", "100000000")):
        out = rlmperf("train", flag, value, "--steps", "1")
        assert out.returncode == 2 and "samples per step" in out.stderr
        assert "Traceback" not in out.stderr
