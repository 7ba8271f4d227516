"""One steady-state window for every quoted step time (issue 21): a run of steady_steps(system)
steps or more leaves out the same warm-up whatever its length, and the window has converged —
the step times of a 32-step run and of a 64-step run agree within 1% on Chapter 11's 16 + 16
systems, where the mean of the last half of 8- and of 16-step runs of the same system moved by
about 8% (the erratum: eta = 2 quoted at two values)."""
import pytest

from rlmperf_lite.sim import (STEADY_WARMUP_STEPS, STEADY_WINDOW_STEPS, Workload, simulate,
                              steady_step_time_s, steady_steps, warmup_steps_for)
from rlmperf_lite.sim.layouts import async_system
from rlmperf_lite.sim.workdepth import system_workdepth

WL = Workload(prompts=32, group_size=16, prompt_len=512, mean_response_len=2048.0,
              max_response_len=8192, length_sigma=1.0, seed=0)
STEP = dict(actor="qwen2.5-7b", hardware="h100-sxm", workload=WL, gpus=32)


@pytest.fixture(scope="module")
def systems():
    return {"eta2": async_system(rollout_gpus=16, staleness=2, **STEP),
            "fully": async_system(rollout_gpus=16, staleness=2, minibatches=4, **STEP),
            "k8": async_system(rollout_gpus=16, staleness=8, **STEP),
            "sync": async_system(rollout_gpus=16, mode="sync", **STEP)}


def test_the_window_is_a_warm_up_of_8_steps_then_at_least_24(systems):
    assert (STEADY_WARMUP_STEPS, STEADY_WINDOW_STEPS) == (8, 24)
    assert steady_steps(systems["eta2"]) == steady_steps(systems["sync"]) == 32
    assert steady_steps(systems["k8"]) == 9 + 24        # the engine's head start, 9 steps
    assert [warmup_steps_for(systems["eta2"], n) for n in (8, 16, 32, 64)] == [4, 8, 8, 8]
    assert warmup_steps_for(systems["k8"], 40) == 9


@pytest.mark.parametrize("name", ["eta2", "fully", "k8", "sync"])
def test_the_steady_step_time_converges(systems, name):
    system = systems[name]
    n = steady_steps(system)
    short, long = simulate(system, WL, n), simulate(system, WL, 2 * n)
    t32, t64 = steady_step_time_s(short), steady_step_time_s(long)
    assert abs(t32 / t64 - 1) < 0.01, (t32, t64)
    w = n - STEADY_WINDOW_STEPS
    assert t32 == pytest.approx(short.step_times_s[w:].mean(), rel=1e-12)
    assert t64 == pytest.approx(long.step_times_s[w:].mean(), rel=1e-12)


def test_the_last_half_of_a_short_run_is_not_the_steady_state(systems):
    eta2 = systems["eta2"]
    t8, t16 = simulate(eta2, WL, 8).step_time_s, simulate(eta2, WL, 16).step_time_s
    assert abs(t16 / t8 - 1) > 0.05


def test_work_depth_takes_the_same_versions(systems):
    # one window: the bounds of system_workdepth are means over the steps step_time_s averages
    eta2 = systems["eta2"]
    wd = system_workdepth(eta2, WL, steps=steady_steps(eta2))
    assert wd.brackets(steady_step_time_s(wd.simulate()))


def test_bad_arguments_name_the_parameter(systems):
    short = simulate(systems["eta2"], WL, 8)
    with pytest.raises(ValueError, match=r"result ran 8 steps.*steady_steps\(system\) = 32"):
        steady_step_time_s(short)
    with pytest.raises(ValueError, match="result must be a SimResult"):
        steady_step_time_s(28.4)
    with pytest.raises(ValueError, match="steps"):
        warmup_steps_for(systems["eta2"], 0)
