"""estimate_rl_step: the phases of one RL step of a real model; generation dominates time but
not FLOPs; invariants; does-not-fit; the CLI on a preset and on a config.json path."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from rlmperf_lite.cost import (decode_flops, estimate_rl_step, forward_flops, model_preset,
                               preset_record)

BASE = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64)


def test_generation_dominates_time_but_not_flops():
    est = estimate_rl_step("grpo", **BASE)
    assert est.generation_time_share > 0.8
    assert est.generation_flops_share < 0.25
    assert est.phase("rollout_decode").bound == "memory"
    assert est.phase("actor_update").bound == "compute"


def test_phase_flops_are_the_flops_formulas():
    est = estimate_rl_step("ppo", kl_coef=0.001, **BASE)
    m = model_preset("qwen2.5-7b")
    n_seq, T = 32 * 16, [512 + 4096] * 512
    assert est.phase("rollout_decode").flops == decode_flops(m, 512, [4096] * n_seq)
    assert est.phase("old_logprobs").flops == forward_flops(m, T)
    assert est.phase("critic_values").flops == forward_flops(m, T, lm_head="none")
    assert est.phase("actor_update").flops == 3 * forward_flops(m, T) + 12.0 * m.num_params()
    assert [p.name for p in est.phases] == [
        "rollout_prefill", "rollout_decode", "old_logprobs", "ref_logprobs", "critic_values",
        "advantages", "actor_update", "critic_update", "weight_sync"]
    assert est.time_s == pytest.approx(sum(p.time_s for p in est.phases))


def test_variants_models_and_a_reward_model():
    names = [p.name for p in estimate_rl_step("dapo", kl_coef=0.01, **BASE).phases]
    assert "ref_logprobs" not in names                         # DAPO drops the KL term
    with_rm = estimate_rl_step("grpo", reward="qwen2.5-7b", **BASE)
    assert with_rm.phase("reward").flops > 0


def test_stragglers_and_more_gpus():
    """A long tail of response lengths sets the decode time (the longest response of a
    replica); more GPUs never slow the rollout."""
    lengths = np.random.default_rng(0).lognormal(7.0, 0.8, size=5000).clip(1, 16384).round()
    tail = estimate_rl_step("grpo", **{**BASE, "response_len": lengths})
    mean = estimate_rl_step("grpo", **{**BASE, "response_len": int(lengths.mean())})
    assert tail.phase("rollout_decode").time_s > 2 * mean.phase("rollout_decode").time_s
    times = [estimate_rl_step("grpo", **{**BASE, "gpus": g}).phase("rollout_decode").time_s
             for g in (8, 16, 32, 64)]
    assert times == sorted(times, reverse=True)


def test_a_model_that_does_not_fit_names_what_overflows():
    est = estimate_rl_step("grpo", **{**BASE, "actor": "llama-3.1-405b", "gpus": 16})
    assert not est.fits
    assert "H100-SXM5-80GB has 80 GB" in est.overflow and "model states" in est.overflow
    assert est.rollout_tp == 8


def test_fast_enough_for_sweeps():
    estimate_rl_step("grpo", **BASE)
    t = time.perf_counter()
    for _ in range(20):
        estimate_rl_step("grpo", **BASE)
    assert (time.perf_counter() - t) / 20 < 0.05          # speed goal (1 ms) lives in bench/


@pytest.mark.parametrize("kw, match", [
    ({"algo": "sft"}, "algo must be one of"),
    ({"actor": "llama-9"}, "unknown model preset"),
    ({"hardware": "tpu"}, "unknown hardware preset"),
    ({"group_size": 1}, "group_size"),
    ({"response_len": [0, 5]}, "response_len"),
    ({"gpus": 0}, "gpus"),
    ({"train_efficiency": 1.5}, "train_efficiency"),
])
def test_bad_input_is_named(kw, match):
    args = {"algo": "grpo", **BASE, **kw}
    with pytest.raises(ValueError, match=match):
        estimate_rl_step(args.pop("algo"), **args)


def test_cli_on_a_preset_and_on_a_config_json(tmp_path):
    run = [sys.executable, "-m", "rlmperf_lite", "estimate"]
    out = subprocess.run(run + ["--model", "qwen2.5-7b", "--gpus", "64", "--json"],
                         capture_output=True, text=True, check=True)
    est = json.loads(out.stdout)
    assert est["fits"] and est["generation_time_share"] > 0.8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset_record("qwen3-8b")["hf_config"]))
    text = subprocess.run(run + ["--model", str(path), "--gpus", "8"], capture_output=True,
                          text=True, check=True).stdout
    assert "rollout_decode" in text and "generation:" in text
    bad = subprocess.run(run + ["--model", "llama-9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown model preset" in bad.stderr


def test_review_fixes_prefill_moe_decode_and_weight_sync():
    m = model_preset("qwen2.5-7b")
    ppo = estimate_rl_step("ppo", **BASE)                      # 512 prompts x 1 sample
    assert ppo.phase("rollout_prefill").flops == pytest.approx(
        512 * estimate_rl_step("grpo", **BASE).phase("rollout_prefill").flops / 32)
    assert estimate_rl_step("grpo", **BASE).phase("rollout_prefill").bound == "compute"
    # MoE: a decode step reads only the experts its batch touches
    moe = dict(BASE, actor="qwen3-30b-a3b", prompts=4, group_size=2)
    e = estimate_rl_step("grpo", **moe)
    full = 2.0 * model_preset("qwen3-30b-a3b").num_params() * 4095
    assert e.phase("rollout_decode").bytes_moved < 0.7 * full * 64 / e.rollout_tp
    # weight sync, bandwidth bound: NVLink inside a node, then the network cards across 8
    # nodes (the default is the mechanism model, tests/test_weight_sync.py)
    w = 2.0 * m.num_params()
    bw = dict(BASE, weight_sync="bandwidth")
    one_node = estimate_rl_step("grpo", **{**bw, "gpus": 8}).phase("weight_sync").time_s
    assert one_node == pytest.approx(w * 7 / 8 / 450e9)
    eight = estimate_rl_step("grpo", **bw).phase("weight_sync").time_s
    assert eight == pytest.approx(w * 7 / 8 / 450e9 + w * 7 / 8 / (8 * 50e9))
    parts = estimate_rl_step("grpo", **BASE).phase("actor_update").memory_parts
    assert parts["activations"] > 4.0 * 4608 * m.vocab_size          # includes fp32 logits


@pytest.mark.parametrize("kw, match", [
    ({"algo": "grpo", "critic": "qwen2.5-7b"}, "critic applies to algo='ppo' only"),
    ({"algo": "dapo", "reference": "qwen2.5-7b"}, "DAPO has no KL term"),
    ({"actor": "llama-3.1-70b", "gpus": 10}, "not a multiple of the rollout replica size"),
    ({"actor": "llama-2-7b", "response_len": 8192},
     "prompt_len \\+ response_len = 8704 exceeds Llama-2-7B's max_position_embeddings=4096"),
    ({"response_len": 10**8}, "response_len must be finite and within"),
    ({"dtype": "fp8"}, "dtype must be one of"),
    ({"recompute_old_logprobs": "no"}, "recompute_old_logprobs must be True or False"),
])
def test_more_bad_input_is_named(kw, match):
    args = {"algo": "grpo", **BASE, **kw}
    with pytest.raises(ValueError, match=match):
        estimate_rl_step(args.pop("algo"), **args)
