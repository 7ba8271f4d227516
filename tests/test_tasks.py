"""The addition task: encoding, the verifier, and the train/eval/warm-start split."""
import numpy as np
import pytest

from rlmperf_lite.tasks import AdditionTask

TASK = AdditionTask()


def test_prompt_and_reversed_answer_format():
    """47 + 85 = 132 is prompted as '47+85=' and answered '231' then the end token."""
    assert TASK.decode(TASK.encode_prompts([[47, 85]])[0]) == "47+85="
    assert TASK.answer_tokens([[47, 85]]) == [[2, 3, 1, TASK.eos_id]]
    assert TASK.decode(TASK.encode_prompts([[7, 0]])[0]) == "07+00="
    assert TASK.answer_tokens([[7, 0]]) == [[7, TASK.eos_id]]


def test_verifier_is_exact_match_then_end():
    pairs = np.array([[47, 85]] * 5)
    e, p = TASK.eos_id, TASK.pad_id
    completions = np.array([[2, 3, 1, e, p], [2, 3, 1, 5, e], [2, 3, e, p, p],
                            [1, 3, 2, e, p], [2, 3, 1, p, p]])
    np.testing.assert_array_equal(TASK.reward(pairs, completions), [1, 0, 0, 0, 0])


def test_splits_are_disjoint_and_sized():
    ev = {tuple(x) for x in TASK.pairs("eval")}
    tr = {tuple(x) for x in TASK.pairs("train")}
    ws = {tuple(x) for x in TASK.pairs("warmstart")}
    assert len(ev) == 1000 and len(tr) == 9000 and len(ws) == 900
    assert not ev & tr and ws <= tr and len(ev | tr) == 10_000


def test_random_model_scores_near_zero():
    """A uniformly random completion of 5 tokens over 14 ids is almost never right."""
    rng = np.random.default_rng(0)
    prompts, pairs = TASK.sample_prompts(rng, 2000)
    rewards = TASK.reward(pairs, rng.integers(0, TASK.vocab_size, (2000, 5)))
    assert rewards.mean() < 0.01


def test_sft_batch_masks_exactly_the_answer_positions():
    tokens, mask = TASK.sft_batch([[47, 85], [1, 2]])
    assert TASK.decode(tokens[0]) == "47+85=231$"
    assert TASK.decode(tokens[1]) == "01+02=3$.."
    np.testing.assert_array_equal(mask[1], [0, 0, 0, 0, 0, 1, 1, 0, 0])


def test_bad_inputs():
    with pytest.raises(ValueError, match="split"):
        TASK.pairs("test")
    with pytest.raises(ValueError, match="pairs"):
        TASK.encode_prompts([[100, 1]])
    with pytest.raises(ValueError, match="num_eval"):
        AdditionTask(num_eval=0)
