"""Sphinx extension: serve MathJax and Vega from the built site itself, not from a CDN.

MathJax 3 comes from the ``django-static-mathjax`` wheel on PyPI (a plain copy of MathJax's
files, no dependencies; installed by requirements.txt). After an HTML build this copies the
parts the pages use — the ``tex-chtml`` component, its fonts, the TeX extensions it may
autoload, the menu and the accessibility components — into ``_static/mathjax``, and
``_config.yml`` points Sphinx's ``mathjax_path`` at ``mathjax/tex-chtml.js``. So formulas
typeset with no network (about 3 MB).

Vega, Vega-Lite and Vega-Embed come from vl-convert (already a dependency: it renders the labs'
static SVG charts), whose ``javascript_bundle()`` returns the three libraries as one script
(about 0.9 MB). It is written to ``_static/vega/vega-bundle.js`` and loaded by every page, for
the calculators that run with no kernel (``rlmperf_lite.book.static_chart``).
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


def write_vega_bundle(app) -> None:
    if app.builder.format != "html":
        return
    import vl_convert
    static = Path(app.outdir) / "_static" / "vega"
    static.mkdir(parents=True, exist_ok=True)
    # wrapped in a function so its top-level names stay local: as a plain script it would clash
    # with other scripts' globals, and as a module Chromium refuses it over file://
    bundle = "(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n"
    (static / "vega-bundle.js").write_text(bundle, encoding="utf-8")


def check_config(app, config) -> None:
    if not mathjax_source().joinpath("tex-chtml.js").is_file():
        raise RuntimeError("MathJax is missing: pip install -r requirements.txt "
                           "(it installs django-static-mathjax)")


def setup(app):
    app.connect("config-inited", check_config)
    app.connect("builder-inited", write_vega_bundle)
    app.connect("build-finished", copy_mathjax)
    app.add_js_file("vega/vega-bundle.js")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
