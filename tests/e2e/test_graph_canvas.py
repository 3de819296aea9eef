"""The Graph page's canvas as a person sees it, measured ON THE APP'S PAGE (`streamlit run
app.py` in Debian's headless Chromium, Playwright's Python package, never `playwright
install`) from the vis-network object inside the page's iframe, in on-screen pixels (canvas
units × the canvas zoom, ``network.getScale()``).

At 800, 1280 and 1440 px windows, on groups of 34 (Sokoban task-04), 104 (TextWorld task-09)
and 1,939 anchors (a random MDP written as JSONL; the bundled samples hold no group that large):

- labels: at most 5 % of the drawn labels (node and edge labels) overlap another label;
  every drawn label ≥ 10 px on screen (≥ 16 px in projector mode at 1280 px, edge labels
  included);
- node shapes: no two overlap;
- no drawn node or label lies under one of vis-network's navigation buttons (the canvas's
  bottom corners: a node there cannot be clicked);
- the drawing fills its canvas: the box around every drawn node (with its label) spans
  ≥ 70 % of the canvas's width and ≥ 70 % of its height;
- labels hidden where they would cover others (the page says how many) are at most half of
  them in the default view (projector mode with every action written hides most of those).
  How long placing the labels took in the page is printed, not asserted (a timing belongs in
  ``bench/``: on a busy machine it says nothing of the code);
- the canvas drawn at most `MOST_DRAWS` times from the page's load until the app is idle, at
  1280 and 1440 px (vis-network's "afterDrawing", counted by the page: each drawing of a large
  graph costs; at 800 px the app resizes the frame several times as it settles: printed only).

Screenshots of each case go to ``test-output/graph_canvas_<group>_<width>.png``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, draw_anyway, streamlit_server, wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
WIDTHS = (800, 1280, 1440)
#: vis-network's drawings at load: one to learn where the labels land at the fitted scale, the
#: one it had already asked for (the placed labels), and one it makes when the app sizes the frame.
MOST_DRAWS = 4
#: name -> (file name in the data root, group label, anchors)
GROUPS = {
    "sokoban-34": ("sokoban.jsonl", "sokoban-sample/0/sokoban-task-04", 34),
    "textworld-104": ("textworld_cooking.jsonl.gz", "textworld-sample/0/textworld-task-09", 104),
    "synthetic-1939": ("big.jsonl", None, 1939),
}

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    root = tmp_path_factory.mktemp("data")
    shutil.copy(REPO / "sample_rollouts/sokoban/sokoban.jsonl", root)
    shutil.copy(REPO / "sample_rollouts/textworld/textworld_cooking.jsonl.gz", root)
    batch = random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1)
    (root / "big.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in batch_to_rows(batch)))
    OUT.mkdir(exist_ok=True)
    with streamlit_server(
        env={"CRBC_VIZ_DATA_ROOTS": str(root)}, log_path=OUT / "streamlit-graph-canvas.log"
    ) as url:
        yield url, root


#: Every drawn node (its shape's box) and every drawn label (its box), in the iframe's
#: on-screen px, with each label's font size on screen; and the canvas's size.
MEASURE = """() => {
  const c = document.querySelector('#mynetwork canvas');
  const r = c.getBoundingClientRect(), s = network.getScale();
  const dom = (x, y) => network.canvasToDOM({x: x, y: y});
  const rect = (l, t, w, h) => { const a = dom(l, t), b = dom(l + w, t + h); return [a.x, a.y, b.x, b.y]; };
  const nodes = [], labels = [];
  for (const id of network.body.nodeIndices) {
    const n = network.body.nodes[id], p = dom(n.x, n.y), round = n.options.shape === 'dot';
    const hw = round ? n.options.size : n.shape.width / 2, hh = round ? n.options.size : n.shape.height / 2;
    nodes.push({id: String(id), x: p.x, y: p.y, rx: hw * s, ry: hh * s, round: round});
    const text = String(n.options.label || '');
    if (!text.trim()) continue;
    // vis-network draws the text vadjust lower than its label box says.
    const z = n.labelModule.size, v = n.options.font.vadjust || 0;
    labels.push({kind: 'node', id: String(id), text: text, px: n.options.font.size * s,
                 box: round ? rect(z.left, z.top + v, z.width, z.height) : rect(n.x - hw, n.y - hh, 2 * hw, 2 * hh)});
  }
  for (const id of network.body.edgeIndices) {
    const e = network.body.edges[id], text = String(e.options.label || '');
    if (!text.trim() || !e.connected) continue;
    const z = e.labelModule.size, v = e.options.font.vadjust || 0;
    labels.push({kind: 'edge', id: String(id), text: text, px: e.options.font.size * s,
                 box: rect(z.left, z.top + v, z.width, z.height)});
  }
  const buttons = [...document.querySelectorAll('#mynetwork .vis-navigation .vis-button')].map(b => {
    const q = b.getBoundingClientRect();
    return [q.left - r.left, q.top - r.top, q.right - r.left, q.bottom - r.top];
  }).filter(q => q[2] > q[0]);
  return {w: r.width, h: r.height, scale: s, nodes: nodes, labels: labels, buttons: buttons,
          note: (document.getElementById('crbc-hidden') || {}).textContent || '',
          place_ms: parseFloat(document.body.getAttribute('data-crbc-place-ms')),
          redraws: parseInt(document.body.getAttribute('data-crbc-redraws'))};
}"""


def _overlap(a, b, slack: float = 1.0) -> bool:
    return a[0] + slack < b[2] and b[0] + slack < a[2] and a[1] + slack < b[3] and b[1] + slack < a[3]


def label_overlaps(labels: list[dict]) -> list[tuple]:
    """Labels whose box overlaps another label's (each label counted once)."""
    hit = set()
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            if _overlap(a["box"], b["box"]):
                hit.update(((a["kind"], a["id"], a["text"]), (b["kind"], b["id"], b["text"])))
    return sorted(hit)


def node_overlaps(nodes: list[dict]) -> list[tuple]:
    bad = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            dx, dy = abs(a["x"] - b["x"]), abs(a["y"] - b["y"])
            if a["round"] and b["round"]:
                if dx * dx + dy * dy < (a["rx"] + b["rx"] - 0.5) ** 2:
                    bad.append((a["id"], b["id"]))
            elif dx < a["rx"] + b["rx"] - 0.5 and dy < a["ry"] + b["ry"] - 0.5:
                bad.append((a["id"], b["id"]))
    return bad


def span(m: dict) -> tuple[float, float]:
    """The share of the canvas's width and height that the drawn nodes and labels span."""
    xs = [v for n in m["nodes"] for v in (n["x"] - n["rx"], n["x"] + n["rx"])]
    ys = [v for n in m["nodes"] for v in (n["y"] - n["ry"], n["y"] + n["ry"])]
    for lab in m["labels"]:
        xs += [lab["box"][0], lab["box"][2]]
        ys += [lab["box"][1], lab["box"][3]]
    return (min(m["w"], max(xs)) - max(0, min(xs))) / m["w"], (min(m["h"], max(ys)) - max(0, min(ys))) / m[
        "h"
    ]


def graph_frame(pg):
    """The Graph page's iframe once its drawing is ready."""

    def ready():
        for f in pg.frames:
            try:
                if f.evaluate(
                    "() => typeof network !== 'undefined' && !!network && "
                    "document.body.getAttribute('data-crbc-ready') === '1'"
                ):
                    return f
            except Exception:  # a frame being replaced
                pass
        return None

    return wait_until(pg, ready, "the graph iframe is drawn")


def open_graph(browser, url: str, root: Path, name: str, width: int, projector: bool = False):
    file, group, _ = GROUPS[name]
    q = (
        f"file={root / file}"
        + (f"&group={group}" if group else "")
        + ("&projector=1&labels=on" if projector else "")
    )
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    pg = ctx.new_page()
    pg.goto(f"{url}/graph?{q}")
    pg.locator("iframe, [data-testid='stExpander']").first.wait_for(timeout=WAIT_MS)
    draw_anyway(pg)
    frame = graph_frame(pg)
    app_idle(pg)
    return ctx, pg, frame


def check(m: dict, where: str, min_px: float) -> dict:
    labels = m["labels"]
    got = {
        "labels": len(labels),
        "overlapping": label_overlaps(labels),
        "nodes": len(m["nodes"]),
        "node_overlaps": node_overlaps(m["nodes"]),
        "small": [(lab["text"], round(lab["px"], 1)) for lab in labels if lab["px"] < min_px],
        "buttons": len(m["buttons"]),
        "under_buttons": [
            (lab["kind"], lab["id"], lab["text"])
            for lab in labels
            if any(_overlap(lab["box"], b) for b in m["buttons"])
        ],
        "nodes_under_buttons": [
            n["id"]
            for n in m["nodes"]
            if any(
                _overlap((n["x"] - n["rx"], n["y"] - n["ry"], n["x"] + n["rx"], n["y"] + n["ry"]), b)
                for b in m["buttons"]
            )
        ],
        "span": span(m),
        "canvas": (round(m["w"]), round(m["h"])),
        "note": m["note"],
        "place_ms": m["place_ms"],
        "redraws": m["redraws"],
    }
    return got


def problems(got: dict, where: str, most_shown: bool = True) -> list[str]:
    bad = []
    if len(got["overlapping"]) > 0.05 * max(got["labels"], 1):
        bad.append(
            f"{where}: {len(got['overlapping'])} of {got['labels']} labels overlap: {got['overlapping'][:6]}"
        )
    if got["node_overlaps"]:
        bad.append(f"{where}: node shapes overlap: {got['node_overlaps'][:6]}")
    if got["under_buttons"]:
        bad.append(f"{where}: labels under the navigation buttons: {got['under_buttons'][:6]}")
    if got["nodes_under_buttons"]:
        bad.append(f"{where}: nodes under the navigation buttons: {got['nodes_under_buttons'][:6]}")
    if got["small"]:
        bad.append(f"{where}: {len(got['small'])} labels too small: {got['small'][:6]}")
    hidden = int(got["note"].split()[0]) if got["note"].strip() else 0
    if most_shown and hidden > 0.5 * (got["labels"] + hidden):
        bad.append(f"{where}: {hidden} labels hidden, {got['labels']} drawn")
    if got["span"][0] < 0.7 or got["span"][1] < 0.7:
        bad.append(
            f"{where}: the drawing spans {got['span'][0]:.0%} × {got['span'][1]:.0%} of {got['canvas']}"
        )
    return bad


@pytest.mark.parametrize("name", list(GROUPS))
def test_graph_page_canvas_at_every_width(browser, server, name):
    url, root = server
    bad, seen = [], []
    for width in WIDTHS:
        ctx, pg, frame = open_graph(browser, url, root, name, width)
        try:
            got = check(frame.evaluate(MEASURE), f"{name} at {width}px", 10.0)
            seen.append(
                (
                    width,
                    got["labels"],
                    len(got["overlapping"]),
                    got["span"],
                    got["canvas"],
                    got["note"],
                    got["place_ms"],
                    got["redraws"],
                )
            )
            bad += problems(got, f"{name} at {width}px")
            if width >= 1280 and not got["redraws"] <= MOST_DRAWS:
                bad.append(f"{name} at {width}px: the canvas drawn {got['redraws']} times at load")
            assert got["labels"] >= min(10, got["nodes"]), (width, got)
            assert got["buttons"] == 7, (width, got["buttons"])  # ← ↑ → ↓, zoom in and out, fit
            if width == 1280:  # zoomed in, then either Fit button: the drawing's view again
                scale = frame.evaluate("() => network.getScale()")
                for fit in ("#crbc-tools button", "#mynetwork .vis-navigation .vis-zoomExtends"):
                    # (the page's draw marks the body ready when it has drawn: unmark it first,
                    # so that the look below waits for the draw the click asks for, not for
                    # vis-network's own fit a frame before it)
                    frame.evaluate(
                        "() => { network.moveTo({scale: 1.7 * network.getScale(), position: {x: 0, y: 0}});"
                        " document.body.removeAttribute('data-crbc-ready'); }"
                    )
                    frame.locator(fit).first.click()
                    frame.wait_for_function(
                        f"() => document.body.getAttribute('data-crbc-ready') === '1'"
                        f" && Math.abs(network.getScale() / {scale} - 1) < 0.01",
                        timeout=WAIT_MS,
                    )
                    again = check(frame.evaluate(MEASURE), f"{name} after {fit}", 10.0)
                    assert not again["nodes_under_buttons"], (fit, again["nodes_under_buttons"])
            pg.locator("iframe").first.screenshot(path=str(OUT / f"graph_canvas_{name}_{width}.png"))
        finally:
            ctx.close()
    print(name, seen)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", list(GROUPS))
def test_graph_page_projector_labels_at_1280(browser, server, name):
    """Projector mode at 1280 px with every edge's action written on it: every drawn node and
    edge label ≥ 16 px on screen, and the same overlap, node and span bounds."""
    url, root = server
    ctx, pg, frame = open_graph(browser, url, root, name, 1280, projector=True)
    try:
        got = check(frame.evaluate(MEASURE), f"{name} projector", 16.0)
        pg.locator("iframe").first.screenshot(path=str(OUT / f"graph_canvas_{name}_projector_1280.png"))
        print(
            name,
            "projector",
            got["labels"],
            len(got["overlapping"]),
            got["span"],
            got["canvas"],
            got["note"],
            got["place_ms"],
        )
        assert any(lab["kind"] == "edge" for lab in frame.evaluate(MEASURE)["labels"]), "no edge label drawn"
        # Every action written at 16 px: most edge labels have no room and are hidden (the
        # page says how many); what is drawn must not overlap.
        assert got["note"].strip(), got
        bad = problems(got, f"{name} projector at 1280px", most_shown=False)
        assert not bad, "\n".join(bad)
    finally:
        ctx.close()
