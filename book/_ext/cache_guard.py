"""Sphinx extension: the execution cache is emptied when the library changes.

With ``execute_notebooks: cache`` Jupyter Book reuses a lab's stored outputs while the lab's
code cells are unchanged (jupyter-cache keys on the notebook's code), so a rebuild after editing
prose takes seconds instead of minutes. But a lab's numbers also depend on ``rlmperf_lite``:
after any change to the library (its Python files or its preset data) the cached outputs could
be stale. This extension hashes the library's files and, when the hash differs from the one
stored with the cache, deletes the cache before anything is executed and marks every page
outdated (Sphinx would otherwise keep the pages it read before, whose sources did not change),
so every lab runs again. A clean checkout (CI) has no cache and executes everything.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from sphinx.util import logging

MARKER = "rlmperf_lite.sha256"
LIBRARY = Path(__file__).resolve().parents[2] / "rlmperf_lite"


def library_hash(root: Path = LIBRARY) -> str:
    """SHA-256 over the library's .py and .json files (relative paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def refresh_cache(cache: Path, current: str) -> bool:
    """Empty ``cache`` unless it was filled with the library of hash ``current``; then record
    ``current`` in it. Returns True when the cache was emptied (or did not exist)."""
    marker = cache / MARKER
    stale = not marker.is_file() or marker.read_text().strip() != current
    if stale and cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    marker.write_text(current + "\n")
    return stale


def _guard(app) -> None:
    config = getattr(app.env, "mystnb_config", None)
    if config is None or config.execution_mode != "cache":
        return
    if refresh_cache(Path(config.execution_cache_path), library_hash()):
        app.rlmperf_library_changed = True
        logging.getLogger(__name__).info("rlmperf_lite changed: execution cache emptied")


def _reread_all(app, env, added, changed, removed) -> list:
    """Every page is read again (and every lab executed) after the library changed."""
    return sorted(env.found_docs) if getattr(app, "rlmperf_library_changed", False) else []


def setup(app):
    # after myst-nb has resolved the cache path (its builder-inited handler, priority 500)
    app.connect("builder-inited", _guard, priority=900)
    app.connect("env-get-outdated", _reread_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
