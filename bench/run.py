"""Benchmarks of the Foundation issue, one thread. Run by hand: `python bench/run.py`.

1. Time to accuracy: wall time from a fresh process (`python -m rlmperf_lite train`) to held-out
   greedy accuracy >= 0.9, warm-start included, for seeds 0, 1, 2 (goal: <= 20 s each).
2. Train-step time, numpy vs PyTorch eager on the same architecture and batch, each in its own
   process, 5 times each, interleaved (goal: numpy no slower). Needs
   `pip install -r bench/requirements.txt`.
3. Share of a GRPO step's time spent inside matrix products (goal: at least half).
4. Continuous batching (issue 19): padding fraction and wall time of the static sampler (whole
   batch, and in waves of S rows) against `generate_continuous` with S slots, on variable-length
   generations (a random-init model on the addition task, max_new_tokens 20: its end-token
   probability gives varied lengths). `python bench/run.py --continuous` runs only this one and
   updates its entry of bench/results.json.
5. Time to think (issue 19): wall time from a fresh process (`python -m rlmperf_lite train --task
   cot`) to held-out greedy accuracy >= 0.95 on the chain-of-thought task, warm-start included,
   for seeds 0, 1, 2 (goal: <= 60 s each on one core). `python bench/run.py --cot` runs only this
   one and updates its entry of bench/results.json.
6. Generation's share of the step on this CPU (issue 19 section 2): the chain-of-thought GRPO
   loop at 16, 32, 64 and 128 sequences per step from one warm-start, the share predicted from
   per-op costs (`generation_share_sweep`) against the loop's own (goal: within a factor 2 at
   every batch; the measured share falls from 16 to 128). `python bench/run.py --share` runs
   only this one and updates its entry of bench/results.json.

Prints a table and writes bench/results.json. Timings depend on the machine: they are reported
in notes, never asserted by tests.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

# One thread everywhere, set the way the library sets it while training (threadpoolctl at run
# time; GRPOConfig.blas_threads = 1). Measured here: setting OPENBLAS_NUM_THREADS=1 before numpy
# loads instead made the same numpy step about 1.3-1.6x slower on this machine.
threadpool_limits(limits=1)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_to_accuracy(seed: int, target: float = 0.9, task: str = "addition",
                     eval_every: int = 25) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "rlmperf_lite", "train", "--task", task, "--seed", str(seed),
         "--json", "--eval-every", str(eval_every), "--stop-at-accuracy", str(target)],
        capture_output=True, text=True, check=True, cwd=ROOT, env=os.environ.copy())
    wall_s = time.perf_counter() - t0
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    acc = summary["eval_accuracy"]
    return {"seed": seed, "wall_s": wall_s, "warmstart_s": summary["warmstart_s"],
            "steps": summary["steps"], "eval_accuracy": acc, "reached": acc >= target}


def cot_time_to_accuracy() -> list:
    """Item 5: seeds 0, 1, 2 of the CoT task to 0.95 (evaluating every 50 steps: one held-out
    evaluation decodes 1,000 problems for up to 23 tokens, so checking every 25 costs more)."""
    return [time_to_accuracy(s, 0.95, "cot", 50) for s in (0, 1, 2)]


def _batch(seed=0):
    """A realistic GRPO batch: rollout of the warm-started model on B*G samples."""
    from rlmperf_lite.nn import TinyLMConfig, generate
    from rlmperf_lite.rl import grpo_advantages, warm_start
    from rlmperf_lite.tasks import AdditionTask
    cfg, task = TinyLMConfig(), AdditionTask()
    rng = np.random.default_rng(seed)
    params, _ = warm_start(cfg, task, rng)
    prompts, pairs = task.sample_prompts(rng, 32)
    r = generate(params, prompts, cfg, max_new_tokens=5, eos_id=task.eos_id, pad_id=task.pad_id,
                 group_size=4, rng=rng)
    rewards = task.reward(np.repeat(pairs, 4, axis=0), r.tokens[:, r.prompt_len:])
    # the same shape whatever the sampled lengths: pad every completion to R = 5 (T = 11)
    extra = 5 - r.completion_mask.shape[1]
    r.tokens = np.pad(r.tokens, ((0, 0), (0, extra)), constant_values=task.pad_id)
    r.completion_mask = np.pad(r.completion_mask, ((0, 0), (0, extra)))
    r.per_token_logps = np.pad(r.per_token_logps, ((0, 0), (0, extra)))
    return cfg, task, params, r, grpo_advantages(rewards, 4)


def numpy_update_step(cfg, params, r, adv, opt):
    from rlmperf_lite.nn import clip_grad_norm, logps_backward, logps_forward
    from rlmperf_lite.rl import aggregate_weights, policy_loss_grad
    P = r.prompt_len
    logps_all, cache = logps_forward(params, r.tokens, cfg)
    logps = logps_all[:, P - 1:]
    dlogps = np.zeros_like(logps_all)
    dlogps[:, P - 1:] = aggregate_weights(r.completion_mask) * policy_loss_grad(
        logps, r.per_token_logps, adv, r.completion_mask)
    grads = logps_backward(dlogps, cache)
    clip_grad_norm(grads, 1.0)
    opt.step(params, grads)


def median_s(fn, repeats=60, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def step_time(impl: str) -> dict:
    """Median time of one update step (forward, backward, clip, AdamW) of ``impl``:
    "numpy" (rlmperf_lite) or "torch" (bench/torch_ref.py), on the same batch."""
    from rlmperf_lite.nn import AdamW
    cfg, _, params, r, adv = _batch()
    if impl == "numpy":
        opt = AdamW(params, lr=1e-3)
        return {"update_s": median_s(lambda: numpy_update_step(cfg, params, r, adv, opt)),
                "tokens_shape": list(r.tokens.shape), "blas": _blas()}
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from torch_ref import make_update
    _, step = make_update(cfg)
    t = (torch.as_tensor(r.tokens), torch.as_tensor(r.per_token_logps),
         torch.as_tensor(adv), torch.as_tensor(r.completion_mask))
    return {"update_s": median_s(lambda: step(*t, r.prompt_len)),
            "tokens_shape": list(r.tokens.shape), "torch_version": torch.__version__}


def _child(impl: str, drop=()) -> dict:
    """Run :func:`step_time` in a fresh process (numpy and torch never share one: their thread
    runtimes interact), with one thread set before any library loads."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, __file__, "--step", impl], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def matmul_share() -> dict:
    """Time inside rlmperf_lite's counted matrix products over whole GRPO steps."""
    import rlmperf_lite.nn.flops as flops
    from rlmperf_lite.nn import layers, model, sampling
    from rlmperf_lite.rl import GRPOConfig, train_grpo
    inside = [0.0]
    raw = flops.mm

    def timed_mm(a, b):
        t = time.perf_counter()
        out = raw(a, b)
        inside[0] += time.perf_counter() - t
        return out

    for mod in (layers, model, sampling):
        mod.mm = timed_mm
    marks = []                      # time inside mm when each step ends
    try:
        res = train_grpo(GRPOConfig(steps=200), on_step=lambda row: marks.append(inside[0]))
    finally:
        for mod in (layers, model, sampling):
            mod.mm = raw
    steps = res.history[1:]         # from the end of step 0: the warm-start is not a GRPO step
    total = sum(h["step_s"] for h in steps)
    matmul = marks[-1] - marks[0]
    return {"steps": len(steps), "steps_s": total, "matmul_s": matmul,
            "matmul_share": matmul / total}


def continuous_batching(num_prompts=32, group_size=4, num_slots=32, max_new_tokens=20,
                        repeats=5) -> dict:
    """Padding fraction and best wall time: static (all n rows), static in waves of
    ``num_slots`` rows, and continuous with ``num_slots`` slots; same seeds, same tokens
    (rlmperf_lite.cost.measure_batching, which the book's lab uses)."""
    from rlmperf_lite.cost import measure_batching
    from rlmperf_lite.nn import TinyLMConfig, init_params
    from rlmperf_lite.tasks import AdditionTask
    task = AdditionTask()
    prompts, _ = task.sample_prompts(np.random.default_rng(0), num_prompts)
    cfg = TinyLMConfig(max_seq_len=prompts.shape[1] + max_new_tokens)
    params = init_params(cfg, np.random.default_rng(0))
    n = num_prompts * group_size
    args = dict(seeds=list(range(n)), max_new_tokens=max_new_tokens, eos_id=task.eos_id,
                pad_id=task.pad_id, group_size=group_size, repeats=repeats)
    whole = measure_batching(params, prompts, cfg, num_slots=n, **args)      # one wave of n
    slots = measure_batching(params, prompts, cfg, num_slots=num_slots, **args)
    assert whole["same_outputs"] and slots["same_outputs"]
    out = {"n": n, "num_slots": num_slots, "max_new_tokens": max_new_tokens,
           "length_mean": float(slots["lengths"].mean()),
           "length_max": int(slots["lengths"].max())}
    for name, res, kind in (("static", whole, "static"), ("static_waves", slots, "static"),
                            ("continuous", slots, "continuous")):
        stats = res[kind]
        out[name] = {"row_steps": stats.row_steps, "padding_row_steps": stats.padding_row_steps,
                     "padding_fraction": stats.padding_row_steps / stats.row_steps,
                     "wall_s_best": res[f"{kind}_s"]}
    return out


def generation_share(sequences=(16, 32, 64, 128), steps=7, repeats=15) -> dict:
    from rlmperf_lite.cost import generation_share_sweep
    from rlmperf_lite.rl import GRPOConfig, train_grpo
    from rlmperf_lite.tasks import CoTTask
    t = time.perf_counter()
    base = train_grpo(GRPOConfig.for_cot(steps=1, seed=0), task=CoTTask()).base_params
    warm_s, t = time.perf_counter() - t, time.perf_counter()
    rows = generation_share_sweep(list(sequences), steps=steps, repeats=repeats,
                                  base_params=base)
    ratios = [r["predicted_share"] / r["measured_share"] for r in rows]
    return {"warmstart_s": warm_s, "sweep_s": time.perf_counter() - t, "steps": steps,
            "repeats": repeats, "rows": rows, "predicted_over_measured": ratios,
            "within_factor_2": all(0.5 < x < 2 for x in ratios),
            "measured_falls": rows[-1]["measured_share"] < rows[0]["measured_share"]}


def _blas() -> list:
    from threadpoolctl import threadpool_info
    return [{k: i.get(k) for k in ("internal_api", "num_threads", "version", "architecture")}
            for i in threadpool_info()]


def main():
    if sys.argv[1:2] == ["--step"]:               # child process, see _child
        print(json.dumps(step_time(sys.argv[2])))
        return
    alone = {"--continuous": ("continuous_batching", continuous_batching),
             "--cot": ("cot_time_to_accuracy", cot_time_to_accuracy),
             "--share": ("generation_share", generation_share)}
    if sys.argv[1:2] and sys.argv[1] in alone:    # this entry alone, into the existing results
        key, fn = alone[sys.argv[1]]
        path = ROOT / "bench" / "results.json"
        results = json.loads(path.read_text())
        results[key] = fn()
        print(json.dumps(results[key], indent=2))
        path.write_text(json.dumps(results, indent=2) + "\n")
        return
    if sys.argv[1:2] == ["--share"]:              # this entry alone, into the existing results
        path = ROOT / "bench" / "results.json"
        results = json.loads(path.read_text())
        results["generation_share"] = generation_share()
        print(json.dumps(results["generation_share"], indent=2))
        path.write_text(json.dumps(results, indent=2) + "\n")
        return
    results = {"blas": _blas(), "env": {k: os.environ.get(k) for k in
                                        ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}
    # Some machines force an older OpenBLAS kernel (OPENBLAS_CORETYPE) for safety; measure numpy
    # with it and with OpenBLAS's own choice, each in a fresh process, and torch in another.
    # Process-to-process spread is large for these small matrices (memory placement, clocks):
    # run each side in 5 fresh processes, interleaved, and keep every median.
    runs = {"torch": [], "numpy_as_configured": [], "numpy_openblas_autodetect": []}
    for _ in range(5):
        runs["torch"].append(_child("torch")["update_s"])
        runs["numpy_as_configured"].append(_child("numpy")["update_s"])
        runs["numpy_openblas_autodetect"].append(
            _child("numpy", ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))["update_s"])
    torch_med = statistics.median(runs["torch"])
    results["step_vs_torch"] = {
        k: {"update_s_median": statistics.median(v), "update_s_runs": v,
            "over_torch_median": statistics.median(v) / torch_med} for k, v in runs.items()}
    results["time_to_accuracy"] = [time_to_accuracy(s) for s in (0, 1, 2)]
    results["matmul_share"] = matmul_share()
    results["continuous_batching"] = continuous_batching()
    results["cot_time_to_accuracy"] = cot_time_to_accuracy()
    results["generation_share"] = generation_share()
    print(json.dumps(results, indent=2))
    (ROOT / "bench" / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
