"""One GRPO update on DP x TP meshes of simulated ranks equals the loop's update (book Chapter 8
lab): dp x tp = 2 x 2, 1 x 4, 4 x 1 (and 2 x 2 with sequence parallelism) against the
single-rank reference step for 2 steps, in float64 (tests/test_parallel_data.py checks that the
reference step is the loop's own update)."""
import numpy as np
import pytest

from rlmperf_lite.nn import AdamW, TinyLMConfig, init_params, token_logps
from rlmperf_lite.parallel import DeviceMesh
from rlmperf_lite.parallel.batch import GRPOBatch, reference_grpo_step
from rlmperf_lite.parallel.grpo_step import full_params, init_parallel_state, parallel_grpo_step
from rlmperf_lite.rl import GRPOConfig
from rlmperf_lite.rl.advantages import grpo_advantages

CFG = TinyLMConfig(vocab_size=11, max_seq_len=8, hidden_size=16, num_layers=2, num_heads=4,
                   intermediate_size=32)
P, R, G, B = 4, 4, 2, 4                           # prompt, response, group size, prompts


def _fixture(seed=0, **overrides):
    """A fixed float64 GRPO batch of B G = 8 rows (4 groups) with ragged completions, behaviour
    log-probs off the current policy (ratios != 1) and group-relative advantages."""
    rng = np.random.default_rng(seed)
    params = init_params(CFG, rng, dtype=np.float64)
    n = B * G
    tokens = rng.integers(0, CFG.vocab_size, (n, P + R))
    mask = (np.arange(R) < rng.integers(1, R + 1, n)[:, None]).astype(np.float64)
    logps = token_logps(params, tokens, CFG)[:, P - 1:]
    batch = {"tokens": tokens, "completion_mask": mask, "prompt_len": P,
             "old_per_token_logps": logps + 0.1 * rng.standard_normal((n, R)),
             "advantages": grpo_advantages(rng.random(n), G),
             "ref_per_token_logps": logps + 0.05 * rng.standard_normal((n, R))}
    config = GRPOConfig(model=CFG, group_size=G, num_prompts=B, max_new_tokens=R, lr=1e-2,
                        steps=10, lr_warmup_steps=1, **overrides)
    return params, batch, config


CONFIGS = {"clipped": {"max_grad_norm": 0.05},                       # clipping active
           "unclipped": {"max_grad_norm": 100.0},
           "seq-mean + KL": {"loss_agg_mode": "seq-mean-token-mean", "kl_coef": 0.1}}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("dp,tp,sp", [(2, 2, False), (1, 4, False), (4, 1, False), (2, 2, True)])
def test_parallel_step_equals_the_single_rank_step(dp, tp, sp, name):
    """After 2 steps (lr schedule steps 0 and 1) the loss, the grad norm and the unsharded
    weights equal the single-rank step's: rtol 1e-9, atol 1e-14. Sums are split differently
    (tp partial products, dp shards), so values differ by rounding; AdamW's first update
    lr g / (|g| + eps) is insensitive to it except for entries with |g| near eps, whose
    updates are then themselves ~1e-10 lr, hence the small atol. Every dp replica is identical."""
    params, batch, config = _fixture(**CONFIGS[name])
    whole = GRPOBatch(batch["tokens"], batch["completion_mask"], batch["old_per_token_logps"],
                      batch["advantages"], P, G, CFG, params, np.zeros(B * G),
                      batch["ref_per_token_logps"])
    ref = {k: v.copy() for k, v in params.items()}
    opt = AdamW(ref, lr=config.lr, betas=config.adam_betas)
    mesh = DeviceMesh(dp=dp, tp=tp)
    rank_params, opt_states = init_parallel_state(params, config, mesh)
    for step in range(2):
        loss, grads, ref = reference_grpo_step(ref, whole, config, opt=opt)   # opt.t: the step
        grad_norm = np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
        got = parallel_grpo_step(rank_params, opt_states, batch, config, mesh, step=step, sp=sp)
        assert got["loss"] == pytest.approx(loss, rel=1e-9)
        assert got["grad_norm"] == pytest.approx(grad_norm, rel=1e-9)
    full = full_params(rank_params, CFG, mesh)
    for k in ref:
        np.testing.assert_allclose(full[k], ref[k], rtol=1e-9, atol=1e-14, err_msg=k)
    for r in range(mesh.size):                   # dp replicas of a tp shard stay identical
        twin = rank_params[mesh.rank(dp=0, tp=mesh.coords(r)["tp"])]
        assert all(np.array_equal(rank_params[r][k], twin[k]) for k in twin)


def test_bytes_per_rank_by_axis_and_op():
    """2 x 2, per rank and step: tp 4 L x 2 (tp-1)/tp x (n/dp) T D x 8 activation bytes + 8 (the
    squared norm, one float: 2 ranks send 8 bytes each); dp 2 (dp-1)/dp x N_rank x 8 gradient
    bytes + 8 (the loss), N_rank = replicated weights + sharded weights / tp. Other meshes: the
    ring sums split a 1-float buffer unevenly over ranks, so the totals over ranks are checked:
    2 (k-1) x 8 per group of k ranks."""
    params, batch, config = _fixture()
    n, T, D, L = B * G, P + R, CFG.hidden_size, CFG.num_layers
    for dp, tp in ((2, 2), (1, 4), (4, 1)):
        mesh = DeviceMesh(dp=dp, tp=tp)
        rank_params, opt_states = init_parallel_state(params, config, mesh)
        out = parallel_grpo_step(rank_params, opt_states, batch, config, mesh)
        n_rank = sum(v.size for v in rank_params[0].values())
        assert n_rank == CFG.num_params() - (1 - 1 / tp) * L * (4 * D * D + 2 * D * 32)
        tp_act = 4 * L * 2 * (tp - 1) / tp * (n // dp) * T * D * 8
        dp_grad = 2 * (dp - 1) / dp * n_rank * 8
        by_axis = out["bytes_by_axis"]
        if (dp, tp) == (2, 2):
            np.testing.assert_array_equal(by_axis["tp"], tp_act + 8)
            np.testing.assert_array_equal(by_axis["dp"], dp_grad + 8)
            np.testing.assert_array_equal(out["bytes_by_op"]["all_reduce"],
                                          tp_act + dp_grad + 16)
        world = mesh.size
        assert by_axis["tp"].sum() == pytest.approx(world * tp_act + dp * 2 * (tp - 1) * 8)
        assert by_axis["dp"].sum() == pytest.approx(world * dp_grad + tp * 2 * (dp - 1) * 8)


def test_bad_input_names_the_parameter():
    """tp not dividing num_heads or intermediate_size, dp not dividing the number of groups, a
    mesh without dp and tp axes, a batch without its keys: ValueError naming each."""
    params, batch, config = _fixture()
    with pytest.raises(ValueError, match="tp=3 must divide num_heads"):
        init_parallel_state(params, config, DeviceMesh(dp=1, tp=3))
    with pytest.raises(ValueError, match="dp=3 must divide the batch's 4 groups"):
        mesh = DeviceMesh(dp=3, tp=1)
        parallel_grpo_step(*init_parallel_state(params, config, mesh), batch, config, mesh)
    cfg_f = TinyLMConfig(vocab_size=11, max_seq_len=8, hidden_size=16, num_heads=4,
                         intermediate_size=30)
    bad_f = GRPOConfig(model=cfg_f, group_size=G, max_new_tokens=R)
    with pytest.raises(ValueError, match="intermediate_size"):
        init_parallel_state(init_params(cfg_f, np.random.default_rng(0)), bad_f,
                            DeviceMesh(dp=1, tp=4))
    with pytest.raises(ValueError, match="mesh must have the axes dp and tp"):
        init_parallel_state(params, config, DeviceMesh(pp=2))
    mesh = DeviceMesh(dp=2, tp=2)
    state = init_parallel_state(params, config, mesh)
    with pytest.raises(ValueError, match="batch must be a dict"):
        parallel_grpo_step(*state, {"tokens": batch["tokens"]}, config, mesh)
    with pytest.raises(ValueError, match="completion_mask"):
        parallel_grpo_step(*state, {**batch, "completion_mask": batch["completion_mask"][:, :2]},
                           config, mesh)
