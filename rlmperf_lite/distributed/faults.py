"""The rollout workers, the work in flight on each, and what happens when one dies (book chapter
"A mini RL system on Ray").

A rollout worker holds no state the controller cannot rebuild: its weight version is in the
object store and its sampling stream's state came back with its last batch. So when a call
raises ``ray.exceptions.RayActorError`` (the process died: killed, out of memory, node lost) the
pool starts a new actor on that stream state, resends the weights and every rollout that was in
flight on the dead one, in order, and the run continues with the same numbers as if nothing had
happened. The learners are untouched. After ``max_replacements`` replacements (or if the new
actor cannot start) the step fails with :class:`WorkerLost`, a RuntimeError that says which
worker died and where the learner state is; so does the death of a learner or of the
reference/reward worker, whose calls in flight are lost, and the controller may then resume
from its last checkpoint (book section sec-ray-multinode). This is the single controller's
advantage (HybridFlow, Sheng et al. 2024, arXiv 2409.19256, §4): one process knows the whole
dataflow and can replay a part of it.
"""
from __future__ import annotations

import time
from collections import OrderedDict

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

__all__ = ["RolloutPool", "WorkerLost", "get_or_report", "raise_if_dead"]


class WorkerLost(RuntimeError):
    """Workers died whose loss this pool cannot repair: ``lanes`` (their lane names) at RL step
    ``step``; the message says what died with them and what to do."""

    def __init__(self, message: str, lanes: list, step: int):
        super().__init__(message)
        self.lanes, self.step = list(lanes), int(step)


class RolloutPool:
    """W rollout workers (:class:`~rlmperf_lite.distributed.RoleHandle`), each sampling its share
    of the prompts of a step with its own stream.

    Args:
        handles: one RoleHandle per worker, lanes ``rollout/rK`` (or colocated workers).
        rng_states: each worker's sampling-stream state before its first rollout.
        weight_refs: {version: ObjectRef of the weights}, kept up to date by the controller.
        make_worker: ``make_worker(k, rng_state) -> RoleHandle`` starts a replacement for
            worker k; None when workers cannot be replaced (colocated: the process also holds
            a learner).
        max_replacements: replacements allowed over the run.
        ready_timeout_s: seconds to wait for a replacement actor to start.
    ``replacements`` lists {step, lane, error, node_id (the dead actor's node), new_node_id,
    noticed_at_s (epoch seconds)} of each replacement.
    """

    def __init__(self, handles: list, rng_states: list, weight_refs: dict, *, make_worker=None,
                 max_replacements: int = 2, ready_timeout_s: float = 120.0):
        self.handles = list(handles)
        self.rng_done = list(rng_states)      # each stream's state after its last returned batch
        self.weight_refs = weight_refs
        self.make_worker = make_worker
        self.replacements_left = max_replacements
        self.max_replacements = max_replacements
        self.ready_timeout_s = ready_timeout_s
        self.sent_version = [None] * len(self.handles)
        self.inflight = [OrderedDict() for _ in self.handles]   # step -> (version, prompts, refs)
        self.replacements: list[dict] = []

    def submit(self, step: int, version: int, chunks: list) -> None:
        """Queue the rollout of ``step`` with weight ``version``: worker k samples ``chunks[k]``
        (its (b_k, P) prompts), after receiving the weights if it holds another version."""
        for k, prompts in enumerate(chunks):
            self._submit_one(k, step, version, prompts)

    def _submit_one(self, k: int, step: int, version: int, prompts) -> None:
        handle, refs = self.handles[k], []
        if self.sent_version[k] != version:
            refs.append(handle.set_weights(self.weight_refs.get(version), version, step))
            self.sent_version[k] = version
        refs.append(handle.call("generate", prompts, step, version))
        self.inflight[k][step] = (version, prompts, refs)

    def collect(self, step: int) -> tuple[list, list]:
        """Wait for every worker's rollout of ``step`` (replacing dead workers and resending
        their work); returns (one generate result per worker, the weight-sync results).

        Raises:
            WorkerLost: a worker died and cannot be replaced.
            ray.exceptions.RayTaskError: a call failed inside a live worker (e.g. the weights it
                was sent came from a learner that died); the controller reports it.
        """
        outs, syncs = [], []
        for k in range(len(self.handles)):
            while True:
                refs = self.inflight[k][step][2]
                try:
                    done = ray.get(refs)
                    break
                except RayTaskError:            # raised inside the worker: not its death
                    raise
                except RayActorError as err:
                    self._replace(k, step, err)
            del self.inflight[k][step]
            self.rng_done[k] = done[-1]["rng_state"]
            outs.append(done[-1])
            syncs += done[:-1]
        return outs, syncs

    def _replace(self, k: int, step: int, err: Exception) -> None:
        """Start a new worker k on its stream's last returned state and resend its work."""
        dead, noticed_at_s = self.handles[k], time.time()
        if self.make_worker is None:
            raise WorkerLost(f"colocated actor {dead.lane} died during the rollout of step "
                             f"{step} ({type(err).__name__}); it also held a learner, whose "
                             f"state died with it: resume from the last checkpoint",
                             [dead.lane], step) from err
        where = (f"rollout worker {dead.lane} died during the rollout of step {step} "
                 f"({type(err).__name__}); the learner state is intact")
        if self.replacements_left <= 0:
            raise WorkerLost(f"{where}, but max_worker_replacements={self.max_replacements} "
                             f"are used up: raise it, or resume from the last checkpoint",
                             [dead.lane], step) from err
        self.replacements_left -= 1
        try:
            ray.kill(dead.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone is fine
            pass
        try:
            handle = self.make_worker(k, self.rng_done[k]).wait_ready(self.ready_timeout_s)
        except (RayActorError, GetTimeoutError) as err2:
            raise WorkerLost(f"{where}, and its replacement did not start "
                             f"({type(err2).__name__}: {err2})", [dead.lane], step) from err2
        self.handles[k], self.sent_version[k] = handle, None
        pending, self.inflight[k] = self.inflight[k], OrderedDict()
        for s, (version, prompts, _) in pending.items():
            self._submit_one(k, s, version, prompts)
        self.replacements.append({"step": step, "lane": dead.lane, "error": type(err).__name__,
                                  "node_id": dead.node_id, "new_node_id": handle.node_id,
                                  "noticed_at_s": noticed_at_s})


def get_or_report(refs: list, step: int, handles: list) -> list:
    """``ray.get(refs)`` of calls to the stateful workers ``handles`` (learners,
    reference/reward); if one of them died, :func:`raise_if_dead` says which.

    Raises:
        WorkerLost: naming the dead workers.
        ray.exceptions.RayActorError: the call failed and every worker answers.
    """
    try:
        return ray.get(refs)
    except RayActorError as err:
        raise_if_dead(handles, step, err)
        raise


def raise_if_dead(handles: list, step: int, err: Exception, timeout_s: float = 30.0) -> None:
    """After a failed call: raise :class:`WorkerLost` naming the workers of ``handles`` that do
    not answer within ``timeout_s`` (learners and reference/reward workers: their state, unlike
    a rollout worker's, is not rebuilt here, so the run must resume from a checkpoint)."""
    dead = []
    for h in {h.lane: h for h in handles}.values():
        try:
            ray.get(h.call("ready"), timeout=timeout_s)
        except (RayActorError, GetTimeoutError):
            dead.append(h.lane)
    if dead:
        why = ("a learner's weights and optimizer state die with its process"
               if any(lane.startswith(("learner", "colocated")) for lane in dead) else
               "this library restarts only rollout workers (a reference/reward worker holds "
               "just the frozen reference model, but its calls in flight are lost)")
        raise WorkerLost(f"{', '.join(dead)} died at step {step} ({type(err).__name__}); "
                         f"{why}: resume from the last checkpoint", dead, step) from err
