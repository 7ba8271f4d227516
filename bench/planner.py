"""Benchmark of the Part III plan search. Run by hand: `python bench/planner.py`.

search_plans for 1024 H100s, global batch 1024 sequences of 4096 tokens, micro-batch 1, on a
dense model (Qwen2.5-72B) and a MoE model (Qwen3-235B-A22B): median of 5 runs of the search
(candidates costed and ranked as arrays) and of the search plus building every RankedPlan and
rejection reason (goal: under 1 s). Prints the figures and writes bench/planner_results.json.
Timings depend on the machine: they are reported in notes, never asserted by tests.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlmperf_lite.cost import (TrainWorkload, hardware_preset, model_preset,  # noqa: E402
                               search_plans)

GPUS = 1024
WORKLOAD = TrainWorkload(global_batch=1024, seq_len=4096, micro_batch_size=1)
MODELS = ("qwen2.5-72b", "qwen3-235b-a22b")


def bench(name: str, runs: int = 5) -> dict:
    model, hw = model_preset(name), hardware_preset("h100")
    search_plans(model, hw, GPUS, WORKLOAD)                                # warm-up
    search_s, full_s = [], []
    for _ in range(runs):
        t = time.perf_counter()
        result = search_plans(model, hw, GPUS, WORKLOAD)
        search_s.append(time.perf_counter() - t)
        _ = result.ranked, result.rejected
        full_s.append(time.perf_counter() - t)
    best = result.best
    return {"model": name, "gpus": GPUS, "candidates": result.num_enumerated,
            "valid": result.num_valid, "search_median_s": statistics.median(search_s),
            "search_and_lists_median_s": statistics.median(full_s),
            "best_plan": best.plan.as_dict() if best else None,
            "best_step_time_s": best.step_time_s if best else None}


if __name__ == "__main__":
    results = {"workload": WORKLOAD.__dict__, "hardware": "h100",
               "runs": [bench(name) for name in MODELS]}
    for r in results["runs"]:
        print(f"{r['model']}: {r['candidates']} plans, {r['valid']} valid; search "
              f"{r['search_median_s']:.3f} s, with ranked/rejected lists "
              f"{r['search_and_lists_median_s']:.3f} s (goal < 1 s); best "
              f"{r['best_step_time_s']:.2f} s/step with {r['best_plan']}")
    (ROOT / "bench" / "planner_results.json").write_text(json.dumps(results, indent=1) + "\n")
