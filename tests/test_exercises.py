"""The labs' exercises: the answer checker (rlmperf_lite.book.exercises), the consistency of exercise
ids and labels between chapters, labs and registry, and the two editions of the site (solutions
folded in the full edition, absent from the student edition, book/_ext/student_edition.py)."""
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from rlmperf_lite.book import exercises
from rlmperf_lite.cost import estimate_rl_step
from rlmperf_lite.book.exercises import answers, check_answer, expected_answer
from rlmperf_lite.book.exercises._answer import QWEN_STEP
from rlmperf_lite.cost.variants import informative_fraction
from rlmperf_lite.cost import ppo_step_workdepth

REPO = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
CHAPTERS = {f"ch{n:02d}": (next((REPO / "book").glob(f"ch{n:02d}_*.md")),
                          REPO / "notebooks" / f"ch{n:02d}_lab.ipynb") for n in range(1, 15)}


# ---- check_answer ----------------------------------------------------------------------------

def test_a_right_answer_prints_a_tick_and_returns_true(capsys):
    assert check_answer("ch01.1a", 0.32) is True            # 1 - 0.8^2 - 0.2^2
    assert capsys.readouterr().out.strip() == "✓ ch01.1a: 0.32 matches"


def test_a_wrong_answer_prints_the_expected_value_and_a_hint(capsys):
    assert check_answer("ch04.2a", 0.5) is False
    out = capsys.readouterr().out.strip()
    expected = expected_answer("ch04.2a")
    assert out.startswith(f"✗ ch04.2a: expected about {expected:.2f} (to 2 significant digits), "
                          "got 0.50 — hint: ")


def test_tolerance_default_and_override(capsys):
    exact = expected_answer("ch05.2")                        # H_16 = 3.3807...
    assert check_answer("ch05.2", exact * 1.005)             # within the default 1%
    assert not check_answer("ch05.2", exact * 1.05)
    assert check_answer("ch05.2", exact * 1.05, rtol=0.1)
    assert not check_answer("ch05.2", exact * 1.005, rtol=1e-4)


def test_counts_are_exact(capsys):
    b = int(expected_answer("ch04.1"))
    assert check_answer("ch04.1", b) and check_answer("ch04.1", np.int64(b))
    assert check_answer("ch04.1", float(b))
    assert not check_answer("ch04.1", b + 1)
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"✗ ch04.1: expected {b}, got")
    assert check_answer("ch03.4", 0) and not check_answer("ch03.4", 1)   # zero needs no rtol


def test_unknown_exercise_lists_the_known_ids():
    with pytest.raises(ValueError, match=r"exercise must be one of .*'ch01\.1a'.*got 'ch99\.1'"):
        check_answer("ch99.1", 1.0)
    with pytest.raises(ValueError, match="exercise"):
        check_answer(4.2, 1.0)
    with pytest.raises(ValueError, match="exercise"):
        expected_answer("ch04")


@pytest.mark.parametrize("value", ["0.32", None, True, np.bool_(True), [0.32], float("nan"),
                                   math.inf, 1j])
def test_non_numeric_value_names_value(value):
    with pytest.raises(ValueError, match=r"^value must be a finite real number"):
        check_answer("ch01.1a", value)


@pytest.mark.parametrize("rtol", [-0.1, 1.0, "1%", True, float("nan")])
def test_bad_rtol_names_rtol(rtol):
    with pytest.raises(ValueError, match=r"^rtol must be"):
        check_answer("ch01.1a", 0.32, rtol=rtol)


def test_answers_lists_ids_in_order_and_by_chapter():
    ids = answers()
    assert ids == list(exercises.REGISTRY) and len(ids) == len(set(ids))
    assert all(re.fullmatch(r"ch(0[1-9]|1[0-9])\.[1-9][a-z]?", i) for i in ids), ids
    assert answers("ch02") == ["ch02.1", "ch02.2", "ch02.3", "ch02.4a", "ch02.4b", "ch02.4c"]
    assert answers("ch42") == []
    with pytest.raises(ValueError, match="^prefix"):
        answers(2)


# ---- the registry computes with the library ---------------------------------------------------

@pytest.mark.parametrize("exercise", answers())
def test_every_answer_is_a_finite_number_that_checks(exercise, capsys):
    value = expected_answer(exercise)
    assert math.isfinite(value)
    assert check_answer(exercise, value)


def test_answers_are_computed_when_asked_not_stored(monkeypatch):
    """Patch a library function: the registry's answer follows it."""
    monkeypatch.setattr("rlmperf_lite.cost.variants.informative_fraction",
                        lambda q, group_size: 0.125)
    assert expected_answer("ch01.1a") == 0.125


def test_registry_answers_equal_the_library():
    """A few answers recomputed here the way the labs do, with the library's functions."""
    assert expected_answer("ch01.1b") == informative_fraction(0.8, 4)
    assert expected_answer("ch01.2") == pytest.approx(0.5)   # 1 - q^4 - (1-q)^4 peaks at 1/2
    kw = dict(num_layers=32, hidden_size=4096, num_heads=32, vocab_size=32000,
              intermediate_size=11008, mlp="swiglu", num_prompts=512, prompt_len=512,
              response_len=4096)
    four = ppo_step_workdepth(**kw, ppo_epochs=2, num_minibatches=2)
    one = ppo_step_workdepth(**kw)
    assert expected_answer("ch02.1") == (four.phase("train_forward").depth_rounds
                                         / one.phase("train_forward").depth_rounds) == 4
    for exercise, r in (("ch04.2a", 1024), ("ch04.2b", 16384)):
        e = estimate_rl_step("grpo", **{**QWEN_STEP, "response_len": r})
        assert expected_answer(exercise) == e.generation_time_share
    assert expected_answer("ch05.2") == pytest.approx(sum(1 / k for k in range(1, 17)), rel=1e-4)
    G = int(expected_answer("ch06.1"))                      # the first G below one half
    share = {g: estimate_rl_step("grpo", **{**QWEN_STEP, "group_size": g}).generation_time_share
             for g in (G - 1, G)}
    assert share[G - 1] >= 0.5 > share[G]
    assert expected_answer("ch03.4") == 0                   # two actions: never opposite


# ---- chapters, labs and registry agree ---------------------------------------------------------

def _lab_sources(lab: Path) -> tuple[str, str]:
    nb = json.loads(lab.read_text(encoding="utf-8"))
    text = {t: "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == t)
            for t in ("markdown", "code")}
    return text["markdown"], text["code"]


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_chapter_links_every_exercise_of_its_lab(chapter):
    page, lab = CHAPTERS[chapter]
    markdown, code = _lab_sources(lab)
    labels = re.findall(r"```\{exercise\}\n:label: (ex-ch\d\d-\d+)", markdown)
    assert labels, f"{lab.name} has no exercises"
    assert labels == [f"ex-{chapter}-{k}" for k in range(1, len(labels) + 1)], labels
    # every exercise has one gated solution, folded
    starts = re.findall(r"```\{solution-start\} (\S+)\n:class: dropdown\n```", markdown)
    assert starts == labels, f"{lab.name}: solutions {starts} for exercises {labels}"
    assert markdown.count("```{solution-end}") == len(labels)
    exercises_section = page.read_text(encoding="utf-8").split("## Exercises", 1)[1]
    assert re.findall(r"\{ref\}`(ex-ch\d\d-\d+)`", exercises_section) == labels
    # the ids the lab checks are exactly the chapter's registered ids
    checked = re.findall(r'check_answer\("(ch\d\d\.\d+[a-z]?)"', code)
    assert sorted(set(checked)) == answers(chapter), (checked, answers(chapter))


# ---- the two editions of the site ---------------------------------------------------------------

class _SolutionText(HTMLParser):
    """Text inside elements whose class includes "solution", and whether each is a dropdown."""

    def __init__(self):
        super().__init__()
        self.depth, self.inside, self.solutions, self.text = 0, 0, [], []

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "input", "meta", "link", "hr", "col", "source", "wbr"):
            return
        self.depth += 1
        classes = (dict(attrs).get("class") or "").split()
        if not self.inside and "solution" in classes:
            self.inside = self.depth
            self.solutions.append({"dropdown": "dropdown" in classes, "text": ""})

    def handle_endtag(self, tag):
        if tag in ("br", "img", "input", "meta", "link", "hr", "col", "source", "wbr"):
            return
        if self.inside == self.depth:
            self.inside = 0
        self.depth -= 1

    def handle_data(self, data):
        if self.inside:
            self.solutions[-1]["text"] += data
        self.text.append(data)


def _parse(html_file: Path) -> _SolutionText:
    parser = _SolutionText()
    parser.feed(html_file.read_text(encoding="utf-8"))
    return parser


def _load_extension():
    path = REPO / "book" / "_ext" / "student_edition.py"
    spec = importlib.util.spec_from_file_location("student_edition_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value, edition", [(None, "full"), ("", "full"), ("full", "full"),
                                            ("student", "student"), (" Student ", "student")])
def test_edition_from_the_environment(monkeypatch, value, edition):
    if value is None:
        monkeypatch.delenv("RLMPERF_EDITION", raising=False)
    else:
        monkeypatch.setenv("RLMPERF_EDITION", value)
    assert _load_extension().edition() == edition


def test_an_unknown_edition_names_the_variable(monkeypatch):
    monkeypatch.setenv("RLMPERF_EDITION", "teacher")
    with pytest.raises(ValueError, match="^RLMPERF_EDITION must be one of"):
        _load_extension().edition()


@pytest.fixture(scope="module")
def lab2_editions(tmp_path_factory):
    """Lab 2 (with its stored outputs, not executed) and a stub of its chapter, built strictly in
    both editions with the repo's extension: two builds of about five seconds each."""
    src = tmp_path_factory.mktemp("editions")
    (src / "notebooks").mkdir()
    (src / "book").mkdir()
    shutil.copy(REPO / "notebooks" / "ch02_lab.ipynb", src / "notebooks")
    links = "\n".join(f"- {{ref}}`ex-ch02-{k}`" for k in range(1, 5))
    (src / "book" / "ch02_ppo.md").write_text(f"# Chapter 2\n\n## Exercises\n\n{links}\n",
                                              encoding="utf-8")
    (src / "_toc.yml").write_text("format: jb-book\nroot: book/ch02_ppo\nchapters:\n"
                                  "  - file: notebooks/ch02_lab\n", encoding="utf-8")
    (src / "_config.yml").write_text(f"""
title: editions
only_build_toc_files: true
execute:
  execute_notebooks: "off"
parse:
  myst_enable_extensions: [dollarmath, amsmath, colon_fence, deflist]
sphinx:
  extra_extensions: [sphinx_exercise]
  local_extensions:
    student_edition: {REPO / "book" / "_ext"}
""", encoding="utf-8")
    built = {}
    for edition in ("full", "student"):
        out = tmp_path_factory.mktemp(edition)
        env = {**os.environ, "RLMPERF_EDITION": edition}
        proc = subprocess.run([str(JUPYTER_BOOK), "build", "-W", "-n", "--keep-going",
                               "--path-output", str(out), str(src)], capture_output=True,
                              text=True, timeout=300, check=False, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        built[edition] = out / "_build" / "html"
    return built


def test_full_edition_folds_executed_solutions(lab2_editions):
    page = _parse(lab2_editions["full"] / "notebooks" / "ch02_lab.html")
    assert len(page.solutions) == 4 and all(s["dropdown"] for s in page.solutions)
    first = page.solutions[0]["text"]
    assert "train_ppo(PPOConfig(seed=0, steps=10" in first        # the solution's code ...
    assert "✓ ch02.1: 4 matches" in first                         # ... and its stored output
    assert "✓ ch02.3:" in page.solutions[2]["text"]
    assert "✓ ch02.4c: 819 matches" in page.solutions[3]["text"]   # the pen-and-paper scan


def test_student_edition_has_exercises_without_solutions(lab2_editions):
    page = _parse(lab2_editions["student"] / "notebooks" / "ch02_lab.html")
    text = "".join(page.text)
    assert page.solutions == []
    for gone in ("✓ ch02", "Solution to", "single = train_ppo", "ppo32 =", "{solution"):
        assert gone not in text, gone
    for kept in ("Exercise 1", "Exercise 4", "Set ppo_epochs=1", "print(answers(\"ch02\"))",
                 "['ch02.1', 'ch02.2', 'ch02.3', 'ch02.4a', 'ch02.4b', 'ch02.4c']"):
        assert kept in text.replace("&quot;", '"'), kept
    chapter = "".join(_parse(lab2_editions["student"] / "book" / "ch02_ppo.html").text)
    assert "Exercise 1" in chapter and "Exercise 3" in chapter     # the links still resolve


def test_book_build_folds_every_labs_solutions(book_build):
    """The strict build of the whole book (tests/conftest.py): each lab's solutions are folded
    and hold the output of their check_answer calls."""
    proc, html = book_build
    assert proc.returncode == 0, proc.stderr[-3000:]
    for chapter in sorted(CHAPTERS):
        page = _parse(html / "notebooks" / f"{chapter}_lab.html")
        labels = re.findall(r"```\{exercise\}", _lab_sources(CHAPTERS[chapter][1])[0])
        assert len(page.solutions) == len(labels) and all(s["dropdown"] for s in page.solutions)
        ticks = "".join(s["text"] for s in page.solutions).count("✓ " + chapter)
        assert ticks == len(answers(chapter)), (chapter, ticks)
