"""The single controller of the toy GRPO system on Ray (book chapter "A mini RL system on Ray").

One driver process runs the step as a program over remote workers, in HybridFlow's style
(Sheng et al. 2024, arXiv 2409.19256, §4: a single controller for the dataflow between models,
each model's own computation inside its workers): sample prompts, send them to the rollout
workers, send the samples to the reference/reward worker, compute advantages, send the batch to
the learners, publish the new weights. :func:`~rlmperf_lite.distributed.place_actors` places
the roles and sets how far the rollout runs ahead (colocated, sync, one-step-off, async).

The numbers are the in-process loops': with one rollout worker and one learner, a run equals
:func:`rlmperf_lite.rl.train_async_grpo` with the same staleness (and so, at staleness 0,
:func:`rlmperf_lite.rl.train_grpo`) bit for bit, because the controller draws the prompts from
the same stream and the rollout worker continues the same sampling stream. W > 1 rollout workers
each sample a contiguous share of the prompts with a child stream of it (``spawn(W)``): the same
distribution, other draws. L > 1 learners sum their gradients in another order than one
learner's backward: equal to float rounding. Each actor's phases come back as a timeline in the
simulator's format (:class:`~rlmperf_lite.distributed.RayRunResult`), so the measured and the
predicted run share one chart. On a cluster the actors may be spread over the nodes, and a
run survives the loss of a node: rollout workers are started again on the surviving nodes,
and a lost learner or reference/reward worker sends the whole run back to its last checkpoint
(book section sec-ray-multinode).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import ray
from ray.exceptions import RayTaskError

from ..checks import check_choice, check_int, check_number
from ..nn import copy_params
from ..rl.async_grpo import AsyncGRPOConfig, objective_inputs, step_metrics
from ..rl.common import blas_limits, check_fits_task, lr_factor
from ..rl.grpo import frac_reward_zero_std, step_advantages
from ..rl.losses import grpo_loss, loss_norms, policy_loss
from ..rl.warmstart import warm_start
from ..tasks import AdditionTask
from .checkpoint import Checkpoint, check_resume, load_checkpoint, save_checkpoint
from .faults import RolloutPool, WorkerLost, get_or_report, raise_if_dead
from .modes import PLACEMENTS, check_cpus, check_layout, mode_config, place_actors, run_config
from .result import RayRunResult, phase_times, to_intervals
from .runtime import alive_node_ids, init_ray
from .workers import PhaseLog, rng_from_state

__all__ = ["Controller", "train_ray"]


def _check_checkpointing(checkpoint_every, checkpoint_dir, resume_from, base_params) -> None:
    """ValueError naming the argument: checkpoints need a directory this process can write,
    and a resumed run takes its base model from the checkpoint."""
    if checkpoint_every and checkpoint_dir is None:
        raise ValueError("checkpoint_dir must be given when checkpoint_every > 0")
    if checkpoint_dir is not None:
        try:
            Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except (TypeError, OSError) as err:
            raise ValueError(f"checkpoint_dir={checkpoint_dir!r} is not a directory this "
                             f"process can create or write ({err})") from None
    if resume_from is not None and base_params is not None:
        raise ValueError("base_params and resume_from exclude each other: the checkpoint "
                         "holds the base model")


class Controller:
    """Starts the actors of one run and drives its steps; see the module docstring. Once
    :meth:`run` started, ``started_s`` is the epoch time of its first step (the zero of the
    timeline) and ``node_losses`` lists the nodes lost so far.

    Args:
        config: GRPOConfig or AsyncGRPOConfig (``dynamic_sampling`` unsupported).
        mode: one of :data:`~rlmperf_lite.distributed.MODES`.
        num_rollout_workers: W; colocated mode needs W = num_learners.
        num_learners: L data-parallel learners; each gets >= 1 group per minibatch.
        task: the task (None: :class:`~rlmperf_lite.tasks.AdditionTask`, as the loops').
        base_params: the warm-start model (skips the warm-start, as train_grpo's); not with
            ``resume_from`` (the checkpoint holds it).
        resume_from: a checkpoint directory to continue from (same config but ``steps``, which
            must exceed the checkpoint's step).
        checkpoint_dir, checkpoint_every: save ``step_NNNNNN/`` every that many steps (0: off);
            the directory is created at once.
        max_worker_replacements: dead rollout workers replaced over the run.
        cpus_per_actor: Ray CPUs reserved per actor; 0 lets any number share a laptop's cores.
            On a cluster, 1 keeps Ray from packing more actors on a node than it has CPUs.
        placement: which nodes the actors go on, one of
            :data:`~rlmperf_lite.distributed.PLACEMENTS`: ``"default"`` (Ray's choice; on one
            machine, all on it) or ``"spread"`` (dealt over the alive nodes).
        max_resumes: times a run whose learner or reference/reward worker died (a node lost,
            say) starts every actor again from its last checkpoint (or its start, before the
            first) and replays the steps since; 0 ends the run with the error instead.
    Raises:
        ValueError: naming the bad argument.
    """

    def __init__(self, config, *, mode: str = "sync", num_rollout_workers: int = 1,
                 num_learners: int = 1, task: AdditionTask | None = None,
                 base_params: dict | None = None, resume_from=None, checkpoint_dir=None,
                 checkpoint_every: int = 0, max_worker_replacements: int = 2,
                 cpus_per_actor: float = 0.0, placement: str = "default",
                 max_resumes: int = 0):
        c = self.c = run_config(config, mode)
        self.mode, self.k = mode, c.staleness
        check_int("checkpoint_every", checkpoint_every, 0)
        check_int("max_worker_replacements", max_worker_replacements, 0)
        check_number("cpus_per_actor", cpus_per_actor, low=0)
        check_choice("placement", placement, PLACEMENTS)
        check_int("max_resumes", max_resumes, 0)
        self.node_placement, self._resumes_left = placement, max_resumes
        if task is not None and not isinstance(task, AdditionTask):
            raise ValueError(f"task must be None or an AdditionTask, got {type(task).__name__}")
        self.task = task or AdditionTask()
        check_fits_task(c, self.task)
        W, L = num_rollout_workers, num_learners
        check_layout(mode, c.num_prompts, W, L, c.num_prompts // c.num_minibatches)
        _check_checkpointing(checkpoint_every, checkpoint_dir, resume_from, base_params)
        self.W, self.L, self.cpus = W, L, cpus_per_actor
        self._max_replacements = max_worker_replacements
        self._chunks = np.array_split(np.arange(c.num_prompts), W)     # prompts per worker
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.meta = {"mode": mode, "num_rollout_workers": W, "staleness": self.k,
                     "config": json.loads(json.dumps(asdict(c), default=str))}
        ckpt = None
        if resume_from is not None:
            ckpt = load_checkpoint(resume_from, c.model)
            check_resume(ckpt, self.meta, resume_from)
            if ckpt.step >= c.steps:
                raise ValueError(f"config.steps={c.steps} leaves nothing to run after the "
                                 f"checkpoint resume_from={str(resume_from)!r} (step "
                                 f"{ckpt.step}); set steps above {ckpt.step}")
        if not ray.is_initialized():
            init_ray()
        check_cpus(mode, W, L, cpus_per_actor)          # before the warm start, not after
        state = self._initial_state(ckpt, base_params)
        self.start_step, self.base_params = state.step, state.base_params
        self._restart = state                   # what a resume goes back to: the last checkpoint
        self._placements, self._pools, self.node_losses = [], [], []
        self._created_s, self.started_s = time.time(), None   # epoch s; the first step's start
        self._start_actors(state)

    def _initial_state(self, ckpt, base_params) -> Checkpoint:
        """The state before the run's first step: the checkpoint it resumes, or a fresh start
        (the given or warm-started base model, AdamW at zero, the in-process loops' streams)."""
        c = self.c
        rng_init, rng_data, rng_sample = np.random.default_rng(c.seed).spawn(3)  # as the loops
        self.warmstart_s = 0.0
        if ckpt is not None:
            return ckpt
        if base_params is None:
            t0 = time.perf_counter()
            with blas_limits(c):
                base_params, _ = warm_start(c.model, self.task, rng_init,
                                            max_steps=c.warmstart_max_steps,
                                            target_accuracy=c.warmstart_target_accuracy)
            self.warmstart_s = time.perf_counter() - t0
        params = copy_params(base_params, c.model, "base_params")
        streams = [rng_sample] if self.W == 1 else rng_sample.spawn(self.W)
        zeros = {k: np.zeros_like(v) for k, v in params.items()}
        return Checkpoint(step=0, params=params, adam_m=zeros, adam_v=zeros, adam_t=0,
                          base_params=params, weight_versions={},
                          rng_data_state=rng_data.bit_generator.state,
                          rollout_rng_states=[g.bit_generator.state for g in streams],
                          meta=self.meta)

    def _start_actors(self, state: Checkpoint) -> None:
        """Start every actor on ``state`` (the run's start, or the checkpoint of a resume)."""
        params_ref, base_ref = ray.put(state.params), ray.put(state.base_params)
        self.rng_data = rng_from_state(state.rng_data_state)
        self.placement = place_actors(self.mode, self.c, num_rollout_workers=self.W,
                                      num_learners=self.L, params_ref=params_ref,
                                      base_ref=base_ref, rng_states=state.rollout_rng_states,
                                      task=self.task, cpus_per_actor=self.cpus,
                                      placement=self.node_placement)
        self._placements.append(self.placement)
        self.ref, self.learners = self.placement.ref, self.placement.learners
        self.weight_refs = {}                   # version -> ObjectRef (disaggregated modes)
        if self.mode != "colocated":
            self.weight_refs[state.step] = params_ref
            for v, w in state.weight_versions.items():
                self.weight_refs[int(v)] = ray.put(w)
        used = sum(len(pool.replacements) for pool in self._pools)
        self.rollouts = RolloutPool(self.placement.rollout, state.rollout_rng_states,
                                    self.weight_refs, make_worker=self.placement.make_worker,
                                    max_replacements=self._max_replacements)
        self.rollouts.replacements_left = max(0, self._max_replacements - used)   # per run
        self._pools.append(self.rollouts)
        if state.adam_t > 0:                    # a fresh AdamW is at zero already
            moments = ray.put({"params": state.params, "m": state.adam_m, "v": state.adam_v,
                               "t": state.adam_t})
            ray.get([h.call("load_state", moments) for h in self.learners])

    @property
    def actors(self) -> dict:
        """The live actors' Ray handles by lane (e.g. to ``ray.kill`` one in a test)."""
        return {h.lane: h.actor for h in self.rollouts.handles + self.ref + self.learners}

    @property
    def actor_nodes(self) -> dict:
        """The Ray node id (hex) of each live actor, by lane."""
        return {h.lane: h.node_id for h in self.rollouts.handles + self.ref + self.learners}

    def shutdown(self) -> None:
        """Kill every actor this controller started."""
        for actor in self.placement.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.placement.actors.clear()

    # -- the step -----------------------------------------------------------------------
    def run(self, *, on_step=None) -> RayRunResult:
        """Run steps ``start_step .. config.steps - 1``; ``on_step(row)`` after each (once per
        step: not again for a step replayed after a resume). Returns a
        :class:`~rlmperf_lite.distributed.RayRunResult`; the actors stay up (call
        :meth:`shutdown`).

        Raises:
            ValueError: ``on_step`` not callable.
            RuntimeError: ``run`` was already called.
            WorkerLost: a worker died and could not be replaced, with no resume left (the
                message names it).
        """
        if on_step is not None and not callable(on_step):
            raise ValueError(f"on_step must be None or a callable taking the step's metrics, "
                             f"got {on_step!r}")
        if getattr(self, "_records", None) is not None:
            raise RuntimeError("run() was already called on this Controller (its streams have "
                               "moved on); start a new one, or resume from a checkpoint")
        c = self.c
        result = RayRunResult(params={}, base_params={k: v.copy() for k, v in
                                                      self.base_params.items()},
                              warmstart_s=self.warmstart_s, mode=self.mode, config=c,
                              placement=self.node_placement)
        self._records, self._next_submit, self._data_state, self._prompts = [], \
            self.start_step, {}, {}
        self._log = PhaseLog("controller", "controller")
        self.started_s = t0 = last_end = time.time()
        step = reported = self.start_step               # the next step to run, to report
        while step < c.steps:
            first, replaced = len(self._records), len(self.rollouts.replacements)
            try:
                row = self._step(step)
                if self.checkpoint_every and (step + 1) % self.checkpoint_every == 0:
                    path = self._save(step + 1)
                    result.checkpoints += [] if path in result.checkpoints else [path]
            except WorkerLost as err:           # the replayed step's step_s counts the loss
                step = self._resume(err, result)
                continue
            if len(self.rollouts.replacements) > replaced:
                self._note_node_losses(step, "replaced", min(
                    r["noticed_at_s"] for r in self.rollouts.replacements[replaced:]))
            row.update(phase_times(step, self._records[first:]))
            row["step_s"] = (now := time.time()) - last_end        # with the checkpoint
            last_end = now
            result.history.append(row)
            if on_step is not None and step >= reported:
                on_step(row)
            step, reported = step + 1, max(reported, step + 1)
        result.run_s = time.time() - t0
        final = self._get([self.learners[0].call("weights")], c.steps - 1)[0]
        result.params = {k: np.array(v) for k, v in final.items()}
        self._finish(result)
        return result

    def _resume(self, err: WorkerLost, result: RayRunResult) -> int:
        """After ``err``: kill the surviving actors, start them all again on the alive nodes
        from the last checkpoint (or the run's start) and forget the history since; returns the
        step to continue from. Raises ``err`` when no resume is left."""
        if self._resumes_left <= 0:
            raise err
        self._resumes_left -= 1
        lost = self._note_node_losses(err.step, "resumed", time.time())
        self.shutdown()
        state = self._restart
        self._start_actors(state)
        del result.history[state.step - self.start_step:]
        self._next_submit, self._data_state, self._prompts = state.step, {}, {}
        for entry in lost:
            entry["resumed_from"] = state.step
        return state.step

    def _note_node_losses(self, step: int, recovery: str, noticed_at_s: float) -> list:
        """Record each node of this run's actors that is no longer alive and not yet recorded,
        with the lanes that ran on it, noticed at epoch ``noticed_at_s``; returns the new
        entries."""
        alive, known = set(alive_node_ids()), {e["node_id"] for e in self.node_losses}
        new = {}
        for h in self.placement.handles:
            if h.node_id is not None and h.node_id not in alive and h.node_id not in known:
                new.setdefault(h.node_id, []).append(h.lane)
        entries = [{"step": step, "node_id": node, "lanes": sorted(set(lanes)),
                    "recovery": recovery, "resumed_from": None,
                    "noticed_s": noticed_at_s - self.started_s} for node, lanes in new.items()]
        self.node_losses += entries
        return entries

    def _finish(self, result: RayRunResult) -> None:
        """The run's timeline, replacements, actors, nodes and node losses, into ``result``."""
        t0 = self.started_s
        result.timeline = to_intervals(self._records, t0)
        result.replacements = [r for pool in self._pools for r in pool.replacements]
        driver = {"lane": "controller", "node_id": ray.get_runtime_context().get_node_id(),
                  "ready_s": self._created_s - t0}
        actors = [driver] + [{"lane": h.lane, "node_id": h.node_id, "ready_s": h.ready_s - t0}
                             for placement in self._placements for h in placement.handles
                             if h.node_id is not None]
        result.nodes = list(dict.fromkeys(a["node_id"] for a in actors))
        index = {node: k for k, node in enumerate(result.nodes)}
        result.actors = [{**a, "node": index[a["node_id"]]} for a in actors]
        result.node_losses = [{**e, "node": index[e["node_id"]]} for e in self.node_losses]

    def _step(self, step: int) -> dict:
        c, G = self.c, self.c.group_size
        self._submit_rollouts(upto_version=step)
        try:
            outs, syncs = self.rollouts.collect(step)
        except RayTaskError as err:            # failed inside: e.g. its weights never came
            raise_if_dead(self.learners + self.ref, step, err)
            raise RuntimeError(f"the rollout of step {step} failed: {err}") from err
        _, pairs = self._prompts.pop(step)
        flops = {}
        self._take(outs + syncs, flops)
        width = max(o["completion_mask"].shape[1] for o in outs)       # pad to a common R

        def cat(key, fill):
            return np.concatenate([np.pad(o[key], ((0, 0), (0, width - o["completion_mask"]
                                                            .shape[1])),
                                          constant_values=fill) for o in outs])
        tokens, mask = cat("tokens", self.task.pad_id), cat("completion_mask", 0)  # (B*G, ...)
        behav, version = cat("per_token_logps", 0), outs[0]["version"]             # (B*G, R)
        chunks = np.array_split(np.arange(c.num_prompts), len(self.ref))
        rows = [slice(ch[0] * G, (ch[-1] + 1) * G) for ch in chunks]
        score_refs = [h.call("score", tokens[r], mask[r], pairs[ch], step)
                      for h, r, ch in zip(self.ref, rows, chunks)]
        # a stale batch's proximal log-probs run on the learners while the batch is scored
        prox_refs = None if version == step else self._prox_refs(step, tokens)
        scores = self._get(score_refs, step)
        self._take(scores, flops)
        rewards = np.concatenate([s["rewards"] for s in scores])                  # (B*G,)
        verifier = np.concatenate([s["verifier_rewards"] for s in scores])
        ref_logps = None if c.kl_coef == 0 else np.concatenate([s["ref_logps"] for s in scores])
        with blas_limits(c), self._log.phase("advantages", step):
            advantages = step_advantages(c, rewards, mask, behav, ref_logps)
        self._records += self._log.drain()
        kl_ref = ref_logps if c.kl_coef > 0 and c.advantage_estimator != "reinforce_pp" else None
        if prox_refs is None:                   # a fresh batch: the behaviour policy's own
            prox = behav
        else:
            outs = self._get(prox_refs, step)
            self._take(outs, flops)
            prox = np.concatenate([o["logps"] for o in outs])                  # (B*G, R)
        old, adv = objective_inputs(c.objective, advantages, behav, prox, mask,
                                    cap=c.behav_imp_weight_cap)
        logs = self._update(step, tokens, mask, old, adv, behav, kl_ref, flops)
        self._publish(step + 1)
        return {**step_metrics(step, rewards, mask, logs, step - version, prox, behav),
                "response_width": int(mask.shape[1]), "resample_rounds": 0,
                "frac_reward_zero_std": frac_reward_zero_std(verifier, G), **flops}

    def _submit_rollouts(self, upto_version: int) -> None:
        """Sample prompts and queue the rollout of every step whose weight version,
        max(0, s - k), exists: up to k steps ahead of the learners."""
        c = self.c
        while self._next_submit < c.steps and max(0, self._next_submit - self.k) <= upto_version:
            s = self._next_submit
            self._data_state[s] = self.rng_data.bit_generator.state
            prompts, pairs = self.task.sample_prompts(self.rng_data, c.num_prompts)  # (B, P)
            self._prompts[s] = (prompts, pairs)
            self.rollouts.submit(s, max(0, s - self.k), [prompts[i] for i in self._chunks])
            self._next_submit += 1
        for s in [s for s in self._data_state if s < upto_version]:
            del self._data_state[s]

    def _shards(self, rows) -> list:
        """Contiguous row slices of whole groups, one per learner; ``rows`` (groups, G)."""
        return [slice(int(r[0, 0]), int(r[-1, -1]) + 1) for r in np.array_split(rows, self.L)]

    def _prox_refs(self, step: int, tokens) -> list:
        """Ask the learners for the log-probs of a stale batch under the current weights (the
        proximal policy), each for its shard of rows; their ObjectRefs."""
        batch = ray.put({"tokens": tokens, "prompt_len": self.task.prompt_len})
        rows = np.arange(len(tokens)).reshape(-1, self.c.group_size)
        return [h.call("prox_logps", batch, sh, step)
                for h, sh in zip(self.learners, self._shards(rows))]

    def _update(self, step, tokens, mask, old, adv, behav, kl_ref, flops) -> list:
        """One AdamW step per minibatch of whole groups, data-parallel over the learners (each
        with the minibatch's normalisers); returns train_async_grpo's metrics per minibatch."""
        c, L = self.c, self.L
        batch = ray.put({"tokens": tokens, "completion_mask": mask, "old": old,
                         "advantages": adv, "kl_ref": kl_ref,
                         "prompt_len": self.task.prompt_len})
        lr, logs = c.lr * lr_factor(step, c), []
        groups = np.arange(len(tokens)).reshape(-1, c.group_size)
        for rows in np.array_split(groups, c.num_minibatches):
            mb = slice(int(rows[0, 0]), int(rows[-1, -1]) + 1)
            norms = loss_norms(mask[mb], c)
            refs = [h.call("grads", batch, sh, norms, step, num_returns=2)
                    for h, sh in zip(self.learners, self._shards(rows))]
            applied = [h.call("apply", [r[0] for r in refs], lr, step) for h in self.learners]
            outs = self._get([r[1] for r in refs] + applied, step)
            self._take(outs, flops)
            logps = np.concatenate([o["logps"] for o in outs[:L]])                 # (rows, R)
            entropy = np.concatenate([o["entropy"] for o in outs[:L]])
            m, ref = mask[mb], None if kl_ref is None else kl_ref[mb]
            loss, metrics = grpo_loss(logps, old[mb], adv[mb], m, c, norms,
                                              ref_per_token_logps=ref)
            logs.append({"loss": loss, "entropy": float((entropy * m).sum() / m.sum()),
                         "grad_norm": outs[L]["grad_norm"], **metrics,
                         "approx_kl": policy_loss(logps, behav[mb], adv[mb], m)[1]["approx_kl"]})
        return logs

    def _publish(self, version: int) -> None:
        """Weight version ``version`` into the object store (learner 0's copy); forget the
        versions no future rollout samples with."""
        if self.mode == "colocated":                    # synced inside each actor instead
            return
        self.weight_refs[version] = self.learners[0].call("weights")
        for v in [v for v in self.weight_refs if v < max(0, version - self.k)]:
            del self.weight_refs[v]

    def _save(self, s0: int) -> str:
        """Checkpoint before step ``s0``."""
        state = self._get([self.learners[0].call("state")], s0 - 1)[0]
        versions = {} if self.mode == "colocated" else {
            v: ray.get(self.weight_refs[v]) for v in range(max(0, s0 - self.k), s0)}
        ckpt = Checkpoint(step=s0, params=state["params"], adam_m=state["m"],
                          adam_v=state["v"], adam_t=state["t"], base_params=self.base_params,
                          weight_versions=versions,
                          rng_data_state=self._data_state.get(s0,
                                                              self.rng_data.bit_generator.state),
                          rollout_rng_states=list(self.rollouts.rng_done), meta=self.meta)
        self._restart = ckpt
        return save_checkpoint(Path(self.checkpoint_dir) / f"step_{s0:06d}", ckpt)

    def _take(self, outs: list, flops: dict) -> None:
        """Move the workers' phase records into the run's, and add up their FLOPs."""
        for out in outs:
            self._records += out.pop("intervals", [])
            for k, v in out.pop("flops", {}).items():
                flops[k] = flops.get(k, 0.0) + v

    def _get(self, refs: list, step: int) -> list:
        """``ray.get`` of calls to learners or reference/reward workers."""
        return get_or_report(refs, step, self.learners + self.ref)


def train_ray(config=None, *, mode: str = "sync", on_step=None, **kwargs) -> RayRunResult:
    """Run the toy GRPO system on Ray (started locally by
    :func:`~rlmperf_lite.distributed.init_ray` if it is not up): a
    :class:`~rlmperf_lite.distributed.Controller` with ``kwargs``, its
    :meth:`~rlmperf_lite.distributed.Controller.run`, then its actors are killed. ``config``
    None = ``AsyncGRPOConfig()`` with the mode's staleness (0 for ``"async"``).

    Raises:
        ValueError: naming the bad argument (see :class:`~rlmperf_lite.distributed.Controller`).
        RuntimeError: a worker died and could not be replaced.
    """
    if config is None:
        config = mode_config(AsyncGRPOConfig(), mode)
    ctrl = Controller(config, mode=mode, **kwargs)
    try:
        return ctrl.run(on_step=on_step)
    finally:
        ctrl.shutdown()
