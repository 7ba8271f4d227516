"""The toy GRPO system on Ray (rlmperf_lite.distributed) against the in-process loops.

One local Ray (2 CPUs, 150 MiB object store) is started once for the module. Each run is 3 steps
of a small batch (B = 8 prompts x G = 4) from one shared warm-start model, so the actors' start
dominates; the numbers are compared with rlmperf_lite.rl.train_grpo / train_async_grpo, which are
the reference: with one rollout worker and one learner the Ray run must take the same steps bit
for bit (same prompt and sampling streams, same operations in the same order).
"""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rlmperf_lite.distributed import (Checkpoint, Controller, Learner, init_ray,  # noqa: E402
                                      load_checkpoint, phase_overlap_s, phase_times,
                                      save_checkpoint, shutdown_ray, to_intervals, train_ray)
from rlmperf_lite.distributed.runtime import check_address  # noqa: E402
from rlmperf_lite.nn import copy_params, generate  # noqa: E402
from rlmperf_lite.parallel import ProcessGroup  # noqa: E402
from rlmperf_lite.parallel import (FlatLayout, dp_grads, make_grpo_batch,  # noqa: E402
                                   reference_grpo_step)
from rlmperf_lite.rl import AsyncGRPOConfig, GRPOConfig, train_async_grpo, train_grpo  # noqa: E402
from rlmperf_lite.rl.common import blas_limits, lr_factor  # noqa: E402
from rlmperf_lite.rl.losses import loss_norms  # noqa: E402
from rlmperf_lite.rl.warmstart import warm_start  # noqa: E402
from rlmperf_lite.tasks import AdditionTask  # noqa: E402

# kl_coef > 0 so the reference worker's log-probs enter the loss
CONFIG = AsyncGRPOConfig(steps=3, num_prompts=8, group_size=4, lr_warmup_steps=1, kl_coef=0.01)
SYNC = GRPOConfig(**{f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(GRPOConfig)})
DISAGGREGATED = {"rollout", "ref_reward", "learner", "controller"}
PHASES = {"weight_sync", "generate", "ref_logp", "reward", "advantages", "actor_update",
          "grad_allreduce"}


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray for the whole module (started once: ~5-7 s)."""
    info = init_ray()
    yield info
    shutdown_ray()


@pytest.fixture(scope="module")
def base():
    """The warm-start model of seed 0, shared by every run (as train_grpo's base_params)."""
    rng_init = np.random.default_rng(CONFIG.seed).spawn(3)[0]
    with blas_limits(CONFIG):
        params, _ = warm_start(CONFIG.model, AdditionTask(), rng_init,
                               max_steps=CONFIG.warmstart_max_steps,
                               target_accuracy=CONFIG.warmstart_target_accuracy)
    return params


@pytest.fixture(scope="module")
def one_step_off(ray_local, base, tmp_path_factory):
    """One one-step-off run that checkpoints after every step."""
    ckpt_dir = tmp_path_factory.mktemp("ckpt")
    result = train_ray(dataclasses.replace(CONFIG, staleness=1), mode="one_step_off",
                       base_params=base, checkpoint_dir=ckpt_dir, checkpoint_every=1)
    return result, ckpt_dir


def assert_same_history(got, want, rtol=0.0, atol=0.0):
    """Every metric of ``want`` (not the measured ``*_s`` times) equal in ``got``."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for key, value in w.items():
            if not key.endswith("_s"):
                np.testing.assert_allclose(g[key], value, rtol=rtol, atol=atol, err_msg=key)


def assert_same_params(got, want, rtol=0.0, atol=0.0):
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def assert_timeline_well_formed(timeline, pools, steps):
    """start <= end, steps in range, one phase at a time on each lane (an actor runs one call at
    a time), and only the expected pools."""
    assert timeline
    assert {iv.pool for iv in timeline} == pools
    for iv in timeline:
        assert 0 <= iv.start_s <= iv.end_s and iv.step in range(steps)
    for lane in {iv.lane for iv in timeline}:
        bars = sorted((iv for iv in timeline if iv.lane == lane), key=lambda iv: iv.start_s)
        for a, b in zip(bars, bars[1:]):
            assert b.start_s >= a.end_s - 1e-6, (lane, a, b)


def first(timeline, phase, step, end=False):
    times = [iv.end_s if end else iv.start_s for iv in timeline
             if iv.phase == phase and iv.step == step]
    return max(times) if end else min(times)


def test_sync_mode_reproduces_train_grpo_bit_for_bit(ray_local, base):
    """Disaggregated synchronous, W = L = 1: train_grpo's history (rewards, loss, grad norm,
    KL, FLOPs...) and final weights exactly; no rollout overlaps an update."""
    want = train_grpo(SYNC, base_params=base)
    got = train_ray(CONFIG, mode="sync", base_params=base)
    assert_same_history(got.history, want.history)
    assert_same_params(got.params, want.params)
    assert_timeline_well_formed(got.timeline, DISAGGREGATED, CONFIG.steps)
    assert {iv.phase for iv in got.timeline} == PHASES
    for t in range(CONFIG.steps - 1):       # synchronous: step t+1 samples after update t
        assert first(got.timeline, "generate", t + 1) >= first(got.timeline, "actor_update", t,
                                                               end=True)
    assert all(row["step_s"] > 0 and row["rollout_s"] > 0 for row in got.history)


def test_colocated_mode_reproduces_train_grpo_bit_for_bit(ray_local, base):
    """One actor hosting all three roles (time-shared): the same numbers as train_grpo; every
    phase on that actor's lane, weight sync included."""
    want = train_grpo(SYNC, base_params=base)
    got = train_ray(SYNC, mode="colocated", base_params=base)
    assert_same_history(got.history, want.history)
    assert_same_params(got.params, want.params)
    assert_timeline_well_formed(got.timeline, {"colocated", "controller"}, CONFIG.steps)
    assert {iv.phase for iv in got.timeline if iv.lane == "colocated/r0"} == PHASES - {
        "advantages"}


def test_one_step_off_equals_in_process_staleness_1(one_step_off):
    """One-step-off on Ray = train_async_grpo(staleness=1) exactly, and the rollout of step 1
    really ran while the learner trained step 0."""
    got, _ = one_step_off
    want = train_async_grpo(dataclasses.replace(CONFIG, staleness=1),
                            base_params=got.base_params)
    assert_same_history(got.history, want.history)
    assert_same_params(got.params, want.params)
    assert [row["staleness"] for row in got.history] == [0, 1, 1]
    assert_timeline_well_formed(got.timeline, DISAGGREGATED, CONFIG.steps)
    assert first(got.timeline, "generate", 1) < first(got.timeline, "actor_update", 0, end=True)
    for t in range(CONFIG.steps - 1):       # step t+1 starts generating before step t ends
        assert first(got.timeline, "generate", t + 1) < \
            first(got.timeline, "actor_update", t, end=True)
    assert got.config == dataclasses.replace(CONFIG, staleness=1)     # the run keeps its config


def test_proximal_logps_run_beside_the_scoring(ray_local, base):
    """From staleness 1 the controller submits the learners' proximal log-probs before it waits
    for the scores, so the two branches of a step run at the same time. The reward is made to
    take 50 ms, far longer than a call takes to start, so on any machine every stale step's
    proximal pass is over before its scoring is (a controller that waited for the scores first
    would start it only after)."""
    import time as _time

    class SlowRewardTask(AdditionTask):          # local: Ray pickles it by value
        def reward(self, pairs, completions):
            _time.sleep(0.05)
            return super().reward(pairs, completions)

    got = train_ray(dataclasses.replace(CONFIG, staleness=1), mode="one_step_off",
                    base_params=base, task=SlowRewardTask())
    for s in range(1, CONFIG.steps):
        assert first(got.timeline, "old_logp", s, end=True) < \
            first(got.timeline, "reward", s, end=True) - 0.02, s


def test_phase_times_count_the_time_a_phase_runs_not_the_gaps():
    """Two learners' update bars with a gap between them: the history's update_s is their
    union, and phase_overlap_s the time two phases share."""
    rec = [("learner", "learner/r0", "actor_update", 10.0, 11.0, 3),
           ("learner", "learner/r1", "actor_update", 10.5, 11.5, 3),
           ("learner", "learner/r0", "actor_update", 12.0, 12.5, 3),
           ("ref_reward", "ref_reward/r0", "ref_logp", 11.25, 12.25, 3),
           ("learner", "learner/r0", "actor_update", 20.0, 29.0, 4)]
    times = phase_times(3, rec)
    assert times["update_s"] == pytest.approx(2.0)          # 10-11.5 and 12-12.5, not 10-12.5
    assert times["ref_logps_s"] == pytest.approx(1.0) and times["rollout_s"] == 0.0
    bars = to_intervals(rec, 10.0)
    assert phase_overlap_s(bars, ("actor_update",), ("ref_logp",), 3) == pytest.approx(0.5)
    assert phase_overlap_s(bars, ("ref_logp",), ("generate",), 3) == 0.0
    assert phase_overlap_s(bars, ("actor_update",), ("actor_update",), 3, 4) == 0.0
    assert phase_overlap_s(bars, ("actor_update",), ("actor_update",), 3, 3) == \
        pytest.approx(2.0)                                  # a phase overlaps itself fully
    with pytest.raises(ValueError, match="phases_b"):
        phase_overlap_s(bars, ("ref_logp",), "old_logp", 3)


def test_resume_from_checkpoint_takes_the_same_next_step(one_step_off, base):
    """Resuming at step 2 from the checkpoint (learner, AdamW, streams, weight version 1 still
    to be sampled with) gives the uninterrupted run's step 2 and final weights exactly."""
    full, ckpt_dir = one_step_off
    assert [Path(p).name for p in full.checkpoints] == [
        "step_000001", "step_000002", "step_000003"]
    assert sorted(load_checkpoint(ckpt_dir / "step_000002").weight_versions) == [1]
    resumed = train_ray(dataclasses.replace(CONFIG, staleness=1), mode="one_step_off",
                        resume_from=ckpt_dir / "step_000002")
    assert [row["step"] for row in resumed.history] == [2]
    assert_same_history(resumed.history, full.history[2:])
    assert_same_params(resumed.params, full.params)


def test_async_two_rollout_workers_bounded_staleness(ray_local, base):
    """k = 2 with W = 2: batches trained at steps 0, 1, 2 come from versions 0, 0, 0
    (staleness 0, 1, 2); the rollout of step 2 ran before update 0 ended; worker k sampled its
    half of the prompts with child stream k of the sampling stream (recomputed here)."""
    c = dataclasses.replace(CONFIG, staleness=2)
    got = train_ray(c, mode="async", num_rollout_workers=2, base_params=base)
    assert [row["staleness"] for row in got.history] == [0, 1, 2]
    assert got.history[0]["importance_weight_max"] == 1.0         # fresh: pi_prox = pi_behav
    assert got.history[2]["importance_weight_max"] != 1.0         # stale: weights moved
    assert_timeline_well_formed(got.timeline, DISAGGREGATED, c.steps)
    assert {iv.lane for iv in got.timeline if iv.phase == "generate"} == {"rollout/r0",
                                                                         "rollout/r1"}
    assert first(got.timeline, "generate", 2) < first(got.timeline, "actor_update", 0, end=True)
    task, params = AdditionTask(), copy_params(base, c.model)
    _, rng_data, rng_sample = np.random.default_rng(c.seed).spawn(3)
    prompts, pairs = task.sample_prompts(rng_data, c.num_prompts)
    rewards = []
    for idx, rng in zip(np.array_split(np.arange(c.num_prompts), 2), rng_sample.spawn(2)):
        ro = generate(params, prompts[idx], c.model, max_new_tokens=c.max_new_tokens,
                      eos_id=task.eos_id, pad_id=task.pad_id, group_size=c.group_size,
                      temperature=c.temperature, rng=rng)
        rewards.append(task.reward(np.repeat(pairs[idx], c.group_size, axis=0),
                                   ro.tokens[:, task.prompt_len:]))
    assert got.history[0]["reward_mean"] == float(np.concatenate(rewards).mean())


def test_learner_ranks_take_the_in_process_data_parallel_step():
    """Two Learner ranks (the class the actors run, here in-process in float64) on one batch:
    their summed gradient = dp_grads over ProcessGroup(2), and both replicas' new weights = the
    single-rank step reference_grpo_step, rtol 1e-10 (book Chapter 7's equivalence)."""
    cfg = SYNC.model
    params = {k: v.astype(np.float64) for k, v in
              warm_start(cfg, AdditionTask(), np.random.default_rng(0), max_steps=20)[0].items()}
    batch = make_grpo_batch(cfg, SYNC, 0, params=params)
    norms = loss_norms(batch.completion_mask, SYNC)
    data = {"tokens": batch.tokens, "completion_mask": batch.completion_mask,
            "old": batch.old_per_token_logps, "advantages": batch.advantages,
            "kl_ref": batch.ref_per_token_logps, "prompt_len": batch.prompt_len}
    learners = [Learner(SYNC, batch.params, rank=r, lane=f"learner/r{r}") for r in (0, 1)]
    half = len(batch.tokens) // 2
    flats = [h.grads(data, sl, norms, 0)[0]
             for h, sl in zip(learners, (slice(0, half), slice(half, None)))]
    for h in learners:
        h.apply(flats, SYNC.lr * lr_factor(0, SYNC), 0)
    layout = FlatLayout.of(batch.params, 2)
    dp = layout.flatten(dp_grads(batch.params, batch, SYNC, ProcessGroup(2))[0])
    np.testing.assert_allclose(flats[0] + flats[1], dp[:layout.num_params], rtol=1e-10,
                               atol=1e-14)
    _, _, want = reference_grpo_step(batch.params, batch, SYNC)
    assert_same_params(learners[0].weights(), want, rtol=1e-10, atol=1e-14)
    assert_same_params(learners[1].weights(), learners[0].weights())   # replicas stay equal


def test_two_learner_actors_train_as_train_grpo(ray_local, base):
    """L = 2 actors exchanging gradients through the object store: a 3-step float32 run =
    train_grpo to float32 rounding (a row's log-prob depends at ~1e-7 on the batch it is
    computed in, and the gradient is summed over two shards, so atol covers the near-zero
    metrics such as kl_ref at step 0)."""
    got = train_ray(CONFIG, mode="sync", num_learners=2, base_params=base)
    want = train_grpo(SYNC, base_params=base)
    assert_same_history(got.history, want.history, rtol=1e-4, atol=1e-6)
    assert_same_params(got.params, want.params, rtol=1e-4, atol=1e-5)
    assert {iv.lane for iv in got.timeline if iv.phase == "grad_allreduce"} == {
        "learner/r0", "learner/r1"}


def test_killed_rollout_worker_is_replaced_and_the_run_continues(ray_local, base):
    """ray.kill of the rollout worker after step 0 (its next rollout already queued): the
    controller replaces it on the stream state of its last batch and resends its work; the
    run's history is train_async_grpo's, exactly, as if nothing had happened."""
    c = dataclasses.replace(CONFIG, staleness=1)
    ctrl = Controller(c, mode="one_step_off", base_params=base)
    killed = []

    def kill_after_step_0(row):
        if row["step"] == 0:
            killed.append(ctrl.actors["rollout/r0"])
            ray.kill(killed[0])

    try:
        got = ctrl.run(on_step=kill_after_step_0)
        assert ctrl.actors["rollout/r0"] != killed[0]
    finally:
        ctrl.shutdown()
    assert [(r["lane"], r["step"]) for r in got.replacements] in (
        [("rollout/r0", 1)], [("rollout/r0", 2)])     # died with step 1 in flight, or after it
    assert_same_history(got.history, train_async_grpo(c, base_params=base).history)


def test_dead_worker_beyond_the_replacement_budget_is_a_clear_error(ray_local, base):
    """max_worker_replacements=0: the death is reported naming the worker and the budget."""
    ctrl = Controller(CONFIG, mode="sync", base_params=base, max_worker_replacements=0)
    try:
        with pytest.raises(RuntimeError, match=r"rollout/r0 died .*max_worker_replacements=0"):
            ctrl.run(on_step=lambda row: ray.kill(ctrl.actors["rollout/r0"]))
    finally:
        ctrl.shutdown()


def test_dead_learner_is_a_clear_error(ray_local, base):
    """A learner holds the training state: its death ends the run, naming it."""
    ctrl = Controller(CONFIG, mode="sync", base_params=base)
    try:
        with pytest.raises(RuntimeError, match=r"learner/r0.*died at step 1.*checkpoint"):
            ctrl.run(on_step=lambda row: ray.kill(ctrl.actors["learner/r0"]))
    finally:
        ctrl.shutdown()


def test_checkpoint_round_trip(tmp_path):
    """save_checkpoint / load_checkpoint keep arrays, AdamW step and stream states; a restored
    stream draws the same numbers."""
    rng = np.random.default_rng(3)
    w = {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": np.arange(4.0)}
    ckpt = Checkpoint(step=5, params=w, adam_m=w, adam_v=w, adam_t=5, base_params=w,
                      weight_versions={4: w}, rng_data_state=rng.bit_generator.state,
                      rollout_rng_states=[rng.bit_generator.state], meta={"mode": "sync"})
    back = load_checkpoint(save_checkpoint(tmp_path / "step_000005", ckpt))
    assert (back.step, back.adam_t, sorted(back.weight_versions), back.meta) == (
        5, 5, [4], {"mode": "sync"})
    assert_same_params(back.weight_versions[4], w)
    assert back.params["a"].dtype == np.float32
    restored = np.random.Generator(np.random.PCG64())
    restored.bit_generator.state = back.rng_data_state
    assert restored.random() == rng.random()


@pytest.mark.parametrize("kwargs, name", [
    ({"mode": "ring"}, "mode"),
    ({"num_learners": 0}, "num_learners"),
    ({"num_learners": 9}, "num_learners"),
    ({"num_rollout_workers": 0}, "num_rollout_workers"),
    ({"num_rollout_workers": 9}, "num_rollout_workers"),
    ({"mode": "colocated", "num_learners": 2}, "num_rollout_workers"),
    ({"config": dataclasses.replace(CONFIG, staleness=2), "mode": "sync"}, "config.staleness"),
    ({"config": SYNC, "mode": "async"}, "AsyncGRPOConfig"),
    ({"config": dataclasses.replace(CONFIG, dynamic_sampling=True)}, "config.dynamic_sampling"),
    ({"config": "grpo"}, "config"),
    ({"checkpoint_every": 1}, "checkpoint_dir"),
    ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"max_worker_replacements": -1}, "max_worker_replacements"),
    ({"cpus_per_actor": -0.5}, "cpus_per_actor"),
    ({"resume_from": "/nonexistent/step_000001"}, "resume_from"),
])
def test_bad_arguments_raise_value_error_naming_the_parameter(kwargs, name):
    """Checked before any actor starts (no Ray needed)."""
    kwargs = {"config": CONFIG, **kwargs}
    if "resume_from" not in kwargs:
        kwargs["base_params"] = {}
    with pytest.raises(ValueError, match=name):
        Controller(kwargs.pop("config"), **kwargs)


def test_bad_run_layouts_are_refused_before_a_step_runs(ray_local, base, tmp_path, one_step_off):
    """A checkpoint_dir that is a file, base_params with resume_from, a resume with nothing left
    to run, and more reserved CPUs than local Ray has (which would wait forever) are
    ValueErrors naming the argument."""
    afile = tmp_path / "a_file"
    afile.write_text("x")
    with pytest.raises(ValueError, match="checkpoint_dir="):
        Controller(CONFIG, base_params=base, checkpoint_dir=afile, checkpoint_every=1)
    _, ckpt_dir = one_step_off
    one_off = dataclasses.replace(CONFIG, staleness=1)
    with pytest.raises(ValueError, match="base_params and resume_from"):
        Controller(one_off, mode="one_step_off", base_params=base,
                   resume_from=ckpt_dir / "step_000002")
    with pytest.raises(ValueError, match=r"config.steps=3 leaves nothing to run"):
        Controller(one_off, mode="one_step_off", resume_from=ckpt_dir / "step_000003")
    with pytest.raises(ValueError, match=r"cpus_per_actor=1 x 3 actors needs 3 CPUs"):
        Controller(CONFIG, base_params=base, cpus_per_actor=1)


@pytest.mark.parametrize("address", ["", "nohost", "127.0.0.1:1", "ray://127.0.0.1:1"])
def test_unreachable_or_malformed_cluster_address_is_refused_at_once(address):
    """Ray would retry a dead address for minutes; check_address answers in seconds."""
    with pytest.raises(ValueError, match="address="):
        check_address(address, timeout_s=2.0)


@pytest.mark.parametrize("kwargs, name", [
    ({"object_store_memory_bytes": 2**20}, "object_store_memory_bytes"),
    ({"num_cpus": 0}, "num_cpus"),
    ({"address": "auto", "num_cpus": 2}, "num_cpus"),
    ({"address": 5}, "address"),
])
def test_init_ray_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        init_ray(**kwargs)


def test_resume_from_another_run_is_refused(one_step_off):
    """A checkpoint of a one-step-off run does not resume a run of another staleness."""
    _, ckpt_dir = one_step_off
    with pytest.raises(ValueError, match="resume_from"):
        Controller(CONFIG, mode="sync", resume_from=ckpt_dir / "step_000001")


def test_footprint_counts_shared_pages_once():
    """The footprint is the processes' proportional set size: between the pages they alone hold
    (USS) and their resident sizes, which count shared pages once per process (RSS)."""
    import psutil

    from rlmperf_lite.distributed.runtime import local_footprint_bytes
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    uss = sum(p.memory_full_info().uss for p in procs)
    footprint = local_footprint_bytes()
    rss = sum(p.memory_info().rss for p in procs)
    assert 0.9 * uss < footprint < 1.1 * rss


def test_init_ray_hides_only_the_note_that_token_auth_is_on():
    import logging

    from rlmperf_lite.distributed.runtime import _token_auth_enabled_note
    def record(msg):
        return logging.LogRecord("ray", logging.WARNING, __file__, 1, msg, None, None)
    assert not _token_auth_enabled_note(record("Token authentication is enabled for this Ray "
                                               "cluster. Set RAY_AUTH_MODE=disabled to opt out."))
    assert _token_auth_enabled_note(record("Token authentication is disabled for this Ray "
                                           "cluster. Anyone with network access ..."))
