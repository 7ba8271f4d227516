"""Benchmark of the Part II cost model. Run by hand: `python bench/estimate.py`.

1. Time per call of estimate_rl_step (Qwen2.5-7B, GRPO 32 x 16, P = 512, R = 4096, 64 H100s),
   median of 200 calls after a warm-up (goal: under 1 ms).
2. A sweep: 8 response lengths x 7 GPU counts x 2 algorithms = 112 calls (goal: under 0.5 s).

Prints the figures and writes bench/estimate_results.json. Timings depend on the machine: they
are reported in notes, never asserted by tests.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlmperf_lite.cost import estimate_rl_step  # noqa: E402

BASE = dict(actor="qwen2.5-7b", hardware="h100", prompts=32, group_size=16, prompt_len=512,
            response_len=4096, gpus=64)


def per_call() -> float:
    estimate_rl_step("grpo", **BASE)
    times = []
    for _ in range(200):
        t = time.perf_counter()
        estimate_rl_step("grpo", **BASE)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sweep() -> float:
    t = time.perf_counter()
    for algo in ("grpo", "ppo"):
        for r in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768):
            for g in (8, 16, 32, 64, 128, 256, 512):
                estimate_rl_step(algo, **{**BASE, "response_len": r, "gpus": g})
    return time.perf_counter() - t


if __name__ == "__main__":
    results = {"estimate_rl_step_median_s": per_call(), "sweep_112_calls_s": sweep()}
    print(f"estimate_rl_step: {results['estimate_rl_step_median_s'] * 1e3:.3f} ms per call "
          f"(goal < 1 ms); sweep of 112 calls: {results['sweep_112_calls_s']:.3f} s")
    (ROOT / "bench" / "estimate_results.json").write_text(json.dumps(results, indent=1) + "\n")
