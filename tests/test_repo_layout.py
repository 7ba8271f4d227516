"""The repository keeps the promises its README makes: one build command, one test command,
a CI script that runs that same test command, and a small, fixed set of top-level entries."""

import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALLOWED_TOP_LEVEL = {
    "book", "notebooks", "rlmperf_lite", "tests", "bench", ".ci",
    "_config.yml", "_toc.yml", "requirements.txt", "pyproject.toml", "README.md",
    "runtime.txt", ".gitignore",
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


def test_binder_reads_the_root_files():
    # TOOLCHAIN notes: if binder/ exists, repo2docker reads only it; Binder's default Python is
    # too old for the pinned set, so runtime.txt must name a newer one.
    assert not (REPO / "binder").exists()
    assert (REPO / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"
