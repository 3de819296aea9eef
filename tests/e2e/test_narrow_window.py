"""The app at 800 px in Debian's headless Chromium (a real `streamlit run app.py`): the sidebar
starts collapsed (Streamlit's own "auto" keeps it open above 768 px), nothing is cut — lesson
4's K buttons, the Data page's links, Compare's tables — and at 1280 px the sidebar is open.
Screenshots go to test-output/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, wait_until

pytestmark = pytest.mark.browser

OUT = Path(__file__).resolve().parents[2] / "test-output"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

#: The sidebar's box: collapsed, Streamlit moves it out of the window (right edge ≤ 0).
SIDEBAR = """() => {
  const s = document.querySelector("[data-testid='stSidebar']");
  if (!s) { return null; }
  const r = s.getBoundingClientRect();
  return {left: r.left, right: r.right, width: r.width};
}"""

#: Every element matching the selector given: its text, its edges, and the elements in it whose
#: own text overflows their box (scrollWidth > clientWidth: an ellipsis or a cut).
BOXES = """(sel) => [...document.querySelectorAll(sel)].map((e) => {
  const r = e.getBoundingClientRect();
  const own = (x) => [...x.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  const cut = [e, ...e.querySelectorAll('*')].filter(
    (x) => own(x) && x.scrollWidth > x.clientWidth + 1);
  return {text: e.innerText.trim(), left: r.left, right: r.right, visible: r.width > 0,
          cut: cut.map((x) => [x.tagName, x.className, x.scrollWidth, x.clientWidth])};
})"""

#: Each table's grid: how far it scrolls sideways against what it shows.
GRIDS = """() => [...document.querySelectorAll("[data-testid='stDataFrame']")].map((d) => {
  const r = d.getBoundingClientRect(), s = d.querySelector('.dvn-scroller');
  return {left: r.left, right: r.right, scroll: s ? s.scrollWidth : 0, shown: s ? s.clientWidth : 0};
})"""


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-narrow-window.log") as url:
        yield url


def _open(browser, server, width, path):
    ctx = browser.new_context(viewport={"width": width, "height": 1400})
    pg = ctx.new_page()
    pg.goto(f"{server}{path}")
    pg.wait_for_selector("[data-testid='stSidebar']", state="attached", timeout=WAIT_MS)
    app_idle(pg)
    return ctx, pg


def _collapsed(pg):
    s = pg.evaluate(SIDEBAR)
    return s is not None and s["right"] <= 0 and s


def _in_view(boxes, width):
    return [b for b in boxes if b["visible"] and (b["left"] < 0 or b["right"] > width + 0.5 or b["cut"])]


def _show(boxes):
    return [(b["text"], b["cut"]) for b in boxes]


def test_learn_lesson4_buttons_whole_at_800(browser, server):
    ctx, pg = _open(browser, server, 800, "/learn?lesson=4")
    try:
        wait_until(pg, lambda: _collapsed(pg), "the sidebar collapsed at 800 px")
        pg.get_by_role("button", name="K ▶").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        buttons = pg.evaluate(BOXES, "[data-testid='stMain'] [data-testid='stButton'] button")
        texts = [b["text"] for b in buttons]
        assert "◀ K" in texts and "K ▶" in texts, texts
        assert not _in_view(buttons, 800), _show(buttons)
        play = pg.evaluate(BOXES, "[data-testid='stMain'] [data-testid='stCheckbox']")
        assert any(b["text"] == "Play" for b in play) and not _in_view(play, 800), _show(play)
        pg.screenshot(path=str(OUT / "narrow_learn4_800.png"))
    finally:
        ctx.close()


def test_data_links_whole_at_800(browser, server):
    ctx, pg = _open(browser, server, 800, "/")
    try:
        wait_until(pg, lambda: _collapsed(pg), "the sidebar collapsed at 800 px")
        pg.get_by_text("Compare estimators").first.wait_for(timeout=WAIT_MS)
        app_idle(pg)
        links = pg.evaluate(BOXES, "[data-testid='stMain'] [data-testid='stPageLink']")
        texts = [b["text"].split("\n")[-1] for b in links]  # after the icon's name
        assert "Read its trajectories (why rollouts failed)" in texts, texts
        assert "Open its graph" in texts and "Compare estimators" in texts, texts
        assert not _in_view(links, 800), _show(links)
        buttons = pg.evaluate(BOXES, "[data-testid='stMain'] [data-testid='stButton'] button")
        assert not _in_view(buttons, 800), _show(buttons)
        pg.screenshot(path=str(OUT / "narrow_data_800.png"))
    finally:
        ctx.close()


def test_compare_tables_whole_at_800(browser, server):
    ctx, pg = _open(browser, server, 800, "/compare")
    try:
        wait_until(pg, lambda: _collapsed(pg), "the sidebar collapsed at 800 px")
        pg.locator("[data-testid='stDataFrame'] .dvn-scroller").first.wait_for(timeout=WAIT_MS)
        app_idle(pg)
        grids = pg.evaluate(GRIDS)
        assert grids, "no table on Compare"
        for g in grids:
            assert 0 <= g["left"] and g["right"] <= 800, g
            assert g["scroll"] <= g["shown"] + 1, g
        pg.screenshot(path=str(OUT / "narrow_compare_800.png"))
    finally:
        ctx.close()


@pytest.mark.parametrize("path", ["/", "/learn?lesson=4"])
def test_sidebar_open_at_1280(browser, server, path):
    ctx, pg = _open(browser, server, 1280, path)
    try:
        pg.wait_for_selector("[data-testid='stSidebarContent']", timeout=WAIT_MS)
        app_idle(pg)
        # The narrow-window script has run (at this width it leaves the sidebar as it is).
        pg.wait_for_function("() => window.__crbcNarrowDone === true", timeout=WAIT_MS)
        s = pg.evaluate(SIDEBAR)
        assert s is not None and s["left"] >= 0 and s["width"] > 200, s
        name = "data" if path == "/" else "learn4"
        pg.screenshot(path=str(OUT / f"narrow_{name}_1280.png"))
    finally:
        ctx.close()
