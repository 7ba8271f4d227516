"""GAE as a Blelloch scan (rlmperf_lite.rl.gae.gae_scan) equals the papers' reversed loop and
the matrix form, for any lengths, masks, gamma and lambda; and it works level by level."""
import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmperf_lite.rl.gae import gae, gae_loop, gae_scan


def _batch(rng, B, T):
    lengths = rng.integers(1, T + 1, size=B)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)   # ones then zeros
    return rng.normal(size=(B, T)), rng.normal(size=(B, T)), mask


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 5), T=st.integers(1, 70), gamma=st.floats(0, 1), lam=st.floats(0, 1),
       seed=st.integers(0, 2**16))
def test_scan_equals_loop_and_matrix(B, T, gamma, lam, seed):
    r, v, mask = _batch(np.random.default_rng(seed), B, T)
    loop, scan, matrix = (f(r, v, mask, gamma, lam) for f in (gae_loop, gae_scan, gae))
    for want, got in ((loop, scan), (loop, matrix)):
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
            assert b.dtype == np.float32 and b.shape == (B, T)


def test_scan_of_a_terminal_reward_with_gamma_lam_one_is_return_minus_value():
    """gamma = lam = 1, reward 1 on the last token: A_t = 1 - V_t, whatever T (here T = 6, not
    a power of two, so the scan pads with identity maps)."""
    values = np.linspace(0.1, 0.6, 6)[None, :]
    rewards = np.zeros((1, 6))
    rewards[0, -1] = 1.0
    adv, ret = gae_scan(rewards, values, np.ones((1, 6)), 1.0, 1.0)
    np.testing.assert_allclose(adv[0], 1.0 - values[0], rtol=1e-6)
    np.testing.assert_allclose(ret[0], 1.0, rtol=1e-6)


@pytest.mark.parametrize("bad, match", [(dict(gamma=1.5), "gamma"), (dict(lam=-0.1), "lam")])
def test_bad_input_names_the_argument(bad, match):
    r, v, mask = _batch(np.random.default_rng(0), 2, 4)
    with pytest.raises(ValueError, match=match):
        gae_scan(r, v, mask, **{"gamma": 1.0, "lam": 0.95, **bad})
    with pytest.raises(ValueError, match="shape"):
        gae_scan(r, v[:, :3], mask)


@pytest.mark.parametrize("T", [1, 2, 5, 8, 100])
def test_scan_does_the_work_and_depth_gae_workdepth_counts(T, monkeypatch):
    """Count the combines gae_scan runs: 2 log2 n levels (calls) of 2 (n - 1) combines in all
    per row, so W = 2 multiply-adds x 2 (n - 1) + T for the final step, D = 2 log2 n + 1."""
    gae_module = importlib.import_module("rlmperf_lite.rl.gae")   # rl.gae is also the function
    calls, elements = [], []
    real = gae_module._combine

    def counting(first, then):
        calls.append(1)
        elements.append(np.shape(first[0])[1])              # combines per row in this level
        return real(first, then)

    monkeypatch.setattr(gae_module, "_combine", counting)
    r, v, mask = _batch(np.random.default_rng(1), 3, T)
    gae_scan(r, v, mask)
    work, depth = gae_module.gae_workdepth(T)["scan"]
    assert len(calls) + 1 == depth and 2 * sum(elements) + T == work
    assert gae_module.gae_workdepth(T)["loop"] == (T, T)
    with pytest.raises(ValueError, match="T"):
        gae_module.gae_workdepth(0)
