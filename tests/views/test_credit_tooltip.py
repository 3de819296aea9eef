"""The graph's tooltips say what their "credit" is: for CRBC the step credit
A^S = (Q − V) / max(σ(s), σ_min), gated — Q − V scaled, ten times Q − V at anchors where
σ(s) < σ_min — not Q − V. Numbers from ESTIMATORS.md §14.4 (toy group, β = 0.98, σ_min = 0.1)."""

from __future__ import annotations

import html
import json
import re

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz import teaching as T
from crbc_viz.views.graph_view import graph_html

NOTE = "credit = A<sup>S</sup> = (Q − V) / max(σ(s), σ<sub>min</sub> = 0.1)"


def titles(page: str) -> list[str]:
    """The tooltip HTML of every node and edge of a pyvis page."""
    out = []
    for name in ("nodes", "edges"):
        m = re.search(rf"{name} = new vis\.DataSet\((\[.*?\])\);", page, re.S)
        assert m, name
        out += [x["title"] for x in json.loads(m.group(1)) if "title" in x]
    return out


def test_crbc_tooltips_say_credit_is_scaled_q_minus_v():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    page = graph_html(graph, score(graph, "crbc", backend="numpy", beta=0.98), estimator="crbc")
    tips = titles(page)
    s0 = next(t for t in tips if t.startswith("<b>anchor s0</b>"))
    # §14.4: at s0, Q − V of a is +0.0070 and σ(s0) = 0.0070 < σ_min, so A^S = +0.0699.
    assert "<td>a</td><td>2</td><td>0.4706</td><td>+0.0699</td>" in s0
    assert NOTE in s0 and "fewer than 2 actions" in s0
    action_edges = [t for t in tips if t.startswith("<b>action</b>")]
    assert action_edges and all(NOTE in t for t in action_edges)


def test_other_estimators_name_their_own_step_credit():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    page = graph_html(graph, score(graph, "grpo", backend="numpy"), estimator="grpo")
    tips = titles(page)
    s0 = next(t for t in tips if t.startswith("<b>anchor s0</b>"))
    assert "credit = grpo's own step credit" in html.unescape(s0) and "σ" not in s0
