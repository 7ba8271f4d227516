"""Shared fixtures: one strict build of the book for the whole test session (it executes every
notebook in _toc.yml, so it is the slow part of the suite), used by the build and browser
tests."""
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")

# Never copied into the scratch copy of the repo: build output, VCS data, caches, environments.
_NOT_COPIED = shutil.ignore_patterns(
    "_build", ".git", ".venv", "venv", ".ci-venv", "__pycache__", ".ipynb_checkpoints",
    ".pytest_cache", "*.egg-info",
)


def _broken_notebook() -> nbformat.NotebookNode:
    """A notebook whose only cell raises: executing it fails a build with allow_errors: false."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        'raise RuntimeError("a notebook inside .venv was executed")')]
    return nb


@pytest.fixture(scope="session")
def book_build(tmp_path_factory):
    """Run `jupyter-book build -W -n --keep-going` once on a copy of the repo with a bad .venv/.
    With RLMPERF_BUILT_HTML set to a built site's ``_build/html``, the browser tests read that
    site instead (the build's own checks then see no build: a completed process with no output)."""
    import os
    if os.environ.get("RLMPERF_BUILT_HTML"):
        return (subprocess.CompletedProcess([], 0, "", ""),
                Path(os.environ["RLMPERF_BUILT_HTML"]))
    src = tmp_path_factory.mktemp("repo") / "book"
    shutil.copytree(REPO, src, ignore=_NOT_COPIED)
    (src / ".venv").mkdir()
    nbformat.write(_broken_notebook(), src / ".venv" / "bad.ipynb")

    out = tmp_path_factory.mktemp("out")
    cmd = [str(JUPYTER_BOOK), "build", "-W", "-n", "--keep-going", "--path-output", str(out),
           str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    # jupyter-book writes into <path-output>/_build/html
    return proc, out / "_build" / "html"


