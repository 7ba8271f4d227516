"""What a simulation returns, and the numbers the field reads off a run: step time, throughput,
utilisation per pool, staleness of the samples trained on (book section :ref:`sec-simulator`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_int
from .system import CPU, RLSystem
from .workload import Workload

__all__ = ["SimResult", "union_s", "STEADY_WARMUP_STEPS", "STEADY_WINDOW_STEPS", "steady_steps",
           "steady_step_time_s", "warmup_steps_for"]

STEADY_WARMUP_STEPS = 8
"""Steps left out before the steady window of :func:`steady_step_time_s` (the first steps of a
run start with an empty engine, or an engine's head start, and are faster or slower)."""

STEADY_WINDOW_STEPS = 24
"""The fewest steps :func:`steady_step_time_s` averages. With the warm-up, 32 steps: on the
16 + 16 and 24 + 8 systems of book section :ref:`sec-staleness-sweep` (bounds 0 to 8, streaming
or in batches, 1 or 4 updates per version) their mean is within 0.7% of a 256-step run's."""


def union_s(spans, lo: float, hi: float) -> float:
    """Length of the union of (start, end) ``spans`` clipped to [``lo``, ``hi``], in the spans'
    unit (seconds): the time during which at least one of them is running."""
    total, reach = 0.0, lo
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, hi)
        if b > a:
            total += b - a
            reach = b
    return total


@dataclass
class SimResult:
    """One simulated run. ``samples`` holds one entry per sample the engine started (arrays of
    equal length): ``start_s``, ``end_s`` (slot held; the run's end if still running),
    ``ready_s`` (group ready for training), ``replica``, ``response_len``, ``group``,
    ``consumed_step`` (the step whose update used it; -1 if none had yet: an asynchronous
    engine runs ahead), ``version_start``/``version_end`` (weight versions it was generated
    with). Tokens, staleness and work count the samples trained on; utilisation counts all.
    ``step_end_s[s]`` is when the weights of step s reach the engine; ``sync_windows`` the
    weight syncs; ``rollout_pauses`` the syncs that paused running samples; ``intervals`` the
    bars of the phases after generation (:class:`~rlmperf_lite.sim.phases.Interval`)."""

    system: RLSystem
    workload: Workload
    steps: int
    samples: dict
    step_end_s: np.ndarray
    sync_windows: list
    rollout_pauses: list
    intervals: list = field(repr=False)

    # -- step time and throughput -------------------------------------------------------
    @property
    def warmup_steps(self) -> int:
        """The steps left out of :attr:`step_time_s`: :func:`warmup_steps_for` the run."""
        return warmup_steps_for(self.system, self.steps)

    @property
    def step_times_s(self) -> np.ndarray:
        """Seconds between consecutive weight versions reaching the engine, shape (steps,)."""
        return np.diff(np.concatenate([[0.0], self.step_end_s]))

    @property
    def step_time_s(self) -> float:
        """The mean step time after :attr:`warmup_steps`, in seconds. Of a run shorter than
        :func:`~rlmperf_lite.sim.steady_steps` it is the last half's and moves with the run's
        length; quote :func:`~rlmperf_lite.sim.steady_step_time_s`."""
        return float(self.step_times_s[self.warmup_steps:].mean())

    @property
    def tokens_per_step(self) -> float:
        """Mean prompt + response tokens trained on per step."""
        tokens = self.workload.prompt_len + self.samples["response_len"][self.trained]
        return float(tokens.sum() / self.steps)

    @property
    def throughput_tokens_per_s_per_gpu(self) -> float:
        """Tokens per step / (step time x all GPUs) — verl's ``perf/throughput`` (prompt and
        response tokens of the batch over the step's wall time and every GPU of the job)."""
        return self.tokens_per_step / (self.step_time_s * self.system.gpus)

    @property
    def trained(self) -> np.ndarray:
        """Mask of the samples trained on (``consumed_step`` >= 0), shape (samples,)."""
        return self.samples["consumed_step"] >= 0

    def generation_span_s(self, step: int) -> float:
        """Seconds from the first start to the last end of the samples that step ``step``
        trained on: the step's generation, as a timeline shows it (book section
        :ref:`sec-placement-cost`).

        Raises:
            ValueError: naming ``step`` when no sample was trained at that step.
        """
        check_int("step", step, 0)
        mine = self.samples["consumed_step"] == step
        if not mine.any():
            raise ValueError(f"step={step}: no sample was trained at that step (the run has "
                             f"{self.steps} steps)")
        return float(self.samples["end_s"][mine].max() - self.samples["start_s"][mine].min())

    # -- staleness --------------------------------------------------------------------------
    @property
    def staleness(self) -> np.ndarray:
        """Versions between the weights that started each sample and those it trained, shape
        (samples,): 0 on-policy."""
        s = self.samples
        return (s["consumed_step"] - s["version_start"])[self.trained]

    def staleness_counts(self) -> dict:
        """{staleness: samples} over the samples trained on."""
        values, counts = np.unique(self.staleness.astype(int), return_counts=True)
        return {int(v): int(c) for v, c in zip(values, counts)}

    # -- utilisation -------------------------------------------------------------------------
    def _pool_spans(self, pool: str) -> tuple[list, float]:
        """Compute spans of ``pool`` (as GPU-weighted lists) and its GPUs."""
        spans = [(iv.start_s, iv.end_s, self.system.pools[pool]) for iv in self.intervals
                 if iv.pool == pool and iv.phase != "switch"]
        if pool == self.system.placement["rollout"]:
            tp = self.system.engine.tp
            pause = self.rollout_pauses
            s = self.samples
            for r in np.unique(s["replica"]):
                m = s["replica"] == r
                busy = sorted(zip(s["start_s"][m], s["end_s"][m]))
                spans += [(a, b, tp) for a, b in _subtract(_merge(busy), pause)]
        return spans, self.system.pools[pool]

    def utilisation(self, window=None) -> dict:
        """The shares {pool: {"compute", "sync", "switch", "idle"}} of each pool's GPU-seconds
        over ``window`` (default: the whole run), each in [0, 1], summing to 1. A replica counts as
        computing while it runs at least one sequence (not paused by a sync)."""
        lo, hi = window or (0.0, float(self.step_end_s[-1]))
        out = {}
        for pool, gpus in self.system.pools.items():
            if pool == CPU:
                continue
            spans, _ = self._pool_spans(pool)
            compute = sum(union_s([(a, b)], lo, hi) * g for a, b, g in spans)
            in_pool = {self.system.placement["rollout"], self.system.placement["actor"]}
            sync = union_s(self.sync_windows, lo, hi) * gpus if pool in in_pool else 0.0
            switch = sum(union_s([(iv.start_s, iv.end_s)], lo, hi) * gpus
                         for iv in self.intervals if iv.pool == pool and iv.phase == "switch")
            total = (hi - lo) * gpus
            shares = {"compute": compute / total, "sync": sync / total, "switch": switch / total}
            busy = sum(shares.values())
            if busy > 1 + 1e-9:          # a bar overlapping another on the pool: a simulator bug
                raise RuntimeError(f"pool {pool!r} is busy {busy:.3f} of the window: two phases "
                                   f"overlap on it; please report this system")
            shares["idle"] = max(0.0, 1.0 - busy)
            out[pool] = shares
        return out

    def slot_occupancy(self) -> float:
        """Mean share of the engine's slots running a sequence while it generates: the
        long-tail waste a busy/idle count hides."""
        s = self.samples
        held = s["end_s"] - s["start_s"]                                    # (samples,)
        for a, b in self.rollout_pauses:            # paused sequences hold a slot but not a GPU
            held -= np.clip(np.minimum(s["end_s"], b) - np.maximum(s["start_s"], a), 0, None)
        slot_s = float(held.sum())
        spans, _ = self._pool_spans(self.system.placement["rollout"])
        busy = sum((b - a) * g for a, b, g in spans if g == self.system.engine.tp)
        return slot_s / (busy / self.system.engine.tp * self.system.engine.slots) if busy else 0.0

    # -- work conservation --------------------------------------------------------------------
    @property
    def generated_tokens(self) -> float:
        """Response tokens of the samples trained on."""
        return float(self.samples["response_len"][self.trained].sum())

    @property
    def train_gpu_s(self) -> float:
        """GPU-seconds of the phases after generation (switches and syncs excluded)."""
        return float(sum((iv.end_s - iv.start_s) * self.system.pools[iv.pool]
                         for iv in self.intervals if iv.phase != "switch" and iv.pool != CPU))

    def summary(self) -> dict:
        """The headline numbers, as a flat dict."""
        u = self.utilisation()
        return {"system": self.system.name, "mode": self.system.mode,
                "staleness": self.system.staleness, "gpus": self.system.gpus,
                "step_time_s": self.step_time_s,
                "throughput_tokens_per_s_per_gpu": self.throughput_tokens_per_s_per_gpu,
                "mean_staleness": float(self.staleness.mean()),
                **{f"{p}_compute": v["compute"] for p, v in u.items()},
                **{f"{p}_idle": v["idle"] for p, v in u.items()}}


def _head_start(system: RLSystem) -> int:
    """Steps the asynchronous engine runs ahead before the first update: ceil(staleness) + 1."""
    return math.ceil(system.staleness) + 1 if system.mode == "async" else 0


def steady_steps(system: RLSystem) -> int:
    """Steps to simulate for :func:`steady_step_time_s` of ``system``: the warm-up,
    :data:`STEADY_WARMUP_STEPS` or the engine's head start (ceil(staleness) + 1 steps) if longer,
    plus :data:`STEADY_WINDOW_STEPS`."""
    return max(STEADY_WARMUP_STEPS, _head_start(system)) + STEADY_WINDOW_STEPS


def warmup_steps_for(system: RLSystem, steps: int) -> int:
    """The steps left out of a ``steps``-step run's step time (book section
    :ref:`sec-async-modes`). A run of at least :func:`steady_steps` steps: the steady warm-up,
    :data:`STEADY_WARMUP_STEPS` or the head start if longer, whatever the run's length. A
    shorter run: its first half, or its head start if longer, up to all steps but one."""
    check_int("steps", steps, 1)
    if steps >= steady_steps(system):
        return steady_steps(system) - STEADY_WINDOW_STEPS
    return min(max(steps // 2, _head_start(system)), steps - 1)


def steady_step_time_s(result: SimResult) -> float:
    """The steady-state step time of ``result``, in seconds: the mean over every step after
    the warm-up (:func:`warmup_steps_for`), at least :data:`STEADY_WINDOW_STEPS` of them. One
    window for every step time the book quotes as the steady state; simulate
    :func:`steady_steps` steps (book section :ref:`sec-async-modes`).

    Raises:
        ValueError: naming ``result`` when it is not a SimResult or ran fewer steps than
            :func:`steady_steps`.
    """
    if not isinstance(result, SimResult):
        raise ValueError(f"result must be a SimResult (from simulate), got "
                         f"{type(result).__name__}")
    need = steady_steps(result.system)
    if result.steps < need:
        raise ValueError(f"result ran {result.steps} steps, fewer than the warm-up plus the "
                         f"steady window: simulate steady_steps(system) = {need} steps")
    return result.step_time_s


def _merge(spans):
    out = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _subtract(spans, holes):
    """Spans minus the (sorted, disjoint) holes."""
    out = []
    for a, b in spans:
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out
