"""Compare's "steps where they disagree most" table in Debian's headless Chromium (a real
`streamlit run app.py`): at 800 and 1440 px its B column is in view without scrolling
sideways — the table's grid scrolls no further than it shows, and it ends inside the window."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server

pytestmark = pytest.mark.browser

OUT = Path(__file__).resolve().parents[2] / "test-output"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

#: The disagreement table (the one whose headers name estimator B): its box, its grid's
#: scrollable and visible widths, and its column headers.
TABLE = """() => {
  for (const d of document.querySelectorAll("[data-testid='stDataFrame']")) {
    const heads = [...d.querySelectorAll('th')].map((e) => e.textContent.trim());
    if (!heads.some((h) => h.startsWith('B: '))) continue;
    const r = d.getBoundingClientRect(), s = d.querySelector('.dvn-scroller');
    return {left: r.left, right: r.right, scroll: s.scrollWidth, shown: s.clientWidth, heads: heads};
  }
  return null;
}"""


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-compare-width.log") as url:
        yield url


@pytest.mark.parametrize("width", [800, 1440])
def test_estimator_b_column_in_view(browser, server, width):
    ctx = browser.new_context(viewport={"width": width, "height": 1600})
    pg = ctx.new_page()
    try:
        pg.goto(f"{server}/compare")
        pg.locator(".js-plotly-plot").first.wait_for(timeout=WAIT_MS)
        pg.locator("[data-testid='stDataFrame']").first.wait_for(timeout=WAIT_MS)
        app_idle(pg)
        # The table's grid draws after the first dataframe appears: wait for its headers.
        pg.wait_for_function(f"({TABLE})() !== null", timeout=WAIT_MS)
        t = pg.evaluate(TABLE)
        assert t is not None, "no table with a 'B: …' column"
        assert t["heads"][:4] == ["t", "A: crbc", "B: shortest_path", "|A − B|"], t["heads"]
        assert 0 <= t["left"] and t["right"] <= width, t
        assert t["scroll"] <= t["shown"] + 1, t  # every column, B among them, shown without scrolling
        pg.screenshot(path=str(OUT / f"compare_table_{width}.png"))
    finally:
        ctx.close()
