"""The first code cell of every lab installs the library where it is missing (Colab), from the
one repository URL of the book, ``_config.yml``'s ``repository.url``, and stops with what to do
when that install fails; where the library is importable it does nothing (and prints nothing).

``install_cell_source(url)`` is the cell's one template. After a change to it or to the URL,
``python tests/test_lab_install_cell.py`` rewrites the first code cell of every lab (source
only: the stored outputs, empty, stay as they are).
"""
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LABS = sorted((REPO / "notebooks").glob("ch[0-9][0-9]_lab.ipynb"))


def repository_url() -> str:
    """``_config.yml``'s ``repository.url``, the one place the book names its repository."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"]


def install_cell_source(url: str) -> str:
    """The first code cell of every lab: install ``rlmperf_lite[book]`` from ``git+url`` when
    the import fails, then import it again and raise a RuntimeError saying what to do if it
    still fails (``%pip`` reports a failed install but raises nothing)."""
    spec = f"rlmperf_lite[book] @ git+{url}"
    return f"""# On Colab, or wherever the book's library is not installed yet, install it first
try:
    import rlmperf_lite  # noqa: F401
except ImportError:
    %pip install -q "{spec}"
    import importlib
    importlib.invalidate_caches()
    try:
        import rlmperf_lite  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "Installing rlmperf_lite from git+{url} failed "
            "(pip's message is above). Check the network and run this cell again, or run "
            '`pip install "{spec}"` '
            "in a terminal; or open this lab on Binder (the rocket at the top of its page), "
            "or run it from a clone after `pip install -r requirements.txt`.") from None"""


def _first_code_cell(notebook: dict) -> dict:
    return next(c for c in notebook["cells"] if c["cell_type"] == "code")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def test_every_lab_installs_from_the_configured_repository():
    assert len(LABS) == 14
    url = repository_url()
    assert url.startswith("https://github.com/")
    expected = install_cell_source(url)
    assert f'%pip install -q "rlmperf_lite[book] @ git+{url}"' in expected.splitlines()[4]
    wrong = [p.name for p in LABS
             if _source(_first_code_cell(json.loads(p.read_text(encoding="utf-8")))) != expected]
    assert wrong == [], (f"first code cell of {wrong} is not the install cell; "
                         "run python tests/test_lab_install_cell.py")


def test_the_repository_url_is_written_only_in_the_install_cell():
    url = repository_url()
    for path in LABS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        first = _first_code_cell({"cells": cells})
        others = [i for i, c in enumerate(cells) if c is not first and url in _source(c)]
        assert others == [], f"{path.name}: cells {others} name {url}, which _config.yml holds"


def test_the_install_cell_is_silent_where_the_library_is_installed():
    for path in LABS:
        assert _first_code_cell(json.loads(path.read_text(encoding="utf-8")))["outputs"] == []


def _run_cell(source: str, pip_calls: list) -> None:
    """Run the cell as IPython runs it (its own transformation of ``%pip``), the magic
    recorded in ``pip_calls`` instead of installing anything."""
    from IPython.core.inputtransformer2 import TransformerManager

    class Shell:
        def run_line_magic(self, name, line):
            pip_calls.append((name, line))

    code = TransformerManager().transform_cell(source)
    exec(compile(code, "<install cell>", "exec"), {"get_ipython": Shell})


def test_the_install_cell_does_nothing_when_the_import_works():
    calls = []
    _run_cell(install_cell_source(repository_url()), calls)
    assert calls == []


def test_a_failed_install_stops_with_what_to_do(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_library(name, *args, **kwargs):
        if name == "rlmperf_lite":
            raise ModuleNotFoundError("No module named 'rlmperf_lite'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_library)
    url, calls = repository_url(), []
    try:
        _run_cell(install_cell_source(url), calls)
    except RuntimeError as err:
        message = str(err)
    else:
        raise AssertionError("a failed install raised nothing")
    assert calls == [("pip", f'install -q "rlmperf_lite[book] @ git+{url}"')]    # tried once
    assert f"Installing rlmperf_lite from git+{url} failed" in message
    assert f'pip install "rlmperf_lite[book] @ git+{url}"' in message
    assert "Binder" in message and "pip install -r requirements.txt" in message


def write_install_cells() -> list[str]:
    """Rewrite the first code cell's source of every lab from the template; returns the labs
    changed. Only that cell's ``source`` changes; the file keeps nbformat's layout."""
    expected = install_cell_source(repository_url())
    changed = []
    for path in LABS:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cell = _first_code_cell(notebook)
        if _source(cell) != expected:
            cell["source"] = expected.splitlines(keepends=True)
            text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
            path.write_text(text, encoding="utf-8")
            changed.append(path.name)
    return changed


if __name__ == "__main__":
    print("rewrote", write_install_cells() or "nothing")
