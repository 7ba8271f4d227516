"""The book builds strictly, executes its labs, and ignores virtual environments in the repo.

One real build runs for the whole module (it executes every notebook in _toc.yml, so it is the
slow test of the suite). It builds a copy of the repository that has a broken notebook planted in
`.venv/`: the build must still succeed, because `_config.yml` excludes `.venv` (TOOLCHAIN notes:
"a .venv/ or venv/ folder is read and its notebooks executed unless listed in exclude_patterns").
"""

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def test_strict_build_succeeds_with_broken_notebook_in_dot_venv(book_build):
    proc, _ = book_build
    assert proc.returncode == 0, (
        f"strict build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")


@pytest.mark.parametrize("page", ["index", "book/intro", "book/ch01_rl_loop", "notebooks/ch01_lab",
                                  "book/ch06_profiles", "notebooks/ch06_lab"])
def test_page_html_exists(book_build, page):
    _, html = book_build
    assert (html / f"{page}.html").is_file(), f"missing {page}.html in {html}"


def test_lab_page_has_executed_output(book_build):
    _, html = book_build
    lab_html = (html / "notebooks" / "ch01_lab.html").read_text(encoding="utf-8")
    # myst-nb wraps every rendered code-cell output in a <div class="cell_output ...">.
    assert "cell_output" in lab_html, "the lab page shows no executed cell output"


def test_mathjax_is_served_by_the_site_not_a_cdn(book_build):
    """Formulas typeset offline: every page loads MathJax from _static (the django-static-mathjax
    copy, book/_ext/offline_assets.py), never from a CDN."""
    _, html = book_build
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (html / "_static" / "mathjax" / "output" / "chtml" / "fonts").is_dir()
    for page in html.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "cdn.jsdelivr.net/npm/mathjax" not in text, page
    chapter = (html / "book" / "ch03_grpo_family.html").read_text(encoding="utf-8")
    assert 'src="../_static/mathjax/tex-chtml.js"' in chapter


def test_no_page_loads_a_script_or_stylesheet_from_another_host(book_build):
    """Pages work offline: no <script src> or <link href> points outside the site (MathJax and
    the widgets HTML manager are served from _static; see book/_static/ipywidgets/SOURCE.txt)."""
    import re
    _, html = book_build
    external = re.compile(r'<(?:script|link)\b[^>]*(?:src|href)="(?:https?:)?//[^"]*"')
    for page in html.rglob("*.html"):
        found = external.findall(page.read_text(encoding="utf-8"))
        assert not found, (page, found)
    assert (html / "_static" / "ipywidgets" / "embed.js").is_file()


def test_venv_is_not_built(book_build):
    _, html = book_build
    assert not (html / ".venv").exists()


def test_config_excludes_environments_and_non_book_folders():
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    excluded = set(config["exclude_patterns"])
    for pattern in ["_build", ".venv", "venv", "tests", "rlmperf_lite", "bench", "README.md"]:
        assert pattern in excluded, f"_config.yml exclude_patterns lacks {pattern!r}"
    assert config["execute"]["execute_notebooks"] in ("force", "cache")
    if config["execute"]["execute_notebooks"] == "cache":      # emptied when the library changes
        assert "cache_guard" in config["sphinx"]["local_extensions"]
    assert config["execute"]["allow_errors"] is False
    # TOOLCHAIN notes: the default branch is `master`, which breaks launch links.
    assert config["repository"]["branch"] == "main"


def test_labs_launch_on_binder_and_colab():
    """Launch buttons: Binder reads binder/ (tests/test_repo_layout.py); Colab has neither, so
    the first code cell of every lab installs the library when it is missing
    (tests/test_lab_install_cell.py)."""
    import nbformat
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    assert config["launch_buttons"]["binderhub_url"] and config["launch_buttons"]["colab_url"]
    assert (REPO / "runtime.txt").read_text().strip().startswith("python-3.1")
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        first = next(c for c in nbformat.read(path, 4).cells if c.cell_type == "code")
        assert "except ImportError:" in first.source and "%pip install" in first.source, path


def test_the_execution_cache_is_emptied_when_the_library_changes(tmp_path):
    """book/_ext/cache_guard.py: a cache filled with another version of rlmperf_lite is deleted
    before execution; one filled with this version is kept."""
    import sys
    sys.path.insert(0, str(REPO / "book" / "_ext"))
    try:
        import cache_guard
    finally:
        sys.path.pop(0)
    lib = tmp_path / "lib"
    (lib / "data").mkdir(parents=True)
    (lib / "a.py").write_text("x = 1\n")
    (lib / "data" / "m.json").write_text("{}")
    cache = tmp_path / "cache"
    first = cache_guard.library_hash(lib)
    assert cache_guard.refresh_cache(cache, first) is True          # no cache yet
    (cache / "executed.db").write_text("outputs")
    assert cache_guard.refresh_cache(cache, first) is False         # same library: kept
    assert (cache / "executed.db").exists()
    (lib / "data" / "m.json").write_text('{"changed": 1}')
    second = cache_guard.library_hash(lib)
    assert second != first
    assert cache_guard.refresh_cache(cache, second) is True         # changed: emptied
    assert not (cache / "executed.db").exists()
