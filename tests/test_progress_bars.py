"""The library's slow loops that the labs call show a text progress bar when asked, return the
same result with or without it, and refuse a ``progress`` that is not a bool."""

import pytest

from rlmperf_lite.book.framework_views import FRAMEWORK_GRID, framework_grid
from rlmperf_lite.sim.published import PUBLISHED_RUNS, published_runs_table
from rlmperf_lite.sim.reproduce import reproduce_verl_staleness_ablation

SMALL_RUNS = {**PUBLISHED_RUNS, "rows": [r for r in PUBLISHED_RUNS["rows"] if r["kind"] == "step"][:2]}
SMALL_GRID = {**FRAMEWORK_GRID, "actor": FRAMEWORK_GRID["actor"][:1], "gpus": FRAMEWORK_GRID["gpus"][:2],
              "framework": FRAMEWORK_GRID["framework"][:3]}
CALLS = {
    "published runs": lambda **kw: published_runs_table(SMALL_RUNS, sim_steps=4, **kw).rows,
    "staleness runs": lambda **kw: reproduce_verl_staleness_ablation((0.0,), steps=4, **kw),
    "grid": lambda **kw: framework_grid(SMALL_GRID, steps=2, **kw),
}


@pytest.mark.parametrize("desc", CALLS)
def test_the_bar_shows_and_changes_nothing(desc, capsys):
    quiet = CALLS[desc]()
    assert capsys.readouterr().err == ""
    shown = CALLS[desc](progress=True)
    bar = capsys.readouterr().err
    assert f"{desc}: 100%" in bar and bar.count("|") >= 2          # a finished text bar
    assert repr(shown) == repr(quiet)


@pytest.mark.parametrize("desc", CALLS)
def test_a_bad_progress_names_the_parameter(desc):
    with pytest.raises(ValueError, match="progress must be True or False"):
        CALLS[desc](progress="yes")
