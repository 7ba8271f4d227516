"""The work-depth calculators of Labs 3, 4 and 6 (live panel and no-kernel twin) and the maths
behind them: DAPO's rounds of generation in seconds (cost.variants), the step at a
decode batch per GPU and the toy's measured profile (cost.profiles)."""
import json

import numpy as np
import pytest

from rlmperf_lite.cost import estimate_rl_step, measure_cpu, rl_step_workdepth_s
from rlmperf_lite.cost.profiles import (cpu_as_fp32_device, generation_share, measured_profile,
                                        profile_step_workdepth_s, toy_step_kwargs)
from rlmperf_lite.cost.variants import variant_step_workdepth_s
from rlmperf_lite.rl import GRPOConfig, PPOConfig, train_grpo
from rlmperf_lite.cost.variants import VARIANT_KL, dynamic_sampling_rounds
from rlmperf_lite.book.ch03_workdepth import (variant_workdepth_calculator,
                                              variant_workdepth_static, variant_workdepth_widget)
from rlmperf_lite.book.ch04_workdepth import (phase_workdepth_calculator, phase_workdepth_static,
                                              phase_workdepth_widget)
from rlmperf_lite.book.ch06_workdepth import (profile_workdepth_calculator,
                                              profile_workdepth_static, profile_workdepth_widget)
from rlmperf_lite.book.step_calculators import STATIC_OPTIONS

# Lab 3's and Lab 4's step: Qwen2.5-7B, 32 prompts x 16, 512 + 4,096 tokens, KL 0.001, 64 H100s
STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64, kl_coef=0.001)


def _controls(box):
    """(controls, message) of a WorkDepthCalculator panel."""
    return box.children[0].children[0].children, box.children[0].children[1]


# -- the maths ----------------------------------------------------------------------------------

def test_dapo_decode_depth_is_the_expected_rounds_of_the_chain_computed_by_hand():
    """Qwen2.5-7B: 7,615,616,512 parameters (model card), 57,344 bytes of KV per token; H100
    SXM 3.35e12 B/s (datasheet): one round's decode depth is sum_j (2 N + kv (P + j)) / bw over
    the 4,095 dependent steps. At q = 0.8, G = 16 a group is informative with f = 1 - 0.8^16 -
    0.2^16; 32 groups fill the batch in one round with probability f^32, and two rounds of 64
    groups all but surely hold 32 informative ones, so E[rounds] = 2 - f^32 to 1e-9."""
    N, kv, bw = 7_615_616_512, 28 * 4 * 128 * 2 * 2, 3.35e12
    one_round = float(((2 * N + kv * (512 + np.arange(1, 4096))) / bw).sum())
    f = 1 - 0.8 ** 16 - 0.2 ** 16
    rounds = 2 - f ** 32
    v = variant_step_workdepth_s("dapo", pass_rate=0.8, **STEP)
    assert v.informative_frac == pytest.approx(f, rel=1e-12)
    assert v.expected_rounds == pytest.approx(rounds, rel=1e-9)
    assert v.expected_rounds == dynamic_sampling_rounds(f, 32, 3)["expected_rounds"]
    decode = v.step.phase("rollout_decode")
    assert decode.depth_s == pytest.approx(rounds * one_round, rel=1e-12)
    assert rounds == pytest.approx(1.599, abs=0.001)


def test_dapo_rounds_scale_the_rollout_and_the_estimate_and_the_bounds_hold_it():
    v = variant_step_workdepth_s("dapo", pass_rate=0.9, **STEP)
    one = rl_step_workdepth_s("dapo", **STEP)           # DAPO's step with a single round
    k = v.expected_rounds
    for p, q in zip(v.step.phases, one.phases):
        scale = k if p.name in ("rollout_prefill", "rollout_decode") else 1.0
        assert (p.work_gpu_s, p.depth_s, p.work_flops) == pytest.approx(
            (scale * q.work_gpu_s, scale * q.depth_s, scale * q.work_flops), rel=1e-12), p.name
    est = estimate_rl_step("dapo", **STEP)
    rollout = est.generation_time_s
    assert v.step.estimate_s == pytest.approx(est.time_s + (k - 1) * rollout, rel=1e-12)
    assert v.step.brackets_estimate
    assert "ref_logprobs" not in [p.name for p in v.step.phases]     # no KL term in DAPO


@pytest.mark.parametrize("variant", [v for v in VARIANT_KL if v != "dapo"])
def test_the_other_variants_are_one_round_of_the_library_step(variant):
    v = variant_step_workdepth_s(variant, pass_rate=0.99, **STEP)
    assert v.expected_rounds == 1.0
    assert v.step == rl_step_workdepth_s(variant, **STEP)


def test_more_gpus_shrink_ppos_extra_work_but_not_dapos_extra_depth():
    """PPO's critic is training-side work, which p divides; DAPO's rounds are decode depth,
    which it does not: their lower bounds against GRPO's as p grows from 8 to 512."""
    ratio = {}
    for gpus in (8, 512):
        lo = {v: variant_step_workdepth_s(v, pass_rate=0.8, **{**STEP, "gpus": gpus})
              .step.brent_lower_s for v in ("grpo", "dapo", "ppo")}
        ratio[gpus] = (lo["dapo"] / lo["grpo"], lo["ppo"] / lo["grpo"])
    assert ratio[512][0] > ratio[8][0] and ratio[512][1] < ratio[8][1]
    assert ratio[512][0] == pytest.approx(1.58, abs=0.01)


def test_variant_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="variant"):
        variant_step_workdepth_s("gspo", pass_rate=0.5, **STEP)
    with pytest.raises(ValueError, match="pass_rate"):
        variant_step_workdepth_s("dapo", pass_rate=1.5, **STEP)
    with pytest.raises(ValueError, match="group_size"):
        variant_step_workdepth_s("grpo", pass_rate=0.5, **{**STEP, "group_size": 1})
    with pytest.raises(ValueError, match="max_resample_rounds"):
        variant_step_workdepth_s("dapo", pass_rate=1.0, max_resample_rounds=None, **STEP)


def test_decode_batch_per_gpu_sets_the_prompts_for_any_replica_size():
    """s sequences per GPU: B G = s p samples; Llama-3.1-70B decodes on replicas of 4 H100s,
    Qwen2.5-7B on one, and both hold s per GPU. At Chapter 5's step (8 per GPU) generation's
    share of the lower bound is the estimate's 87.3% of the time (the bound is the estimate;
    87.5% with the bandwidth-bound sync, before issue 16 item 9)."""
    for actor in ("qwen2.5-7b", "llama-3.1-70b"):
        kw = {**STEP, "actor": actor}
        kw.pop("prompts")
        wd = profile_step_workdepth_s(sequences_per_gpu=8, **kw)
        assert wd.sequences_per_gpu == 8 and wd.inputs["prompts"] == 32
    kw = {k: v for k, v in STEP.items() if k != "prompts"}
    wd = profile_step_workdepth_s(sequences_per_gpu=8, **kw)
    assert wd == rl_step_workdepth_s(**STEP)
    assert generation_share(wd) == pytest.approx(
        estimate_rl_step(**STEP).generation_time_share, rel=1e-9)
    assert generation_share(wd, "upper") > generation_share(wd)
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        profile_step_workdepth_s(sequences_per_gpu=1, **{**kw, "gpus": 8})
    with pytest.raises(ValueError, match="sequences_per_gpu"):
        profile_step_workdepth_s(sequences_per_gpu=0, **kw)
    with pytest.raises(ValueError, match="prompts is set by sequences_per_gpu"):
        profile_step_workdepth_s(sequences_per_gpu=8, prompts=32, **kw)
    with pytest.raises(ValueError, match="bound"):
        generation_share(wd, "middle")


def test_the_toy_estimate_counts_the_flops_the_toy_counts():
    """Measurement: two toy GRPO steps (a KL term, no warm-start) and their counted FLOPs; the
    estimate for the toy's shape equals them in decode and within 2% in prefill and the
    reference pass (the toy computes dense attention, the estimate causal)."""
    c = GRPOConfig(steps=2, seed=0, kl_coef=0.01, warmstart_max_steps=0)
    h = train_grpo(c).history[-1]
    cpu = cpu_as_fp32_device(measure_cpu(0.1))
    assert cpu.peak("bf16") == cpu.peak("fp32") == cpu.peak("fp16")
    est = estimate_rl_step("grpo", **toy_step_kwargs(c, prompt_len=6,
                                                     response_len=h["response_width"],
                                                     hardware=cpu))
    assert est.phase("rollout_decode").flops == h["decode_flops"]
    assert est.phase("rollout_prefill").flops == pytest.approx(h["prefill_flops"], rel=0.02)
    assert est.phase("ref_logprobs").flops == pytest.approx(h["reference_flops"], rel=0.02)
    assert est.gpus == 1 and est.phase("weight_sync").time_s == 0


def test_measured_profile_maps_the_loops_phases_onto_the_estimate():
    cpu = cpu_as_fp32_device(measure_cpu(0.1))
    rows = [{"rollout_s": 3e-3 * i, "reward_s": 1e-4, "values_s": 2e-3, "advantages_s": 1e-4,
             "update_s": 0.05, "response_width": 4 if i > 1 else 3} for i in (1, 2, 3, 4)]
    prof = measured_profile("ppo", rows, PPOConfig(), hardware=cpu, prompt_len=6)
    est = estimate_rl_step("ppo", **toy_step_kwargs(PPOConfig(), prompt_len=6, response_len=4,
                                                    hardware=cpu))
    assert prof.response_len == 4                                            # the median
    assert prof.phase("rollout").measured_s == pytest.approx(6e-3)     # the least at width 4
    assert prof.phase("rollout").estimate_s == pytest.approx(est.generation_time_s)
    assert prof.phase("update").estimate_s == pytest.approx(
        est.phase("actor_update").time_s + est.phase("critic_update").time_s)
    assert prof.estimate_s == pytest.approx(est.time_s) == pytest.approx(prof.brent_lower_s)
    assert prof.dominant() == prof.dominant("estimate") == "update"
    assert sum(prof.shares().values()) == pytest.approx(1.0)
    assert prof.phase("reward").ratio == np.inf                             # a verifier: 0 s
    with pytest.raises(ValueError, match="history"):
        measured_profile("grpo", rows, GRPOConfig(), hardware=cpu, prompt_len=6)
    with pytest.raises(ValueError, match="algo"):
        measured_profile("dapo", rows, GRPOConfig(), hardware=cpu, prompt_len=6)


# -- the calculators ----------------------------------------------------------------------------

def test_lab3_widget_shows_the_table_and_a_group_of_one_as_a_message():
    box = variant_workdepth_widget()
    controls, message = _controls(box)
    assert "<table>" in message.value and "rollout_decode" in message.value
    assert "1.6 rounds of generation" in message.value                       # DAPO, q = 0.8
    by_name = {c.description: c for c in controls}
    by_name["G group"].value = 1                                            # DAPO needs G >= 2
    assert "group_size" in message.value and "<table>" not in message.value
    by_name["variant"].value = "ppo"                                        # PPO runs G = 1
    assert "<table>" in message.value and "critic_update" in message.value


def test_lab3_numbers_are_the_librarys_and_the_twin_holds_the_accepted_settings():
    calc = variant_workdepth_calculator()
    phases, note, estimate = calc.compute(variant="dapo", gpus=64, pass_rate=0.8,
                                          group_size=16, kl_coef=0.001)
    want = variant_step_workdepth_s("dapo", pass_rate=0.8, **STEP).step
    assert list(phases) == list(want.phases) and estimate == want.estimate_s
    assert "8 sequences per GPU" in note
    rows = calc.grid()
    assert {r["variant"] for r in rows if r["group_size"] == 1} == {"reinforce_pp", "ppo"}
    assert {r["variant"] for r in rows} == set(VARIANT_KL)
    spec = json.dumps(variant_workdepth_static().data)
    assert "vegaEmbed" in spec and len(spec) < 400_000


def test_lab4_calculator_is_the_step_calculator_and_a_bad_length_is_a_message():
    calc = phase_workdepth_calculator()
    phases, note, estimate = calc.compute(algo="grpo", gpus=64, prompts=32, response_len=4096,
                                          kl_coef=0.001)
    want = rl_step_workdepth_s(**STEP)
    assert list(phases) == list(want.phases) and estimate == want.estimate_s
    assert list(calc.options) == ["algo", "gpus", "prompts", "response_len", "kl_coef"]
    box = phase_workdepth_widget(prompt_len=120_000)       # + 16,384 > 131,072 positions
    controls, message = _controls(box)
    assert "<table>" in message.value
    {c.description: c for c in controls}["R response"].value = 16384
    assert "max_position_embeddings" in message.value and "<table>" not in message.value
    rows = calc.grid()                          # every combination of the static options
    combos = {tuple(r[k] for k in calc.options) for r in rows}
    assert len(combos) == np.prod([len(STATIC_OPTIONS[k]) for k in calc.options])
    spec = json.dumps(phase_workdepth_static().data)
    assert "vegaEmbed" in spec and len(spec) < 400_000


def test_lab6_widget_prints_the_decode_batch_and_refuses_a_partial_group():
    box = profile_workdepth_widget()
    controls, message = _controls(box)
    assert "8 sequences per GPU in decode (32 prompts x 16 on 64 GPUs)" in message.value
    assert "generation 87.3% of the lower bound" in message.value      # 87.5% before 16.9
    by_name = {c.description: c for c in controls}
    by_name["algorithm"].value = "ppo"
    assert "512 prompts x 1" in message.value and "critic_update" in message.value
    by_name["GPUs p"].value = 8
    by_name["sequences per GPU (decode)"].value = 1                         # 8 samples, G = 16
    assert "not a multiple of group_size" in message.value and "<table>" not in message.value


def test_lab6_numbers_are_the_librarys_and_the_twin_varies_the_decode_batch():
    calc = profile_workdepth_calculator()
    phases, note, estimate = calc.compute(algo="ppo", sequences_per_gpu=32, response_len=1024,
                                          hardware="h20", gpus=64)
    want = profile_step_workdepth_s("ppo", sequences_per_gpu=32, response_len=1024,
                                    hardware="h20", gpus=64, actor="qwen2.5-7b", group_size=16,
                                    prompt_len=512, kl_coef=0.001)
    assert list(phases) == list(want.phases) and estimate == want.estimate_s
    assert "32 sequences per GPU" in note
    rows = calc.grid()
    assert sorted({r["sequences_per_gpu"] for r in rows}) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert {r["gpus"] for r in rows} == {64}
    spec = json.dumps(profile_workdepth_static().data)
    assert "vegaEmbed" in spec and len(spec) < 400_000
