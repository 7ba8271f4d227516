"""KV-cached sampling: one prefill over the prompts, then one decode step per new token.

Book section :ref:`sec-tiny-model` (and the prefill/decode cost model of :ref:`sec-roofline`). The
prompts of a batch share one length P. Each prompt is prefilled once and its KV cache copied to its
``group_size`` samples (what inference engines do for ``n`` samples of one prompt). The first new
token comes from the prefill's last logits; each later token needs one decode step, a forward of one
position per sequence attending to the cached keys and values. Decoding stops when every sequence
has emitted ``eos_id`` or ``max_new_tokens`` tokens.

:func:`generate_continuous` is the continuous-batching form (what vLLM and SGLang do): a fixed
number of decode slots; a finished sequence leaves its slot and a waiting one is prefilled into it,
so no slot decodes padding while sequences wait. With per-sequence random streams (``seeds``, one
per row) both samplers draw the same tokens; :class:`BatchingStats` counts the padding row-steps
of each (:func:`static_batching_stats` for :func:`generate`).

With ``engine`` (an :class:`~rlmperf_lite.nn.engine.EngineConfig`), :func:`generate` samples as a
rollout engine with other numerics would: bf16- or fp16-rounded weights and activations, top-k /
top-p truncation, and the engine's own log-probs of the sampled tokens (under the truncated
distribution); :func:`engine_logprobs` scores given tokens the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_int
from .config import TinyLMConfig
from .engine import EngineConfig, truncate_logps
from .flops import COUNTER, mm
from .layers import activation_forward, rmsnorm_forward
from .model import check_tokens, forward, log_softmax

__all__ = ["Rollout", "generate", "generate_continuous", "BatchingStats",
           "static_batching_stats", "engine_logprobs"]


@dataclass
class Rollout:
    """Sequences sampled by :func:`generate`; n = B * group_size, R = decode width used."""

    tokens: np.ndarray
    """(n, P + R) int — prompt then completion, ``pad_id`` after the end token."""
    completion_mask: np.ndarray
    """(n, R) float32 — 1 for generated tokens up to and including the end token."""
    per_token_logps: np.ndarray
    """(n, R) float32 — behaviour log-probs of the sampled tokens at sampling time (0 if masked)."""
    prompt_len: int
    """P."""
    num_decode_steps: int
    """Decode forwards run (R - 1, since the first token comes from the prefill)."""


def _keep(a):
    return a


def _decode_step(params, cfg: TinyLMConfig, tok, pos, kcache, vcache, slots=None, cast=None):
    """tok (n,) at position ``pos`` -> logits (n, V); appends its keys/values to the caches.

    ``pos`` is one int for every row of the caches, or, with ``slots`` (n,) the cache rows, an
    (n,) array of per-row positions (each row attends to its own cache length ``pos + 1``).
    ``cast`` (an engine's rounding) rounds every product, norm, residual sum and the logits;
    scores and softmax stay float32, as in engines' attention kernels."""
    n = tok.shape[0]
    H, Dh = cfg.num_heads, cfg.head_dim
    c = _keep if cast is None else cast                # None: the trainer's float32, untouched
    x = c(params["wte"][tok] + params["wpe"][pos])                           # (n, D)
    for i in range(cfg.num_layers):
        h = c(rmsnorm_forward(x, params[f"h{i}.ln1"], cfg.norm_eps)[0])
        qkv = c(mm(h, params[f"h{i}.wqkv"])).reshape(n, 3, H, Dh)            # (n, 3, H, Dh)
        if slots is None:
            kcache[i][:, :, pos] = qkv[:, 1]
            vcache[i][:, :, pos] = qkv[:, 2]
            keys, values = kcache[i][:, :, :pos + 1], vcache[i][:, :, :pos + 1]  # (n, H, t, Dh)
        else:
            kcache[i][slots, :, pos] = qkv[:, 1]
            vcache[i][slots, :, pos] = qkv[:, 2]
            t = int(pos.max()) + 1
            keys, values = kcache[i][slots, :, :t], vcache[i][slots, :, :t]     # (n, H, t, Dh)
        s = mm(qkv[:, 0, :, None, :], keys.transpose(0, 1, 3, 2))           # (n, H, 1, t)
        s *= 1.0 / np.sqrt(Dh)
        if slots is not None:                       # a row's keys past its own length are stale
            s = np.where(np.arange(t) > pos[:, None, None, None], -np.inf, s)
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        y = c(mm(c(p), values)).reshape(n, H * Dh)                           # (n, D)
        x = c(x + c(mm(y, params[f"h{i}.wo"])))
        h = c(rmsnorm_forward(x, params[f"h{i}.ln2"], cfg.norm_eps)[0])
        z = c(activation_forward(c(mm(h, params[f"h{i}.w_up"])), cfg.activation)[0])
        x = c(x + c(mm(z, params[f"h{i}.w_down"])))
    hf = c(rmsnorm_forward(x, params["ln_f"], cfg.norm_eps)[0])
    return c(mm(hf, params["lm_head"]))                                      # (n, V)


def _sample(logits, temperature, rng, top_k=None, top_p=None):
    """logits (n, V) -> (token ids (n,), their log-probs (n,)); greedy when temperature == 0.

    ``rng`` is one Generator for the batch, or a list of n, one per row (one draw each). With
    ``top_k`` / ``top_p`` the draw and the log-probs are those of the truncated distribution."""
    truncated = top_k is not None or top_p is not None
    if temperature == 0:
        tok = logits.argmax(axis=-1)
        logp = log_softmax(logits)
        if truncated:                                       # the argmax is always kept
            logp = truncate_logps(logp, top_k, top_p)
    else:
        logp = log_softmax(logits / np.asarray(temperature, dtype=logits.dtype))
        if truncated:
            logp = truncate_logps(logp, top_k, top_p)
        cdf = np.cumsum(np.exp(logp), axis=-1)                               # (n, V)
        if isinstance(rng, np.random.Generator):
            u = rng.random((logits.shape[0], 1))
        else:
            u = np.array([[r.random()] for r in rng]).reshape(-1, 1)
        u = u * cdf[:, -1:]
        tok = np.minimum((cdf < u).sum(axis=-1), logits.shape[1] - 1)
        if truncated:                        # u = 0, or rounding past the last kept token
            tok = np.clip(tok, (cdf <= 0).sum(axis=-1), (cdf < cdf[:, -1:]).sum(axis=-1))
    return tok, np.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]


def generate(params: dict, prompts, cfg: TinyLMConfig, *, max_new_tokens: int, eos_id: int,
             pad_id: int, group_size: int = 1, temperature: float = 1.0,
             rng: np.random.Generator | None = None, seeds=None,
             engine: EngineConfig | None = None) -> Rollout:
    """Sample ``group_size`` completions for each of B prompts with a KV cache.

    Args:
        prompts: (B, P) int token ids, all of one length P.
        max_new_tokens: R_max >= 1; ``P + R_max`` must fit in ``cfg.max_seq_len``.
        eos_id, pad_id: end token and the filler written after it.
        group_size: G >= 1 samples per prompt (rows laid out prompt by prompt).
        temperature: 0 for greedy decoding, else > 0.
        rng: a ``np.random.Generator``; required unless ``temperature == 0`` or ``seeds``.
        seeds: None, or n ints >= 0: row r draws from its own ``np.random.default_rng(seeds[r])``,
            one draw per kept token (what makes :func:`generate_continuous` equal to this).
        engine: None (the trainer's float32 numerics), or an :class:`EngineConfig`: its
            rounded weights and activations and its truncation; the prompts are then prefilled
            one position at a time through the engine's decode kernel.
    Returns:
        :class:`Rollout` with n = B * G rows; with ``engine``, ``per_token_logps`` are the
        engine's (of its truncated distribution).
    Raises:
        ValueError: naming the bad argument.
    """
    prompts = _check_generate_args(prompts, cfg, max_new_tokens, eos_id, pad_id, group_size,
                                   temperature, rng, seeds)
    B, P = prompts.shape
    n, G, R = B * group_size, group_size, max_new_tokens
    rngs = None if seeds is None else [np.random.default_rng(int(x)) for x in seeds]
    if engine is not None and not isinstance(engine, EngineConfig):
        raise ValueError(f"engine must be None or an EngineConfig, got {engine!r}")
    cast, top_k, top_p = None, None, None
    if engine is not None:
        params, cast, top_k, top_p = engine.params(params), engine.cast, engine.top_k, engine.top_p
    logits, kcache, vcache = _prefill(params, cfg, prompts, G, P + R, cast)  # (n, V)
    out = np.full((n, R), pad_id, dtype=np.int64)
    logps = np.zeros((n, R), dtype=params["wte"].dtype)
    mask = np.zeros((n, R), dtype=np.float32)
    finished = np.zeros(n, dtype=bool)
    steps = 0
    with COUNTER.phase("decode"):
        for j in range(R):
            live = ~finished
            if rngs is None:
                tok, logp = _sample(logits, temperature, rng, top_k, top_p)
                tok, logp = tok[live], logp[live]
            else:                                   # only the live rows draw from their streams
                tok, logp = _sample(logits[live], temperature,
                                    [rngs[r] for r in np.flatnonzero(live)], top_k, top_p)
            out[live, j], logps[live, j], mask[live, j] = tok, logp, 1.0
            finished[live] |= tok == eos_id
            if finished.all() or j == R - 1:
                break
            logits = _decode_step(params, cfg, out[:, j], P + j, kcache, vcache, cast=cast)
            steps += 1
    width = j + 1
    tokens = np.concatenate([np.repeat(prompts, G, axis=0), out[:, :width]], axis=1)
    return Rollout(tokens=tokens, completion_mask=mask[:, :width],
                   per_token_logps=logps[:, :width], prompt_len=P, num_decode_steps=steps)


def _check_generate_args(prompts, cfg, max_new_tokens, eos_id, pad_id, group_size,
                         temperature, rng, seeds=None) -> np.ndarray:
    """The checks of :func:`generate` (ValueError naming the argument); returns the prompts."""
    prompts = check_tokens(prompts, cfg, "prompts")
    B, P = prompts.shape
    if B < 1 or P < 1:
        raise ValueError(f"prompts must hold at least one token in at least one row, got shape "
                         f"{prompts.shape}")
    if isinstance(max_new_tokens, bool) or not (isinstance(max_new_tokens, (int, np.integer))
                                                and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if P + max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt length {P} + max_new_tokens {max_new_tokens} exceeds "
                         f"max_seq_len={cfg.max_seq_len}; lower max_new_tokens")
    if not (isinstance(group_size, (int, np.integer)) and group_size >= 1):
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if seeds is not None:
        _check_seeds(seeds, B * group_size, rng)
    elif temperature > 0 and not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a np.random.Generator when temperature > 0 (or pass "
                         f"seeds), got {rng!r}")
    for name, value in (("eos_id", eos_id), ("pad_id", pad_id)):
        if not 0 <= value < cfg.vocab_size:
            raise ValueError(f"{name}={value} is not a token id of a vocabulary of "
                             f"{cfg.vocab_size}")
    return prompts


def _prefill(params, cfg: TinyLMConfig, prompts, G: int, length: int, cast) -> tuple:
    """The first logits (B G, V) and the KV buffers of :func:`generate`: one forward over the
    prompts (the trainer's kernel), or with an engine's ``cast`` one decode step per prompt
    position (the engine's kernel, rounding as it does); each prompt's caches repeated G times."""
    B, P = prompts.shape
    with COUNTER.phase("prefill"):
        if cast is None:
            hf, cache = forward(params, prompts, cfg)                        # (B, P, D)
            logits = np.repeat(mm(hf[:, -1], params["lm_head"]), G, axis=0)  # (n, V)
            return (logits, *_kv_buffers(cache, G, length, params["wte"].dtype))
        shape = (B, cfg.num_heads, length, cfg.head_dim)
        kc = [np.zeros(shape, np.float32) for _ in range(cfg.num_layers)]
        vc = [np.zeros(shape, np.float32) for _ in range(cfg.num_layers)]
        for t in range(P):
            logits = _decode_step(params, cfg, prompts[:, t], t, kc, vc, cast=cast)   # (B, V)
        return (np.repeat(logits, G, axis=0), [np.repeat(k, G, axis=0) for k in kc],
                [np.repeat(v, G, axis=0) for v in vc])


def engine_logprobs(params: dict, tokens, cfg: TinyLMConfig, engine: EngineConfig, *,
                    temperature: float = 1.0) -> np.ndarray:
    """The engine's next-token log-probs at every position of ``tokens`` (n, T): (n, T - 1, V),
    ``[:, t]`` the distribution of token t + 1 given tokens 0..t, after rounding, temperature
    and truncation (-inf outside top-k / top-p), as :func:`generate` with ``engine`` samples it
    (vLLM's prompt log-probs). Teacher-forced through the engine's decode kernel.

    Raises:
        ValueError: bad ``tokens`` (:func:`~rlmperf_lite.nn.check_tokens`), ``engine`` not an
            EngineConfig, or ``temperature`` not > 0.
    """
    tokens = check_tokens(tokens, cfg)
    if not isinstance(engine, EngineConfig):
        raise ValueError(f"engine must be an EngineConfig, got {engine!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature!r}")
    (n, T), p = tokens.shape, engine.params(params)
    shape = (n, cfg.num_heads, T, cfg.head_dim)
    kc = [np.zeros(shape, np.float32) for _ in range(cfg.num_layers)]
    vc = [np.zeros(shape, np.float32) for _ in range(cfg.num_layers)]
    out = np.empty((n, T - 1, cfg.vocab_size), np.float32)
    for t in range(T - 1):
        logits = _decode_step(p, cfg, tokens[:, t], t, kc, vc, cast=engine.cast)    # (n, V)
        out[:, t] = truncate_logps(log_softmax(logits / np.float32(temperature)),
                                   engine.top_k, engine.top_p)
    return out


def _kv_buffers(cache, G: int, length: int, dtype) -> tuple:
    """Per layer, K and V buffers (B G, H, length, Dh) holding the prompts' keys and values
    (each prompt's repeated for its G samples), the rest filled by the decode steps."""
    kcache, vcache = [], []
    for block in cache[1]:
        k, v = block[2][4], block[2][5]         # block_forward's attention cache: (B, H, P, Dh)
        B, H, P, Dh = k.shape
        for store, src in ((kcache, k), (vcache, v)):
            buf = np.empty((B * G, H, length, Dh), dtype=dtype)
            buf[:, :, :P] = np.repeat(src, G, axis=0)
            store.append(buf)
    return kcache, vcache


def _check_seeds(seeds, n: int, rng) -> None:
    """``seeds``: a sequence of n ints >= 0, one per row, and no shared ``rng`` beside it."""
    if rng is not None:
        raise ValueError("pass rng (one stream for the batch) or seeds (one per row), not both")
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__") or len(seeds) != n:
        raise ValueError(f"seeds must be a sequence of {n} ints (one per row, B * group_size), "
                         f"got {seeds!r}")
    for seed in seeds:
        check_int("seeds[i]", seed, low=0)


@dataclass
class BatchingStats:
    """Row-steps of one sampling run. A row-step is one row (decode slot) of one sampling step;
    it is padding when it yields no kept token (its row has ended, or its slot is empty)."""

    num_slots: int
    """Rows per step (n for :func:`generate`, ``num_slots`` for :func:`generate_continuous`)."""
    num_steps: int
    """Sampling steps (each samples one token per busy row)."""
    kept_tokens: int
    """Completion tokens the run kept (the rollout's ``completion_mask.sum()``)."""

    @property
    def row_steps(self) -> int:
        """``num_slots * num_steps``."""
        return self.num_slots * self.num_steps

    @property
    def padding_row_steps(self) -> int:
        """Row-steps that yield no kept token, ``row_steps - kept_tokens``."""
        return self.row_steps - self.kept_tokens

    @property
    def padding_fraction(self) -> float:
        """``padding_row_steps / row_steps``."""
        return self.padding_row_steps / self.row_steps


def static_batching_stats(rollout: Rollout) -> BatchingStats:
    """The :class:`BatchingStats` of a :func:`generate` rollout: every row steps until the
    longest ends, n * R row-steps, of which ``n * R - completion_mask.sum()`` are padding."""
    n, R = rollout.completion_mask.shape
    return BatchingStats(num_slots=n, num_steps=R, kept_tokens=int(rollout.completion_mask.sum()))


def _prefill_slots(params, cfg: TinyLMConfig, prompts, slots, kcache, vcache) -> np.ndarray:
    """Prefill prompts (k, P) into cache rows ``slots`` (k,); returns their last logits (k, V)."""
    with COUNTER.phase("prefill"):
        hf, cache = forward(params, prompts, cfg)                            # (k, P, D)
        P = prompts.shape[1]
        for i, block in enumerate(cache[1]):
            kcache[i][slots, :, :P] = block[2][4]   # block_forward's attention cache: (k, H, P, Dh)
            vcache[i][slots, :, :P] = block[2][5]
        return mm(hf[:, -1], params["lm_head"])


def generate_continuous(params: dict, prompts, cfg: TinyLMConfig, *, num_slots: int,
                        max_new_tokens: int, eos_id: int, pad_id: int, group_size: int = 1,
                        temperature: float = 1.0, seeds=None) -> tuple[Rollout, BatchingStats]:
    """Continuous batching: :func:`generate`'s rollout from ``num_slots`` decode slots.

    The n = B * G sequences wait in row order. Each step samples one token in every busy slot
    (from the prefill's logits for a newly admitted sequence, else from one batched decode step
    at each slot's own position and KV-cache length); a sequence that emits ``eos_id`` or its
    ``max_new_tokens``-th token leaves, and the next waiting one is prefilled into its slot.
    Each sequence is prefilled on its own (no prefix sharing within a group).

    Args:
        num_slots: S >= 1 decode slots (S >= n is the static batch without its padding).
        seeds: n ints >= 0, row r's stream ``np.random.default_rng(seeds[r])``; required
            unless ``temperature == 0``. The other arguments are :func:`generate`'s.
    Returns:
        (:class:`Rollout`, :class:`BatchingStats`); the rollout equals
        ``generate(..., seeds=seeds)`` (tokens and mask exactly, log-probs to float rounding).
    Raises:
        ValueError: naming the bad argument.
    """
    check_int("num_slots", num_slots, low=1)
    if temperature > 0 and seeds is None:
        raise ValueError("seeds must be given (n ints, one stream per row) when temperature > 0")
    prompts = _check_generate_args(prompts, cfg, max_new_tokens, eos_id, pad_id, group_size,
                                   temperature, None, seeds)
    (B, P), G = prompts.shape, group_size
    rngs = None if seeds is None else [np.random.default_rng(int(x)) for x in seeds]
    out = np.full((B * G, max_new_tokens), pad_id, dtype=np.int64)
    logps = np.zeros(out.shape, dtype=params["wte"].dtype)
    lengths, steps, decodes = _run_slots(params, cfg, prompts, G, num_slots, eos_id, temperature,
                                         rngs, out, logps)
    width = int(lengths.max())
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)
    tokens = np.concatenate([np.repeat(prompts, G, axis=0), out[:, :width]], axis=1)
    rollout = Rollout(tokens=tokens, completion_mask=mask, per_token_logps=logps[:, :width],
                      prompt_len=P, num_decode_steps=decodes)
    stats = BatchingStats(num_slots=num_slots, num_steps=steps, kept_tokens=int(lengths.sum()))
    return rollout, stats


def _run_slots(params, cfg: TinyLMConfig, prompts, G: int, S: int, eos_id: int, temperature,
               rngs, out, logps) -> tuple:
    """:func:`generate_continuous`'s loop: fills ``out``/``logps`` (n, R) in place; returns
    (lengths (n,), sampling steps, decode steps)."""
    (B, P), (n, R), dtype = prompts.shape, out.shape, logps.dtype
    shape = (S, cfg.num_heads, P + R, cfg.head_dim)
    kcache = [np.zeros(shape, dtype) for _ in range(cfg.num_layers)]
    vcache = [np.zeros(shape, dtype) for _ in range(cfg.num_layers)]
    lengths, slot_seq = np.zeros(n, dtype=np.int64), np.full(S, -1, dtype=np.int64)
    logits = np.zeros((S, cfg.vocab_size), dtype=dtype)
    admitted, steps, decodes = 0, 0, 0
    while True:
        free = np.flatnonzero(slot_seq < 0)[:n - admitted]      # admit waiting sequences
        if free.size:
            slot_seq[free] = np.arange(admitted, admitted + free.size)
            admitted += free.size
            logits[free] = _prefill_slots(params, cfg, prompts[slot_seq[free] // G], free,
                                          kcache, vcache)
        busy = np.flatnonzero(slot_seq >= 0)
        if busy.size == 0:
            return lengths, steps, decodes
        seqs = slot_seq[busy]
        j = lengths[seqs]
        tok, logp = _sample(logits[busy], temperature,
                            None if rngs is None else [rngs[r] for r in seqs])
        out[seqs, j], logps[seqs, j] = tok, logp
        lengths[seqs] += 1
        done = (tok == eos_id) | (j + 1 == R)
        slot_seq[busy[done]] = -1                                 # finished rows leave
        steps += 1
        if not done.all():                   # one batched decode at per-slot positions P + j
            with COUNTER.phase("decode"):
                logits[busy[~done]] = _decode_step(params, cfg, tok[~done], P + j[~done],
                                                   kcache, vcache, slots=busy[~done])
            decodes += 1
