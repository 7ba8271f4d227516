"""Every lab of the book runs a small GRPO/PPO loop itself and shows a live work-depth calculator
(W, D, W/p and both Brent bounds, built by a function whose name ends in ``workdepth_widget``)
with its no-kernel twin (``..._workdepth_static``). Checked on the code cells of every notebook
in _toc.yml, by the names they call."""
import ast
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# the library's training loops: each runs rollouts, rewards and updates for several steps
LOOPS = {"train_grpo", "train_ppo", "train_async_grpo", "train_ray", "train_grpo_mesh",
         "train_grpo_pipeline", "run_sweep"}


def _toc_notebooks() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [f for f in files if (ROOT / f"{f}.ipynb").exists()]


def _called_names(notebook: str) -> set[str]:
    cells = json.loads((ROOT / f"{notebook}.ipynb").read_text())["cells"]
    names = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        src = "\n".join(line[:len(line) - len(line.lstrip())] + "pass"        # IPython magics
                        if line.lstrip().startswith(("%", "!")) else line
                        for line in src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call):
                f = node.func
                names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def test_every_chapter_has_a_lab():
    assert len(_toc_notebooks()) == 14


@pytest.mark.parametrize("notebook", _toc_notebooks())
def test_lab_runs_a_loop_and_shows_a_live_workdepth_calculator(notebook):
    names = _called_names(notebook)
    assert names & LOOPS, f"{notebook} runs none of the training loops {sorted(LOOPS)}"
    assert any(n.endswith("workdepth_widget") for n in names), \
        f"{notebook} shows no live work-depth calculator (a call to a *workdepth_widget)"
    assert any(n.endswith("workdepth_static") for n in names), \
        f"{notebook} has no no-kernel twin of its calculator (a call to a *workdepth_static)"
