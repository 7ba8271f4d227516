"""The ``rlmperf`` command line (also ``python -m rlmperf_lite``), book section 1.6.

    rlmperf train --algo {grpo,dr_grpo,dapo,rloo,reinforce_pp,ppo} --seed 0 [--steps N] [--json]
    rlmperf train --runtime ray [--address ADDR] [--ray-mode {colocated,sync,one_step_off,async}]
        [--staleness K] [--cpus-per-actor C]
    rlmperf workdepth [--num-layers L ...] [--json]
    rlmperf estimate --model qwen2.5-7b --hardware h100 --algo grpo --prompts 32 \
        --group-size 16 --prompt-len 512 --response-len 4096 --gpus 64 [--json]

``train --json`` prints one JSON object per step, then a summary object on the last line with
``final_reward_mean`` (batch mean reward of the last step), ``eval_accuracy`` (greedy decoding on
the 1,000 held-out prompts), ``base_eval_accuracy`` (the warm-start model's) and ``wall_s``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial

from .nn import TinyLMConfig
from .rl import GRPOConfig, PPOConfig, evaluate, train_grpo, train_ppo
from .tasks import AdditionTask
from .workdepth import grpo_step_workdepth

__all__ = ["main"]

ALGOS = {"ppo": (PPOConfig, train_ppo),
         **{name: (partial(GRPOConfig.variant, name), train_grpo)
            for name in GRPOConfig.VARIANTS}}


def _train(args) -> int:
    t0 = time.perf_counter()
    config_cls, train = ALGOS[args.algo]
    overrides = {k: getattr(args, k) for k in ("seed", "steps", "lr", "num_prompts", "group_size",
                                               "kl_coef") if getattr(args, k) is not None}
    if "group_size" in overrides and args.algo == "ppo":
        raise ValueError("--group-size applies to the GRPO family, not --algo ppo")
    config = config_cls(**overrides)
    task = AdditionTask()

    def emit(row):
        if args.json:
            print(json.dumps(row), flush=True)

    if args.runtime == "ray":
        if args.algo == "ppo" or args.eval_every or args.stop_at_accuracy is not None:
            raise ValueError("--runtime ray runs the GRPO family without --eval-every or "
                             "--stop-at-accuracy; use --algo grpo, dr_grpo, rloo or reinforce_pp")
        if args.ray_mode == "async" and args.staleness is None:
            raise ValueError("--ray-mode async needs --staleness K (how many weight versions "
                             "the rollout may run ahead, >= 0)")
        from .distributed import init_ray, mode_config, run_config, train_ray
        config = run_config(mode_config(config, args.ray_mode, staleness=args.staleness),
                            args.ray_mode)              # refused here, before Ray starts
        init_ray(args.address)
        result = train_ray(config, mode=args.ray_mode, on_step=emit,
                           cpus_per_actor=args.cpus_per_actor)
    else:
        for flag, value, default in (("address", args.address, None),
                                     ("staleness", args.staleness, None),
                                     ("cpus-per-actor", args.cpus_per_actor, 0.0)):
            if value != default:
                raise ValueError(f"--{flag} is an option of --runtime ray")
        result = train(config, task=task, progress=not args.json, on_step=emit,
                       eval_every=args.eval_every, stop_at_accuracy=args.stop_at_accuracy)
    summary = {
        "summary": True, "algo": args.algo, "seed": config.seed, "steps": len(result.history),
        "final_reward_mean": result.history[-1]["reward_mean"] if result.history else None,
        "eval_accuracy": evaluate(result.params, config.model, task,
                                  max_new_tokens=config.max_new_tokens),
        "base_eval_accuracy": evaluate(result.base_params, config.model, task,
                                       max_new_tokens=config.max_new_tokens),
        "warmstart_s": result.warmstart_s,
        "wall_s": time.perf_counter() - t0,
    }
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"held-out greedy accuracy: base {summary['base_eval_accuracy']:.3f} -> "
              f"after GRPO {summary['eval_accuracy']:.3f}  ({summary['wall_s']:.1f} s)")
    return 0


def _workdepth(args) -> int:
    kwargs = {f: getattr(args, f) for f in (
        "num_layers", "hidden_size", "num_heads", "vocab_size", "intermediate_size", "mlp",
        "num_prompts", "group_size", "prompt_len", "response_len", "kl_coef", "processors",
        "attention")}
    result = grpo_step_workdepth(**kwargs)
    if args.json:
        print(json.dumps({"inputs": kwargs, **result.as_dict()}))
        return 0
    print(f"{'phase':<16}{'work (FLOPs)':>16}{'depth (rounds)':>16}{'W/p + D':>16}")
    for p in result.phases:
        print(f"{p.name:<16}{p.work_flops:>16.4g}{p.depth_rounds:>16.4g}{p.brent_rounds:>16.4g}")
    print(f"{'total':<16}{result.work_flops:>16.4g}{result.depth_rounds:>16.4g}"
          f"{result.brent_rounds:>16.4g}")
    return 0


def _estimate(args) -> int:
    import os

    from .cost import ModelConfig, estimate_rl_step
    model = (ModelConfig.from_hf_config(args.model) if os.path.sep in args.model
             or args.model.endswith(".json") else args.model)
    kwargs = {k: getattr(args, k) for k in ("prompts", "group_size", "prompt_len", "response_len",
                                            "gpus", "kl_coef", "train_efficiency",
                                            "decode_efficiency")}
    est = estimate_rl_step(args.algo, actor=model, hardware=args.hardware, **kwargs)
    if args.json:
        print(json.dumps({"inputs": {"model": args.model, "hardware": args.hardware,
                                     "algo": args.algo, **kwargs}, **est.as_dict()}))
        return 0
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


def build_parser() -> argparse.ArgumentParser:
    """The ``rlmperf`` argument parser: sub-commands ``train``, ``workdepth``, ``estimate``."""
    parser = argparse.ArgumentParser(
        prog="rlmperf", description="The command line of the book RLM Performance Foundations.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="warm-start then RL-train the tiny LM on the addition task")
    tr.add_argument("--algo", choices=sorted(ALGOS), default="grpo")
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
    tr.add_argument("--json", action="store_true", help="one JSON object per line")
    tr.set_defaults(func=_train)

    toy = TinyLMConfig()
    wd = sub.add_parser("workdepth", help="work and depth of one GRPO step (defaults: toy model)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    wd.add_argument("--num-layers", type=int, default=toy.num_layers, help="L")
    wd.add_argument("--hidden-size", type=int, default=toy.hidden_size, help="D")
    wd.add_argument("--num-heads", type=int, default=toy.num_heads, help="H")
    wd.add_argument("--vocab-size", type=int, default=toy.vocab_size, help="V")
    wd.add_argument("--intermediate-size", type=int, default=toy.intermediate_size, help="F")
    wd.add_argument("--mlp", choices=["relu", "gelu", "swiglu"], default=toy.activation)
    wd.add_argument("--num-prompts", type=int, default=g.num_prompts, help="B")
    wd.add_argument("--group-size", type=int, default=g.group_size, help="G")
    wd.add_argument("--prompt-len", type=int, default=AdditionTask.prompt_len, help="P")
    wd.add_argument("--response-len", type=int, default=g.max_new_tokens, help="R")
    wd.add_argument("--kl-coef", type=float, default=g.kl_coef)
    wd.add_argument("--processors", type=int, default=1, help="p in Brent's bound")
    wd.add_argument("--attention", choices=["causal", "dense"], default="causal")
    wd.add_argument("--json", action="store_true")
    wd.set_defaults(func=_workdepth)

    es = sub.add_parser("estimate",
                        help="FLOPs, bytes, time and memory of one RL step on real GPUs",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    es.add_argument("--model", default="qwen2.5-7b",
                    help="a preset name (rlmperf_lite.cost.model_presets()) or a config.json path")
    es.add_argument("--hardware", default="h100", help="an accelerator preset")
    es.add_argument("--algo", choices=["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo"],
                    default="grpo")
    es.add_argument("--prompts", type=int, default=32, help="B")
    es.add_argument("--group-size", type=int, default=16, help="G")
    es.add_argument("--prompt-len", type=int, default=512, help="P")
    es.add_argument("--response-len", type=int, default=4096, help="R")
    es.add_argument("--gpus", type=int, default=64)
    es.add_argument("--kl-coef", type=float, default=0.0)
    es.add_argument("--train-efficiency", type=float, default=1.0,
                    help="MFU of the trainer (1 = the roofline)")
    es.add_argument("--decode-efficiency", type=float, default=1.0,
                    help="share of HBM bandwidth a decode step reaches (1 = the roofline)")
    es.add_argument("--json", action="store_true")
    es.set_defaults(func=_estimate)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit code (2 with one line on stderr for bad input)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:                      # bad input: one clear line, exit code 2
        print(f"rlmperf: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:                        # e.g. `rlmperf train --json | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
