"""Compare in Debian's headless Chromium (a real `streamlit run app.py`): at 800 and 1440 px
the "steps where they disagree most" table's B column is in view without scrolling sideways —
the table's grid scrolls no further than it shows, and it ends inside the window; and the
charts' module is loaded with the first page, so that opening Compare does not load it."""

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


#: The resources this page fetched whose name is Streamlit's plotly chunk.
CHUNKS = """() => performance.getEntriesByType('resource').map((e) => e.name)
  .filter((n) => n.includes('/PlotlyChart.'))"""


def test_charts_module_is_loaded_with_the_first_page(browser, server):
    """The Data page (no chart on it) loads Streamlit's plotly chunk once it is drawn; Compare,
    opened from the sidebar in the same page, draws its scatter from that module: nothing
    fetches the chunk again (a second URL would be a second module, evaluated anew)."""
    from crbc_viz.ui.links import plotly_chunk

    rel = plotly_chunk()
    assert rel and rel.startswith("./PlotlyChart."), rel
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    # Streamlit's page loads ~300 scripts: keep every resource entry (250 by default).
    ctx.add_init_script("performance.setResourceTimingBufferSize(5000)")
    pg = ctx.new_page()
    try:
        pg.goto(server)
        app_idle(pg)
        assert pg.locator(".js-plotly-plot").count() == 0, (
            "the Data page draws a chart: not a test of the prefetch"
        )
        pg.wait_for_function("() => window.__crbcCharts !== undefined", timeout=WAIT_MS)
        assert pg.evaluate("() => window.__crbcCharts") == "loaded"
        first = pg.evaluate(CHUNKS)
        assert len(first) == 1 and first[0].endswith(rel[1:]), first
        pg.locator(
            "[data-testid='stSidebar'] [data-testid='stPageLink-NavLink']", has_text="Compare"
        ).first.click()
        pg.wait_for_function(
            "() => document.querySelector('.js-plotly-plot .main-svg') !== null", timeout=WAIT_MS
        )
        app_idle(pg)
        assert pg.evaluate(CHUNKS) == first
    finally:
        ctx.close()
