"""A value model (critic) for PPO: the tiny LM's trunk with a scalar head (book section
:ref:`sec-critic-gae`).

``V(s_t)`` for every position t of a sequence: the final normed hidden state times a (D,) head
plus a bias. The parameters are the trunk's (same names as :func:`rlmperf_lite.nn.init_params`
minus ``lm_head``) plus ``v_head`` (D, 1) and ``v_bias`` (1,). As in most RLHF frameworks the
critic is a separate model, so it can be initialised from the policy (or a reward model) and
trained at its own learning rate; its cost is a fourth model in memory and an extra forward and
backward per step (the work-depth calculator counts them).
"""
from __future__ import annotations

import numpy as np

from .config import TinyLMConfig
from .flops import mm
from .model import backward, check_tokens, forward, init_params

__all__ = ["init_value_params", "values_forward", "values_backward"]


def init_value_params(cfg: TinyLMConfig, rng: np.random.Generator, *, from_params=None,
                      dtype=np.float32) -> dict:
    """Trunk copied from ``from_params`` (e.g. the warm-started policy) or freshly initialised,
    with a zero value head (so the first values are 0)."""
    trunk = init_params(cfg, rng, dtype) if from_params is None else from_params
    params = {k: v.copy() for k, v in trunk.items() if k != "lm_head"}
    params["v_head"] = np.zeros((cfg.hidden_size, 1), dtype)
    params["v_bias"] = np.zeros(1, dtype)
    return params


def values_forward(params: dict, tokens, cfg: TinyLMConfig):
    """tokens (n, T) -> values (n, T) (V of the state after token t) and a cache for backward.

    Raises:
        ValueError: bad ``tokens`` (see :func:`rlmperf_lite.nn.check_tokens`).
    """
    tokens = check_tokens(tokens, cfg)
    hf, cache = forward(params, tokens, cfg)                                  # (n, T, D)
    n, T, D = hf.shape
    hf2 = hf.reshape(n * T, D)
    values = (mm(hf2, params["v_head"])[:, 0] + params["v_bias"][0]).reshape(n, T)
    return values, (cache, hf2, params["v_head"])


def values_backward(dvalues: np.ndarray, vcache) -> dict:
    """dvalues (n, T) -> grads of every value-model parameter."""
    cache, hf2, v_head = vcache
    n, T = dvalues.shape
    dv = dvalues.reshape(n * T, 1).astype(hf2.dtype)
    dv_head = mm(hf2.T, dv)                                                   # (D, 1)
    dhf = mm(dv, v_head.T).reshape(n, T, -1)                                  # (n, T, D)
    grads = backward(dhf, cache)
    grads["v_head"], grads["v_bias"] = dv_head, dv.sum(axis=0)
    return grads
