"""A summary that stays still (`crbc_viz.views.summary_space`, `summarise`'s clicks): no
"+n anchors" cluster on a drawn node or its label, and opening one keeps every drawn item where
it was, its labels as they were, puts the anchors it draws in free space inside the drawing's
frame near their cluster, and marks them. No browser here (tests/e2e/test_cluster_open.py
measures the same in Chromium through the app).

Shapes are measured from the page itself, independently of the placement's own footprints:
each node's JSON (position, dot radius or box, label, font size) with its label's width
measured in Liberation Sans (what Chromium draws for vis-network's default "arial") by PIL."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from crbc_viz import build_graph
from crbc_viz.synthetic import random_mdp_batch
from crbc_viz.views.graph_geometry import place
from crbc_viz.views.graph_view import FRESH_COLOR, graph_drawing
from crbc_viz.views.layout import OPEN_STEP, summarise
from crbc_viz.views.summary_space import curve_label_at


def dataset(page: str, which: int) -> list[dict]:
    """The nodes (0) / edges (1) JSON embedded in the page's vis.DataSet calls."""
    return json.loads(re.findall(r"new vis\.DataSet\((\[.*?\])\);\n", page, flags=re.S)[which])


@pytest.fixture(scope="module")
def big():
    """A random-MDP group of 1,939 anchors (the largest group the Graph page is tested with)."""
    return build_graph(random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1))


@pytest.fixture(scope="module")
def width_of():
    """``(text, font px) -> px``: the text's width in Liberation Sans (0.6 em per glyph where
    PIL or the font is missing)."""
    try:
        from PIL import ImageFont

        path = subprocess.run(["fc-match", "-f", "%{file}", "arial"], capture_output=True, text=True).stdout
        fonts: dict = {}

        def measure(text: str, px: float) -> float:
            font = fonts.setdefault(px, ImageFont.truetype(path, int(round(px))))
            return max(font.getlength(line) for line in text.split("\n"))

        measure("s0", 16)
        return measure
    except Exception:
        return lambda text, px: 0.6 * px * max(len(line) for line in text.split("\n"))


def _boxes(page: str, width_of) -> dict:
    """``{node id: [shape box, label box or None]}`` as vis-network draws them at scale 1: a dot
    of radius ``size`` with its label's top half a line plus 4 px below it (measured in
    Chromium: 12 px for a 16 px label), a box around its label (margin)."""
    out = {}
    for n in dataset(page, 0):
        x, y, label, px = n["x"], n["y"], str(n.get("label", "")), n["font"]["size"]
        w, h = width_of(label, px), px * (label.count("\n") + 1)
        if n["shape"] == "dot":
            r = n["size"]
            top = y + r + 4 + px / 2
            out[n["id"]] = [
                (x - r, y - r, x + r, y + r),
                (x - w / 2, top, x + w / 2, top + h) if label else None,
            ]
        else:
            m = n.get("margin", 5) + 1
            out[n["id"]] = [(x - w / 2 - m, y - h / 2 - m, x + w / 2 + m, y + h / 2 + m), None]
    return out


def _hit(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _clashes(boxes: dict, movers) -> list:
    """(mover, other) pairs where a mover's dot or label box touches another node's."""
    out = []
    for m in movers:
        for o, theirs in boxes.items():
            if o != m and any(a and b and _hit(a, b) for a in boxes[m] for b in theirs):
                out.append((m, o))
    return out


def test_clicks_draw_the_next_members_of_the_cluster_in_click_order(big):
    base = summarise(big, 0, max_nodes=120)
    a, b = sorted(base.clusters, key=lambda c: -len(c.members))[:2]
    s = summarise(big, 0, max_nodes=120, opened=(a.lo, b.lo, a.lo))
    assert s.base == base
    assert s.opened == (
        (a.lo, a.members[:OPEN_STEP]),
        (b.lo, b.members[:OPEN_STEP]),
        (a.lo, a.members[OPEN_STEP : 2 * OPEN_STEP]),
    )
    assert set(s.anchors) == set(base.anchors) | set(a.members[: 2 * OPEN_STEP]) | set(b.members[:OPEN_STEP])
    # ``{lo: clicks}`` is the same clicks taken by depth
    by_depth = summarise(big, 0, max_nodes=120, opened={a.lo: 2, b.lo: 1})
    assert by_depth.anchors == s.anchors and by_depth.clusters == s.clusters
    assert summarise(big, 0, max_nodes=120, opened=()).base is None


def test_opening_a_cluster_keeps_every_drawn_item_and_label_in_place(big):
    first = place(big, group=0, height_px=620, max_nodes=120)
    cl = sorted(first.summary.clusters, key=lambda c: -len(c.members))
    clicks = (cl[0].lo, cl[1].lo, cl[0].lo)
    before = first
    for k in range(1, len(clicks) + 1):
        now = place(big, group=0, height_px=620, max_nodes=120, opened=clicks[:k])
        new = set(now.pos) - set(before.pos)
        assert new == set(now.summary.opened[-1][1]) and len(new) == OPEN_STEP
        kept = set(before.pos) & set(now.pos)
        assert kept >= set(before.summary.anchors) | {"SUCCESS", "FAILURE"}
        assert all(now.pos[it] == before.pos[it] for it in kept), k  # nothing drawn before moves
        assert now.label_chars == first.label_chars
        before = now


def test_no_cluster_on_a_node_or_a_label_and_opened_anchors_in_free_space_in_the_frame(big, width_of):
    d0 = graph_drawing(big, None)
    boxes0 = _boxes(d0.html, width_of)
    clusters = [c.id for c in d0.summary.clusters]
    assert len(clusters) >= 10 and not _clashes(boxes0, clusters)
    frame = [
        min(b[0] for bs in boxes0.values() for b in bs if b),
        min(b[1] for bs in boxes0.values() for b in bs if b),
        max(b[2] for bs in boxes0.values() for b in bs if b),
        max(b[3] for bs in boxes0.values() for b in bs if b),
    ]
    target = max(d0.summary.clusters, key=lambda c: len(c.members))
    d1 = graph_drawing(big, None, opened=(target.lo,), mark_opened=True)
    boxes1 = _boxes(d1.html, width_of)
    new = set(boxes1) - set(boxes0)
    assert len(new) == OPEN_STEP
    assert not _clashes(boxes1, [c.id for c in d1.summary.clusters])
    assert not _clashes(boxes1, new)  # the new anchors touch no other node or label
    for n in new:
        for b in boxes1[n]:
            assert frame[0] <= b[0] and b[2] <= frame[2] and frame[1] <= b[1] and b[3] <= frame[3], (n, b)
    # near their cluster (the nearest free space, in this crowded drawing 90 … 360 px away):
    # closer to it than the other drawn anchors are on average, the first one within 150 px
    nodes1 = {n["id"]: n for n in dataset(d1.html, 0)}
    at = np.array([nodes1[target.id]["x"], nodes1[target.id]["y"]])
    dist = {
        k: float(np.hypot(*(np.array([v["x"], v["y"]]) - at)))
        for k, v in nodes1.items()
        if isinstance(k, int)
    }
    assert np.mean([dist[n] for n in new]) < 0.8 * np.mean([dist[k] for k in dist if k not in new])
    assert min(dist[n] for n in new) <= 150
    # the labels of what was drawn are the same
    nodes0 = {n["id"]: n for n in dataset(d0.html, 0)}
    assert all(nodes1[k]["label"] == v["label"] for k, v in nodes0.items() if isinstance(k, int))


def test_the_anchors_a_click_drew_are_ringed_only_when_asked(big):
    target = max(summarise(big, 0, max_nodes=120).clusters, key=lambda c: len(c.members))
    marked = dataset(graph_drawing(big, None, opened=(target.lo,), mark_opened=True).html, 0)
    ringed = {n["id"] for n in marked if n.get("crbcFresh")}
    assert ringed == set(target.members[:OPEN_STEP])
    for n in marked:
        if n["id"] in ringed:
            assert n["color"]["border"] == FRESH_COLOR and n["shadow"]["enabled"] and n["borderWidth"] >= 5
            assert "just drawn" in n["title"]
    plain = dataset(graph_drawing(big, None, opened=(target.lo,)).html, 0)
    assert not any(n.get("crbcFresh") or n["color"]["border"] == FRESH_COLOR for n in plain)


def test_curve_label_at_a_straight_edge_is_its_midpoint():
    assert curve_label_at((0.0, 0.0), (100.0, 40.0), roundness=0.0) == pytest.approx((50.0, 20.0))
    # curved clockwise: from left to right the label bows upwards (canvas y grows down)
    x, y = curve_label_at((0.0, 0.0), (100.0, 0.0))
    assert x == pytest.approx(50.0, abs=20) and y < -5


def test_no_cluster_on_a_chain_label_and_no_opened_anchor_on_a_label_drawn_before(big, width_of):
    """No cluster sits on a chain's "⋯ n steps" label; through five clicks on the two largest
    clusters, no anchor a click draws sits on a "⋯ n steps" or "time limit" label drawn between
    items placed before it (where vis-network draws a curved edge's label, `curve_label_at`:
    checked against vis-network itself in tests/e2e/test_cluster_open_browser.py). A cluster
    may cover another cluster's "time limit" label: the page hides a covered label and says so."""
    d0 = graph_drawing(big, None)
    cl = sorted(d0.summary.clusters, key=lambda c: -len(c.members))
    clicks = (cl[0].lo, cl[1].lo, cl[0].lo, cl[1].lo, cl[0].lo)
    seen_labels = 0
    before = set()
    for k in range(len(clicks) + 1):
        d = graph_drawing(big, None, opened=clicks[:k])
        nodes = {n["id"]: n for n in dataset(d.html, 0)}
        boxes = _boxes(d.html, width_of)
        labels = []
        for e in dataset(d.html, 1):
            text = str(e.get("label", ""))
            if not (text.startswith("⋯") or (k and text.endswith("time limit"))) or e["from"] == e["to"]:
                continue
            a, b = nodes[e["from"]], nodes[e["to"]]
            if k and not ({e["from"], e["to"]} <= before):
                continue  # an edge of an anchor this click drew: its label comes with it
            x, y = curve_label_at((a["x"], a["y"]), (b["x"], b["y"]))
            w, h = width_of(text, e["font"]["size"]), e["font"]["size"]
            labels.append((text, (x - w / 2, y - h / 2, x + w / 2, y + h / 2)))
        seen_labels += len(labels)
        movers = [n for n in boxes if n not in before] if k else [c.id for c in d.summary.clusters]
        on = [(m, t) for m in movers for t, r in labels if any(bx and _hit(bx, r) for bx in boxes[m])]
        assert not on, (k, on)
        before = set(boxes)
    assert seen_labels >= 6
