"""The ``rlmperf`` command line (also ``python -m rlmperf_lite``), book section
:ref:`sec-grpo-running`.

    rlmperf train --algo {grpo,dr_grpo,dapo,rloo,reinforce_pp,ppo} --seed 0 [--steps N] [--json]
    rlmperf train --runtime ray [--address ADDR] [--ray-mode {colocated,sync,one_step_off,async}]
        [--staleness K] [--cpus-per-actor C] [--placement {default,spread}]
    rlmperf workdepth [--num-layers L ...] [--json]        # the toy model, FLOPs and rounds
    rlmperf workdepth --model qwen2.5-7b --hardware h100 --gpus 64 ... [--json]   # seconds
    rlmperf compare-run LOGFILE --model qwen2.5-7b --hardware h100 --gpus 8 [--json]
    rlmperf estimate --model qwen2.5-7b --hardware h100 --algo grpo --prompts 32 \
        --group-size 16 --prompt-len 512 --response-len 4096 --gpus 64 [--rollout-tp 2] [--json]

``train --json`` prints one JSON object per step, then a summary object on the last line with
``final_reward_mean`` (batch mean reward of the last step), ``eval_accuracy`` (greedy decoding on
the 1,000 held-out prompts), ``base_eval_accuracy`` (the warm-start model's) and ``wall_s``.
Every ``--json`` line is strict JSON (no NaN or Infinity). Bad input is one line on stderr that
names the flag as typed (``--gpus``, not the library's ``gpus``), and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from functools import partial

from .checks import check_number
from .nn import TinyLMConfig
from .rl import GRPOConfig, PPOConfig, evaluate_details, train_grpo, train_ppo
from .tasks import AdditionTask, CoTTask
from .cost.workdepth import grpo_step_workdepth

__all__ = ["main"]

ALGOS = {"ppo": (PPOConfig, train_ppo),
         **{name: (partial(GRPOConfig.variant, name), train_grpo)
            for name in GRPOConfig.VARIANTS}}
TASKS = {"addition": AdditionTask, "cot": CoTTask}


def _train_setup(args):
    """(config, train function, task) of ``rlmperf train``'s flags; --task cot starts from the
    design's defaults (``GRPOConfig.for_cot``) and runs the GRPO family in this process."""
    config_cls, train = ALGOS[args.algo]
    overrides = {k: getattr(args, k) for k in ("seed", "steps", "lr", "num_prompts", "group_size",
                                               "kl_coef") if getattr(args, k) is not None}
    if "group_size" in overrides and args.algo == "ppo":
        raise ValueError("--group-size applies to the GRPO family, not --algo ppo")
    task = TASKS[args.task]()
    if args.task == "addition":
        return config_cls(**overrides), train, task
    if args.algo == "ppo" or args.runtime == "ray":
        raise ValueError("--task cot runs the GRPO family in this process: drop --algo ppo "
                         "and --runtime ray")
    return GRPOConfig.for_cot(**{**GRPOConfig.VARIANTS[args.algo], **overrides}), train, task


def _train(args) -> int:
    t0 = time.perf_counter()
    config, train, task = _train_setup(args)

    def emit(row):
        if args.json:
            print(json.dumps(row, allow_nan=False), flush=True)

    if args.runtime == "ray":
        _check_ray_flags(args)
        from .distributed import init_ray, mode_config, run_config, train_ray
        config = run_config(mode_config(config, args.ray_mode, staleness=args.staleness),
                            args.ray_mode)              # refused here, before Ray starts
        init_ray(args.address)
        result = train_ray(config, mode=args.ray_mode, on_step=emit,
                           cpus_per_actor=args.cpus_per_actor, placement=args.placement)
    else:
        for flag, value, default in (("address", args.address, None),
                                     ("staleness", args.staleness, None),
                                     ("cpus-per-actor", args.cpus_per_actor, 0.0),
                                     ("placement", args.placement, "default")):
            if value != default:
                raise ValueError(f"--{flag} is an option of --runtime ray")
        result = train(config, task=task, progress=not args.json, on_step=emit,
                       eval_every=args.eval_every, stop_at_accuracy=args.stop_at_accuracy)
    summary = {
        "summary": True, "task": args.task, "algo": args.algo, "seed": config.seed,
        "steps": len(result.history),
        "final_reward_mean": result.history[-1]["reward_mean"] if result.history else None,
        **{f"{who}eval_{k}": v
           for who, p in (("", result.params), ("base_", result.base_params))
           for k, v in evaluate_details(p, config.model, task,
                                        max_new_tokens=config.max_new_tokens).items()},
        "warmstart_s": result.warmstart_s,
        "wall_s": time.perf_counter() - t0,
    }
    if args.runtime == "ray":                   # where each actor ran: node 0 is the driver's
        summary["actor_nodes"] = {a["lane"]: a["node"] for a in result.actors}
    if args.json:
        print(json.dumps(summary, allow_nan=False), flush=True)
    else:
        print(f"held-out greedy accuracy: base {summary['base_eval_accuracy']:.3f} -> "
              f"after GRPO {summary['eval_accuracy']:.3f}  ({summary['wall_s']:.1f} s)")
    return 0


def _check_ray_flags(args) -> None:
    """Every ``--runtime ray`` flag, checked before Ray starts (which takes seconds)."""
    if args.algo == "dapo":
        raise ValueError("--algo dapo resamples groups whose rewards are all equal (dynamic "
                         "sampling), which --runtime ray does not run yet: use --runtime local "
                         "for DAPO, or --algo grpo, dr_grpo, rloo or reinforce_pp on Ray")
    if args.algo == "ppo" or args.eval_every or args.stop_at_accuracy is not None:
        raise ValueError("--runtime ray runs the GRPO family without --eval-every or "
                         "--stop-at-accuracy; use --algo grpo, dr_grpo, rloo or reinforce_pp")
    if args.ray_mode == "async" and args.staleness is None:
        raise ValueError("--ray-mode async needs --staleness K (how many weight versions "
                         "the rollout may run ahead, >= 0)")
    check_number("cpus_per_actor", args.cpus_per_actor, low=0)
    if args.address is not None:
        from .distributed.runtime import check_address
        check_address(args.address)
        return
    from .distributed import check_cpus, local_num_cpus
    # train_ray's default actors (one worker and one learner), against the local Ray's CPUs
    check_cpus(args.ray_mode, 1, 1, args.cpus_per_actor, free_cpus=local_num_cpus())


_TOY_FLAGS = ("num_layers", "hidden_size", "num_heads", "vocab_size", "intermediate_size",
              "mlp", "num_prompts", "processors", "attention")
_STEP_FLAGS = ("hardware", "algo", "prompts", "gpus", "train_efficiency", "decode_efficiency")
_SHARED = {"group_size": 16, "prompt_len": 512, "response_len": 4096, "kl_coef": 0.0}
_REAL = {"hardware": "h100", "algo": "grpo", "prompts": 32, "gpus": 64, "train_efficiency": 1.0,
         "decode_efficiency": 1.0, **_SHARED}       # the defaults of a real model's step


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _model_and_hardware(args):
    """``--model``: a config.json path or a model directory read into a ModelConfig, or a
    preset's name (checked); with ``--hardware`` checked. The errors name the flag."""
    import os

    from .cost import ModelConfig, hardware_preset, model_preset
    path = (os.path.sep in args.model or args.model.endswith(".json")
            or os.path.isdir(args.model))
    try:
        model = ModelConfig.from_hf_config(args.model) if path else model_preset(args.model)
    except ValueError as err:
        raise ValueError(f"--model: {err}") from None
    try:
        hardware_preset(args.hardware)
    except ValueError as err:
        raise ValueError(f"--hardware: {err}") from None
    return model if path else args.model


def _step_inputs(args) -> dict:
    """The keyword arguments of estimate_rl_step from the flags ``estimate`` and ``workdepth``
    share (a preset name, a config.json path or a model directory for ``--model``)."""
    model = _model_and_hardware(args)
    kwargs = {k: getattr(args, k) for k in ("prompts", "group_size", "prompt_len", "response_len",
                                            "gpus", "kl_coef", "train_efficiency",
                                            "decode_efficiency")}
    return {"actor": model, "hardware": args.hardware, **kwargs}


def _print_json(args, kwargs: dict, result: dict) -> int:
    """One strict JSON object: the inputs as typed (the model's name, not its config), then the
    result."""
    inputs = {"model": args.model, "algo": args.algo,
              **{k: v for k, v in kwargs.items() if k != "actor"}}
    print(json.dumps({"inputs": inputs, **result}, allow_nan=False))
    return 0


def _workdepth_real(args) -> int:
    from .cost import rl_step_workdepth_s
    for name in _TOY_FLAGS:
        if getattr(args, name) is not None:
            raise ValueError(f"{_flag(name)} describes the toy model; with --model the shape "
                             "comes from the model (drop the flag)")
    for name, real in _REAL.items():
        if getattr(args, name) is None:
            setattr(args, name, real)
    kwargs = _step_inputs(args)
    wd = rl_step_workdepth_s(args.algo, **kwargs)
    if args.json:
        return _print_json(args, kwargs, wd.as_dict())
    print(f"{args.algo} step of {args.model} on {wd.processors} x {args.hardware}: "
          f"{wd.sequences_per_gpu:g} sequences per GPU in decode (replicas of {wd.rollout_tp})")
    print(f"{'phase':<16}{'W (GPU-s)':>12}{'W/p (s)':>10}{'D (s)':>10}{'lower (s)':>11}"
          f"{'upper (s)':>11}")
    for p in (*wd.phases, wd):
        name = getattr(p, "name", "step")
        print(f"{name:<16}{p.work_gpu_s:>12.4g}{p.work_gpu_s / wd.processors:>10.4g}"
              f"{p.depth_s:>10.4g}{p.brent_lower_s:>11.4g}{p.brent_upper_s:>11.4g}")
    print(f"estimate_rl_step: {wd.estimate_s:.4g} s "
          f"({'within' if wd.brackets_estimate else 'outside'} the bounds)")
    return 0


def _workdepth(args) -> int:
    if args.model is not None:
        return _workdepth_real(args)
    for name in _STEP_FLAGS:
        if getattr(args, name) is not None:
            raise ValueError(f"{_flag(name)} needs --model (a real model's step in seconds); "
                             "without it, workdepth counts the toy model in FLOPs and rounds")
    toy = TinyLMConfig()
    defaults = {"num_layers": toy.num_layers, "hidden_size": toy.hidden_size,
                "num_heads": toy.num_heads, "vocab_size": toy.vocab_size,
                "intermediate_size": toy.intermediate_size, "mlp": toy.activation,
                "num_prompts": GRPOConfig().num_prompts, "processors": 1, "attention": "causal",
                "prompt_len": AdditionTask.prompt_len, "response_len": GRPOConfig().max_new_tokens,
                "kl_coef": GRPOConfig().kl_coef, "group_size": GRPOConfig().group_size}
    kwargs = {f: defaults[f] if getattr(args, f) is None else getattr(args, f)
              for f in (*_TOY_FLAGS, "group_size", "prompt_len", "response_len", "kl_coef")}
    _check_toy_step(kwargs, toy)
    result = grpo_step_workdepth(**kwargs)
    if args.json:
        print(json.dumps({"inputs": kwargs, **result.as_dict()}, allow_nan=False))
        return 0
    print(f"{'phase':<16}{'work (FLOPs)':>16}{'depth (rounds)':>16}{'W/p + D':>16}")
    for p in result.phases:
        print(f"{p.name:<16}{p.work_flops:>16.4g}{p.depth_rounds:>16.4g}{p.brent_rounds:>16.4g}")
    print(f"{'total':<16}{result.work_flops:>16.4g}{result.depth_rounds:>16.4g}"
          f"{result.brent_rounds:>16.4g}")
    return 0


def _check_toy_step(kwargs: dict, toy: TinyLMConfig) -> None:
    """The toy model's own limits: its position table, and its GRPO trainer's group and batch."""
    P, R = kwargs["prompt_len"], kwargs["response_len"]
    if P + R > toy.max_seq_len:
        raise ValueError(f"--prompt-len + --response-len = {P + R} exceeds the toy model's "
                         f"{toy.max_seq_len} positions (TinyLMConfig.max_seq_len); shorten them, "
                         "or give --model for a real model's step")
    try:                                            # G >= 2 and B G <= 65,536 samples per step
        GRPOConfig(num_prompts=kwargs["num_prompts"], group_size=kwargs["group_size"])
    except ValueError as err:
        raise ValueError(f"the toy model's GRPO step: {err}") from None


def _estimate(args) -> int:
    from .cost import estimate_rl_step
    kwargs = _step_inputs(args)
    if args.rollout_tp is not None:                 # else the smallest replica that fits
        kwargs["rollout_tp"] = args.rollout_tp
    est = estimate_rl_step(args.algo, **kwargs)
    if args.json:
        return _print_json(args, kwargs, est.as_dict())
    print(f"{args.algo} step of {args.model} on {args.gpus} x {est.hardware} "
          f"(rollout replicas of {est.rollout_tp} GPU)")
    print(f"{'phase':<16}{'FLOPs':>12}{'bytes':>12}{'time (s)':>11}{'bound':>9}"
          f"{'GB/GPU':>9}")
    for p in est.phases:
        print(f"{p.name:<16}{p.flops:>12.3g}{p.bytes_moved:>12.3g}{p.time_s:>11.3f}"
              f"{p.bound:>9}{p.per_gpu_memory_bytes / 1e9:>9.1f}")
    print(f"{'total':<16}{est.flops:>12.3g}{'':>12}{est.time_s:>11.3f}")
    print(f"generation: {est.generation_time_share:.0%} of the time, "
          f"{est.generation_flops_share:.0%} of the FLOPs")
    if not est.fits:
        print(f"does not fit: {est.overflow}")
    return 0


def _compare_run(args) -> int:
    from .sim.runs import compare_run
    model = _model_and_hardware(args)
    flags = ("format", "algo", "prompts", "group_size", "prompt_len", "response_len",
             "warmup_steps", "train_efficiency", "decode_efficiency")
    result = compare_run(args.logfile, model=model, hardware=args.hardware, gpus=args.gpus,
                         **{k: getattr(args, k) for k in flags if getattr(args, k) is not None})
    if args.json:
        print(json.dumps(result.as_dict(), allow_nan=False))
        return 0
    i, used = result.inputs, result.steps_used
    print(f"{result.format} {result.kind} log {result.log}: median of {len(used)} of "
          f"{result.steps_logged} steps ({used[0]}-{used[-1]})")
    print(f"{i['algo']} step of {i['model']} on {i['gpus']} x {i['hardware']}: "
          f"{i['prompts']} prompts x {i['group_size']}, P={i['prompt_len']}, "
          f"R={i['response_len']}")

    def cell(seconds, error, width=12):
        if seconds is None:
            return f"{'-':>{width}}{'':>8}"
        return f"{seconds:>{width}.3f}{'-' if error is None else f'{error:+.0%}':>8}"

    print(f"{'phase':<28}{'measured s':>12}{'estimate s':>12}{'error':>8}{'simulated s':>13}"
          f"{'error':>8}")
    for r in result.rows:
        print(f"{r.phase:<28}{r.measured_s:>12.3f}{cell(r.estimated_s, r.estimate_error)}"
              f"{cell(r.simulated_s, r.simulation_error, 13)}")
    print("error = (measured - model) / measured")
    for label, items in (("inferred", [f"{k} from {v}" for k, v in result.inferred.items()]),
                         ("not inferred (defaults)", result.not_inferred),
                         ("not a phase of the book's step", result.unmapped),
                         ("note", result.notes)):
        if items:
            print(f"{label}:\n" + "\n".join(f"  {item}" for item in items))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``rlmperf`` argument parser: sub-commands ``train``, ``workdepth``, ``estimate``,
    ``compare-run``."""
    parser = argparse.ArgumentParser(
        prog="rlmperf", description="The command line of the book RLM Performance Foundations.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    wd = sub.add_parser(
        "workdepth", help="work, depth and Brent's bounds of one RL step: of a real model in "
        "seconds with --model (the flags of estimate), else of the toy model in FLOPs and rounds")
    for flag, what in (("--num-layers", "L"), ("--hidden-size", "D"), ("--num-heads", "H"),
                       ("--vocab-size", "V"), ("--intermediate-size", "F"),
                       ("--num-prompts", "B"), ("--processors", "p in Brent's bound")):
        wd.add_argument(flag, type=int, default=None, help=f"toy model: {what}")
    wd.add_argument("--mlp", choices=["relu", "gelu", "swiglu"], default=None, help="toy model")
    wd.add_argument("--attention", choices=["causal", "dense"], default=None, help="toy model")
    _step_flags(wd, defaults=False)
    wd.add_argument("--json", action="store_true")
    wd.set_defaults(func=_workdepth)

    es = sub.add_parser("estimate",
                        help="FLOPs, bytes, time and memory of one RL step on real GPUs",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _step_flags(es, defaults=True)
    es.add_argument("--rollout-tp", type=int, default=None,
                    help="GPUs per inference replica, a power of two dividing --gpus and the "
                         "heads (default: the smallest whose HBM holds the weights)")
    es.add_argument("--json", action="store_true")
    es.set_defaults(func=_estimate)
    cr = sub.add_parser("compare-run", help="a verl or NeMo-RL training log's phase times "
                        "against the estimate and the simulator for the same workload")
    cr.add_argument("logfile", metavar="LOGFILE",
                    help="verl's file-logger JSON lines or console output, NeMo-RL's console")
    cr.add_argument("--model", required=True,
                    help="the actor: a preset name, a config.json path or a model directory")
    cr.add_argument("--hardware", required=True, help="an accelerator preset")
    cr.add_argument("--gpus", type=int, required=True, help="GPUs of the run")
    cr.add_argument("--format", choices=["verl", "nemo-rl"], default=None,
                    help="the log's format (default: detected)")
    cr.add_argument("--algo", choices=["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp",
                                       "ppo"], default=None,
                    help="default: ppo if critic timers are logged, else grpo")
    for flag, what in (("--prompts", "B"), ("--group-size", "G"), ("--prompt-len", "P"),
                       ("--response-len", "R")):
        cr.add_argument(flag, type=int, default=None, help=f"{what} (default: from the log)")
    cr.add_argument("--warmup-steps", type=int, default=None,
                    help="first steps left out of the medians (default 1)")
    cr.add_argument("--train-efficiency", type=float, default=None, help="default 0.4")
    cr.add_argument("--decode-efficiency", type=float, default=None, help="default 0.6")
    cr.add_argument("--json", action="store_true")
    cr.set_defaults(func=_compare_run)
    return parser


def _train_parser(sub) -> None:
    """The ``train`` sub-command's flags."""
    tr = sub.add_parser("train", help="warm-start then RL-train the tiny LM on a toy task")
    tr.add_argument("--algo", choices=sorted(ALGOS), default="grpo")
    tr.add_argument("--task", choices=sorted(TASKS), default="addition",
                    help="addition (two 2-digit numbers) or cot (sum 2-6 digits, with or without "
                         "a chain of thought; its own defaults)")
    g, p = GRPOConfig(), PPOConfig()

    def per_algo(name, what):
        return f"{what} (default: grpo {getattr(g, name)}, ppo {getattr(p, name)})"

    tr.add_argument("--seed", type=int, default=None, help=per_algo("seed", "seed"))
    tr.add_argument("--steps", type=int, default=None, help=per_algo("steps", "RL steps"))
    tr.add_argument("--lr", type=float, default=None, help=per_algo("lr", "peak learning rate"))
    tr.add_argument("--num-prompts", type=int, default=None, help=per_algo("num_prompts", "B"))
    tr.add_argument("--group-size", type=int, default=None,
                    help=f"G, GRPO family only (default: {g.group_size})")
    tr.add_argument("--kl-coef", type=float, default=None,
                    help=per_algo("kl_coef", "KL penalty weight"))
    tr.add_argument("--eval-every", type=int, default=0,
                    help="add held-out accuracy to every N-th step's record")
    tr.add_argument("--stop-at-accuracy", type=float, default=None,
                    help="stop once held-out accuracy reaches this (needs --eval-every)")
    tr.add_argument("--runtime", choices=["local", "ray"], default="local",
                    help="train in this process, or as Ray actors (rlmperf_lite.distributed)")
    tr.add_argument("--address", default=None,
                    help="with --runtime ray: the cluster to join ('auto', 'ray://host:10001'); "
                         "default: start a local Ray (2 CPUs, 150 MiB object store)")
    tr.add_argument("--ray-mode", choices=["colocated", "sync", "one_step_off", "async"],
                    default="sync",
                    help="with --runtime ray: where the roles run and how far rollout runs ahead")
    tr.add_argument("--staleness", type=int, default=None,
                    help="with --ray-mode async: the versions the rollout may run ahead "
                         "(AReaL's eta; 0 = on-policy)")
    tr.add_argument("--cpus-per-actor", type=float, default=0.0,
                    help="with --runtime ray: CPUs Ray reserves per actor (0: actors share "
                         "cores; 1 on a cluster: at most one actor per CPU of a node)")
    tr.add_argument("--placement", choices=["default", "spread"], default="default",
                    help="with --runtime ray: 'spread' deals the actors over the cluster's "
                         "nodes (default: where Ray puts them)")
    tr.add_argument("--json", action="store_true", help="one JSON object per line")
    tr.set_defaults(func=_train)


def _step_flags(parser, *, defaults: bool) -> None:
    """The flags of one RL step of a real model (``estimate``; ``workdepth`` with ``--model``,
    where shared flags default to None and are filled per mode)."""
    def d(value):
        return value if defaults else None

    def note(value):
        return "" if defaults else f" (default {value})"

    parser.add_argument("--model", default=d("qwen2.5-7b"),
                        help="a preset name (rlmperf_lite.cost.model_presets()), a config.json "
                             "path or a model directory holding one")
    parser.add_argument("--hardware", default=d("h100"),
                        help="an accelerator preset" + note("h100"))
    parser.add_argument("--algo", choices=["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp",
                                           "ppo"], default=d("grpo"), help="" + note("grpo"))
    parser.add_argument("--prompts", type=int, default=d(32), help="B" + note(32))
    for flag, real in _SHARED.items():
        kind = float if flag == "kl_coef" else int
        parser.add_argument(_flag(flag), type=kind, default=d(real),
                            help={"group_size": "G", "prompt_len": "P", "response_len": "R",
                                  "kl_coef": "KL penalty weight"}[flag]
                            + ("" if defaults else f" (default {real}; the toy's without --model)"))
    parser.add_argument("--gpus", type=int, default=d(64), help="GPUs" + note(64))
    parser.add_argument("--train-efficiency", type=float, default=d(1.0),
                        help="MFU of the trainer (1 = the roofline)" + note(1.0))
    parser.add_argument("--decode-efficiency", type=float, default=d(1.0),
                        help="share of HBM bandwidth a decode step reaches (1 = the roofline)"
                             + note(1.0))


def main(argv=None) -> int:
    """Run the command line; returns the exit code (2 with one line on stderr for bad input)."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except ValueError as err:                      # bad input: one clear line, exit code 2
        print(f"rlmperf: error: {_as_flags(str(err), args)}", file=sys.stderr)
        return 2
    except BrokenPipeError:                        # e.g. `rlmperf train --json | head`
        sys.stderr.close()
        return 0
    except OSError as err:                         # e.g. `> /dev/full`: say so, in one line
        if err.filename is not None:
            raise
        _drop_stdout()
        print(f"rlmperf: error: cannot write the output ({err.strerror or err})",
              file=sys.stderr)
        return 1


_CONFIG_PREFIX = r"(?:(?:AsyncGRPOConfig|GRPOConfig|PPOConfig|config)\.)?"
_FLAG_OF = {"train": {"mode": "ray_mode"}}          # library argument -> dest, where they differ


def _as_flags(message: str, args) -> str:
    """``message`` on one line with the library's argument names written as the flags of the
    command ``args`` ran: ``gpus=0`` -> ``--gpus=0``, ``GRPOConfig.num_prompts`` ->
    ``--num-prompts``, ``mode`` -> ``--ray-mode``. A name without an underscore is taken for an
    argument only before ``=``, ``*``, ``+`` or "must" (``prompts`` is also a word)."""
    dests = set(vars(args)) - {"func", "command", "json"}
    if args.command == "workdepth" and args.model is not None:
        dests -= set(_TOY_FLAGS)                    # a real model's step has no toy flags
    names = {d: d for d in dests} | _FLAG_OF.get(args.command, {})
    for name in sorted(names, key=len, reverse=True):
        plain = "" if "_" in name else r"(?=\s*(?:[=*+]|must\b))"
        message = re.sub(rf"(?<![\w.-]){_CONFIG_PREFIX}{name}\b{plain}", _flag(names[name]),
                         message)
    return " ".join(message.split())


def _version() -> str:
    """The installed package's version (its metadata, from pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rlmperf_lite")
    except PackageNotFoundError:                    # a source tree that was never installed
        return "(not installed)"


def _drop_stdout() -> None:
    """Point stdout at the null device, so that the exit's flush of the unwritten buffer does
    not raise again after the one-line error."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):                   # no real file descriptor (e.g. captured)
        pass


if __name__ == "__main__":
    sys.exit(main())
