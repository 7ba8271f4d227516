"""Benchmark of the RL-system simulator. Run by hand: `python bench/sim.py`.

Simulated RL steps per second of wall time for 128-GPU systems of Qwen2.5-7B on H20 with
verl's fully-async workload (512 prompts x 16 responses per step, up to 28K tokens; see
rlmperf_lite/sim/reproduce.py): the colocated synchronous layout on 128 GPUs, and the 64:64
disaggregated layout, fully async (staleness 0.5, 4 streaming updates, partial rollout).
Median of 3 runs of 20 steps. Prints the figures and writes bench/sim_results.json. Timings
depend on the machine: they are reported in notes, never asserted by tests.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlmperf_lite.sim import simulate  # noqa: E402
from rlmperf_lite.sim.reproduce import verl_ablation_system, verl_ablation_workload  # noqa: E402

STEPS = 20
SYSTEMS = {"colocated sync, 128 GPUs": None, "disaggregated 64:64, fully async 0.5": 0.5}


def bench(staleness, runs: int = 3) -> dict:
    wl = verl_ablation_workload()
    system = verl_ablation_system(staleness, wl)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = simulate(system, wl, STEPS)
        times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    return {"gpus": system.gpus, "steps": STEPS, "samples": int(r.samples["group"].size),
            "wall_s": wall, "steps_per_s": STEPS / wall,
            "samples_per_s": r.samples["group"].size / wall}


if __name__ == "__main__":
    results = {name: bench(s) for name, s in SYSTEMS.items()}
    for name, r in results.items():
        print(f"{name}: {r['steps_per_s']:.1f} simulated steps/s "
              f"({r['samples']} samples in {r['wall_s']:.2f} s)")
    (ROOT / "bench" / "sim_results.json").write_text(json.dumps(results, indent=1) + "\n")
