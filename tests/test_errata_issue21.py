"""Numbers and formulas corrected after project issue 21 (book sections sec-variant-costs,
sec-ppo, sec-roofline): DAPO's rounds when pass rates vary, PPO against GRPO at equal epochs,
the large-batch limit of decode's arithmetic intensity, and the FLOPs a sweep run counted."""
import numpy as np
import pytest

from rlmperf_lite.cost import (decode_step_bytes, decode_step_flops, dynamic_sampling_rounds,
                               informative_fraction, informative_fraction_beta, kv_cache_bytes,
                               kv_cache_bytes_per_token, model_preset, variant_step_cost)

LLAMA2_7B = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
                 intermediate_size=11008, mlp="swiglu")
STEP = dict(num_prompts=32, group_size=16, prompt_len=512, response_len=4096)


# ---- DAPO's rounds under a distribution of pass rates ----------------------------------------

@pytest.mark.parametrize("alpha, beta, rounds", [(8, 2, 1.98), (2, 0.5, 2.00), (0.8, 0.2, 2.54)])
def test_rounds_at_mean_pass_rate_0_8_rise_when_rates_vary(alpha, beta, rounds):
    """Issue 21's values: mean 0.8, B = 32, K = 3, G = 16 (the 7B example of sec-variant-costs);
    one pass rate of 0.8 for every prompt gives 1.60."""
    f = informative_fraction_beta(alpha, beta, 16)
    assert dynamic_sampling_rounds(f, 32, 3)["expected_rounds"] == pytest.approx(rounds, abs=0.01)
    equal = dynamic_sampling_rounds(informative_fraction(0.8, 16), 32, 3)["expected_rounds"]
    assert equal == pytest.approx(1.60, abs=0.01) and rounds > equal
    assert f < informative_fraction(alpha / (alpha + beta), 16)       # Jensen: f is concave


def test_beta_moments_against_a_sample_and_closed_forms():
    # E[q^G] of Beta(a, b) is B(a + G, b) / B(a, b); at G = 1 a group of one is never informative
    q = np.random.default_rng(0).beta(2.0, 0.5, size=400_000)
    assert informative_fraction_beta(2.0, 0.5, 16) == pytest.approx(
        informative_fraction(q, 16), abs=3e-3)
    assert informative_fraction_beta(2.0, 0.5, 1) == pytest.approx(0.0, abs=1e-15)
    # Beta(1, 1) is uniform: E[q^G] = 1 / (G + 1), so f = 1 - 2 / (G + 1)
    assert informative_fraction_beta(1, 1, 4) == pytest.approx(1 - 2 / 5)
    # concentrated near the mean the distribution gives the equal-rate value back
    assert informative_fraction_beta(8e5, 2e5, 16) == pytest.approx(
        informative_fraction(0.8, 16), rel=1e-4)


def test_rounds_with_varied_pass_rates_by_simulating_dapo_sampling():
    """Monte Carlo of the sampler itself: every round draws B fresh prompts with q ~ Beta(0.8,
    0.2), G = 16 samples each, keeps the groups whose rewards differ, at most K = 3 extra rounds."""
    rng, B, G, K, trials = np.random.default_rng(1), 32, 16, 3, 20_000
    q = rng.beta(0.8, 0.2, size=(trials, K + 1, B))
    right = rng.binomial(G, q)                                          # (trials, K+1, B)
    kept = np.cumsum(((right > 0) & (right < G)).sum(axis=2), axis=1)  # after each round
    rounds = 1 + np.minimum((kept < B).sum(axis=1), K)
    expected = dynamic_sampling_rounds(informative_fraction_beta(0.8, 0.2, G), B, K)
    assert rounds.mean() == pytest.approx(expected["expected_rounds"], abs=0.02)


@pytest.mark.parametrize("kwargs, name", [(dict(alpha=0, beta=1, group_size=4), "alpha"),
                                          (dict(alpha=1, beta=-1, group_size=4), "beta"),
                                          (dict(alpha=1, beta=float("nan"), group_size=4), "beta"),
                                          (dict(alpha=1, beta=1, group_size=0), "group_size")])
def test_bad_beta_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        informative_fraction_beta(**kwargs)


# ---- PPO against GRPO at equal epochs ---------------------------------------------------------

def test_ppo_work_against_grpo_at_equal_epochs():
    """Lab 3's 7B example (KL 0.001, a reference for both): 3.03x GRPO's work with 2 epochs x 2
    minibatches, 1.82x with one update; minibatches split a pass, they add no work."""
    grpo = variant_step_cost("grpo", **LLAMA2_7B, **STEP, kl_coef=0.001).workdepth.work_flops
    ppo = {(e, m): variant_step_cost("ppo", **LLAMA2_7B, **STEP, kl_coef=0.001, ppo_epochs=e,
                                     num_minibatches=m).workdepth
           for e, m in ((2, 2), (2, 1), (1, 1), (1, 2))}
    assert ppo[2, 2].work_flops / grpo == pytest.approx(3.03, abs=0.005)
    assert ppo[1, 1].work_flops / grpo == pytest.approx(1.82, abs=0.005)
    assert ppo[1, 2].work_flops == pytest.approx(ppo[1, 1].work_flops, rel=1e-5)
    # the second epoch is one more forward, backward and optimizer step of policy and critic
    extra = sum(ppo[1, 1].phase(p).work_flops
                for p in ("train_forward", "train_backward", "optimizer", "critic_forward",
                          "critic_backward", "critic_optimizer"))
    assert ppo[2, 1].work_flops - ppo[1, 1].work_flops == pytest.approx(extra, rel=1e-9)
    # without a KL term (no reference pass on either side) one update each is 2.03x
    plain = variant_step_cost("grpo", **LLAMA2_7B, **STEP).workdepth.work_flops
    one = variant_step_cost("ppo", **LLAMA2_7B, **STEP, ppo_epochs=1, num_minibatches=1)
    assert one.workdepth.work_flops / plain == pytest.approx(2.03, abs=0.005)


# ---- decode's arithmetic intensity at a large batch ------------------------------------------

def test_decode_intensity_tends_to_a_sequence_flops_over_its_cache():
    """Qwen2.5-7B (28 heads, 4 KV heads): attention alone does H / n_kv = 7 FLOPs per byte of
    cache; the large-batch limit (2N + attention) / KV bytes is 488, 248, 67 and 14.5 at 512,
    1k, 4k and 32k tokens, (limit - 7) falling like 1 / context."""
    qwen = model_preset("qwen2.5-7b")
    attention = ((decode_step_flops(qwen, 1, 4096) - decode_step_flops(qwen, 1, 0))
                 / kv_cache_bytes(qwen, 4096))
    assert attention == pytest.approx(qwen.num_attention_heads / qwen.kv_heads) == 7.0
    # peer formula from the config: 4 H d_h FLOPs against 4 n_kv d_h bytes per token and layer
    per_token = 4 * qwen.num_attention_heads * qwen.head_size * qwen.num_hidden_layers
    assert per_token / kv_cache_bytes_per_token(qwen) == pytest.approx(7.0)
    limit = {c: decode_step_flops(qwen, 1, c) / kv_cache_bytes(qwen, c)
             for c in (512, 1024, 4096, 32768)}
    for c, expected in ((512, 488), (1024, 248), (4096, 67), (32768, 14.5)):
        assert limit[c] == pytest.approx(expected, rel=0.005)
        batch = decode_step_flops(qwen, 10**7, c) / decode_step_bytes(qwen, 10**7, c)
        assert batch == pytest.approx(limit[c], rel=1e-3)               # a huge batch reaches it
    scaled = [(limit[c] - attention) * c for c in limit]
    assert max(scaled) / min(scaled) < 1.01


# ---- what a sweep run counted ------------------------------------------------------------------

def test_reached_costs_sum_the_flops_of_the_steps_before_the_target():
    from rlmperf_lite.book import reached_costs
    from rlmperf_lite.rl import SweepRun
    h = ({"step": 0, "resample_rounds": 1, "step_s": 9.0, "decode_flops": 2.0,
          "train_forward_flops": 3.0},
         {"step": 1, "resample_rounds": 0, "step_s": 9.0, "decode_flops": 1.0,
          "eval_accuracy": 0.95},
         {"step": 2, "resample_rounds": 0, "step_s": 9.0, "decode_flops": 100.0})
    runs = [SweepRun("dapo", 0, 8, 0.9, h), SweepRun("dapo", 1, 8, 0.9, h[:1])]
    assert reached_costs(runs) == [{"variant": "dapo", "seed": 0, "step": 2, "samples": 24,
                                    "flops": 6.0}]           # seed 1 never evaluated: left out
