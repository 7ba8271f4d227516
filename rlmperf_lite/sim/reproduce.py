"""A published direction reproduced from its stated inputs: verl's fully-async staleness
ablation (book section :ref:`sec-staleness-sweep`).

verl's ``docs/advance/fully_async.md`` ("128-card Stale Ablation Experiment") trains
Qwen2.5-Math-7B with DAPO on 128 H20 GPUs, 64 generating and 64 training, in the "async stream
pipeline with partial rollout" mode: 16 responses per prompt, ``ppo_mini_batch_size`` 32 prompts,
``require_batches`` 4 and ``trigger_parameter_sync_step`` 4 (so 4 streaming updates of 128
prompts per weight version, 512 prompts per version), responses up to 28K tokens, log-probs
from the rollout (no recompute). Measured seconds per step: 231.34 at staleness 0, 171.30 at
0.1, 146.11 at 0.3, 150.63 at 0.5; the colocated synchronous baseline on all 128 GPUs: 356.30.

What the doc does not state is assumed here and said so: the prompt length (512), the
distribution of response lengths (log-normal, mean 1500 tokens, sigma 1, cut at 28,672), the
efficiencies of the cost model (training 0.5 of peak, decode 0.6 of the memory bandwidth). The
simulator is asked for the shape — a fall, then a flat — not the seconds.
"""
from __future__ import annotations

from ..checks import progress_bar
from .from_cost import system_from_cost
from .workload import Workload

__all__ = ["VERL_STALENESS_ABLATION", "verl_ablation_workload", "verl_ablation_system",
           "reproduce_verl_staleness_ablation"]

def _ablation() -> dict:
    """The ablation's rows of ``data/published_runs.json`` (their one home)."""
    from .published import PUBLISHED_RUNS
    rows = PUBLISHED_RUNS["rows"]
    table = "128-card Stale Ablation Experiment"
    base = next(r for r in rows if r["id"] == "verl-fa-7b-colocated-128")
    return {"source": f"verl docs/advance/fully_async.md, '{table}' "
                      f"(https://github.com/volcengine/verl)",
            "step_s": {float(r["layout"]["staleness"]): r["published"]["step"] for r in rows
                       if table in r["tables"]},
            "colocated_sync_step_s": base["published"]["step"]}


VERL_STALENESS_ABLATION = _ablation()
"""The published step times (seconds) by ``staleness_threshold``, and the colocated baseline,
read from ``rlmperf_lite/sim/data/published_runs.json``
(:data:`~rlmperf_lite.sim.published.PUBLISHED_RUNS`)."""


def verl_ablation_workload(mean_response_len: float = 1500.0, length_sigma: float = 1.0,
                           seed: int = 0) -> Workload:
    """512 prompts x 16 responses per weight version, up to 28K tokens (stated), prompt 512
    and the length distribution (assumed)."""
    return Workload(prompts=512, group_size=16, prompt_len=512,
                    mean_response_len=mean_response_len, max_response_len=28 * 1024,
                    length_sigma=length_sigma, seed=seed)


def verl_ablation_system(staleness: float | None, workload: Workload | None = None, *,
                         train_efficiency: float = 0.5, decode_efficiency: float = 0.6):
    """The fully-async system at ``staleness`` (64:64 H20, 4 streaming updates, partial
    rollout), or with ``staleness=None`` the colocated synchronous baseline on 128 H20."""
    wl = workload or verl_ablation_workload()
    common = dict(algo="dapo", gpus=128, train_efficiency=train_efficiency,
                  decode_efficiency=decode_efficiency)
    if staleness is None:
        return system_from_cost("qwen2.5-7b", "h20", wl, placement="colocated",
                                name="verl colocated sync (128)", **common)
    return system_from_cost("qwen2.5-7b", "h20", wl, placement="disaggregated",
                            rollout_gpus=64, recompute_old_logprobs=False, mode="async",
                            staleness=staleness, minibatches=4, partial_rollout=True,
                            name=f"verl fully async 64:64, staleness {staleness}", **common)


def reproduce_verl_staleness_ablation(stalenesses=(0.0, 0.1, 0.3, 0.5),
                                      steps: int | None = None,
                                      workload: Workload | None = None,
                                      progress: bool = False) -> list[dict]:
    """Simulated steady-state step time next to the published one, for each staleness and for
    the colocated baseline (``staleness`` None). Rows: ``staleness``, ``simulated_step_s``,
    ``published_step_s``, ``mean_staleness``, ``rollout_compute``, ``train_compute``.
    ``steps`` None: :func:`~rlmperf_lite.sim.steady_steps` steps, the steady window of
    :func:`~rlmperf_lite.sim.steady_step_time_s`; an int: that many steps
    (:attr:`~rlmperf_lite.sim.SimResult.step_time_s`). ``progress``: a text bar over the runs.

    Raises:
        ValueError: ``progress`` not a bool.
    """
    from . import simulate, steady_steps
    wl = workload or verl_ablation_workload()
    rows = []
    for s in progress_bar((None, *stalenesses), progress, desc="staleness runs", unit="run"):
        system = verl_ablation_system(s, wl)
        r = simulate(system, wl, steady_steps(system) if steps is None else steps)
        u = r.utilisation()
        published = (VERL_STALENESS_ABLATION["colocated_sync_step_s"] if s is None
                     else VERL_STALENESS_ABLATION["step_s"].get(float(s)))
        rows.append({"staleness": s, "simulated_step_s": r.step_time_s,
                     "published_step_s": published, "mean_staleness": float(r.staleness.mean()),
                     "rollout_compute": u.get("rollout", u.get("all"))["compute"],
                     "train_compute": u.get("train", u.get("all"))["compute"]})
    return rows
