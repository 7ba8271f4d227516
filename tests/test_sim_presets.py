"""Chapter 12: the frameworks' facts carry a source for every claim, every preset builds and
simulates with the layout and mode its framework documents (verl colocated and synchronous by
default, AReaL disaggregated and asynchronous...), bad names and overrides raise a ValueError
naming the parameter, an asynchronous preset beats the colocated one on the same workload, the
step breakdown adds up, and the chapter's views carry the library's values."""
import math

import pytest

from rlmperf_lite.book.exercises.labs12 import ANSWERS
from rlmperf_lite.sim import Workload, simulate
from rlmperf_lite.sim.breakdown import step_breakdown
from rlmperf_lite.sim.frameworks import (DEFAULT_WORKLOAD, FACT_FIELDS, FRAMEWORKS,
                                         NEMO_RL_PERF_V04, OVERRIDES, PRESETS, FrameworkFacts,
                                         framework_names, framework_system, preset_gpu_split,
                                         published_speedups)
from rlmperf_lite.book.framework_views import (BREAKDOWN_PARTS, STEP_TIME, THROUGHPUT,
                                               breakdown_chart, claims_table_html,
                                               facts_table_html, framework_grid,
                                               framework_grid_chart, framework_widget,
                                               presets_table_html, sync_table_html)

SMALL = Workload(prompts=8, group_size=4, prompt_len=128, mean_response_len=512.0,
                 max_response_len=2048)
"""A small workload (8 prompts: divisible by the 4 streaming updates of some presets)."""


@pytest.fixture(scope="module")
def side_by_side():
    """verl's default (colocated sync) and AReaL's (disaggregated fully async) on the presets'
    default workload: Qwen2.5-7B, 64 H100, 128 prompts x 16 responses."""
    return {name: simulate(framework_system(name), DEFAULT_WORKLOAD, steps=12)
            for name in ("verl", "areal")}


# ---- facts --------------------------------------------------------------------------------------

def test_the_fourteen_frameworks_of_the_chapter_are_there():
    assert list(FRAMEWORKS) == ["verl", "OpenRLHF", "TRL", "NeMo-RL", "NeMo-Aligner",
                                "DeepSpeed-Chat", "ReaL", "AReaL", "slime", "ROLL", "StreamRL",
                                "LlamaRL", "PipelineRL", "prime-rl"]
    assert all(isinstance(f, FrameworkFacts) for f in FRAMEWORKS.values())


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_every_fact_has_a_source(name):
    f = FRAMEWORKS[name]
    assert set(f.sources) == set(FACT_FIELDS), f"{name}: sources must cover {FACT_FIELDS}"
    for fact in FACT_FIELDS:
        value, source = getattr(f, fact), f.sources[fact]
        assert value.strip(), f"{name}.{fact} is empty"
        assert source.startswith(("https://", "arXiv:", "unconfirmed")), (name, fact, source)
        if source.startswith("unconfirmed"):      # no source, so the fact must say so
            assert "unconfirmed" in value or value.startswith("none"), (name, fact, value)
    assert f.cite and all(isinstance(k, str) and k for k in f.cite)


def test_facts_follow_the_checked_notes():
    assert FRAMEWORKS["verl"].staleness_knob == "async_training.staleness_threshold"
    assert FRAMEWORKS["AReaL"].staleness_knob.startswith("max_head_offpolicyness")
    assert FRAMEWORKS["AReaL"].staleness_default.startswith("0")
    assert FRAMEWORKS["TRL"].staleness_default == "4"            # AsyncGRPOConfig.max_staleness
    assert "PR #5255" in FRAMEWORKS["TRL"].placement_default   # default flipped to colocate
    assert "unconfirmed" in FRAMEWORKS["ROLL"].placement_default
    assert "2510.11345" in FRAMEWORKS["ROLL"].sources["headline_claim"]   # ROLL Flash
    assert "2.77x" in FRAMEWORKS["AReaL"].headline_claim
    assert FRAMEWORKS["slime"].headline_claim.startswith("none found")


# ---- presets ----------------------------------------------------------------------------------

def test_every_framework_has_a_preset_and_every_preset_a_framework():
    assert framework_names() == list(PRESETS)
    assert {p.framework for p in PRESETS.values()} == set(FRAMEWORKS)
    for p in PRESETS.values():
        assert p.notes and p.knobs


@pytest.mark.parametrize("name", framework_names())
def test_every_preset_builds_and_simulates(name):
    system = framework_system(name, workload=SMALL, gpus=16)
    r = simulate(system, SMALL, steps=4)
    assert system.name == name and system.gpus == 16
    assert r.step_time_s > 0 and math.isfinite(r.throughput_tokens_per_s_per_gpu)
    assert len(r.step_times_s) == 4
    if system.mode == "sync":
        assert r.staleness.max() == 0
    else:
        assert r.staleness.max() <= math.ceil(system.staleness) + system.partial_rollout


def _pool(system, role):
    return system.placement[role]


def test_layouts_and_modes_are_as_documented():
    verl = framework_system("verl")                 # hybrid engine: all on one pool, sync
    assert verl.mode == "sync" and len({_pool(verl, r) for r in verl.roles}) == 1
    one = framework_system("verl-one-step-off")     # 4 rollout : 12 trainer GPUs, scaled
    assert (one.mode, one.staleness, one.partial_rollout) == ("async", 1.0, False)
    assert one.pools["rollout"] == 16 and one.pools["train"] == 48
    assert one.consume == "batch" and framework_system("areal").consume == "ready"
    full = framework_system("verl-fully-async", gpus=128)      # the doc's 64:64
    assert (full.staleness, full.partial_rollout, full.minibatches) == (0.5, True, 4)
    assert full.pools["rollout"] == full.pools["train"] == 64 and "old_logp" not in full.costs
    areal = framework_system("areal")               # 5:1, eta = 4, interruptible rollout
    assert areal.mode == "async" and areal.staleness == 4.0 and areal.partial_rollout
    assert [r for r in areal.roles if _pool(areal, r) == _pool(areal, "rollout")] == ["rollout"]
    assert (areal.pools["rollout"], areal.pools["train"]) == (53, 11)
    slime = framework_system("slime")               # disaggregated, synchronous
    assert slime.mode == "sync" and _pool(slime, "rollout") != _pool(slime, "actor")
    trl = framework_system("trl-server")            # 1 vLLM : 7 training GPUs
    assert (trl.pools["rollout"], trl.pools["train"]) == (8, 56)
    stream = framework_system("streamrl")           # on-policy, streaming updates
    assert (stream.mode, stream.staleness, stream.minibatches) == ("async", 0.0, 4)
    pipe = framework_system("pipelinerl")           # in-flight updates = partial rollout
    assert pipe.partial_rollout and pipe.pools["rollout"] == pipe.pools["train"] == 32


def test_openrlhf_separates_each_model_and_nemo_aligner_splits_critic_and_reward():
    grpo = framework_system("openrlhf")
    assert (grpo.pools["rollout"], grpo.pools["actor"]) == (32, 32)
    ppo = framework_system("openrlhf", algo="ppo", reward_model="qwen2.5-7b")   # 1:1:1
    assert (ppo.pools["rollout"], ppo.pools["actor"], ppo.pools["critic"]) == (21, 22, 21)
    assert _pool(ppo, "critic") == _pool(ppo, "reward") == "critic"
    assert ppo.mode == "sync" and framework_system("openrlhf-async").mode == "async"
    na = framework_system("nemo-aligner", algo="ppo")          # actor job : critic job = 2:1
    assert {_pool(na, r) for r in ("rollout", "actor")} == {"actor"}
    assert _pool(na, "critic") == _pool(na, "reward") == "critic"
    assert (na.pools["actor"], na.pools["critic"]) == (43, 21)


def test_splits_round_to_whole_rollout_replicas():
    big = framework_system("areal", actor="llama-3.1-70b", gpus=128)   # tp = 4 replicas
    assert big.engine.tp == 4 and big.pools["rollout"] % 4 == 0
    assert big.pools["rollout"] + big.pools["train"] == 128
    with pytest.raises(ValueError, match="give training more GPUs"):   # 70B states on 11 GPUs
        framework_system("areal", actor="llama-3.1-70b", gpus=64)
    assert preset_gpu_split("verl", 64, 1) == {"all": 64}
    assert preset_gpu_split("verl-fully-async", 10, 4) == {"rollout": 4, "train": 6}


def test_bad_names_and_overrides_name_the_parameter():
    cases = [(dict(name="vrel"), "name must be one of"),
             (dict(name="verl", rollout_gpus=8), r"overrides \['rollout_gpus'\]"),
             (dict(name="verl", gpus=0), "gpus must be"),
             (dict(name="verl", algo="dpo"), "algo must be one of"),
             (dict(name="verl", workload="big"), "workload must be"),
             (dict(name="areal", rollout_share=1.0), "rollout_share must be"),
             (dict(name="areal", gpus=1), "gpus = 1 is too few"),
             (dict(name="verl", mode="async"), "RLSystem.mode='async' needs the rollout"),
             (dict(name="nemo-aligner", reward_model=None), "reward_model"),
             (dict(name="verl", staleness=-1.0), "RLSystem.staleness")]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            framework_system(**kw)
    assert "rollout_share" in OVERRIDES and "mode" in OVERRIDES


def test_overrides_reach_the_system():
    s = framework_system("areal", staleness=1.0, rollout_share=0.5, kl_coef=0.001)
    assert s.staleness == 1.0 and s.pools["rollout"] == 32 and "ref_logp" in s.costs
    assert framework_system("verl").name == "verl"            # the preset names the system


def test_async_areal_beats_colocated_verl_on_the_same_workload(side_by_side):
    verl, areal = side_by_side["verl"], side_by_side["areal"]
    assert verl.workload == areal.workload == DEFAULT_WORKLOAD
    assert verl.system.gpus == areal.system.gpus == 64
    assert areal.step_time_s < verl.step_time_s
    assert areal.throughput_tokens_per_s_per_gpu > verl.throughput_tokens_per_s_per_gpu
    assert verl.staleness.max() == 0 and areal.staleness.mean() > 1


# ---- the step breakdown -----------------------------------------------------------------------

def test_breakdown_parts_add_up_to_the_step(side_by_side):
    for name, r in side_by_side.items():
        b = step_breakdown(r)
        parts = sum(b[k] for k in BREAKDOWN_PARTS)
        assert parts == pytest.approx(b["step_time_s"], rel=1e-9), name
        assert 0 < b["work_bound_s"] <= b["step_time_s"] * (1 + 1e-9)
        assert b["work_gpu_s"] == pytest.approx(b["work_bound_s"] * r.system.gpus)
    colocated = step_breakdown(side_by_side["verl"])
    assert colocated["overlap_s"] == 0.0                 # one chain: nothing overlaps
    assert colocated["step_time_s"] == pytest.approx(side_by_side["verl"].step_time_s)
    assert step_breakdown(side_by_side["areal"])["overlap_s"] > 0


def test_breakdown_rejects_a_window_with_no_step():
    r = simulate(framework_system("areal", workload=SMALL, gpus=16), SMALL, steps=6)
    with pytest.raises(ValueError, match="tail_steps = 5 leaves no step"):
        step_breakdown(r)
    assert step_breakdown(r, tail_steps=0)["step_time_s"] > 0
    with pytest.raises(ValueError, match="result must be a SimResult"):
        step_breakdown("not a run")


# ---- published speed-ups ------------------------------------------------------------------------

def test_per_gpu_speedups_of_the_nemo_rl_table():
    s = published_speedups()
    assert set(s) == set(NEMO_RL_PERF_V04["rows"])
    # DeepSeek-V3: 154 s on 256 GPUs vs 77.9 s on 512 GPUs (performance-summary.md, v0.4)
    assert s["DeepSeek-V3"]["step_speedup"] == pytest.approx(154 / 77.9)
    assert s["DeepSeek-V3"]["gpu_s_speedup"] == pytest.approx(154 * 256 / (77.9 * 512))
    assert s["Llama3.1-8B"]["gpu_s_speedup"] == s["Llama3.1-8B"]["step_speedup"]


# ---- views ------------------------------------------------------------------------------------

def test_tables_carry_the_facts_and_presets():
    facts = facts_table_html()
    for f in FRAMEWORKS.values():
        assert f">{f.name}<" in facts and f.staleness_knob.replace("<", "&lt;") in facts
    claims = claims_table_html()
    assert "up to 2.77x" in claims and "41.0 h / 14.8 h" in claims
    systems = {n: framework_system(n) for n in ("verl", "areal")}
    table = presets_table_html(systems)
    assert "rollout 53, train 11" in table and "all 64" in table
    assert PRESETS["real"].notes not in table                     # only the systems given
    assert "<td>async</td><td>4</td><td>yes</td>" in table


def test_sync_table_carries_each_presets_sync_and_switch():
    """Book section 12.3's table: one sync and one switch as each system charges them, the
    preset's trainer and bucketing, 2 switches per colocated GRPO step (rollout -> actor ->
    rollout), none apart, and the bandwidth bound only when given."""
    systems = {n: framework_system(n) for n in ("verl", "verl-fully-async", "slime")}
    bound = {n: framework_system(n, weight_sync="bandwidth").weight_sync_s for n in systems}
    table = sync_table_html(systems, bound)
    v = systems["verl"]
    assert (f"<td>all 64</td><td>fsdp</td><td>no</td><td>{v.weight_sync_s:.3f}</td>"
            f"<td>{v.switch_s:.3f}</td><td>2</td><td>{bound['verl']:.3f}</td>") in table
    f = systems["verl-fully-async"]
    assert f"<td>fsdp</td><td>yes</td><td>{f.weight_sync_s:.3f}</td><td>0.000</td><td>0</td>" \
        in table
    assert "<td>megatron</td><td>yes</td>" in table and "bandwidth bound" in table
    assert PRESETS["verl-fully-async"].sync_source.replace("'", "&#x27;") in table
    assert "bandwidth bound" not in sync_table_html({"verl": v})


def test_breakdown_chart_carries_the_library_values(side_by_side):
    parts = {k: step_breakdown(r) for k, r in side_by_side.items()}
    spec = breakdown_chart(parts).to_dict()
    rows = spec["layer"][0]["data"]["values"]
    got = {(r["system"], r["part"]): r["seconds"] for r in rows}
    for name, b in parts.items():
        for key, label in BREAKDOWN_PARTS.items():
            assert got[(name, label)] == b[key]
    ticks = spec["layer"][1]["data"]["values"]
    assert {r["system"]: r["work_bound_s"] for r in ticks} == \
        {k: b["work_bound_s"] for k, b in parts.items()}
    with pytest.raises(ValueError, match="breakdowns must be"):
        breakdown_chart({})
    name = next(iter(parts))
    with pytest.raises(ValueError, match=rf"breakdowns\['{name}'\] .* lacks \['work_bound_s'\]"):
        breakdown_chart({name: {k: v for k, v in parts[name].items() if k != "work_bound_s"}})


def test_framework_grid_equals_the_library_at_sample_points():
    grid = {"framework": ("verl", "areal", "nemo-rl"), "actor": ("qwen2.5-7b",),
            "gpus": (16, 64)}
    rows = framework_grid(grid)
    assert len(rows) == 3 * 2 * 2
    got = {(r["framework"], r["gpus"], r["measure"]): r["value"] for r in rows}
    for name, gpus in (("verl", 16), ("areal", 64)):
        r = simulate(framework_system(name, gpus=gpus), DEFAULT_WORKLOAD, steps=12)
        assert got[(name, gpus, STEP_TIME)] == r.step_time_s
        assert got[(name, gpus, THROUGHPUT)] == r.throughput_tokens_per_s_per_gpu
    assert got[("nemo-rl", 64, STEP_TIME)] == got[("verl", 64, STEP_TIME)]   # same system
    spec = framework_grid_chart(rows).to_dict()
    assert [p["name"] for p in spec["params"]] == ["actor", "gpus", "measure"]
    assert spec["params"][1]["value"] == 64


def test_framework_widget_shows_the_table_and_the_library_error():
    box = framework_widget(a="verl", b="slime", gpus=16)
    controls = [*box.children[0].children[0].children, *box.children[0].children[1].children]
    message = box.children[1]
    assert "<td>verl</td>" in message.value and "<td>slime</td>" in message.value
    controls[4].value = 1                    # gpus: a 7B's training states do not fit one GPU
    assert "give training more GPUs" in message.value and "color:firebrick" in message.value


# ---- exercises --------------------------------------------------------------------------------

def test_lab12_answers_compute():
    assert all(k.startswith("ch12.") for k in ANSWERS)
    values = {k: a.compute() for k, a in ANSWERS.items()}
    assert values["ch12.1a"] < values["ch12.1b"]          # partial rollout buys more
    assert values["ch12.3a"] in (1 / 8, 2 / 8, 3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8)
    assert values["ch12.5"] == pytest.approx(506 * 128 / (241 * 256))
