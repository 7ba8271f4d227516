"""The repository keeps the promises its README makes: one build command, one test command,
a CI script that runs that same test command, a small, fixed set of top-level entries, and a
reader's set for Binder."""

import ast
import fnmatch
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALLOWED_TOP_LEVEL = {
    "book", "notebooks", "rlmperf_lite", "tests", "bench", ".ci",
    "_config.yml", "_toc.yml", "requirements.txt", "pyproject.toml", "README.md",
    "runtime.txt", ".gitignore", "binder",
}
# Produced by building, installing or testing, and ignored by git (see .gitignore).
IGNORED_TOP_LEVEL = [
    ".git", "_build", ".venv", "venv", "__pycache__", ".ipynb_checkpoints", ".*_cache",
    ".hypothesis",
    "*.egg-info",
]


def _readme_lines_with(text: str) -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return [line.strip() for line in readme.splitlines() if text in line]


def test_readme_has_exactly_one_build_line():
    lines = _readme_lines_with("jupyter-book build")
    assert lines == ["pip install -r requirements.txt && jupyter-book build ."], lines


def test_readme_has_exactly_one_test_line():
    lines = _readme_lines_with("pytest")
    assert lines == ["pip install -r requirements.txt && python -m pytest"], lines


def test_ci_runs_the_readme_test_line_verbatim():
    (test_line,) = _readme_lines_with("pytest")
    ci_text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci_text.splitlines()]
    assert test_line in ci_lines


def test_ci_script_is_strict_bash():
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert script.startswith("#!/usr/bin/env bash") or script.startswith("#!/bin/bash")
    assert "set -euo pipefail" in script


def test_top_level_entries_are_the_allowed_set():
    unexpected = sorted(
        entry.name
        for entry in REPO.iterdir()
        if entry.name not in ALLOWED_TOP_LEVEL
        and not any(fnmatch.fnmatch(entry.name, pattern) for pattern in IGNORED_TOP_LEVEL)
    )
    assert unexpected == [], (f"unexpected top-level entries {unexpected}; "
                              "add them to the allowed set on purpose")
    missing = sorted(name for name in ALLOWED_TOP_LEVEL if not (REPO / name).exists())
    assert missing == [], f"missing top-level entries {missing}"


# Build and test tools: in requirements.txt, never in the reader's set on Binder.
BUILD_AND_TEST_TOOLS = {"playwright", "pytest", "nbval", "hypothesis", "jupyter-book",
                        "django-static-mathjax", "pypdf"}
# import name -> the distribution of binder/requirements.txt that installs it, where they differ
# (IPython comes with ipykernel; rlmperf_lite is the "-e ." line).
DISTRIBUTION_OF = {"IPython": "ipykernel", "vl_convert": "vl-convert-python",
                   "myst_nb": "myst-nb", "rlmperf_lite": "-e ."}
# imported only inside try/except, for a feature the labs do not use (Ray Client's transport)
OPTIONAL_IMPORTS = {"grpc"}


def _requirement_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def _pins(lines: list[str]) -> dict:
    """{normalized name: version} of the ``name==version`` lines."""
    pins = {}
    for line in lines:
        if "==" in line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return pins


def _top_level_imports(source: str) -> set:
    """The top-level module names a cell or file imports (absolute imports only); IPython's
    ``%magic`` and ``!shell`` lines are read as ``pass``."""
    lines = [re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.splitlines()]
    names = set()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _imports_of_the_labs() -> set:
    """Third-party modules the labs and the library they run import."""
    names = set()
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                names |= _top_level_imports("".join(cell["source"]))
    for path in sorted((REPO / "rlmperf_lite").rglob("*.py")):
        names |= _top_level_imports(path.read_text(encoding="utf-8"))
    return {n for n in names if n not in sys.stdlib_module_names} - OPTIONAL_IMPORTS


def test_binder_holds_the_readers_set():
    # TOOLCHAIN notes: if binder/ exists, repo2docker reads only it (requirements.txt,
    # runtime.txt, postBuild), and Binder's default Python is too old for the pinned set.
    binder = REPO / "binder"
    assert sorted(p.name for p in binder.iterdir()) == ["postBuild", "requirements.txt",
                                                        "runtime.txt"]
    root_runtime = (REPO / "runtime.txt").read_text(encoding="utf-8").strip()
    assert root_runtime == "python-3.11"
    assert (binder / "runtime.txt").read_text(encoding="utf-8").strip() == root_runtime
    root_lines = _requirement_lines(REPO / "requirements.txt")
    lines = _requirement_lines(binder / "requirements.txt")
    root, reader = _pins(root_lines), _pins(lines)
    differ = {n: (v, root.get(n)) for n, v in reader.items() if root.get(n) != v}
    assert differ == {}, f"pins (binder, root) that differ: {differ}"
    assert [line for line in lines if "==" not in line] == ["-e ."]     # as the root installs it
    assert "-e ." in root_lines
    tools = {n for n in reader if n in BUILD_AND_TEST_TOOLS or "sphinx" in n}
    assert tools == set(), f"build or test tools in the reader's set: {sorted(tools)}"


def test_binder_installs_every_package_the_labs_import():
    installed = set(_pins(_requirement_lines(REPO / "binder" / "requirements.txt"))) | {"-e ."}
    imports = _imports_of_the_labs()
    assert {"altair", "myst_nb", "ray", "rlmperf_lite"} <= imports    # the scan finds them
    missing = sorted(n for n in imports
                     if DISTRIBUTION_OF.get(n, n).lower().replace("_", "-") not in installed)
    assert missing == [], f"binder/requirements.txt does not install {missing}"


def test_binder_postbuild_trusts_the_labs():
    post = REPO / "binder" / "postBuild"
    assert post.stat().st_mode & 0o111, "binder/postBuild must be executable"
    text = post.read_text(encoding="utf-8")
    assert text.startswith("#!/bin/bash") and "set -euo pipefail" in text
    assert "jupyter trust notebooks/*.ipynb" in text.splitlines()
