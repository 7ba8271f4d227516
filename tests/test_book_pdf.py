"""The book as one PDF (book/_ext/book_pdf.py): every page of _toc.yml printed by Chromium, in
order, with an outline of the parts and pages; the intro links to it; with no Chromium the build
still succeeds, without a warning, and makes no PDF.

The tests that print need Debian's Chromium (``.ci/run`` installs it; locally: ``apt-get install
chromium``) and are skipped without it, as in tests/test_browser.py.
"""
import html as html_lib
import io
import re
import shutil
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "book" / "_ext"))
import book_pdf  # noqa: E402  (a local Sphinx extension, not a package)

CHROMIUM = book_pdf.find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")


def _expected_outline(html: Path) -> list[tuple[str, int, bool]]:
    """(title, depth, is a page) of the outline _toc.yml gives: the root page, then each
    part's caption with its chapters under it, each followed by its sections."""
    import yaml
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))

    def walk(items, depth):
        for item in items:
            yield _page_title(html / f"{item['file']}.html"), depth, True
            yield from walk(item.get("sections", []), depth + 1)
    expected = [(_page_title(html / f"{toc['root']}.html"), 0, True)]
    for part in toc["parts"]:
        expected += [(part["caption"], 0, False)] + list(walk(part["chapters"], 1))
    return expected


def _outline(reader) -> list[tuple[str, int, int]]:
    """(title, depth, first page index) of every outline entry, in order."""
    found = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                found.append((item.title, depth, reader.get_destination_page_number(item)))
    walk(reader.outline, 0)
    return found


def _flat(text: str) -> str:
    """Text with ligatures split (PDF text has "ﬀ" for "ff") and runs of white space as one."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _page_title(html: Path) -> str:
    title = re.search(r"<title>(.*?)</title>", html.read_text(encoding="utf-8"), re.S).group(1)
    return html_lib.unescape(title).rsplit(" — ", 1)[0].strip()


@needs_chromium
def test_the_built_book_has_its_pdf_with_every_page_in_order(book_build):
    from pypdf import PdfReader
    proc, html = book_build
    assert proc.returncode == 0
    pdf = html / "_static" / book_pdf.PDF_NAME
    assert pdf.is_file(), f"no {pdf}"
    reader = PdfReader(pdf)
    outline, expected = _outline(reader), _expected_outline(html)
    assert [(t, d) for t, d, _ in outline] == [(t, d) for t, d, _ in expected]
    starts = [start for _, _, start in outline]
    pages = [(t, start) for (t, _, start), (_, _, is_page) in zip(outline, expected) if is_page]
    assert starts == sorted(starts) and starts[0] == 0
    assert len(reader.pages) >= len(pages) == len(set(s for _, s in pages))
    for title, start in pages:                    # each page's first PDF page shows its title
        assert _flat(title) in _flat(reader.pages[start].extract_text()), title
    # links lead within the book or to the web, never to the printing machine's files
    targets = [where for _, where in _links(reader)]
    assert not [t for t in targets if isinstance(t, str) and not t.startswith("http")]
    assert sum(isinstance(t, int) for t in targets) > 100


def test_the_intro_links_the_pdf_where_the_site_serves_it(book_build):
    _, html = book_build
    intro = html / "book" / "intro.html"
    hrefs = re.findall(r'href="([^"]*' + re.escape(book_pdf.PDF_NAME) + ')"',
                       intro.read_text(encoding="utf-8"))
    assert hrefs, "book/intro.md does not link the PDF"
    for href in hrefs:
        assert (intro.parent / href).resolve() == (html / "_static" / book_pdf.PDF_NAME).resolve()


def _tiny_site(root: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Two hand-made pages, the second two printed pages long, with links within a page,
    across pages, to a file outside the book and to the web; returns their ``pages``."""
    (root / "sub").mkdir(parents=True)
    (root / "one.html").write_text(
        "<html><body><h1>First page</h1><p>Alpha. <a href='#end'>to the end</a> "
        "<a href='sub/two.html#delta'>to Delta</a> <a href='sub/two.html'>to two</a></p>"
        "<p id='end'>End.</p></body></html>")
    (root / "sub" / "two.html").write_text(
        "<html><body><h1>Second page</h1><p>Beta. <a href='../one.html'>back</a> "
        "<a href='../_sources/two.txt'>source</a> <a href='https://example.org/'>web</a></p>"
        "<details><summary>Folded</summary><p>Gamma, folded.</p></details>"
        "<p id='delta' style='break-before: page'>Delta.</p></body></html>")
    return [("one.html", ("First page",)), ("sub/two.html", ("Part A", "Second page"))]


def _links(reader) -> list[tuple[int, object]]:
    """(page index, where it goes) of every link: a page index, a web address, or None."""
    found = []
    for i, page in enumerate(reader.pages):
        for annot in page.get("/Annots") or []:
            annot = annot.get_object()
            if "/Dest" in annot:
                found.append((i, reader.get_page_number(annot["/Dest"][0].get_object())))
            else:
                found.append((i, annot.get("/A", {}).get("/URI")))
    return found


@needs_chromium
def test_print_book_pdf_merges_the_pages_in_order_with_their_outline(tmp_path):
    from pypdf import PdfReader
    pages = _tiny_site(tmp_path / "html")
    out = tmp_path / "book.pdf"
    count = book_pdf.print_book_pdf(tmp_path / "html", pages, out, CHROMIUM)
    reader = PdfReader(out)
    assert count == len(reader.pages) == 3
    assert _outline(reader) == [("First page", 0, 0), ("Part A", 0, 1), ("Second page", 1, 1)]
    text = [_flat(p.extract_text()) for p in reader.pages]
    assert text[0].startswith("First page Alpha.") and text[2] == "Delta."
    assert "Beta." in text[1] and "Gamma, folded." in text[1]      # <details> printed open
    # within the page, to an anchor of the next page, to its start; back; a file outside the
    # book goes nowhere; the web address stays
    assert _links(reader) == [(0, 0), (0, 2), (0, 1), (1, 0), (1, None),
                              (1, "https://example.org/")]


@needs_chromium
def test_print_book_pdf_prints_again_only_the_pages_that_changed(tmp_path):
    from pypdf import PdfReader
    pages = _tiny_site(tmp_path / "html")
    cache, out = tmp_path / "cache", tmp_path / "book.pdf"
    book_pdf.print_book_pdf(tmp_path / "html", pages, out, CHROMIUM, cache_dir=cache)
    first = sorted(cache.glob("*.pdf"))
    assert len(first) == 2
    # nothing changed: no browser is needed (a missing one would raise)
    book_pdf.print_book_pdf(tmp_path / "html", pages, out, "/no/chromium", cache_dir=cache)
    (tmp_path / "html" / "one.html").write_text("<html><body><h1>First page</h1><p>Omega.</p>")
    with pytest.raises(RuntimeError, match="did not start"):
        book_pdf.print_book_pdf(tmp_path / "html", pages, out, "/no/chromium", cache_dir=cache)
    book_pdf.print_book_pdf(tmp_path / "html", pages, out, CHROMIUM, cache_dir=cache)
    assert len(set(cache.glob("*.pdf")) & set(first)) == 1 and len(list(cache.glob("*.pdf"))) == 2
    assert "Omega." in PdfReader(out).pages[0].extract_text()


def test_print_book_pdf_names_a_page_that_was_not_built(tmp_path):
    pages = _tiny_site(tmp_path / "html") + [("three.html", ("Third",))]
    with pytest.raises(FileNotFoundError, match="three.html"):
        book_pdf.print_book_pdf(tmp_path / "html", pages, tmp_path / "book.pdf", "chromium")


def _sphinx_project(root: Path) -> None:
    """A root page whose toctree has a caption, and one chapter."""
    root.mkdir()
    (root / "index.rst").write_text("Home\n====\n\n.. toctree::\n   :caption: Part A\n\n   ch1\n")
    (root / "ch1.rst").write_text("Chapter one\n===========\n\nText.\n")
    (root / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(REPO / 'book' / '_ext')!r})"
                                  "\nextensions = ['book_pdf']\n")


def _build(src: Path, out: Path):
    """A strict (-W) in-process HTML build; returns (status log, warning log)."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace
    status, warning = io.StringIO(), io.StringIO()
    with docutils_namespace():       # node classes registered by one build are undone after it
        app = Sphinx(str(src), str(src), str(out), str(out / ".doctrees"), "html",
                     status=status, warning=warning, warningiserror=True, freshenv=True)
        app.build()
    return status.getvalue(), warning.getvalue()


def test_with_no_chromium_the_build_succeeds_says_how_to_get_the_pdf_and_makes_none(
        tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    _sphinx_project(tmp_path / "src")
    status, warning = _build(tmp_path / "src", tmp_path / "out")
    assert warning == ""
    assert "no PDF of the book made" in status and "install Chromium" in status
    assert not (tmp_path / "out" / "_static" / book_pdf.PDF_NAME).exists()


@needs_chromium
def test_the_extension_prints_the_toctree_in_order_after_a_build(tmp_path):
    from pypdf import PdfReader
    _sphinx_project(tmp_path / "src")
    status, warning = _build(tmp_path / "src", tmp_path / "out")
    assert warning == ""
    reader = PdfReader(tmp_path / "out" / "_static" / book_pdf.PDF_NAME)
    assert [(t, d) for t, d, _ in _outline(reader)] == [("Home", 0), ("Part A", 0),
                                                         ("Chapter one", 1)]
    assert "made of 2 pages" in status


WIDGET_VIEW = "<script type='application/vnd.jupyter.widget-view+json'>{}</script>"


@needs_chromium
def test_a_page_is_printed_once_its_saved_widgets_are_drawn(tmp_path, monkeypatch):
    from pypdf import PdfReader
    monkeypatch.setattr(book_pdf, "TIMEOUT_MS", 5_000)
    (tmp_path / "html").mkdir()
    # drawn late, as the widgets' HTML manager draws them: into a div before the view's script
    (tmp_path / "html" / "lab.html").write_text(
        f"<html><body><h1>Lab</h1><div>{WIDGET_VIEW}</div><script>setTimeout(() => {{"
        "const d = document.createElement('div'); d.className = 'widget-subarea';"
        "d.textContent = 'slider drawn'; const s = document.querySelector('script[type]');"
        "s.parentNode.insertBefore(d, s); }, 800);</script></body></html>")
    book_pdf.print_book_pdf(tmp_path / "html", [("lab.html", ("Lab",))], tmp_path / "a.pdf",
                            CHROMIUM)
    assert "slider drawn" in PdfReader(tmp_path / "a.pdf").pages[0].extract_text()
    (tmp_path / "html" / "lab.html").write_text(f"<html><body><h1>Lab</h1>{WIDGET_VIEW}")
    with pytest.raises(RuntimeError, match="printing .*lab.html failed"):
        book_pdf.print_book_pdf(tmp_path / "html", [("lab.html", ("Lab",))],
                                tmp_path / "b.pdf", CHROMIUM)
