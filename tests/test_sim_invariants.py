"""Invariants of the RL-system simulator (issue 6; book Chapters 10 and 11): what must hold
whatever the inputs, checked over a grid of small systems."""
import itertools

import numpy as np
import pytest

from rlmperf_lite.sim import (Engine, PhaseCost, RLSystem, Workload, generate_batch, simulate)

COSTS = {"old_logp": PhaseCost(2e-4, 0.5), "ref_logp": PhaseCost(2e-4, 0.5),
         "actor_update": PhaseCost(6e-4, 1.0), "reward": PhaseCost(1e-5)}
STALENESS = (0, 0.25, 0.5, 1, 1.5, 2, 3)


def _workload(seed=0, sigma=1.2):
    return Workload(prompts=8, group_size=4, prompt_len=64, mean_response_len=300,
                    max_response_len=2000, length_sigma=sigma, seed=seed)


def _engine(per_seq=0.0, slots=8):
    return Engine(decode_base_s=0.01, decode_per_seq_s=per_seq, slots=slots)


def _grid():
    """Seeds x sync cost x length spread x slots x streaming updates."""
    return itertools.product(range(3), (0.0, 3.0), (0.5, 1.2), (8, 64), (1, 2, 4))


def test_staleness_zero_is_the_synchronous_schedule():
    """Async with staleness 0 and one update per version replays the synchronous schedule
    event for event (two independent implementations), on every system of the grid, with
    rewards scored after generation or during it."""
    for seed, sync_s, sigma, slots, _ in _grid():
        wl = _workload(seed, sigma)
        kw = dict(engine=_engine(5e-4, slots), costs=COSTS, weight_sync_s=sync_s)
        sync = simulate(RLSystem.disaggregated(2, 2, **kw), wl, 6)
        for partial, overlap in ((True, False), (False, False), (True, True)):
            if overlap:
                sync = simulate(RLSystem.disaggregated(2, 2, overlap_reward=True, **kw), wl, 6)
            a = simulate(RLSystem.disaggregated(2, 2, mode="async", partial_rollout=partial,
                                                overlap_reward=overlap, **kw), wl, 6)
            np.testing.assert_allclose(a.step_end_s, sync.step_end_s, rtol=1e-12)
            order_a, order_s = np.argsort(a.samples["group"], kind="stable"), \
                np.argsort(sync.samples["group"], kind="stable")
            for col in ("start_s", "end_s", "ready_s", "consumed_step"):
                np.testing.assert_allclose(a.samples[col][order_a], sync.samples[col][order_s],
                                           rtol=1e-12, err_msg=col)


def test_larger_staleness_never_lowers_throughput_when_the_model_is_monotone():
    """With batch-ordered consumption, one update per version, partial rollouts and an
    iteration time independent of the batch (decode_per_seq_s = 0), every event time is a
    max-plus function of earlier ones: a larger bound can only move events earlier. Then
    throughput never falls as the bound grows, and async is never slower than sync on the same
    pools. (Streaming updates break it: a counterexample follows.)"""
    for seed, sync_s, sigma, slots, m in _grid():
        if m != 1:
            continue
        wl = _workload(seed, sigma)
        kw = dict(engine=_engine(0.0, slots), costs=COSTS, weight_sync_s=sync_s)
        sync_end = simulate(RLSystem.disaggregated(2, 2, **kw), wl, 10).step_end_s[-1]
        prev = np.inf
        for s in STALENESS:
            r = simulate(RLSystem.disaggregated(2, 2, mode="async", staleness=s, minibatches=m,
                                                consume="batch", **kw), wl, 10)
            assert r.step_end_s[-1] <= prev * (1 + 1e-12), (seed, sync_s, slots, m, s)
            assert r.step_end_s[-1] <= sync_end * (1 + 1e-12)
            prev = r.step_end_s[-1]


def test_streaming_updates_can_make_more_staleness_slower():
    """Not an invariant (found by a reviewer's random search): with 4 streaming updates per
    version and 2 slots, staleness 1 ends 10 versions later than staleness 0.5 — which groups
    an update finds ready depends on the bound, and so does when the last update can start."""
    wl = Workload(prompts=8, group_size=4, prompt_len=64, mean_response_len=300,
                  max_response_len=2000, length_sigma=0.5, seed=1)
    ends = [simulate(RLSystem.disaggregated(2, 2, engine=_engine(0.0, 2), costs=COSTS,
                                            mode="async", staleness=s, minibatches=4,
                                            consume="batch"), wl, 10).step_end_s[-1]
            for s in (0.5, 1.0)]
    assert ends[1] > ends[0]


def test_draining_before_a_sync_can_make_more_staleness_slower():
    """Not an invariant, a property the book teaches (section 11.2): without partial rollouts
    the engine drains its running samples before each sync, and a larger bound puts more of
    them in flight — this grid holds a system where a larger bound is slower."""
    slower = 0
    for seed, sync_s, sigma, slots, m in _grid():
        wl = _workload(seed, sigma)
        kw = dict(engine=_engine(0.0, slots), costs=COSTS, weight_sync_s=sync_s,
                  mode="async", partial_rollout=False, minibatches=m, consume="batch")
        ends = [simulate(RLSystem.disaggregated(2, 2, staleness=s, **kw), wl, 10).step_end_s[-1]
                for s in (1, 3)]
        slower += ends[1] > ends[0]
    assert slower > 0


def test_utilisation_shares_are_within_0_1_and_sum_to_1():
    """Every pool's compute/sync/switch/idle shares lie in [0, 1] and sum to 1; a replica never
    runs more sequences than its slots."""
    wl = _workload()
    for mode, s in (("sync", 0), ("async", 0.5), ("async", 2)):
        for slots in (4, 64):
            system = RLSystem.disaggregated(2, 2, engine=_engine(5e-4, slots), costs=COSTS,
                                            weight_sync_s=2.0, mode=mode, staleness=s)
            r = simulate(system, wl, 8)
            for pool, shares in r.utilisation().items():
                assert all(0 <= v <= 1 + 1e-12 for v in shares.values()), (pool, shares)
                assert sum(shares.values()) == pytest.approx(1.0)
            smp = r.samples
            for rep in np.unique(smp["replica"]):
                m = smp["replica"] == rep
                edges = np.concatenate([smp["start_s"][m], smp["end_s"][m]])
                steps = np.concatenate([np.ones(m.sum()), -np.ones(m.sum())])
                order = np.lexsort((steps, edges))           # ends before starts at a tie
                assert np.cumsum(steps[order]).max() <= slots


def test_work_is_conserved_across_placements():
    """Colocated, disaggregated and a split layout (reference apart) on the same GPUs train on
    the same tokens and, with no fixed costs, spend the same GPU-seconds after generation."""
    costs = {k: PhaseCost(c.gpu_s_per_token) for k, c in COSTS.items()}
    wl = _workload()
    eng = _engine(5e-4, 16)
    split = RLSystem(pools={"gen": 2, "train": 1, "ref": 1, "cpu": 1},
                     placement={"rollout": "gen", "actor": "train", "ref": "ref",
                                "reward": "cpu"}, engine=eng, costs=costs)
    runs = [simulate(RLSystem.colocated(4, engine=eng, costs=costs), wl, 5),
            simulate(RLSystem.disaggregated(2, 2, engine=eng, costs=costs), wl, 5),
            simulate(split, wl, 5)]
    for r in runs[1:]:
        assert r.generated_tokens == runs[0].generated_tokens
        assert r.train_gpu_s == pytest.approx(runs[0].train_gpu_s, rel=1e-12)
    assert runs[0].generated_tokens == wl.response_lengths(5 * 8).sum()


def test_adding_rollout_gpus_never_slows_generation():
    """Doubling the replicas gives each a subset of its parent's groups: the batch never ends
    later; checked for random batches and engines from 1 to 8 replicas."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        lengths = rng.integers(1, 3000, size=(16, 4))
        eng = _engine(float(rng.choice([0.0, 5e-4, 2e-3])), int(rng.choice([2, 8, 64])))
        ends = []
        for gpus in (1, 2, 4, 8):
            system = RLSystem.disaggregated(gpus, 1, engine=eng, costs=COSTS)
            ends.append(generate_batch(system, lengths, 0, 0.0)[1].max())
        assert all(b <= a * (1 + 1e-12) for a, b in zip(ends, ends[1:])), ends


def test_timeline_intervals_are_well_formed():
    """Bars start before they end and never overlap on a lane (one phase at a time per pool)."""
    wl = _workload()
    system = RLSystem.colocated(4, engine=_engine(5e-4), costs=COSTS, weight_sync_s=1.0,
                                switch_s=0.5)
    r = simulate(system, wl, 4)
    by_lane = {}
    for iv in r.intervals:
        assert iv.start_s <= iv.end_s
        by_lane.setdefault(iv.lane, []).append((iv.start_s, iv.end_s))
    for lane, spans in by_lane.items():
        spans.sort()
        assert all(b0 <= a1 + 1e-9 for (_, b0), (a1, _) in zip(spans, spans[1:])), lane
    assert any(iv.phase == "switch" for iv in r.intervals)
