"""The rollout engine with other numerics, the engine–trainer mismatch it causes, and the GRPO
options that correct it (rlmperf_lite.nn.engine, rlmperf_lite.rl.mismatch, issue 19 §4)."""
import numpy as np
import pytest

from rlmperf_lite.nn import (EngineConfig, TinyLMConfig, engine_logprobs, generate, init_params,
                             round_bf16, round_fp16, token_logps, truncate_logps)
from rlmperf_lite.rl import (GRPOConfig, mismatch_metrics, rollout_is_weights, rollout_rs_mask,
                             token_kl, train_grpo)
from rlmperf_lite.tasks import AdditionTask


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


# ---- bf16 / fp16 rounding ---------------------------------------------------------------------
@pytest.mark.parametrize("src, want", [
    (0x3F800000, 0x3F800000),   # 1.0 is exact
    (0x3F808000, 0x3F800000),   # 1 + 2^-8: halfway between 1 and 1 + 2^-7, ties to even (down)
    (0x3F818000, 0x3F820000),   # halfway between 0x3F81 and 0x3F82: ties to even (up)
    (0x3F808001, 0x3F810000),   # just above halfway: up
    (0x3F807FFF, 0x3F800000),   # just below halfway: down
    (0x40490FDB, 0x40490000),   # pi -> 3.140625
    (0xBF808000, 0xBF800000),   # -(1 + 2^-8) -> -1 (sign kept, ties to even)
    (0x7F7F0000, 0x7F7F0000),   # bf16's largest finite value is exact
    (0x7F7FFFFF, 0x7F800000),   # float32's largest rounds past bf16's: +inf
    (0x7F800000, 0x7F800000),   # +inf
    (0x80000000, 0x80000000),   # -0.0
    (0x00008000, 0x00000000),   # a subnormal tie rounds to the even 0
    (0x00018000, 0x00020000),   # and this one to the even 0x0002
])
def test_round_bf16_known_bit_patterns(src, want):
    assert int(_bits(round_bf16(_f32([src])))[0]) == want


def test_round_bf16_keeps_nan_even_with_only_low_mantissa_bits():
    # 0x7F800001 is a NaN whose set bit is cleared by the rounding: it must not become inf
    assert np.isnan(round_bf16(_f32([0x7F800001, 0x7FC00000]))).all()


def _bf16_by_frexp(x):
    """An independent rounding: keep 8 significant bits with np.rint (ties to even)."""
    m, e = np.frexp(x.astype(np.float64))                 # m in [0.5, 1): 8 bits = m * 256
    return (np.ldexp(np.rint(m * 256.0), e - 8)).astype(np.float32)


def test_round_bf16_matches_an_independent_rounding_on_random_normals():
    x = (np.random.default_rng(0).standard_normal(100_000) *
         10.0 ** np.random.default_rng(1).uniform(-30, 30, 100_000)).astype(np.float32)
    np.testing.assert_array_equal(_bits(round_bf16(x)), _bits(_bf16_by_frexp(x)))
    assert (_bits(round_bf16(x)) & 0xFFFF == 0).all()


def test_round_bf16_matches_torch_when_installed():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal(10_000).astype(np.float32)
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(_bits(round_bf16(x)), _bits(ref))


def test_round_fp16_ties_to_even_and_overflows_at_65520():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65520.0, -65520.0], np.float32)
    np.testing.assert_array_equal(round_fp16(x), [1.0, 1 + 2**-9, 65504.0, np.inf, -np.inf])


# ---- truncation -------------------------------------------------------------------------------
P4 = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))


@pytest.mark.parametrize("top_k, top_p, want", [
    (2, None, [0.625, 0.375, 0, 0]),          # top-2 renormalised: 0.5 / 0.8, 0.3 / 0.8
    (None, 0.8, [0.625, 0.375, 0, 0]),        # 0.5 + 0.3 reaches 0.8: the third is not needed
    (None, 0.81, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),
    (None, 0.4, [1, 0, 0, 0]),                # the best token alone
    (3, 0.9, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),   # 0.8 < 0.9 * 0.95 of the top-3 mass
    (None, None, [0.5, 0.3, 0.15, 0.05]),
])
def test_truncate_logps_hand_computed(top_k, top_p, want):
    np.testing.assert_allclose(np.exp(truncate_logps(P4, top_k, top_p)), [want], atol=1e-12)


@pytest.mark.parametrize("kwargs, name", [
    ({"dtype": "fp8"}, "EngineConfig.dtype"), ({"top_k": 0}, "EngineConfig.top_k"),
    ({"top_p": 0.0}, "EngineConfig.top_p"), ({"top_p": 1.5}, "EngineConfig.top_p"),
])
def test_engine_config_rejects_bad_fields_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        EngineConfig(**kwargs)


# ---- the engine's sampling --------------------------------------------------------------------
TASK, CFG = AdditionTask(), TinyLMConfig()
PARAMS = init_params(CFG, np.random.default_rng(0))
PROMPTS = TASK.sample_prompts(np.random.default_rng(1), 8)[0]


def _rollout(engine, seed=2):
    return generate(PARAMS, PROMPTS, CFG, max_new_tokens=5, eos_id=TASK.eos_id,
                    pad_id=TASK.pad_id, group_size=4, rng=np.random.default_rng(seed),
                    engine=engine)


def test_float32_engine_samples_as_the_trainer_does():
    """No rounding, no truncation: only the prefill kernel differs (position by position)."""
    a, b = _rollout(None), _rollout(EngineConfig("float32"))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.per_token_logps, b.per_token_logps, atol=2e-6)


@pytest.mark.parametrize("engine", [EngineConfig("bfloat16"), EngineConfig("float16"),
                                    EngineConfig("bfloat16", top_k=3),
                                    EngineConfig("float32", top_p=0.7)])
def test_engine_logps_are_its_own_distribution_teacher_forced(engine):
    """generate's per_token_logps are engine_logprobs' at the sampled tokens, exactly, and every
    sampled token lies inside the engine's top-k / top-p set."""
    ro = _rollout(engine)
    P, mask = ro.prompt_len, ro.completion_mask > 0
    q = engine_logprobs(PARAMS, ro.tokens, CFG, engine)[:, P - 1:]          # (n, R, V)
    at = np.take_along_axis(q, ro.tokens[:, P:, None], axis=-1)[..., 0]
    np.testing.assert_array_equal(at[mask], ro.per_token_logps[mask])
    assert np.isfinite(at[mask]).all()
    if engine.top_k:
        assert (np.isfinite(q[mask]).sum(axis=-1) == engine.top_k).all()


def test_bf16_weights_and_activations_change_the_log_probs():
    engine = EngineConfig("bfloat16")
    assert all((_bits(v) & 0xFFFF == 0).all() for v in engine.params(PARAMS).values())
    ro = _rollout(engine)
    trainer = token_logps(PARAMS, ro.tokens, CFG)[:, ro.prompt_len - 1:]
    diff = np.abs(trainer - ro.per_token_logps)[ro.completion_mask > 0]
    assert diff.max() > 1e-4 and diff.max() < 0.1        # bf16's 2^-8 relative steps, not noise


# ---- measuring the mismatch -------------------------------------------------------------------
def test_token_kl_hand_computed_zero_when_equal_and_positive():
    q = np.log(np.array([[[0.5, 0.5]]]))
    p = np.log(np.array([[[0.25, 0.75]]]))
    mask = np.ones((1, 1))
    assert token_kl(q, p, mask) == pytest.approx(0.5 * np.log(2) + 0.5 * np.log(2 / 3))
    assert token_kl(q, q, mask) == 0
    truncated = np.array([[[0.0, -np.inf]]])             # the engine keeps token 0 only
    assert token_kl(truncated, p, mask) == pytest.approx(-np.log(0.25))


def test_token_kl_of_the_engines_is_small_and_positive():
    ro = _rollout(EngineConfig("bfloat16"))
    P = ro.prompt_len
    trainer = engine_logprobs(PARAMS, ro.tokens, CFG, EngineConfig("float32"))[:, P - 1:]
    kls = {d: token_kl(engine_logprobs(PARAMS, ro.tokens, CFG, EngineConfig(d))[:, P - 1:],
                       trainer, ro.completion_mask) for d in ("float32", "bfloat16", "float16")}
    assert kls["float32"] == 0
    assert 0 < kls["float16"] < kls["bfloat16"] < 1e-3   # fp16 has 3 more mantissa bits


def test_mismatch_metrics_zero_when_engine_equals_trainer_and_k3_nonnegative():
    rng = np.random.default_rng(3)
    old = np.log(rng.uniform(0.05, 1, (6, 5)))
    mask = (np.arange(5) < rng.integers(1, 6, (6, 1))).astype(float)
    m = mismatch_metrics(old, old, mask)
    assert m["mismatch_kl"] == 0 and m["mismatch_k3_kl"] == 0
    assert m["mismatch_ratio_min"] == m["mismatch_ratio_max"] == m["mismatch_ratio_p50"] == 1
    roll = old + rng.normal(0, 0.3, old.shape)
    m = mismatch_metrics(old, roll, mask)
    rho = np.exp(old - roll)[mask > 0]
    assert m["mismatch_k3_kl"] == pytest.approx(np.mean(rho - 1 - np.log(rho))) and \
        m["mismatch_k3_kl"] > 0
    assert m["mismatch_ratio_p90"] == pytest.approx(np.quantile(rho, 0.9))
    assert m["mismatch_ratio_max"] == pytest.approx(rho.max())


OLD = np.array([[-1.0, -2.0, -3.0]])
ROLL = np.array([[-1.5, -1.0, -3.0]])
MASK = np.array([[1.0, 1.0, 0.0]])


def test_truncated_token_is_weights_equal_the_hand_computation():
    w, m = rollout_is_weights(OLD, ROLL, MASK, level="token", threshold=1.5)
    # rho = exp(0.5) = 1.649 (capped at 1.5), exp(-1) = 0.368, masked 0
    np.testing.assert_allclose(w, [[1.5, np.exp(-1), 0]], rtol=1e-6)
    assert m["rollout_is_ratio_fraction_high"] == 0.5
    assert m["rollout_is_mean"] == pytest.approx((1.5 + np.exp(-1)) / 2, rel=1e-6)


def test_sequence_is_weights_use_the_product_of_the_ratios():
    w, _ = rollout_is_weights(OLD, ROLL, MASK, level="sequence", threshold=2.0)
    np.testing.assert_allclose(w, [[np.exp(-0.5), np.exp(-0.5), 0]], rtol=1e-6)
    w, _ = rollout_is_weights(OLD, OLD - 5, MASK, level="sequence", threshold=2.0)
    np.testing.assert_allclose(w, [[2.0, 2.0, 0]])               # exp(10) capped


def test_sequence_mask_geometric_against_product_and_token():
    old = np.zeros((3, 3))
    roll = -np.array([[0.3, 0.3, 0.3],        # geometric e^0.3 = 1.35 in band; product e^0.9 out
                      [0.0, np.log(3), 0.0],  # one token at ratio 3
                      [-1.0, -1.0, 0.0]])     # geometric e^-1 = 0.37 < 1/2 (last masked)
    mask = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0.0]])
    geo, m = rollout_rs_mask(old, roll, mask, level="geometric", threshold=2.0)
    np.testing.assert_array_equal(geo, [[1, 1, 1], [1, 1, 1], [0, 0, 0]])
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 3)
    assert m["rollout_rs_masked_fraction"] == pytest.approx(2 / 8)
    seq, _ = rollout_rs_mask(old, roll, mask, level="sequence", threshold=2.0)
    np.testing.assert_array_equal(seq, [[0, 0, 0], [0, 0, 0], [0, 0, 0]])
    tok, _ = rollout_rs_mask(old, roll, mask, level="token", threshold=2.0)
    np.testing.assert_array_equal(tok, [[1, 1, 1], [1, 0, 1], [0, 0, 0]])
    wide, _ = rollout_rs_mask(old, roll, mask, level="geometric", threshold=2.0,
                              threshold_lower=0.3)
    np.testing.assert_array_equal(wide[2], [1, 1, 0])


@pytest.mark.parametrize("call, name", [
    (lambda: rollout_is_weights(OLD, ROLL, MASK, level="seq"), "level"),
    (lambda: rollout_is_weights(OLD, ROLL, MASK, threshold=0), "threshold"),
    (lambda: rollout_rs_mask(OLD, ROLL, MASK, threshold=0.5), "threshold"),
    (lambda: rollout_rs_mask(OLD, ROLL, MASK, threshold_lower=1.5), "threshold_lower"),
    (lambda: rollout_is_weights(OLD, ROLL[:, :2], MASK), "rollout_per_token_logps"),
    (lambda: mismatch_metrics(OLD, ROLL, MASK * 0), "completion_mask"),
    (lambda: mismatch_metrics(OLD, ROLL, MASK, quantiles=(1.5,)), "quantiles"),
    (lambda: token_kl(OLD, OLD, MASK), "rollout_logprobs"),
])
def test_mismatch_functions_reject_bad_inputs_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ---- GRPO with an engine and each correction --------------------------------------------------
SHORT = dict(steps=3, num_prompts=8, warmstart_max_steps=30, lr_warmup_steps=0)


@pytest.mark.parametrize("kwargs, name", [
    ({"rollout_is": "token"}, "bypass_mode"), ({"rollout_rs": "geometric"}, "bypass_mode"),
    ({"rollout_is": "tok", "bypass_mode": False}, "GRPOConfig.rollout_is"),
    ({"rollout_rs_threshold": 0.5}, "GRPOConfig.rollout_rs_threshold"),
    ({"rollout_dtype": "fp8"}, "GRPOConfig.rollout_dtype"), ({"top_k": 0}, "GRPOConfig.top_k"),
    ({"bypass_mode": "yes"}, "GRPOConfig.bypass_mode"),
])
def test_grpo_config_rejects_bad_correction_fields(kwargs, name):
    with pytest.raises(ValueError, match=name):
        GRPOConfig(**kwargs)


def test_defaults_have_no_engine_and_log_nothing_new():
    c = GRPOConfig(**SHORT)
    assert c.engine is None and c.bypass_mode and c.clip_ratio_c is None
    row = train_grpo(c).history[-1]
    assert not [k for k in row if k.startswith(("mismatch_", "rollout_is", "rollout_rs", "clipfrac_lower",
                                                "old_logps"))]


def test_trusting_the_bf16_engine_logs_the_mismatch_and_ratio_is_not_one():
    row = train_grpo(GRPOConfig(rollout_dtype="bfloat16", **SHORT)).history[0]
    assert row["mismatch_k3_kl"] > 0 and row["ratio_max"] > 1 + 1e-5   # no update yet: engine
    assert "old_logps_s" not in row


def test_recomputing_old_logps_makes_the_ratio_exactly_one():
    row = train_grpo(GRPOConfig(rollout_dtype="bfloat16", bypass_mode=False,
                                **SHORT)).history[0]
    assert row["ratio_max"] == 1 and row["approx_kl"] == 0 and row["clipfrac"] == 0
    assert row["old_logps_s"] > 0 and row["old_logps_flops"] > 0 and row["mismatch_k3_kl"] > 0


def test_token_tis_and_geometric_rejection_run_and_log_their_metrics():
    c = GRPOConfig(rollout_dtype="bfloat16", top_k=8, bypass_mode=False, rollout_is="token",
                   rollout_rs="geometric", rollout_rs_threshold=1.5, **SHORT)
    rows = train_grpo(c).history
    assert all(0 < r["rollout_is_mean"] <= 2 for r in rows)
    assert all(0 <= r["rollout_rs_masked_fraction"] <= 1 for r in rows)
    # top-k renormalises the engine's probabilities up: the typical ratio trainer/engine is < 1
    assert rows[0]["mismatch_ratio_p50"] < 1 and rows[0]["mismatch_kl"] > 0


def test_grpo_loss_weighs_the_surrogate_only_not_the_kl_term():
    from rlmperf_lite.rl import (aggregate_weights, grpo_loss, grpo_loss_grad, kl_estimate,
                                 loss_norms, policy_loss, policy_loss_grad)
    rng = np.random.default_rng(9)
    old = np.log(rng.uniform(0.1, 1, (4, 3)))
    logps, ref = old + rng.normal(0, 0.1, old.shape), old + rng.normal(0, 0.1, old.shape)
    adv, mask, w = rng.normal(size=4), np.ones((4, 3)), rng.uniform(0, 2, (4, 3))
    c = GRPOConfig(kl_coef=0.1, kl_estimator="abs")
    norms = loss_norms(mask, c)
    agg = aggregate_weights(mask, c.loss_agg_mode, **norms)
    pg = policy_loss(logps, old, adv, mask)[0]
    want = (agg * (w * pg + 0.1 * kl_estimate(logps, ref, "abs"))).sum()
    got, _ = grpo_loss(logps, old, adv, mask, c, norms, ref_per_token_logps=ref,
                       rollout_is_weights=w)
    assert got == pytest.approx(want)
    g = grpo_loss_grad(logps, old, adv, mask, c, norms, ref_per_token_logps=ref,
                       rollout_is_weights=w)
    np.testing.assert_allclose(g, agg * (w * policy_loss_grad(logps, old, adv, mask)
                                         - 0.1 * np.sign(ref - logps)), rtol=1e-6)


# ---- the loops that do not run the engine refuse its options ----------------------------------
@pytest.mark.parametrize("kwargs", [{"rollout_dtype": "bfloat16"}, {"top_p": 0.95},
                                    {"top_k": 8}, {"bypass_mode": False},
                                    {"bypass_mode": False, "rollout_is": "token"},
                                    {"bypass_mode": False, "rollout_rs": "geometric"}])
def test_async_parallel_and_ray_loops_refuse_the_engine_options(kwargs):
    from rlmperf_lite.distributed import run_config
    from rlmperf_lite.parallel import (DeviceMesh, train_grpo_mesh, train_grpo_pipeline,
                                       train_grpo_zero)
    from rlmperf_lite.rl import AsyncGRPOConfig, train_async_grpo
    name = next(iter(kwargs))
    c = GRPOConfig(**kwargs)
    calls = [(lambda: train_async_grpo(AsyncGRPOConfig(**kwargs)), "train_async_grpo"),
             (lambda: run_config(c, "sync"), "train_ray"),
             (lambda: train_grpo_mesh(c, DeviceMesh(dp=2, tp=1)), "the mesh"),
             (lambda: train_grpo_zero(c, 2, 1), "ZeRO"),
             (lambda: train_grpo_pipeline(c, pp=2, microbatches=2), "the pipeline")]
    for call, loop in calls:
        with pytest.raises(ValueError, match=rf"GRPOConfig\.{name}=.*{loop}.*train_grpo"):
            call()


def test_the_other_loops_accept_the_default_config():
    from rlmperf_lite.distributed import run_config
    GRPOConfig().check_train_grpo_only("any loop")               # defaults pass
    assert run_config(GRPOConfig(), "sync").staleness == 0
