"""Continuous batching: the slot sampler draws what the static sampler draws, with less padding."""
import numpy as np
import pytest

from rlmperf_lite.cost import measure_batching
from rlmperf_lite.nn import (BatchingStats, TinyLMConfig, generate, generate_continuous,
                             init_params, static_batching_stats, token_logps)
from rlmperf_lite.tasks import AdditionTask

TASK = AdditionTask()
B, G = 5, 3
N = B * G


@pytest.fixture(scope="module")
def model():
    cfg = TinyLMConfig()
    return cfg, init_params(cfg, np.random.default_rng(1))


def _both(model, seed, num_slots, max_new_tokens=8, temperature=1.0):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(seed), B)
    seeds = None if temperature == 0 else list(range(1000 * seed, 1000 * seed + N))
    args = dict(max_new_tokens=max_new_tokens, eos_id=TASK.eos_id, pad_id=TASK.pad_id,
                group_size=G, temperature=temperature, seeds=seeds)
    static = generate(params, prompts, cfg, **args)
    cont, stats = generate_continuous(params, prompts, cfg, num_slots=num_slots, **args)
    return static, cont, stats


def _fifo_schedule(lengths, num_slots):
    """An independent count: sequences of these lengths, FIFO into num_slots slots, one token per
    busy slot per step -> the number of steps."""
    queue, slots, steps = list(lengths), [], 0
    while queue or slots:
        while queue and len(slots) < num_slots:
            slots.append(queue.pop(0))
        steps += 1
        slots = [left - 1 for left in slots if left > 1]
    return steps


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("num_slots", [1, 4, N, N + 3])
def test_continuous_equals_static_with_per_sequence_streams(model, seed, num_slots):
    static, cont, stats = _both(model, seed, num_slots)
    np.testing.assert_array_equal(cont.tokens, static.tokens)
    np.testing.assert_array_equal(cont.completion_mask, static.completion_mask)
    np.testing.assert_allclose(cont.per_token_logps, static.per_token_logps, atol=2e-6)
    assert cont.prompt_len == static.prompt_len
    # and both are the model's own log-probs of what they sampled
    cfg, params = model
    full = token_logps(params, cont.tokens, cfg)[:, cont.prompt_len - 1:]
    np.testing.assert_allclose(full * cont.completion_mask, cont.per_token_logps, atol=2e-5)


@pytest.mark.parametrize("num_slots", [1, 4, N])
def test_greedy_continuous_equals_static(model, num_slots):
    static, cont, _ = _both(model, 3, num_slots, temperature=0.0)
    np.testing.assert_array_equal(cont.tokens, static.tokens)
    np.testing.assert_allclose(cont.per_token_logps, static.per_token_logps, atol=2e-6)


def test_padding_stats_match_a_hand_count(model):
    static, cont, stats = _both(model, 0, 4)
    lengths = static.completion_mask.sum(axis=1).astype(int)
    assert len(set(lengths)) > 1                     # the case has stragglers to save
    R = lengths.max()
    s = static_batching_stats(static)
    assert (s.num_slots, s.num_steps, s.row_steps) == (N, R, N * R)
    assert s.padding_row_steps == sum(R - x for x in lengths)
    steps = _fifo_schedule(lengths, 4)
    assert (stats.num_slots, stats.num_steps, stats.row_steps) == (4, steps, 4 * steps)
    assert stats.padding_row_steps == 4 * steps - lengths.sum()
    assert stats.padding_fraction == pytest.approx(stats.padding_row_steps / stats.row_steps)
    assert stats.padding_fraction < s.padding_fraction
    # one slot never pads; as many slots as rows pads exactly as the static batch does
    one = _both(model, 0, 1)[2]
    assert (one.num_steps, one.padding_row_steps) == (lengths.sum(), 0)
    assert _both(model, 0, N)[2] == s


def test_max_new_tokens_one_needs_no_decode_step(model):
    static, cont, stats = _both(model, 4, 2, max_new_tokens=1)
    np.testing.assert_array_equal(cont.tokens, static.tokens)
    assert cont.num_decode_steps == 0 and cont.completion_mask.shape == (N, 1)
    assert stats == BatchingStats(num_slots=2, num_steps=N // 2 + 1, kept_tokens=N)
    assert (stats.row_steps, stats.padding_row_steps) == (2 * (N // 2 + 1), 2 * (N // 2 + 1) - N)


def test_max_new_tokens_filling_the_context(model):
    cfg, _ = model
    P = TASK.sample_prompts(np.random.default_rng(5), B)[0].shape[1]
    static, cont, stats = _both(model, 5, 3, max_new_tokens=cfg.max_seq_len - P)
    np.testing.assert_array_equal(cont.tokens, static.tokens)
    assert cont.tokens.shape[1] <= cfg.max_seq_len


def test_no_end_token_runs_every_row_to_max_new_tokens(model):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(6), 2)
    args = dict(max_new_tokens=4, pad_id=TASK.pad_id, temperature=0.0)
    # an end token greedy decoding never emits on these prompts
    never = [e for e in range(cfg.vocab_size)
             if generate(params, prompts, cfg, eos_id=e, **args).completion_mask.shape == (2, 4)
             and not (generate(params, prompts, cfg, eos_id=e, **args).tokens[:, -4:] == e).any()]
    assert never
    static = generate(params, prompts, cfg, eos_id=never[0], **args)
    cont, stats = generate_continuous(params, prompts, cfg, num_slots=1, eos_id=never[0], **args)
    np.testing.assert_array_equal(cont.tokens, static.tokens)
    assert (stats.num_steps, stats.padding_row_steps) == (8, 0)
    assert static.completion_mask.all() and static_batching_stats(static).padding_row_steps == 0
    assert cont.num_decode_steps == 6                # 3 per row, the first token is the prefill's


def test_a_row_stream_does_not_depend_on_its_batch(model):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(7), 4)
    args = dict(max_new_tokens=6, eos_id=TASK.eos_id, pad_id=TASK.pad_id)
    batch = generate(params, prompts, cfg, seeds=[11, 12, 13, 14], **args)
    alone = generate(params, prompts[2:3], cfg, seeds=[13], **args)
    width = alone.tokens.shape[1]
    np.testing.assert_array_equal(alone.tokens, batch.tokens[2:3, :width])


@pytest.mark.parametrize("kwargs,match", [
    ({"num_slots": 0}, "num_slots"),
    ({"num_slots": -2}, "num_slots"),
    ({"num_slots": 2.5}, "num_slots"),
    ({"num_slots": True}, "num_slots"),
    ({"num_slots": "4"}, "num_slots"),
    ({"seeds": None}, "seeds"),
    ({"seeds": [1, 2]}, "seeds"),
    ({"seeds": [-1] * N}, "seeds"),
    ({"seeds": [0.5] * N}, "seeds"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 50}, "max_seq_len"),
    ({"group_size": 0}, "group_size"),
])
def test_bad_continuous_arguments_raise_valueerror(model, kwargs, match):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(0), B)
    args = dict(num_slots=2, max_new_tokens=5, eos_id=TASK.eos_id, pad_id=TASK.pad_id,
                group_size=G, seeds=list(range(N)))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate_continuous(params, prompts, cfg, **args)


def test_generate_seeds_and_rng_together_raise(model):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(0), 2)
    with pytest.raises(ValueError, match="rng"):
        generate(params, prompts, cfg, max_new_tokens=3, eos_id=TASK.eos_id, pad_id=TASK.pad_id,
                 rng=np.random.default_rng(0), seeds=[1, 2])


def test_measure_batching_counts_match_a_hand_count(model):
    """measure_batching (cost.toy_workdepth): static waves of S rows and S continuous slots,
    against a count by hand from the rows' lengths (waves decode to their longest; the slots
    by the FIFO schedule above)."""
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(0), 4)        # B = 4, G = 3: n = 12
    seeds = list(range(100, 112))
    args = dict(max_new_tokens=8, eos_id=TASK.eos_id, pad_id=TASK.pad_id, group_size=G)
    lengths = generate(params, prompts, cfg, seeds=seeds, **args).completion_mask.sum(axis=1)
    lengths = lengths.astype(int)
    assert len(set(lengths)) > 1
    out = measure_batching(params, prompts, cfg, num_slots=6, seeds=seeds, repeats=1, **args)
    assert out["same_outputs"] and out["lengths"].tolist() == lengths.tolist()
    widths = [max(lengths[:6]), max(lengths[6:])]                       # two waves of 6 rows
    assert out["wave_widths"] == widths
    s, c = out["static"], out["continuous"]
    assert (s.num_slots, s.row_steps, s.padding_row_steps) == (
        6, 6 * sum(widths), 6 * sum(widths) - lengths.sum())
    steps = _fifo_schedule(lengths, 6)
    assert (c.num_slots, c.row_steps, c.padding_row_steps) == (6, 6 * steps,
                                                               6 * steps - lengths.sum())
    assert c.padding_row_steps <= s.padding_row_steps
    assert out["static_s"] > 0 and out["continuous_s"] > 0
    # S = n: one wave, the static batch of the loop
    one = measure_batching(params, prompts, cfg, num_slots=12, seeds=seeds, repeats=1, **args)
    assert one["wave_widths"] == [lengths.max()] and one["static"] == static_batching_stats(
        generate(params, prompts, cfg, seeds=seeds, **args))


@pytest.mark.parametrize("kwargs,match", [
    ({"num_slots": 4}, "multiple of group_size=3"),
    ({"num_slots": 9}, "divides the 12 rows"),
    ({"num_slots": 2}, "num_slots"),
    ({"repeats": 0}, "repeats"),
    ({"seeds": [1, 2]}, "seeds"),
])
def test_measure_batching_bad_input_raises(model, kwargs, match):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(0), 4)
    args = dict(num_slots=6, seeds=list(range(12)), max_new_tokens=5, eos_id=TASK.eos_id,
                pad_id=TASK.pad_id, group_size=G, repeats=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        measure_batching(params, prompts, cfg, **args)
