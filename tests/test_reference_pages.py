"""The reference pages hold together without a build: every citation in the book resolves to an
entry of book/references.bib, every entry says who wrote what, when and where to find it, and the
notation table gives each symbol one meaning (the book's style guide: one letter, one size).
The strict build (tests/test_book_build.py) checks the same citations end to end; these tests
name the key, field or symbol at fault in a second."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from pybtex.database import parse_file

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
BIB = BOOK / "references.bib"

# {cite}`k`, {cite:p}`k1,k2`, {cite:t}`{pre}k{post}`, {cite:ps}`k` ... (sphinxcontrib-bibtex roles)
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")
# a target is "{pre}key{post}" with optional pre- and post-text (sphinxcontrib-bibtex >= 2.6)
CITE_TARGET = re.compile(r"^\s*(?:\{[^{}]*\})?\s*([^{}\s,]+)\s*(?:\{[^{}]*\})?\s*$")

# Shape letters of STYLE.md ("B batch (prompts), G group size, T sequence, ...") and the
# symbols the Part III chapters will use; the notation table must define each exactly once.
STYLE_SHAPE_LETTERS = ["B", "G", "T", "P", "R", "D", "H", "D_h", "V", "L", "E", "N"]
PART_III_SYMBOLS = [r"\mathrm{dp}", r"\mathrm{tp}", r"\mathrm{pp}", r"\mathrm{sp}", r"\mathrm{cp}",
                    r"\mathrm{ep}", r"\Psi", "m", "v", r"\epsilon", r"\beta", "W",
                    r"\mathcal{D}", "p"]


def _markdown_sources() -> dict[str, str]:
    """Text of every book page and of the markdown cells of every lab, by relative path."""
    sources = {str(p.relative_to(REPO)): p.read_text(encoding="utf-8")
               for p in sorted(BOOK.glob("*.md"))}
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
        sources[str(nb.relative_to(REPO))] = "\n".join(
            "".join(c.get("source", "")) for c in cells if c.get("cell_type") == "markdown")
    return sources


def _cited_keys() -> dict[str, set[str]]:
    """Citation key -> the files that cite it."""
    where: dict[str, set[str]] = {}
    for path, text in _markdown_sources().items():
        for targets in CITE_ROLE.findall(text):
            for target in targets.split(","):
                match = CITE_TARGET.match(target)
                assert match, f"{path}: malformed citation target {target!r} in {targets!r}"
                where.setdefault(match.group(1), set()).add(path)
    return where


@pytest.fixture(scope="module")
def bib():
    return parse_file(str(BIB), bib_format="bibtex")


def _notation_rows() -> list[tuple[str, str]]:
    """(symbol, meaning) of each row of the first table under '## Symbols' in book/notation.md
    (the table after it maps the letters of quoted papers, which are not the book's symbols)."""
    text = (BOOK / "notation.md").read_text(encoding="utf-8")
    section = text.split("## Symbols", 1)[1]
    rows, in_table = [], False
    for line in section.splitlines():
        if not line.lstrip().startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "symbol" or set(cells[0]) <= {"-", " "}:
            continue
        rows.append((cells[0].strip("$ "), cells[1] if len(cells) > 1 else ""))
    return rows


def test_the_book_cites_something():
    # The chapters cite Brent 1974 and DeepSeekMath; if none is found the role pattern is wrong.
    keys = _cited_keys()
    assert {"brent1974parallel", "shao2024deepseekmath"} <= set(keys), sorted(keys)


def test_every_cited_key_is_in_the_bib_file(bib):
    missing = {k: sorted(v) for k, v in _cited_keys().items() if k not in bib.entries}
    assert not missing, f"cited but not in {BIB.name}: {missing}"


def test_bib_keys_are_unique():
    # pybtex keeps the last of two entries with one key; count them in the raw text instead.
    keys = re.findall(r"^@\w+\s*\{\s*([^,\s]+)\s*,", BIB.read_text(encoding="utf-8"), re.M)
    dupes = [k for k, n in Counter(k.lower() for k in keys).items() if n > 1]
    assert not dupes, dupes


@pytest.mark.parametrize("field", ["title", "year"])
def test_every_entry_has_field(bib, field):
    missing = [k for k, e in bib.entries.items() if not e.fields.get(field, "").strip()]
    assert not missing, f"entries without {field}: {missing}"


def test_every_entry_has_an_author(bib):
    missing = [k for k, e in bib.entries.items() if not e.persons.get("author")]
    assert not missing, f"entries without author: {missing}"


def test_every_year_is_a_year_or_undated(bib):
    # "n.d." marks a repository document that carries no date; anything else is a 4-digit year,
    # with a letter when one team has several documents that year (author-year labels must
    # differ: "verl contributors, 2025a", "2025b", ...)
    bad = {k: e.fields["year"] for k, e in bib.entries.items()
           if not re.fullmatch(r"(19|20)\d\d[a-z]?|n\.d\.", e.fields.get("year", ""))}
    assert not bad, bad
    labels = {}
    for k, e in bib.entries.items():
        people = e.persons.get("author", [])
        first = " ".join(people[0].last_names) if people else e.fields.get("author", "")
        labels.setdefault((first, len(people) > 1, e.fields.get("year")), []).append(k)
    assert not {lab: ks for lab, ks in labels.items() if len(ks) > 1}


def test_every_entry_has_a_link(bib):
    # A reader must be able to find the work: a URL, an arXiv eprint or a DOI.
    missing = [k for k, e in bib.entries.items()
               if not any(e.fields.get(f, "").strip() for f in ("url", "eprint", "doi"))]
    assert not missing, f"entries without url, eprint or doi: {missing}"


def test_arxiv_ids_are_well_formed(bib):
    bad = {k: e.fields["eprint"] for k, e in bib.entries.items()
           if "eprint" in e.fields and not re.fullmatch(r"\d{4}\.\d{4,5}", e.fields["eprint"])}
    assert not bad, bad


def test_part_iii_entries_are_ready(bib):
    # Chapters 7-9 cite these keys; their arXiv ids are the ones the book's sources name
    # (e.g. ZeRO arXiv 1910.02054, Megatron-LM arXiv 2104.04473 in shared/REFERENCES.md).
    expected = {
        "rajbhandari2020zero": "1910.02054", "shoeybi2019megatron": "1909.08053",
        "narayanan2021megatron": "2104.04473", "korthikanti2022reducing": "2205.05198",
        "huang2019gpipe": "1811.06965", "liu2023ring": "2310.01889",
        "lepikhin2020gshard": "2006.16668", "fedus2021switch": "2101.03961",
        "zhao2023fsdp": "2304.11277", "sheng2024hybridflow": "2409.19256",
        "milakov2018online": "1805.02867", "dao2022flashattention": "2205.14135",
        "jacobs2023deepspeedulysses": "2309.14509", "deepseekv3": "2412.19437",
    }
    got = {k: bib.entries[k].fields.get("eprint") if k in bib.entries else None for k in expected}
    assert got == expected
    for key in ("narayanan2019pipedream", "thakur2005collective", "nccltests"):
        assert key in bib.entries, key


def test_bibliography_page_lists_every_entry():
    text = (BOOK / "bibliography.md").read_text(encoding="utf-8")
    assert re.search(r"```\{bibliography\}\s*\n:all:", text), "bibliography.md needs :all:"


def test_notation_table_has_one_row_per_symbol():
    symbols = [s for s, _ in _notation_rows()]
    assert len(symbols) > 20, symbols
    dupes = [s for s, n in Counter(symbols).items() if n > 1]
    assert not dupes, f"symbols defined twice in book/notation.md: {dupes}"


def test_notation_table_has_the_style_guide_letters():
    symbols = {s for s, _ in _notation_rows()}
    missing = [s for s in STYLE_SHAPE_LETTERS + PART_III_SYMBOLS if s not in symbols]
    assert not missing, f"book/notation.md lacks {missing}"


def test_notation_table_gives_each_symbol_a_meaning():
    empty = [s for s, meaning in _notation_rows() if not meaning.strip()]
    assert not empty, empty
