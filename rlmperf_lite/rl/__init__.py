"""RL algorithms on the tiny LM: advantages, losses, GRPO (book Part I)."""
from .advantages import check_rewards, grpo_advantages
from .evaluate import evaluate
from .grpo import GRPOConfig, GRPOResult, train_grpo
from .losses import (
                     aggregate_loss,
                     aggregate_weights,
                     kl_estimate,
                     kl_estimate_grad,
                     policy_loss,
                     policy_loss_grad,
)
from .warmstart import warm_start

__all__ = ["grpo_advantages", "check_rewards", "GRPOConfig", "GRPOResult", "evaluate",
           "train_grpo", "policy_loss", "policy_loss_grad", "kl_estimate", "kl_estimate_grad",
           "aggregate_weights", "aggregate_loss", "warm_start"]
