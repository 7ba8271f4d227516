"""PPO with a critic: determinism, clipping acts with several updates per batch, the critic's
FLOPs, bad configs, and that the default run solves the task (issue: Part I, in progress)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from rlmperf_lite.rl import PPOConfig, train_ppo

SHORT = {"steps": 4, "warmstart_max_steps": 30, "num_prompts": 32}


def _no_timings(row):
    return {k: v for k, v in row.items() if not k.endswith("_s")}


def test_same_seed_same_numbers():
    a, b = train_ppo(PPOConfig(seed=2, **SHORT)), train_ppo(PPOConfig(seed=2, **SHORT))
    assert [_no_timings(r) for r in a.history] == [_no_timings(r) for r in b.history]
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])


def test_several_updates_per_batch_move_the_ratio_and_clip():
    """With ppo_epochs * num_minibatches > 1 the later updates see a moved policy: the ratio
    leaves 1 and, at a large learning rate, clipping acts; with one update it stays at 1."""
    many = train_ppo(PPOConfig(ppo_epochs=4, num_minibatches=2, lr=5e-3, **SHORT)).history
    assert max(r["clipfrac"] for r in many) > 0
    assert max(r["ratio_max"] for r in many) > 1.2
    one = train_ppo(PPOConfig(ppo_epochs=1, num_minibatches=1, **SHORT)).history
    assert all(r["clipfrac"] == 0 and abs(r["ratio_mean"] - 1) < 1e-4 for r in one)


def test_metrics_and_the_critics_flops():
    row = train_ppo(PPOConfig(**SHORT)).history[-1]
    for key in ("reward_mean", "value_loss", "vf_clipfrac", "explained_variance", "approx_kl",
                "clipfrac", "entropy", "grad_norm", "values_s", "update_s", "step_s"):
        assert key in row and (row[key] is None or np.isfinite(row[key])), key
    assert row["critic_backward_flops"] == 2 * row["critic_forward_flops"]
    assert row["train_backward_flops"] == 2 * row["train_forward_flops"]


@pytest.mark.parametrize("kwargs,field", [
    ({"ppo_epochs": 0}, "ppo_epochs"), ({"num_minibatches": 500}, "num_minibatches"),
    ({"lam": 1.5}, "lam"), ({"critic_lr": 0.0}, "critic_lr"), ({"lr": float("nan")}, "lr"),
])
def test_bad_configs_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"PPOConfig.{field}"):
        PPOConfig(**kwargs)


def test_default_cli_ppo_run_solves_the_task():
    out = subprocess.run([sys.executable, "-m", "rlmperf_lite", "train", "--algo", "ppo",
                          "--seed", "0", "--json"], capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["algo"] == "ppo" and summary["steps"] == PPOConfig().steps
    assert summary["eval_accuracy"] >= 0.9, summary
    assert summary["base_eval_accuracy"] <= 0.7, summary


@pytest.mark.parametrize("kl_in", ["reward", "loss"])
def test_kl_control_in_reward_or_in_loss(kl_in):
    rows = train_ppo(PPOConfig(kl_coef=0.05, kl_in=kl_in, **SHORT)).history
    assert 0 <= rows[0]["kl_ref"] < 0.02     # starts at the reference: only in-batch drift
    assert all(r["reference_flops"] > 0 for r in rows)
    with pytest.raises(ValueError, match="kl_in"):
        PPOConfig(kl_in="both")
