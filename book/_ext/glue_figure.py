"""Sphinx extension: ``{glue:figure}`` with a ``:doc:`` option, so a prose page shows, as a
numbered figure with a caption, a chart that a lab computed and glued.

myst-nb 1.4 pastes from another document only through ``{glue}`` (its ``:doc:`` option) and the
``path::key`` roles; its ``{glue:figure}`` reads the page's own notebook. This adds ``:doc:`` to
``{glue:figure}``: the figure node (caption, ``:name:`` target, number) is built while the page
is read, and its content is myst-nb's own pending cross-document reference, which myst-nb
replaces with the glued output when the page is written::

    ```{glue:figure} ch04-step-timeline
    :doc: ../notebooks/ch04_lab.ipynb
    :name: fig-step-timeline
    Caption.
    ```

myst-nb renders a cross-document output only as text/html, text/plain or a bitmap, so the labs
glue charts as inline SVG in HTML (``rlmperf_lite.book.figure_html``): no JavaScript, no network.
"""
from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import directives
from myst_nb.ext.glue.directives import PasteFigureDirective
from myst_nb.ext.glue.utils import (PendingGlueReferenceError, create_pending_glue_ref,
                                    glue_warning)


class GlueFigureDirective(PasteFigureDirective):
    """myst-nb's ``{glue:figure}``; with ``:doc:``, the output comes from that document."""

    option_spec = {**PasteFigureDirective.option_spec, "doc": directives.unchanged}

    def run(self):
        if "doc" not in self.options:
            return super().run()
        try:
            ref = create_pending_glue_ref(self.document, self.source, self.line,
                                          self.options["doc"], self.arguments[0])
        except PendingGlueReferenceError as exc:
            return [glue_warning(str(exc), self.document, self.line)]
        figure = nodes.figure("", ref)
        self.set_source_info(figure)
        figure["classes"] += self.options.get("figclass", [])
        if "align" in self.options:
            figure["align"] = self.options["align"]
        self.add_name(figure)
        if not self.content:
            return [figure]
        parsed = nodes.Element()
        self.state.nested_parse(self.content, self.content_offset, parsed)
        first = parsed[0]
        if not isinstance(first, nodes.paragraph):
            return [figure, glue_warning("Figure caption must be a paragraph.", self.document,
                                         self.lineno)]
        caption = nodes.caption(first.rawsource, "", *first.children)
        caption.source, caption.line = first.source, first.line
        figure += caption
        if len(parsed) > 1:
            figure += nodes.legend("", *parsed[1:])
        return [figure]


def setup(app):
    app.setup_extension("myst_nb")                       # its glue domain must exist first
    app.add_directive_to_domain("glue", "figure", GlueFigureDirective, override=True)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
