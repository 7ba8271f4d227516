"""Property-based tests of the RL functions (issue 18, "bad input").

Each test runs twice. Both runs draw valid arguments — arrays of moderate floats or of finite
floats of any magnitude (subnormal to 1.8e308), float16 to float64 log-probs, 0/1 masks, scalars
anywhere in their range, ends included — and the "corrupted" run then corrupts exactly one: a NaN or inf at some
entry, a mask value other than 0/1 (or a gap where ones-then-zeros is needed), a scalar out of
range or of the wrong type, or junk (None, text, a ragged list, a complex or wrongly shaped
array). The properties, for every function:

- a corrupted argument is refused with a ValueError whose message names that argument;
- otherwise the function returns finite, well-formed results (the right shapes, 0 on masked
  positions, and the property each docstring states), or — for extreme magnitudes whose result
  does not fit — a ValueError naming one of its arguments. Never another exception, a silent
  NaN/inf or a wrong shape.

Deterministic (``derandomize=True``) and small, so CI stays fast.
"""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlmperf_lite.rl import (AGG_MODES, aggregate_loss, aggregate_weights, gae, gae_loop,
                             gae_scan, grpo_advantages, kl_estimate, kl_estimate_grad,
                             policy_loss, policy_loss_grad, reinforce_pp_advantages,
                             rloo_advantages)
from rlmperf_lite.sim import admission_cap

SETTINGS = settings(max_examples=60, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

JUNK = [None, "ab", [[1.0], [1.0, 2.0]], np.array([[1 + 1j]]), np.zeros(7)]
BAD_SCALARS = [math.nan, math.inf, -math.inf, -1.0, 1e300, True, "0.1", None]


def _array(shape, dtype, elements):
    """An array of ``shape`` whose entries are drawn one by one (hypothesis's own arrays mostly
    repeat one fill value, which would hide the extreme entries)."""
    n = math.prod(shape)
    return st.lists(elements, min_size=n, max_size=n).map(
        lambda xs: np.array(xs, dtype=dtype).reshape(shape))


def _floats(shape, dtype=np.float64):
    """Finite floats of ``dtype``: half the time moderate, else of any magnitude."""
    dt = np.dtype(dtype)
    kinds = [st.floats(-8, 8, width=dt.itemsize * 8),
             hnp.from_dtype(dt, allow_nan=False, allow_infinity=False)]
    return st.integers(0, 1).flatmap(lambda i: _array(shape, dt, kinds[i]))


def _scalar(low, high):
    """A float in [low, high], its ends drawn often."""
    return st.one_of(st.sampled_from([low, high]), st.floats(low, high))


def _prefix_mask(shape, min_len=0):
    """Ones then zeros per row: a completion of min_len..R tokens, then padding."""
    return _array(shape[:1], np.int64, st.integers(min_len, shape[1])).map(
        lambda n: (np.arange(shape[1])[None, :] < n[:, None]).astype(np.float32))


def _binary_mask(shape):
    return _array(shape, np.float64, st.sampled_from([0.0, 1.0]))


def _size(high):
    """A dimension in 1..high, now and then 0 (an empty batch)."""
    return st.integers(0, 7).flatmap(lambda i: st.just(0) if i == 0 else st.integers(1, high))


def _valid(x, low, high=math.inf):
    """A finite real number (not a bool) in [low, high]."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) \
        and low <= x <= high


def _corrupt(data, kind, value, low=0.0, high=math.inf):
    """``value`` made invalid: an array gets a NaN/inf entry (or becomes junk), a mask a stray
    value ("mask") or also a gap ("prefix_mask"), a scalar a value outside [low, high]."""
    if kind == "scalar":
        return data.draw(st.sampled_from([v for v in BAD_SCALARS if not _valid(v, low, high)]))
    a = np.array(value, dtype=np.float64 if kind == "array" else value.dtype)
    how = data.draw(st.sampled_from(["entry", "gap", "gap", "junk"]))
    if how == "gap" and kind == "prefix_mask" and a.ndim == 2 and a.shape[1] >= 2 and a.size:
        row = data.draw(st.integers(0, a.shape[0] - 1))
        a[row, 0], a[row, -1] = 0.0, 1.0                  # a 1 after a 0
        return a
    if how != "junk" and a.size:
        bad = [math.nan, math.inf, -math.inf] if kind == "array" else [2.0, 0.5, math.nan, -1.0]
        a.flat[data.draw(st.integers(0, a.size - 1))] = data.draw(st.sampled_from(bad))
        return a
    return data.draw(st.sampled_from(JUNK))


def _call(names, corrupted, fn, *args, **kwargs):
    """fn's result; None if it raised a ValueError naming ``corrupted`` (or, with nothing
    corrupted, one of ``names``). A corrupted argument that is accepted fails the test."""
    try:
        out = fn(*args, **kwargs)
    except ValueError as err:
        wanted = [names[corrupted]] if corrupted else list(names.values())
        assert any(n in str(err) for n in wanted), f"{err!r} names none of {wanted}"
        return None
    assert corrupted is None, f"{corrupted} was corrupted but accepted by {fn.__name__}"
    return out


def _finite(x, shape, dtype=None):
    x = np.asarray(x)
    assert x.shape == shape and np.isfinite(x).all(), (x.shape, shape, x)
    assert dtype is None or x.dtype == dtype, x.dtype


def _exact_group_advantages(r, eps):
    """GRPO's advantages in exact rational arithmetic (fractions), scaled by the largest
    magnitude only at the end: the reference, independent of the library's float tricks."""
    r = [Fraction(float(x)) for x in r]
    top = max(abs(x) for x in r)
    mean = sum(r) / len(r)
    var = sum((x - mean) ** 2 for x in r) / (len(r) - 1)
    std = math.sqrt(float(var / top ** 2))                         # in units of top
    return [float((x - mean) / top) / (std + eps / float(top)) for x in r]


def _pick(data, corrupting, *names):
    """The argument to corrupt: one of ``names``, or None when not ``corrupting``."""
    return data.draw(st.sampled_from(names)) if corrupting else None


CORRUPTING = pytest.mark.parametrize("corrupting", [False, True], ids=["valid", "corrupted"])


@CORRUPTING
@SETTINGS
@given(data=st.data(), B=st.integers(1, 4), G=st.integers(2, 5),
       scale=st.sampled_from(["group", "batch", "none"]), eps=_scalar(0.0, 1.0))
def test_group_advantages(data, B, G, scale, eps, corrupting):
    """grpo_advantages (every ``scale``; "none" is Dr. GRPO's) and rloo_advantages: (B*G,)
    finite float32. With the group's std, |A| <= (G - 1) / sqrt(G) (the largest standardised
    deviation of G numbers), A equals the exact rational-arithmetic value to float32 rounding
    from subnormal rewards to 1.8e308 (above 1.3e154 they were all 0) wherever the group's
    spread exceeds 1e-6 of its magnitude (below, rounding the mean in float64 is the limit),
    and at eps = 0 every group whose rewards differ has unit unbiased std, sum A^2 = G - 1."""
    corrupted = _pick(data, corrupting, "rewards", "group_size", "scale", "eps")
    rewards = data.draw(_floats((B * G,)))
    if corrupted == "rewards":
        rewards = _corrupt(data, "array", rewards)
    if corrupted == "group_size":
        G = data.draw(st.sampled_from([1, 0, -1, 2.5, True, "2", None]))
    if corrupted == "scale":
        scale = data.draw(st.sampled_from(["tokens", None, 3]))
    if corrupted == "eps":
        eps = _corrupt(data, "scalar", eps)
    names = {"rewards": "reward", "group_size": "group_size", "scale": "scale", "eps": "eps"}
    adv = _call(names, corrupted, grpo_advantages, rewards, G, scale=scale, eps=eps)
    if adv is not None:
        _finite(adv, (B * G,), np.float32)
        r, a = rewards.reshape(-1, G), adv.reshape(-1, G).astype(np.float64)
        if scale == "group":
            assert np.abs(a).max() <= (G - 1) / math.sqrt(G) * (1 + 1e-5)
            for rg, ag in zip(r, a):
                if rg.max() - rg.min() > 1e-6 * np.abs(rg).max():
                    np.testing.assert_allclose(ag, _exact_group_advantages(rg, eps),
                                               rtol=1e-5, atol=1e-6)
        if scale == "group" and eps == 0:
            varied = r.max(axis=1) > r.min(axis=1)
            np.testing.assert_allclose((a[varied] ** 2).sum(axis=1), G - 1, rtol=1e-5)
    loo = _call(names, None if corrupted in ("scale", "eps") else corrupted, rloo_advantages,
                rewards, G)
    if loo is not None:
        _finite(loo, (B * G,), np.float32)


@CORRUPTING
@SETTINGS
@given(data=st.data(), B=st.integers(1, 4), R=st.integers(1, 5), kl_coef=_scalar(0.0, 1.0),
       eps=_scalar(0.0, 1.0))
def test_reinforce_pp_advantages(data, B, R, kl_coef, eps, corrupting):
    """reinforce_pp_advantages: (B, R) finite float32, 0 on masked positions, mean 0 over the
    batch's tokens; a mask that is not 0/1 ones-then-zeros is refused."""
    corrupted = _pick(data, corrupting, "rewards", "completion_mask", "per_token_kl", "kl_coef",
                      "eps")
    rewards, kl = data.draw(_floats((B,))), data.draw(_floats((B, R)))
    mask = data.draw(_prefix_mask((B, R), min_len=1))
    if corrupted == "rewards":
        rewards = _corrupt(data, "array", rewards)
    if corrupted == "completion_mask":
        mask = _corrupt(data, "prefix_mask", mask)
    if corrupted == "per_token_kl":
        kl = _corrupt(data, "array", kl)
        kl = "ab" if kl is None else kl                # None is valid (no KL) at kl_coef 0
    if corrupted == "kl_coef":
        kl_coef = _corrupt(data, "scalar", kl_coef)
    if corrupted == "eps":
        eps = _corrupt(data, "scalar", eps)
    names = {"rewards": "reward", "completion_mask": "completion_mask",
             "per_token_kl": "per_token_kl", "kl_coef": "kl_coef", "eps": "eps"}
    adv = _call(names, corrupted, reinforce_pp_advantages, rewards, mask, per_token_kl=kl,
                kl_coef=kl_coef, eps=eps)
    if adv is not None:
        _finite(adv, (B, R), np.float32)
        assert (adv[mask == 0] == 0).all()
        assert abs(float(adv.sum())) <= 1e-3 * max(1.0, float(np.abs(adv).sum()))


@CORRUPTING
@SETTINGS
@given(data=st.data(), B=_size(3), T=_size(6), gamma=_scalar(0.0, 1.0),
       lam=_scalar(0.0, 1.0))
def test_gae_three_forms(data, B, T, gamma, lam, corrupting):
    """gae, gae_loop, gae_scan: (advantages, returns), each (B, T) finite float32 and 0 on
    masked positions, the three forms agreeing to rounding; a mask that is not 0/1
    ones-then-zeros (verl carries values over a gap, these restart) is refused."""
    corrupted = _pick(data, corrupting, "rewards", "values", "completion_mask", "gamma", "lam")
    rewards, values = data.draw(_floats((B, T))), data.draw(_floats((B, T)))
    mask = data.draw(_prefix_mask((B, T)))
    if corrupted in ("rewards", "values"):
        rewards, values = ((_corrupt(data, "array", rewards), values) if corrupted == "rewards"
                           else (rewards, _corrupt(data, "array", values)))
    if corrupted == "completion_mask":
        mask = _corrupt(data, "prefix_mask", mask)
    if corrupted == "gamma":
        gamma = _corrupt(data, "scalar", gamma, 0, 1)
    if corrupted == "lam":
        lam = _corrupt(data, "scalar", lam, 0, 1)
    names = {k: k for k in ("rewards", "values", "completion_mask", "gamma", "lam")}
    results = [_call(names, corrupted, fn, rewards, values, mask, gamma, lam)
               for fn in (gae, gae_loop, gae_scan)]
    for res in results:
        for x in res or ():
            _finite(x, (B, T), np.float32)
            assert (x[mask == 0] == 0).all()
    if all(r is not None for r in results):
        size = max(1.0, float(np.abs(results[0][0]).max(initial=0)))
        for r in results[1:]:
            np.testing.assert_allclose(r[0], results[0][0], atol=1e-4 * size, rtol=1e-4)


@CORRUPTING
@SETTINGS
@given(data=st.data(), N=_size(3), R=_size(4),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       low=_scalar(0.0, 1.0), high=_scalar(0.0, 10.0), per_token_adv=st.booleans())
def test_policy_loss_and_its_gradient(data, N, R, dtype, low, high, per_token_adv, corrupting):
    """policy_loss: per-token loss (N, R), finite, never float16 (upcast), 0 where masked;
    metrics finite with clipfrac in [0, 1] and approx_kl >= 0 (to rounding). policy_loss_grad:
    (N, R) finite. Any 0/1 mask is taken (gaps are fine per token); other values are refused."""
    corrupted = _pick(data, corrupting, "per_token_logps", "old_per_token_logps", "advantages",
                      "completion_mask", "clip_eps_low", "clip_eps_high")
    args = {"per_token_logps": data.draw(_floats((N, R), dtype)),
            "old_per_token_logps": data.draw(_floats((N, R), dtype)),
            "advantages": data.draw(_floats((N, R) if per_token_adv else (N,))),
            "completion_mask": data.draw(_binary_mask((N, R)))}
    kw = {"clip_eps_low": low, "clip_eps_high": high}
    if corrupted in args:
        args[corrupted] = _corrupt(data, "mask" if corrupted == "completion_mask" else "array",
                                   args[corrupted])
    if corrupted in kw:
        kw[corrupted] = _corrupt(data, "scalar", kw[corrupted], 0,
                                 1 if corrupted == "clip_eps_low" else math.inf)
    names = {k: k for k in (*args, *kw)}
    out = _call(names, corrupted, policy_loss, *args.values(), **kw)
    if out is not None:
        loss, metrics = out
        _finite(loss, (N, R))
        assert loss.dtype != np.float16 and (loss[args["completion_mask"] == 0] == 0).all()
        assert all(math.isfinite(v) for v in metrics.values())
        assert 0 <= metrics["clipfrac"] <= 1 and metrics["approx_kl"] >= -1e-3
    grad = _call(names, corrupted, policy_loss_grad, *args.values(), **kw)
    if grad is not None:
        _finite(grad, (N, R))


@CORRUPTING
@SETTINGS
@given(data=st.data(), N=_size(3), R=_size(4),
       kind=st.sampled_from(["k1", "k2", "k3"]),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]))
def test_kl_estimators(data, N, R, kind, dtype, corrupting):
    """kl_estimate and kl_estimate_grad: (N, R) finite; k2 >= 0 and k3 >= 0 (to rounding)."""
    corrupted = _pick(data, corrupting, "per_token_logps", "ref_per_token_logps", "kind")
    logps, ref = data.draw(_floats((N, R), dtype)), data.draw(_floats((N, R)))
    if corrupted == "per_token_logps":
        logps = _corrupt(data, "array", logps)
    if corrupted == "ref_per_token_logps":
        ref = _corrupt(data, "array", ref)
    if corrupted == "kind":
        kind = data.draw(st.sampled_from(["k4", "K3", None]))
    names = {k: k for k in ("per_token_logps", "ref_per_token_logps", "kind")}
    est = _call(names, corrupted, kl_estimate, logps, ref, kind)
    if est is not None:
        _finite(est, (N, R))
        if kind in ("k2", "k3"):
            assert (est >= -1e-6 * (1 + np.abs(est))).all()
    grad = _call(names, corrupted, kl_estimate_grad, logps, ref, kind)
    if grad is not None:
        _finite(grad, (N, R))


@CORRUPTING
@SETTINGS
@given(data=st.data(), N=_size(3), R=_size(4),
       mode=st.sampled_from(AGG_MODES),
       counts=st.fixed_dictionaries({k: st.one_of(st.none(), _scalar(1.0, 99.0))
                                     for k in ("max_len", "num_tokens", "num_seqs")}))
def test_loss_aggregation(data, N, R, mode, counts, corrupting):
    """aggregate_weights: (N, R) finite, >= 0, 0 where masked, and for token-mean over the batch
    (no num_tokens) summing to 1 when any token is unmasked; aggregate_loss a finite float. The
    counts max_len, num_tokens and num_seqs must be >= 1."""
    corrupted = _pick(data, corrupting, "completion_mask", "per_token_loss", "mode", "max_len",
                      "num_tokens", "num_seqs")
    mask, loss = data.draw(_binary_mask((N, R))), data.draw(_floats((N, R)))
    if corrupted == "completion_mask":
        mask = _corrupt(data, "mask", mask)
    if corrupted == "per_token_loss":
        loss = _corrupt(data, "array", loss)
    if corrupted == "mode":
        mode = data.draw(st.sampled_from(["sum", None, "token_mean"]))
    if corrupted in counts:
        counts[corrupted] = data.draw(st.sampled_from([0.5, 0, -1, math.nan, math.inf, True,
                                                       "4"]))
    names = {k: k for k in ("completion_mask", "per_token_loss", "mode", *counts)}
    w = _call(names, None if corrupted == "per_token_loss" else corrupted, aggregate_weights,
              mask, mode, **counts)
    if w is not None:
        _finite(w, (N, R))
        assert (w >= 0).all() and (w[mask == 0] == 0).all()
        if mode == "token-mean" and counts["num_tokens"] is None and mask.sum() > 0:
            assert float(w.sum(dtype=np.float64)) == pytest.approx(1.0, rel=1e-5)
    total = _call(names, corrupted, aggregate_loss, loss, mask, mode, **counts)
    if total is not None:
        assert isinstance(total, float) and math.isfinite(total)


@CORRUPTING
@SETTINGS
@given(data=st.data(), version=st.one_of(st.integers(-1, 20), st.integers(0, 2**52)),
       staleness=_scalar(0.0, 1000.0), prompts=st.integers(1, 10**6))
def test_admission_cap(data, version, staleness, prompts, corrupting):
    """admission_cap: an int >= 0 equal to floor((v + 1 + s) B) (to its 1e-9 rounding guard),
    growing by exactly B per version; versions down to -(1 + s) are allowed (chain_window's
    look-back), below that the cap would be negative and is refused."""
    corrupted = _pick(data, corrupting, "version", "staleness", "prompts")
    if corrupted == "version":
        version = data.draw(st.sampled_from([math.floor(-2 - staleness), 1.5, None, "1",
                                             2**60, True]))
    if corrupted == "staleness":
        staleness = _corrupt(data, "scalar", staleness, 0, 1000)
    if corrupted == "prompts":
        prompts = data.draw(st.sampled_from([0, -1, 2.5, True, None, 2**60]))
    cap = _call({k: k for k in ("version", "staleness", "prompts")}, corrupted, admission_cap,
                version, staleness, prompts)
    if cap is not None:
        assert isinstance(cap, int) and cap == max(0, math.floor((version + 1 + staleness)
                                                                 * prompts + 1e-9))
        if (abs(version) + 1001) * prompts < 2**40:       # exact in float64
            assert admission_cap(version + 1, staleness, prompts) - cap == prompts or cap == 0
