"""The calculators of the toy RL system on Ray (book chapter "A mini RL system on Ray"): a live
widget that runs Ray and sets each run beside the simulator's prediction, and a no-kernel
calculator of the prediction from per-phase costs, evaluated over a grid when the book is built.
They hold no formulas: the numbers are :func:`~rlmperf_lite.distributed.predict_run`'s and
:func:`~rlmperf_lite.distributed.compare_run`'s, drawn by
:mod:`rlmperf_lite.book.ray_views`.
"""
from __future__ import annotations

import itertools

from ..checks import check_choice, check_int
from ..distributed import (MODES, REFERENCE_COSTS, ToyCosts, check_layout, compare_run,
                           mode_config, mode_staleness, predict_run)
from .grid_charts import grid_chart
from .ray_views import error_table_html, measured_vs_predicted_chart
from .widgets import wire

__all__ = ["RAY_GRID", "STEP_TIME", "THROUGHPUT", "ray_grid", "ray_grid_chart",
           "WIDGET_MAX_STEPS", "WIDGET_MAX_WORKERS", "ray_widget"]


# ---- no-kernel calculator ----------------------------------------------------------------------
STEP_TIME, THROUGHPUT = "step time (s)", "throughput (tokens/s per device)"
RAY_GRID = {"mode": (("colocated", None), ("sync", None), ("one_step_off", None), ("async", 2),
                     ("async", 4)),
            "rollout_workers": (1, 2, 4), "learners": (1, 2)}
"""The grid of :func:`ray_grid`: (mode, staleness) pairs, rollout workers W and learners L
(colocated only where W = L, as the controller requires)."""


def _mode_label(mode: str, staleness) -> str:
    return mode if staleness is None else f"{mode} k={staleness}"


def ray_grid(costs: ToyCosts = REFERENCE_COSTS, grid: dict | None = None, *,
             steps: int = 12) -> list[dict]:
    """:func:`~rlmperf_lite.distributed.predict_run` of the toy with ``costs`` over the
    grid (``RAY_GRID``): one row per setting and measure (``STEP_TIME``, ``THROUGHPUT``) with
    ``mode`` (a label), ``rollout_workers``, ``learners``, ``measure``, ``value``. Layouts
    the controller cannot run (colocated with W != L, W or L more than the B prompts) give no
    rows; every other setting must be valid.

    Raises:
        ValueError: naming ``costs``, ``steps`` or ``grid`` (not a dict of RAY_GRID's keys,
            an empty or bad entry, a (mode, staleness) pair the library refuses, or no point a
            possible layout).
    """
    if not isinstance(costs, ToyCosts):
        raise ValueError(f"costs must be a ToyCosts (e.g. REFERENCE_COSTS or measured_costs of "
                         f"a run), got {type(costs).__name__}")
    check_int("steps", steps, 1)
    grid = RAY_GRID if grid is None else grid
    if not isinstance(grid, dict) or set(grid) != set(RAY_GRID):
        keys = sorted(grid) if isinstance(grid, dict) else type(grid).__name__
        raise ValueError(f"grid must be a dict with exactly the keys {sorted(RAY_GRID)} (as "
                         f"RAY_GRID), got {keys}")
    for key in RAY_GRID:
        if not isinstance(grid[key], (tuple, list)) or not grid[key]:
            raise ValueError(f"grid[{key!r}] must be a non-empty tuple or list, got "
                             f"{grid[key]!r}")
    for pair in grid["mode"]:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"grid['mode'] holds (mode, staleness) pairs, got {pair!r}")
        try:
            mode_staleness(*pair)
        except ValueError as err:
            raise ValueError(f"grid['mode'] entry {tuple(pair)!r}: {err}") from None
    for key in ("rollout_workers", "learners"):
        for n in grid[key]:
            check_int(f"grid[{key!r}] entry", n, 1)
    rows = []
    for (mode, k), W, L in itertools.product(grid["mode"], grid["rollout_workers"],
                                             grid["learners"]):
        try:
            check_layout(mode, costs.num_prompts, W, L)
        except ValueError:                     # a layout the controller cannot run: no bar
            continue
        r = predict_run(costs, mode, steps, staleness=k, num_rollout_workers=W, num_learners=L)
        point = {"mode": _mode_label(mode, k), "rollout_workers": W, "learners": L}
        rows.append({**point, "measure": STEP_TIME, "value": r.step_time_s})
        rows.append({**point, "measure": THROUGHPUT,
                     "value": r.throughput_tokens_per_s_per_gpu})
    if not rows:
        raise ValueError(f"no point of grid is a layout the controller can run (colocated needs "
                         f"rollout_workers = learners; both at most num_prompts="
                         f"{costs.num_prompts}); got {grid!r}")
    return rows


def ray_grid_chart(rows: list[dict], *, start: dict | None = None):
    """Bars of the predicted measure per mode, for the rollout workers, learners and measure
    chosen with the page's own dropdowns (no kernel needed); ``rows`` from :func:`ray_grid`."""
    return grid_chart(rows, controls=["rollout_workers", "learners", "measure"],
                      category="mode", value="value",
                      value_title="predicted (the measure chosen)",
                      title="The toy on Ray, predicted from per-phase costs (no kernel needed)",
                      start=start)


# ---- live widget -------------------------------------------------------------------------------
WIDGET_MAX_STEPS = 50
"""The most steps :func:`ray_widget` runs (a few minutes on a laptop; the cell blocks while Ray
runs), so a typo does not start an hours-long run."""


WIDGET_MAX_WORKERS = 2
"""The most rollout workers :func:`ray_widget` starts: with two, Ray, its actors and the toy use
0.85 GB (proportional set size, measured on x86_64 with Ray 2.60), with four 1.01 GB, over the
1 GB a Binder guarantees."""


def _check_widget_workers(workers) -> None:
    check_int("rollout W", workers, 1)
    if workers > WIDGET_MAX_WORKERS:
        raise ValueError(f"rollout W={workers} is more than the widget starts (at most "
                         f"{WIDGET_MAX_WORKERS}: more does not fit a 1 GB Binder); call "
                         f"train_ray with num_rollout_workers on a larger machine")


def _check_widget_steps(steps) -> None:
    check_int("steps", steps, 2)                  # compare_run: a warm-up step and a steady one
    if steps > WIDGET_MAX_STEPS:
        raise ValueError(f"steps={steps} is more than the widget runs (at most "
                         f"{WIDGET_MAX_STEPS}, as the cell blocks while Ray runs); call "
                         f"train_ray and compare_run for a longer run")


def ray_widget(config, *, base_params: dict, runs: dict | None = None, mode: str = "sync",
               steps: int = 10, staleness: int = 2, num_rollout_workers: int = 1):
    """A live calculator that runs Ray: mode, staleness (for ``"async"``), steps and rollout
    workers drive :func:`~rlmperf_lite.distributed.train_ray` (from ``base_params``, with
    ``config``'s other settings) and :func:`~rlmperf_lite.distributed.compare_run`; it
    shows the error table and the measured timeline over the predicted one for the last three
    steps. ``runs``: finished runs to show instead of running again, keyed (mode, staleness,
    steps, rollout workers). ``steps``: 2 to :data:`WIDGET_MAX_STEPS`; rollout workers: 1 to
    :data:`WIDGET_MAX_WORKERS`. A run that finds Ray down (the lab's last cell stopped it)
    starts it and stops it again. Bad inputs show the library's ValueError message.

    Raises:
        ValueError: naming ``mode``, ``steps`` or the rollout W (the starting values).
    """
    import ipywidgets as w
    import ray

    from ..distributed import shutdown_ray, train_ray

    check_choice("mode", mode, MODES)
    _check_widget_steps(steps)
    _check_widget_workers(num_rollout_workers)
    cache = dict(runs or {})
    controls = {"mode": w.Dropdown(options=list(MODES), value=mode, description="mode"),
                "staleness": w.IntText(value=staleness, description="k (async)"),
                "steps": w.IntText(value=steps, description="steps"),
                "workers": w.IntText(value=num_rollout_workers, description="rollout W")}
    message = w.HTML()                            # compute writes its progress note here

    def compute(v):
        _check_widget_steps(v["steps"])
        _check_widget_workers(v["workers"])
        cfg = mode_config(config, v["mode"], steps=v["steps"],
                          staleness=v["staleness"] if v["mode"] == "async" else None)
        key = (v["mode"], cfg.staleness, v["steps"], v["workers"])
        if key not in cache:
            message.value = "running on Ray ..."
            W, started = v["workers"], not ray.is_initialized()
            try:
                cache[key] = train_ray(cfg, mode=v["mode"], base_params=base_params,
                                       num_rollout_workers=W,
                                       num_learners=W if v["mode"] == "colocated" else 1)
            finally:
                if started:                       # Ray was down: leave it down
                    shutdown_ray()
        comparison = compare_run(cache[key], cfg)
        return error_table_html({key[0]: comparison}), [measured_vs_predicted_chart(
            cache[key], comparison, steps=range(max(0, v["steps"] - 3), v["steps"]))]

    message, out = wire(controls, compute, message=message)
    return w.VBox([w.HBox(list(controls.values())), message, out])
