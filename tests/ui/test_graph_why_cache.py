"""The Graph page's "Why this number" panel of a clicked edge is built once per edge: the reruns
while the panel stays open reuse it (`crbc_viz.ui.pipeline.edge_why`)."""

from __future__ import annotations

from pathlib import Path

from crbc_viz.ui import files, pipeline
from crbc_viz.views import why

TOY = Path(__file__).resolve().parents[2] / "sample_rollouts" / "toy" / "toy_group.jsonl"


def test_an_open_panel_is_built_once_over_reruns(monkeypatch):
    calls = []
    real = why.edge_explanation

    def counted(graph, result, edge_id):
        calls.append(edge_id)
        return real(graph, result, edge_id)

    monkeypatch.setattr(why, "edge_explanation", counted)
    pipeline.edge_why.clear()
    digest, path = files.file_digest(TOY), str(TOY)
    graph = pipeline.group_graph(digest, path, 0)
    edge = f"x->y#{int(graph.step_edge[0])}"
    args = (digest, path, 0, "crbc", (), "numpy")
    panels = [pipeline.edge_why(*args, edge) for _ in range(3)]  # three reruns, the panel open
    assert calls == [edge]
    assert panels[0] and "crbc-why" in panels[0] and panels.count(panels[0]) == 3
    other = f"x->y#{int(graph.step_edge[-1])}t"
    pipeline.edge_why(*args, other)  # another edge gets its own panel
    assert calls == [edge, other]
    pipeline.edge_why.clear()


def test_the_graph_page_reruns_with_the_panel_open_build_it_once(monkeypatch):
    from streamlit.testing.v1 import AppTest

    calls = []
    real = why.edge_explanation
    monkeypatch.setattr(why, "edge_explanation", lambda g, r, e: calls.append(e) or real(g, r, e))
    pipeline.edge_why.clear()
    digest = files.file_digest(TOY)
    edge = f"x->y#{int(pipeline.group_graph(digest, str(TOY), 0).step_edge[0])}"
    at = AppTest.from_file(str(TOY.parents[2] / "app.py"), default_timeout=120)
    at.query_params["file"] = "sample_rollouts/toy/toy_group.jsonl"
    at.run()
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    at.session_state["crbc_events"] = {"pick": {"kind": "edge", "id": edge, "n": 1}}  # the click
    at.run()
    at.run()  # another rerun, the panel still open
    assert not at.exception, [e.value for e in at.exception]
    assert calls == [edge]
    pipeline.edge_why.clear()
