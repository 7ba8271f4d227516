"""Chapter 3's tools: shared base models and sweeps, KL-estimator gradients (Tang & Munos 2025),
the informative-group fraction and DAPO's resampling cost, and the variant cost calculator."""
import numpy as np
import pytest

from rlmperf_lite.nn import generate
from rlmperf_lite.rl import (GRPOConfig, SweepRun, categorical_kl_gradients, run_sweep,
                             sweep_table, train_grpo, warm_start)
from rlmperf_lite.tasks import AdditionTask
from rlmperf_lite.cost.variants import (BYTES_PER_TRAINABLE_PARAM, dynamic_sampling_rounds,
                                        informative_fraction, variant_step_cost)
from rlmperf_lite.cost import grpo_step_workdepth

SHORT = dict(steps=6, warmstart_max_steps=30)
TOY = dict(num_layers=2, hidden_size=64, num_heads=4, vocab_size=14, intermediate_size=256,
           mlp="relu")


def _no_timings(history):
    return [{k: v for k, v in h.items() if not k.endswith("_s")} for h in history]


def test_shared_base_model_trains_exactly_like_its_own_warm_start():
    c = GRPOConfig.variant("dapo", seed=3, **SHORT)
    own = train_grpo(c)
    shared = train_grpo(c, base_params=own.base_params)
    assert shared.warmstart_s == 0
    assert _no_timings(shared.history) == _no_timings(own.history)
    for k in own.params:
        np.testing.assert_array_equal(shared.params[k], own.params[k])
    bad = dict(own.base_params)
    bad.pop("lm_head")
    with pytest.raises(ValueError, match="base_params lacks weight 'lm_head'"):
        train_grpo(c, base_params=bad)
    bad = {**own.base_params, "wte": np.zeros((3, 3))}
    with pytest.raises(ValueError, match=r"base_params\['wte'\] has shape"):
        train_grpo(c, base_params=bad)
    bad = {**own.base_params, "wte": np.full_like(own.base_params["wte"], np.nan)}
    with pytest.raises(ValueError, match=r"base_params\['wte'\] has non-finite values"):
        train_grpo(c, base_params=bad)


def test_sweep_in_worker_processes_equals_the_in_process_sweep():
    kw = dict(variants=["grpo", "rloo"], seeds=[0], target_accuracy=0.99, eval_every=3,
              progress=False, **SHORT)
    one, two = run_sweep(max_workers=1, **kw), run_sweep(max_workers=2, **kw)
    assert [(r.variant, r.seed) for r in one] == [("grpo", 0), ("rloo", 0)]
    for a, b in zip(one, two):
        assert _no_timings(a.history) == _no_timings(b.history)
    alone = train_grpo(GRPOConfig.variant("rloo", seed=0, **SHORT), eval_every=3)
    assert _no_timings(one[1].history) == _no_timings(alone.history)
    with pytest.raises(ValueError, match="variant must be one of"):
        run_sweep(variants=["ppo"], seeds=[0])
    for bad in ({"seeds": [0, 0]}, {"seeds": 0}, {"seeds": [[0]]}, {"variants": "grpo"},
                {"seeds": [0], "seed": 3}):
        with pytest.raises(ValueError, match="seeds|variants"):
            run_sweep(**bad)
    with pytest.raises(ValueError, match="max_workers"):
        run_sweep(seeds=[0], max_workers=0)


def test_sweep_curve_counts_resampled_samples_and_the_table_summarises_hits():
    def row(step, rounds, acc=None):
        h = {"step": step, "resample_rounds": rounds, "step_s": 0.5}
        return h if acc is None else {**h, "eval_accuracy": acc}
    a = SweepRun("dapo", 0, 8, 0.9, (row(0, 1), row(1, 0, 0.5), row(2, 2), row(3, 0, 0.95)))
    b = SweepRun("dapo", 1, 8, 0.9, (row(0, 0), row(1, 0, 0.92)))
    c = SweepRun("grpo", 0, 8, 0.9, (row(0, 0), row(1, 0, 0.3)))
    assert a.curve == [{"step": 2, "samples": 24, "train_s": 1.0, "eval_accuracy": 0.5},
                       {"step": 4, "samples": 56, "train_s": 2.0, "eval_accuracy": 0.95}]
    assert a.reached["samples"] == 56 and c.reached is None
    table = sweep_table([a, b, c])
    assert table[0] == {"variant": "dapo", "runs": 2, "reached": 2, "step": (3.0, 2, 4),
                        "samples": (36.0, 16, 56), "train_s": (1.5, 1.0, 2.0)}
    assert table[1] == {"variant": "grpo", "runs": 1, "reached": 0, "step": None,
                        "samples": None, "train_s": None}


def test_kl_estimator_gradients_as_losses_on_three_actions():
    """Tang & Munos 2025 (arXiv 2506.09477): as a loss, k1's expected gradient is 0, k2's is
    grad KL(pi || ref), k3's is grad KL(ref || pi); k1 as a reward (score function) gives
    grad KL(pi || ref). True gradients checked by finite
    differences here, independently of the closed forms."""
    logits, ref = np.array([0.3, -1.0, 2.0]), np.array([0.2, 0.5, 0.3])
    g = categorical_kl_gradients(logits, ref)

    def kl(z, direction):
        pi = np.exp(z) / np.exp(z).sum()
        p, q = (pi, ref) if direction == "pi_ref" else (ref, pi)
        return float((p * np.log(p / q)).sum())

    for direction in ("pi_ref", "ref_pi"):
        fd = [(kl(logits + e, direction) - kl(logits - e, direction)) / 2e-6
              for e in np.eye(3) * 1e-6]
        np.testing.assert_allclose(g[f"kl_{direction}"], fd, atol=1e-8)
    np.testing.assert_allclose(g["k1"], 0, atol=1e-12)
    np.testing.assert_allclose(g["k2"], g["kl_pi_ref"], atol=1e-12)
    np.testing.assert_allclose(g["k3"], g["kl_ref_pi"], atol=1e-12)
    np.testing.assert_allclose(g["k1_reward"], g["kl_pi_ref"], atol=1e-12)   # KL in the reward
    assert np.abs(g["k3"] - g["kl_pi_ref"]).max() > 0.1
    with pytest.raises(ValueError, match="ref_probs must be 3 positive"):
        categorical_kl_gradients(logits, [0.5, 0.5, 0.0])
    far = categorical_kl_gradients([0.0, -500.0], [0.5, 0.5])    # pi(1) ~ 1e-217: still exact
    np.testing.assert_allclose(far["k3"], [0.5, -0.5])
    with pytest.raises(ValueError, match="logits must lie within 600"):
        categorical_kl_gradients([800.0, 0.0], [0.5, 0.5])
    with pytest.raises(ValueError, match="logits must be"):
        categorical_kl_gradients([1.0], [1.0])


def test_informative_fraction_known_values_and_measured_on_the_toy_policy():
    assert informative_fraction(0.5, 4) == pytest.approx(1 - 2 / 16)
    assert informative_fraction([0.0, 1.0], 8) == 0
    assert informative_fraction(0.3, 1) == 0
    for bad in ([0.2, float("nan")], "0.5", True, [0.5, [0.2]], {"a": 1}, 0.5 + 0j, [[0.1]],
                [], 1.5):
        with pytest.raises(ValueError, match="pass_rates must be"):
            informative_fraction(bad, 4)
    # measurement: per-prompt pass rates of the base model from 64 samples each predict the
    # share of groups of 4 (sampled independently) whose rewards differ
    task, cfg = AdditionTask(), GRPOConfig().model
    params, _ = warm_start(cfg, task, np.random.default_rng(0), target_accuracy=0.4)
    prompts, pairs = task.sample_prompts(np.random.default_rng(1), 200)
    rng = np.random.default_rng(2)

    def rewards(G):
        ro = generate(params, prompts, cfg, max_new_tokens=5, eos_id=task.eos_id,
                      pad_id=task.pad_id, group_size=G, rng=rng)
        return task.reward(np.repeat(pairs, G, axis=0), ro.tokens[:, ro.prompt_len:]).reshape(
            len(pairs), G)
    pass_rates = rewards(64).mean(axis=1)
    groups = rewards(4)
    measured = float(np.mean(groups.max(axis=1) > groups.min(axis=1)))
    assert 0.2 < measured < 0.9                                # not a degenerate policy
    assert informative_fraction(pass_rates, 4) == pytest.approx(measured, abs=0.07)


def test_dynamic_sampling_rounds_limits_and_monte_carlo():
    assert dynamic_sampling_rounds(1.0, 32)["expected_rounds"] == 1
    zero = dynamic_sampling_rounds(0.0, 32, 3)
    assert zero["expected_rounds"] == 4 and zero["prob_short"] == 1
    assert zero["expected_informative"] == 0
    # f = 0.9 with B = 32: one round keeps ~29 groups, so almost always a second round
    assert dynamic_sampling_rounds(0.9, 32, None)["expected_rounds"] == pytest.approx(2, abs=0.05)
    with pytest.raises(ValueError, match="informative_frac=0.0 needs about inf rounds"):
        dynamic_sampling_rounds(0.0, 32, None)
    with pytest.raises(ValueError, match="num_prompts"):
        dynamic_sampling_rounds(0.5, 0)
    with pytest.raises(ValueError, match="it must be >= 0.001"):           # would take 1e9 rounds
        dynamic_sampling_rounds(1e-9, 1, None)
    with pytest.raises(ValueError, match="max_resample_rounds must be <= 10000"):
        dynamic_sampling_rounds(0.5, 32, 10**9)
    assert dynamic_sampling_rounds(1e-9, 32, 10_000)["expected_rounds"] == pytest.approx(10_001)
    # above 4096 prompts the binomial is replaced by its normal approximation: no jump
    exact, approx = (dynamic_sampling_rounds(0.5, B, None)["expected_rounds"] for B in (4096, 4097))
    assert approx == pytest.approx(exact, abs=1e-3)
    rng, f, B, R = np.random.default_rng(0), 0.3, 8, 3
    rounds, kept_used = [], []
    for _ in range(40_000):
        kept, r = 0, 0
        while True:
            kept += rng.binomial(B, f)
            if kept >= B or r == R:
                break
            r += 1
        rounds.append(r + 1)
        kept_used.append(min(kept, B))
    exact = dynamic_sampling_rounds(f, B, R)
    assert exact["expected_rounds"] == pytest.approx(np.mean(rounds), rel=0.01)
    assert exact["expected_informative"] == pytest.approx(np.mean(kept_used), rel=0.01)


def test_dynamic_sampling_rounds_predict_the_toy_dapo_run():
    """Measurement: the rounds DAPO's loop sampled vs the formula fed with each step's measured
    share of zero-variance groups (first round)."""
    h = train_grpo(GRPOConfig.variant("dapo", seed=1, steps=250)).history
    measured = np.mean([1 + x["resample_rounds"] for x in h])
    predicted = np.mean([dynamic_sampling_rounds(1 - x["frac_reward_zero_std"], 32, 3)
                         ["expected_rounds"] for x in h])
    assert measured > 1.5                    # resampling happened
    assert predicted == pytest.approx(measured, rel=0.1)


def test_variant_step_cost_models_passes_and_resampling():
    # the constant behind the memory column: ZeRO (arXiv 1910.02054) Fig. 1, 7.5B -> 120 GB
    assert BYTES_PER_TRAINABLE_PARAM * 7.5e9 == 120e9
    shape = dict(**TOY, num_prompts=32, group_size=4, prompt_len=6, response_len=5)
    grpo = variant_step_cost("grpo", **shape)
    n = grpo.model_state_bytes / 16
    assert grpo.frozen_models == () and grpo.passes == {"forward": 128, "backward": 128}
    assert grpo.workdepth == grpo_step_workdepth(**shape)
    kl = variant_step_cost("grpo", kl_coef=0.04, **shape)
    assert kl.frozen_models == ("reference",) and kl.model_state_bytes == 18 * n
    assert kl.passes["forward"] == 256
    ppo = variant_step_cost("ppo", **shape)
    assert ppo.trainable_models == ("policy", "critic")
    assert ppo.passes == {"forward": 128 * 5, "backward": 128 * 4}
    assert ppo.model_state_bytes == 16 * (2 * n - 14 * 64 + 64)
    dapo = variant_step_cost("dapo", informative_frac=0.5, **shape)
    r = dynamic_sampling_rounds(0.5, 32, 3)["expected_rounds"]
    assert dapo.samples_generated == pytest.approx(128 * r)
    for name in ("prefill", "decode", "reward", "train_forward"):
        scale = r if name != "train_forward" else 1
        assert dapo.workdepth.phase(name).work_flops == pytest.approx(
            grpo.workdepth.phase(name).work_flops * scale)
    assert variant_step_cost("grpo", informative_frac=0.5, **shape).informative_groups == 16
    no_kl = variant_step_cost("dapo", kl_coef=0.04, informative_frac=0.5, **shape)
    assert no_kl.frozen_models == () and no_kl == dapo       # DAPO drops the KL term
    with pytest.raises(ValueError, match="variant must be one of"):
        variant_step_cost("dpo", **shape)
    with pytest.raises(ValueError, match="group_size"):
        variant_step_cost("rloo", **{**shape, "group_size": 1})


def test_compare_variants_uses_the_pass_rate_for_every_variant():
    from rlmperf_lite.cost.variants import compare_variants
    shape = dict(**TOY, num_prompts=32, group_size=4, prompt_len=6, response_len=5)
    costs = compare_variants(pass_rate=0.5, **shape)
    assert [c.variant for c in costs] == ["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp",
                                          "ppo"]
    assert costs[0].informative_groups == pytest.approx(32 * 0.875)
    assert costs[2] == variant_step_cost("dapo", informative_frac=0.875, **shape)
    with pytest.raises(ValueError, match="pass_rate must be a finite number in"):
        compare_variants(pass_rate=1.5, **shape)
    with pytest.raises(ValueError, match="pass_rate=1.0 makes every group uninformative"):
        compare_variants(pass_rate=1.0, max_resample_rounds=None, **shape)
