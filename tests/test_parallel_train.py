"""The GRPO loop with its update on a mesh of simulated ranks equals the single-rank loop."""
import numpy as np
import pytest

from rlmperf_lite.parallel import DeviceMesh, train_grpo_mesh
from rlmperf_lite.rl import GRPOConfig, train_grpo

CONFIG = GRPOConfig(steps=8, num_prompts=8, group_size=4, seed=0)


@pytest.fixture(scope="module")
def single():
    return train_grpo(CONFIG)


@pytest.mark.parametrize("dp,tp", [(2, 1), (1, 2), (2, 2), (4, 1)])
def test_mesh_run_has_the_single_rank_learning_curve(single, dp, tp):
    run = train_grpo_mesh(CONFIG, DeviceMesh(dp=dp, tp=tp), base_params=single.base_params)
    assert [h["reward_mean"] for h in run.history] == [h["reward_mean"] for h in single.history]
    losses = np.array([[h["loss"] for h in r.history] for r in (single, run)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=0, atol=1e-6)      # float32 sums
    for k, v in single.params.items():
        np.testing.assert_allclose(run.params[k], v, rtol=0, atol=1e-6)
    last = run.history[-1]
    assert (last["dp_bytes"] > 0) == (dp > 1) and (last["tp_bytes"] > 0) == (tp > 1)


def test_dp_bytes_are_the_ring_all_reduce_of_the_gradients(single):
    """A ring all-reduce sends 2 (n - 1) / n of the buffer per rank (nccl-tests PERFORMANCE.md);
    the buffer is every weight's gradient (float32) plus the loss (one float)."""
    run = train_grpo_mesh(CONFIG, DeviceMesh(dp=4, tp=1), base_params=single.base_params)
    n_weights = sum(v.size for v in single.params.values())
    want = 2 * 3 / 4 * 4 * (n_weights + 1)
    assert run.history[0]["dp_bytes"] == pytest.approx(want, rel=1e-3)


def test_bad_configs_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="micro_batch_size"):
        train_grpo_mesh(GRPOConfig(micro_batch_size=4), DeviceMesh(dp=2, tp=1))
    with pytest.raises(ValueError, match="dynamic_sampling"):
        train_grpo_mesh(GRPOConfig.variant("dapo"), DeviceMesh(dp=2, tp=1))
    with pytest.raises(ValueError, match="GRPOConfig"):
        train_grpo_mesh({}, DeviceMesh(dp=2, tp=1))
