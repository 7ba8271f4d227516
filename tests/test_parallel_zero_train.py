"""The GRPO loop with its update sharded by ZeRO (stages 0-3) on simulated ranks equals the
single-rank loop, and each rank's bytes are the ZeRO paper's volumes (§7.2)."""
import numpy as np
import pytest

from rlmperf_lite.cost import collective_bytes_per_rank
from rlmperf_lite.parallel.zero_train import train_grpo_zero
from rlmperf_lite.rl import GRPOConfig, train_grpo

CONFIG = GRPOConfig(steps=8, num_prompts=8, group_size=4, seed=0)


@pytest.fixture(scope="module")
def single():
    return train_grpo(CONFIG)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_run_has_the_single_rank_learning_curve(single, stage):
    run = train_grpo_zero(CONFIG, 4, stage, base_params=single.base_params)
    assert [h["reward_mean"] for h in run.history] == [h["reward_mean"] for h in single.history]
    losses = np.array([[h["loss"] for h in r.history] for r in (single, run)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=0, atol=1e-6)      # float32 sums
    for k, v in single.params.items():
        np.testing.assert_allclose(run.params[k], v, rtol=0, atol=1e-6)


def test_bytes_per_rank_are_the_zero_volumes(single):
    """ZeRO §7.2: stages 0-2 send 2 (n-1)/n Psi per rank, stage 3 3 (n-1)/n Psi; stages 1-3 add
    the gradient norm's one float64; stage 3's weight sync all-gathers the shards, (n-1)/n Psi."""
    S = 4 * sum(v.size for v in single.params.values())          # float32 gradient bytes
    ring = collective_bytes_per_rank("all_reduce", S, 4)
    want = {0: ring, 1: ring + 8, 2: ring + 8, 3: 1.5 * ring + 8}
    for stage, b in want.items():
        first = train_grpo_zero(CONFIG, 4, stage, base_params=single.base_params).history[0]
        assert first["dp_bytes"] == b
        assert first["sync_bytes"] == (collective_bytes_per_rank("all_gather", S, 4)
                                       if stage == 3 else 0)


def test_bad_configs_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="micro_batch_size"):
        train_grpo_zero(GRPOConfig(micro_batch_size=4), 2, 1)
    with pytest.raises(ValueError, match="dynamic_sampling"):
        train_grpo_zero(GRPOConfig.variant("dapo"), 2, 1)
    with pytest.raises(ValueError, match="GRPOConfig"):
        train_grpo_zero({}, 2, 1)
    with pytest.raises(ValueError, match="stage"):
        train_grpo_zero(CONFIG, 2, 4)
