"""The taxonomy of Part III in one table: for every axis, its change in work W and depth D,
its communication per GPU (bytes and seconds) and its memory per GPU (book section
:ref:`sec-taxonomy-table`). Every entry is computed by the chapter function that owns it; this
module only lines them up against a common reference.

Parallelism rows (data, tensor, pipeline and expert parallelism): the axis at degree n on n GPUs
of one NVLink domain against the same batch (B sequences of T tokens, micro-batches of b) on one
GPU, so ΔW = W(n) - W(1) (GPU-s) and ΔD = D(n) - D(1) (s), each from the same function at both
degrees. Communication: the bytes one GPU sends per step and the seconds of those collectives,
each call ring steps x alpha + bytes / beta (:func:`~rlmperf_lite.cost.collective_time_s`),
summed whether or not compute hides them (ΔD counts only what reaches the chain).

RL-system rows (placement and asynchrony): the step of
:func:`~rlmperf_lite.cost.rl_step_workdepth_s` (the cost model, not the event simulator) against the
colocated step on the same p GPUs::

    colocated       the reference: every phase on all p GPUs, one after another
    disaggregated   generation on r GPUs, the rest on p - r; synchronous; sync over the network
    fused           the old log-probs taken from the engine: one forward pass fewer
    hybrid          the reference model on a pool of h GPUs, scoring beside the actor's pass
    async(k)        the disaggregated pools, generation up to k versions ahead:
                    D_k = max(D_train + t_sync, (D_gen + D_train + t_sync) / (k + 1))

Communication of an RL row is its weight sync: the bytes each rollout GPU receives
(:func:`~rlmperf_lite.cost.reshard_bytes_per_gpu`) and its seconds (colocated: the step's
own ``weight_sync`` phase; otherwise :func:`~rlmperf_lite.cost.reshard_time_s`); the samples
and log-probs sent between pools (B G (P + R) values, a few MB) and the sync's latency (one
alpha, microseconds) are left out.

Shape letters: B batch, T sequence, b micro-batch, m micro-batches, L layers, h width (D in
STYLE.md; h here as in Megatron), N parameters, A activation bytes, K optimizer bytes per
parameter, n the degree, alpha the latency of a ring step, beta the bus bandwidth.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_choice, check_efficiency, check_int, check_number
from ..cost.workdepth_s import per_version_depth
from .collective import NVLINK_HOP_LATENCY_S, collective_bytes_per_rank
from .dp_workdepth import dp_update_workdepth
from .estimate import estimate_rl_step
from .hardware import resolve_hardware
from .memory import kv_cache_bytes_per_token, model_state_bytes
from .parallel_memory import memory_per_gpu
from .parallel_plan import RECOMPUTE, ParallelPlan, TrainWorkload
from .pp_workdepth import moe_layer_workdepth_s, pipeline_workdepth_s
from .presets import resolve_model
from .reshard import reshard_bytes_per_gpu, reshard_time_s
from .tp_workdepth import ALL_REDUCES_PER_LAYER, RING_PASSES_PER_LAYER, tp_train_workdepth
from .workdepth_s import rl_step_workdepth_s

__all__ = ["TaxonomyRow", "taxonomy_table"]

_ALGOS = ("grpo", "dr_grpo", "rloo", "reinforce_pp")       # a reference model is allowed
_GEN = ("rollout_prefill", "rollout_decode")
_SCORING = ("old_logprobs", "ref_logprobs")               # need only the samples: one stage


@dataclass(frozen=True)
class TaxonomyRow:
    """One axis at its setting: ``work_gpu_s`` W and ``depth_s`` D against the reference's
    (``baseline_*``, one GPU or the colocated step), on ``processors`` GPUs; per GPU per step
    ``comm_bytes_per_gpu`` sent or received and ``comm_s`` their collectives' seconds;
    ``memory_bytes_per_gpu`` on the fullest GPU. The ``*_formula`` fields write each entry in
    the book's letters; ``source`` names the chapter function that computed it."""

    axis: str
    part: str
    setting: str
    processors: int
    work_gpu_s: float
    depth_s: float
    baseline_work_gpu_s: float
    baseline_depth_s: float
    comm_bytes_per_gpu: float
    comm_s: float
    memory_bytes_per_gpu: float
    work_formula: str
    depth_formula: str
    comm_bytes_formula: str
    comm_s_formula: str
    memory_formula: str
    source: str

    @property
    def work_change_gpu_s(self) -> float:
        """ΔW = W - W_baseline, GPU-seconds."""
        return self.work_gpu_s - self.baseline_work_gpu_s

    @property
    def depth_change_s(self) -> float:
        """ΔD = D - D_baseline, seconds."""
        return self.depth_s - self.baseline_depth_s


def _sums(phases) -> tuple:
    return (float(sum(p.work_gpu_s for p in phases)), float(sum(p.depth_s for p in phases)))


# ---- data parallelism and ZeRO (book section sec-dp-workdepth) -------------------------------
_DP = {  # stage: (axis, ΔW, ΔD, bytes, seconds, memory), calls per step as dp_workdepth's table
    0: ("DP", "(n - 1) t_opt: every rank repeats the AdamW step",
        "max(0, t_AR - t_bwd): the all-reduce behind the last backward",
        "2 (n-1)/n x 2N", "2(n-1) alpha + 2(n-1)/n x 2N / beta", "(2 + 2 + K) N + act"),
    1: ("ZeRO-1", "0: each rank steps N / n parameters",
        "exposed - (1 - 1/n) t_opt", "(n-1)/n x (2N + 2N)",
        "2(n-1) alpha + (n-1)/n x 4N / beta", "(2 + 2 + K/n) N + act"),
    2: ("ZeRO-2", "0", "exposed - (1 - 1/n) t_opt", "(n-1)/n x (2N m + 2N)",
        "(m + 1)(n-1) alpha + (n-1)/n x 2N (m + 1) / beta", "(2 + (2 + K)/n) N + act"),
    3: ("ZeRO-3 / FSDP", "0", "exposed - (1 - 1/n) t_opt",
        "(n-1)/n x 3 x 2N m: gathers forward and backward, reduce-scatter",
        "3 m L (n-1) alpha + (n-1)/n x 6N m / beta", "(2 + 2 + K) N / n + act"),
}


def _dp_rows(m, hw, n, wl, kw) -> list:
    """One row per ZeRO stage: :func:`dp_update_workdepth` at dp = n against dp = 1."""
    b, M = wl.micro_batch_size, wl.global_batch // wl.micro_batch_size
    common = dict(seq_len=wl.seq_len, micro_batch_size=b, **kw)
    base = _sums(dp_update_workdepth(m, hw, dp=1, microbatches=M, **common).phases)
    rows = []
    for stage, (axis, dw, dd, cb, cs, mem) in _DP.items():
        wd = dp_update_workdepth(m, hw, dp=n, zero_stage=stage, microbatches=M // n, **common)
        rows.append(TaxonomyRow(
            axis, "parallelism", f"dp = {n}, {M // n} micro-batches a rank", n,
            *_sums(wd.phases), *base, wd.comm_bytes_per_rank, wd.comm_s,
            wd.memory.total_bytes, dw, dd, cb, cs, mem,
            f"dp_update_workdepth(dp={n}, zero_stage={stage})"))
    return rows


# ---- tensor, sequence and context parallelism (book section sec-tp-workdepth) ---------------
def _tp_rows(m, hw, n, wl, kw) -> list:
    """TP, SP and CP rows: :func:`tp_train_workdepth` at degree n against tp = cp = 1. Bytes per
    GPU: n_ar all-reduces (or reduce-scatter + all-gather) of S = b T h A per layer and
    micro-batch over tp; CP's ring all-gathers the K/V shard b T kv / L per layer, passes x."""
    rc, A, M = kw["recompute"], 2, wl.global_batch // wl.micro_batch_size
    L, n_ar, passes = m.num_hidden_layers, ALL_REDUCES_PER_LAYER[rc], RING_PASSES_PER_LAYER[rc]
    S = wl.seq_len * wl.micro_batch_size * m.hidden_size * A
    kv = wl.seq_len * wl.micro_batch_size * kv_cache_bytes_per_token(m, A) / L
    tkw = dict(efficiency=kw["efficiency"], latency_s=kw["latency_s"])
    base = tp_train_workdepth(m, hw, ParallelPlan(microbatches=M, recompute=rc), wl, **tkw)
    specs = (
        ("TP", dict(tp=n), "collective_tp", M * L * n_ar * collective_bytes_per_rank(
            "all_reduce", S, n), f"M L n_ar x 2(n-1)/n x b T h A (n_ar = {n_ar})",
         "M L n_ar (2(n-1) alpha + 2(n-1)/n b T h A / beta)",
         "(weights, grads, states) / n + act (8 + k/n) s b h a layer (k: the split part)"),
        ("SP", dict(tp=n, sp=True), "collective_tp", M * L * n_ar * (
            collective_bytes_per_rank("reduce_scatter", S, n)
            + collective_bytes_per_rank("all_gather", S, n)),
         "M L n_ar x (n-1)/n x 2 b T h A: reduce-scatter + all-gather, TP's bytes",
         "M L n_ar (2(n-1) alpha + 2(n-1)/n b T h A / beta)",
         "(weights, grads, states) / n + act (8 + k)/n s b h a layer"),
        ("CP", dict(cp=n), "ring", M * L * passes * collective_bytes_per_rank(
            "all_gather", kv, n), f"M L x {passes} x (n-1)/n x b T kv / L: the ring's K/V",
         f"M L x {passes} ((n-1) alpha + (n-1)/n b T kv / (L beta))",
         "(2 + 2 + K) N + act / n"),
    )
    rows = []
    for axis, layout, comm, nbytes, cb, cs, mem in specs:
        r = tp_train_workdepth(m, hw, ParallelPlan(**layout, microbatches=M, recompute=rc),
                               wl, **tkw)
        phase = r.phase("tp_collectives" if comm == "collective_tp" else "cp_ring")
        rows.append(TaxonomyRow(
            axis, "parallelism", f"{'tp' if axis != 'CP' else 'cp'} = {n}"
            + (" with SP" if axis == "SP" else ""), n, r.work_gpu_s, r.depth_s,
            base.work_gpu_s, base.depth_s, nbytes, phase.work_gpu_s / n,
            r.memory_bytes_per_gpu,
            "n M L x (collective seconds): GPUs wait through them",
            "-(1 - 1/n) t_mb + L x (collective seconds)", cb, cs, mem,
            f"tp_train_workdepth({', '.join(f'{k}={v}' for k, v in layout.items())})"))
    return rows


# ---- pipeline and expert parallelism (book section sec-pp-workdepth) ------------------------
def _pp_row(m, hw, n, wl, kw) -> TaxonomyRow:
    """1F1B on n stages against one stage (:func:`pipeline_workdepth_s`); each interior stage
    sends its M activations forward and M gradients back, 2 M b T h A bytes."""
    M = wl.global_batch // wl.micro_batch_size
    pkw = dict(microbatches=M, seq_len=wl.seq_len, micro_batch_size=wl.micro_batch_size,
               efficiency=kw["efficiency"], link="intra", latency_s=kw["latency_s"])
    r = pipeline_workdepth_s(m, hw, pp=n, **pkw)
    base = pipeline_workdepth_s(m, hw, pp=1, **pkw)
    plan = ParallelPlan(pp=n, microbatches=M, recompute=kw["recompute"])
    return TaxonomyRow(
        "PP (1F1B)", "parallelism", f"pp = {n}, {M} micro-batches", n, *_sums(r.phases),
        *_sums(base.phases),
        2.0 * M * wl.micro_batch_size * wl.seq_len * m.hidden_size * 2, 2 * M * r.hop_s,
        memory_per_gpu(m, plan, wl).total_bytes,
        "0: the bubble is idling, not work",
        "(M + n - 1)(t_f + t_b)/n - M (t_f + t_b) + 2 (M + n - 1) t_hop",
        "2 M b T h A", "2 M (alpha + b T h A / beta)",
        "(2 + 2 + K) N / n + min(n, M) micro-batches of L/n layers' act",
        f"pipeline_workdepth_s(pp={n}, schedule='1f1b')")


def _ep_row(mm, hw, n, wl, kw) -> TaxonomyRow:
    """The routed experts of every MoE layer on ep = n GPUs, one micro-batch of b T tokens per
    GPU (:func:`moe_layer_workdepth_s`), against one GPU running all n GPUs' micro-batches: per
    step W = L_moe m x W_layer, D = L_moe x D_layer (one micro-batch's chain)."""
    M, tokens = wl.global_batch // wl.micro_batch_size, wl.micro_batch_size * wl.seq_len
    L, m_rank = mm.num_moe_layers, M // n
    ekw = dict(tokens_per_rank=tokens, efficiency=kw["efficiency"], latency_s=kw["latency_s"])
    r = moe_layer_workdepth_s(mm, hw, ep=n, **ekw)
    base = moe_layer_workdepth_s(mm, hw, ep=1, **ekw)
    (w, d), (w1, d1) = _sums(r.phases), _sums(base.phases)
    plan = ParallelPlan(dp=n, ep=n, microbatches=m_rank, recompute=kw["recompute"])
    return TaxonomyRow(
        "EP", "parallelism", f"ep = {n}, {mm.name}", n, L * m_rank * w, L * d, L * M * w1,
        L * d1, 4 * L * m_rank * collective_bytes_per_rank("all_to_all", r.all_to_all_bytes, n),
        4 * L * m_rank * r.all_to_all_s, memory_per_gpu(mm, plan, wl).total_bytes,
        "0 when balanced: the same pairs, each expert's weights read by one GPU",
        "L (t_experts / n - t_experts + 4 t_a2a): imbalance adds max/mean - 1",
        "4 L m x (n-1)/n x b T k h A: dispatch and combine, forward and backward",
        "4 L m ((n-1) alpha + (n-1)/n b T k h A / beta)",
        "experts' (2 + 2 + K) / n, the rest replicated",
        f"moe_layer_workdepth_s(ep={n})")


# ---- where the models run, and asynchrony (sec-placement-workdepth, sec-async-workdepth) ----
def _phases(step, names=None, skip=()) -> list:
    return [p for p in step.phases if (names is None or p.name in names) and p.name not in skip]


def _est_memory(est, names=None, drop=()) -> float:
    """The fullest GPU of the estimate's phases (``names``, default all), less ``drop`` parts."""
    return max(p.per_gpu_memory_bytes - sum(p.memory_parts.get(k, 0.0) for k in drop)
               for p in est.phases if names is None or p.name in names)


def _sync(actor, hw, gpus, tp, mode) -> tuple:
    """(bytes each rollout GPU receives, seconds) of the weight sync (:mod:`.reshard`): from a
    ZeRO-3 trainer on ``gpus`` GPUs, as the estimate shards the states."""
    plan = ParallelPlan(dp=gpus, zero_stage=3)
    return (reshard_bytes_per_gpu(actor, plan, tp, mode=mode),
            reshard_time_s(actor, hw, plan, tp, mode=mode))


def _pools(step, r, hw, algo) -> dict:
    """Generation on r GPUs, the training side on p - r: each phase from the step at its
    pool's size, the sync from the trainers over the network (``reshard_time_s``)."""
    p, actor = step["gpus"], resolve_model(step["actor"], "actor")
    gen = rl_step_workdepth_s(algo, **{**step, "gpus": r})
    train = rl_step_workdepth_s(algo, **{**step, "gpus": p - r})
    nbytes, sync_s = _sync(actor, hw, p - r, gen.rollout_tp, "disaggregated")
    g, t = _sums(_phases(gen, _GEN)), _sums(_phases(train, skip=_GEN + ("weight_sync",)))
    engine = _est_memory(estimate_rl_step(algo, **{**step, "gpus": r}), _GEN, ("model states",))
    trainer = _est_memory(estimate_rl_step(algo, **{**step, "gpus": p - r}),
                          [q.name for q in train.phases if q.name not in _GEN])
    return dict(W=g[0] + t[0], D_gen=g[1], D_train=t[1], bytes=nbytes, sync_s=sync_s,
                memory=max(engine, trainer))


def _hybrid(step, h, hw, algo) -> dict:
    """The reference on h GPUs, the actor and its engine on p - h: the old and reference
    log-probs run side by side (both need only the samples), so that stage's depth is
    max(D_old, D_ref) instead of their sum; every phase's W at its pool's size."""
    p, actor = step["gpus"], resolve_model(step["actor"], "actor")
    act = rl_step_workdepth_s(algo, **{**step, "gpus": p - h})
    ref = rl_step_workdepth_s(algo, **{**step, "gpus": h})
    mine = _phases(act, skip=("ref_logprobs",)) + _phases(ref, ("ref_logprobs",))
    W = sum(q.work_gpu_s for q in mine)
    D = sum(q.depth_s for q in mine if q.name not in _SCORING) + max(
        q.depth_s for q in mine if q.name in _SCORING)
    nbytes = _sync(actor, hw, p - h, act.rollout_tp, "colocated")[0]
    pool = _est_memory(estimate_rl_step(algo, **{**step, "gpus": p - h, "kl_coef": 0.0}))
    ref_est = estimate_rl_step(algo, **{**step, "gpus": h})
    scorer = model_state_bytes(actor.num_params(), trainable=False) / h + \
        ref_est.phase("ref_logprobs").memory_parts["activations"]
    return dict(W=float(W), D=float(D), bytes=nbytes, sync_s=act.phase("weight_sync").depth_s,
                memory=max(pool, scorer))


def _system_rows(step, hw, algo, rollout_gpus, scoring_gpus, staleness) -> list:
    """Colocated, disaggregated, fused, hybrid and async(k) (module docstring)."""
    p, actor = step["gpus"], resolve_model(step["actor"], "actor")
    col = rl_step_workdepth_s(algo, **step)
    W0, D0 = col.work_gpu_s, col.depth_s
    sync0 = col.phase("weight_sync").depth_s
    bytes0 = _sync(actor, hw, p, col.rollout_tp, "colocated")[0]
    mem0 = _est_memory(estimate_rl_step(algo, **step))
    fused = rl_step_workdepth_s(algo, **{**step, "recompute_old_logprobs": False})
    dis = _pools(step, rollout_gpus, hw, algo)
    hyb = _hybrid(step, scoring_gpus, hw, algo)
    D_dis = dis["D_gen"] + dis["D_train"] + dis["sync_s"]
    D_k = per_version_depth(dis["D_gen"], dis["D_train"] + dis["sync_s"], staleness)
    r, h, k = rollout_gpus, scoring_gpus, staleness
    sync_b = "(n_t-1)/n_t x 2N / tp_i: ZeRO-3 shards gathered"
    specs = (
        ("colocated", f"all {p} GPUs, phase after phase", W0, D0, bytes0, sync0, mem0,
         "0: the reference", "0: the reference", sync_b,
         "t_sync: all-gather, NVLink in the node, then the network",
         "16N / p (+ 2N / p a frozen model) + engine 2N / tp_i + KV", "rl_step_workdepth_s"),
        ("disaggregated", f"{r} generate, {p - r} train, synchronous", dis["W"], D_dis,
         dis["bytes"], dis["sync_s"], dis["memory"],
         "W_gen(b_r) - W_gen(b_p): b = ceil(B G tp_i / r) shares the weight reads",
         "t_sync,net - t_sync", "2N / tp_i: the whole shard, from the trainers",
         "2N / (tp_i beta_net)", "max(2N / tp_i + KV, 16N / (p - r) + act)",
         "rl_step_workdepth_s on each pool + reshard_time_s"),
        ("fused", "old log-probs from the engine", fused.work_gpu_s, fused.depth_s, bytes0,
         sync0, mem0, "-W_old: one forward pass fewer", "-D_old", sync_b,
         "t_sync", "as colocated", "rl_step_workdepth_s(recompute_old_logprobs=False)"),
        ("hybrid", f"reference on {h}, actor and engine on {p - h}", hyb["W"], hyb["D"],
         hyb["bytes"], hyb["sync_s"], hyb["memory"],
         "W_gen(b_{p-h}) - W_gen(b_p)", "-min(D_old, D_ref) + (t_sync(p-h) - t_sync)",
         sync_b.replace("n_t", "(p-h)"), "t_sync on p - h",
         "max(16N / (p - h) + engine, 2N / h + act)", "rl_step_workdepth_s on each pool"),
        (f"async (k = {k})", f"{r} generate ahead of {p - r}, bound k = {k}", dis["W"], D_k,
         dis["bytes"], dis["sync_s"], dis["memory"], "as disaggregated",
         "max(D_train + t_sync, (D_gen + D_train + t_sync) / (k + 1)) - D",
         "2N / tp_i", "2N / (tp_i beta_net)", "as disaggregated",
         "per_version_depth on the disaggregated pools"),
    )
    return [TaxonomyRow(axis, "system", setting, p, w, d, W0, D0, nb, cs, mem, *formulas)
            for axis, setting, w, d, nb, cs, mem, *formulas in specs]


def _check(hw, degree, wl, rollout_gpus, scoring_gpus, gpus, staleness, kl_coef):
    check_int("degree", degree, 2)
    if degree > hw.nvlink_domain:
        raise ValueError(f"degree={degree} exceeds the {hw.nvlink_domain} GPUs of a {hw.name} "
                         f"NVLink domain: the table compares the axes within one domain")
    if wl.global_batch % (degree * wl.micro_batch_size):
        raise ValueError(f"global_batch={wl.global_batch} must be a multiple of degree x "
                         f"micro_batch_size = {degree * wl.micro_batch_size}")
    check_int("gpus", gpus, 2)
    check_int("rollout_gpus", rollout_gpus, 1)
    check_int("scoring_gpus", scoring_gpus, 1)
    for label, v in (("rollout_gpus", rollout_gpus), ("scoring_gpus", scoring_gpus)):
        if v >= gpus:
            raise ValueError(f"{label}={v} must leave GPUs of gpus={gpus} for the other pool")
    check_int("staleness", staleness, 0)
    check_number("kl_coef", kl_coef, low=0, low_open=True)


def taxonomy_table(model="qwen2.5-7b", hardware="h100", *, degree: int = 4,
                   global_batch: int = 32, seq_len: int = 4608, micro_batch_size: int = 1,
                   recompute: str = "selective", efficiency: float = 1.0,
                   moe_model="qwen3-30b-a3b", algo: str = "grpo", gpus: int = 64,
                   prompts: int = 32, group_size: int = 16, prompt_len: int = 512,
                   response_len=4096, kl_coef: float = 0.001, rollout_gpus: int = 16,
                   scoring_gpus: int = 16, staleness: int = 1) -> tuple:
    """Part III in one table (module docstring; book section :ref:`sec-taxonomy-table`): a
    :class:`TaxonomyRow` for DP, ZeRO-1, ZeRO-2, ZeRO-3 / FSDP, TP, SP, CP, PP (1F1B), EP,
    colocated, disaggregated, fused, hybrid and async (k).

    Parallelism rows: ``model`` training ``global_batch`` sequences of ``seq_len`` tokens in
    micro-batches of ``micro_batch_size`` on ``degree`` GPUs of one NVLink domain (alpha = NVLink's,
    :data:`~rlmperf_lite.cost.collective.NVLINK_HOP_LATENCY_S`); EP on ``moe_model``. System
    rows: the ``algo`` step of :func:`~rlmperf_lite.cost.estimate_rl_step` with these sizes on
    ``gpus`` GPUs, ``rollout_gpus`` generating when split, the reference on ``scoring_gpus``
    in the hybrid, bound k = ``staleness``. The defaults are the step of
    :ref:`sec-step-7b` and :ref:`sec-decode-depth`.

    Raises:
        ValueError: naming the parameter: a degree outside [2, nvlink_domain] or not dividing
            the batch, a pool that leaves no GPUs, kl_coef = 0 (the fused and hybrid rows move
            the log-prob passes), an algo without a reference, and as the chapter functions.
    """
    m, mm, hw = resolve_model(model, "model"), resolve_model(moe_model, "moe_model"), \
        resolve_hardware(hardware)
    check_choice("algo", algo, _ALGOS)
    check_choice("recompute", recompute, RECOMPUTE)
    check_efficiency("efficiency", efficiency)
    wl = TrainWorkload(global_batch, seq_len, micro_batch_size)
    _check(hw, degree, wl, rollout_gpus, scoring_gpus, gpus, staleness, kl_coef)
    if not mm.is_moe:
        raise ValueError(f"moe_model={mm.name!r} has no experts; choose a MoE model such as "
                         f"'qwen3-30b-a3b'")
    kw = dict(recompute=recompute, efficiency=efficiency, latency_s=NVLINK_HOP_LATENCY_S)
    step = dict(actor=m, hardware=hw, prompts=prompts, group_size=group_size,
                prompt_len=prompt_len, response_len=response_len, gpus=gpus, kl_coef=kl_coef,
                train_efficiency=efficiency)
    return (*_dp_rows(m, hw, degree, wl, kw), *_tp_rows(m, hw, degree, wl, kw),
            _pp_row(m, hw, degree, wl, kw), _ep_row(mm, hw, degree, wl, kw),
            *_system_rows(step, hw, algo, rollout_gpus, scoring_gpus, staleness))
