"""Pipeline parallelism executed on simulated ranks: the tiny LM's layers split over pp stages,
microbatches run op by op in a schedule's order (book section :ref:`sec-pp-gradient`).

Stage 0 holds the embeddings (wte, wpe), the last stage the final norm and the LM head
(ln_f, lm_head), and each stage a contiguous run of L / pp blocks. A forward op runs a
microbatch through the stage's blocks and sends the activation (n/m, T, D) to the next stage; a
backward op receives the gradient of its output from the next stage, runs its blocks backward,
adds its weight gradients to the stage's sums over microbatches and sends the gradient of its
input back. The result equals :func:`rlmperf_lite.nn.model.logps_forward` and
:func:`~rlmperf_lite.nn.model.logps_backward` on the whole batch, to float rounding; across the
pp - 1 stage boundaries the ranks send 2 (pp - 1) n T D itemsize bytes in total (an activation
forward and its gradient back, per boundary). Schedules: :mod:`rlmperf_lite.parallel.schedules`.
Sources: Huang et al. 2019 (GPipe), §2.2; Narayanan et al. 2021 (Megatron-LM), §2.2.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_choice, check_int, check_number
from ..nn.config import TinyLMConfig
from ..nn.layers import (
    embedding_backward,
    embedding_forward,
    rmsnorm_backward,
    rmsnorm_forward,
)
from ..nn.model import (block_backward, block_forward, check_tokens, lm_head_backward,
                        lm_head_forward)
from .collectives import ProcessGroup
from .schedules import SCHEDULES, make_schedule, schedule_timeline

__all__ = ["pipeline_grads", "stage_layers", "SCHEDULES"]



def stage_layers(num_layers: int, pp: int, interleave: int = 1) -> list:
    """The blocks of each virtual stage: ``out[k]`` is a range of layer indices, k = chunk pp + s
    for chunk ``chunk`` of stage s (v = ``interleave`` chunks per stage; Narayanan et al. 2021,
    §2.2.2: stage s holds layers of virtual stages s, s + pp, s + 2 pp, ...).

    Raises:
        ValueError: ``pp`` or ``interleave`` not an int >= 1, or pp v not dividing
            ``num_layers``.
    """
    check_int("num_layers", num_layers, 1)
    check_int("pp", pp, 1)
    check_int("interleave", interleave, 1)
    if num_layers % (pp * interleave):
        raise ValueError(f"pp={pp} (times interleave={interleave}) must divide num_layers="
                         f"{num_layers}, so that every stage holds the same number of blocks")
    per = num_layers // (pp * interleave)
    return [range(k * per, (k + 1) * per) for k in range(pp * interleave)]


# ---- the last stage's head: x -> ln_f -> lm_head -> log-softmax at the next tokens -------------
def _head_forward(x, ln_f, lm_head, tokens, cfg, temperature):
    """x (n, T, D), the last block's output -> per_token_logps (n, T - 1): the final norm, then
    the very head of :func:`rlmperf_lite.nn.model.logps_forward`."""
    hf, c_lnf = rmsnorm_forward(x, ln_f, cfg.norm_eps)                         # (n, T, D)
    logps, c_head = lm_head_forward(hf, lm_head, tokens, temperature)          # (n, T-1)
    return logps, (c_lnf, c_head)


def _head_backward(dlogps, cache):
    """dlogps (n, T - 1) -> dx (n, T, D) and {ln_f, lm_head} grads."""
    c_lnf, c_head = cache
    dhf, dlm_head = lm_head_backward(dlogps, c_head)                           # (n, T, D)
    dx, dln_f = rmsnorm_backward(dhf, c_lnf)                                   # (n, T, D)
    return dx, {"ln_f": dln_f, "lm_head": dlm_head}


def _add(sums: dict, grads: dict) -> None:
    """Gradient accumulation over microbatches: sums[name] += grads[name]."""
    for name, g in grads.items():
        sums[name] = sums[name] + g if name in sums else g


def pipeline_grads(params: dict, cfg: TinyLMConfig, tokens, dlogps_fn, *, pp: int,
                   microbatches: int, schedule: str = "1f1b", interleave: int = 1,
                   group: ProcessGroup | None = None, temperature: float = 1.0):
    """Per-token log-probs and the gradient of any loss of them, pipeline-parallel over pp
    simulated ranks (Huang et al. 2019, §2.2; Narayanan et al. 2021, §2.2; book section
    :ref:`sec-pp-gradient`).

    The batch of n sequences is split into m = ``microbatches`` microbatches of n/m rows. The
    schedule's ops run one at a time in the order of :func:`schedule_timeline`'s records (start
    time, then stage), each on the arrays of its own rank; activations and their gradients cross
    stages only through ``group.send``, which counts their bytes.

    Args:
        params: the model's weights (as :func:`rlmperf_lite.nn.init_params`); stage s
            reads only the weights it holds.
        cfg: the model config; ``cfg.num_layers`` must be a multiple of pp v.
        tokens: (n, T) int token ids.
        dlogps_fn: ``dlogps_fn(per_token_logps_mb, rows) -> dlogps_mb``, both (n/m, T - 1):
            dLoss/dper_token_logps of the microbatch of batch rows ``rows`` (a slice), called by
            the last stage; any loss works, e.g. GRPO's with whole-batch normalisers.
        pp: number of pipeline stages (ranks).
        microbatches: m, must divide n (and be a multiple of pp for ``"interleaved"``).
        schedule: ``"gpipe"``, ``"1f1b"`` or ``"interleaved"``.
        interleave: v, model chunks per stage (``"interleaved"`` only; 1 otherwise).
        group: a :class:`ProcessGroup` of pp ranks to send through and count in (default: a new
            one; pass one to read ``group.log``).
        temperature: > 0, as in :func:`rlmperf_lite.nn.logps_forward`.
    Returns:
        ``(per_token_logps, grads, timeline)``: per_token_logps (n, T - 1) computed by the last
        stage; grads, every weight's gradient summed over microbatches, merged from the stages
        (each stage keeps its own in a real run, for its own optimizer step, so the merge sends
        nothing); the :class:`PipelineTimeline` the ops ran in.
    Raises:
        ValueError: naming the parameter: ``pp`` (or ``interleave``) not dividing
            ``cfg.num_layers``, ``microbatches`` not dividing n, an unknown ``schedule``,
            ``interleave`` > 1 without the interleaved schedule, a ``group`` of the wrong size, bad
            ``tokens`` or ``temperature``, or ``dlogps_fn`` returning the wrong shape.
    """
    tokens = check_tokens(tokens, cfg)
    layers = _check_pipeline_args(cfg, tokens, pp, microbatches, schedule, interleave,
                                  temperature)
    if group is None:
        group = ProcessGroup(pp, name="pp")
    elif group.size != pp:
        raise ValueError(f"group has {group.size} ranks, pp={pp} needs {pp}")
    timeline = schedule_timeline(make_schedule(schedule, pp, microbatches, interleave))
    run = _PipelineRun(params, cfg, tokens, layers, pp, interleave, microbatches, group,
                       temperature, dlogps_fn)
    for rec in timeline.records:
        k = rec["chunk"] * pp + rec["stage"]                   # virtual stage
        op = run.forward if rec["op"] == "F" else run.backward
        op(rec["stage"], rec["microbatch"], k)
    merged = {}
    for g in run.grads:
        merged.update(g)
    return run.per_token_logps, merged, timeline


def _check_pipeline_args(cfg, tokens, pp, microbatches, schedule, interleave,
                         temperature) -> list:
    """The checks of :func:`pipeline_grads`; returns the blocks of each virtual stage."""
    check_choice("schedule", schedule, SCHEDULES)
    check_int("interleave", interleave, 1)
    if schedule != "interleaved" and interleave != 1:
        raise ValueError(f"interleave={interleave} needs schedule='interleaved', got "
                         f"schedule={schedule!r}")
    layers = stage_layers(cfg.num_layers, pp, interleave)      # virtual stage k -> its blocks
    check_int("microbatches", microbatches, 1)
    if len(tokens) % microbatches:
        raise ValueError(f"microbatches={microbatches} must divide the batch of "
                         f"n={len(tokens)} sequences")
    check_number("temperature", temperature, low=0, low_open=True)
    return layers


class _PipelineRun:
    """The pp simulated ranks while a schedule runs: the weights each holds, its gradients
    summed over microbatches, its inbox of sent arrays and the caches kept from F to B."""

    def __init__(self, params, cfg, tokens, layers, pp, interleave, microbatches, group,
                 temperature, dlogps_fn):
        self.cfg, self.tokens, self.layers, self.pp, self.group = cfg, tokens, layers, pp, group
        self.temperature, self.dlogps_fn = temperature, dlogps_fn
        self.last = pp * interleave - 1                        # the last virtual stage
        self.nb = len(tokens) // microbatches                  # rows per microbatch
        # what each rank holds: its blocks' weights, plus the embeddings (first), head (last)
        self.held = [{} for _ in range(pp)]
        for k, blocks in enumerate(layers):                    # virtual stage k on rank k % pp
            for i in blocks:
                self.held[k % pp].update({name: w for name, w in params.items()
                                          if name.startswith(f"h{i}.")})
        self.held[0].update(wte=params["wte"], wpe=params["wpe"])
        self.held[-1].update(ln_f=params["ln_f"], lm_head=params["lm_head"])
        self.grads = [{} for _ in range(pp)]   # per rank: {weight: gradient}
        self.inbox = [{} for _ in range(pp)]   # per rank: (op, mb, k) -> array received
        self.saved = [{} for _ in range(pp)]   # per rank: (mb, k) -> caches kept from F to B
        self.per_token_logps = None            # (n, T-1), on the last rank

    def forward(self, s: int, mb: int, k: int) -> None:
        """Op F of microbatch ``mb`` on virtual stage k (rank s)."""
        rows, held = slice(mb * self.nb, (mb + 1) * self.nb), self.held[s]
        if k == 0:
            x, emb = embedding_forward(held["wte"], held["wpe"], self.tokens[rows])
        else:
            x, emb = self.inbox[s].pop(("F", mb, k)), None     # (n/m, T, D)
        blocks = []
        for i in self.layers[k]:
            x, c_block = block_forward(held, i, x, self.cfg)   # (n/m, T, D)
            blocks.append(c_block)
        head = None
        if k == self.last:
            logps, head = _head_forward(x, held["ln_f"], held["lm_head"], self.tokens[rows],
                                        self.cfg, self.temperature)
            if self.per_token_logps is None:
                n, T = self.tokens.shape
                self.per_token_logps = np.zeros((n, T - 1), dtype=logps.dtype)
            self.per_token_logps[rows] = logps
        else:
            dst = (k + 1) % self.pp
            self.inbox[dst][("F", mb, k + 1)] = self.group.send(x, src=s, dst=dst)
        self.saved[s][(mb, k)] = (emb, blocks, head)

    def backward(self, s: int, mb: int, k: int) -> None:
        """Op B of microbatch ``mb`` on virtual stage k (rank s)."""
        rows, nb, T = slice(mb * self.nb, (mb + 1) * self.nb), self.nb, self.tokens.shape[1]
        emb, blocks, head = self.saved[s].pop((mb, k))         # free the activations
        if k == self.last:
            dlogps = np.asarray(self.dlogps_fn(self.per_token_logps[rows], rows))
            if dlogps.shape != (nb, T - 1):
                raise ValueError(f"dlogps_fn must return shape {(nb, T - 1)} for rows "
                                 f"{rows}, got {dlogps.shape}")
            dx, g = _head_backward(dlogps, head)               # (n/m, T, D)
            _add(self.grads[s], g)
        else:
            dx = self.inbox[s].pop(("B", mb, k))               # (n/m, T, D)
        for c_block in reversed(blocks):
            dx, g = block_backward(dx, c_block)
            _add(self.grads[s], g)
        if k == 0:
            dwte, dwpe = embedding_backward(dx, emb)
            _add(self.grads[s], {"wte": dwte, "wpe": dwpe})
        else:
            dst = (k - 1) % self.pp
            self.inbox[dst][("B", mb, k - 1)] = self.group.send(dx, src=s, dst=dst)
