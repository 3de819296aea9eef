"""Keys pressed quickly on a slider in headless Chromium (Debian's, never ``playwright install``):
each press is a rerun, and a press made while the last one's run ends reaches the server with
the link the browser showed before that run's write. Such a link is not applied over the press
(`crbc_viz.ui.view.sync_in`); before, the slider snapped back to an older value (measured with
two CPU-bound processes beside the server: 6 of 18 rounds of three presses ended short; 0 of 18
now). Three ArrowRight presses 150 ms apart on "… of which land" (Learn, lesson 5) must end at
4, in the link and on the slider, in every round."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
ROUNDS = 4

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-fast-presses.log") as url:
        yield url


def _lucky(pg) -> str | None:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlparse(pg.url).query)).get("rr_lucky")


@pytest.mark.parametrize("width", [800, 1280])
def test_quick_presses_all_count(server, browser, width):
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
