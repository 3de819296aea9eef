"""One real run: `streamlit run app.py` driven by Debian's headless Chromium (Playwright's
Python package, never `playwright install`). Screenshots go to ``test-output/``."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, rerun, streamlit_server, wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
TOY = "sample_rollouts/toy/toy_group.jsonl"

PAYLOAD_IMG = "<img src=x onerror=window.__xss=1>"
PAYLOAD_SCRIPT = "</script><script>window.__xss=2</script>"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


def write_xss_log(path: Path) -> Path:
    rows = []
    for traj, ok, acts in (("r0", True, [PAYLOAD_IMG, "go"]), ("r1", False, [PAYLOAD_SCRIPT, "stop"])):
        for i, act in enumerate(acts):
            rows.append(
                {
                    "run_id": "xss",
                    "train_step": 0,
                    "group_id": PAYLOAD_IMG,
                    "traj_id": traj,
                    "step_idx": i,
                    "reward": float(ok and i == 1),
                    "done": i == 1,
                    "success": ok,
                    "action": act,
                    "anchor_obs": PAYLOAD_SCRIPT if i == 0 else PAYLOAD_IMG + traj,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("roots")
    xss = write_xss_log(data / "xss.jsonl")
    OUT.mkdir(exist_ok=True)
    with streamlit_server(
        env={"CRBC_VIZ_DATA_ROOTS": str(data)}, log_path=OUT / "streamlit-server.log"
    ) as url:
        yield url, xss


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

    page.goto(link(url, "compare", all="True", depth="True", rollout="r1"))
    page.locator(".js-plotly-plot").nth(4).wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "compare.png"), full_page=True)

    page.goto(link(url, "trajectories"))
    page.get_by_text("chips, top to bottom").wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "trajectories.png"))

    page.goto(link(url, "estimators"))
    page.get_by_text("registered estimators").wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.screenshot(path=str(OUT / "estimators.png"))

    from crbc_viz.ui.pages import page_facts

    for name in [p.get("url_path") or p["name"] for p in page_facts() if p.get("own_data")]:
        page.goto(link(url, name))
        page.locator("h1").first.wait_for(timeout=WAIT_MS)
        app_idle(page)
        page.screenshot(path=str(OUT / f"{name}.png"))

    # A shared link selects its file, group and estimator.
    page.goto(link(url, "graph", file=TOY, group="toy/0/toy", estimator="visit_local"))
    frame = graph_ready(page)
    app_idle(page)
    caption = page.get_by_text("Group toy/0/toy").first
    caption.wait_for(timeout=WAIT_MS)
    assert "visit_local" in caption.inner_text()
    sidebar = page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']")
    shown = sidebar.first.evaluate(
        "e => e.innerText + ' ' + Array.from(e.querySelectorAll("
        "'input')).map(i => i.value + ' ' + (i.getAttribute("
        "'aria-label') || '')).join(' ')"
    )
    assert "toy/0/toy" in shown, shown
    q = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert q.get("group", ["toy/0/toy"]) == ["toy/0/toy"] and q["estimator"] == ["visit_local"]
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
    xy = inner.evaluate(
        "() => { const p = network.getPositions(); const ks = Object.keys(p)"
        ".filter(k => !isNaN(Number(k))); return network.canvasToDOM(p[ks[0]]); }"
    )
    page.mouse.move(box["x"] + xy["x"], box["y"] + xy["y"])
    tip = frame.locator("div.vis-tooltip")
    tip.wait_for(state="visible", timeout=WAIT_MS)
    assert "onerror" in tip.inner_text() or "</script>" in tip.inner_text()
    assert frame.locator("div.vis-tooltip img").count() == 0
    # The tooltip is the page's HTML as elements (converted when first shown), the logged
    # text inside it as text: the anchor's <pre> and the bold heading, no "<b>" shown.
    assert frame.locator("div.vis-tooltip pre.crbc-anchor").count() == 1
    assert frame.locator("div.vis-tooltip b").first.inner_text().startswith("anchor s")
    assert "<b>" not in tip.inner_text() and "<pre" not in tip.inner_text()
    # An edge's tooltip alike: the point halfway along its drawn curve.
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] - 2)
    tip.wait_for(state="hidden", timeout=WAIT_MS)
    xy = inner.evaluate(
        "() => { const e = Object.values(network.body.edges).find(e => e.connected && e.from !== e.to"
        " && typeof e.title === 'string'); return network.canvasToDOM(e.edgeType.getPoint(0.5)); }"
    )
    page.mouse.move(box["x"] + xy["x"], box["y"] + xy["y"])
    tip.wait_for(state="visible", timeout=WAIT_MS)
    assert frame.locator("div.vis-tooltip b").count() >= 1
    assert "<b>" not in tip.inner_text()
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


def _grid_row_click(pg, key: str, row: int) -> None:
    """Select row ``row`` of the st.dataframe with ``key`` (its row-marker column)."""
    grid = pg.locator(f".st-key-{key} [data-testid='stDataFrame']").first
    grid.wait_for(timeout=WAIT_MS)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    pg.mouse.click(box["x"] + 12, box["y"] + 35 * (row + 1) + 17)


def _query(pg) -> dict:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(pg.url).query).items()}


def _wait_query(pg, **want) -> None:
    pg.wait_for_function(
        "(w) => { const q = new URLSearchParams(location.search); "
        "return Object.entries(w).every(([k, v]) => q.get(k) === v); }",
        arg={k: str(v) for k, v in want.items()},
        timeout=WAIT_MS,
    )
    app_idle(pg)


def test_failed_rollout_to_blamed_step_to_graph_to_compare_and_back(server, browser):
    """The issue's walk, each step by clicking: a failed rollout → its worst step → that anchor
    in the graph → Compare at that step; the copied link restores the view in a fresh browser
    context; Back lands on the previous view."""
    url, _ = server
    ctx = browser.new_context(viewport={"width": 1500, "height": 1900})
    pg = ctx.new_page()
    try:
        pg.goto(link(url, "trajectories", file=TOY))
        pg.get_by_text("Why did this fail").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        # toy group: t1 success, t2 failure, t3 failure, t4 success → first failed row is t2
        _grid_row_click(pg, "failed_table", 0)
        _wait_query(pg, rollout="t2")
        pg.get_by_text("Most negative").wait_for(timeout=WAIT_MS)
        pg.screenshot(path=str(OUT / "walk_1_failed_rollout.png"))
        _grid_row_click(pg, "worst_table", 0)
        pg.wait_for_function("() => new URLSearchParams(location.search).has('step')", timeout=WAIT_MS)
        app_idle(pg)
        q = _query(pg)
        step = q["step"]
        pg.get_by_text(f"Step t{step} of rollout t2").wait_for(timeout=WAIT_MS)
        pg.screenshot(path=str(OUT / "walk_2_worst_step.png"))

        pg.get_by_text("Show this anchor in the graph").click()
        frame = graph_ready(pg)
        app_idle(pg)
        assert urllib.parse.urlparse(pg.url).path.endswith("/graph")
        assert _query(pg)["step"] == step and _query(pg)["rollout"] == "t2"
        heading = pg.locator("h3", has_text="Anchor s").first
        heading.wait_for(timeout=WAIT_MS)
        anchor = heading.inner_text().split()[-1]
        # Clicking a node in the graph chooses it: click the start anchor s0.
        inner = next(f for f in pg.frames if f.evaluate("() => typeof network !== 'undefined'"))
        box = frame.locator("canvas").first.bounding_box()
        xy = inner.evaluate("() => network.canvasToDOM(network.getPositions(['0'])['0'])")
        pg.mouse.click(box["x"] + xy["x"], box["y"] + xy["y"])
        _wait_query(pg, anchor="s0")
        pg.locator("h3", has_text="Anchor s0").wait_for(timeout=WAIT_MS)
        graph_ready(pg)
        pg.screenshot(path=str(OUT / "walk_3_graph_anchor.png"))
        graph_url = pg.url

        pg.get_by_text("Compare estimators at this step").click()
        pg.get_by_text("Chosen: step").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        assert urllib.parse.urlparse(pg.url).path.endswith("/compare")
        chosen = pg.get_by_text("Chosen: step").first.inner_text()
        assert "t2" in chosen, chosen
        pg.screenshot(path=str(OUT / "walk_4_compare_step.png"))

        # Copy link: the button fills (and copies) the link to this view.
        pg.get_by_role("button", name="Copy link").click()
        box = pg.locator("input.crbc-copy-link")
        box.wait_for(state="visible", timeout=WAIT_MS)  # shown once its value is set
        shared = box.input_value()
        assert shared == pg.url, (shared, pg.url)

        fresh = browser.new_context(viewport={"width": 1500, "height": 1900})
        try:
            p2 = fresh.new_page()
            p2.goto(shared)
            p2.get_by_text("Chosen: step").wait_for(timeout=WAIT_MS)
            app_idle(p2)
            assert p2.get_by_text("Chosen: step").first.inner_text() == chosen
            assert _query(p2) == _query(pg)
            p2.screenshot(path=str(OUT / "walk_5_link_in_fresh_browser.png"))
        finally:
            fresh.close()

        pg.go_back()
        pg.locator("h3", has_text="Anchor s0").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        assert pg.url == graph_url, (pg.url, graph_url)
        pg.screenshot(path=str(OUT / "walk_6_back_to_graph.png"))
        del anchor
    finally:
        ctx.close()


def _network_frame(pg):
    """The frame whose graph has drawn (``data-crbc-ready``), and not a drawing marked
    ``window.__crbcOld`` (a redraw loads a new document, in the same frame or a new one)."""

    def drawn():
        for f in pg.frames:
            try:
                if f.evaluate(
                    "() => typeof network !== 'undefined' && !!network && "
                    "document.body.getAttribute('data-crbc-ready') === '1' && !window.__crbcOld"
                ):
                    return f
            except Exception:  # a frame being replaced
                pass
        return None

    return wait_until(pg, drawn, "a drawn graph frame")


def test_graph_zoom_survives_a_redraw(server, page):
    url, _ = server
    page.goto(link(url, "graph", file=TOY))
    graph_ready(page)
    app_idle(page)
    inner = _network_frame(page)
    inner.evaluate("() => { network.moveTo({scale: 2.5, animation: false}); network.emit('zoom', {}); }")
    # The page has kept the zoom (the graph tells its parent on every zoom).
    page.wait_for_function(
        "() => Object.values(window.__crbcViews || {}).some(v => Math.abs(v.scale - 2.5) < 1e-6)",
        timeout=WAIT_MS,
    )
    inner.evaluate("() => { window.__crbcOld = true; }")
    # Another control redraws the graph (a new iframe): the zoom is restored there.
    with rerun(page):
        page.locator(".st-key-graph_labels").click()
        page.get_by_role("option", name="off").click()
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('labels') === 'off'", timeout=WAIT_MS
    )
    inner = _network_frame(page)
    # The restore comes in a message from the page after the new drawing says hello.
    try:
        inner.wait_for_function("() => Math.abs(network.getScale() - 2.5) < 1e-6", timeout=WAIT_MS)
    except Exception:
        pass  # asserted below, with the scale seen
    assert abs(inner.evaluate("() => network.getScale()") - 2.5) < 1e-6


def test_cell_click_and_arrow_keys_step_through_a_rollout(server, page):
    url, _ = server
    page.goto(link(url, "trajectories", file=TOY))
    page.get_by_text("chips, top to bottom").wait_for(timeout=WAIT_MS)
    app_idle(page)
    page.locator("[data-crbc-step='3:1']").click()  # rollout t4 (4th row), step t1
    _wait_query(page, rollout="t4", step="1")
    page.get_by_text("Step t1 of rollout t4").wait_for(timeout=WAIT_MS)
    page.locator("h1").first.click()  # focus on the page, not a widget
    page.keyboard.press("ArrowRight")
    _wait_query(page, rollout="t4", step="2")
    page.keyboard.press("ArrowRight")
    _wait_query(page, step="3")
    page.keyboard.press("ArrowLeft")
    _wait_query(page, step="2")
    page.get_by_text("Step t2 of rollout t4").wait_for(timeout=WAIT_MS)
    page.screenshot(path=str(OUT / "trajectories_keys.png"))


def test_bundled_training_runs_click_and_drill_down(server, page):
    """Across training opens on the bundled store with no path typed; a click on a trend point
    chooses that run and train_step; "Open in the Graph page" draws that group's graph."""
    url, _ = server
    page.goto(link(url, "training"))
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for(timeout=WAIT_MS)
    app_idle(page)
    chart.scroll_into_view_if_needed()
    page.get_by_text("5 run(s) × ").first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=str(OUT / "training_bundled.png"), full_page=True)
    # Another run's point at train_step 5 in the first panel, clicked where plotly drew it.
    box = page.evaluate("""() => {
        const gd = document.querySelector('.js-plotly-plot');
        const first = gd._fullData[0].meta.run_id;
        const d = gd._fullData.find(t => t.yaxis === 'y' && t.meta.run_id !== first);
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const k = Array.from(d.x).indexOf(5);
        const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return {run: d.meta.run_id, x: r.left + xa.l2p(5), y: r.top + ya.l2p(d.y[k])};
    }""")
    page.mouse.click(box["x"], box["y"])
    page.wait_for_function("() => new URL(location.href).searchParams.get('tstep') === '5'", timeout=WAIT_MS)
    app_idle(page)
    q = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert q.get("tstep") == ["5"] and q.get("run") == [box["run"]], (q, box)
    page.get_by_text("Groups of train_step 5").wait_for(timeout=WAIT_MS)
    page.get_by_role("link", name="Open in the Graph page").click()
    graph_ready(page)
    app_idle(page)
    ref = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query).get("file", [""])[0]
    assert "/graph" in page.url and ref.startswith("store:") and f"::{box['run']}/5/" in ref, (
        page.url
    )  # the group is read from the store: the link works on any server holding it
    page.get_by_text(f"{box['run']}/5/").first.wait_for(timeout=WAIT_MS)  # the group's label
    page.screenshot(path=str(OUT / "training_drill_graph.png"))
