"""Answers to the exercises of Labs 1-3 (Part I: the RL loop, PPO, the GRPO family): each
expected value is computed by the library at call time (see :mod:`rlmperf_lite.book.exercises`)."""
from __future__ import annotations


import numpy as np

from ._answer import LLAMA2_7B_SHAPE, Answer

__all__ = ["ANSWERS"]


# ---- Lab 1 -----------------------------------------------------------------------------------

def _informative(q: float, group_size: int) -> float:
    from ...cost.variants import informative_fraction
    return informative_fraction(q, group_size)


def _most_informative_pass_rate() -> float:
    from ...cost.variants import informative_fraction
    q = np.linspace(0.0, 1.0, 10_001)
    return float(q[np.argmax([informative_fraction(x, 4) for x in q])])


def _llama_workdepth(response_len: int):
    from ...cost.workdepth import grpo_step_workdepth
    return grpo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, group_size=16, prompt_len=512,
                               response_len=response_len)


def _depth_growth(phase: str) -> float:
    return (_llama_workdepth(8192).phase(phase).depth_rounds
            / _llama_workdepth(4096).phase(phase).depth_rounds)


# ---- Lab 2 -----------------------------------------------------------------------------------

def _update_depth_factor() -> float:
    from ...cost.workdepth import ppo_step_workdepth
    kw = dict(**LLAMA2_7B_SHAPE, num_prompts=512, prompt_len=512, response_len=4096)
    four = ppo_step_workdepth(**kw, ppo_epochs=2, num_minibatches=2)
    one = ppo_step_workdepth(**kw, ppo_epochs=1, num_minibatches=1)
    return four.phase("train_forward").depth_rounds / one.phase("train_forward").depth_rounds


def _gae_signal_share(lam: float) -> float:
    """Share of the tokens of the right answer to 47+85= whose GAE advantage is not zero, for
    a critic as :func:`rlmperf_lite.nn.init_value_params` makes it (zero value head)."""
    from ...nn import TinyLMConfig, init_value_params, values_forward
    from ...rl import gae
    from ...tasks import AdditionTask
    task, cfg = AdditionTask(), TinyLMConfig()
    pair = np.array([[47, 85]])
    answer = task.answer_tokens(pair)[0]
    tokens = np.concatenate([task.encode_prompts(pair), [answer]], axis=1)     # (1, P + R)
    P, R = task.prompt_len, len(answer)
    critic = init_value_params(cfg, np.random.default_rng(0))
    values = values_forward(critic, tokens, cfg)[0][:, P - 1:P - 1 + R]       # (1, R)
    rewards = np.zeros((1, R))
    rewards[0, -1] = 1.0                                                       # outcome reward
    adv, _ = gae(rewards, values, np.ones((1, R)), gamma=1.0, lam=lam)
    return float(np.mean(np.abs(adv) > 1e-6))


def _critic_break_even_group() -> int:
    from ...cost.workdepth import grpo_step_workdepth, ppo_step_workdepth
    lengths = dict(prompt_len=512, response_len=4096)
    ppo = ppo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, ppo_epochs=2, num_minibatches=2,
                             **lengths)
    critic = sum(ppo.phase(p).work_flops
                 for p in ("values", "critic_forward", "critic_backward", "critic_optimizer"))

    def rollout(G):
        wd = grpo_step_workdepth(**LLAMA2_7B_SHAPE, num_prompts=32, group_size=G, **lengths)
        return wd.phase("prefill").work_flops + wd.phase("decode").work_flops

    one = rollout(1)
    G = 2
    while rollout(G) - one < critic:
        G += 1
    return G


def _hand_scan_advantage() -> float:
    """A_0 of exercise ch02.4's row by the scan: rewards (0, 0, 0, 1), the untrained critic's
    zero values, gamma 1, lam 0.5."""
    from ...rl import gae_scan
    rewards = np.array([[0.0, 0.0, 0.0, 1.0]])
    advantages, _ = gae_scan(rewards, np.zeros_like(rewards), np.ones_like(rewards), 1.0, 0.5)
    return float(advantages[0, 0])


def _scan_workdepth(T: int) -> tuple:
    from ...rl import gae_workdepth
    return gae_workdepth(T)["scan"]


# ---- Lab 3 -----------------------------------------------------------------------------------

def _length_bias_ratio() -> float:
    from ...rl import GRPOConfig, aggregate_weights
    from ...tasks import AdditionTask
    task = AdditionTask()
    n = [len(a) for a in task.answer_tokens(task.pairs("train"))]    # digits + end token
    mask = np.zeros((2, GRPOConfig().max_new_tokens), dtype=np.float32)     # (2, R_max)
    mask[0, :min(n)], mask[1, :max(n)] = 1, 1
    w = aggregate_weights(mask, "seq-mean-token-mean", max_len=mask.shape[1])
    return float(w[0, 0] / w[1, 0])


def _dapo_depth_factor() -> float:
    from ...cost.variants import compare_variants
    costs = {c.variant: c for c in compare_variants(
        **LLAMA2_7B_SHAPE, num_prompts=32, group_size=16, prompt_len=512, response_len=4096,
        pass_rate=0.8, kl_coef=0.001)}
    return costs["dapo"].workdepth.depth_rounds / costs["grpo"].workdepth.depth_rounds


def _std_scaling_factor() -> float:
    from ...rl import grpo_advantages
    factor = []
    for r in (np.array([1.0, 0, 0, 0]), np.array([1.0, 1, 0, 0])):
        factor.append(grpo_advantages(r, 4)[0] / grpo_advantages(r, 4, scale="none")[0])
    return float(factor[0] / factor[1])


def _k2_k3_opposite_count() -> int:
    from ...rl import categorical_kl_gradients
    count = 0
    for r0 in np.linspace(0.02, 0.98, 49):
        for theta in np.linspace(-8, 8, 81):
            g = categorical_kl_gradients([theta, 0.0], [r0, 1 - r0])
            count += int(g["k2"][0] * g["k3"][0] < 0)
    return count


def _rounds(q: float) -> float:
    from ...cost.variants import dynamic_sampling_rounds, informative_fraction
    return dynamic_sampling_rounds(informative_fraction(q, 16), 512, None)["expected_rounds"]


def _pass_rate_for_rounds(target: float = 2.5) -> float:
    lo, hi = 0.9, 0.99                   # 2 rounds at lo, more than 7 at hi (Lab 3's table)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _rounds(mid) < target else (lo, mid)
    return (lo + hi) / 2


ANSWERS: dict[str, Answer] = {
    "ch01.1a": Answer(lambda: _informative(0.8, 2),
                      "share of informative groups, q = 0.8, G = 2",
                      "a group teaches nothing when all G samples are right (q^G) or all wrong"),
    "ch01.1b": Answer(lambda: _informative(0.8, 4),
                      "share of informative groups, q = 0.8, G = 4",
                      "1 - q^G - (1 - q)^G with G = 4"),
    "ch01.2": Answer(_most_informative_pass_rate,
                     "pass rate at which a group of 4 is most often informative",
                     "maximise 1 - q^4 - (1 - q)^4 over q; it is symmetric in q and 1 - q"),
    "ch01.3a": Answer(lambda: _depth_growth("decode"),
                      "decode depth at R = 8192 over R = 4096 (Llama-2-7B shape)",
                      "decode is a chain of R - 1 forward passes"),
    "ch01.3b": Answer(lambda: _depth_growth("train_forward"),
                      "training-forward depth at R = 8192 over R = 4096",
                      "a training pass handles all positions at once: only log terms grow"),
    "ch01.4a": Answer(lambda: _llama_workdepth(4096).phase("decode").parallelism,
                      "processors at which decode's W/p equals its depth",
                      "W/p = D at p = W/D, the phase's parallelism"),
    "ch01.4b": Answer(lambda: _llama_workdepth(4096).phase("train_forward").parallelism,
                      "processors at which the training forward's W/p equals its depth",
                      "W/p = D at p = W/D, the phase's parallelism"),
    "ch02.1": Answer(_update_depth_factor,
                     "depth of PPO's update with 2 x 2 updates over 1 x 1",
                     "the ppo_epochs * num_minibatches updates run one after another",
                     rtol=0.0),
    "ch02.2": Answer(lambda: _gae_signal_share(0.0),
                     "share of a 4-token answer's tokens with a non-zero advantage, lam = 0, "
                     "untrained critic",
                     "with lam = 0, A_t = r_t + V(s_t+1) - V(s_t): only the last token sees "
                     "the reward", atol=1e-9),
    "ch02.3": Answer(_critic_break_even_group,
                     "smallest G at which GRPO's extra rollout work (32 prompts) exceeds "
                     "PPO's critic work",
                     "extra rollout = rollout(G) - rollout(1); critic = values + critic "
                     "forward, backward and optimizer", rtol=0.0),
    "ch02.4a": Answer(_hand_scan_advantage,
                      "A_0 of the row (0, 0, 0, 1), zero values, gamma 1, lam 0.5",
                      "A_t = delta_t + gamma lam A_{t+1}, and delta_t = r_t with zero values",
                      atol=1e-6),
    "ch02.4b": Answer(lambda: _scan_workdepth(8)[0],
                      "the scan's work for R = 8 tokens, in multiply-adds",
                      "two sweeps of n - 1 combines of 2 multiply-adds each, then one per token",
                      rtol=0.0),
    "ch02.4c": Answer(lambda: _scan_workdepth(4096)[0] / _scan_workdepth(4096)[1],
                      "the scan's parallelism W/D for R = 4,096 tokens",
                      "W = 4 (n - 1) + R multiply-adds, D = 2 log2 n + 1 rounds"),
    "ch03.1": Answer(_length_bias_ratio,
                     "seq-mean-token-mean weight of a token of the shortest over the longest "
                     "answer",
                     "each sequence's tokens share a weight of 1/B; the answers are 2 to 4 "
                     "tokens long"),
    "ch03.2": Answer(_dapo_depth_factor,
                     "DAPO's depth over GRPO's, Llama-2-7B shape, pass rate 0.8",
                     "compare_variants(...)['dapo'].workdepth.depth_rounds over GRPO's"),
    "ch03.3": Answer(_std_scaling_factor,
                     "weight of a 1-of-4 group over a 2-of-4 group from std scaling",
                     "the factor is 1/std of each group's rewards (unbiased std)"),
    "ch03.4": Answer(_k2_k3_opposite_count,
                     "(reference, theta) pairs on a grid where k2 and k3 point opposite ways",
                     "for two actions both gradients have the sign of pi_0 - ref_0",
                     rtol=0.0, atol=0.0),
    "ch03.5": Answer(_pass_rate_for_rounds,
                     "pass rate q at which DAPO (G = 16, B = 512, no limit) needs 2.5 rounds",
                     "scan q between 0.95 and 0.97 with informative_fraction and "
                     "dynamic_sampling_rounds", rtol=1e-3),
}
"""Exercise id -> :class:`~rlmperf_lite.book.exercises.Answer`."""
