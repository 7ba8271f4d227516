"""The toy GRPO system on a Ray cluster of several nodes (book section sec-ray-multinode).

Two clusters on this machine, both on loopback: `ray start --head` plus a second `ray start`,
which `rlmperf train --runtime ray --address` joins in a subprocess; and Ray's test harness
(rlmperf_lite.distributed.LocalCluster, two nodes of 1 CPU and a 75 MiB object store each),
which this process joins. The tests check that "spread" puts the actors on both nodes without
changing a number, and that a run survives the loss of a node: its rollout worker replaced on
the surviving node (the in-process loop's numbers exactly), or, when a learner was on it, every
actor started again from the last checkpoint (no step lost or repeated). Every Ray process the
tests start is stopped by its PID or process group (never `ray stop`, which would stop other
people's Ray too), and the tests check that none is left.
"""
import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from rlmperf_lite.distributed import (RECORD_KEYS, Controller, LocalCluster,  # noqa: E402
                                      WorkerLost, alive_node_ids, init_ray, load_run_records, run_record,
                                      run_with_node_loss, spread_order, timeline_nodes,
                                      train_ray)
from rlmperf_lite.distributed.runtime import MIN_OBJECT_STORE_BYTES  # noqa: E402
from rlmperf_lite.rl import AsyncGRPOConfig, GRPOConfig, train_async_grpo, train_grpo  # noqa: E402
from rlmperf_lite.rl.common import blas_limits  # noqa: E402
from rlmperf_lite.rl.warmstart import warm_start  # noqa: E402
from rlmperf_lite.tasks import AdditionTask  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# as tests/test_distributed.py: kl_coef > 0 so the reference worker's log-probs enter the loss
CONFIG = AsyncGRPOConfig(steps=3, num_prompts=8, group_size=4, lr_warmup_steps=1, kl_coef=0.01)
SYNC = GRPOConfig(**{f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(GRPOConfig)})


def same_history(got, want, rtol=0.0, atol=0.0):
    """Every metric of ``want`` but the measured ``*_s`` times equal in ``got``, step by step."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        for key, value in w.items():
            if not key.endswith("_s"):
                np.testing.assert_allclose(g[key], value, rtol=rtol, atol=atol, err_msg=key)


def wait_gone(pids_fn, timeout_s=20.0) -> list:
    """``pids_fn()`` until it is empty or ``timeout_s`` passed (processes exit a little after
    their raylet); returns the last list."""
    end = time.time() + timeout_s
    while (pids := pids_fn()) and time.time() < end:
        time.sleep(0.5)
    return pids


# -- `ray start` nodes joined by the command line (first: before the harness's cluster starts)

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_with(marker: str) -> list:
    """PIDs whose command line or environment names ``marker`` (our temporary directory)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or ()) or \
                    marker in proc.environ().get("RAY_TMPDIR", ""):
                found.append(proc.info["pid"])
        except psutil.Error:
            pass
    return [p for p in found if p != os.getpid()]


@pytest.fixture(scope="module")
def ray_start_nodes():
    """`ray start --head` and a second `ray start --address`, each a process group of its own,
    in a temporary directory of their own, with a token of their own (Ray's token
    authentication: the head's GCS listens on every interface). Yields (address, env)."""
    tmp = tempfile.mkdtemp(prefix="rlmperf_rs_", dir="/tmp")       # short: socket paths
    port = free_port()
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "PYTHONPATH": str(REPO)}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    node = ["--node-ip-address=127.0.0.1", "--num-cpus=1",
            f"--object-store-memory={MIN_OBJECT_STORE_BYTES}", "--disable-usage-stats", "--block"]
    groups = []

    def start(args, log):
        """One `ray start` in a new session (its processes share its process group); returns
        once it printed that its node runs."""
        out = open(Path(tmp) / log, "w")       # noqa: SIM115 - closed with the group
        proc = subprocess.Popen([ray_cli, "start", *args, *node], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        groups.append((proc, out))
        deadline = time.time() + 120
        while "Ray runtime started" not in (Path(tmp) / log).read_text():
            assert proc.poll() is None and time.time() < deadline, \
                (Path(tmp) / log).read_text()[-2000:]
            time.sleep(0.5)

    try:                                        # one after the other: each starts faster
        start(["--head", f"--port={port}", f"--temp-dir={tmp}/ray", "--include-dashboard=false",
               '--resources={"local_node_0": 1}'], "head.log")
        start([f"--address=127.0.0.1:{port}", '--resources={"local_node_1": 1}'], "node1.log")
        # the driver: Ray would replace 127.0.0.1 by this machine's routable address unless its
        # one-machine switch is off (a variable read when ray is imported, so set for the child)
        yield f"127.0.0.1:{port}", {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    finally:
        for proc, out in reversed(groups):      # only the groups we started, never `ray stop`
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            out.close()
        left = wait_gone(lambda: pids_with(tmp))
        subprocess.run(["rm", "-rf", tmp], check=False)
        assert not left, f"Ray processes left running: {left}"


def test_rlmperf_train_spreads_its_actors_over_two_ray_start_nodes(ray_start_nodes):
    """`rlmperf train --runtime ray --address 127.0.0.1:PORT --placement spread` on a head and a
    second node: the learner and the reference/reward worker on the driver's node (0), the
    rollout worker on the other (spread_order), and the same rewards and losses as the
    in-process loop."""
    address, env = ray_start_nodes
    out = subprocess.run([sys.executable, "-m", "rlmperf_lite", "train", "--runtime", "ray",
                          "--address", address, "--placement", "spread", "--steps", "2",
                          "--num-prompts", "4", "--json"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    *rows, summary = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert summary["actor_nodes"] == {"controller": 0, "learner/r0": 0, "rollout/r0": 1,
                                      "ref_reward/r0": 0}
    want = train_grpo(GRPOConfig(steps=2, num_prompts=4)).history
    for a, b in zip(rows, want):
        assert a["step"] == b["step"] and a["reward_mean"] == b["reward_mean"]
        assert a["loss"] == b["loss"]


def test_a_driver_without_the_clusters_token_is_told_so(ray_start_nodes):
    """The `ray start` nodes ask for Ray's token authentication: a driver without the token
    ends in one line naming --address and RAY_AUTH_MODE, not a traceback."""
    address, env = ray_start_nodes
    env = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    out = subprocess.run([sys.executable, "-m", "rlmperf_lite", "train", "--runtime", "ray",
                          "--address", address, "--steps", "1"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"address='{address}'" in out.stderr and "RAY_AUTH_MODE=token" in out.stderr


# -- Ray's test harness, joined by this process ---------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """Two nodes (head 0 and node 1) of 1 CPU and a 75 MiB object store each, joined by this
    process; stopped at the end, and no process of theirs may be left."""
    if ray.is_initialized():                    # a local Ray of another test module
        ray.shutdown()
    local = LocalCluster(2)
    try:
        init_ray(local.address)
        yield local
    finally:
        local.shutdown()
        left = wait_gone(local.leftover_pids)
        assert not left, f"Ray processes left running: {left}"


@pytest.fixture
def two_nodes(cluster):
    """The cluster with two running nodes (a test before may have removed one)."""
    while len(cluster.running) < 2:
        cluster.add_node()
    return cluster


@pytest.fixture(scope="module")
def base():
    """The warm-start model of seed 0, shared by every run (as train_grpo's base_params)."""
    rng_init = np.random.default_rng(CONFIG.seed).spawn(3)[0]
    with blas_limits(CONFIG):
        params, _ = warm_start(CONFIG.model, AdditionTask(), rng_init,
                               max_steps=CONFIG.warmstart_max_steps,
                               target_accuracy=CONFIG.warmstart_target_accuracy)
    return params


def test_each_node_has_its_own_resources_on_loopback(two_nodes):
    """Two alive nodes, each with 1 CPU, a 75 MiB object store and its own custom resource,
    at 127.0.0.1; the driver is attached to the head, listed first by alive_node_ids."""
    nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    assert sorted(nodes) == sorted(two_nodes.node_ids[k] for k in two_nodes.running)
    for k in two_nodes.running:
        n = nodes[two_nodes.node_ids[k]]
        assert n["NodeManagerAddress"] == "127.0.0.1"
        assert n["Resources"]["CPU"] == 1 and n["Resources"][f"local_node_{k}"] == 1
        assert n["Resources"]["object_store_memory"] == MIN_OBJECT_STORE_BYTES
    assert alive_node_ids()[0] == two_nodes.node_ids[0]
    with pytest.raises(ValueError, match=r"index=0 must name a running node other than the "
                                         r"head"):
        two_nodes.remove_node(0)


def test_spread_puts_the_actors_on_both_nodes_and_keeps_every_number(two_nodes, base):
    """placement="spread", sync, W = L = 1: the learner and the reference/reward worker on node
    0 (with the controller), the rollout worker on node 1; every generate bar on node 1, every
    update bar on node 0; and train_grpo's history and weights bit for bit."""
    got = train_ray(CONFIG, mode="sync", base_params=base, placement="spread")
    lanes = {a["lane"]: a["node"] for a in got.actors}
    assert lanes == {"controller": 0, "learner/r0": 0, "rollout/r0": 1, "ref_reward/r0": 0}
    assert got.nodes[0] == two_nodes.node_ids[0] and len(set(lanes.values())) == 2
    assert spread_order("sync", 1, 1) == ["learner/r0", "rollout/r0", "ref_reward/r0"]
    on = {}
    for iv, node in zip(got.timeline, timeline_nodes(got)):
        on.setdefault(iv.phase, set()).add(node)
    assert on["generate"] == {1} and on["actor_update"] == {0} and on["advantages"] == {0}
    want = train_grpo(SYNC, base_params=base)
    same_history(got.history, want.history)
    for k in want.params:
        np.testing.assert_array_equal(got.params[k], want.params[k])
    assert got.node_losses == [] and got.replacements == []


def test_lost_node_of_the_rollout_worker_is_replaced_on_the_other(two_nodes, base):
    """Node 1 (the rollout worker's) removed after step 0 of a one-step-off run: the worker is
    started again on node 0 on its stream's state, the run finishes steps 0, 1, 2 once each
    with train_async_grpo's numbers exactly, and the record of the run has the recorded file's
    structure."""
    c = dataclasses.replace(CONFIG, staleness=1)
    got, killed = run_with_node_loss(two_nodes, c, mode="one_step_off", kill_lane="rollout/r0",
                                     after_step=0, base_params=base)
    assert killed["node_id"] == got.nodes[1] and killed["node_id"] not in alive_node_ids()
    (loss,) = got.node_losses
    assert (loss["node"], loss["lanes"], loss["recovery"]) == (1, ["rollout/r0"], "replaced")
    assert loss["step"] in (1, 2)       # step 1's rollout still running when killed, or step 2's
    assert [(r["lane"], r["new_node_id"]) for r in got.replacements] == [
        ("rollout/r0", got.nodes[0])]
    rollouts = [a["node"] for a in got.actors if a["lane"] == "rollout/r0"]
    assert rollouts == [1, 0]
    want = train_async_grpo(c, base_params=base)
    same_history(got.history, want.history)
    bars = [(iv.step, n) for iv, n in zip(got.timeline, timeline_nodes(got))
            if iv.phase == "generate"]
    assert {n for s, n in bars if s == 0} == {1} and {n for s, n in bars if s == 2} == {0}
    record = run_record(got, killed)
    recorded = load_run_records()["runs"]["replaced"]
    assert list(record) == list(RECORD_KEYS) == list(recorded)
    for key in ("config", "node_losses", "replacements", "killed", "actors", "timeline",
                "history"):
        want_keys = recorded[key] if isinstance(recorded[key], dict) else recorded[key][0]
        got_keys = record[key] if isinstance(record[key], dict) else record[key][0]
        assert set(got_keys) == set(want_keys), key
    json.dumps(record, allow_nan=False)                     # strict JSON


def test_lost_node_of_a_learner_resumes_every_actor_from_the_last_checkpoint(two_nodes, base,
                                                                              tmp_path):
    """Two learners, one per node; node 1 (learner/r1 and the reference/reward worker) removed
    after step 2, checkpoints every 2 steps: step 3 fails, every actor starts again on node 0
    from the checkpoint of step 2, step 2 is replayed (the same numbers as its first run, which
    on_step saw) and the run ends with steps 0-3 once each, train_grpo's to float rounding."""
    c = dataclasses.replace(CONFIG, steps=4)
    seen = []
    got, killed = run_with_node_loss(two_nodes, c, mode="sync", num_learners=2,
                                     kill_lane="learner/r1", after_step=2, base_params=base,
                                     checkpoint_dir=tmp_path, checkpoint_every=2, max_resumes=1,
                                     on_step=seen.append)
    (loss,) = got.node_losses
    assert (loss["node"], loss["lanes"], loss["recovery"], loss["resumed_from"]) == (
        1, ["learner/r1", "ref_reward/r0"], "resumed", 2)
    assert loss["step"] == 3 and killed["lane"] == "learner/r1"
    assert [r["step"] for r in seen] == [0, 1, 2, 3]          # each step reported once
    same_history(got.history[2:3], seen[2:3])                 # the replay = the first run
    assert [Path(p).name for p in got.checkpoints] == ["step_000002", "step_000004"]
    after = [a for a in got.actors if a["ready_s"] > killed["at_s"]]
    assert sorted(a["lane"] for a in after) == ["learner/r0", "learner/r1", "ref_reward/r0",
                                                "rollout/r0"]
    assert {a["node"] for a in after} == {0}
    want = train_grpo(dataclasses.replace(SYNC, steps=4), base_params=base)
    same_history(got.history, want.history, rtol=1e-4, atol=1e-6)


def test_without_resumes_a_lost_learner_node_is_a_clear_error(two_nodes, base):
    """max_resumes=0 (the default), colocated on two actors, one per node: losing node 1 ends
    the run with WorkerLost naming the actor, its learner state, and the checkpoint."""
    with pytest.raises(WorkerLost, match=r"colocated/r1 died during the rollout of step 1 "
                                         r".*held a learner.*checkpoint") as err:
        run_with_node_loss(two_nodes, CONFIG, mode="colocated", num_rollout_workers=2,
                           num_learners=2, kill_lane="colocated/r1", after_step=0,
                           base_params=base)
    assert (err.value.lanes, err.value.step) == (["colocated/r1"], 1)


def test_node_loss_arguments_are_checked_before_a_step_runs(two_nodes, base):
    """A lane that is no actor, one on the head, or a step past the run: ValueErrors naming
    the argument, before any actor starts."""
    for kwargs, name in (({"kill_lane": "learner/r7"}, "kill_lane='learner/r7' is not an actor"),
                         ({"kill_lane": "learner/r0"}, "kill_lane='learner/r0' runs on the head"),
                         ({"after_step": 2}, "after_step=2 must be a step"),
                         ({"on_step": 3}, "on_step")):
        with pytest.raises(ValueError, match=name):
            run_with_node_loss(two_nodes, CONFIG, mode="sync", base_params=base, **kwargs)
    assert len(two_nodes.running) == 2


# -- no Ray needed -----------------------------------------------------------------------------

def test_recorded_runs_lost_node_1_and_kept_every_step():
    """The two recorded runs of bench/ray_multinode.py: two nodes, node 1 lost once; "replaced"
    moved its rollout worker to node 0 and equals the in-process loop; "resumed" went back to
    its checkpoint; both have every step once, and every bar of their timelines has a node."""
    data = load_run_records()
    runs, checks = data["runs"], data["checks"]
    for name, recovery in (("replaced", "replaced"), ("resumed", "resumed")):
        r = runs[name]
        assert r["num_nodes"] == 2 and r["killed"]["node"] == 1, name
        assert [e["recovery"] for e in r["node_losses"]] == [recovery]
        assert [h["step"] for h in r["history"]] == list(range(r["config"]["steps"]))
        assert {b["node"] for b in r["timeline"]} == {0, 1}
        assert all(b["start_s"] <= b["end_s"] for b in r["timeline"])
        assert all(checks[name].values()), (name, checks[name])
    assert runs["resumed"]["node_losses"][0]["resumed_from"] is not None


@pytest.mark.parametrize("kwargs, name", [({"placement": "ring"}, "placement"),
                                          ({"max_resumes": -1}, "max_resumes")])
def test_bad_placement_or_resumes_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Controller(CONFIG, base_params={}, **kwargs)


@pytest.mark.parametrize("kwargs, name", [({"num_nodes": 0}, "num_nodes"),
                                          ({"num_cpus_per_node": 0}, "num_cpus_per_node"),
                                          ({"object_store_memory_bytes": 2**20},
                                           "object_store_memory_bytes")])
def test_local_cluster_refuses_bad_sizes_before_starting_anything(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LocalCluster(**kwargs)


def test_placement_flag_needs_the_ray_runtime():
    out = subprocess.run([sys.executable, "-m", "rlmperf_lite", "train", "--steps", "1",
                          "--placement", "spread"], capture_output=True, text=True)
    assert out.returncode == 2 and "--placement" in out.stderr and "Traceback" not in out.stderr
