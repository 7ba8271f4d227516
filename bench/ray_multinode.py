"""Record two runs of the toy GRPO system on a two-node Ray cluster that each lose node 1 in the
middle (book section sec-ray-multinode). Run by hand: `python bench/ray_multinode.py`.

Starts rlmperf_lite.distributed.LocalCluster(2) on this machine (Ray's test harness, loopback,
1 CPU and a 75 MiB object store per node), joins it, and runs with placement="spread":

- "replaced": one-step-off, one rollout worker (node 1), learner and reference/reward worker
  (node 0); node 1 removed after step 1. The rollout worker is started again on node 0.
- "resumed": synchronous, two learners (one per node), checkpoints every 2 steps; node 1
  (learner/r1 and the reference/reward worker) removed after step 2. Every actor starts again
  on node 0 from the checkpoint of step 2.

Writes rlmperf_lite/distributed/data/multinode_runs.json (run_record of each run, what each was
checked against, the resident memory of this driver and the cluster, idle and with a run's
three actors up, and the machine), which the lab draws without
starting Ray. tests/test_distributed_multinode.py checks that a live run's record has the same
structure. Timings depend on the machine; they are shown as recorded, never asserted.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import ray  # noqa: E402

from rlmperf_lite.distributed import (RECORDED_RUNS, LocalCluster, init_ray,  # noqa: E402
                                      run_record, run_with_node_loss)
from rlmperf_lite.rl import AsyncGRPOConfig, GRPOConfig, train_async_grpo, train_grpo  # noqa: E402
from rlmperf_lite.rl.common import blas_limits  # noqa: E402
from rlmperf_lite.rl.warmstart import warm_start  # noqa: E402
from rlmperf_lite.tasks import AdditionTask  # noqa: E402

CONFIG = AsyncGRPOConfig(steps=6, num_prompts=8, group_size=4, lr_warmup_steps=1, kl_coef=0.01)


def same(got: list, want: list, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Every metric but the measured times equal (to rtol/atol), step by step."""
    if [r["step"] for r in got] != [r["step"] for r in want]:
        return False
    return all(np.allclose(g[k], v, rtol=rtol, atol=atol) for g, w in zip(got, want)
               for k, v in w.items() if not k.endswith("_s"))


def footprint_bytes(cluster: LocalCluster) -> int:
    """Resident memory of this driver and every process of the cluster (an upper bound: shared
    pages count once per process)."""
    total = psutil.Process().memory_info().rss
    for pid in cluster.leftover_pids():
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total


def replaced(cluster: LocalCluster, base: dict) -> tuple[dict, dict, int]:
    c, in_run = dataclasses.replace(CONFIG, staleness=1), []

    def measure(row):                                   # the three actors up, both nodes
        if row["step"] == 0:
            in_run.append(footprint_bytes(cluster))
    result, killed = run_with_node_loss(cluster, c, mode="one_step_off", kill_lane="rollout/r0",
                                        after_step=1, base_params=base, on_step=measure)
    want = train_async_grpo(c, base_params=base)
    checks = {"equal_to_in_process": same(result.history, want.history) and all(
        np.array_equal(result.params[k], want.params[k]) for k in want.params),
        "every_step_once": [r["step"] for r in result.history] == list(range(c.steps))}
    return run_record(result, killed), checks, in_run[0]


def resumed(cluster: LocalCluster, base: dict) -> tuple[dict, dict]:
    c, seen = dataclasses.replace(CONFIG, staleness=0), []
    with tempfile.TemporaryDirectory() as ckpt:
        result, killed = run_with_node_loss(
            cluster, c, mode="sync", num_learners=2, kill_lane="learner/r1", after_step=2,
            base_params=base, checkpoint_dir=ckpt, checkpoint_every=2, max_resumes=1,
            on_step=seen.append)
    sync = GRPOConfig(**{f.name: getattr(c, f.name) for f in dataclasses.fields(GRPOConfig)})
    want = train_grpo(sync, base_params=base)
    checks = {"replay_equals_first_run": same(result.history, seen),
              "equal_to_in_process_to_rounding": same(result.history, want.history,
                                                      rtol=1e-4, atol=1e-6),
              "every_step_once": [r["step"] for r in seen] == list(range(c.steps))}
    return run_record(result, killed), checks


def main() -> None:
    rng_init = np.random.default_rng(CONFIG.seed).spawn(3)[0]
    with blas_limits(CONFIG):
        base, _ = warm_start(CONFIG.model, AdditionTask(), rng_init,
                             max_steps=CONFIG.warmstart_max_steps,
                             target_accuracy=CONFIG.warmstart_target_accuracy)
    t0 = time.perf_counter()
    with LocalCluster(2) as cluster:
        init_ray(cluster.address)
        start_s = time.perf_counter() - t0
        idle = footprint_bytes(cluster)
        runs, checks = {}, {}
        runs["replaced"], checks["replaced"], in_run = replaced(cluster, base)
        cluster.add_node()                              # back to two nodes
        runs["resumed"], checks["resumed"] = resumed(cluster, base)
        ray.shutdown()
    data = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}, Ray {ray.__version__}, "
                       f"{time.strftime('%Y-%m-%d')}",
            "cluster": {"nodes": 2, "cpus_per_node": 1, "object_store_mib_per_node": 75,
                        "start_s": start_s, "idle_footprint_bytes": idle,
                        "run_footprint_bytes": in_run},
            "runs": runs, "checks": checks}
    RECORDED_RUNS.parent.mkdir(parents=True, exist_ok=True)
    RECORDED_RUNS.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n",
                             encoding="utf-8")
    print(json.dumps({"cluster": data["cluster"], "checks": checks}, indent=1))
    if not all(v for c in checks.values() for v in c.values()):
        raise SystemExit("a check failed: see 'checks' above")


if __name__ == "__main__":
    main()
