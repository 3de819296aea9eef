"""One real run: `streamlit run app.py` driven by Debian's headless Chromium (Playwright's
Python package, never `playwright install`). Screenshots go to ``test-output/``."""
from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server
from streamlit_server import CHROMIUM_ARGS as ARGS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "test-output"
TOY = "sample_rollouts/toy/toy_group.jsonl"

PAYLOAD_IMG = "<img src=x onerror=window.__xss=1>"
PAYLOAD_SCRIPT = "</script><script>window.__xss=2</script>"

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's "
                f"chromium", allow_module_level=True)


def write_xss_log(path: Path) -> Path:
    rows = []
    for traj, ok, acts in (("r0", True, [PAYLOAD_IMG, "go"]), ("r1", False, [PAYLOAD_SCRIPT, "stop"])):
        for i, act in enumerate(acts):
            rows.append({"run_id": "xss", "train_step": 0, "group_id": PAYLOAD_IMG, "traj_id": traj,
                         "step_idx": i, "reward": float(ok and i == 1), "done": i == 1, "success": ok,
                         "action": act, "anchor_obs": PAYLOAD_SCRIPT if i == 0 else PAYLOAD_IMG + traj})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("roots")
    xss = write_xss_log(data / "xss.jsonl")
    OUT.mkdir(exist_ok=True)
    with streamlit_server(env={"CRBC_VIZ_DATA_ROOTS": str(data)},
                          log_path=OUT / "streamlit-server.log") as url:
        yield url, xss


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield br
        finally:
            br.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1900})
    pg = ctx.new_page()
    try:
        yield pg
    finally:
        ctx.close()


def graph_ready(pg):
    frame = pg.frame_locator("iframe").first
    frame.locator("canvas").first.wait_for(state="visible", timeout=WAIT_MS)
    frame.locator("body[data-crbc-ready='1']").wait_for(state="attached", timeout=WAIT_MS)
    return frame


def link(url: str, page: str = "", **q) -> str:
    return f"{url}/{page}" + ("?" + urllib.parse.urlencode(q) if q else "")


def test_pages_render_and_deep_link(server, page):
    url, _ = server
    page.goto(link(url))
    page.get_by_text("Rollout data").wait_for(timeout=WAIT_MS)
    page.locator("[data-testid='stMetric']").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "data.png"))

    page.goto(link(url, "graph"))
    graph_ready(page)
    app_idle(page)
    page.screenshot(path=str(OUT / "graph.png"))

    page.goto(link(url, "compare"))
    page.locator(".js-plotly-plot").nth(2).wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "compare.png"))

    page.goto(link(url, "trajectories"))
    page.get_by_text("chips, top to bottom").wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "trajectories.png"))

    page.goto(link(url, "estimators"))
    page.get_by_text("registered estimators").wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "estimators.png"))

    # A shared link selects its file, group and estimator.
    page.goto(link(url, "graph", file=TOY, group="toy/0/toy", estimator="visit_local"))
    frame = graph_ready(page)
    app_idle(page)
    caption = page.get_by_text("Group toy/0/toy").first
    caption.wait_for(timeout=WAIT_MS)
    assert "visit_local" in caption.inner_text()
    sidebar = page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']")
    shown = sidebar.first.evaluate("e => e.innerText + ' ' + Array.from(e.querySelectorAll("
                                   "'input')).map(i => i.value + ' ' + (i.getAttribute("
                                   "'aria-label') || '')).join(' ')")
    assert "toy/0/toy" in shown, shown
    q = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert q["group"] == ["toy/0/toy"] and q["estimator"] == ["visit_local"]
    assert frame.locator("canvas").count() >= 1
    page.screenshot(path=str(OUT / "graph_deeplink_toy.png"))


def _no_xss(pg) -> None:
    for f in pg.frames:
        assert f.evaluate("() => typeof window.__xss") == "undefined", f.url


def test_injected_markup_stays_inert(server, page):
    url, xss = server
    q = {"file": str(xss), "group": f"xss/0/{PAYLOAD_IMG}", "estimator": "crbc"}
    page.goto(link(url, "graph", **q))
    frame = graph_ready(page)
    app_idle(page)
    # Show a node's tooltip: the payload must come out as text, not as an element.
    box = frame.locator("canvas").first.bounding_box()
    inner = page.frames[-1]
    for f in page.frames:
        if f.evaluate("() => typeof network !== 'undefined' && !!network"):
            inner = f
    xy = inner.evaluate("() => { const p = network.getPositions(); const ks = Object.keys(p)"
                        ".filter(k => !isNaN(Number(k))); return network.canvasToDOM(p[ks[0]]); }")
    page.mouse.move(box["x"] + xy["x"], box["y"] + xy["y"])
    tip = frame.locator("div.vis-tooltip")
    tip.wait_for(state="visible", timeout=WAIT_MS)
    assert "onerror" in tip.inner_text() or "</script>" in tip.inner_text()
    assert frame.locator("div.vis-tooltip img").count() == 0
    page.screenshot(path=str(OUT / "xss_graph.png"))
    _no_xss(page)

    page.goto(link(url, "trajectories", **q))
    page.get_by_text("chips, top to bottom").wait_for(timeout=WAIT_MS)
    app_idle(page)
    _no_xss(page)
    page.goto(link(url, "", **q))
    page.locator("[data-testid='stMetric']").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    _no_xss(page)
    assert page.evaluate("() => typeof window.__xss") == "undefined"
