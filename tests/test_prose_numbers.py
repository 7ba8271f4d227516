"""The prose types no number the code computes: every digit on a prose page is glued from a lab,
inside code or an equation, a cross-reference, part of a name (H100, Qwen2.5-7B), or listed in
``tests/prose_numbers.toml`` as a published figure with its source, a scenario input, or an
unreviewed number from before this check (to be glued or classified; the list only shrinks).

A new typed number fails here with the text around it. Fix it by gluing the value from the lab
that computes it (``{glue:text}`` with ``path::key:fmt``), or, for a figure quoted from a source,
by adding it under ``published`` with the source's bibliography key.

``python tests/test_prose_numbers.py PAGE`` prints a page's typed numbers in the list's form.
"""

import collections
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ALLOWED = REPO / "tests" / "prose_numbers.toml"
SKIP = {"changelog.md", "bibliography.md"}   # the changelog quotes old numbers; the bibliography cites
PAGES = sorted(p for p in (REPO / "book").glob("*.md") if p.name not in SKIP)
KINDS = ("published", "input", "unreviewed")

_CODE_FENCE = re.compile(r"^(```+|~~~+)(?!\s*\{(?:warning|note|glossary|admonition)\})[^\n]*\n[\s\S]*?^\1\s*$",
                         re.M)
_STRIP = [
    re.compile(r"^\s*(?:```+|~~~+|:::+).*$", re.M),  # fences of the directives kept above
    re.compile(r"<!--[\s\S]*?-->"),
    re.compile(r"\$\$[\s\S]*?\$\$"),
    re.compile(r"\$[^$\n]+\$"),
    re.compile(r"\{[a-z:-]+\}`[^`]*`"),            # glue, cite, ref, doc, term, math roles
    re.compile(r"``[^`]*``|`[^`]*`"),              # inline code
    re.compile(r"^\s*:[a-z-]+:.*$", re.M),         # directive options
    re.compile(r"^\([^)\n]*\)=\s*$", re.M),        # labels
    re.compile(r"\]\([^)]*\)"),                    # link targets
    re.compile(r"<[^>\n]+>"),                      # html tags
    re.compile(r"^(#+\s+)[\d.]+\s", re.M),         # section numbers in headings
    re.compile(r"\b(?:Chapters?|Labs?|Parts?|Sections?|[Ee]xercises?|Eqs?\.|Equations?|Figures?|Fig\."
               r"|Tables?|PRs?|issues?|Appendix|§)\s*#?\d[\d.\-–]*(?:(?:,\s*|\s+(?:and|or|to)\s+|–)"
               r"#?\d[\d.\-–]*)*"),              # cross-references
]
_NUMBER = re.compile(r"(?<![\w.\-/#])\d[\d,]*(?:\.\d+)?(?!\w|\.\w)")


def prose(text: str) -> str:
    """The page's running text: code, equations, roles and cross-references removed, one line."""
    text = _CODE_FENCE.sub("", text)
    for pattern in _STRIP:
        text = pattern.sub(lambda m: m.group(1) if m.re.groups else " ", text)
    return " ".join(text.split())


def typed_numbers(text: str) -> collections.Counter:
    """Each typed number as ``'<24 chars before>⟦n⟧<12 chars after>'``, counted."""
    flat = prose(text)
    return collections.Counter(f"{flat[max(0, m.start() - 24):m.start()]}⟦{m.group().rstrip(',.')}⟧"
                               f"{flat[m.end():m.end() + 12]}" for m in _NUMBER.finditer(flat))


def _allowed():
    return tomllib.loads(ALLOWED.read_text(encoding="utf-8"))


def _entries(listing: dict) -> collections.Counter:
    out = collections.Counter()
    for kind in KINDS:
        out.update(e["at"] if isinstance(e, dict) else e for e in listing.get(kind, ()))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_new_typed_number(page):
    listing = _allowed().get(page.name, {})
    assert set(listing) <= set(KINDS), f"{ALLOWED.name} [{page.name}]: kinds are {KINDS}"
    found, allowed = typed_numbers(page.read_text(encoding="utf-8")), _entries(listing)
    new = sorted((found - allowed).elements())
    stale = sorted((allowed - found).elements())
    assert not new, (f"{page.name} types {len(new)} number(s) no lab glues: glue each from the lab "
                     f"that computes it, or list a quoted figure under published in {ALLOWED.name} "
                     "with its source:\n" + "\n".join(map(repr, new)))
    assert not stale, (f"{ALLOWED.name} [{page.name}] lists text the page no longer has; remove:\n"
                       + "\n".join(map(repr, stale)))


_LITERAL = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?:[eE]-?\d+)?(?![\w.])")


def _literals(path: Path) -> set:
    """The numeric literals of a repo file (a notebook's code cells), as floats."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return {float(m.group().replace("_", "")) for m in _LITERAL.finditer(text)}


def _number(entry: str) -> float:
    return float(entry.split("⟦")[1].split("⟧")[0].replace(",", ""))


@pytest.mark.parametrize("kind", ["published", "input"])
def test_listed_numbers_name_where_they_come_from(kind):
    """A published figure names a references.bib key, a URL, or the repo file that holds it with its
    citation; a scenario input names the lab or data file that sets it, and that file holds it."""
    bib = (REPO / "book" / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"@\w+\{([^,\s]+),", bib))
    for page, listing in _allowed().items():
        for entry in listing.get(kind, ()):
            assert isinstance(entry, dict) and "at" in entry and "source" in entry, (
                f"{page}: write {kind} entries as {{at = ..., source = ...}}, not {entry!r}")
            source = entry["source"]
            if kind == "published" and (source in keys or source.startswith("https://")):
                continue
            path = REPO / source
            assert path.is_file(), (f"{page}: {entry['at']!r} names {source!r}, which is no repo file"
                                    + (", bibliography key or URL" if kind == "published" else ""))
            assert _number(entry["at"]) in _literals(path), (
                f"{page}: {entry['at']!r}: {source} does not hold that number; the prose and the code "
                "disagree")


def test_the_scanner_sees_typed_numbers_and_nothing_else():
    page = ("## 5.2 Decode\n(sec-x)=\nChapter 4 and Lab 3 show it: each GPU decodes 8 sequences on\n"
            "64 H100s running Qwen2.5-7B in bf16, {glue:text}`a.ipynb::k:.1f` s, $T_1 = 42$,\n"
            "`x = 7`, {cite:p}`brent1974parallel`, about 1,100 tokens.\n```python\ny = 99\n```\n"
            "```{warning}\nIt took 0.5 s.\n```\n")
    found = {k.split("⟦")[1].split("⟧")[0] for k in typed_numbers(page)}
    assert found == {"8", "64", "1,100", "0.5"}


def test_the_list_only_holds_pages_of_the_book():
    assert set(_allowed()) <= {p.name for p in PAGES}


if __name__ == "__main__":   # print a page's typed numbers in the list's form
    for name in sys.argv[1:]:
        found = typed_numbers((REPO / "book" / name).read_text(encoding="utf-8"))
        print(f'["{name}"]\nunreviewed = [')
        print("\n".join(f"  {json.dumps(key, ensure_ascii=False)}," for key in sorted(found.elements())))
        print("]\n")
