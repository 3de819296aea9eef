"""A canvas that takes its drawing's shape, without a browser: the box the layout fills
(`crbc_viz.views.layout.fit_box`, numbers worked by hand), the room the SUCCESS / FAILURE boxes
get at the right, and what the page carries for its script (the canvas's aspect, each
anchor's short label, upright edge labels). tests/e2e/test_graph_canvas.py measures the
drawing on the app's Graph page in Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.views.graph_view import FIT_WIDTH, graph_drawing
from crbc_viz.views.layout import FIT_ASPECT, MIN_GAP, fit_box, layered_positions

REPO = Path(__file__).resolve().parents[2]


def test_fit_box_by_hand():
    # 4 columns in 720 px: one band (720 / 5 = 144 px a column ≥ 46). The tallest column (9)
    # in two staggered sub-columns: 8 × 44 / 2 + 44 = 220 px, below 0.45 × 720 = 324.
    assert fit_box([1, 3, 9, 2], 720) == (720.0, 324.0)
    # 12 columns of ≤ 16: one band (720 / 13 = 55 ≥ 46); 15 × 22 + 44 = 374 px.
    assert fit_box([16] + [3] * 11, 720) == (720.0, 374.0)
    # 30 columns: 720 / 31 = 23 and 720 / 16 = 45 are < 46 px, 720 / 11 = 65: three bands of
    # 10. Tallest 10: 9 × 22 + 44 = 242 px a band, 3 × 242 / 0.8 = 907.5 → capped at 1.1 × 720.
    assert fit_box([10] * 30, 720) == pytest.approx((720.0, 792.0))
    assert FIT_ASPECT == (0.45, 1.1) and MIN_GAP["dy"] == 44.0 and MIN_GAP["dx"] == 46.0


def test_the_boundaries_boxes_keep_their_distance_from_the_last_column():
    # 20 columns of one anchor each in 720 px: a column is ~35 px wide, less than half a
    # boundary box and a dot; the boundaries' column gets ≥ 80 px.
    layer = {i: i for i in range(20)}
    edges = [(i, i + 1) for i in range(19)] + [(19, "SUCCESS"), (10, "FAILURE")]
    pos = layered_positions(layer, edges, width=720.0, height=300.0)
    last = max(x for it, (x, _) in pos.items() if isinstance(it, int))
    assert pos["SUCCESS"][0] - last >= 80.0 - 1e-9
    assert pos["SUCCESS"][0] == pos["FAILURE"][0] == pytest.approx(360.0)
    assert min(x for x, _ in pos.values()) == pytest.approx(-360.0)  # still fills the box


@pytest.fixture(scope="module")
def textworld():
    path = REPO / "sample_rollouts/textworld/textworld_cooking.jsonl.gz"
    return build_graph(load_rollouts(path).select_groups([9]))


def _body(page: str) -> str:
    return re.search(r"<body [^>]*>", page).group(0)


def _nodes(page: str) -> list:
    return json.loads(re.search(r"nodes = new vis\.DataSet\((\[.*?\])\);", page, flags=re.S).group(1))


def _edges(page: str) -> list:
    return json.loads(re.search(r"edges = new vis\.DataSet\((\[.*?\])\);", page, flags=re.S).group(1))


def test_a_fitted_page_carries_its_canvas_aspect(textworld):
    res = score(textworld, "crbc", backend="numpy")
    fixed = graph_drawing(textworld, res, height_px=620).html
    assert "data-crbc-fit='0'" in _body(fixed)
    fitted = graph_drawing(textworld, res, height_px=620, fit_canvas=True).html
    ratio = float(re.search(r"data-crbc-fit='([^']*)'", _body(fitted)).group(1))
    xs = [n["x"] for n in _nodes(fitted)]
    ys = [n["y"] for n in _nodes(fitted)]
    # The layout fills a FIT_WIDTH box (boundaries at its right edge) as tall as it needs;
    # the canvas's aspect is that box's with the room for labels around it.
    # (a column split into staggered sub-columns reaches a little past the box's left edge)
    assert FIT_WIDTH - 1e-6 <= max(xs) - min(xs) <= 1.1 * FIT_WIDTH
    w, h = FIT_WIDTH, max(ys) - min(ys)
    assert FIT_ASPECT[0] * w * 0.7 <= h <= FIT_ASPECT[1] * w
    assert ratio == pytest.approx((h + 70.0) / (w + 90.0), rel=0.2)
    assert 0.3 < ratio < 1.3


def test_labels_carry_what_the_page_shortens_them_to(textworld):
    page = graph_drawing(textworld, None, height_px=620, fit_canvas=True, show_action_labels=True).html
    anchors = [n for n in _nodes(page) if isinstance(n["id"], int)]
    lo = min(n["id"] for n in anchors)
    assert all(n["crbcShort"] == f"s{n['id'] - lo}" for n in anchors)
    labelled = [e for e in _edges(page) if e["label"]]
    assert labelled and all(e["font"]["align"] == "horizontal" for e in labelled)
