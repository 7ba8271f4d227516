"""Sphinx extension for the API reference (book/api): constants without a docstring of their own.

``.. autodata:: rlmperf_lite.cost.ALGOS`` documents a tuple that has no docstring, so autodoc
falls back to the docstring of its type and prints Python's "Built-in immutable sequence. If no
argument is given, ..." under it (an int gets int's, ``rlmperf_lite.nn.COUNTER`` gets the
FlopCounter class text). Sphinx has no setting for this; here such a docstring is dropped before
napoleon reads it, so the entry shows the name and its value only. A constant documented with a
docstring or a ``#:`` comment keeps it.
"""
from __future__ import annotations

import inspect


def drop_docstring_of_the_type(app, what, name, obj, options, lines) -> None:
    if what not in ("data", "attribute") or not lines or inspect.isclass(obj):
        return
    type_doc = type(obj).__doc__
    if type_doc and "\n".join(lines).strip() == inspect.cleandoc(type_doc).strip():
        lines.clear()


def setup(app):
    # before sphinx.ext.napoleon (default priority 500), which rewrites the lines
    app.connect("autodoc-process-docstring", drop_docstring_of_the_type, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
