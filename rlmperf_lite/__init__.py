"""rlmperf_lite: the library of the book RLM Performance Foundations.

What lives where::

    nn/            the tiny numpy LM: layers.py (forward/backward pairs), model.py, sampling.py
                   (generate, with a KV cache), optim.py (AdamW), flops.py (the FLOP counter)
    tasks/         the verifiable toy task (addition) and its reward
    rl/            losses.py (PPO's clipped surrogate, k1/k3 KL, loss aggregation, and GRPO's
                   loss: grpo_loss / grpo_loss_grad), advantages.py, gae.py, grpo.py
                   (GRPOConfig, train_grpo), ppo.py, async_grpo.py, sweep.py
    cost/          real models and GPUs: flops.py, memory.py, roofline.py, rollout.py,
                   estimate.py (estimate_rl_step), workdepth_s.py (work and depth in seconds,
                   Brent's bounds), workdepth.py (the same in PRAM rounds), variants.py (the
                   GRPO family's costs), collective.py (the ring all-reduce's bytes and time),
                   parallel_*.py and *_workdepth.py (Part III's layouts), taxonomy.py
    parallel/      simulated ranks: collectives.py (ring all-reduce, ...), batch.py (the GRPO
                   batch and the one-rank step every layout must equal), data.py (DP), zero.py,
                   tensor.py, context.py, pipeline.py, expert.py, and the GRPO loops on them
    sim/           the simulator of RL systems: system.py (Engine, PhaseCost, RLSystem: what
                   is simulated), replica.py (continuous-batching decode, an event heap),
                   sync.py (the synchronous step loop), async_engine.py (the discrete-event
                   loop of asynchronous layouts: _Run.run), layouts.py (the system builders),
                   workdepth.py, frameworks.py (framework presets, data in
                   sim/data/frameworks/*.json)
    distributed/   the toy RL system as Ray actors (Controller)
    book/          the book's apparatus, and the only place chapter numbers appear: charts,
                   widgets, each chapter's work-depth calculator (chNN_workdepth.py) and the
                   exercise answers (book/exercises/); nothing outside book/ imports it
    checks.py      argument checks that raise ValueError naming the argument
    cli.py         the ``rlmperf`` command
"""
from . import nn, rl, tasks

__all__ = ["nn", "rl", "tasks"]
