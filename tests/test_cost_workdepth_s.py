"""Work and depth in seconds of a real RL step (book section sec-workdepth-seconds): the depth
against the roofline decode time computed by hand from the model's and the GPU's published
numbers, Brent's bracket against the step estimate, and the balance of W/p and D as the decode
batch per GPU moves."""
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from rlmperf_lite.cost import (back_of_envelope, estimate_rl_step, hardware_preset,
                               kv_cache_bytes_per_token,
                               model_preset, pram_processors, rl_step_workdepth,
                               rl_step_workdepth_s)

# the GRPO step of Chapter 5: Qwen2.5-7B, 32 prompts x 16, 512 + 4,096 tokens, KL 0.001, 64 H100s
CH5 = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
           response_len=4096, gpus=64, kl_coef=0.001)


def test_decode_depth_is_the_chain_of_dependent_steps_read_from_memory():
    """Qwen2.5-7B: 7,615,616,512 parameters (model card), 28 layers x 4 KV heads x 128 x 2 (K
    and V) x 2 bytes = 57,344 bytes of KV per token; H100 SXM: 3.35e12 B/s (datasheet). Each
    of the 4,095 dependent decode steps of the longest response reads the weights and its own
    cache: D = sum_j (2 N + kv (P + j)) / bw, about 4.6 ms a step."""
    N, kv, bw = 7_615_616_512, 28 * 4 * 128 * 2 * 2, 3.35e12
    assert model_preset("qwen2.5-7b").num_params() == N
    ctx = 512 + np.arange(1, 4096)
    by_hand = float(((2 * N + kv * ctx) / bw).sum())
    wd = rl_step_workdepth_s(**CH5)
    assert wd.phase("rollout_decode").depth_s == pytest.approx(by_hand, rel=1e-12)
    assert by_hand / 4095 == pytest.approx(4.59e-3, rel=0.01)


def test_decode_depth_is_within_ten_percent_of_the_estimated_decode_time():
    wd, est = rl_step_workdepth_s(**CH5), estimate_rl_step(**CH5)
    decode = est.phase("rollout_decode").time_s
    assert wd.phase("rollout_decode").depth_s == pytest.approx(decode, rel=0.10)
    assert wd.phase("rollout_decode").depth_s < decode        # a floor: each step alone


def test_brent_bounds_bracket_the_step_estimate():
    wd = rl_step_workdepth_s(**CH5)
    assert wd.brent_lower_s <= wd.estimate_s * (1 + 1e-12) and wd.estimate_s <= wd.brent_upper_s
    assert wd.brent_lower_s == pytest.approx(wd.estimate_s, rel=1e-12)    # equal lengths: W/p
    assert wd.estimate_s == pytest.approx(estimate_rl_step(**CH5).time_s, rel=1e-12)
    assert wd.brackets_estimate
    for p in wd.phases:
        assert p.brent_lower_s == max(p.work_gpu_s / 64, p.depth_s)
        assert p.brent_upper_s == p.work_gpu_s / 64 + p.depth_s


@pytest.mark.parametrize("actor,algo,gpus,prompts,R", list(itertools.product(
    ["qwen2.5-7b", "llama-3.1-8b", "llama-3.1-70b"], ["grpo", "ppo"], [8, 64], [32, 512],
    [256, 4096, "tail"])))
def test_bracket_holds_for_dense_models_with_a_sequence_per_gpu(actor, algo, gpus, prompts, R):
    """Dense models, at least one sequence per GPU, equal or long-tailed lengths: every phase's
    estimated time lies in its bracket. (A tail is a log-normal sample, median e^7 ~ 1,100.)"""
    if R == "tail":
        R = np.clip(np.random.default_rng(0).lognormal(7, 0.8, 2000), 1, 8192).round()
    kw = dict(actor=actor, hardware="h100", prompts=prompts, group_size=16, prompt_len=512,
              response_len=R, gpus=gpus, kl_coef=0.001)
    try:
        est = estimate_rl_step(algo, **kw)
    except ValueError:
        pytest.skip("the estimate refuses this layout")
    wd = rl_step_workdepth_s(algo, **kw)
    uniform = np.ndim(R) == 0
    for p, e in zip(wd.phases, est.phases):
        assert e.time_s <= p.brent_upper_s * (1 + 1e-9), p.name
        if uniform or p.name.startswith("rollout"):
            assert p.brent_lower_s <= e.time_s * (1 + 1e-9), p.name


def test_a_sequence_longer_than_a_gpus_share_puts_the_estimate_below_the_bound():
    """4 sequences on 64 GPUs: the estimate divides each training pass over all GPUs, finer
    than one sequence per GPU, so it falls below the depth of one sequence's pass."""
    wd = rl_step_workdepth_s(**{**CH5, "prompts": 1, "group_size": 4})
    update = wd.phase("actor_update")
    assert update.depth_s > update.work_gpu_s / 64
    assert not wd.brackets_estimate and wd.brent_lower_s > wd.estimate_s


def test_sequences_per_gpu_moves_decode_from_its_depth_to_its_work():
    """8 sequences per GPU: decode's W/p is within 7% of its depth (depth-bound). 128 per GPU:
    W/p is over twice the depth (work-bound), and generation's share of the step falls to 48%."""
    small, large = rl_step_workdepth_s(**CH5), rl_step_workdepth_s(**{**CH5, "prompts": 512})
    assert (small.sequences_per_gpu, large.sequences_per_gpu) == (8, 128)
    d_small, d_large = small.phase("rollout_decode"), large.phase("rollout_decode")
    assert d_small.depth_s == d_large.depth_s                 # the chain does not change
    assert 1 < d_small.work_gpu_s / 64 / d_small.depth_s < 1.07
    assert d_large.work_gpu_s / 64 / d_large.depth_s > 2.2
    # 0.875 with the bandwidth-bound sync; the mechanism sync (larger) lowers it to 0.873
    assert estimate_rl_step(**CH5).generation_time_share == pytest.approx(0.873, abs=0.001)
    est = estimate_rl_step(**{**CH5, "prompts": 512})
    assert est.generation_time_share == pytest.approx(0.48, abs=0.005)


def test_one_sequence_per_replica_makes_decode_work_equal_its_depth():
    """With one sequence per replica nothing is amortised: W/p = D exactly."""
    wd = rl_step_workdepth_s(**{**CH5, "prompts": 4, "group_size": 16})
    d = wd.phase("rollout_decode")
    assert wd.sequences_per_replica == 1
    assert d.work_gpu_s / 64 == pytest.approx(d.depth_s, rel=1e-12)


def test_training_is_work_bound_and_its_work_is_the_estimate():
    wd, est = rl_step_workdepth_s(**CH5), estimate_rl_step(**CH5)
    for name in ("old_logprobs", "ref_logprobs", "actor_update"):
        p = wd.phase(name)
        assert p.work_gpu_s / 64 == pytest.approx(est.phase(name).time_s, rel=1e-12)
        assert p.parallelism == pytest.approx(512, rel=1e-5)   # one sequence a task; + optimizer
    assert wd.phase("weight_sync").depth_s == est.phase("weight_sync").time_s


def test_the_hand_derivation_is_close_to_the_library():
    """How to Scale Your Model's three lines: decode ~ steps x 2N / bw, update ~ 6 N tokens /
    (p peak), the step's MFU; within 10% of the full model (attention and KV reads left out)."""
    hand, est = back_of_envelope(**CH5), estimate_rl_step(**CH5)
    assert hand["decode_step_s"] == pytest.approx(2 * 7_615_616_512 / 3.35e12, rel=1e-12)
    assert hand["decode_s"] == pytest.approx(est.phase("rollout_decode").time_s, rel=0.10)
    assert hand["update_s"] == pytest.approx(est.phase("actor_update").time_s, rel=0.05)
    assert hand["forward_passes"] == 2                    # old and reference log-probs
    mfu = est.flops / (est.time_s * 64 * 989.5e12)
    assert hand["step_mfu"] == pytest.approx(mfu, rel=0.10)


def test_the_hand_share_holds_at_8_sequences_per_gpu_and_misses_the_kv_reads_at_128():
    """By hand, generation's share is decode over the step: at 8 sequences per GPU within one
    point of the library's 87%; at 128 per GPU it leaves out the KV cache, whose reads per decode
    step then exceed the weights', so the hand share falls far below the library's 48%."""
    hand, est = back_of_envelope(**CH5), estimate_rl_step(**CH5)
    assert hand["generation_share"] == pytest.approx(hand["decode_s"] / hand["step_s"], rel=1e-12)
    assert hand["generation_share"] == pytest.approx(est.generation_time_share, abs=0.01)
    big = dict(CH5, prompts=512)
    hand, est = back_of_envelope(**big), estimate_rl_step(**big)
    assert est.generation_time_share - hand["generation_share"] > 0.15
    kv = 128 * (512 + 4096 / 2) * kv_cache_bytes_per_token(model_preset("qwen2.5-7b"))
    assert kv > 2 * 7_615_616_512                  # a mean decode step reads more KV than weights


def test_pram_rounds_do_not_bind_at_real_scale():
    """64 H100s are 3.5e7 PRAM processors (989.5 TFLOP/s / 1.83 GHz each). In rounds, decode's
    W/p (9.1e8) exceeds its depth (1.7e7) fifty-fold and decode is 15% of the rounds, while the
    estimate gives it 87% of the time: the rounds miss the bytes each step reads."""
    p = pram_processors(hardware_preset("h100"), 64)
    assert p == pytest.approx(3.46e7, rel=0.01)
    rounds = rl_step_workdepth(processors=int(p), **CH5)
    decode = rounds.phase("rollout_decode")
    assert decode.work_flops / p == pytest.approx(9.1e8, rel=0.02)
    assert decode.depth_rounds == pytest.approx(1.7e7, rel=0.05)
    share = decode.brent_rounds / sum(x.brent_rounds for x in rounds.phases)
    assert share == pytest.approx(0.154, abs=0.005)
    with pytest.raises(ValueError, match="gpus"):
        pram_processors(hardware_preset("h100"), 0)


def test_bad_input_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="gpus"):
        rl_step_workdepth_s(**{**CH5, "gpus": 0})
    with pytest.raises(ValueError, match="decode_efficiency"):
        rl_step_workdepth_s(**{**CH5, "decode_efficiency": 0})


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rlmperf_lite", "workdepth", *args],
                          capture_output=True, text=True)


def test_command_line_prints_the_same_model_as_strict_json():
    out = _cli("--model", "qwen2.5-7b", "--hardware", "h100", "--gpus", "64", "--prompts", "32",
               "--group-size", "16", "--prompt-len", "512", "--response-len", "4096",
               "--kl-coef", "0.001", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    want = rl_step_workdepth_s(**CH5)
    keys = {"name", "work_flops", "work_gpu_s", "depth_s", "brent_lower_s", "brent_upper_s"}
    assert [p["name"] for p in got["phases"]] == [p.name for p in want.phases]
    for row, p in zip(got["phases"], want.phases):
        assert keys <= set(row) and row["depth_s"] == p.depth_s
    assert keys | {"estimate_s"} <= set(got["step"])
    assert got["step"]["estimate_s"] == estimate_rl_step(**CH5).time_s
    step = got["step"]
    assert step["brent_lower_s"] <= step["estimate_s"] * (1 + 1e-12) <= step["brent_upper_s"]


def test_command_line_keeps_the_toy_output_and_names_misplaced_flags():
    toy = _cli("--json")
    assert toy.returncode == 0 and "depth_rounds" in toy.stdout
    out = _cli("--gpus", "8")
    assert out.returncode == 2 and "--gpus needs --model" in out.stderr
    out = _cli("--model", "qwen2.5-7b", "--num-layers", "3")
    assert out.returncode == 2 and "--num-layers" in out.stderr and "Traceback" not in out.stderr
    out = _cli("--model", "qwen2.5-7b")
    assert out.returncode == 0 and "sequences per GPU" in out.stdout and "step" in out.stdout
