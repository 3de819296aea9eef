"""The Learn page in a real `streamlit run app.py` driven by Debian's headless Chromium
(Playwright's Python package, never `playwright install`): the deep link ``/learn?lesson=4``,
the lesson selector keeping the URL, screenshots of lessons 4 and 5 in ``test-output/``, and
quick key presses on a lesson's slider all counting."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, track_browser, wait_until
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


ROUNDS = 4


def _lucky(pg) -> str | None:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlparse(pg.url).query)).get("rr_lucky")


@pytest.mark.parametrize("width", [800, 1280])
def test_quick_presses_all_count(server, browser, width):
    """Keys pressed quickly on a slider in headless Chromium (Debian's, never ``playwright install``):
    each press is a rerun, and a press made while the last one's run ends reaches the server with
    the link the browser showed before that run's write. Such a link is not applied over the press
    (`crbc_viz.ui.view.sync_in`); before, the slider snapped back to an older value (measured with
    two CPU-bound processes beside the server: 6 of 18 rounds of three presses ended short; 0 of 18
    now). Three ArrowRight presses 150 ms apart on "… of which land" (Learn, lesson 5) must end at
    4, in the link and on the slider, in every round."""
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    try:
        for r in range(ROUNDS):
            pg = ctx.new_page()
            pg.goto(f"{server}/learn?lesson=5")
            slider = pg.locator("[data-testid='stSlider']").filter(has_text="of which land").first
            slider.wait_for(timeout=WAIT_MS)
            app_idle(pg, WAIT_MS)
            thumb = slider.locator("input[type='range']")
            assert thumb.input_value() == "1" and _lucky(pg) is None  # the lesson's default
            thumb.scroll_into_view_if_needed()
            thumb.focus()
            for _ in range(3):
                pg.keyboard.press("ArrowRight")
                pg.wait_for_timeout(150)  # a person pressing quickly, not waiting for the page
            wait_until(pg, lambda: _lucky(pg) == "4", f"round {r}: rr_lucky=4 in the link", WAIT_MS)
            wait_until(pg, lambda: thumb.input_value() == "4", f"round {r}: the slider at 4", WAIT_MS)
            pg.close()
    finally:
        ctx.close()
