"""Members of the GRPO family over several seeds, one process per run (book section
:ref:`sec-variants-toy`).

A sweep trains every (variant, seed) pair to a held-out accuracy target and records how many
steps, samples and seconds each took. Runs that share a seed share one warm-started base model
(computed once per seed), so every variant starts from the same policy and differs only in its
algorithm. Runs go to a pool of worker processes, one per available core by default; each run pins
its BLAS to one thread (``RLConfig.blas_threads``), so a run's numbers do not depend on how many
run beside it, only its wall time does.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from ..checks import check_int, check_number
from ..tasks import AdditionTask
from .common import blas_limits
from .grpo import GRPOConfig, train_grpo
from .warmstart import warm_start

__all__ = ["SweepRun", "run_sweep", "sweep_table"]

_WARMSTART_FIELDS = ("model", "warmstart_max_steps", "warmstart_target_accuracy", "seed")


@dataclass(frozen=True)
class SweepRun:
    """One (variant, seed) run of a sweep.

    Attributes:
        variant, seed: what ran (a name of ``GRPOConfig.VARIANTS`` and the config's seed).
        samples_per_step: B * G, completions generated per sampling round.
        history: the loop's per-step metrics (``eval_accuracy`` every ``eval_every`` steps).
    """

    variant: str
    seed: int
    samples_per_step: int
    target_accuracy: float
    history: tuple

    @property
    def curve(self) -> list[dict]:
        """Held-out accuracy at each evaluation — dicts with step, samples (completions generated
        so far, DAPO's resampled ones included), train_s (seconds in training steps so far) and
        eval_accuracy."""
        out, samples, train_s = [], 0, 0.0
        for h in self.history:
            samples += self.samples_per_step * (1 + h["resample_rounds"])
            train_s += h["step_s"]
            if "eval_accuracy" in h:
                out.append({"step": h["step"] + 1, "samples": samples, "train_s": train_s,
                            "eval_accuracy": h["eval_accuracy"]})
        return out

    @property
    def reached(self) -> dict | None:
        """The first evaluation at or above ``target_accuracy`` (a :attr:`curve` row), or None."""
        return next((p for p in self.curve if p["eval_accuracy"] >= self.target_accuracy), None)


def run_sweep(variants=("grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp"), seeds=(0, 1, 2), *,
              target_accuracy: float = 0.9, eval_every: int = 25, max_workers: int | None = None,
              progress: bool = True, **overrides) -> list[SweepRun]:
    """Train each variant from each seed until held-out greedy accuracy reaches
    ``target_accuracy`` (checked every ``eval_every`` steps) or the config's ``steps`` run out.

    Args:
        variants: names of ``GRPOConfig.VARIANTS``.
        seeds: ints; one base model is warm-started per seed and shared by its variants.
            In a script, call run_sweep under ``if __name__ == "__main__":`` (worker processes
            are started with "spawn", which imports the script again).
        max_workers: worker processes; None = the cores this process may use; 1 = run
            everything in this process (no pool).
        overrides: ``GRPOConfig`` fields applied to every variant (e.g. ``steps=600``).
    Returns:
        SweepRun per (variant, seed), ordered as ``variants`` then ``seeds``.
    Raises:
        ValueError: an unknown variant, an empty or repeated list, a bad ``max_workers`` or
            target, or any ``GRPOConfig`` check (raised before anything runs).
    """
    configs = _sweep_configs(variants, seeds, target_accuracy, eval_every, max_workers,
                             overrides)
    variants, seeds = list(variants), list(seeds)
    task = AdditionTask()
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)                          # Linux, or macOS / Windows
    workers = min(max_workers or cores, len(configs))
    bar = tqdm(total=len(configs), desc="runs", unit="run", ascii=True,   # a text bar: it also
               disable=not progress)                                  # shows in saved HTML
    runs = {}
    if workers == 1:
        bases = {s: _warm_start(configs[variants[0], s], task) for s in seeds}
        for key, c in configs.items():
            runs[key] = _run(c, key[0], task, bases[key[1]], eval_every, target_accuracy)
            bar.update()
    else:
        ctx = multiprocessing.get_context("spawn")          # no fork of a threaded kernel
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            bases = {s: pool.submit(_warm_start, configs[variants[0], s], task) for s in seeds}
            futures = {key: pool.submit(_run, c, key[0], task, bases[key[1]].result(),
                                        eval_every, target_accuracy)
                       for key, c in configs.items()}
            for key, fut in futures.items():
                runs[key] = fut.result()
                bar.update()
    bar.close()
    return [runs[v, s] for v in variants for s in seeds]


def _sweep_configs(variants, seeds, target_accuracy, eval_every, max_workers,
                   overrides) -> dict:
    """The checks of :func:`run_sweep` (before anything runs): {(variant, seed): GRPOConfig}."""
    for name, items, kind in (("variants", variants, str), ("seeds", seeds, int)):
        ok = isinstance(items, (list, tuple)) and items and all(
            isinstance(x, kind) and not isinstance(x, bool) for x in items)
        if not ok or len(set(items)) != len(items):
            raise ValueError(f"{name} must be a non-empty list of {kind.__name__}s without "
                             f"repeats, got {items!r}")
    if "seed" in overrides:
        raise ValueError("pass seeds=[...] rather than seed= (each run gets its own seed)")
    check_number("target_accuracy", target_accuracy, low=0, high=1, low_open=True)
    check_int("eval_every", eval_every, 1)
    check_int("max_workers", max_workers, 1, optional=True)
    configs = {(v, s): GRPOConfig.variant(v, seed=s, **overrides) for v in variants for s in seeds}
    for s in seeds:                     # one base model per seed must fit all its variants
        if len({tuple(getattr(configs[v, s], f) for f in _WARMSTART_FIELDS)
                for v in variants}) > 1:
            raise ValueError(f"variants of seed {s} differ in a warm-start field "
                             f"{_WARMSTART_FIELDS}; they cannot share a base model")
    return configs


def _warm_start(c: GRPOConfig, task: AdditionTask) -> dict:
    """The base model ``train_grpo`` would warm-start for this config (same random stream)."""
    rng_init = np.random.default_rng(c.seed).spawn(3)[0]
    with blas_limits(c):
        params, _ = warm_start(c.model, task, rng_init, max_steps=c.warmstart_max_steps,
                               target_accuracy=c.warmstart_target_accuracy)
    return params


def _run(c, variant, task, base_params, eval_every, target_accuracy) -> SweepRun:
    r = train_grpo(c, task=task, base_params=base_params, eval_every=eval_every,
                   stop_at_accuracy=target_accuracy)
    return SweepRun(variant, c.seed, c.num_prompts * c.group_size, target_accuracy,
                    tuple(r.history))


def sweep_table(runs: list[SweepRun]) -> list[dict]:
    """Per variant: runs that reached the target, and mean / min / max over those runs of the
    steps, samples and training seconds it took (held-out evaluation time not included).
    A variant with no run at the target has None in those fields."""
    table = []
    for variant in dict.fromkeys(r.variant for r in runs):
        hits = [p for r in runs if r.variant == variant and (p := r.reached)]
        row = {"variant": variant, "runs": sum(r.variant == variant for r in runs),
               "reached": len(hits)}
        for key in ("step", "samples", "train_s"):
            vals = [p[key] for p in hits]
            row[key] = (sum(vals) / len(vals), min(vals), max(vals)) if vals else None
        table.append(row)
    return table
