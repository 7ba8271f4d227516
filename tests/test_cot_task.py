"""The chain-of-thought toy task (issue 19): encoding, both answer forms, the verifier's rules,
the held-out split and the Task protocol."""
import itertools

import numpy as np
import pytest

from rlmperf_lite.tasks import AdditionTask, CoTTask, Task

T = CoTTask()
P3527 = np.array([[3, 5, 2, 7, -1, -1]])


def ids(text):
    """Token ids of a readable string (the inverse of decode)."""
    return [("0123456789_=,;$.").index(c) for c in text]


def test_encoding_and_both_answer_forms_match_the_design():
    assert T.decode(T.encode_prompts(P3527)[0]) == "3527__="
    assert T.decode(T.answer_tokens(P3527, cot=True)[0]) == "30,80,01,71;71$"
    assert T.decode(T.answer_tokens(P3527)[0]) == ";71$"
    # the chain is 3k + 3 tokens: 9 for k = 2, 21 for k = 6 (= max_answer_len)
    for k in range(2, 7):
        p = np.array([[9] * k + [-1] * (6 - k)])
        assert len(T.answer_tokens(p, cot=True)[0]) == 3 * k + 3
        assert T.decode(T.answer_tokens(p)[0]) == ";" + str(9 * k)[::-1].ljust(2, "0") + "$"
    assert T.prompt_len + 23 == 30 and T.eval_max_new_tokens == 23


def test_every_partial_sum_is_checked_against_python_sum():
    rng = np.random.default_rng(0)
    _, probs = T.sample_prompts(rng, 200)
    for row, ans in zip(probs, T.answer_tokens(probs, cot=True)):
        digits = [int(d) for d in row if d >= 0]
        text = T.decode(ans)
        chain, answer = text[:-1].split(";")
        assert chain.split(",") == [f"{sum(digits[:i + 1]):02d}"[::-1] for i in range(len(digits))]
        assert answer == f"{sum(digits):02d}"[::-1]


def test_reward_reads_after_the_first_semicolon():
    both = [(T.answer_tokens(P3527, cot=c)[0] + [T.pad_id] * 20)[:18] for c in (False, True)]
    assert T.reward(np.repeat(P3527, 2, 0), np.array(both)).tolist() == [1, 1]
    cases = {"30,80,01,71;71$": 1, ";71$..": 1, "99,99;71$": 1,   # a wrong chain still scores
             ";17$": 0, ";71": 0, ";711$": 0, "71$": 0, ";99;71$": 0, "$;71$": 0}
    last = CoTTask(answer_after="last")
    for text, r in cases.items():
        comp = np.array([ids(text)])
        assert T.reward(P3527, comp)[0] == r, text
    # "last" accepts the padded answer (the hack) but still stops at the end token
    assert last.reward(P3527, np.array([ids(";99;71$")]))[0] == 1
    assert last.reward(P3527, np.array([ids(";71$;99$")]))[0] == 1
    assert last.reward(P3527, np.array([ids(";99$;71$")]))[0] == 0
    chains = np.array([ids("30,80;71$"), ids(";71$.....")])
    assert T.uses_chain(chains).tolist() == [True, False]


def test_heldout_is_about_a_fifth_of_each_k_and_disjoint_from_training():
    for k in range(2, 7):
        probs = np.array(list(itertools.product(range(10), repeat=k)))
        probs = np.concatenate([probs, np.full((len(probs), 6 - k), -1)], axis=1)
        share = T.is_heldout(probs).mean()
        tol = 3 * np.sqrt(0.16 / len(probs))                   # 3 binomial sd
        assert abs(share - 0.2) < tol, (k, share)
    assert T.is_heldout(T.problems("eval")).all()
    rng = np.random.default_rng(1)
    assert not T.is_heldout(T.sample_prompts(rng, 2000)[1]).any()
    assert not T.is_heldout(T.problems("warmstart_check")).any()
    assert T.is_heldout(T.sample_prompts(rng, 500, "eval")[1]).all()
    # warm-start batches are training problems, k uniform, about 40% with the chain
    tokens, mask = T.warmstart_batch(np.random.default_rng(2), 4000)
    assert not T.is_heldout(np.where(tokens[:, :6] < 10, tokens[:, :6], -1)).any()
    k = (tokens[:, :6] < 10).sum(axis=1)
    assert abs(np.bincount(k, minlength=7)[2:] / 4000 - 0.2).max() < 0.03
    assert abs((tokens[:, 7] != T.semicolon_id).mean() - 0.4) < 0.03
    assert np.allclose(mask.sum(axis=1), np.where(tokens[:, 7] == T.semicolon_id, 4, 3 * k + 3))


def test_sampling_follows_k_weights():
    _, probs = T.sample_prompts(np.random.default_rng(3), 20_000)
    k = (probs >= 0).sum(axis=1)
    assert np.allclose(np.bincount(k, minlength=7)[2:] / 20_000, T.k_weights, atol=0.01)


def test_both_tasks_satisfy_the_protocol():
    for task in (T, AdditionTask()):
        assert isinstance(task, Task)
    assert AdditionTask().eval_max_new_tokens == 5
    assert np.array_equal(AdditionTask().problems("eval"), AdditionTask().pairs("eval"))


@pytest.mark.parametrize("kwargs, name", [
    ({"k_weights": (1, 2)}, "k_weights"), ({"k_weights": (0, 0, 0, 0, 0)}, "k_weights"),
    ({"answer_after": "middle"}, "answer_after"), ({"num_eval": 0}, "num_eval"),
    ({"heldout_fraction": 1.0}, "heldout_fraction"), ({"vocab_size": 14}, "vocab_size"),
    ({"warmstart_cot_fraction": -0.1}, "warmstart_cot_fraction"), ({"split_seed": -1}, "split_seed"),
])
def test_bad_fields_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CoTTask(**kwargs)


def test_bad_arguments_are_named():
    for bad in ([[3, 5]], [[3, -1, 5, -1, -1, -1]], [[3, -1, -1, -1, -1, -1]],
                [[10, 1, -1, -1, -1, -1]], np.zeros((1, 6)) + 0.5):
        with pytest.raises(ValueError, match="problems"):
            T.encode_prompts(bad)
    with pytest.raises(ValueError, match="completions"):
        T.reward(P3527, np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match="split"):
        T.problems("train")
    with pytest.raises(ValueError, match="num_prompts"):
        T.sample_prompts(np.random.default_rng(0), 0)
    with pytest.raises(ValueError, match="rng"):
        T.sample_prompts(0, 3)
    with pytest.raises(ValueError, match="ids"):
        T.decode([16])
