"""The API reference (book/api/*.md) documents every public name of the library, without a build.

Each subpackage (or top-level module) of ``rlmperf_lite`` has one page whose autodoc directives
(``.. autoclass::``, ``.. autofunction::``, ``.. autodata::``, or ``.. automodule::`` with
``:members:``) name the objects in its ``__all__``. A name added to an ``__all__`` fails here
until a page documents it, and a directive whose target was renamed or removed fails here too,
in a second, instead of as an autodoc warning in the strict build (tests/test_book_build.py,
``-W -n``), which is where the docstrings themselves are checked.
"""

import importlib
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
API = REPO / "book" / "api"

# one page per entry: book/api/<page>.md documents rlmperf_lite.<module>
PAGES = {"nn": "nn", "tasks": "tasks", "rl": "rl", "workdepth": "cost.workdepth",
         "variant_costs": "cost.variants", "cost": "cost", "parallel": "parallel", "sim": "sim",
         "distributed": "distributed", "views": "book", "checks": "checks",
         "exercises": "book.exercises"}

DIRECTIVE = re.compile(r"^\s*\.\. (auto(?:module|class|function|data|exception|method|"
                       r"attribute|property|decorator))::\s*(\S+)\s*$")
OPTION = re.compile(r"^\s+:([\w-]+):\s*(.*)$")


def _directives() -> list[tuple[str, str, str, dict]]:
    """(page, directive, target, options) of every autodoc directive of the API pages."""
    found = []
    for page in sorted(API.glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            match = DIRECTIVE.match(line)
            if not match:
                continue
            options = {}
            for following in lines[i + 1:]:
                opt = OPTION.match(following)
                if not opt:
                    break
                options[opt.group(1)] = opt.group(2).strip()
            found.append((page.name, match.group(1), match.group(2), options))
    return found


def _resolve(target: str):
    """The object a dotted autodoc target names: the longest importable module, then attributes."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(target)


def _documented() -> list[tuple[str, object]]:
    """(dotted name, object) of everything the pages document."""
    out = []
    for _, directive, target, options in _directives():
        if directive != "automodule":
            out.append((target, _resolve(target)))
        elif "members" in options:
            module = importlib.import_module(target)
            names = ([n.strip() for n in options["members"].split(",") if n.strip()]
                     or list(getattr(module, "__all__", [])))
            out += [(f"{target}.{n}", getattr(module, n)) for n in names]
    return out


def test_every_directive_names_an_importable_object():
    broken = []
    for page, directive, target, _ in _directives():
        try:
            _resolve(target)
        except (ImportError, AttributeError) as err:
            broken.append(f"{page}: .. {directive}:: {target} ({err})")
    assert not broken, "autodoc targets that do not import:\n" + "\n".join(broken)


@pytest.mark.parametrize("page_name, name", PAGES.items())
def test_each_subpackage_has_a_page(page_name, name):
    page = API / f"{page_name}.md"
    assert page.exists(), f"no API page {page.relative_to(REPO)} for rlmperf_lite.{name}"
    targets = {(d, t) for p, d, t, _ in _directives() if p == page.name}
    assert ("automodule", f"rlmperf_lite.{name}") in targets, (
        f"{page.name} does not start from '.. automodule:: rlmperf_lite.{name}' (the module's "
        "docstring, and the target of :mod: references)")


@pytest.mark.parametrize("page_name, name", PAGES.items())
def test_every_public_name_is_documented(page_name, name):
    module = importlib.import_module(f"rlmperf_lite.{name}")
    prefix = f"rlmperf_lite.{name}."
    documented = _documented()
    missing = []
    for public in module.__all__:
        obj = getattr(module, public)
        # documented under the module's path, or as the same object under another path (the
        # submodule that defines it, e.g. rlmperf_lite.book.dp_views.dp_widget, or the package
        # that exports it, e.g. rlmperf_lite.cost.grpo_step_workdepth for cost.workdepth's)
        if not any(path == prefix + public or (path.endswith("." + public) and o is obj)
                   for path, o in documented):
            missing.append(public)
    assert not missing, (
        f"rlmperf_lite.{name}.__all__ has names no page of book/api documents: {missing}; add "
        f"them to book/api/{page_name}.md (e.g. '.. autofunction:: {prefix}{missing[0]}')")


def test_the_book_builds_the_api_pages():
    """Only files listed in _toc.yml are built, and autodoc needs its two extensions."""
    toc = (REPO / "_toc.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"file:\s*(\S+)", toc))
    pages = {f"book/api/{p.stem}" for p in API.glob("*.md")}
    assert pages <= listed, f"API pages missing from _toc.yml: {sorted(pages - listed)}"
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    extensions = config.get("sphinx", {}).get("extra_extensions", [])
    for ext in ("sphinx.ext.autodoc", "sphinx.ext.napoleon"):
        assert ext in extensions, f"_config.yml sphinx.extra_extensions lacks {ext}"
