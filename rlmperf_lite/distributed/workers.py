"""The workers of the toy GRPO system on Ray: rollout, reference/reward, learner (book chapter
"A mini RL system on Ray").

Each worker is a plain Python class holding one role's state, the same computation as the
in-process loops (:func:`rlmperf_lite.rl.train_grpo`, :func:`rlmperf_lite.rl.train_async_grpo`),
split by role. :func:`~rlmperf_lite.distributed.place_actors` turns them into Ray actors with
``ray.remote(cls)``, or hosts all three in one
:class:`~rlmperf_lite.distributed.ColocatedWorker` process (verl's "hybrid engine"; HybridFlow,
Sheng et al. 2024, arXiv 2409.19256, §4-5). Every method a controller calls
records the phases it ran as ``(pool, lane, phase, start_s, end_s, step)`` in wall-clock seconds
(``time.time()``, shared by the processes of one machine) and returns them with its result, so
a worker that dies loses nothing already returned.

Phase names are the simulator's (:mod:`rlmperf_lite.sim`): ``generate``, ``weight_sync``,
``ref_logp``, ``reward``, ``old_logp`` (the proximal log-probs of a stale batch),
``actor_update``; plus ``grad_allreduce`` (the learners' gradient exchange).
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import ray
from threadpoolctl import threadpool_limits

from ..nn import (COUNTER, AdamW, clip_grad_norm, generate, token_logps)
from ..parallel.data import FlatLayout
from ..rl.common import flops_since
from ..rl.grpo import accumulate_grads
from ..rl.losses import overlong_penalty
from ..tasks import AdditionTask

__all__ = ["PhaseLog", "RolloutWorker", "RefRewardWorker", "Learner", "ColocatedWorker",
           "RoleHandle", "rng_from_state"]


class PhaseLog:
    """The phases one worker ran since the controller last asked: tuples ``(pool, lane, phase,
    start_s, end_s, step)`` with wall-clock times (seconds since the epoch)."""

    def __init__(self, pool: str, lane: str):
        self.pool, self.lane, self.records = pool, lane, []

    @contextmanager
    def phase(self, name: str, step: int):
        """Time the block as phase ``name`` of RL step ``step``."""
        start = time.time()
        try:
            yield
        finally:
            self.records.append((self.pool, self.lane, name, start, time.time(), int(step)))

    def drain(self) -> list:
        """The records so far, then forget them."""
        out, self.records = self.records, []
        return out


def _limit_blas(config):
    """Pin this process's BLAS to ``config.blas_threads`` (1: tiny matrices, several workers
    sharing a laptop's cores); kept for the worker's lifetime, as rl.common.blas_limits does for
    the in-process loops."""
    if config.blas_threads is None:
        return None
    return threadpool_limits(limits=config.blas_threads, user_api="blas")


def _fetch(items: list) -> list:
    """Values of a list of Ray ObjectRefs (fetched in one call) or of plain values."""
    if any(isinstance(x, ray.ObjectRef) for x in items):
        return ray.get(list(items))
    return list(items)


def _ready(lane: str) -> dict:
    """What every worker's ``ready`` answers: its lane and the Ray node it runs on."""
    return {"lane": lane, "node_id": ray.get_runtime_context().get_node_id()}


def rng_from_state(state: dict) -> np.random.Generator:
    """A Generator continuing the stream whose ``bit_generator.state`` is ``state``."""
    rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
    rng.bit_generator.state = state
    return rng


class RolloutWorker:
    """Samples G completions per prompt with the KV-cached sampler
    (:func:`rlmperf_lite.nn.generate`) using the weight version it was last sent.

    ``rng_state``: the ``bit_generator.state`` of its sampling stream. The worker draws from it
    in the order the controller calls :meth:`generate` (a Ray actor runs calls in submission
    order) and returns the state after each call, so a replacement worker continues the stream
    exactly where the dead one's last returned batch left it.
    """

    def __init__(self, config, rng_state: dict, *, pool: str = "rollout",
                 lane: str = "rollout/r0", task: AdditionTask | None = None):
        self.c, self.task = config, task or AdditionTask()
        self.rng = rng_from_state(rng_state)
        self.params, self.version = None, -1
        self.log = PhaseLog(pool, lane)
        self._blas = _limit_blas(config)

    def ready(self) -> dict:
        """{lane, node_id (hex) of the Ray node it runs on}, once the worker exists (the
        controller waits on it)."""
        return _ready(self.log.lane)

    def set_weights(self, weights: list, version: int, step: int) -> dict:
        """Load ``weights[0]`` (a params dict, or an ObjectRef of one: fetched from Ray's object
        store inside the timed phase) as weight version ``version``, for the rollout of
        ``step``. Copies them: the worker owns its weights, as an inference engine does.
        Waiting for the learner to produce that version is not part of the phase (the
        simulator charges it as idle time, not as sync)."""
        refs = [w for w in weights if isinstance(w, ray.ObjectRef)]
        if refs:                        # until the learner's weights exist, outside the phase
            ray.wait(refs, num_returns=len(refs), timeout=None, fetch_local=False)
        with self.log.phase("weight_sync", step):
            (params,) = _fetch(weights)
            self.params = {k: np.array(v) for k, v in params.items()}
        self.version = int(version)
        return {"version": self.version, "intervals": self.log.drain()}

    def generate(self, prompts, step: int, version: int) -> dict:
        """Sample ``config.group_size`` completions for each of the (b, P) ``prompts``.

        Returns tokens (b*G, P+R), completion_mask and per_token_logps (b*G, R) (behaviour
        log-probs), the weight ``version`` used, the sampling stream's ``rng_state`` after the
        call, ``flops`` and ``intervals``.

        Raises:
            RuntimeError: the worker holds another weight version than ``version`` (a
                controller bookkeeping error).
        """
        if version != self.version:
            raise RuntimeError(f"{self.log.lane} holds weight version {self.version}, the "
                               f"rollout of step {step} needs {version}")
        c, before = self.c, dict(COUNTER.counts)
        with self.log.phase("generate", step):
            ro = generate(self.params, prompts, c.model, max_new_tokens=c.max_new_tokens,
                          eos_id=self.task.eos_id, pad_id=self.task.pad_id,
                          group_size=c.group_size, temperature=c.temperature, rng=self.rng)
        return {"tokens": ro.tokens, "completion_mask": ro.completion_mask,
                "per_token_logps": ro.per_token_logps, "version": self.version,
                "rng_state": self.rng.bit_generator.state, "flops": flops_since(before),
                "intervals": self.log.drain()}


class RefRewardWorker:
    """Scores samples: the verifier's rewards (plus DAPO's overlong penalty when configured)
    and, with ``kl_coef`` > 0, the frozen reference model's per-token log-probs."""

    def __init__(self, config, ref_params: dict, *, pool: str = "ref_reward",
                 lane: str = "ref_reward/r0", task: AdditionTask | None = None):
        self.c, self.task = config, task or AdditionTask()
        self.ref_params = {k: np.array(v) for k, v in ref_params.items()}
        self.log = PhaseLog(pool, lane)
        self._blas = _limit_blas(config)

    def ready(self) -> dict:
        """{lane, node_id}, once the worker exists."""
        return _ready(self.log.lane)

    def score(self, tokens, completion_mask, pairs, step: int) -> dict:
        """tokens (b*G, P+R), completion_mask (b*G, R), pairs (b, 2) the operands of the b
        prompts. Returns ``verifier_rewards`` and ``rewards`` (b*G,) (with the overlong
        penalty), ``ref_logps`` (b*G, R) or None, ``flops`` and ``intervals``."""
        c, P, before = self.c, self.task.prompt_len, dict(COUNTER.counts)
        ref_logps = None
        if c.kl_coef > 0:
            with self.log.phase("ref_logp", step), COUNTER.phase("reference"):
                ref_logps = token_logps(self.ref_params, tokens, c.model,
                                        c.temperature)[:, P - 1:]                 # (b*G, R)
        with self.log.phase("reward", step):
            verifier = self.task.reward(np.repeat(pairs, c.group_size, axis=0), tokens[:, P:])
            rewards = verifier
            if c.overlong_buffer_len:
                rewards = rewards + overlong_penalty(completion_mask.sum(axis=1),
                                                     c.max_new_tokens, c.overlong_buffer_len)
        return {"verifier_rewards": verifier, "rewards": rewards, "ref_logps": ref_logps,
                "flops": flops_since(before), "intervals": self.log.drain()}


class Learner:
    """One data-parallel rank of the trainer: a full copy of the weights and of the AdamW state.

    A step over L learners (Li et al. 2020, PyTorch DDP, arXiv 2006.15704, §3): each computes
    the gradient of its rows with the WHOLE batch's loss normalisers (:meth:`grads`, exactly
    :func:`rlmperf_lite.rl.train_async_grpo`'s micro-batch loop), then every learner fetches all
    L flat gradients from the object store, sums them in rank order, clips and steps
    (:meth:`apply`): the replicas stay equal, and with one learner the step is the in-process
    loop's, bit for bit. The exchange is an all-gather through the object store ((L - 1) N
    values fetched per learner), not a bandwidth-optimal ring; see
    :func:`rlmperf_lite.parallel.dp_grads` for the counted all-reduce.
    """

    def __init__(self, config, params: dict, *, rank: int = 0, pool: str = "learner",
                 lane: str = "learner/r0"):
        self.c, self.rank = config, rank
        self.params = {k: np.array(v) for k, v in params.items()}   # own, writable copy
        self.opt = AdamW(self.params, lr=config.lr, betas=config.adam_betas)
        self.layout = FlatLayout.of(self.params, 1)                 # (N,), no padding
        self._grad_keys = list(self.params)
        self.log = PhaseLog(pool, lane)
        self._blas = _limit_blas(config)

    def ready(self) -> dict:
        """{lane, node_id}, once the worker exists."""
        return _ready(self.log.lane)

    def prox_logps(self, batch: dict, rows: slice, step: int) -> dict:
        """Per-token log-probs (rows, R) of ``batch["tokens"][rows]`` under the current weights
        (the proximal policy of a stale batch; AReaL, arXiv 2505.24298, Sec. 5.2)."""
        c, P, before = self.c, batch["prompt_len"], dict(COUNTER.counts)
        with self.log.phase("old_logp", step), COUNTER.phase("prox_logps"):
            logps = token_logps(self.params, batch["tokens"][rows], c.model,
                                c.temperature)[:, P - 1:]                         # (rows, R)
        return {"logps": logps, "flops": flops_since(before), "intervals": self.log.drain()}

    def grads(self, batch: dict, rows: slice, norms: dict, step: int):
        """This rank's gradient of the clipped surrogate on ``rows`` of ``batch`` (keys tokens,
        completion_mask, old, advantages, kl_ref, prompt_len; old and advantages from
        :func:`rlmperf_lite.rl.objective_inputs`), weighted with the minibatch's ``norms``
        (:func:`rlmperf_lite.rl.loss_norms`), accumulated over ``micro_batch_size`` rows.

        Returns ``(flat_grad, info)``: the (N,) flat gradient (keys in sorted order,
        :class:`rlmperf_lite.parallel.FlatLayout`) and {logps, entropy (rows, R), flops,
        intervals} for the controller's metrics.
        """
        c, P, before = self.c, batch["prompt_len"], dict(COUNTER.counts)
        tokens, mask, old, adv = (batch[k][rows] for k in
                                  ("tokens", "completion_mask", "old", "advantages"))
        kl_ref = None if batch["kl_ref"] is None else batch["kl_ref"][rows]
        with self.log.phase("actor_update", step):
            grads, logps, entropy = accumulate_grads(self.params, tokens, old, adv, mask, c,
                                                     norms, prompt_len=P,
                                                     ref_per_token_logps=kl_ref)
            self._grad_keys = list(grads)       # the backward's order, for clip_grad_norm
            flat = self.layout.flatten(grads)                                    # (N,)
        info = {"logps": logps, "entropy": entropy,
                "flops": flops_since(before), "intervals": self.log.drain()}
        return flat, info

    def apply(self, flat_grads: list, lr: float, step: int) -> dict:
        """Sum the L ranks' flat gradients (ObjectRefs, in rank order), clip to
        ``max_grad_norm``, one AdamW step at learning rate ``lr``. Returns {grad_norm (before
        clipping), intervals}."""
        with self.log.phase("grad_allreduce", step):
            flats = _fetch(flat_grads)
            total = np.array(flats[0])                                           # (N,)
            for f in flats[1:]:
                total += f
        with self.log.phase("actor_update", step):
            by_key = self.layout.unflatten(total)
            grads = {k: by_key[k] for k in self._grad_keys}
            grad_norm = clip_grad_norm(grads, self.c.max_grad_norm)
            self.opt.lr = lr
            self.opt.step(self.params, grads)
        return {"grad_norm": grad_norm, "intervals": self.log.drain()}

    def weights(self) -> dict:
        """The current weights (Ray stores the returned dict in its object store: the weight
        sync source)."""
        return self.params

    def state(self) -> dict:
        """params, AdamW ``m``, ``v`` and step count ``t``: what a checkpoint saves."""
        return {"params": self.params, "m": self.opt.m, "v": self.opt.v, "t": self.opt.t}

    def load_state(self, state: dict) -> str:
        """Restore :meth:`state`'s output (arrays copied)."""
        for name in ("params", "m", "v"):
            target = getattr(self.opt, name) if name != "params" else self.params
            for k in target:
                target[k][...] = state[name][k]
        self.opt.t = int(state["t"])
        return self.log.lane


class ColocatedWorker:
    """All three roles in one process, used in turn (time-sharing one device, as verl's hybrid
    engine does with actor, rollout and reference on the same GPUs). Weight sync is a copy
    inside the process (:meth:`sync_weights`) instead of a trip through the object store; a
    real engine would also offload/onload between roles (the simulator's ``switch_s``)."""

    def __init__(self, config, params: dict, ref_params: dict, rng_state: dict, *,
                 rank: int = 0, pool: str = "colocated", lane: str = "colocated/r0",
                 task: AdditionTask | None = None):
        self.roles = {"rollout": RolloutWorker(config, rng_state, pool=pool, lane=lane,
                                               task=task),
                      "ref_reward": RefRewardWorker(config, ref_params, pool=pool, lane=lane,
                                                    task=task),
                      "learner": Learner(config, params, rank=rank, pool=pool, lane=lane)}

    def ready(self) -> dict:
        """{lane, node_id}, once the worker exists."""
        return _ready(self.roles["learner"].log.lane)

    def call(self, role: str, method: str, *args):
        """``role``'s ``method(*args)``."""
        return getattr(self.roles[role], method)(*args)

    def sync_weights(self, version: int, step: int) -> dict:
        """Copy the learner role's current weights into the rollout role as ``version``."""
        return self.roles["rollout"].set_weights([self.roles["learner"].params], version, step)


class RoleHandle:
    """The controller's view of one role on one Ray actor: a dedicated actor (``role`` None)
    or a role of a :class:`~rlmperf_lite.distributed.ColocatedWorker`. ``call`` returns
    ObjectRefs. ``node_id`` (hex) and ``ready_s`` (epoch seconds) say where and since when the
    actor runs, once :meth:`wait_ready` returned (None before)."""

    def __init__(self, actor, lane: str, role: str | None = None):
        self.actor, self.lane, self.role = actor, lane, role
        self.node_id, self.ready_s = None, None

    def wait_ready(self, timeout_s: float | None = None) -> "RoleHandle":
        """Wait until the actor exists (``ray.get`` of its ``ready``; raises as that does) and
        note its node; returns self."""
        return self.note_ready(ray.get(self.call("ready"), timeout=timeout_s))

    def note_ready(self, info: dict) -> "RoleHandle":
        """Record ``ready``'s answer ({lane, node_id}) and the time it came; returns self."""
        self.node_id, self.ready_s = info["node_id"], time.time()
        return self

    def call(self, method: str, *args, num_returns: int = 1):
        """Submit ``method(*args)``; returns its ObjectRef (a list of ``num_returns`` refs)."""
        if self.role is None:
            fn = getattr(self.actor, method)
        else:
            fn, args = self.actor.call, (self.role, method, *args)
        if num_returns != 1:
            fn = fn.options(num_returns=num_returns)
        return fn.remote(*args)

    def set_weights(self, weights_ref, version: int, step: int):
        """Send weight ``version`` to a rollout role: through the object store to a dedicated
        worker, or a copy inside a colocated worker (``weights_ref`` unused)."""
        if self.role is None:
            return self.actor.set_weights.remote([weights_ref], version, step)
        return self.actor.sync_weights.remote(version, step)
