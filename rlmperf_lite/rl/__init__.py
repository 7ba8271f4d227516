"""RL algorithms on the tiny LM: advantages, losses, GAE, GRPO (book sections :ref:`sec-grpo` to
:ref:`sec-variants-toy`), and GRPO run asynchronously with bounded staleness (book section
:ref:`sec-staleness-learner`)."""
from .async_grpo import (OBJECTIVES, AsyncGRPOConfig, behav_importance_weights,
                         objective_inputs, step_metrics, train_async_grpo)
from .advantages import (check_rewards, grpo_advantages, reinforce_pp_advantages,
                         reinforce_pp_baseline_advantages, rloo_advantages)
from .evaluate import evaluate, evaluate_details, forced_accuracy
from .inputs import check_completion_mask, check_fits_float32, check_per_token_array
from .gae import gae, gae_loop, gae_scan, gae_workdepth
from .grpo import (GRPOConfig, GRPOResult, accumulate_grads, frac_reward_zero_std,
                   rollout_correction, sample_and_score, step_advantages, train_grpo)
from .ppo import PPOConfig, train_ppo
from .losses import (AGG_MODES, KL_ESTIMATORS, aggregate_loss, aggregate_weights, grpo_loss,
                     grpo_loss_grad, kl_estimate, kl_estimate_grad, loss_norms, overlong_penalty,
                     policy_loss, policy_loss_grad, value_loss, value_loss_grad)
from .kl_gradients import categorical_kl_gradients
from .mismatch import (ROLLOUT_IS_LEVELS, ROLLOUT_RS_LEVELS, SAFETY_BOUND, mismatch_metrics,
                       rollout_is_weights, rollout_rs_mask, token_kl)
from .sweep import SweepRun, run_sweep, sweep_table
from .warmstart import warm_start

__all__ = ["grpo_advantages", "rloo_advantages", "reinforce_pp_advantages",
           "reinforce_pp_baseline_advantages", "check_rewards", "KL_ESTIMATORS",
           "check_completion_mask", "check_per_token_array", "check_fits_float32",
           "gae", "gae_loop", "gae_scan", "gae_workdepth", "GRPOConfig", "GRPOResult", "evaluate",
           "evaluate_details", "forced_accuracy",
           "train_grpo", "loss_norms",
           "grpo_loss_grad", "grpo_loss", "step_advantages", "frac_reward_zero_std",
           "sample_and_score", "accumulate_grads",
           "policy_loss", "policy_loss_grad", "kl_estimate", "kl_estimate_grad",
           "aggregate_weights", "aggregate_loss", "AGG_MODES", "value_loss", "value_loss_grad",
           "overlong_penalty", "warm_start", "PPOConfig", "train_ppo",
           "categorical_kl_gradients", "SweepRun", "run_sweep", "sweep_table",
           "AsyncGRPOConfig", "OBJECTIVES", "behav_importance_weights", "objective_inputs",
           "step_metrics", "train_async_grpo", "rollout_correction", "mismatch_metrics", "token_kl", "rollout_is_weights",
           "rollout_rs_mask", "ROLLOUT_IS_LEVELS", "ROLLOUT_RS_LEVELS", "SAFETY_BOUND"]
