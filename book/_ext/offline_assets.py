"""Sphinx extension: serve MathJax from the built site itself, not from a CDN.

MathJax 3 comes from the ``django-static-mathjax`` wheel on PyPI (a plain copy of MathJax's
files, no dependencies; installed by requirements.txt). After an HTML build this copies the
parts the pages use — the ``tex-chtml`` component, its fonts, the TeX extensions it may
autoload, the menu and the accessibility components — into ``_static/mathjax``, and
``_config.yml`` points Sphinx's ``mathjax_path`` at ``mathjax/tex-chtml.js``. So formulas
typeset with no network (about 3 MB).
"""
from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

KEEP = ("tex-chtml.js", "output/chtml", "input/tex/extensions", "ui", "a11y", "adaptors")


def mathjax_source() -> Path:
    """The ``es5`` folder of the installed MathJax copy."""
    return Path(str(resources.files("mathjax"))) / "static" / "mathjax" / "es5"


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    src, dst = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for part in KEEP:
        target = dst / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if (src / part).is_dir():
            shutil.copytree(src / part, target, dirs_exist_ok=True)
        else:
            shutil.copy2(src / part, target)


def check_config(app, config) -> None:
    if not mathjax_source().joinpath("tex-chtml.js").is_file():
        raise RuntimeError("MathJax is missing: pip install -r requirements.txt "
                           "(it installs django-static-mathjax)")


def setup(app):
    app.connect("config-inited", check_config)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
