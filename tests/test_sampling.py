"""The KV-cached sampler: prefill + decode gives the same log-probs as one full forward."""
import numpy as np
import pytest

from rlmperf_lite.nn import TinyLMConfig, generate, init_params, logps_forward, token_logps
from rlmperf_lite.tasks import AdditionTask

TASK = AdditionTask()


@pytest.fixture
def model():
    cfg = TinyLMConfig()
    return cfg, init_params(cfg, np.random.default_rng(1))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_kv_cache_logps_equal_full_forward(model, temperature):
    cfg, params = model
    rng = np.random.default_rng(2)
    prompts, _ = TASK.sample_prompts(rng, 8)
    out = generate(params, prompts, cfg, max_new_tokens=5, eos_id=TASK.eos_id,
                   pad_id=TASK.pad_id, group_size=3, temperature=temperature, rng=rng)
    P = out.prompt_len
    full = token_logps(params, out.tokens, cfg, temperature)[:, P - 1:]     # (N, R)
    np.testing.assert_allclose(full * out.completion_mask, out.per_token_logps, atol=2e-5)
    assert out.tokens.shape[0] == 24 and out.completion_mask.shape == out.per_token_logps.shape


def test_greedy_equals_argmax_of_full_forward(model):
    cfg, params = model
    prompts, _ = TASK.sample_prompts(np.random.default_rng(3), 5)
    out = generate(params, prompts, cfg, max_new_tokens=4, eos_id=99 % cfg.vocab_size,
                   pad_id=TASK.pad_id, temperature=0.0)
    # each greedy token is the most likely one given everything before it
    all_lp = logps_forward(params, out.tokens, cfg)[1][1][1]                # (N, T-1, V)
    P = out.prompt_len
    for t in range(out.completion_mask.shape[1]):
        live = out.completion_mask[:, t] > 0
        np.testing.assert_array_equal(all_lp[live, P - 1 + t].argmax(-1), out.tokens[live, P + t])


def test_group_samples_share_their_prompt_and_mask_after_eos(model):
    cfg, params = model
    rng = np.random.default_rng(4)
    prompts, _ = TASK.sample_prompts(rng, 4)
    out = generate(params, prompts, cfg, max_new_tokens=5, eos_id=TASK.eos_id,
                   pad_id=TASK.pad_id, group_size=4, rng=rng)
    P = out.prompt_len
    np.testing.assert_array_equal(out.tokens[:, :P], np.repeat(prompts, 4, axis=0))
    for row, m in zip(out.tokens[:, P:], out.completion_mask):
        n = int(m.sum())
        assert (m[:n] == 1).all() and (m[n:] == 0).all()
        if n < len(m):                               # stopped early: the last kept token is EOS
            assert row[n - 1] == TASK.eos_id and (row[n:] == TASK.pad_id).all()


def test_same_seed_same_samples(model):
    cfg, params = model
    runs = []
    for _ in range(2):
        rng = np.random.default_rng(7)
        prompts, _ = TASK.sample_prompts(rng, 6)
        runs.append(generate(params, prompts, cfg, max_new_tokens=5, eos_id=TASK.eos_id,
                             pad_id=TASK.pad_id, group_size=2, rng=rng))
    np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens)
    np.testing.assert_array_equal(runs[0].per_token_logps, runs[1].per_token_logps)


@pytest.mark.parametrize("kwargs,match", [
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 50}, "max_seq_len"),
    ({"group_size": 0}, "group_size"),
    ({"temperature": -1.0}, "temperature"),
    ({"rng": None}, "rng"),
])
def test_bad_sampler_arguments_raise_valueerror(model, kwargs, match):
    cfg, params = model
    args = dict(max_new_tokens=5, eos_id=TASK.eos_id, pad_id=TASK.pad_id,
                rng=np.random.default_rng(0))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate(params, TASK.encode_prompts([[1, 2]]), cfg, **args)


def test_bad_prompts_raise_valueerror(model):
    cfg, params = model
    with pytest.raises(ValueError, match="prompts"):
        generate(params, np.array([[1, 99]]), cfg, max_new_tokens=2, eos_id=12, pad_id=13,
                 temperature=0.0)
    with pytest.raises(ValueError, match="prompts"):
        generate(params, np.array([1.5, 2.0]), cfg, max_new_tokens=2, eos_id=12, pad_id=13,
                 temperature=0.0)
