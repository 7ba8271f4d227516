"""Work and depth in seconds of a simulated RL system by layout (rlmperf_lite.sim.workdepth):
closed forms on hand-sized systems, the simulator's steady step between the bounds on the
systems of Chapters 10 and 11, and the limits the module's docstring states."""
import dataclasses

import pytest

from rlmperf_lite.cost import PhaseWorkDepth
from rlmperf_lite.sim import Engine, PhaseCost, RLSystem, Workload, simulate
from rlmperf_lite.sim.sizing import generation_bounds
from rlmperf_lite.sim.workdepth import (PoolPhaseWorkDepth, VersionWorkDepth, layout_workdepth,
                                        system_workdepth)
from rlmperf_lite.workdepth import per_version_depth

# Chapter 10's step (section 10.5): GRPO of Qwen2.5-7B on 32 H100s
WL = Workload(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
              max_response_len=8192, length_sigma=1.0, seed=0)
STEP = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=WL, gpus=32, kl_coef=0.001)

# a hand-sized system: 16 responses of 100 tokens after 10-token prompts
HAND_WL = Workload(prompts=4, group_size=4, prompt_len=10, mean_response_len=100,
                   max_response_len=100, dist="fixed")
HAND_COSTS = {"actor_update": PhaseCost(1e-4)}


def _hand(slots=8, split=None):
    eng = Engine(decode_base_s=0.01, decode_per_seq_s=0.001, slots=slots)
    if split is None:
        return RLSystem.colocated(4, engine=eng, costs=HAND_COSTS, weight_sync_s=0.5)
    return RLSystem.disaggregated(*split, engine=eng, costs=HAND_COSTS, weight_sync_s=0.5)


def _phase(wd, name):
    return next(p for p in wd.phases if p.name == name)


def test_colocated_closed_form_and_the_simulated_step():
    # 4 replicas of one group: b = 4, iteration 0.01 + 4 x 0.001 = 0.014 s, 0.0035 s a token
    wd = system_workdepth(_hand(), HAND_WL, "qwen2.5-7b", steps=4)
    gen, upd, sync = (_phase(wd, n) for n in ("generation", "actor_update", "weight_sync"))
    assert wd.batch_per_replica == 4
    assert gen.work_gpu_s == pytest.approx(16 * 100 * 0.0035)           # 5.6 GPU-s
    assert gen.depth_s == pytest.approx(100 * 0.011)                    # alone: 1.1 s
    assert upd.work_gpu_s == pytest.approx(16 * 110 * 1e-4) and upd.depth_s == pytest.approx(
        110 * 1e-4)
    assert (sync.work_gpu_s, sync.depth_s) == (0.0, 0.5)
    # lower 1.4 + 0.044 + 0.5, upper 2.5 + 0.055 + 0.5; the balanced step is its work
    assert wd.lower_s == pytest.approx(1.944) and wd.upper_s == pytest.approx(3.055)
    assert wd.simulate().step_time_s == pytest.approx(wd.lower_s)
    # colocated, the pool is the system: the bounds are PhaseWorkDepth's
    for p in wd.phases:
        plain = PhaseWorkDepth(p.name, p.work_flops, p.work_gpu_s, p.depth_s, p.processors)
        assert p.pool_gpus == p.processors == 4 and p.brent_upper_s == plain.brent_upper_s


def test_fewer_slots_charge_decode_at_a_smaller_batch():
    # 2 slots: b = 2, 0.012 / 2 = 0.006 s a token; two rounds of 100 iterations = W / p
    wd = system_workdepth(_hand(slots=2), HAND_WL, "qwen2.5-7b", steps=4)
    gen = wd.generation
    assert wd.batch_per_replica == 2 and gen.work_gpu_s == pytest.approx(9.6)
    assert wd.simulate().step_time_s == pytest.approx(2.4 + 0.044 + 0.5)


def test_disaggregated_closed_form_p_counts_both_pools():
    # 2 replicas of 2 groups: b = 8, 0.018 / 8 s a token; W / p over 4 GPUs, upper over 2
    wd = system_workdepth(_hand(split=(2, 2)), HAND_WL, "qwen2.5-7b", steps=4)
    gen, upd = wd.generation, _phase(wd, "actor_update")
    assert gen.work_gpu_s == pytest.approx(1600 * 0.00225) and gen.processors == 4
    assert gen.work_per_processor_s == pytest.approx(0.9) and gen.pool_gpus == 2
    assert gen.brent_lower_s == pytest.approx(1.1) and gen.brent_upper_s == pytest.approx(2.9)
    assert upd.brent_lower_s == pytest.approx(0.044) and upd.brent_upper_s == pytest.approx(0.099)
    t = wd.simulate().step_time_s
    assert t == pytest.approx(1.8 + 0.088 + 0.5)
    assert wd.lower_s == pytest.approx(1.644) and wd.upper_s == pytest.approx(3.499)


def test_generation_agrees_with_sizing_generation_bounds():
    # sizing.generation_bounds (book Chapter 13) is W / p_gen and D of the same batches
    wl = dataclasses.replace(WL, dist="fixed")
    wd = layout_workdepth(**dict(STEP, workload=wl), placement="disaggregated", rollout_gpus=8)
    work_s, depth_s = generation_bounds(wd.system, wl)
    g = wd.generation
    assert g.work_gpu_s / g.pool_gpus == pytest.approx(work_s, rel=1e-12)
    assert g.depth_s == pytest.approx(depth_s, rel=1e-12)


def test_chapter10_units_are_the_seconds_of_a_unit_engine():
    # section 10.6 counts one operation per token per sequence: with iterations of 1 s, D in
    # seconds is max R = 8,192 and W x b / tp is sum R in sequence-tokens
    wd = layout_workdepth(**STEP, placement="colocated")
    unit = dataclasses.replace(wd.system, engine=Engine(decode_base_s=1.0, slots=256))
    u = system_workdepth(unit, WL, "qwen2.5-7b").generation
    lengths = WL.response_lengths(8 * 32).reshape(8, -1)[4:]               # the steady window
    assert u.depth_s == lengths.max(axis=1).mean() == 8192
    assert u.work_gpu_s * 16 == pytest.approx(lengths.sum(axis=1).mean())    # b = 16, tp = 1


def test_chapter10_every_split_and_colocation_are_bracketed():
    wds = [layout_workdepth(**STEP, placement="colocated")] + [
        layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=rg)
        for rg in range(2, 32, 4)]
    for wd in wds:
        t = wd.simulate().step_time_s
        assert wd.brackets(t), (wd.system.name, wd.lower_s, t, wd.upper_s)
        if wd.system.placement["rollout"] != "all":
            # Brent's W / p + D over all 32 GPUs is too short: a pool cannot take the other's
            # tasks (every split of section 10.5's sweep)
            assert sum(p.work_per_processor_s + p.depth_s for p in wd.phases) < t
    colo, split8 = wds[0], layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=8)
    # decode's weight reads are shared by 64 sequences on 8 replicas, by 16 on 32
    e = colo.system.engine
    ratio = (e.iteration_s(16) / 16) / (e.iteration_s(64) / 64)
    assert colo.generation.work_gpu_s / split8.generation.work_gpu_s == pytest.approx(ratio)
    assert colo.lower_s == pytest.approx(split8.lower_s, rel=1e-3)       # D-bound, both


@pytest.mark.parametrize("rollout_gpus, bounds", [(16, (0, 1, 2, 4, 8)), (24, (1, 8))])
def test_chapter11_staleness_sweep_is_bracketed(rollout_gpus, bounds):
    # section 11.3's sweep: partial rollout, streaming, 16 versions
    for k in bounds:
        wd = layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=rollout_gpus,
                              staleness=k, steps=16)
        (v,) = wd.phases
        assert isinstance(v, VersionWorkDepth) and v.processors == 32
        t = wd.simulate().step_time_s
        assert wd.brackets(t), (rollout_gpus, k, wd.lower_s, t, wd.upper_s)
        assert v.depth_s == pytest.approx(per_version_depth(
            wd.generation.depth_s, sum(p.depth_s for p in layout_workdepth(
                **STEP, placement="disaggregated", rollout_gpus=rollout_gpus,
                steps=16).phases[1:]), k))
        if k == 8:       # the flat end: the trainer's work per version, within 2%
            assert v.train_floor_s == pytest.approx(t, rel=0.02)


def test_chapter11_schedules_of_section_11_1_are_bracketed():
    kw = dict(STEP, placement="disaggregated", rollout_gpus=16)
    modes = {"one-step-off": dict(staleness=1, consume="batch", partial_rollout=False),
             "bounded": dict(staleness=2), "fully async": dict(staleness=2, minibatches=4)}
    for name, m in modes.items():
        wd = layout_workdepth(**kw, **m)
        assert wd.brackets(wd.simulate().step_time_s), name
    drained = layout_workdepth(**kw, **modes["one-step-off"]).phases[0]
    assert drained.drained and drained.brent_upper_s == drained.gen_upper_s + \
        drained.train_upper_s


def test_per_version_depth_is_the_simulated_version_on_its_assumptions():
    # Lab 11 section 6: fixed lengths, 1-s iterations, unlimited slots, batch consumption
    for d_gen, d_train in ((10, 3), (4, 10)):
        wl = Workload(prompts=4, group_size=2, prompt_len=1, mean_response_len=d_gen,
                      max_response_len=d_gen, dist="fixed")
        for k in range(4):
            system = RLSystem.disaggregated(
                1, 1, engine=Engine(decode_base_s=1.0, slots=1024), mode="async",
                staleness=k, consume="batch",
                costs={"actor_update": PhaseCost(0.0, fixed_s=d_train)})
            wd = system_workdepth(system, wl, "qwen2.5-7b", steps=122)
            e = simulate(system, wl, 122).step_end_s
            assert wd.lower_s == per_version_depth(d_gen, d_train, k)
            assert (e[-1] - e[-61]) / 60 == pytest.approx(wd.lower_s, abs=1e-9)
            assert wd.upper_s >= wd.lower_s


def test_streaming_consumption_can_pass_the_straggler_over():
    # Lab 11 section 5's drain system, partial rollout, bound 1: trained in batch order the
    # version is bracketed; streaming, it beats D_k (a long group is passed over)
    costs = {"old_logp": PhaseCost(2e-4, 0.5), "ref_logp": PhaseCost(2e-4, 0.5),
             "actor_update": PhaseCost(6e-4, 1.0)}
    wl = Workload(prompts=8, group_size=4, prompt_len=64, mean_response_len=300,
                  max_response_len=2000, length_sigma=1.2, seed=0)
    t = {}
    for consume in ("batch", "ready"):
        system = RLSystem.disaggregated(2, 2, engine=Engine(decode_base_s=0.01, slots=8),
                                        costs=costs, mode="async", staleness=1,
                                        consume=consume)
        wd = system_workdepth(system, wl, "qwen2.5-7b", steps=40)
        t[consume] = (wd, wd.simulate().step_time_s)
    assert t["batch"][0].brackets(t["batch"][1])
    wd, ready_s = t["ready"]
    assert ready_s < wd.lower_s == wd.phases[0].depth_s < 1.01 * ready_s


def test_bad_layouts_are_refused_by_name():
    colo = layout_workdepth(**STEP, placement="colocated").system
    for change, match in ((dict(switch_s=1.0), "switch_s"), (dict(fuse_logps=True), "fuse_logps")):
        with pytest.raises(ValueError, match=match):
            system_workdepth(dataclasses.replace(colo, **change), WL, "qwen2.5-7b")
    with pytest.raises(ValueError, match="off the actor's pool"):
        layout_workdepth(**dict(STEP, kl_coef=0.0), placement="hybrid", rollout_gpus=24,
                         algo="ppo", reward_model="qwen2.5-7b")
    with pytest.raises(ValueError, match="staleness"):
        layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=16, staleness=0.5)
    with pytest.raises(ValueError, match="minibatches"):
        layout_workdepth(**STEP, placement="disaggregated", rollout_gpus=16, staleness=1,
                         minibatches=5)
    with pytest.raises(ValueError, match="system must be an RLSystem"):
        system_workdepth("colocated", WL, "qwen2.5-7b")
    with pytest.raises(ValueError, match="pool_gpus"):
        PoolPhaseWorkDepth("x", 0.0, 1.0, 1.0, 4, pool_gpus=8)
