"""Sphinx extension: the whole book as one PDF, ``_static/rlmperf-foundations.pdf``.

After an HTML build, every page of the table of contents, in its order, is opened over
``file://`` in the system's Chromium (driven by Playwright, as in tests/test_browser.py: no
downloaded browser, no network), printed with ``page.pdf()`` once MathJax has typeset it, and
the pages are merged with pypdf into one file whose outline (bookmarks) follows the table of
contents: the parts' captions, then each page's title.

Folded content is printed unfolded (exercise solutions, ``<details>``), so the PDF is a teacher's
copy; the student edition (book/_ext/student_edition.py) has no solutions to unfold.

With no Chromium on the machine (``chromium`` not on PATH) the build still succeeds and logs one
line saying how to get the PDF. With Chromium there, a page that fails to print stops the build.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from sphinx.util import logging

PDF_NAME = "rlmperf-foundations.pdf"
# as in tests/test_browser.py: root needs --no-sandbox; the rest keep Chromium off the network
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# unfold sphinx-togglebutton's folded blocks (solutions) and every <details>; link every id
# from a hidden block, so that Chromium makes a named destination of each (it names only link
# targets) and links from other pages can land on it; then wait until MathJax's first
# typesetting and the web fonts are done (a page without maths has no MathJax.startup)
PREPARE_JS = """async () => {
    document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    const targets = document.createElement('div');
    targets.style.display = 'none';
    document.querySelectorAll('[id]').forEach(e => {
        const a = document.createElement('a');
        a.href = '#' + encodeURIComponent(e.id);
        targets.appendChild(a);
    });
    document.body.appendChild(targets);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
    }
    await document.fonts.ready;
}"""
# code cells and outputs wrap instead of being cut at the page's edge; wide figures shrink
PRINT_CSS = """@media print {
    pre { white-space: pre-wrap !important; overflow-wrap: anywhere; }
    img, svg, .cell_output { max-width: 100% !important; }
}"""
# the labs' saved widgets: the HTML manager (_static/ipywidgets/embed.js) renders each view
# into a div.widget-subarea just before its script
WIDGETS_DRAWN_JS = """() => Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]')).every(
    s => s.previousElementSibling && s.previousElementSibling.classList.contains('widget-subarea'))"""
MARGIN = {"top": "15mm", "bottom": "15mm", "left": "12mm", "right": "12mm"}
TIMEOUT_MS = 120_000


def find_chromium() -> str | None:
    """The path of the system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def print_page(page, html: Path, out: Path) -> None:
    """Print one built page ``html`` to the PDF file ``out`` (A4, with backgrounds)."""
    page.goto(html.as_uri(), wait_until="load", timeout=TIMEOUT_MS)
    page.wait_for_function(WIDGETS_DRAWN_JS, timeout=TIMEOUT_MS)
    page.add_style_tag(content=PRINT_CSS)
    page.evaluate(PREPARE_JS)
    partial = out.with_suffix(".part")             # a cached page is always a whole one
    page.pdf(path=str(partial), format="A4", print_background=True, margin=MARGIN)
    partial.replace(out)


def anchors(reader, first: int) -> dict[str, tuple[int, float | None]]:
    """Where one printed page's anchors land in the book: {name: (page index, top)}, with the
    page's start under ``""``. Chromium names a destination ``/id`` for an element ``id``."""
    found = {"": (first, None)}
    for name, dest in reader.named_destinations.items():
        top = dest.get("/Top")
        found[str(name).lstrip("/")] = (first + reader.get_destination_page_number(dest),
                                        None if top is None else float(top))
    return found


def link_within(writer, owners: list[str], targets: dict[str, dict]) -> None:
    """Point every link of the merged book at its page in the book: an anchor on the same page
    (Chromium's named destinations, which repeat from page to page) or on another book page
    (a ``file://`` address when printed). A ``file://`` link to anything else (a source file,
    the index) is emptied: the printing machine's paths mean nothing to a reader."""
    from urllib.parse import unquote

    from pypdf.generic import ArrayObject, FloatObject, NameObject, NullObject
    for owner, page in zip(owners, writer.pages):
        for annot in page.get("/Annots") or []:
            annot = annot.get_object()
            action = annot.get("/A")
            action = action.get_object() if action is not None else {}
            if "/Dest" in annot and not isinstance(annot["/Dest"], ArrayObject):
                base, name = owner, str(annot["/Dest"]).lstrip("/")
            elif str(action.get("/URI", "")).startswith("file:"):
                base, _, name = str(action["/URI"]).partition("#")
                name = unquote(name)
            else:
                continue                          # a web address: kept as it is
            annot.pop("/A", None)
            where = targets.get(base, {})
            target = where.get(name) or where.get("")
            if target is None:
                annot.pop("/Dest", None)
                continue
            index, top = target
            ref = writer.pages[index].indirect_reference
            annot[NameObject("/Dest")] = ArrayObject(
                [ref, NameObject("/Fit")] if top is None else
                [ref, NameObject("/XYZ"), NullObject(), FloatObject(top), NullObject()])


def merge_pdfs(parts: list[tuple[Path, tuple[str, ...], str]], out_path: Path) -> int:
    """Concatenate the PDF files of ``parts`` (path, outline titles, address of the page
    printed) into ``out_path``, links pointing within the book, with a nested outline:
    ``("Part I", "PPO")`` is an entry "PPO" under a shared "Part I". Returns the page count."""
    from pypdf import PdfReader, PdfWriter
    writer = PdfWriter()
    parents: dict[tuple[str, ...], object] = {}
    owners: list[str] = []
    targets: dict[str, dict] = {}
    for path, outline, uri in parts:
        reader, first = PdfReader(path), len(writer.pages)
        targets[uri] = anchors(reader, first)
        writer.append(reader, import_outline=False)
        owners += [uri] * (len(writer.pages) - first)
        for depth in range(1, len(outline)):     # the parts, shared by their pages
            key = outline[:depth]
            if key not in parents:
                parents[key] = writer.add_outline_item(key[-1], first,
                                                       parent=parents.get(key[:-1]))
        # the page itself, always its own entry (and the parent of its sub-pages)
        parents[outline] = writer.add_outline_item(outline[-1], first,
                                                   parent=parents.get(outline[:-1]))
    link_within(writer, owners, targets)
    if "/Names" in writer.root_object:            # the pages' names clash, and are now unused
        writer.root_object["/Names"].get_object().pop("/Dests", None)
    writer.compress_identical_objects()          # shared fonts and images: a fifth smaller
    writer.page_mode = "/UseOutlines"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as f:
        writer.write(f)
    return len(writer.pages)


def page_key(html: Path) -> str:
    """SHA-256 of a built page and of how it is printed: a page is printed again when either
    changes (its HTML names its assets by digest, so a changed stylesheet changes it too)."""
    # the page's address too: its links to the other pages are file:// addresses
    how = PRINT_CSS + PREPARE_JS + WIDGETS_DRAWN_JS + repr(MARGIN) + html.as_uri()
    digest = hashlib.sha256(how.encode())
    digest.update(html.read_bytes())
    return digest.hexdigest()


def print_pages(todo: list[tuple[Path, Path]], chromium: str) -> None:
    """Print each (built page, PDF file) of ``todo`` with the Chromium at ``chromium``."""
    from playwright.sync_api import Error, sync_playwright
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        except Error as e:
            raise RuntimeError(f"book_pdf: Chromium at {chromium} did not start: {e}") from e
        try:
            page = browser.new_page()
            for html, out in todo:
                try:
                    print_page(page, html, out)
                except Error as e:
                    raise RuntimeError(f"book_pdf: printing {html} failed: {e}") from e
        finally:
            browser.close()


def print_book_pdf(html_dir: Path, pages: list[tuple[str, tuple[str, ...]]], out_path: Path,
                   chromium: str, cache_dir: Path | None = None) -> int:
    """Print each built page of ``pages`` — (path of its HTML relative to ``html_dir``, its
    outline titles), in reading order — with the Chromium at ``chromium`` and merge them into
    ``out_path``. With ``cache_dir``, a page whose HTML is unchanged since the last call is not
    printed again. Returns the PDF's page count.

    Raises:
        FileNotFoundError: a page's HTML is not in ``html_dir``.
        RuntimeError: Chromium failed to start or to print a page (the page is named).
    """
    import tempfile
    html_dir = Path(html_dir).resolve()
    missing = [rel for rel, _ in pages if not (html_dir / rel).is_file()]
    if missing:
        raise FileNotFoundError(f"book_pdf: no built page {missing[0]} in {html_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(cache_dir) if cache_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        parts = [(work / f"{page_key(html_dir / rel)}.pdf", outline, (html_dir / rel).as_uri())
                 for rel, outline in pages]
        todo = [(html_dir / rel, part) for (rel, _), (part, _, _) in zip(pages, parts)
                if not part.is_file()]
        if todo:
            print_pages(todo, chromium)
        for old in set(work.glob("*.pdf")) - {part for part, _, _ in parts}:
            old.unlink()                          # pages that changed or left the book
        return merge_pdfs(parts, Path(out_path))


def toc_pages(app) -> list[tuple[str, tuple[str, ...]]]:
    """Every page of the table of contents in reading order, as (HTML path relative to the
    output folder, outline titles): the root, then each toctree's pages under its caption,
    each followed by its own sub-pages."""
    env, builder = app.env, app.builder
    outdir = Path(app.outdir)

    def title(docname: str) -> str:
        return env.titles[docname].astext() if docname in env.titles else docname

    def walk(docname: str, outline: tuple[str, ...], seen: set) -> list:
        from sphinx import addnodes
        seen.add(docname)
        rel = Path(builder.get_outfilename(docname)).relative_to(outdir).as_posix()
        found = [(rel, outline)]
        for toctree in env.get_doctree(docname).findall(addnodes.toctree):
            under = outline[:-1] if docname == env.config.root_doc else outline
            if toctree.get("caption"):
                under = under + (toctree["caption"],)
            for _, child in toctree["entries"]:
                if child in env.all_docs and child not in seen:
                    found += walk(child, under + (title(child),), seen)
        return found

    root = env.config.root_doc
    return walk(root, (title(root),), set())


def build_pdf(app, exception) -> None:
    if exception is not None or app.builder.name not in ("html", "dirhtml"):
        return
    log = logging.getLogger(__name__)
    chromium = find_chromium()
    if chromium is None:
        log.info("book_pdf: no PDF of the book made (no chromium on PATH); to make it, install "
                 "Chromium (apt-get install chromium) and build again")
        return
    import time
    start = time.perf_counter()
    out = Path(app.outdir) / "_static" / PDF_NAME
    pages = toc_pages(app)
    count = print_book_pdf(Path(app.outdir), pages, out, chromium,
                           cache_dir=Path(app.doctreedir) / "book_pdf")
    log.info(f"book_pdf: _static/{PDF_NAME} made of {len(pages)} pages ({count} PDF pages, "
             f"{out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.0f} s")


def setup(app):
    # after offline_assets has copied MathJax into the site (its handler runs at priority 500)
    app.connect("build-finished", build_pdf, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
