"""Measure against predict (rlmperf_lite.distributed.predict) and its views (views/ray_views,
ray_calculators).

Most tests need no Ray: a hand-made RayRunResult (a synchronous run whose phases take fixed
times, laid out one after the other with gaps between them) checks that the costs, compute
shares and errors are read off the timeline exactly, and the reference costs check the
simulated layouts against the work-depth formula of book section 11.5. One test runs a
synchronous run on a local Ray (2 CPUs), started for this module.
"""
import dataclasses
import html

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rlmperf_lite.distributed import RayRunResult, init_ray, shutdown_ray, train_ray  # noqa: E402
from rlmperf_lite.distributed import (REFERENCE_COSTS, RunComparison,  # noqa: E402
                                              ToyCosts, compare_run, controller_workdepth,
                                              measured_compute, measured_costs, mode_config,
                                              predict_run, toy_system)
from rlmperf_lite.rl import AsyncGRPOConfig, GRPOConfig, train_grpo  # noqa: E402
from rlmperf_lite.sim import Interval, simulate  # noqa: E402
from rlmperf_lite.tasks import AdditionTask  # noqa: E402
from rlmperf_lite.book.ray_calculators import (STEP_TIME, THROUGHPUT, ray_grid,  # noqa: E402
                                               ray_grid_chart, ray_widget)
from rlmperf_lite.book.ray_views import (error_rows, error_table_html,  # noqa: E402
                                         measured_rows, measured_vs_predicted_chart)

CONFIG = GRPOConfig(steps=4, num_prompts=8, group_size=4, lr_warmup_steps=1, kl_coef=0.01)
MS = 1e-3
# one synchronous step of the hand-made run: (lane, pool, phase, seconds), in order, 1 ms apart
STEP = [("rollout/r0", "rollout", "weight_sync", 1 * MS), ("rollout/r0", "rollout", "generate",
                                                           2 * MS),
        ("ref_reward/r0", "ref_reward", "ref_logp", 3 * MS),
        ("ref_reward/r0", "ref_reward", "reward", 0.2 * MS),
        ("controller", "controller", "advantages", 0.1 * MS),
        ("learner/r0", "learner", "actor_update", 5 * MS),
        ("learner/r0", "learner", "grad_allreduce", 0.5 * MS),
        ("learner/r0", "learner", "actor_update", 1 * MS)]
GAP_S, STEPS = 1 * MS, 4
PHASES_S = sum(s for *_, s in STEP)                 # 12.8 ms of phases per step
STEP_S = PHASES_S + GAP_S * len(STEP)               # 20.8 ms per step, gaps included


def fake_sync_run(width=4) -> RayRunResult:
    """A sync run of STEPS steps: each phase of STEP after a 1-ms gap, step after step."""
    timeline, t = [], 0.0
    for step in range(STEPS):
        for lane, pool, phase, s in STEP:
            t += GAP_S
            timeline.append(Interval(pool, lane, phase, t, t + s, step))
            t += s
    history = [{"step": s, "step_s": STEP_S, "response_width": width} for s in range(STEPS)]
    return RayRunResult(params={}, history=history, mode="sync", timeline=timeline)


def test_measured_costs_are_the_phases_summed_per_step():
    """The two actor_update bars of a step add up; R is the response width; B, G from the
    config, P from the task."""
    costs = measured_costs(fake_sync_run(), CONFIG)
    assert isinstance(costs, ToyCosts)
    assert (costs.num_prompts, costs.group_size, costs.response_len) == (8, 4, 4)
    assert costs.prompt_len == AdditionTask().prompt_len
    want = {"weight_sync": 1, "generate": 2, "ref_logp": 3, "reward": 0.2, "advantages": 0.1,
            "actor_update": 6, "grad_allreduce": 0.5}
    assert costs.phase_s.keys() == want.keys()
    for phase, ms in want.items():
        assert costs.phase_s[phase] == pytest.approx(ms * MS, rel=1e-9), phase
    assert costs.sim_phase_s["reward"] == pytest.approx(0.3 * MS)      # + advantages
    assert costs.sim_phase_s["actor_update"] == pytest.approx(6.5 * MS)  # + grad exchange
    assert costs.generate_s_per_token == pytest.approx(2 * MS / (8 * 4 * 4))


def test_the_runs_own_config_is_the_default_and_a_different_one_is_refused():
    """A result that carries its config needs none; one that differs from it is refused, and a
    result without one needs it."""
    run = fake_sync_run()
    with pytest.raises(ValueError, match="config must be given"):
        measured_costs(run)
    run.config = mode_config(CONFIG, "sync")
    assert measured_costs(run) == measured_costs(run, CONFIG)
    with pytest.raises(ValueError, match="config differs"):
        compare_run(run, dataclasses.replace(CONFIG, num_prompts=16))


def test_compare_run_on_a_known_timeline():
    """Synchronous: the predicted step is the chain of phases, 12.8 ms, against the measured
    20.8 ms; each pool's measured compute share is its phases over the step."""
    c = compare_run(fake_sync_run(), CONFIG)
    assert isinstance(c, RunComparison)
    assert (c.mode, c.staleness, c.num_rollout_workers, c.num_learners) == ("sync", 0, 1, 1)
    assert c.predicted_step_s == pytest.approx(PHASES_S, rel=1e-9)
    assert c.measured_step_s == pytest.approx(STEP_S, rel=1e-12)
    assert c.step_error == pytest.approx(PHASES_S / STEP_S - 1, rel=1e-9)
    assert c.unexplained_s == pytest.approx(GAP_S * len(STEP), rel=1e-9)
    measured = {p.pool: p.measured for p in c.pools}
    predicted = {p.pool: p.predicted for p in c.pools}
    assert measured["rollout"] == pytest.approx(2 / 20.8, rel=1e-9)       # sync bars excluded
    assert measured["ref_reward"] == pytest.approx(3.2 / 20.8, rel=1e-9)
    assert measured["learner"] == pytest.approx(6.5 / 20.8, rel=1e-9)
    assert predicted["learner"] == pytest.approx(6.5 / 12.8, rel=1e-9)
    rows = c.rows()
    assert [r["pool"] for r in rows] == ["rollout", "ref_reward", "learner"]
    assert all(r["step_error"] == c.step_error for r in rows)


def test_measured_compute_merges_a_lanes_bars_and_clips_to_the_window():
    run = fake_sync_run()
    lo, hi = 0.0, STEP_S                     # step 0 exactly
    shares = measured_compute(run, (lo, hi))
    assert set(shares) == {"rollout", "ref_reward", "learner"}         # no controller
    assert shares["learner"] == pytest.approx(6.5 / 20.8, rel=1e-9)
    half = measured_compute(run, (0.0, 4 * MS))     # rollout: sync 1-2 ms, generate 3-5 ms
    assert half["rollout"] == pytest.approx(1 / 4, rel=1e-9)


def test_reference_costs_one_device_colocated_step_is_the_sum_of_phases():
    """Colocated on one device and disaggregated synchronous: a step is every phase in turn
    (no proximal log-probs at staleness 0): 13.7 ms with the reference costs."""
    s = REFERENCE_COSTS.sim_phase_s
    chain = sum(v for p, v in s.items() if p != "old_logp")
    for mode in ("colocated", "sync"):
        assert predict_run(REFERENCE_COSTS, mode, 8).step_time_s == pytest.approx(chain,
                                                                                   rel=1e-9)
    assert chain == pytest.approx(13.7 * MS, rel=1e-12)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
@pytest.mark.parametrize("workers, learners", [(1, 1), (2, 1), (1, 2), (4, 2)])
def test_simulated_step_is_the_workdepth_per_version(k, workers, learners):
    """Book section 11.5: with generation k versions ahead the steady step is
    max(D_train, D / (k + 1)); the simulated layouts of the Ray modes agree exactly."""
    mode, kw = ("sync", {}) if k == 0 else ("async", {"staleness": k})
    wd = controller_workdepth(REFERENCE_COSTS, staleness=k, num_rollout_workers=workers,
                              num_learners=learners)
    got = predict_run(REFERENCE_COSTS, mode, 12, num_rollout_workers=workers,
                      num_learners=learners, **kw).step_time_s
    assert got == pytest.approx(wd.per_version_s, rel=1e-9)


def test_one_step_off_is_async_k1_and_work_depth_values():
    one = predict_run(REFERENCE_COSTS, "one_step_off", 12)
    k1 = predict_run(REFERENCE_COSTS, "async", 12, staleness=1)
    assert one.step_time_s == k1.step_time_s and one.system.staleness == 1
    wd = controller_workdepth(REFERENCE_COSTS, staleness=1)
    # W = 2 + 2 + 3 + 0.3 + 3 + 6.4 ms; D = 2 + 2 + max(3.3, 3) + 6.4 ms
    assert (wd.work_s, wd.depth_s, wd.train_depth_s) == pytest.approx(
        (16.7 * MS, 13.7 * MS, 11.7 * MS), rel=1e-12)
    assert controller_workdepth(REFERENCE_COSTS).work_s == pytest.approx(13.7 * MS, rel=1e-12)


def test_workdepth_of_a_pulled_sync_and_of_a_serial_controller():
    """With the reference costs (ms: sync 2, generate 2, ref 3, reward + advantages 0.3,
    proximal 3, update 6.4), one-step-off: the simulator's broadcast keeps the sync on the
    trainer's chain, 2 + max(3.3, 3) + 6.4 = 11.7; the toy's pull moves it to the generation's,
    9.7; a controller that waits for the scores before the proximal pass chains both branches,
    2 + 3.3 + 3 + 6.4 = 14.7, and its step is then one chain as long as the work."""
    broadcast = controller_workdepth(REFERENCE_COSTS, staleness=1)
    pull = controller_workdepth(REFERENCE_COSTS, staleness=1, sync="pull")
    serial = controller_workdepth(REFERENCE_COSTS, staleness=1, prox_beside_scoring=False)
    assert broadcast.per_version_s == pytest.approx(11.7 * MS)
    assert pull.per_version_s == pytest.approx(9.7 * MS)
    assert pull.depth_s == pytest.approx(broadcast.depth_s) and pull.work_s == broadcast.work_s
    assert serial.per_version_s == pytest.approx(14.7 * MS)
    assert serial.depth_s == pytest.approx(serial.work_s) == pytest.approx(16.7 * MS)
    sync0 = controller_workdepth(REFERENCE_COSTS, sync="pull")   # k = 0: one chain either way
    assert sync0.per_version_s == pytest.approx(13.7 * MS)
    with pytest.raises(ValueError, match="sync must be one of"):
        controller_workdepth(REFERENCE_COSTS, sync="nccl")
    with pytest.raises(ValueError, match="prox_beside_scoring"):
        controller_workdepth(REFERENCE_COSTS, prox_beside_scoring="yes")


def test_costs_without_proximal_logps_charge_the_reference_pass():
    costs = dataclasses.replace(REFERENCE_COSTS, phase_s={
        k: v for k, v in REFERENCE_COSTS.phase_s.items() if k != "old_logp"})
    system = toy_system(costs, "one_step_off")
    assert system.costs["old_logp"].gpu_s_per_token * costs.tokens == pytest.approx(
        costs.phase_s["ref_logp"], rel=1e-12)
    assert "old_logp" not in toy_system(costs, "sync").costs


def test_toy_system_layouts():
    col = toy_system(REFERENCE_COSTS, "colocated", num_rollout_workers=2, num_learners=2)
    assert col.pools == {"colocated": 2} and col.mode == "sync" and col.replicas == 2
    a = toy_system(REFERENCE_COSTS, "async", staleness=3, num_rollout_workers=2)
    assert a.pools == {"rollout": 2, "ref_reward": 1, "learner": 1}
    assert (a.mode, a.staleness, a.consume, a.partial_rollout) == ("async", 3, "batch", False)
    assert a.engine.slots == 4 * 4                      # B / W groups of G per worker
    assert toy_system(REFERENCE_COSTS, "sync", weight_sync_s=0.5).weight_sync_s == 0.5


@pytest.mark.parametrize("kwargs, name", [
    ({"mode": "ring"}, "mode"),
    ({"mode": "async"}, "staleness"),
    ({"mode": "sync", "staleness": 2}, "staleness"),
    ({"mode": "colocated", "num_rollout_workers": 2}, "num_rollout_workers"),
    ({"mode": "sync", "num_rollout_workers": 9}, "num_rollout_workers"),
    ({"mode": "sync", "num_learners": 0}, "num_learners"),
    ({"mode": "sync", "weight_sync_s": -1.0}, "weight_sync_s"),
])
def test_toy_system_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        toy_system(REFERENCE_COSTS, **kwargs)


@pytest.mark.parametrize("change, name", [
    ({"num_prompts": 0}, "num_prompts"),
    ({"phase_s": {"generate": 1.0}}, "actor_update"),
    ({"phase_s": {"generate": 1.0, "actor_update": 1.0, "decode": 1.0}}, "phase_s key"),
    ({"phase_s": {"generate": -1.0, "actor_update": 1.0}}, "generate"),
])
def test_toy_costs_validation(change, name):
    with pytest.raises(ValueError, match=name):
        dataclasses.replace(REFERENCE_COSTS, **change)


def test_mode_config():
    assert [mode_config(CONFIG, m).staleness for m in ("colocated", "sync", "one_step_off")] \
        == [0, 0, 1]
    assert mode_config(CONFIG, "async", staleness=3, steps=7).steps == 7
    keep = AsyncGRPOConfig(objective="behaviour", staleness=2)
    assert mode_config(keep, "async").staleness == 2
    assert mode_config(keep, "sync").objective == "behaviour"
    with pytest.raises(ValueError, match="staleness"):
        mode_config(CONFIG, "async")
    with pytest.raises(ValueError, match="staleness"):
        mode_config(CONFIG, "sync", staleness=1)
    with pytest.raises(ValueError, match="config"):
        mode_config("grpo", "sync")


def test_bad_results_are_refused():
    with pytest.raises(ValueError, match="result"):
        measured_costs(RayRunResult(params={}), CONFIG)
    with pytest.raises(ValueError, match="skip_steps"):
        measured_costs(fake_sync_run(), CONFIG, skip_steps=STEPS)


# ---- views -------------------------------------------------------------------------------------
def test_grid_equals_the_library_at_sample_points():
    rows = ray_grid()
    point = {(r["mode"], r["rollout_workers"], r["learners"], r["measure"]): r["value"]
             for r in rows}
    assert point[("sync", 2, 1, STEP_TIME)] == predict_run(
        REFERENCE_COSTS, "sync", 12, num_rollout_workers=2).step_time_s
    assert point[("async k=2", 4, 2, THROUGHPUT)] == predict_run(
        REFERENCE_COSTS, "async", 12, staleness=2, num_rollout_workers=4,
        num_learners=2).throughput_tokens_per_s_per_gpu
    assert point[("one_step_off", 1, 1, STEP_TIME)] == predict_run(
        REFERENCE_COSTS, "one_step_off", 12).step_time_s
    colocated = {(w, lr) for m, w, lr, _ in point if m == "colocated"}
    assert colocated == {(1, 1), (2, 2)}                               # W = L only
    assert len(rows) == 2 * (4 * 3 * 2 + 2)
    spec = ray_grid_chart(rows).to_dict()
    csv = "".join(spec["datasets"].values())                            # the embedded CSV
    assert f"1,1,{STEP_TIME},sync,{point[('sync', 1, 1, STEP_TIME)]:.4g}\n" in csv


def test_error_table_and_timeline_views_carry_the_comparison():
    run = fake_sync_run()
    c = compare_run(run, CONFIG)
    row = error_rows({"sync": c})[0]
    assert row["step_error"] == c.step_error and row["compute"]["learner"][0] == \
        c.pools[2].measured
    table = error_table_html({"sync": c})
    assert f"{c.measured_step_s * 1e3:.2f}" in table and f"{c.step_error:+.0%}" in table
    assert len(measured_rows(run, steps=2)) == len(STEP)
    spec = measured_vs_predicted_chart(run, c, steps=range(2, 4)).to_dict()
    assert len(spec["vconcat"]) == 2
    with pytest.raises(ValueError, match="steps"):
        measured_vs_predicted_chart(run, c, steps=9)
    with pytest.raises(ValueError, match="comparisons"):
        error_rows({})


def test_widget_shows_the_libraries_error_message():
    """The initial setting comes from the given runs (no Ray); bad inputs are refused before
    any actor starts, and shown as the ValueError's message."""
    run = fake_sync_run()
    w = ray_widget(CONFIG, base_params={}, runs={("sync", 0, STEPS, 1): run}, steps=STEPS)
    controls, message = w.children[0].children, w.children[1]
    assert "measured step" in message.value
    controls[2].value = 1                        # steps: compare_run needs one after the first
    assert "steps" in message.value and "firebrick" in message.value
    controls[2].value = STEPS
    controls[3].value = 0                                               # rollout workers
    # the message names the control the reader typed in, not the library's keyword
    assert "rollout W must be an int >= 1, got 0" in html.unescape(message.value)
    assert "firebrick" in message.value


# ---- one real run ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_local():
    info = init_ray()
    yield info
    shutdown_ray()


def test_a_real_sync_run_is_predicted_short_of_its_measurement(ray_local):
    """A 4-step sync run on Ray: the prediction is the chain of its measured phases, shorter
    than the measured step (Ray's scheduling and copies are not phases), and within 10x."""
    base = train_grpo(dataclasses.replace(CONFIG, steps=1)).base_params
    run = train_ray(CONFIG, mode="sync", base_params=base)
    c = compare_run(run, CONFIG)
    assert c.predicted_step_s == pytest.approx(controller_workdepth(c.costs).work_s, rel=1e-9)
    assert -0.9 < c.step_error < 0
    assert [p.pool for p in c.pools] == ["rollout", "ref_reward", "learner"]
    assert all(0 < p.measured < p.predicted <= 1 for p in c.pools)
    sim = simulate(toy_system(c.costs, "sync"), c.predicted.workload, len(run.history))
    assert np.array_equal(sim.step_end_s, c.predicted.step_end_s)
    assert isinstance(mode_config(CONFIG, "sync"), AsyncGRPOConfig)
