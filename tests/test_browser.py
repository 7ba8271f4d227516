"""The built pages in a real browser: Debian's Chromium driven by Playwright (never a downloaded
browser), pages opened over file:// with no network.

Every page: no request fails, no error in the console, maths typesets (MathJax from the site),
every chart output is an SVG with marks, and the labs' saved widgets render their controls. A
screenshot of each page goes to ``_build/screenshots`` (gitignored), the CI artefact folder.
Skipped when no Chromium is installed (``.ci/run`` installs it; locally: ``apt-get install
chromium``).

Not asserted yet (issue 8): sliders driving charts with no kernel.
"""
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGES = ["book/intro", "book/ch01_rl_loop", "notebooks/ch01_lab", "book/ch02_ppo",
         "notebooks/ch02_lab", "book/ch03_grpo_family", "notebooks/ch03_lab",
         "book/ch04_anatomy", "notebooks/ch04_lab", "book/ch05_workdepth", "notebooks/ch05_lab",
         "book/ch06_profiles", "notebooks/ch06_lab"]
WITH_WIDGETS = {"notebooks/ch01_lab", "notebooks/ch03_lab", "notebooks/ch04_lab",
                "notebooks/ch05_lab"}

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
