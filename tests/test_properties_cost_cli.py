"""Property-based tests (hypothesis) of the public cost calculators and of the command line
(issue 18): whatever one argument is — negative, zero, huge (2^63, 10^400), not finite, a
denormal, a string, None, a list — a calculator returns finite numbers or raises a ValueError
that names that argument, and ``rlmperf`` prints strict JSON or one line on stderr naming the
flag as typed, with exit code 2. Never another exception, a NaN, an infinity or a hang.

Each test varies one argument of a valid call (the others stay as given), so the property is
about that argument's check, not about every combination."""
import contextlib
import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmperf_lite import cost as C
from rlmperf_lite.cli import main

SETTINGS = settings(max_examples=50, derandomize=True, deadline=None)
H100 = C.hardware_preset("h100")
QWEN = C.model_preset("qwen2.5-7b")

EXTREME = [0, 1, 2, 3, -1, 7, 10**7, 2**62, 2**63, 10**30, 10**400, 0.0, 0.5, -0.5, 1e-7, 5e-324,
           1e308, math.nan, math.inf, -math.inf, "8", "", None, True, [], [1, 2],
           np.int64(4), np.float64(0.3)]
HUGE = [2**63, 10**30, 10**400, 1e308, 1.7e308, 5e-324, 1e-320, math.nan, math.inf, -math.inf]
ANYTHING = st.one_of(st.sampled_from(EXTREME), st.sampled_from(HUGE),
                     st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=4), st.lists(st.integers(-2, 300), max_size=3))
SIZE, FRACTION, BOOL = st.integers(1, 64), st.floats(1e-6, 1.0), st.booleans()
LENGTHS = st.one_of(st.integers(1, 512), st.lists(st.integers(1, 512), min_size=1, max_size=4))


def _draw(data, args: dict) -> tuple:
    """(name, value): one of ``args``, and half the time a value of the kind it takes (its
    strategy), else anything, so that both valid results and refusals are checked."""
    name = data.draw(st.sampled_from(sorted(args)))
    return name, data.draw(st.booleans().flatmap(lambda kind: args[name] if kind else ANYTHING))


def _finite(x, where="result", allowed=()):
    """Every number in ``x`` (nested dicts, lists, arrays, dataclasses) is finite, except the
    keys in ``allowed``."""
    if hasattr(x, "as_dict"):
        x = x.as_dict()
    if isinstance(x, dict):
        for k, v in x.items():
            if k not in allowed:
                _finite(v, f"{where}[{k!r}]", allowed)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _finite(v, f"{where}[{i}]", allowed)
    elif isinstance(x, (float, int, np.number, np.ndarray)) and not isinstance(x, bool):
        assert np.all(np.isfinite(np.asarray(x, dtype=np.float64))), f"{where} = {x!r}"


def _finite_or_named(call, name, value, allowed=(), also=()):
    """call(**{name: value}) is finite, or a ValueError whose message names ``name`` (or one of
    ``also``, the words an error about that argument uses, e.g. "preset")."""
    try:
        result = call(**{name: value})
    except ValueError as err:
        assert any(w in str(err) for w in (name, *also)), f"{name}={value!r}: {err}"
        return None
    assert not isinstance(result, (str, list, tuple)), f"{name}={value!r}: {result!r:.80}"
    _finite(result, allowed=allowed)
    return result


STEP = dict(actor="qwen2.5-7b", hardware="h100", prompts=4, group_size=2, prompt_len=64,
            response_len=64, gpus=8)
STEP_ARGS = {"prompts": SIZE, "group_size": SIZE, "prompt_len": LENGTHS.filter(np.isscalar),
             "response_len": LENGTHS, "gpus": SIZE, "kl_coef": st.floats(0, 1),
             "train_efficiency": FRACTION, "decode_efficiency": FRACTION, "ppo_epochs": SIZE,
             "rollout_tp": st.sampled_from([1, 2, 4, 8, 3]), "recompute_old_logprobs": BOOL,
             "dtype": st.sampled_from(["bf16", "fp16", "fp8"]),
             "weight_sync": st.sampled_from(["mechanism", "bandwidth", "nccl"]),
             "actor": st.sampled_from(["qwen3-8b", "llama-3.1-8b", "qwen3-30b-a3b", "qwen3.8b"]),
             "hardware": st.sampled_from(["h200", "a100", "b200", "h10"])}


@SETTINGS
@given(algo=st.sampled_from(C.ALGOS), data=st.data())
def test_estimate_rl_step_is_finite_or_names_the_argument(algo, data):
    """estimate_rl_step: finite phases whose times add up to the step's, every time >= 0, or a
    ValueError naming the argument (a model or hardware name: "... preset")."""
    name, value = _draw(data, STEP_ARGS)
    est = _finite_or_named(lambda **kw: C.estimate_rl_step(algo, **{**STEP, **kw}), name, value,
                           also=("preset",))
    if est is not None:
        assert est.time_s == pytest.approx(sum(p.time_s for p in est.phases))
        assert min(p.time_s for p in est.phases) >= 0 and est.time_s > 0


@SETTINGS
@given(data=st.data())
def test_rl_step_workdepth_s_is_finite_or_names_the_argument(data):
    """rl_step_workdepth_s: finite work, depth and Brent's bounds with lower <= upper, or a
    ValueError naming the argument."""
    name, value = _draw(data, {k: v for k, v in STEP_ARGS.items()
                               if k not in ("weight_sync", "actor", "hardware")})
    wd = _finite_or_named(lambda **kw: C.rl_step_workdepth_s("grpo", **{**STEP, **kw}), name,
                          value)
    if wd is not None:
        assert 0 < wd.brent_lower_s <= wd.brent_upper_s


def _train_memory(dp=8, microbatches=1, global_batch=8, seq_len=4096, micro_batch_size=1, **kw):
    plan = C.ParallelPlan(dp=dp, microbatches=microbatches)
    return C.memory_per_gpu(QWEN, plan, C.TrainWorkload(global_batch, seq_len, micro_batch_size),
                            **kw)


@SETTINGS
@given(data=st.data())
def test_memory_per_gpu_is_finite_or_names_the_argument(data):
    """memory_per_gpu (through ParallelPlan and TrainWorkload): finite bytes, the total their
    sum, or a ValueError naming the field; a seq_len past the model's positions is refused."""
    name, value = _draw(data, {
        "dp": st.sampled_from([1, 2, 4, 8, 3]), "microbatches": st.sampled_from([1, 2]),
        "global_batch": st.sampled_from([8, 16, 12]), "seq_len": st.integers(1, 200_000),
        "micro_batch_size": st.sampled_from([1, 2]), "weight_bytes": SIZE, "grad_bytes": SIZE,
        "logits_chunk": SIZE, "schedule": st.sampled_from(["1f1b", "gpipe", "zb"]),
        "attention": st.sampled_from(["flash", "eager", "sdpa"]),
        "logits": st.sampled_from(["fp32", "chunked", "bf16"])})
    mem = _finite_or_named(_train_memory, name, value)
    if mem is not None:
        parts = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.activation_bytes
        assert mem.total_bytes == pytest.approx(parts) and mem.total_bytes > 0
        if name == "seq_len":
            assert value <= QWEN.max_position_embeddings


@SETTINGS
@given(data=st.data())
def test_inference_memory_is_finite_or_names_the_argument(data):
    """inference_memory_per_gpu: finite weights and KV cache, or a ValueError naming it."""
    name, value = _draw(data, {"tp": st.sampled_from([1, 2, 4, 7, 28]), "pp": SIZE,
                               "kv_tokens": st.floats(0, 1e12), "sequences": SIZE,
                               "weight_bytes": SIZE, "kv_dtype_bytes": SIZE})
    _finite_or_named(lambda **kw: C.inference_memory_per_gpu(QWEN, **{"tp": 2, "pp": 1,
                                                                      "kv_tokens": 1e4, **kw}),
                     name, value)


BYTES = st.floats(0, 1e15)
PHASE_CALLS = {
    "roofline_time": (lambda **kw: C.roofline_time(hardware=H100, **kw),
                      dict(flops=1e12, bytes_moved=1e9),
                      {"flops": BYTES, "bytes_moved": BYTES, "num_devices": SIZE,
                       "dtype": st.sampled_from(["bf16", "fp8", "fp4"])}),
    "decode_step_flops": (lambda **kw: C.decode_step_flops(QWEN, **kw), dict(batch=4, context=99),
                          {"batch": SIZE, "context": st.integers(0, 10**5)}),
    "decode_step_bytes": (lambda **kw: C.decode_step_bytes(QWEN, **kw), dict(batch=4, context=99),
                          {"batch": SIZE, "context": st.integers(0, 10**5), "weight_bytes": SIZE,
                           "kv_dtype_bytes": SIZE}),
    "mfu": (lambda **kw: C.mfu(hardware=H100, **kw), dict(model_flops=1e12, seconds=1.0),
            {"model_flops": st.floats(0, 1e15), "seconds": st.floats(1e-3, 1e3),
             "num_devices": SIZE, "dtype": st.sampled_from(["bf16", "fp8", "int4"])}),
    "forward_flops": (lambda **kw: C.forward_flops(QWEN, **kw), dict(seq_lens=[100, 200]),
                      {"seq_lens": LENGTHS, "causal": BOOL,
                       "lm_head": st.sampled_from(["all", "last", "none", "first"])}),
    "prefill_flops": (lambda **kw: C.prefill_flops(QWEN, **kw), dict(prompt_lens=[100]),
                      {"prompt_lens": LENGTHS, "causal": BOOL}),
    "decode_flops": (lambda **kw: C.decode_flops(QWEN, **kw),
                     dict(prompt_lens=100, response_lens=[10, 20]),
                     {"prompt_lens": LENGTHS, "response_lens": LENGTHS}),
    "train_flops": (lambda **kw: C.train_flops(QWEN, **kw), dict(seq_lens=[100]),
                    {"seq_lens": LENGTHS, "recompute": BOOL, "causal": BOOL}),
    "kv_cache_bytes": (lambda **kw: C.kv_cache_bytes(QWEN, **kw), dict(context=100),
                       {"context": LENGTHS, "dtype_bytes": SIZE}),
    "model_state_bytes": (C.model_state_bytes, dict(num_params=1e9),
                          {"num_params": st.floats(0, 1e13), "weight_bytes": SIZE}),
}


@pytest.mark.parametrize("call", sorted(PHASE_CALLS))
@SETTINGS
@given(data=st.data())
def test_roofline_and_phase_functions_are_finite_or_name_the_argument(call, data):
    """The roofline, decode-step, FLOP and memory counts: finite, or a ValueError naming the
    argument. roofline_time's ``intensity`` is infinite, as documented, when no byte moves
    (or so few that F / Q overflows); mfu is in [0, 1]."""
    fn, base, args = PHASE_CALLS[call]
    name, value = _draw(data, args)
    out = _finite_or_named(lambda **kw: fn(**{**base, **kw}), name, value,
                           allowed=("intensity",))
    if call == "mfu" and out is not None:
        assert 0 <= out <= 1


OPS = st.sampled_from([*C.COLLECTIVES, "all-reduce"])
COLLECTIVE_CALLS = {
    "collective_time_s": (C.collective_time_s,
                          dict(op="all_reduce", size_bytes=1e9, n=8,
                               bus_bandwidth_bytes_per_s=1e11),
                          {"op": OPS, "size_bytes": BYTES, "n": SIZE,
                           "bus_bandwidth_bytes_per_s": st.floats(1e6, 1e13),
                           "latency_s": st.floats(0, 1e-3)}),
    "collective_bytes_per_rank": (C.collective_bytes_per_rank,
                                  dict(op="all_gather", size_bytes=1e9, n=8),
                                  {"op": OPS, "size_bytes": BYTES, "n": SIZE}),
    "bus_bandwidth": (C.bus_bandwidth, dict(op="reduce_scatter",
                                            algorithm_bandwidth_bytes_per_s=1e11, n=8),
                      {"op": OPS, "algorithm_bandwidth_bytes_per_s": st.floats(0, 1e13),
                       "n": SIZE}),
    "algorithm_bandwidth": (C.algorithm_bandwidth, dict(op="all_to_all",
                                                        bus_bandwidth_bytes_per_s=1e11, n=8),
                            {"op": OPS, "bus_bandwidth_bytes_per_s": st.floats(0, 1e13),
                             "n": st.integers(2, 64)}),
    "pipeline_bubble_fraction": (C.pipeline_bubble_fraction, dict(pp=4, microbatches=8),
                                 {"pp": SIZE, "microbatches": SIZE, "interleave": SIZE,
                                  "of": st.sampled_from(["ideal", "total", "peak"])}),
}


@pytest.mark.parametrize("call", sorted(COLLECTIVE_CALLS))
@SETTINGS
@given(data=st.data())
def test_collective_functions_are_finite_or_name_the_argument(call, data):
    """Collective time, bytes and bandwidths, and the pipeline bubble: finite, or a ValueError
    naming the argument; algorithm_bandwidth over n = 1 rank is infinite, as documented (no
    data moves); a bubble fraction is >= 0."""
    fn, base, args = COLLECTIVE_CALLS[call]
    name, value = _draw(data, args)
    n_is_1 = call == "algorithm_bandwidth" and name == "n" and value == 1 and value is not True
    if n_is_1:
        assert fn(**{**base, name: value}) == math.inf
        return
    out = _finite_or_named(lambda **kw: fn(**{**base, **kw}), name, value)
    if call == "pipeline_bubble_fraction" and out is not None:
        assert out >= 0


TOY = dict(num_layers=2, hidden_size=64, num_heads=4, vocab_size=14, intermediate_size=256,
           mlp="relu", num_prompts=32, prompt_len=6, response_len=5)
TOY_ARGS = {"num_layers": SIZE, "hidden_size": st.sampled_from([64, 128, 96, 100]),
            "num_heads": st.sampled_from([1, 2, 4, 8, 3]), "vocab_size": st.integers(2, 10**5),
            "intermediate_size": st.one_of(st.none(), SIZE),
            "mlp": st.sampled_from(["relu", "gelu", "swiglu", "silu"]),
            "num_prompts": SIZE, "prompt_len": st.integers(1, 10**4),
            "response_len": st.integers(1, 10**6), "kl_coef": st.floats(0, 1),
            "processors": st.integers(1, 10**12),
            "attention": st.sampled_from(["causal", "dense", "sparse"]),
            "num_params": st.one_of(st.none(), st.integers(1, 10**12))}


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
@SETTINGS
@given(data=st.data())
def test_workdepth_calculators_are_finite_or_name_the_argument(algo, data):
    """grpo_step_workdepth and ppo_step_workdepth: finite work and depth per phase, each
    phase's Brent time W/p + D between the lower bound max(W/p, D) and twice it, or a
    ValueError naming the argument (a response of 10^6 tokens is summed in closed form, not a
    hang)."""
    fn = C.grpo_step_workdepth if algo == "grpo" else C.ppo_step_workdepth
    extra = {"group_size": SIZE} if algo == "grpo" else {"ppo_epochs": SIZE,
                                                         "num_minibatches": SIZE}
    name, value = _draw(data, {**TOY_ARGS, **extra})
    base = {**TOY, "group_size": 4} if algo == "grpo" else TOY
    wd = _finite_or_named(lambda **kw: fn(**{**base, **kw}), name, value)
    for p in (wd.phases if wd is not None else ()):
        assert p.lower_rounds <= p.brent_rounds <= 2 * p.lower_rounds * (1 + 1e-12)


# -- the command line -------------------------------------------------------------------------
INT_TEXT = st.one_of(st.integers(1, 16), st.integers(1, 16), st.integers(-10, 5000),
                    st.sampled_from([0, -1, 10**7, 10**9, 2**63, 10**30])).map(str)
FLOAT_TEXT = st.one_of(st.floats(1e-6, 1.0).map(repr), st.floats(1e-6, 1.0).map(repr),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr),
                       st.sampled_from(["1e-320", "1e-300", "1e-7", "1e-6", "0", "-0.5", "1",
                                        "1.5", "nan", "inf", "-inf", "1e308"]))
JUNK_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6).filter(
    lambda t: t not in ("local", "ray", *C.ALGOS))        # junk: never a valid choice
STEP_FLAGS = {"--prompts": INT_TEXT, "--group-size": INT_TEXT, "--prompt-len": INT_TEXT,
              "--response-len": INT_TEXT, "--gpus": INT_TEXT, "--kl-coef": FLOAT_TEXT,
              "--train-efficiency": FLOAT_TEXT, "--decode-efficiency": FLOAT_TEXT,
              "--model": st.one_of(st.sampled_from(["qwen3-8b", "llama-3.1-8b", "llama3.1-8b",
                                                    "x/config.json"]), JUNK_TEXT),
              "--hardware": st.one_of(st.sampled_from(["h200", "a100", "b200", "h10"]), JUNK_TEXT),
              "--algo": st.one_of(st.sampled_from(C.ALGOS), JUNK_TEXT)}
TOY_FLAGS = {"--num-layers": INT_TEXT, "--hidden-size": INT_TEXT, "--num-heads": INT_TEXT,
             "--vocab-size": INT_TEXT, "--intermediate-size": INT_TEXT,
             "--num-prompts": INT_TEXT, "--processors": INT_TEXT, "--group-size": INT_TEXT,
             "--prompt-len": INT_TEXT, "--response-len": INT_TEXT, "--kl-coef": FLOAT_TEXT,
             "--mlp": st.one_of(st.sampled_from(["relu", "gelu", "swiglu"]), JUNK_TEXT),
             "--attention": st.one_of(st.sampled_from(["causal", "dense"]), JUNK_TEXT)}


def _run(argv):
    """(exit code, stdout, stderr) of ``rlmperf argv`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:                  # argparse's own errors
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def _json_or_one_line(argv, flag):
    """Exit 0 with strict JSON of finite numbers, or exit 2 with stderr naming ``flag``: one
    line "rlmperf: error: ..." from the command, or argparse's usage and "argument FLAG"."""
    code, out, err = _run(argv)
    if code == 0:
        got = json.loads(out, parse_constant=lambda c: pytest.fail(f"{argv}: {c}"))
        _finite(got)
        return got
    assert code == 2 and not out, (argv, code, err)
    lines = err.strip().splitlines()
    if lines[-1].startswith("rlmperf: error: "):
        assert len(lines) == 1 and flag in lines[0], (argv, err)
    else:                                           # argparse: usage, then one error line
        assert lines[-1].startswith("rlmperf ") and f"argument {flag}" in lines[-1], (argv, err)


@SETTINGS
@given(cmd=st.sampled_from([("estimate",), ("workdepth", "--model", "qwen2.5-7b")]),
       data=st.data())
def test_estimate_and_workdepth_of_a_real_model_print_json_or_name_the_flag(cmd, data):
    """`rlmperf estimate` and `rlmperf workdepth --model` with one flag given any text: strict
    JSON, or an error naming that flag (exit 2)."""
    flag = data.draw(st.sampled_from(sorted(STEP_FLAGS)))
    if flag == "--model" and len(cmd) > 1:
        cmd = ("workdepth",)
    value = data.draw(STEP_FLAGS[flag])
    _json_or_one_line([*cmd, f"{flag}={value}", "--json"], flag)


@SETTINGS
@given(flag=st.sampled_from(sorted(TOY_FLAGS)), data=st.data())
def test_toy_workdepth_prints_json_or_names_the_flag(flag, data):
    """`rlmperf workdepth` (the toy model) with one flag given any text: strict JSON, only for
    a step the toy can run (P + R <= its 16 positions, G >= 2, B G <= 65,536 samples), or an
    error naming that flag."""
    got = _json_or_one_line(["workdepth", f"{flag}={data.draw(TOY_FLAGS[flag])}", "--json"],
                            flag)
    if got is not None:
        kw = got["inputs"]
        assert kw["prompt_len"] + kw["response_len"] <= 16 and kw["group_size"] >= 2
        assert kw["num_prompts"] * kw["group_size"] <= 65_536


REFUSED_INT = st.one_of(st.integers(-10**6, -1), st.sampled_from([2**63, 10**30])).map(str)
REFUSED_FLOAT = st.one_of(st.floats(max_value=-1e-9), st.sampled_from([math.nan, math.inf,
                                                                       -math.inf])).map(repr)
TRAIN_REFUSED = {"--seed": REFUSED_INT, "--steps": REFUSED_INT, "--lr": REFUSED_FLOAT,
                 "--num-prompts": st.one_of(REFUSED_INT, st.integers(65537, 10**9).map(str)),
                 "--group-size": st.one_of(REFUSED_INT, st.sampled_from(["0", "1", "16385"])),
                 "--kl-coef": REFUSED_FLOAT,
                 "--eval-every": st.integers(-10**6, -1).map(str),   # 2^63: at the end only
                 "--stop-at-accuracy": st.one_of(REFUSED_FLOAT, st.sampled_from(["1.5"])),
                 "--staleness": INT_TEXT, "--address": JUNK_TEXT,
                 "--cpus-per-actor": st.one_of(REFUSED_FLOAT, st.sampled_from(["1", "0.5"])),
                 "--algo": JUNK_TEXT, "--runtime": JUNK_TEXT}


@SETTINGS
@given(flag=st.sampled_from(sorted(TRAIN_REFUSED)), data=st.data())
def test_train_refuses_bad_flags_before_it_trains(flag, data):
    """`rlmperf train` with a value its flag cannot take (negative, not finite, too many
    samples, a Ray option without --runtime ray, junk): exit 2 and the flag named, before any
    training (each run here takes milliseconds)."""
    value = data.draw(TRAIN_REFUSED[flag])
    code, out, err = _run(["train", "--steps", "1", f"{flag}={value}"])
    assert code == 2 and not out and flag in err.strip().splitlines()[-1], (flag, value, err)


@SETTINGS
@given(flag=st.sampled_from(["--cpus-per-actor", "--staleness", "--algo"]), data=st.data())
def test_ray_flags_are_refused_before_ray_starts(flag, data):
    """`rlmperf train --runtime ray` with a bad --cpus-per-actor (negative, not finite, more
    CPUs than the local Ray gets), --staleness (negative, or with a mode that has its own) or
    --algo (dapo, ppo, junk): exit 2 naming the flag, and Ray never started."""
    ray = pytest.importorskip("ray")
    bad = {"--cpus-per-actor": st.one_of(REFUSED_FLOAT, st.sampled_from(["64", "1e300"])),
           "--staleness": st.integers(-10**6, 10**6).filter(lambda k: k != 1).map(str),
           "--algo": st.one_of(st.sampled_from(["dapo", "ppo"]), JUNK_TEXT)}[flag]
    argv = ["train", "--runtime", "ray", "--ray-mode", "one_step_off", f"{flag}={data.draw(bad)}"]
    code, out, err = _run(argv)
    assert code == 2 and not out and flag in err.strip().splitlines()[-1], (argv, err)
    assert not ray.is_initialized()
