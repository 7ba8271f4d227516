"""Pipeline parallelism: schedules give the bubble and memory of Narayanan et al. 2021 §2.2, and
running one on simulated ranks equals the unsharded log-probs and gradients, sending exactly the
activations and their gradients across stage boundaries (book Chapter 9)."""
import numpy as np
import pytest

from rlmperf_lite.nn.config import TinyLMConfig
from rlmperf_lite.nn.model import init_params, logps_backward, logps_forward
from rlmperf_lite.parallel import ProcessGroup
from rlmperf_lite.parallel.pipeline import pipeline_grads, stage_layers
from rlmperf_lite.parallel.schedules import (
    gpipe_schedule,
    interleaved_schedule,
    make_schedule,
    one_f_one_b_schedule,
    schedule_timeline,
)


# ---- schedules as data ------------------------------------------------------------------------
@pytest.mark.parametrize("make", [gpipe_schedule, one_f_one_b_schedule])
@pytest.mark.parametrize("pp, m, bubble", [(8, 32, 0.21875), (4, 8, 0.375), (4, 4, 0.75),
                                           (2, 1, 1.0), (1, 3, 0.0)])
@pytest.mark.parametrize("times", [(1.0, 1.0), (1.0, 2.0)])
def test_bubble_fraction_is_p_minus_1_over_m(make, pp, m, bubble, times):
    # Narayanan et al. 2021 §2.2.1: bubble / ideal time = (p - 1) / m for GPipe and 1F1B
    t = schedule_timeline(make(pp, m), *times)
    assert bubble == (pp - 1) / m
    assert t.bubble_fraction == pytest.approx(bubble, rel=1e-12)
    ideal = m * sum(times)                                 # each stage's compute time
    np.testing.assert_allclose(t.busy, ideal)
    np.testing.assert_allclose(t.makespan, (m + pp - 1) * sum(times))
    np.testing.assert_allclose(t.idle, (pp - 1) * sum(times))


@pytest.mark.parametrize("pp, m, v", [(4, 8, 2), (2, 4, 2), (8, 32, 4), (4, 12, 3), (4, 4, 2)])
@pytest.mark.parametrize("times", [(1.0, 1.0), (1.0, 2.0)])
def test_interleaved_bubble_is_p_minus_1_over_v_m(pp, m, v, times):
    # Narayanan et al. 2021 §2.2.2: v chunks per stage shrink the bubble to (p - 1) / (v m)
    t = schedule_timeline(interleaved_schedule(pp, m, v), *times)
    assert t.bubble_fraction == pytest.approx((pp - 1) / (v * m), rel=1e-12)
    np.testing.assert_allclose(t.busy, m * sum(times))     # a chunk op takes 1/v of the time


def test_peak_in_flight_is_m_for_gpipe_and_p_minus_s_for_1f1b():
    # GPipe keeps every microbatch's activations until the backward phase; 1F1B at most p - s
    pp, m = 4, 8
    np.testing.assert_array_equal(schedule_timeline(gpipe_schedule(pp, m)).peak_in_flight, m)
    np.testing.assert_array_equal(schedule_timeline(one_f_one_b_schedule(pp, m)).peak_in_flight,
                                  [4, 3, 2, 1])
    # with fewer microbatches than stages, 1F1B cannot hold more than m
    np.testing.assert_array_equal(schedule_timeline(one_f_one_b_schedule(4, 2)).peak_in_flight,
                                  [2, 2, 2, 1])


def test_one_f_one_b_order_on_the_first_and_last_stage():
    # PipeDream-Flush (Narayanan et al. 2021, Fig. 4 top): p - 1 warm-up forwards on stage 0,
    # strict alternation on the last stage
    sched = one_f_one_b_schedule(4, 5)
    assert sched[0][:5] == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0)]
    assert sched[3][:4] == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    for ops in sched:                                      # every op exactly once per stage
        assert sorted(ops) == sorted([("F", i) for i in range(5)] + [("B", i) for i in range(5)])


def test_interleaved_order_runs_p_microbatches_per_chunk():
    # Megatron-LM order: microbatches 0..p-1 through chunk 0, then through chunk 1, ...
    sched = interleaved_schedule(2, 4, 2)
    assert sched[0][:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    for ops in sched:
        assert len(ops) == 2 * 4 * 2 and len(set(ops)) == len(ops)


def test_timeline_records_respect_the_dependencies():
    # F(mb) on stage s starts after it ends on s - 1; B(mb) on s after it ends on s + 1
    t = schedule_timeline(one_f_one_b_schedule(3, 4))
    end = {(r["op"], r["microbatch"], r["stage"]): r["end"] for r in t.records}
    for r in t.records:
        s, mb = r["stage"], r["microbatch"]
        if r["op"] == "F" and s > 0:
            assert r["start"] >= end[("F", mb, s - 1)]
        if r["op"] == "B":
            assert r["start"] >= end[("F", mb, s)]
            if s < 2:
                assert r["start"] >= end[("B", mb, s + 1)]
    assert set(t.records[0]) == {"stage", "op", "microbatch", "chunk", "start", "end"}
    assert [r["start"] for r in t.records] == sorted(r["start"] for r in t.records)


def test_schedule_that_cannot_finish_and_bad_times_raise():
    with pytest.raises(ValueError, match="schedule"):      # B before its own F: deadlock
        schedule_timeline([[("B", 0), ("F", 0)]])
    with pytest.raises(ValueError, match="backward_time"):
        schedule_timeline(gpipe_schedule(2, 2), backward_time=0)
    with pytest.raises(ValueError, match="microbatches"):
        interleaved_schedule(4, 6, 2)                     # m must be a multiple of p
    with pytest.raises(ValueError, match="pp"):
        gpipe_schedule(0, 2)


@pytest.mark.parametrize("bad, match", [
    (lambda: schedule_timeline([["F0", "B0"]]), "schedule\\[0\\] holds 'F0', not an op"),
    (lambda: schedule_timeline([[("X", 0)]]), "not an op"),
    (lambda: schedule_timeline([[("F", -1)]]), "not an op"),
    (lambda: schedule_timeline([[("F", 0.0)]]), "not an op"),
    (lambda: schedule_timeline([[("F", 0, 0, 0)]]), "not an op"),
    (lambda: make_schedule("1f1b", 4, 8, 0), "interleave must be an int >= 1"),
    (lambda: make_schedule("gpipe", 4, 8, 1.5), "interleave must be an int >= 1"),
])
def test_bad_ops_and_interleave_raise_naming_them(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


# ---- execution on simulated ranks ---------------------------------------------------------------
def _setup(num_layers, n=4, T=8, seed=0):
    cfg = TinyLMConfig(vocab_size=11, max_seq_len=T, hidden_size=16, num_layers=num_layers,
                       num_heads=2, intermediate_size=32, activation="gelu")
    rng = np.random.default_rng(seed)
    params = init_params(cfg, rng, dtype=np.float64)
    tokens = rng.integers(0, cfg.vocab_size, size=(n, T))
    weights = rng.standard_normal((n, T - 1))             # dLoss/dlogps of a fixed linear loss
    return cfg, params, tokens, weights


def _reference(params, tokens, cfg, weights):
    logps, cache = logps_forward(params, tokens, cfg)
    return logps, logps_backward(weights * logps ** 2, cache)   # loss = sum(w logps^3 / 3)


@pytest.mark.parametrize("pp, L", [(1, 2), (2, 2), (4, 4)])
@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_equals_unsharded_logps_and_grads(pp, L, m, schedule):
    cfg, params, tokens, w = _setup(L)
    ref_logps, ref_grads = _reference(params, tokens, cfg, w)
    group = ProcessGroup(pp)
    # a loss whose gradient depends on the microbatch's log-probs and on its rows of the batch
    logps, grads, timeline = pipeline_grads(
        params, cfg, tokens, lambda lp, rows: w[rows] * lp ** 2,
        pp=pp, microbatches=m, schedule=schedule, group=group)
    np.testing.assert_allclose(logps, ref_logps, rtol=1e-10)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-10, atol=1e-14,
                                   err_msg=name)
    assert len(timeline.records) == 2 * pp * m
    # each boundary carries every activation (n, T, D) forward and its gradient back
    n, T = tokens.shape
    act_bytes = n * T * cfg.hidden_size * 8
    assert group.log.sent_bytes.sum() == 2 * (pp - 1) * act_bytes
    per_rank = [act_bytes] + [2 * act_bytes] * (pp - 2) + [act_bytes] if pp > 1 else [0]
    np.testing.assert_array_equal(group.log.sent_bytes, per_rank)
    assert len(group.log.calls) == 2 * (pp - 1) * m    # one send per microbatch per direction


@pytest.mark.parametrize("pp, v, m", [(2, 2, 2), (2, 2, 4), (1, 2, 2)])
def test_interleaved_pipeline_equals_unsharded(pp, v, m):
    cfg, params, tokens, w = _setup(4)
    ref_logps, ref_grads = _reference(params, tokens, cfg, w)
    group = ProcessGroup(pp)
    logps, grads, _ = pipeline_grads(params, cfg, tokens, lambda lp, rows: w[rows] * lp ** 2,
                                     pp=pp, microbatches=m, schedule="interleaved",
                                     interleave=v, group=group)
    np.testing.assert_allclose(logps, ref_logps, rtol=1e-10)
    for name in ref_grads:
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-10, atol=1e-14,
                                   err_msg=name)
    # pp v - 1 virtual boundaries; with pp > 1 every one joins two different ranks
    act_bytes = tokens.size * cfg.hidden_size * 8
    expected = 2 * (pp * v - 1) * act_bytes if pp > 1 else 0
    assert group.log.sent_bytes.sum() == expected


def test_pipeline_with_temperature_matches():
    cfg, params, tokens, w = _setup(2)
    logps_ref, cache = logps_forward(params, tokens, cfg, temperature=0.7)
    grads_ref = logps_backward(w, cache)
    logps, grads, _ = pipeline_grads(params, cfg, tokens, lambda lp, rows: w[rows], pp=2,
                                     microbatches=2, temperature=0.7)
    np.testing.assert_allclose(logps, logps_ref, rtol=1e-10)
    for name in grads_ref:
        np.testing.assert_allclose(grads[name], grads_ref[name], rtol=1e-10, atol=1e-14)


def test_stage_layers_split_contiguously_and_interleaved():
    assert [list(r) for r in stage_layers(4, 2)] == [[0, 1], [2, 3]]
    # v = 2: stage 0 holds virtual stages 0 and 2 (layers 0 and 2)
    assert [list(r) for r in stage_layers(4, 2, 2)] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("kwargs, name", [
    ({"pp": 3, "microbatches": 2}, "pp"),                   # 3 does not divide L = 4
    ({"pp": 2, "microbatches": 3}, "microbatches"),         # 3 does not divide n = 4
    ({"pp": 2, "microbatches": 2, "schedule": "zb"}, "schedule"),
    ({"pp": 2, "microbatches": 2, "interleave": 2}, "interleave"),
    ({"pp": 2, "microbatches": 2, "group": ProcessGroup(3)}, "group"),
    ({"pp": 0, "microbatches": 2}, "pp"),
])
def test_bad_input_raises_naming_the_parameter(kwargs, name):
    cfg, params, tokens, w = _setup(4)
    with pytest.raises(ValueError, match=name):
        pipeline_grads(params, cfg, tokens, lambda lp, rows: w[rows], **kwargs)


def test_dlogps_fn_of_the_wrong_shape_raises():
    cfg, params, tokens, w = _setup(2)
    with pytest.raises(ValueError, match="dlogps_fn"):
        pipeline_grads(params, cfg, tokens, lambda lp, rows: w, pp=2, microbatches=2)
