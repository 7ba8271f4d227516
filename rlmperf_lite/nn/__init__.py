"""A tiny decoder-only transformer in numpy, with forward/backward pairs (book section
:ref:`sec-tiny-model`)."""
from .config import TinyLMConfig
from .flops import COUNTER, FlopCounter, mm
from .model import (
                    backward,
                    block_backward,
                    block_forward,
                    check_tokens,
                    copy_params,
                    forward,
                    init_params,
                    lm_head_backward,
                    lm_head_forward,
                    logps_backward,
                    logps_forward,
                    token_entropy,
                    token_logps,
)
from .engine import ENGINE_DTYPES, EngineConfig, round_bf16, round_fp16, truncate_logps
from .optim import AdamW, clip_grad_norm
from .sampling import (BatchingStats, Rollout, engine_logprobs, generate, generate_continuous,
                       static_batching_stats)
from .value import init_value_params, values_backward, values_forward

__all__ = ["TinyLMConfig", "COUNTER", "FlopCounter", "mm", "init_params", "forward", "backward",
           "block_forward", "block_backward", "lm_head_forward", "lm_head_backward",
           "logps_forward", "logps_backward", "token_logps", "token_entropy", "check_tokens",
           "copy_params", "AdamW", "clip_grad_norm", "Rollout", "generate", "generate_continuous",
           "BatchingStats", "static_batching_stats", "init_value_params", "values_forward",
           "values_backward", "EngineConfig", "ENGINE_DTYPES", "round_bf16", "round_fp16",
           "truncate_logps", "engine_logprobs"]
