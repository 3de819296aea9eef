"""The graph page's pyvis template is compiled once per process, not once per drawing, and the
page is the one pyvis's own per-drawing environment writes."""

from __future__ import annotations

from pathlib import Path

import jinja2

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.views import graph_view
from crbc_viz.views.graph_view import graph_html

TOY = Path(__file__).resolve().parents[2] / "sample_rollouts" / "toy" / "toy_group.jsonl"


def test_a_second_drawing_compiles_no_template_and_writes_the_same_page(monkeypatch):
    graph = build_graph(load_rollouts(TOY))
    res = score(graph, "crbc", backend="numpy")
    graph_html(graph, res, height_px=400)  # the process's first drawing may compile
    compiled = []
    real = jinja2.Environment.compile

    def counting(self, *a, **kw):
        compiled.append(a[1] if len(a) > 1 else kw.get("name"))
        return real(self, *a, **kw)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    shared = graph_html(graph, res, height_px=400, estimator="crbc")
    other = graph_html(graph, score(graph, "visit_local", backend="numpy"), height_px=400)
    assert compiled == [], compiled  # pyvis alone compiles its 4 templates on every drawing
    assert other != shared
    # pyvis's own environment (a new one, as pyvis makes per drawing) writes the same page.
    monkeypatch.setattr(
        graph_view, "pyvis_templates", lambda d: jinja2.Environment(loader=jinja2.FileSystemLoader(d))
    )
    assert graph_html(graph, res, height_px=400, estimator="crbc") == shared
    assert compiled  # the fresh environment did compile
