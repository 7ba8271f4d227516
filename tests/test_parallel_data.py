"""Data parallelism and ZeRO stages 0-3 on the tiny LM's real GRPO step equal the single-rank
step, and move and keep the bytes the ZeRO paper says (Rajbhandari et al. 2020, arXiv
1910.02054, §5 and §7; book Chapter 7). All in float64 on one fixed rollout batch."""
from dataclasses import replace

import numpy as np
import pytest

from rlmperf_lite.cost.parallel_memory import model_state_breakdown
from rlmperf_lite.nn import AdamW, init_params
from rlmperf_lite.parallel import ProcessGroup
from rlmperf_lite.parallel import (FlatLayout, dp_grads, local_grads, make_grpo_batch,
                                   reference_grpo_step, split_groups)
from rlmperf_lite.parallel.zero import resident_bytes, zero_init, zero_params, zero_step
from rlmperf_lite.rl.common import blas_limits
from rlmperf_lite.rl import GRPOConfig, grpo_advantages, loss_norms, train_grpo

# seed 3: every rank of dp=4 gets a group with mixed rewards, and their token counts differ
CONFIG = GRPOConfig(num_prompts=8, group_size=4, lr_warmup_steps=2, steps=10, seed=3)
RTOL = 1e-10


@pytest.fixture(scope="module")
def batch():
    return make_grpo_batch(CONFIG.model, CONFIG, CONFIG.seed)


def _close(a: dict, b: dict, rtol=RTOL, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def _reference_run(params, batch, config, steps):
    """The single-rank loop's updates, ``steps`` times on the same batch."""
    params = {k: v.copy() for k, v in params.items()}
    opt = AdamW(params, lr=config.lr, betas=config.adam_betas)
    for _ in range(steps):
        params = reference_grpo_step(params, batch, config, opt=opt)[2]
    return params


def test_batch_is_one_rollout_of_the_loop_with_group_advantages(batch):
    n, P = 8 * 4, 6                                        # B * G rows, addition prompts
    assert batch.tokens.shape[0] == n and batch.prompt_len == P and batch.num_groups == 8
    R = batch.tokens.shape[1] - P                          # decoding stops when all have ended
    assert R <= CONFIG.max_new_tokens
    assert batch.completion_mask.shape == batch.old_per_token_logps.shape == (n, R)
    np.testing.assert_array_equal(batch.advantages, grpo_advantages(batch.rewards, 4))
    assert np.any(batch.advantages != 0)                   # warm-started: some groups learn
    assert all(np.any(p.advantages != 0) for p in split_groups(batch, 4))
    tokens_per_rank = [p.completion_mask.sum() for p in split_groups(batch, 4)]
    assert len(set(tokens_per_rank)) > 1                   # ranks hold different token counts
    assert all(v.dtype == np.float64 for v in batch.params.values())


def test_reference_step_is_the_grpo_loop_s_first_step(batch):
    # train_grpo for one step from the same seed samples the same batch and takes one update
    loop = train_grpo(replace(CONFIG, steps=1))
    p32 = {k: v.astype(np.float32) for k, v in batch.params.items()}
    with blas_limits(CONFIG):                              # the loop's one BLAS thread
        new = reference_grpo_step(p32, batch, CONFIG)[2]
    _close(new, loop.params, rtol=0.0)                    # the same float32 operations: bit-equal


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_dp_gradient_is_the_full_batch_gradient_and_moves_one_all_reduce(batch, n):
    _, full = local_grads(batch.params, batch, CONFIG, loss_norms(batch.completion_mask, CONFIG))
    group = ProcessGroup(n)
    per_rank = dp_grads(batch.params, batch, CONFIG, group)
    for g in per_rank:
        _close(g, full, atol=1e-15)
    N_pad = FlatLayout.of(batch.params, n).padded_size
    # ring all-reduce: 2 (n - 1) / n * S per rank (ZeRO §7.1: 2 Psi for data parallelism)
    np.testing.assert_allclose(group.log.sent_bytes, 2 * (n - 1) / n * N_pad * 8)


def test_any_split_of_rows_gives_the_same_gradient(batch):
    # advantages are computed on the whole batch before the split: shuffling rows across ranks
    # (as verl's _balance_batch does) leaves the summed gradient unchanged
    perm = np.random.default_rng(0).permutation(len(batch.tokens))
    shuffled = batch.rows(perm)
    a = dp_grads(batch.params, batch, CONFIG, ProcessGroup(4))[0]
    b = dp_grads(batch.params, shuffled, CONFIG, ProcessGroup(4))[0]
    _close(a, b, atol=1e-15)


def test_mean_of_per_rank_token_means_is_not_the_batch_gradient(batch):
    # verl issue #5625: ranks with different token counts weight their tokens differently
    full = dp_grads(batch.params, batch, CONFIG, ProcessGroup(4))[0]
    wrong = dp_grads(batch.params, batch, CONFIG, ProcessGroup(4), norms="rank")[0]
    rel = max(np.abs(wrong[k] - full[k]).max() / np.abs(full[k]).max() for k in full)
    assert rel > 1e-2


def test_mean_of_per_rank_seq_means_is_exact_with_equal_sequences_per_rank(batch):
    # seq-mean-token-mean normalises by sequences: equal on every rank, so DDP's average is exact
    c = replace(CONFIG, loss_agg_mode="seq-mean-token-mean")
    full = dp_grads(batch.params, batch, c, ProcessGroup(4))[0]
    _close(dp_grads(batch.params, batch, c, ProcessGroup(4), norms="rank")[0], full, atol=1e-15)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [2, 4])
def test_zero_stage_equals_single_rank_steps(batch, stage, n):
    # 3 steps: lr warm-up factors 1/3, 2/3, then decay; step 0's norm exceeds max_grad_norm = 1
    steps = 3
    reference = _reference_run(batch.params, batch, CONFIG, steps)
    group = ProcessGroup(n)
    state = zero_init(batch.params, group, stage, CONFIG)
    norms = [zero_step(state, batch, CONFIG, group)["grad_norm"] for _ in range(steps)]
    assert norms[0] > CONFIG.max_grad_norm                    # clipping was exercised
    for r in range(n if stage < 3 else 1):
        _close(zero_params(state, group, r), reference, atol=1e-15)


def test_zero_with_padding_kl_and_seq_mean_equals_single_rank_steps(batch):
    # dp = 3 does not divide N = 101,440 (the flat vector is padded); k3 KL to the reference;
    # 6 prompts so the groups split over 3 ranks
    c = replace(CONFIG, num_prompts=6, kl_coef=0.1, loss_agg_mode="seq-mean-token-mean")
    p32 = {k: v.astype(np.float32) for k, v in batch.params.items()}
    b = make_grpo_batch(c.model, c, 5, params=p32)
    assert FlatLayout.of(b.params, 3).padded_size > c.model.num_params()
    reference = _reference_run(b.params, b, c, 3)
    for stage in (1, 3):
        group = ProcessGroup(3)
        state = zero_init(b.params, group, stage, c)
        for _ in range(3):
            zero_step(state, b, c, group)
        _close(zero_params(state, group), reference, atol=1e-15)


@pytest.mark.parametrize("stage, factor", [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_zero_bytes_per_rank_match_the_paper(batch, stage, factor):
    # ZeRO §7.2: stages 0-2 move 2 (n-1)/n Psi per rank, stage 3 3 (n-1)/n Psi (1.5x)
    n = 4
    group = ProcessGroup(n)
    state = zero_init(batch.params, group, stage, CONFIG)
    zero_step(state, batch, CONFIG, group)
    by_op = group.log.bytes_by_op()
    psi_bytes = state.layout.padded_size * 8                           # float64 weights
    norm_bytes = by_op.pop("all_reduce") if stage else 0.0            # sharded grads: one scalar
    moved = sum(by_op.values())
    np.testing.assert_allclose(moved, factor * (n - 1) / n * psi_bytes)
    if stage:
        # the squared-norm all-reduce of one float64: ring reduce-scatter + all-gather of 8 bytes
        assert np.all(norm_bytes <= 2 * 8) and norm_bytes.sum() == 2 * (n - 1) * 8
    ops = [c["op"] for c in group.log.calls]
    expected = {0: ["all_reduce"],
                1: ["reduce_scatter", "all_reduce", "all_gather"],
                2: ["reduce_scatter", "all_reduce", "all_gather"],
                3: ["all_gather", "all_gather", "reduce_scatter", "all_reduce"]}[stage]
    assert ops == expected


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_resident_model_state_bytes_match_the_zero_formulas(batch, stage):
    # ZeRO §5.1 / Fig. 1 with fp32 weights and grads and K = 8 bytes of Adam state, dp = 4:
    # 16 N, 8 N + 8 N / 4, 4 N + 12 N / 4, 16 N / 4 bytes per rank
    n, cfg = 4, CONFIG.model
    N = cfg.num_params()                                            # 101,440, divisible by 4
    params = init_params(cfg, np.random.default_rng(0))             # float32
    group = ProcessGroup(n)
    state = zero_init(params, group, stage, CONFIG)
    zero_step(state, batch, CONFIG, group)
    for r in range(n):
        got = resident_bytes(state, r)
        assert got == model_state_breakdown(N, n, stage, weight_bytes=4, grad_bytes=4,
                                            optimizer_bytes_per_param=8)
    assert sum(got.values()) == {0: 16 * N, 1: 8 * N + 8 * N / 4, 2: 4 * N + 12 * N / 4,
                                 3: 16 * N / 4}[stage]


def test_bad_input_raises_naming_the_parameter(batch):
    with pytest.raises(ValueError, match="stage"):
        zero_init(batch.params, ProcessGroup(2), 4, CONFIG)
    with pytest.raises(ValueError, match="batch"):                  # 8 groups over 3 ranks
        dp_grads(batch.params, batch, CONFIG, ProcessGroup(3))
    state = zero_init(batch.params, ProcessGroup(3), 2, CONFIG)
    with pytest.raises(ValueError, match="batch"):
        zero_step(state, batch, CONFIG, ProcessGroup(3))
    with pytest.raises(ValueError, match="group"):
        zero_step(state, batch, CONFIG, ProcessGroup(4))
    with pytest.raises(ValueError, match="norms"):
        dp_grads(batch.params, batch, CONFIG, ProcessGroup(2), norms="mean")
    with pytest.raises(ValueError, match="advantage_estimator"):
        make_grpo_batch(CONFIG.model, GRPOConfig(advantage_estimator="reinforce_pp",
                                                 group_size=1), 0, params=batch.params)


@pytest.mark.parametrize("bad, match", [
    (lambda b: make_grpo_batch(None, CONFIG, 3), "cfg must be a TinyLMConfig"),
    (lambda b: make_grpo_batch(CONFIG.model, None, 3), "config must be a GRPOConfig"),
    (lambda b: make_grpo_batch(CONFIG.model, CONFIG, 1.5), "seed must be an int"),
    (lambda b: make_grpo_batch(CONFIG.model, CONFIG, "3"), "seed must be an int"),
    (lambda b: make_grpo_batch(CONFIG.model, CONFIG, 3, params={"x": np.ones(2)}), "params"),
    (lambda b: split_groups(b, 0), "n must be an int >= 1"),
    (lambda b: split_groups(b, -1), "n must be an int >= 1"),
    (lambda b: split_groups(None, 2), "batch must be a GRPOBatch"),
    (lambda b: FlatLayout.of(b.params, 0), "n must be an int >= 1"),
    (lambda b: FlatLayout.of({}, 2), "params must be a non-empty dict"),
    (lambda b: dp_grads(b.params, b, CONFIG, 4), "group must be a ProcessGroup"),
    (lambda b: zero_init(b.params, 4, 1, CONFIG), "group must be a ProcessGroup"),
    (lambda b: zero_init(b.params, ProcessGroup(2), True, CONFIG), "stage must be an int"),
    (lambda b: zero_params(zero_init(b.params, ProcessGroup(2), 1, CONFIG), ProcessGroup(2), 9),
     "rank=9 is out of range"),
    (lambda b: resident_bytes(zero_init(b.params, ProcessGroup(2), 1, CONFIG), 9),
     "rank=9 is out of range"),
    (lambda b: resident_bytes(zero_init(b.params, ProcessGroup(2), 1, CONFIG), -1),
     "rank must be an int >= 0"),
])
def test_bad_arguments_raise_naming_them(batch, bad, match):
    with pytest.raises(ValueError, match=match):
        bad(batch)


def test_zero3_backward_reads_the_second_gather(batch):
    # the forward's gathered weights are freed (NaN): if the gather before the backward
    # delivered garbage, the gradient norm would be NaN and the step refuses it
    class NaNSecondGather(ProcessGroup):
        calls = 0

        def all_gather(self, xs, _op="all_gather"):
            out = super().all_gather(xs, _op)
            self.calls += 1
            return [np.full_like(o, np.nan) for o in out] if self.calls == 2 else out

    group = NaNSecondGather(2)
    state = zero_init(batch.params, group, 3, CONFIG)
    with pytest.raises(ValueError, match="NaN"):
        zero_step(state, batch, CONFIG, group)
