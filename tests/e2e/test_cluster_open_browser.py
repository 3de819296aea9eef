"""Opening a "+n anchors" cluster of the 1,939-anchor summary, as a person sees it in Debian's
headless Chromium at 1440×900 (positions and shapes read from the vis-network object:
``canvasToDOM``, each node's radius or box and its label's box).

In the real app (`streamlit run app.py`, the Graph page): before the click no cluster's dot or
label touches another node's dot, box or label; a click on the largest cluster draws its
`OPEN_STEP` most visited anchors, every node drawn before stays within 40 px of where it was
on screen and keeps its label, the new anchors are ringed (`FRESH_COLOR`) and lie within the
frame, still no cluster touches a node or a label; the next interaction (another control)
drops the rings. Screenshots before and after go to ``test-output/``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from streamlit_server import (
    CHROMIUM,
    WAIT_MS,
    app_idle,
    click_node,
    draw_anyway,
    streamlit_server,
    wait_until,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

#: Every drawn node on screen (DOM px of the canvas): its centre, its shape's box (a dot's
#: circle as its square) and its label's box, its label text and whether it is ringed as new.
SHAPES = """() => {
  const s = network.getScale(), out = [];
  const dom = (x, y) => network.canvasToDOM({x: x, y: y});
  for (const id of network.body.nodeIndices) {
    const n = network.body.nodes[id], o = n.options, p = dom(n.x, n.y);
    let shape;
    if (o.shape === 'dot') {
      const r = o.size * s; shape = [p.x - r, p.y - r, p.x + r, p.y + r];
    } else {
      const w = n.shape.width * s / 2, h = n.shape.height * s / 2; shape = [p.x - w, p.y - h, p.x + w, p.y + h];
    }
    const L = n.labelModule.size;
    let label = null;
    if (o.shape === 'dot' && o.label && L.width > 0) {
      const a = dom(L.left, L.top), b = dom(L.left + L.width, L.top + L.height);
      label = [a.x, a.y, b.x, b.y];
    }
    out.push({id: String(id), x: p.x, y: p.y, shape: shape, label: label, text: String(o.label || ''),
              fresh: !!o.crbcFresh, border: (o.color && o.color.border) || ''});
  }
  return out;
}"""


#: Every labelled edge on screen: its id, label and the label's box (DOM px), as vis-network
#: placed it when it drew the edge.
EDGE_LABELS = """() => {
  const out = [];
  for (const id of network.body.edgeIndices) {
    const e = network.body.edges[id], L = e.labelModule && e.labelModule.size;
    if (!e.options.label || !L || !(L.width > 0)) { continue; }
    const a = network.canvasToDOM({x: L.left, y: L.top});
    const b = network.canvasToDOM({x: L.left + L.width, y: L.top + L.height});
    out.push({id: String(id), text: String(e.options.label), box: [a.x, a.y, b.x, b.y],
              centre: [L.left + L.width / 2, L.top + L.height / 2],
              ends: [[e.from.x, e.from.y], [e.to.x, e.to.y]]});
  }
  return out;
}"""


def _hit(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _on_edge_labels(nodes: list[dict], labels: list[dict], which) -> list:
    """(node, edge label) for every node among ``which`` whose dot or label box covers the
    label of an edge in ``labels``."""
    return [
        (n["id"], e["text"])
        for n in nodes
        if which(n["id"])
        for e in labels
        if any(r and _hit(r, e["box"]) for r in (n["shape"], n["label"]))
    ]


def _cluster_clashes(nodes: list[dict]) -> list:
    """(cluster, other node, what touches) for every cluster whose dot or label box overlaps
    another node's shape or label box."""
    out = []
    for c in (n for n in nodes if n["id"].startswith("cluster:")):
        mine = [("dot", c["shape"])] + ([("label", c["label"])] if c["label"] else [])
        for o in nodes:
            if o["id"] == c["id"]:
                continue
            theirs = [("shape", o["shape"])] + ([("label", o["label"])] if o["label"] else [])
            for k1, r1 in mine:
                for k2, r2 in theirs:
                    if _hit(r1, r2):
                        out.append((c["id"], k1, o["id"], k2))
    return out


def _new_frame(pg, changed_from: str | None = None):
    """The graph iframe's frame if it is drawn and, with ``changed_from``, shows another node
    list than that JSON; else None."""
    for f in pg.frames:
        try:
            ok = f.evaluate(
                "() => typeof network !== 'undefined' && !!network && "
                "document.body.getAttribute('data-crbc-ready') === '1'"
            )
            if ok and (
                changed_from is None or f.evaluate("() => JSON.stringify(nodes.getIds())") != changed_from
            ):
                return f
        except Exception:  # a frame being replaced
            pass
    return None


def _graph_frame(pg, changed_from: str | None = None):
    """`_new_frame`, waited for."""
    return wait_until(pg, lambda: _new_frame(pg, changed_from), "a (new) drawn graph frame")


def _click_node(pg, frame, node_id, took_effect, what: str):
    canvas = pg.frame_locator("iframe").first.locator("#mynetwork canvas")
    canvas.scroll_into_view_if_needed()
    return click_node(pg, frame, canvas, node_id, took_effect, what)


def test_opening_a_cluster_keeps_the_drawing_still_and_marks_the_new_anchors(browser, tmp_path):
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
    from crbc_viz.views.graph_view import FRESH_COLOR
    from crbc_viz.views.layout import OPEN_STEP
    from crbc_viz.views.summary_space import curve_label_at

    batch = random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1)
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r, default=str) + "\n" for r in batch_to_rows(batch)))
    OUT.mkdir(exist_ok=True)
    with streamlit_server(
        env={"CRBC_VIZ_DATA_ROOTS": str(tmp_path)}, log_path=OUT / "streamlit-cluster-open.log"
    ) as url:
        ctx = browser.new_context(viewport={"width": 1440, "height": 900})
        pg = ctx.new_page()
        try:
            pg.goto(f"{url}/graph?file={path}")
            pg.get_by_text("Draw the graph anyway").first.wait_for(timeout=WAIT_MS)
            assert draw_anyway(pg)
            pg.get_by_text("Summary of 1,939 anchors").first.wait_for(timeout=WAIT_MS)
            frame = _graph_frame(pg)
            before = {n["id"]: n for n in frame.evaluate(SHAPES)}
            labels_before = {e["id"]: e for e in frame.evaluate(EDGE_LABELS)}
            chains = [e for e in labels_before.values() if e["text"].startswith("⋯")]
            assert chains, labels_before
            # where the layout expects vis-network to put a chain's label (clusters and opened
            # anchors keep off it) is where vis-network puts it
            for e in chains:
                x, y = curve_label_at(*e["ends"])
                assert abs(x - e["centre"][0]) < 1.5 and abs(y - e["centre"][1]) < 1.5, (e, x, y)
            on_chains = _on_edge_labels(list(before.values()), chains, lambda k: k.startswith("cluster:"))
            assert not on_chains, on_chains
            assert not _cluster_clashes(list(before.values())), _cluster_clashes(list(before.values()))[:5]
            clusters = [n for n in before.values() if n["id"].startswith("cluster:")]
            target = max(clusters, key=lambda c: int(c["text"].split()[0][1:].replace(",", "")))
            pg.wait_for_function("() => !!window.__crbcSet", timeout=WAIT_MS)  # the click bridge is up
            frame.locator("#mynetwork").scroll_into_view_if_needed()
            pg.screenshot(path=str(OUT / "cluster_before_open_1440.png"))
            ids = frame.evaluate("() => JSON.stringify(nodes.getIds())")
            t0 = time.monotonic()
            frame = _click_node(
                pg, frame, target["id"], lambda: _new_frame(pg, ids), "a drawing with the cluster opened"
            )
            (OUT / "cluster_open_seconds.txt").write_text(f"{time.monotonic() - t0:.2f}\n")
            after = {n["id"]: n for n in frame.evaluate(SHAPES)}
            new = sorted(set(after) - set(before))
            assert len(new) == OPEN_STEP, new
            moved = {
                k: round(((after[k]["x"] - b["x"]) ** 2 + (after[k]["y"] - b["y"]) ** 2) ** 0.5, 1)
                for k, b in before.items()
                if k in after
            }
            assert set(before) - set(after) <= {target["id"]}  # only an emptied cluster may go
            if target["id"] in after:  # the cluster shrinks by the anchors it drew (and by any
                # anchor that now sits in a chain between two drawn ones)
                left = int(after[target["id"]]["text"].split()[0][1:].replace(",", ""))
                assert left <= int(target["text"].split()[0][1:].replace(",", "")) - OPEN_STEP
            assert max(moved.values()) <= 40, sorted(moved.items(), key=lambda kv: -kv[1])[:5]
            relabelled = [
                (k, b["text"], after[k]["text"])
                for k, b in before.items()
                if k in after and not k.startswith("cluster:") and after[k]["text"] != b["text"]
            ]
            assert not relabelled, relabelled[:5]
            assert all(after[k]["fresh"] and after[k]["border"] == FRESH_COLOR for k in new), new
            assert not any(n["fresh"] for k, n in after.items() if k not in new)
            assert not _cluster_clashes(list(after.values())), _cluster_clashes(list(after.values()))[:5]
            # nor does a new anchor's dot or label cover the label of an edge drawn before
            # ("⋯ 6 steps" of a chain, "time limit")
            labels_after = [e for e in frame.evaluate(EDGE_LABELS) if e["id"] in labels_before]
            covered = _on_edge_labels(list(after.values()), labels_after, lambda k: k in new)
            assert not covered, covered
            pg.screenshot(path=str(OUT / "cluster_after_open_1440.png"))
            # The next interaction (another control: action labels off) drops the rings;
            # what is drawn stays where it was.
            app_idle(pg)
            labels = pg.locator(".st-key-graph_labels").first
            labels.scroll_into_view_if_needed()
            labels.click()
            try:
                pg.get_by_role("option", name="off").click(timeout=10_000)
            except Exception:
                pg.screenshot(path=str(OUT / "cluster_labels_select_debug.png"))
                print(labels.inner_html()[:3000])
                raise

            def unmarked():
                f = _graph_frame(pg)
                got = {n["id"]: n for n in f.evaluate(SHAPES)}
                return got if set(got) == set(after) and not any(n["fresh"] for n in got.values()) else None

            later = wait_until(pg, unmarked, "the new anchors' rings gone after the next interaction")
            far = [
                k
                for k, a in after.items()
                if abs(later[k]["x"] - a["x"]) > 40 or abs(later[k]["y"] - a["y"]) > 40
            ]
            assert not far, far[:5]
        finally:
            ctx.close()


@pytest.fixture(scope="module")
def drawings(tmp_path_factory):
    """The 1,939-anchor summary (crbc colours) before and after a click on its largest cluster,
    as HTML files."""
    from crbc_viz import build_graph, score
    from crbc_viz.synthetic import random_mdp_batch
    from crbc_viz.views.graph_view import graph_drawing

    g = build_graph(random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1))
    res = score(g, "crbc", backend="numpy")
    first = graph_drawing(g, res, height_px=620)
    lo = max(first.summary.clusters, key=lambda c: len(c.members)).lo
    out = tmp_path_factory.mktemp("cluster")
    (out / "before.html").write_text(first.html)
    (out / "after.html").write_text(graph_drawing(g, res, height_px=620, opened=(lo,), mark_opened=True).html)
    return out


@pytest.mark.parametrize("width", [800, 1440])
def test_the_summary_page_at_800_and_1440_px(browser, drawings, width):
    """The page alone (no app) in an 800 px window, where labels are drawn larger in canvas
    units, and at 1440 px: no cluster touches a node or a label, before or after the click, and
    nothing drawn before moves on screen."""
    got = {}
    for k in ("before", "after"):
        pg = browser.new_page(viewport={"width": width, "height": 900})
        try:
            pg.goto((drawings / f"{k}.html").as_uri())
            pg.wait_for_selector("body[data-crbc-ready='1']", state="attached", timeout=WAIT_MS)
            got[k] = {n["id"]: n for n in pg.evaluate(SHAPES)}
            clash = _cluster_clashes(list(got[k].values()))
            assert not clash, (width, k, clash[:5])
        finally:
            pg.close()
    moved = [
        k
        for k, b in got["before"].items()
        if k in got["after"] and abs(got["after"][k]["x"] - b["x"]) + abs(got["after"][k]["y"] - b["y"]) > 2
    ]
    assert not moved, moved[:5]
