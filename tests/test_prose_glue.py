"""Every number the prose glues from a lab resolves: the reference names a committed notebook,
a key that notebook glues, and a format (myst-nb reads ``path::key`` without one as the key
``path:`` in the format ``key``, and the strict build fails only after a full build)."""

import json
import re
from ast import literal_eval
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GLUE_REF = re.compile(r"\{glue:(?:text|md)\}`([^`]*)`")
PAGES = sorted((REPO / "book").rglob("*.md"))


def _glued_keys(notebook: Path) -> set:
    """Names of the outputs ``myst_nb.glue`` recorded in a committed, executed notebook."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {o["metadata"]["scrapbook"]["name"] for c in cells for o in c.get("outputs", ())
            if "scrapbook" in o.get("metadata", {})}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cross_document_glue_reference_resolves(page):
    keys = {}
    for ref in GLUE_REF.findall(page.read_text(encoding="utf-8")):
        if "::" not in ref:
            continue                                    # a key glued on this page itself
        path, _, rest = ref.partition("::")
        key, sep, fmt = rest.partition(":")
        assert sep and fmt, f"{page.name}: {ref!r} has no format; write {ref}:.1f (or :d, :,d)"
        notebook = (page.parent / path).resolve()
        assert notebook.is_file(), f"{page.name}: {ref!r} names no notebook"
        if notebook not in keys:
            keys[notebook] = _glued_keys(notebook)
        assert key in keys[notebook], f"{page.name}: {notebook.name} glues no {key!r}"


def _glued_text(notebook: Path) -> dict:
    """{name: text/plain} of what ``myst_nb.glue`` recorded in a committed notebook."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {o["metadata"]["scrapbook"]["name"]:
            "".join(o["data"].get("application/papermill.record/text/plain", ""))
            for c in cells for o in c.get("outputs", ()) if "scrapbook" in o.get("metadata", {})}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_number_format_gets_a_number(page):
    """myst-nb formats the glued text/plain after ``ast.literal_eval``: a numpy scalar's repr
    (``np.float64(3.2)``) stays a string, and ``:.1f`` on it fails only in the full build.
    Glue ``float(x)`` / ``int(x)``."""
    texts = {}
    for ref in GLUE_REF.findall(page.read_text(encoding="utf-8")):
        path, _, rest = ref.partition("::")
        key, _, fmt = rest.partition(":")
        if "::" not in ref or not fmt or fmt[-1] not in "bcdoxXeEfFgGn%":
            continue
        notebook = (page.parent / path).resolve()
        if notebook not in texts:
            texts[notebook] = _glued_text(notebook) if notebook.is_file() else {}
        if key in texts[notebook]:
            try:
                value = literal_eval(texts[notebook][key])
            except (SyntaxError, ValueError):
                value = None
            kinds = int if fmt[-1] in "bcdoxX" else (int, float)    # format(2.0, "d") fails
            assert isinstance(value, kinds) and not isinstance(value, bool), (
                f"{page.name}: {notebook.name} glues {key!r} as {texts[notebook][key]!r}, "
                f"not a number its format {fmt!r} takes: glue float(...) or int(...)")


def test_the_check_sees_the_book_glue():
    refs = [r for p in PAGES for r in GLUE_REF.findall(p.read_text(encoding="utf-8"))]
    assert len(refs) > 100 and any("ch08_gpt3_comm_ratio" in r for r in refs)


GLUE_FIGURE = re.compile(r"^```+\{glue:figure\}\s+(\S+)\s*\n((?::[a-z-]+:.*\n)*)", re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_glued_figure_names_a_lab_that_glues_it_as_html(page):
    """A ``{glue:figure}`` with ``:doc:`` (book/_ext/glue_figure.py) names a committed notebook
    that glues the key as text/html (myst-nb pastes an SVG across pages only inside HTML: glue
    ``figure_html(chart)``), and has a ``:name:`` for cross-references."""
    for key, options in GLUE_FIGURE.findall(page.read_text(encoding="utf-8")):
        opts = dict(re.findall(r"^:([a-z-]+):\s*(.*)$", options, re.M))
        assert "doc" in opts and "name" in opts, f"{page.name}: figure {key!r} needs :doc: and :name:"
        notebook = (page.parent / opts["doc"]).resolve()
        assert notebook.is_file(), f"{page.name}: figure {key!r} names no notebook {opts['doc']}"
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        glued = [o for c in cells for o in c.get("outputs", ())
                 if o.get("metadata", {}).get("scrapbook", {}).get("name") == key]
        assert glued, f"{page.name}: {notebook.name} glues no {key!r}"
        html = glued[0]["data"].get("application/papermill.record/text/html", "")
        assert "<svg" in "".join(html), f"{page.name}: {key!r} is not glued as an inline SVG"


def test_the_book_has_glued_figures():
    figures = [k for p in PAGES for k, _ in GLUE_FIGURE.findall(p.read_text(encoding="utf-8"))]
    expected = {"ch04-step-timeline", "ch05-brent-bounds", "ch05-length-histogram", "ch06-roofline",
                "ch07-zero-shards", "ch08-tp-fg", "ch08-ring-steps", "ch10-sync-path"}
    assert expected <= set(figures), sorted(expected - set(figures))
