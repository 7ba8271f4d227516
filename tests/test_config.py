"""Configs reject impossible values with a ValueError naming the field."""
import numpy as np
import pytest

from rlmperf_lite.nn import AdamW, TinyLMConfig, clip_grad_norm, init_params
from rlmperf_lite.rl import GRPOConfig


@pytest.mark.parametrize("kwargs,field", [
    ({"hidden_size": 64, "num_heads": 5}, "hidden_size"),
    ({"num_layers": 0}, "num_layers"),
    ({"vocab_size": -3}, "vocab_size"),
    ({"activation": "swish"}, "activation"),
    ({"norm_eps": 0.0}, "norm_eps"),
    ({"hidden_size": 6.5}, "hidden_size"),
])
def test_tinylmconfig_rejects_impossible_shapes(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TinyLMConfig(**kwargs)


def test_default_model_size_is_order_1e5_and_counted_exactly():
    cfg = TinyLMConfig()
    params = init_params(cfg, np.random.default_rng(0))
    assert cfg.num_params() == sum(p.size for p in params.values())
    assert 1e4 <= cfg.num_params() <= 1e5 * 2, cfg.num_params()
    assert cfg.head_dim == 16


@pytest.mark.parametrize("kwargs,field", [
    ({"group_size": 1}, "group_size"),
    ({"lr": 0.0}, "lr"),
    ({"steps": -1}, "steps"),
    ({"clip_eps": 1.5}, "clip_eps"),
    ({"kl_coef": -0.1}, "kl_coef"),
    ({"num_prompts": 0}, "num_prompts"),
])
def test_grpoconfig_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(**kwargs)


def test_clip_grad_norm_scales_to_max_norm_and_rejects_nan():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert clip_grad_norm(grads, 1.0) == pytest.approx(5.0)
    total = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert total == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="NaN"):
        clip_grad_norm({"a": np.array([np.nan])}, 1.0)


def test_adamw_first_step_moves_each_weight_by_lr():
    """Bias-corrected Adam's first update is lr * sign(g) (Kingma & Ba 2015, Sec. 3)."""
    params = {"w": np.array([1.0, -2.0, 0.5])}
    opt = AdamW(params, lr=0.1)
    opt.step(params, {"w": np.array([0.3, -5.0, 1e-3])})
    np.testing.assert_allclose(params["w"], [0.9, -1.9, 0.4], atol=1e-4)
    with pytest.raises(ValueError, match="lr"):
        AdamW(params, lr=-1)


@pytest.mark.parametrize("kwargs,field", [
    ({"max_new_tokens": 2}, "max_new_tokens"),
    ({"max_new_tokens": 11}, "max_seq_len"),
    ({"model": TinyLMConfig(vocab_size=10)}, "vocab_size"),
])
def test_train_grpo_rejects_configs_that_cannot_fit_the_task(kwargs, field):
    from rlmperf_lite.rl import train_grpo
    with pytest.raises(ValueError, match=field):
        train_grpo(GRPOConfig(steps=1, warmstart_max_steps=0, **kwargs))
