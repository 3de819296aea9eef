"""The graph page's smallest label (``min_label_px``) and its projector page, without a browser:
the page carries the minimum its script applies at the first fit, a bad value is refused by
name, and the projector page sets its legend, tools and tooltips at 16 px."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crbc_viz import build_graph, load_rollouts
from crbc_viz.views.graph_view import graph_html
from crbc_viz.views.projector import PROJECTOR_MIN_FONT, projector_graph_page

TOY = Path(__file__).resolve().parents[2] / "sample_rollouts/toy/toy_group.jsonl"


@pytest.fixture(scope="module")
def graph():
    return build_graph(load_rollouts(TOY))


def _min_label(page: str) -> str:
    return re.search(r"<body [^>]*data-crbc-min-label='([^']*)'", page).group(1)


def test_the_page_carries_its_smallest_label(graph):
    assert _min_label(graph_html(graph)) == "10"
    assert _min_label(graph_html(graph, min_label_px=16)) == "16"
    assert _min_label(graph_html(graph, min_label_px=0)) == "0"  # 0: labels as drawn


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "16", True])
def test_a_bad_smallest_label_is_refused_by_name(graph, bad):
    with pytest.raises(ValueError, match="min_label_px"):
        graph_html(graph, min_label_px=bad)


def test_projector_page_legend_tools_and_tooltips_at_16px(graph):
    page = graph_html(graph, min_label_px=PROJECTOR_MIN_FONT)
    big = projector_graph_page(page)
    head = big[: big.index("</head>")]
    for selector in ("#crbc-head", "#crbc-tools button", "div.vis-tooltip"):
        rule = re.search(re.escape(selector) + r"[^{]*\{([^}]*)\}", head[head.rindex("<style>") :])
        assert rule and f"font-size: {PROJECTOR_MIN_FONT}px !important" in rule.group(1), selector
    assert big.replace(head, "") == page.replace(page[: page.index("</head>")], "")  # only the head grows
    with pytest.raises(ValueError, match="</head>"):
        projector_graph_page("<html><body>not a graph page</body></html>")
