"""The library's layout keeps the promises of its package docstring: the book's apparatus lives in
``rlmperf_lite.book`` alone, which nothing else imports; chapter and lab numbers appear only there
(the core cites book sections by label, so renumbering chapters changes no code); no function is
over 60 lines; and no module imports another module's private names."""

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "rlmperf_lite"
BOOK = PKG / "book"
# "Part III" names a part of the mission, not a number that renumbering would change
CHAPTER_NUMBER = re.compile(r"\b(Chapters?|Labs?|Exercises?) \d|\bch\d\d\b|\bch\d\d[._]\w")
MAX_FUNCTION_LINES = 60


def _modules(core_only=False):
    for path in sorted(PKG.rglob("*.py")):
        if core_only and BOOK in path.parents:
            continue
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imported_modules(path, tree):
    """Absolute dotted names of the modules ``path`` imports."""
    package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(PKG.parent).parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def test_no_core_module_imports_the_book_package():
    bad = sorted(f"{p.relative_to(PKG)} imports {name}" for p, tree in _modules(core_only=True)
                 for name in _imported_modules(p, tree)
                 if name == "rlmperf_lite.book" or name.startswith("rlmperf_lite.book."))
    assert bad == [], bad


def test_chapter_numbers_appear_only_in_the_book_package():
    data = [p for p in PKG.rglob("*") if p.suffix in (".py", ".json") and BOOK not in p.parents]
    bad = [f"{p.relative_to(PKG)}:{i}: {line.strip()}" for p in data
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if CHAPTER_NUMBER.search(line)]
    assert bad == [], "\n".join(bad)


def test_the_check_finds_chapter_numbers_where_they_are_allowed():
    # the pattern is live: the book package does name chapters and labs
    hits = sum(bool(CHAPTER_NUMBER.search(line)) for p in BOOK.rglob("*.py")
               for line in p.read_text(encoding="utf-8").splitlines())
    assert hits > 20
    assert not CHAPTER_NUMBER.search("book section :ref:`sec-memory`; ZeRO §5.1; Part III")


def test_no_function_is_over_60_lines():
    long = sorted((node.end_lineno - node.lineno + 1, f"{p.relative_to(PKG)}::{node.name}")
                  for p, tree in _modules() for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES)
    assert long == [], long


def test_no_private_names_imported_across_modules():
    bad = sorted(f"{p.relative_to(PKG)}: from {node.module} import {a.name}"
                 for p, tree in _modules() for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module != "__future__"
                 for a in node.names if a.name.startswith("_"))
    assert bad == [], bad
