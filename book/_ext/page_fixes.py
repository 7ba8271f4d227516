"""Sphinx extension: small fixes so that the built pages log no errors in a browser.

- sphinx-thebe's inline configuration script is registered twice under Jupyter Book, and the
  second copy fails ("Identifier 'THEBE_JS_URL' has already been declared"): keep one copy of
  every script of a page.
- The Jupyter widgets HTML manager calls MathJax 2's ``MathJax.Hub.Queue``; ``_static/
  mathjax2-shim.js`` maps it onto MathJax 3, which the book serves.
"""
from __future__ import annotations


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        # the two copies differ only in filename: None in one, "" in the other
        attributes = getattr(js, "attributes", None) or {}
        key = (getattr(js, "filename", None) or str(js) if not attributes.get("body") else "",
               repr(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.add_js_file("mathjax2-shim.js")
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
