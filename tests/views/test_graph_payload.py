"""The graph's page carries only what a drawing uses: vis-network's style rules for the
manipulation toolbar, the configurator and the edit popup (never shown: editing and physics
are off) are dropped, ~175 KB of inline icons re-parsed on every redraw; the library itself
stays inline and nothing points at the network."""

from __future__ import annotations

import re

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz import teaching as T
from crbc_viz.views.graph_page import trim_vis_css
from crbc_viz.views.graph_view import graph_html


def _vis_css(page: str) -> str:
    return next(b for b in re.findall(r"<style[^>]*>(.*?)</style>", page, re.S) if "vis-network" in b)


def test_the_page_keeps_only_the_style_a_drawing_uses():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    page = graph_html(graph, score(graph, "crbc", backend="numpy"), estimator="crbc")
    css = _vis_css(page)
    for gone in ("vis-manipulation", "vis-edit-mode", "vis-configuration", "vis-close", "vis-color-picker"):
        assert gone not in css, gone
    # What a drawing shows keeps its style: the navigation buttons (each with its icon), the tooltip.
    for kept in (
        "vis-up",
        "vis-down",
        "vis-left",
        "vis-right",
        "vis-zoomIn",
        "vis-zoomOut",
        "vis-zoomExtends",
    ):
        assert re.search(
            r"div\.vis-navigation div\.vis-button\." + kept + r"\{[^}]*url\([\"']?data:image", css
        ), kept
    assert "div.vis-tooltip{" in css
    # pyvis's stylesheet is 220,163 characters; what is left is the navigation's icons and a few rules.
    assert len(css) < 50_000
    # The library stays inline; nothing reaches the network.
    assert "vis-network" in page and "new vis.Network(" in page
    assert not re.search(r"""(src|href)=["']https?:""", page)


def test_a_rule_goes_only_when_every_selector_in_it_is_unused():
    page = (
        "<html><head><style>div.vis-network div.vis-manipulation{a:1}"
        "div.vis-network div.vis-close,div.vis-tooltip{b:2}.vis-overlay{c:3}</style>"
        "<style>div.vis-manipulation{d:4}</style></head></html>"
    )
    assert trim_vis_css(page) == (
        "<html><head><style>div.vis-network div.vis-close,div.vis-tooltip{b:2}.vis-overlay{c:3}</style>"
        "<style>div.vis-manipulation{d:4}</style></head></html>"
    )
    assert trim_vis_css("<p>no style</p>") == "<p>no style</p>"
