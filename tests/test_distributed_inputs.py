"""Bad inputs to the Ray chapter's library (rlmperf_lite.distributed: checkpoints, costs,
compare_run; views/ray_views: the grid, the widget, the timelines) raise a ValueError that names
the parameter — and the timelines draw only what the run has, on the actors' lanes.

No Ray is started: checkpoints are written with save_checkpoint from a tiny model's weights and
damaged on disk, and runs are hand-made RayRunResults with fixed phase times.
"""
import dataclasses
import json
import math

import numpy as np
import pytest

pytest.importorskip("ray")      # rlmperf_lite.distributed imports ray

from rlmperf_lite.distributed import (REFERENCE_COSTS, Checkpoint, RayRunResult,  # noqa: E402
                                      compare_run, controller_workdepth, load_checkpoint,
                                      measured_costs, save_checkpoint)
from rlmperf_lite.nn import TinyLMConfig, init_params  # noqa: E402
from rlmperf_lite.rl import GRPOConfig  # noqa: E402
from rlmperf_lite.sim import Interval  # noqa: E402
from rlmperf_lite.book.ray_calculators import (RAY_GRID, WIDGET_MAX_STEPS, WIDGET_MAX_WORKERS,  # noqa: E402
                                               ray_grid, ray_widget)
from rlmperf_lite.book.ray_views import (measured_timeline_chart,  # noqa: E402
                                         measured_vs_predicted_chart)
from rlmperf_lite.book.sim_views import PHASE_SCALE, timeline_rows  # noqa: E402

MODEL = TinyLMConfig(vocab_size=14, max_seq_len=8, hidden_size=8, num_layers=1, num_heads=2,
                     intermediate_size=16)
CONFIG = GRPOConfig(steps=4, num_prompts=8, group_size=4, lr_warmup_steps=1, kl_coef=0.01)
MS = 1e-3


# ---- checkpoints -------------------------------------------------------------------------------
def tiny_checkpoint() -> Checkpoint:
    """A checkpoint at step 2 of MODEL's weights, AdamW moments and one older weight version."""
    rng = np.random.default_rng(0)
    params = init_params(MODEL, rng)
    zeros = {k: np.zeros_like(v) for k, v in params.items()}
    return Checkpoint(step=2, params=params, adam_m=zeros, adam_v=zeros, adam_t=2,
                      base_params=params, weight_versions={1: params},
                      rng_data_state=rng.bit_generator.state,
                      rollout_rng_states=[rng.bit_generator.state], meta={"mode": "sync"})


@pytest.fixture
def ckpt_dir(tmp_path):
    return tmp_path / save_checkpoint(tmp_path / "step_000002", tiny_checkpoint())


def rewrite_npz(path, change):
    """Load ``path``'s arrays, apply ``change`` (dict -> dict) and save them back."""
    with np.load(path) as f:
        arrays = {k: f[k].copy() for k in f.files}
    np.savez(path, **change(arrays))


def rewrite_state(directory, change):
    state = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    change(state)
    (directory / "state.json").write_text(json.dumps(state), encoding="utf-8")


def test_a_whole_checkpoint_loads_with_and_without_the_model(ckpt_dir):
    for back in (load_checkpoint(ckpt_dir), load_checkpoint(ckpt_dir, MODEL)):
        assert (back.step, back.adam_t, sorted(back.weight_versions)) == (2, 2, [1])
        assert back.params.keys() == init_params(MODEL, np.random.default_rng(0)).keys()


@pytest.mark.parametrize("directory, match", [
    (5, r"resume_from must be a checkpoint directory \(a str or path\), got int"),
    (None, "resume_from must be a checkpoint directory"),
    (True, "resume_from must be a checkpoint directory"),
])
def test_a_non_path_is_refused(directory, match):
    with pytest.raises(ValueError, match=match):
        load_checkpoint(directory)


def test_a_missing_directory_or_state_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"resume_from=.*nope.* does not exist"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(ValueError, match=r"resume_from=.*\(no state\.json\)"):
        load_checkpoint(tmp_path)


def test_state_json_not_json_is_refused(ckpt_dir):
    (ckpt_dir / "state.json").write_text('{"format": 1, "step": ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"resume_from=.*state\.json is not valid JSON"):
        load_checkpoint(ckpt_dir)
    (ckpt_dir / "state.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"resume_from=.*state\.json is not valid JSON"):
        load_checkpoint(ckpt_dir)
    (ckpt_dir / "state.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"resume_from=.*state\.json holds a list"):
        load_checkpoint(ckpt_dir)


@pytest.mark.parametrize("key", ["step", "adam_t", "weight_versions", "rng_data_state",
                                 "rollout_rng_states", "meta"])
def test_state_json_missing_a_key_is_refused(ckpt_dir, key):
    rewrite_state(ckpt_dir, lambda s: s.pop(key))
    with pytest.raises(ValueError, match=rf"resume_from=.*state\.json lacks '{key}'"):
        load_checkpoint(ckpt_dir)


@pytest.mark.parametrize("key, value, match", [
    ("step", "2", r"state\.json\['step'\] must be an int >= 0"),
    ("adam_t", -1, r"state\.json\['adam_t'\] must be an int >= 0"),
    ("meta", [], r"state\.json\['meta'\] must be a JSON dict"),
    ("weight_versions", ["1"], r"state\.json\['weight_versions'\] must list ints"),
    ("rollout_rng_states", [3], r"state\.json\['rollout_rng_states'\] must list"),
    ("format", 2, r"checkpoint format 2, this library reads 1"),
])
def test_state_json_of_the_wrong_type_is_refused(ckpt_dir, key, value, match):
    rewrite_state(ckpt_dir, lambda s: s.__setitem__(key, value))
    with pytest.raises(ValueError, match="resume_from=.*" + match):
        load_checkpoint(ckpt_dir)


NPZ = ["params", "adam_m", "adam_v", "base_params", "weights_v1"]


@pytest.mark.parametrize("name", NPZ)
def test_a_missing_npz_file_is_refused(ckpt_dir, name):
    (ckpt_dir / f"{name}.npz").unlink()
    with pytest.raises(ValueError, match=rf"resume_from=.* lacks {name}\.npz; the checkpoint "
                                         r"is incomplete"):
        load_checkpoint(ckpt_dir)


def test_an_unreadable_npz_file_is_refused(ckpt_dir):
    (ckpt_dir / "adam_m.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"resume_from=.*adam_m\.npz is not a readable \.npz"):
        load_checkpoint(ckpt_dir)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", NPZ)
def test_non_finite_arrays_are_refused(ckpt_dir, name, bad):
    def poison(arrays):
        arrays["wte"] = arrays["wte"].copy()
        arrays["wte"][0, 0] = bad
        return arrays
    rewrite_npz(ckpt_dir / f"{name}.npz", poison)
    with pytest.raises(ValueError, match=rf"resume_from=.*{name}\.npz\['wte'\] has non-finite "
                                         r"values \(NaN or inf\)"):
        load_checkpoint(ckpt_dir)


def _drop_wte(arrays):
    return {k: v for k, v in arrays.items() if k != "wte"}


def _extra_weight(arrays):
    return {**arrays, "h9.wo": np.zeros((8, 8), np.float32)}


def _wrong_shape(arrays):
    return {**arrays, "lm_head": np.zeros((8, 15), np.float32)}


@pytest.mark.parametrize("name", NPZ)
@pytest.mark.parametrize("change, match", [
    (_drop_wte, r"lacks weight 'wte' for this model config"),
    (_extra_weight, r"has an unknown weight 'h9\.wo'"),
    (_wrong_shape, r"\['lm_head'\] has shape \(8, 15\), the model config needs \(8, 14\)"),
])
def test_arrays_that_do_not_fit_the_model_are_refused(ckpt_dir, name, change, match):
    """With the model given, every array set has exactly its weights and shapes (copy_params);
    without it the checkpoint loads as saved."""
    rewrite_npz(ckpt_dir / f"{name}.npz", change)
    with pytest.raises(ValueError, match=rf"resume_from=.*{name}\.npz.*{match}"):
        load_checkpoint(ckpt_dir, MODEL)
    load_checkpoint(ckpt_dir)


def test_a_negative_second_moment_and_a_bad_model_are_refused(ckpt_dir):
    rewrite_npz(ckpt_dir / "adam_v.npz", lambda a: {**a, "ln_f": -np.ones(8, np.float32)})
    with pytest.raises(ValueError, match=r"resume_from=.*adam_v\.npz\['ln_f'\] has negative"):
        load_checkpoint(ckpt_dir, MODEL)
    with pytest.raises(ValueError, match="model must be None or a TinyLMConfig"):
        load_checkpoint(ckpt_dir, {"hidden_size": 8})


# ---- costs and compare_run ---------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["generate", "actor_update"])
def test_zero_generate_or_update_cost_is_refused(phase):
    """Every step decodes and updates; a zero one would make W / D divide by zero."""
    with pytest.raises(ValueError, match=rf"ToyCosts\.phase_s\['{phase}'\] must be > 0"):
        dataclasses.replace(REFERENCE_COSTS, phase_s={**REFERENCE_COSTS.phase_s, phase: 0.0})
    costs = dataclasses.replace(REFERENCE_COSTS, phase_s={"generate": 1e-3,
                                                          "actor_update": 1e-3})
    assert controller_workdepth(costs).parallelism == pytest.approx(1.0)    # W = D, no overlap


def fake_run(*, steps=4, workers=1, learners=1, mode="sync", step_s=None) -> RayRunResult:
    """A sync-laid run: each step the weight sync and generation of every rollout worker, the
    reference pass and reward, the controller's advantages, every learner's update, one after
    the other with 1-ms gaps."""
    phases = [(f"rollout/r{r}", "rollout", p, s) for r in range(workers)
              for p, s in (("weight_sync", 1 * MS), ("generate", 2 * MS))]
    phases += [("ref_reward/r0", "ref_reward", "ref_logp", 3 * MS),
               ("ref_reward/r0", "ref_reward", "reward", 0.2 * MS),
               ("controller", "controller", "advantages", 0.1 * MS)]
    phases += [(f"learner/r{r}", "learner", "actor_update", 5 * MS) for r in range(learners)]
    timeline, t = [], 0.0
    for step in range(steps):
        t0 = t
        for lane, pool, phase, s in phases:
            t += MS
            timeline.append(Interval(pool, lane, phase, t, t + s, step))
            t += s
    per_step = t / steps if step_s is None else step_s
    history = [{"step": s, "step_s": per_step, "response_width": 4} for s in range(steps)]
    assert t0 >= 0
    return RayRunResult(params={}, history=history, mode=mode, timeline=timeline)


def test_compare_run_needs_two_steps():
    """SimResult.warmup_steps leaves out at least one step: a 1-step run has no steady step
    (it divided by zero in the simulator's utilisation)."""
    with pytest.raises(ValueError, match=r"result has 1 step\(s\); compare_run needs at least "
                                         r"2"):
        compare_run(fake_run(steps=1), CONFIG, skip_steps=0)
    assert compare_run(fake_run(steps=2), CONFIG, skip_steps=0).predicted.warmup_steps == 1


def test_history_rows_without_their_keys_or_times_are_refused():
    run = fake_run()
    for row in run.history:
        del row["response_width"]
    with pytest.raises(ValueError, match=r"result\.history rows need the keys"):
        measured_costs(run, CONFIG)
    with pytest.raises(ValueError, match=r"result\.history\[0\]\['step_s'\] must be a finite "
                                         r"number in \(0"):
        compare_run(fake_run(step_s=0.0), CONFIG)


# ---- the no-kernel grid ------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    ({"steps": 0}, "steps must be an int >= 1"),
    ({"costs": None}, "costs must be a ToyCosts"),
    ({"grid": {}}, r"grid must be a dict with exactly the keys"),
    ({"grid": {"mode": (("sync", None),), "rollout_workers": (1,)}}, "grid must be a dict"),
    ({"grid": [("sync", None)]}, "grid must be a dict"),
    ({"grid": {**RAY_GRID, "learners": ()}}, r"grid\['learners'\] must be a non-empty"),
    ({"grid": {**RAY_GRID, "mode": ("sync",)}}, r"grid\['mode'\] holds \(mode, staleness\)"),
    ({"grid": {**RAY_GRID, "mode": (("sync", 2),)}}, r"grid\['mode'\] entry.*staleness=2"),
    ({"grid": {**RAY_GRID, "mode": (("ring", None),)}}, r"grid\['mode'\] entry.*mode"),
    ({"grid": {**RAY_GRID, "mode": (("async", None),)}}, r"grid\['mode'\] entry.*staleness"),
    ({"grid": {**RAY_GRID, "rollout_workers": (0, 1)}}, r"grid\['rollout_workers'\] entry"),
    ({"grid": {**RAY_GRID, "learners": (1.5,)}}, r"grid\['learners'\] entry"),
    ({"grid": {"mode": (("colocated", None),), "rollout_workers": (1,), "learners": (2,)}},
     "no point of grid is a layout the controller can run"),
    ({"grid": {**RAY_GRID, "rollout_workers": (16,)}}, "no point of grid"),
])
def test_ray_grid_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ray_grid(**kwargs)


def test_ray_grid_skips_only_impossible_layouts():
    """Colocated with W != L and W > B give no rows; the rest of the grid stays."""
    grid = {"mode": (("colocated", None), ("sync", None)), "rollout_workers": (1, 2, 16),
            "learners": (1,)}
    points = {(r["mode"], r["rollout_workers"]) for r in ray_grid(grid=grid, steps=4)}
    assert points == {("colocated", 1), ("sync", 1), ("sync", 2)}


# ---- the live widget ---------------------------------------------------------------------------
def test_widget_steps_are_bounded():
    """10^6 steps would block the kernel for hours: refused as a start value, and shown as the
    library's message when typed in (no Ray: the start setting comes from a finished run)."""
    pytest.importorskip("ipywidgets")
    with pytest.raises(ValueError, match=rf"steps=1000000 is more than the widget runs \(at "
                                         rf"most {WIDGET_MAX_STEPS}"):
        ray_widget(CONFIG, base_params={}, steps=10**6)
    run = fake_run()
    w = ray_widget(CONFIG, base_params={}, runs={("sync", 0, 4, 1): run}, steps=4)
    controls, message = w.children[0].children, w.children[1]
    assert "measured step" in message.value
    controls[2].value = WIDGET_MAX_STEPS + 1
    assert f"at most {WIDGET_MAX_STEPS}" in message.value and "firebrick" in message.value
    controls[2].value = 1
    assert "steps must be an int &gt;= 2" in message.value


def test_widget_rollout_workers_are_bounded():
    """More rollout workers than fit a 1 GB Binder: refused as a start value and when typed in."""
    pytest.importorskip("ipywidgets")
    with pytest.raises(ValueError, match=rf"rollout W=8 is more than the widget starts \(at most "
                                         rf"{WIDGET_MAX_WORKERS}"):
        ray_widget(CONFIG, base_params={}, num_rollout_workers=8)
    w = ray_widget(CONFIG, base_params={}, runs={("sync", 0, 4, 1): fake_run()}, steps=4)
    controls, message = w.children[0].children, w.children[1]
    controls[3].value = WIDGET_MAX_WORKERS + 1
    assert f"at most {WIDGET_MAX_WORKERS}" in message.value and "firebrick" in message.value
    controls[3].value = 0
    assert "rollout W must be an int &gt;= 1" in message.value


@pytest.mark.parametrize("ray_up", [False, True])
def test_a_widget_run_leaves_ray_as_it_found_it(monkeypatch, ray_up):
    """After the lab's closing cell stopped Ray, a widget run starts it and stops it again; with
    Ray up it stays up (no Ray here: train_ray and Ray's state are stand-ins)."""
    pytest.importorskip("ipywidgets")
    import ray

    import rlmperf_lite.distributed as dist
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: ray_up)
    monkeypatch.setattr(dist, "train_ray", lambda cfg, **kw: calls.append("run") or fake_run())
    monkeypatch.setattr(dist, "shutdown_ray", lambda: calls.append("shutdown"))
    w = ray_widget(CONFIG, base_params={}, runs={("sync", 0, 4, 1): fake_run()}, steps=4)
    assert calls == []                                  # the finished run is shown, none started
    w.children[0].children[0].value = "colocated"       # a setting with no finished run
    assert calls == (["run"] if ray_up else ["run", "shutdown"])


# ---- timelines ---------------------------------------------------------------------------------
def _rgb(colour: str) -> tuple:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def test_timeline_legends_list_only_the_phases_drawn_in_the_books_colours():
    run = fake_run()
    spec = measured_vs_predicted_chart(run, compare_run(run, CONFIG), steps=range(2, 4)).to_dict()
    book = dict(zip(PHASE_SCALE.domain, PHASE_SCALE.range))
    for chart in spec["vconcat"]:
        scale = chart["encoding"]["color"]["scale"]
        assert scale["domain"] == ["generate", "ref_logp", "reward", "actor_update",
                                   "weight_sync", "advantages"]              # the book's order
        colours = dict(zip(scale["domain"], scale["range"]))
        assert all(colours[p] == book[p] for p in colours if p in book)
        drawn = {r["phase"] for r in chart["data"]["values"]}
        assert drawn <= set(scale["domain"])
    alone = measured_timeline_chart(run, steps=1).to_dict()["encoding"]["color"]["scale"]
    assert "values" not in alone["domain"] and "pause" not in alone["domain"]
    assert len(alone["domain"]) == len(alone["range"]) == 6


def test_advantages_colour_is_far_from_every_phase_colour():
    """It sat 40 RGB units from the weight sync's brown; now >= 100 from every other phase."""
    scale = measured_timeline_chart(fake_run(), steps=0).to_dict()["encoding"]["color"]["scale"]
    colours = dict(zip(scale["domain"], scale["range"]))
    others = dict(zip(PHASE_SCALE.domain, PHASE_SCALE.range))
    assert min(math.dist(_rgb(colours["advantages"]), _rgb(c)) for c in others.values()) >= 100


@pytest.mark.parametrize("workers, learners", [(1, 1), (2, 2)])
def test_predicted_lanes_are_named_as_the_measured_ones(workers, learners):
    """The simulator draws the weight sync on a pool lane ``rollout`` and generation on
    ``rollout/r0``; the chart draws each pool-lane bar on every device lane, so one rollout
    worker is one lane, with the simulator's times unchanged."""
    run = fake_run(workers=workers, learners=learners)
    c = compare_run(run, CONFIG)
    measured, predicted = measured_vs_predicted_chart(run, c, steps=2).to_dict()["vconcat"]
    lanes = measured["encoding"]["y"]["sort"]
    assert predicted["encoding"]["y"]["sort"] == [lane for lane in lanes if lane != "controller"]
    rows = predicted["data"]["values"]
    sim = timeline_rows(c.predicted, steps=2)
    sync = [(r["start_s"], r["end_s"]) for r in sim if r["lane"] == "rollout"]
    for r in range(workers):
        assert [(x["start_s"], x["end_s"]) for x in rows if x["lane"] == f"rollout/r{r}"
                and x["phase"] == "weight_sync"] == sync
    update = [(r["start_s"], r["end_s"]) for r in sim if r["lane"] == "learner"
              and r["phase"] == "actor_update"]
    for r in range(learners):
        assert [(x["start_s"], x["end_s"]) for x in rows if x["lane"] == f"learner/r{r}"
                and x["phase"] == "actor_update"] == update


def test_a_comparison_of_another_run_is_refused():
    run = fake_run()
    c = compare_run(run, CONFIG)
    other = fake_run()
    other.mode = "one_step_off"
    with pytest.raises(ValueError, match=r"comparison is of another run.*'sync'.*"
                                         r"'one_step_off'"):
        measured_vs_predicted_chart(other, c)
    with pytest.raises(ValueError, match=r"comparison is of another run.*\('sync', 4, 1, 1\).*"
                                         r"\('sync', 6, 1, 1\)"):
        measured_vs_predicted_chart(fake_run(steps=6), c)
    with pytest.raises(ValueError, match="comparison is of another run"):
        measured_vs_predicted_chart(fake_run(workers=2), c)
    with pytest.raises(ValueError, match="result must be a RayRunResult"):
        measured_vs_predicted_chart(None, c)
