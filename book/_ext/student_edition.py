"""Sphinx extension: the student edition of the book, built with ``RLMPERF_EDITION=student``.

The labs end with exercises (``{exercise}``) followed by their solutions in sphinx-exercise's
gated form: ``{solution-start}``, the code cells the build executes, ``{solution-end}``. The
full edition (the default, or ``RLMPERF_EDITION=full``) shows each solution folded in a dropdown;
the student edition leaves them out of the site and keeps the exercises and their numbers.

``RLMPERF_EDITION=student`` sets sphinx-exercise's ``hide_solutions`` to True. That option alone
is not enough for gated solutions in sphinx-exercise 1.2.1: the hidden ``{solution-start}``
returns nothing while ``{solution-end}`` still returns its marker, so the code cells between the
two would stay on the page and the marker would reach the HTML writer, which has no visitor for
it. This extension therefore replaces ``{solution-start}`` with a subclass that leaves a marker
node when solutions are hidden, and a transform (before sphinx-exercise merges gated solutions)
removes everything from that marker to the matching ``{solution-end}``.
"""
from __future__ import annotations

import os

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx_exercise.directive import SolutionStartDirective
from sphinx_exercise.nodes import solution_end_node

ENV_VAR = "RLMPERF_EDITION"
EDITIONS = ("full", "student")


def edition() -> str:
    """The edition requested by ``RLMPERF_EDITION`` ("full" when unset or empty).

    Raises:
        ValueError: naming ``RLMPERF_EDITION`` when it is set to anything else.
    """
    value = os.environ.get(ENV_VAR, "").strip().lower() or "full"
    if value not in EDITIONS:
        raise ValueError(f"{ENV_VAR} must be one of {EDITIONS} (or unset for 'full'), "
                         f"got {os.environ[ENV_VAR]!r}")
    return value


class hidden_solution_start(nodes.Element):
    """Where a hidden gated solution began; removed with its content before writing."""


class HideableSolutionStart(SolutionStartDirective):
    """``{solution-start}`` that leaves a marker when ``hide_solutions`` is on."""

    def run(self):
        result = super().run()          # records the gated start either way
        if self.env.app.config.hide_solutions:
            return [hidden_solution_start(label=self.arguments[0])]
        return result


class RemoveHiddenSolutions(SphinxTransform):
    """Remove each hidden gated solution: its marker, the nodes after it and its end marker."""

    default_priority = 9                # sphinx-exercise merges gated solutions at 10

    def apply(self):
        for start in list(self.document.findall(hidden_solution_start)):
            parent = start.parent
            i = parent.index(start)
            j = next((k for k in range(i + 1, len(parent.children))
                      if isinstance(parent.children[k], solution_end_node)), None)
            if j is None:               # sphinx-exercise's own check reports the missing end
                parent.remove(start)
                continue
            for child in parent.children[i:j + 1]:
                parent.remove(child)


def set_edition(app, config) -> None:
    if edition() == "student":
        config.hide_solutions = True


def setup(app):
    app.setup_extension("sphinx_exercise")
    app.add_node(hidden_solution_start)
    app.add_directive("solution-start", HideableSolutionStart, override=True)
    app.add_transform(RemoveHiddenSolutions)
    app.connect("config-inited", set_edition)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
