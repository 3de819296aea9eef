"""The browser tests' waits (`streamlit_server.app_idle`, `rerun`) in a real `streamlit run
app.py` and Debian's headless Chromium: a page that looks idle because its rerun has not
started yet is not taken for the page after the rerun."""

from __future__ import annotations

import os

import pytest

from streamlit_server import CHROMIUM, IDLE_JS, WAIT_MS, app_idle, rerun, streamlit_server

pytestmark = pytest.mark.browser

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

#: Click lesson 4's "K ▶" half a second from now (an action whose rerun starts late, as a
#: click's does on a busy machine).
LATE_CLICK = """() => setTimeout(() => {
  const b = Array.from(document.querySelectorAll('.st-key-learn_k_next button'))[0];
  b.click();
}, 500)"""
K_SHOWN = "() => document.querySelector('.st-key-learn_k [data-testid=\"stSliderThumbValue\"]').textContent"


@pytest.fixture(scope="module")
def server():
    with streamlit_server() as url:
        yield url


def test_rerun_waits_for_the_run_the_action_started(server, browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = ctx.new_page()
        pg.goto(f"{server}/learn?lesson=4&lk=0")
        app_idle(pg)
        assert pg.evaluate(K_SHOWN) == "0"
        runs = pg._crbc_runs.finished
        assert runs >= 1  # the page's first run was seen on its websocket
        with rerun(pg):
            pg.evaluate(LATE_CLICK)
            # Streamlit's own ready state says idle: the rerun has not started.
            assert pg.evaluate(IDLE_JS)
        assert pg._crbc_runs.finished > runs
        assert pg.evaluate(K_SHOWN) == "1"  # the page after the click's run, drawn
        # app_idle after a plain navigation waits for the new page's run too.
        pg.goto(f"{server}/learn?lesson=4&lk=3")
        app_idle(pg, timeout_ms=WAIT_MS)
        assert pg.evaluate(K_SHOWN) == "3"
    finally:
        ctx.close()
