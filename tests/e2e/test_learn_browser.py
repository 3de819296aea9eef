"""The Learn page in a real `streamlit run app.py` driven by Debian's headless Chromium
(Playwright's Python package, never `playwright install`): the deep link ``/learn?lesson=4``,
the lesson selector keeping the URL, and screenshots of lessons 4 and 5 in ``test-output/``."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, track_browser
from streamlit_server import CHROMIUM_ARGS as ARGS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"


if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-learn-server.log") as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=ARGS))
        try:
            # Projector width; tall enough that one screenshot holds the whole lesson (Streamlit
            # scrolls inside its own container, so full_page alone would not).
            ctx = br.new_context(viewport={"width": 1600, "height": 2000})
            yield ctx.new_page()
        finally:
            br.close()


def lesson_query(pg) -> list[str]:
    return urllib.parse.parse_qs(urllib.parse.urlparse(pg.url).query).get("lesson", [])


def test_learn_lessons_4_and_5(server, page):
    page.goto(f"{server}/learn?lesson=4")
    page.get_by_role("heading", name="4. Bellman backup").wait_for(timeout=WAIT_MS)
    frame = page.frame_locator("iframe").first
    frame.locator("canvas").first.wait_for(state="visible", timeout=WAIT_MS)
    frame.locator("body[data-crbc-ready='1']").wait_for(state="attached", timeout=WAIT_MS)
    frame.locator("#crbc-tools button").first.wait_for(state="visible", timeout=WAIT_MS)
    page.locator(".js-plotly-plot .scatterlayer").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    assert lesson_query(page) == ["4"]
    assert page.locator(".js-plotly-plot .ytitle").first.text_content().startswith("sup-norm gap")
    page.screenshot(path=str(OUT / "learn_lesson4.png"), full_page=True)

    page.get_by_text("5 · The rare-route trap", exact=True).click()
    page.get_by_role("heading", name="5. The rare-route trap").wait_for(timeout=WAIT_MS)
    page.locator(".js-plotly-plot .barlayer").first.wait_for(timeout=WAIT_MS)
    page.locator("[data-testid='stDataFrame']").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('lesson') === '5'", timeout=WAIT_MS
    )
    legend = page.locator(".js-plotly-plot .legendtext").all_text_contents()
    assert "jump the gap" in legend and "walk around" in legend
    page.screenshot(path=str(OUT / "learn_lesson5.png"), full_page=True)
