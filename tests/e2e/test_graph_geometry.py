"""The anchor graph as a person sees it, measured in Debian's headless Chromium (Playwright's
Python package, never `playwright install`) from the vis-network object itself: positions via
``canvasToDOM``, label sizes as font size × ``getScale()``.

Default view at 1440×900 for groups of 34 (Sokoban task-04), 104 (TextWorld task-09), ~300 and
~2,000 anchors (random MDPs): SUCCESS and FAILURE drawn and labelled at ≥ 10 px; the drawn
nodes span ≥ 60 % of the canvas width and ≥ 30 % of its height; the median distance to the
nearest drawn neighbour ≥ 24 px; every drawn label ≥ 10 px, a label hidden where it would
cover another counted in the page's note (≥ 60 % of nodes keep theirs). The app's Graph page at
800, 1280 and 1440 px (overlaps, spans, projector sizes): ``test_graph_canvas.py``. In
projector mode at 1280 px (the real app) node and edge labels, the legend and the buttons are
≥ 16 px. Then: the legend
and the Fit/PNG/SVG buttons apart at 800 and 1440 px, self-loop labels apart, a hovered
node's edges keeping their credit colours, and in the real app a "+n anchors" cluster that a
click opens. Screenshots go to ``test-output/``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, draw_anyway, streamlit_server

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
#: The Graph page's canvas height (app_pages/graph.py HEIGHT).
HEIGHT = 620

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

#: name -> (how to build the group, anchors it has)
GROUPS = {
    "sokoban-34": 34,
    "textworld-104": 104,
    "synthetic-280": 280,
    "synthetic-1939": 1939,
}


def _group(name: str):
    from crbc_viz import build_graph, load_rollouts
    from crbc_viz.synthetic import random_mdp_batch

    if name == "sokoban-34":
        return build_graph(load_rollouts(REPO / "sample_rollouts/sokoban/sokoban.jsonl").select_groups([4]))
    if name == "textworld-104":
        path = REPO / "sample_rollouts/textworld/textworld_cooking.jsonl.gz"
        return build_graph(load_rollouts(path).select_groups([9]))
    if name == "synthetic-280":
        return build_graph(random_mdp_batch(num_groups=1, rollouts=24, max_steps=45, num_states=500, seed=2))
    return build_graph(random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1))


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The default Graph-page drawing (crbc colours) of each group, as an HTML file."""
    from crbc_viz import score
    from crbc_viz.views.graph_view import graph_html

    out = tmp_path_factory.mktemp("graphs")
    files = {}
    for name, size in GROUPS.items():
        g = _group(name)
        assert g.num_nodes == size, (name, g.num_nodes)
        files[name] = out / f"{name}.html"
        files[name].write_text(graph_html(g, score(g, "crbc", backend="numpy"), height_px=HEIGHT))
    g = _group("sokoban-34")
    files["sokoban-labels"] = out / "sokoban-labels.html"
    files["sokoban-labels"].write_text(graph_html(g, None, height_px=HEIGHT, show_action_labels=True))
    return files


def _open(browser, path: Path, width: int = 1440):
    pg = browser.new_page(viewport={"width": width, "height": 900})
    pg.goto(path.as_uri())
    pg.wait_for_selector("body[data-crbc-ready='1']", state="attached", timeout=WAIT_MS)
    return pg


#: Every drawn node: its position on the canvas (DOM px) and its label's size on screen.
MEASURE = """() => {
  const c = document.querySelector('#mynetwork canvas');
  const r = c.getBoundingClientRect(), s = network.getScale(), out = [];
  for (const id of network.body.nodeIndices) {
    const n = network.body.nodes[id], p = network.canvasToDOM({x: n.x, y: n.y});
    out.push({id: String(id), x: p.x, y: p.y, label: String(n.options.label || ''),
              px: n.options.font.size * s});
  }
  return {w: r.width, h: r.height, nodes: out,
          note: (document.getElementById('crbc-hidden') || {}).textContent || ''};
}"""


def _check_geometry(m: dict, where: str) -> dict:
    nodes = m["nodes"]
    xy = np.array([[n["x"], n["y"]] for n in nodes], dtype=float)
    d = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    got = {
        "span_x": float(np.ptp(xy[:, 0]) / m["w"]),
        "span_y": float(np.ptp(xy[:, 1]) / m["h"]),
        "median_nearest_px": float(np.median(d.min(axis=1))),
        # A label that would cover another is hidden (blank), and the page says how many.
        "hidden": sum(not n["label"].strip() for n in nodes),
        "labelled_10px": sum(bool(n["label"].strip()) and n["px"] >= 10 for n in nodes) / len(nodes),
    }
    for bid in ("SUCCESS", "FAILURE"):
        b = next(n for n in nodes if n["id"] == bid)
        assert b["label"].startswith(bid) and b["px"] >= 10, (where, b)
        assert 0 <= b["x"] <= m["w"] and 0 <= b["y"] <= m["h"], (where, b, m["w"], m["h"])
    assert got["span_x"] >= 0.6 and got["span_y"] >= 0.3, (where, got)
    assert got["median_nearest_px"] >= 24, (where, got)
    assert got["labelled_10px"] >= 0.6, (where, got)
    assert all(n["px"] >= 10 for n in nodes if n["label"].strip()), (where, got)
    hidden = got["hidden"]
    said = int(m["note"].split()[0]) if m["note"].strip() else 0  # node and edge labels hidden
    assert hidden <= said, (where, hidden, m["note"])
    return got


@pytest.mark.parametrize("name", list(GROUPS))
def test_default_view_geometry(browser, pages, name):
    pg = _open(browser, pages[name])
    try:
        m = pg.evaluate(MEASURE)
        _check_geometry(m, name)
        assert all(0 <= n["x"] <= m["w"] and 0 <= n["y"] <= m["h"] for n in m["nodes"])  # all in view
    finally:
        pg.close()


def _boxes_overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("width", [800, 1440])
def test_legend_and_buttons_never_cover_each_other(browser, pages, width):
    OUT.mkdir(exist_ok=True)
    for name in ("sokoban-34", "synthetic-1939"):
        pg = _open(browser, pages[name], width)
        try:
            legend = pg.locator("#crbc-legend").bounding_box()
            tools = pg.locator("#crbc-tools").bounding_box()
            canvas = pg.locator("#mynetwork canvas").bounding_box()
            assert legend["width"] > 100 and tools["width"] > 60
            assert not _boxes_overlap(legend, tools), (width, legend, tools)
            # both sit above the drawing, which they do not cover either
            assert (
                legend["y"] + legend["height"] <= canvas["y"] + 1
                and tools["y"] + tools["height"] <= canvas["y"] + 1
            )
            for label in ("Fit", "PNG", "SVG"):
                b = pg.get_by_role("button", name=label).bounding_box()
                assert b["x"] + b["width"] <= width and not _boxes_overlap(legend, b)
            pg.screenshot(path=str(OUT / f"graph_{name}_{width}.png"))
        finally:
            pg.close()


def test_self_loop_labels_do_not_overlap(browser, pages):
    pg = _open(browser, pages["sokoban-labels"])
    try:
        boxes = pg.evaluate("""() => {
          const out = [];
          for (const id of network.body.edgeIndices) {
            const e = network.body.edges[id];
            if (e.fromId !== e.toId || !e.options.label) continue;
            const s = e.labelModule.size;
            out.push({id: String(id), x: s.left, y: s.top, width: s.width, height: s.height});
          }
          return out;
        }""")
        assert len(boxes) >= 10  # Sokoban task-04 has self-loops at many anchors, several at some
        clash = [
            (a["id"], b["id"]) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _boxes_overlap(a, b)
        ]
        assert not clash
        pg.screenshot(path=str(OUT / "graph_sokoban_self_loops.png"))
    finally:
        pg.close()


#: The widest vivid (far from grey) edge that is not a self-loop.
VIVID_EDGE = """() => {
  const spread = (c) => { const v = [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
                          return Math.max(...v) - Math.min(...v); };
  let best = null;
  for (const id of network.body.edgeIndices) {
    const e = network.body.edges[id];
    if (e.fromId === e.toId || spread(e.options.color.color) < 90) continue;
    if (!best || e.options.width > best.width) {
      best = {id: String(id), from: String(e.fromId), color: e.options.color.color, width: e.options.width};
    }
  }
  return best;
}"""
#: The canvas pixels around the points 45, 60 and 75 % along an edge (away from its ends,
#: where self-loops and arrows are drawn).
PIXELS = """(id) => {
  const e = network.body.edges[id], out = [];
  const c = document.querySelector('#mynetwork canvas'), r = window.devicePixelRatio || 1;
  for (const t of [0.45, 0.6, 0.75]) {
    const p = network.canvasToDOM(e.edgeType.getPoint(t));
    const d = c.getContext('2d').getImageData(Math.round(p.x * r) - 3, Math.round(p.y * r) - 3, 7, 7).data;
    for (let i = 0; i < d.length; i += 4) { if (d[i + 3] > 200) out.push([d[i], d[i + 1], d[i + 2]]); }
  }
  return out;
}"""


def _distance(pixels: list, color: str) -> int:
    want = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    return min(sum(abs(p - w) for p, w in zip(px, want)) for px in pixels)


def test_hovering_a_node_keeps_its_edges_credit_colours(browser, pages):
    pg = _open(browser, pages["textworld-104"])
    try:
        edge = pg.evaluate(VIVID_EDGE)
        assert edge, "no vividly coloured edge"
        assert _distance(pg.evaluate(PIXELS, edge["id"]), edge["color"]) < 30
        box = pg.locator("#mynetwork canvas").bounding_box()
        at = pg.evaluate("(id) => network.canvasToDOM(network.getPositions([id])[id])", edge["from"])
        pg.mouse.move(box["x"] + at["x"], box["y"] + at["y"])
        pg.wait_for_function(
            "(id) => network.body.nodes[id].hover === true", arg=edge["from"], timeout=WAIT_MS
        )
        pg.evaluate("() => new Promise((done) => { network.once('afterDrawing', done); network.redraw(); })")
        assert _distance(pg.evaluate(PIXELS, edge["id"]), edge["color"]) < 30  # still its credit colour
        pg.screenshot(path=str(OUT / "graph_textworld_hover.png"))
    finally:
        pg.close()


# ---------------------------------------------------------------- through the real app
def _graph_frame(pg, timeout_ms: int = WAIT_MS, changed_from: str | None = None):
    """The graph iframe's frame once it is ready (and, with ``changed_from``, once it shows a
    different drawing than the one whose first node list was that JSON)."""
    deadline = pg.evaluate("() => Date.now()") + timeout_ms
    while pg.evaluate("() => Date.now()") < deadline:
        for f in pg.frames:
            try:
                ready = f.evaluate(
                    "() => typeof network !== 'undefined' && !!network && "
                    "document.body.getAttribute('data-crbc-ready') === '1'"
                )
                if ready and (
                    changed_from is None or f.evaluate("() => JSON.stringify(nodes.getIds())") != changed_from
                ):
                    return f
            except Exception:  # a frame being replaced
                pass
        pg.wait_for_timeout(100)
    raise AssertionError("no (new) graph frame")


def test_the_summary_meets_the_geometry_in_the_app(browser, tmp_path):
    """The 1,939-anchor group through `streamlit run app.py` at 1440×900: the summary meets
    the geometry numbers in the page's iframe (a click on a cluster:
    tests/e2e/test_cluster_open_browser.py)."""
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    batch = random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1)
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r, default=str) + "\n" for r in batch_to_rows(batch)))
    OUT.mkdir(exist_ok=True)
    with streamlit_server(
        env={"CRBC_VIZ_DATA_ROOTS": str(tmp_path)}, log_path=OUT / "streamlit-graph-geometry.log"
    ) as url:
        ctx = browser.new_context(viewport={"width": 1440, "height": 900})
        pg = ctx.new_page()
        try:
            pg.goto(f"{url}/graph?file={path}")
            # No rollout of this group succeeds: the page says so, the graph is one click away.
            pg.get_by_text("Draw the graph anyway").first.wait_for(timeout=WAIT_MS)
            assert draw_anyway(pg)
            pg.get_by_text("Summary of 1,939 anchors").first.wait_for(timeout=WAIT_MS)
            app_idle(pg)
            frame = _graph_frame(pg)
            _check_geometry(frame.evaluate(MEASURE), "app, 1,939 anchors")
            pg.screenshot(path=str(OUT / "graph_app_summary_1440.png"))
        finally:
            ctx.close()


#: Every labelled edge's label size on screen (px).
EDGE_LABELS = """() => {
  const s = network.getScale(), out = [];
  for (const id of network.body.edgeIndices) {
    const e = network.body.edges[id];
    if (e.options.label) out.push({id: String(id), label: String(e.options.label), px: e.options.font.size * s});
  }
  return out;
}"""


def test_projector_mode_graph_labels_at_1280(browser):
    """``?projector=1`` at 1280 px in the real app: the Graph page's node labels (SUCCESS and
    FAILURE among them), its edge labels, legend and Fit / PNG / SVG are ≥ 16 px on screen."""
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-graph-projector.log") as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
        pg = ctx.new_page()
        try:
            pg.goto(f"{url}/graph?projector=1&labels=on")
            pg.locator("iframe").first.wait_for(timeout=WAIT_MS)
            app_idle(pg)
            frame = _graph_frame(pg)
            m = frame.evaluate(MEASURE)
            assert m["w"] < 1280 and len(m["nodes"]) >= 10, m["w"]
            drawn = [n for n in m["nodes"] if n["label"].strip()]
            assert {"SUCCESS", "FAILURE"} <= {n["id"] for n in drawn}
            assert all(n["px"] >= 16 for n in drawn), [n for n in drawn if n["px"] < 16][:5]
            edges = frame.evaluate(EDGE_LABELS)
            assert edges, "no labelled edge (labels=on)"
            assert all(e["px"] >= 16 for e in edges), [e for e in edges if e["px"] < 16][:5]
            texts = frame.evaluate(
                """() => [...document.querySelectorAll('#crbc-legend .item, #crbc-tools button')]
                   .map((e) => [e.textContent.trim().slice(0, 30), parseFloat(getComputedStyle(e).fontSize)])"""
            )
            assert len(texts) >= 5 and all(px >= 16 for _, px in texts), texts
            pg.screenshot(path=str(OUT / "graph_projector_1280.png"))
        finally:
            ctx.close()
