"""The simulator's parts against hand-computed values, its checks, its link to the cost models
and the published direction it reproduces (issue 6; book Chapters 10 and 11)."""
import math

import numpy as np
import pytest

from rlmperf_lite.cost import decode_step_bytes, estimate_rl_step
from rlmperf_lite.sim import (Engine, PhaseCost, RLSystem, Workload, admission_cap, simulate)
from rlmperf_lite.sim.from_cost import engine_from_cost, system_from_cost
from rlmperf_lite.sim.replica import Replica
from rlmperf_lite.sim.reproduce import (VERL_STALENESS_ABLATION,
                                        reproduce_verl_staleness_ablation)

COSTS = {"actor_update": PhaseCost(1e-3, 1.0)}


def test_replica_token_clock_by_hand():
    """Two sequences of 10 and 30 tokens, iteration 1 + n/2 s: both run at 2 s/token until
    the first ends at 20 s, the second then needs 20 more tokens at 1.5 s: ends at 50 s."""
    eng = Engine(decode_base_s=1.0, decode_per_seq_s=0.5, slots=4)
    start, end = Replica(eng).run_alone([0, 1], [10, 30])
    assert start == {0: 0.0, 1: 0.0}
    assert end == pytest.approx({0: 20.0, 1: 50.0})
    # one slot: first come, first served, each alone at 1.5 s per token
    start, end = Replica(Engine(1.0, 0.5, slots=1)).run_alone([0, 1], [10, 30])
    assert start[1] == pytest.approx(15.0) and end[1] == pytest.approx(60.0)


def test_engine_iteration_is_the_roofline_of_a_decode_step():
    eng = Engine(decode_base_s=2.0, decode_per_seq_s=0.1, decode_compute_per_seq_s=0.5)
    assert eng.iteration_s(1) == pytest.approx(2.1)       # memory-bound
    assert eng.iteration_s(10) == pytest.approx(5.0)      # compute-bound: 10 x 0.5 > 2 + 1


def test_workload_stream_is_a_prefix_and_cut_at_the_budget():
    """The first groups do not depend on how many are drawn (common random numbers), lengths
    lie in [1, max], and the uncut mean is the configured one."""
    wl = Workload(prompts=4, group_size=8, mean_response_len=1000, max_response_len=10**6,
                  length_sigma=0.5, seed=3)
    assert np.array_equal(wl.response_lengths(5), wl.response_lengths(50)[:5])
    big = wl.response_lengths(20000)
    assert big.mean() == pytest.approx(1000, rel=0.01)
    cut = Workload(mean_response_len=2000, max_response_len=4000, length_sigma=1.5)
    lengths = cut.response_lengths(1000)
    assert lengths.min() >= 1 and lengths.max() == 4000
    assert np.all(Workload(dist="fixed").response_lengths(3) == 2048)


def test_admission_cap_is_verls_rollout_count():
    """verl docs/advance/fully_async.md: between syncs the rollouter makes at most
    (1 + staleness_threshold) x the samples of one sync; caps are cumulative over versions."""
    B = 512
    assert admission_cap(0, 0.0, B) == B
    assert admission_cap(0, 0.1, B) == math.floor(1.1 * B)
    assert admission_cap(3, 0.5, B) - admission_cap(2, 0.5, B) == B
    assert admission_cap(0, 1.0, B) == 2 * B        # one-step-off: a batch ahead


@pytest.mark.parametrize("args, match", [
    ((-5, 1.0, 8), "version must be an int >= -2, got -5"),      # gave -24 groups
    ((0, float("nan"), 8), "staleness must be a finite number in \\[0, 1000\\], got nan"),
    ((0, -0.5, 8), "staleness must be a finite number"),
    ((0, 0.0, 0), "prompts must be an int >= 1, got 0"),
    ((1.5, 0.0, 8), "version must be an int"),
    ((2**60, 0.0, 8), "version must be an int <= 2\\*\\*52"),
])
def test_admission_cap_refuses_bad_input_by_name(args, match):
    """A NaN staleness gave "cannot convert float NaN to integer"; a version below -(1 + s)
    a negative count of groups. Versions down to -(1 + s) are the look-back of chain_window."""
    with pytest.raises(ValueError, match=match):
        admission_cap(*args)
    assert admission_cap(-2, 1.0, 8) == 0 and admission_cap(-1, 0.5, 8) == 4


def test_one_step_off_trains_on_samples_one_version_old():
    """Staleness 1 with batch-ordered consumption: after the first step, each batch was
    generated while the previous one trained, so most samples are exactly one version old and
    none is older."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    eng = Engine(decode_base_s=0.01, slots=64)
    r = simulate(RLSystem.disaggregated(2, 2, engine=eng, costs=COSTS, mode="async",
                                        staleness=1, consume="batch"), wl, 8)
    counts = r.staleness_counts()
    assert set(counts) == {0, 1} and counts[1] > counts[0]
    assert np.all(r.samples["consumed_step"] - r.samples["version_start"] <= 1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(pools={}), "RLSystem.pools"),
    (dict(pools={"a": 0}), r"RLSystem.pools\['a'\]"),
    (dict(placement={"rollout": "a"}), "role 'actor'"),
    (dict(placement={"rollout": "a", "actor": "b"}), r"placement\['actor'\] = 'b'"),
    (dict(mode="later"), "RLSystem.mode"),
    (dict(staleness=-1), "RLSystem.staleness"),
    (dict(minibatches=0), "RLSystem.minibatches"),
    (dict(mode="async"), "pool of its own"),
    (dict(costs={"update": PhaseCost(1.0)}), "RLSystem.costs key"),
    (dict(engine=Engine(1.0, tp=8)), "fewer than one rollout replica"),
    (dict(consume="oldest"), "RLSystem.consume"),
])
def test_bad_systems_raise_naming_the_field(kwargs, match):
    base = dict(pools={"a": 4}, placement={"rollout": "a", "actor": "a"},
                engine=Engine(1.0), costs=COSTS)
    with pytest.raises(ValueError, match=match):
        RLSystem(**{**base, **kwargs})


def test_bad_inputs_raise_naming_the_argument():
    system = RLSystem.colocated(4, engine=Engine(1.0), costs=COSTS)
    with pytest.raises(ValueError, match="steps"):
        simulate(system, Workload(), 0)
    with pytest.raises(ValueError, match="workload"):
        simulate(system, {"prompts": 8}, 2)
    with pytest.raises(ValueError, match="Workload.mean_response_len"):
        Workload(mean_response_len=10**5, max_response_len=100)
    with pytest.raises(ValueError, match="Engine.slots"):
        Engine(1.0, slots=0)
    with pytest.raises(ValueError, match="minibatches = 3 must divide"):
        simulate(RLSystem.disaggregated(2, 2, engine=Engine(1.0), costs=COSTS, mode="async",
                                        minibatches=3), Workload(prompts=8), 2)
    with pytest.raises(ValueError, match="rollout_gpus"):
        system_from_cost("qwen2.5-7b", "h100-sxm", Workload(), placement="disaggregated",
                         gpus=8, rollout_gpus=8)


def test_system_from_cost_follows_the_cost_models():
    """The engine's weight-read time is decode_step_bytes at batch 0 context over the
    bandwidth; a phase's GPU-seconds per token times the step's tokens over the GPUs gives back
    estimate_rl_step's time for that phase."""
    wl = Workload(prompts=16, group_size=8, prompt_len=256, mean_response_len=1024)
    eng = engine_from_cost("qwen2.5-7b", "h100-sxm", wl, 8, decode_efficiency=0.5)
    from rlmperf_lite.cost import hardware_preset, model_preset
    hw, m = hardware_preset("h100-sxm"), model_preset("qwen2.5-7b")
    batch = min(eng.slots, math.ceil(wl.samples_per_step / (8 // eng.tp)))
    assert eng.decode_base_s == pytest.approx(
        decode_step_bytes(m, batch, 0) / (hw.hbm_bandwidth_bytes_per_s * eng.tp * 0.5))
    system = system_from_cost("qwen2.5-7b", "h100-sxm", wl, gpus=8, train_efficiency=0.4)
    est = estimate_rl_step("grpo", actor="qwen2.5-7b", hardware="h100-sxm", prompts=16,
                           group_size=8, prompt_len=256, response_len=1024, gpus=8,
                           train_efficiency=0.4)
    tokens = wl.samples_per_step * (256 + 1024)
    assert system.costs["actor_update"].time_s(tokens, 8) == pytest.approx(
        est.phase("actor_update").time_s)
    assert set(system.costs) == {"old_logp", "actor_update"}


def test_verl_staleness_ablation_shape():
    """verl docs/advance/fully_async.md, 128-card stale ablation: step time falls from
    staleness 0 to 0.1 to 0.3, then flattens (0.3 and 0.5 within a few percent), and every
    async run beats the colocated baseline — the published shape, from the stated inputs."""
    rows = {r["staleness"]: r["simulated_step_s"] for r in reproduce_verl_staleness_ablation()}
    published = VERL_STALENESS_ABLATION["step_s"]
    assert rows[0.0] > rows[0.1] * 1.15 and published[0.0] > published[0.1] * 1.15
    assert rows[0.1] > rows[0.3] * 1.1 and published[0.1] > published[0.3] * 1.1
    assert abs(rows[0.5] - rows[0.3]) < 0.05 * rows[0.0]
    assert abs(published[0.5] - published[0.3]) < 0.05 * published[0.0]
    assert rows[None] > rows[0.0]
    assert VERL_STALENESS_ABLATION["colocated_sync_step_s"] > published[0.0]


def test_overlapping_the_reward_never_delays_the_step():
    """Scoring groups while generation runs leaves the log-prob passes starting at the end of
    generation and only the updates waiting for the scores, so with the reward model on its own
    pool the overlapped step is never slower (PPO, critic and reward model apart)."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    for gpus, rollout in ((32, 16), (32, 24), (16, 8)):
        times = [simulate(system_from_cost("qwen2.5-7b", "h100-sxm", wl, placement="hybrid",
                                           gpus=gpus, rollout_gpus=rollout, algo="ppo",
                                           reward_model="qwen2.5-7b", overlap_reward=o),
                          wl, 4).step_time_s for o in (False, True)]
        assert times[1] <= times[0] * (1 + 1e-12), (gpus, rollout, times)


def test_hybrid_placement_puts_critic_and_reward_apart():
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    s = system_from_cost("qwen2.5-7b", "h100-sxm", wl, placement="hybrid", gpus=32,
                         rollout_gpus=24, algo="ppo")
    assert s.pools == {"actor": 24, "critic": 8, "cpu": 1}
    assert s.placement["critic"] == "critic" and s.placement["rollout"] == "actor"
    with pytest.raises(ValueError, match="hybrid placement"):
        system_from_cost("qwen2.5-7b", "h100-sxm", wl, placement="hybrid", gpus=32,
                         rollout_gpus=24, algo="grpo")


def test_training_states_must_fit_the_training_pool():
    """Qwen2.5-72B's 16 bytes per parameter on 4 training GPUs is ~290 GB each: refused, naming
    the fix; on 32 training GPUs it fits."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    with pytest.raises(ValueError, match="give training more GPUs"):
        system_from_cost("qwen2.5-72b", "h100-sxm", wl, placement="disaggregated", gpus=12,
                         rollout_gpus=8)
    system_from_cost("qwen2.5-72b", "h100-sxm", wl, placement="disaggregated", gpus=40,
                     rollout_gpus=8)


def test_steady_state_window_skips_the_engines_head_start():
    """The steady state is the second half of the run, or later when the head start
    (ceil(staleness) + 1 steps) is longer; never the whole run."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    eng = Engine(decode_base_s=0.01, slots=64)
    for s, steps, warm in ((0.5, 12, 6), (4, 8, 5), (9, 8, 7)):
        r = simulate(RLSystem.disaggregated(2, 2, engine=eng, costs=COSTS, mode="async",
                                            staleness=s), wl, steps)
        assert r.warmup_steps == warm
        assert r.step_time_s == pytest.approx(r.step_times_s[warm:].mean())


def test_async_results_keep_the_samples_the_engine_ran_ahead_on():
    """An engine two versions ahead has started samples no update has used when the run ends:
    they count in its utilisation (consumed_step -1, cut at the run's end if still running)
    but not in the tokens trained on or the staleness."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    r = simulate(RLSystem.disaggregated(2, 2, engine=Engine(0.01, slots=64), costs=COSTS,
                                        mode="async", staleness=2), wl, 6)
    ahead = ~r.trained
    assert ahead.sum() > 0 and np.all(r.samples["consumed_step"][ahead] == -1)
    assert np.all(r.samples["end_s"] <= r.step_end_s[-1])
    assert r.staleness.size == r.trained.sum() == 6 * wl.samples_per_step
    assert r.tokens_per_step == pytest.approx(
        (wl.prompt_len + r.samples["response_len"][r.trained]).sum() / 6)


def test_a_measured_weight_sync_replaces_the_cost_model():
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    modelled = system_from_cost("qwen2.5-7b", "h100-sxm", wl, gpus=8)
    measured = system_from_cost("qwen2.5-7b", "h100-sxm", wl, gpus=8, weight_sync_s=10.0)
    assert measured.weight_sync_s == 10.0 != modelled.weight_sync_s


def test_a_weight_sync_waits_for_both_pools():
    """Reward scoring queued on the training pool during generation finishes before the sync
    starts: no bar of the training pool overlaps a sync, and its shares add up to 1 without
    clamping (a reviewer's case: reward model on the trainer, overlapped, with switches)."""
    wl = Workload(prompts=8, group_size=4, prompt_len=64, mean_response_len=300,
                  max_response_len=2000, length_sigma=1.2, seed=1)
    system = RLSystem(pools={"rollout": 2, "train": 2},
                      placement={"rollout": "rollout", "actor": "train", "ref": "train",
                                 "reward": "train"},
                      engine=Engine(decode_base_s=0.01, decode_per_seq_s=5e-4, slots=8),
                      costs={"old_logp": PhaseCost(2e-4, .5), "ref_logp": PhaseCost(2e-4, .5),
                             "actor_update": PhaseCost(6e-4, 1.), "reward": PhaseCost(1e-4)},
                      mode="async", staleness=2, overlap_reward=True, switch_s=0.7,
                      weight_sync_s=2.0)
    r = simulate(system, wl, 8)
    for iv in r.intervals:
        if iv.pool == "train":
            assert all(iv.end_s <= a + 1e-9 or iv.start_s >= b - 1e-9 for a, b in r.sync_windows)
    shares = r.utilisation()["train"]
    assert shares["compute"] + shares["sync"] + shares["switch"] <= 1 + 1e-9


def test_slot_occupancy_leaves_out_paused_time():
    """Sequences paused by a sync hold their slot but do no work: occupancy stays <= 1 even
    with 2 slots and long syncs."""
    wl = Workload(prompts=8, group_size=4, mean_response_len=300, max_response_len=2000)
    for sync_s in (2.0, 20.0):
        r = simulate(RLSystem.disaggregated(2, 2, engine=Engine(0.01, slots=2), costs=COSTS,
                                            mode="async", staleness=1, weight_sync_s=sync_s),
                     wl, 6)
        assert r.rollout_pauses and 0 < r.slot_occupancy() <= 1 + 1e-12


def test_runs_too_large_to_simulate_are_refused():
    system = RLSystem.colocated(4, engine=Engine(1.0), costs=COSTS)
    with pytest.raises(ValueError, match="Workload.prompts x group_size"):
        Workload(prompts=10**9)
    with pytest.raises(ValueError, match="samples to simulate"):
        simulate(system, Workload(prompts=1000), 10**5)
    with pytest.raises(ValueError, match="RLSystem.staleness"):
        RLSystem.disaggregated(2, 2, engine=Engine(1.0), costs=COSTS, mode="async",
                               staleness=1e9)


def test_hybrid_checks_the_critics_pool_too():
    """PPO of a 72B model split 60 + 4: the critic's states (16 bytes per parameter over 4 GPUs,
    ~290 GB each) do not fit, whatever the actor's pool."""
    with pytest.raises(ValueError, match="4 GPUs of the critic pool"):
        system_from_cost("qwen2.5-72b", "h100-sxm", Workload(prompts=32), placement="hybrid",
                         algo="ppo", gpus=64, rollout_gpus=60)


@pytest.mark.parametrize("kwargs, match", [
    (dict(decode_efficiency=0), "decode_efficiency"), (dict(train_efficiency=5), "train_eff"),
    (dict(hardware=None), "hardware must be"), (dict(workload=None), "workload must be"),
])
def test_system_from_cost_names_a_bad_argument(kwargs, match):
    args = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=Workload(), gpus=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        system_from_cost(args.pop("actor"), args.pop("hardware"), args.pop("workload"), **args)
    assert system_from_cost("qwen2.5-7b", "h100-sxm", Workload(), placement="disaggregated",
                            gpus=8, rollout_gpus=np.int64(4)).pools["rollout"] == 4


def test_generation_span_is_first_start_to_last_end_of_a_steps_samples():
    """Fixed-length responses on a unit engine with a slot per sequence: the synchronous step's
    generation takes exactly its length in iterations, and a step with no samples is refused."""
    wl = Workload(prompts=4, group_size=2, prompt_len=1, mean_response_len=6,
                  max_response_len=6, dist="fixed")
    system = RLSystem.colocated(1, engine=Engine(decode_base_s=1.0, slots=64),
                                costs={"actor_update": PhaseCost(0.0, fixed_s=2.0)})
    r = simulate(system, wl, 3)
    for step in range(3):
        assert r.generation_span_s(step) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="step=3: no sample"):
        r.generation_span_s(3)
