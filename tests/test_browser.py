"""The built pages in a real browser: Debian's Chromium driven by Playwright (never a downloaded
browser), pages opened over file:// with no network.

Every page: no request fails, no error in the console, maths typesets (MathJax from the site),
every chart output is an SVG with marks, and the labs' saved widgets render their controls. A
screenshot of each page goes to ``_build/screenshots`` (gitignored), the CI artefact folder.
Skipped when no Chromium is installed (``.ci/run`` installs it; locally: ``apt-get install
chromium``).

The pages are those of ``_toc.yml``; a lab is checked for widgets when its saved state holds
some, and for a no-kernel calculator when its outputs hold one, so new chapters are covered as
they land.
"""
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _toc_pages() -> list[str]:
    """Every page of _toc.yml, in order: the root, then each part's chapters."""
    import yaml
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def _has_saved_widgets(name: str) -> bool:
    """A lab whose stored outputs include ipywidgets (their state is saved with the notebook)."""
    import nbformat
    path = REPO / f"{name}.ipynb"
    return path.exists() and "application/vnd.jupyter.widget-state+json" in \
        nbformat.read(path, as_version=4).metadata.get("widgets", {})


def _has_static_calculator(name: str) -> bool:
    """A lab with a no-kernel calculator (views.static_chart's output) among its outputs."""
    path = REPO / f"{name}.ipynb"
    return path.exists() and "rlmperf-static-chart" in path.read_text()


def _glued_figures(name: str) -> list[str]:
    """The ``:name:`` of every lab figure (``{glue:figure}`` with ``:doc:``) on a prose page."""
    import re
    path = REPO / f"{name}.md"
    if not path.exists():
        return []
    blocks = re.findall(r"^```+\{glue:figure\}[^\n]*\n((?::[a-z-]+:.*\n)*)", path.read_text(), re.M)
    return [m.group(1).strip() for b in blocks if (m := re.search(r"^:name:(.*)$", b, re.M))]


PAGES = _toc_pages()
WITH_FIGURES = [(name, fig) for name in PAGES for fig in _glued_figures(name)]
WITH_WIDGETS = {name for name in PAGES if _has_saved_widgets(name)}
WITH_STATIC_CALCULATORS = [name for name in PAGES if _has_static_calculator(name)]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(book_build, browser, name):
    proc, html = book_build
    assert proc.returncode == 0
    page = browser.new_page()
    failed, errors = [], []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((html / f"{name}.html").as_uri(), wait_until="load")
    if page.locator("span.math, div.math").count():
        page.wait_for_function("document.querySelectorAll('mjx-container').length > 0",
                               timeout=20_000)
    charts = page.locator(".cell_output svg.marks, .cell_output svg")
    for i in range(charts.count()):
        assert charts.nth(i).locator("path, rect, line, text, circle").count() > 0, (name, i)
    # a bar chart whose bars all have zero width draws nothing (log axes once did that)
    empty = page.evaluate("""() => Array.from(document.querySelectorAll('svg')).filter(svg => {
        const bars = svg.querySelectorAll('g.mark-rect path');
        return bars.length > 0 && !Array.from(bars).some(b => b.getBBox().width > 0.5);
    }).length""")
    assert empty == 0, (name, f"{empty} bar chart(s) with no visible bar")
    if name in WITH_WIDGETS:
        page.wait_for_selector(".jupyter-widgets .widget-slider, .widget-dropdown",
                               timeout=20_000)
    shots = REPO / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / f"{name.replace('/', '__')}.png"), full_page=True)
    page.wait_for_timeout(500)                    # late errors (widgets render on load)
    page.close()
    assert failed == [], failed
    assert errors == [], errors


def test_static_calculator_runs_without_a_kernel_and_matches_the_library(book_build, browser):
    """Chapter 4's no-kernel calculator: changing its controls changes the chart, and at sample
    settings the step time it shows equals estimate_rl_step's (to the 4 significant digits the
    page stores per phase)."""
    import re

    from rlmperf_lite.cost import estimate_rl_step
    _, html = book_build
    page = browser.new_page()
    page.goto((html / "notebooks" / "ch04_lab.html").as_uri(), wait_until="load")
    page.wait_for_function("window.rlmperfViews && Object.keys(window.rlmperfViews).length",
                           timeout=20_000)
    chart = page.locator(".rlmperf-static-chart")
    names = [n.strip() for n in chart.locator(".vega-bind-name").all_inner_texts()]
    setting = {"actor": "qwen2.5-7b", "hardware": "h100-sxm", "algo": "grpo", "gpus": 64,
               "response_len": 4096, "group_size": 16}
    shown = []
    for change in ({}, {"hardware": "h20"}, {"actor": "llama-3.1-8b", "algo": "ppo", "gpus": 32,
                                              "response_len": 16384, "group_size": 4}):
        setting.update(change)
        for key, value in change.items():
            chart.locator(".vega-bind select").nth(names.index(key)).select_option(str(value))
        page.wait_for_timeout(300)
        text = chart.locator("svg text").filter(has_text="step ").first.text_content()
        step = float(re.search(r"step ([0-9.]+) s", text).group(1))
        args = {**setting, "prompts": 32, "prompt_len": 512, "kl_coef": 0.001}
        est = estimate_rl_step(args.pop("algo"), **args)
        assert step == pytest.approx(est.time_s, rel=2e-3, abs=0.006), (setting, text)
        shown.append(text)
    page.close()
    assert len(set(shown)) == 3                       # each change redrew the chart


@pytest.mark.parametrize("name", WITH_STATIC_CALCULATORS)
def test_every_no_kernel_calculator_redraws_when_a_control_moves(book_build, browser, name):
    _, html = book_build
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((html / f"{name}.html").as_uri(), wait_until="load")
    page.wait_for_function("window.rlmperfViews && Object.keys(window.rlmperfViews).length",
                           timeout=20_000)
    chart = page.locator(".rlmperf-static-chart").first
    before = chart.locator("svg").first.inner_html()
    select = chart.locator(".vega-bind select").first
    options = select.locator("option").all_inner_texts()
    current = select.input_value()
    select.select_option(next(o for o in options if o != current))
    page.wait_for_timeout(300)
    assert chart.locator("svg").first.inner_html() != before, name
    page.close()
    assert errors == []


@pytest.mark.parametrize("name,figure", WITH_FIGURES)
def test_every_glued_figure_draws_on_its_prose_page(book_build, browser, name, figure):
    """A lab's chart glued onto a prose page (book/_ext/glue_figure.py) is there as an inline SVG
    with marks, laid out at a visible size, inside a numbered figure with its caption."""
    _, html = book_build
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((html / f"{name}.html").as_uri(), wait_until="load")
    fig = page.locator(f"figure#{figure}")
    assert fig.count() == 1, (name, figure)
    svg = fig.locator("svg").first
    assert svg.locator("path, rect, line, circle").count() > 5, (name, figure)
    box = svg.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 100, (name, figure, box)
    caption = fig.locator("figcaption").inner_text()
    assert "Fig" in caption and len(caption) > 40, (name, figure, caption)
    page.close()
    assert errors == [], errors
