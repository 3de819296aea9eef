"""Panels whose content is drawn only while they are open (AppTest): the sidebar's parameter
panel, the Graph page's anchor table and the Compare page's per-group and per-pair tables. A
closed panel sends nothing, so each run of every page sends and draws fewer elements (the
browser's time per click, `bench/browser_bench.py`); opened, it shows its content; closed
again, nothing it set is lost."""

from __future__ import annotations

from test_app import app, ok

from crbc_viz.ui.sidebar import PARAMS_OPEN

GRAPH = "crbc_viz/app/app_pages/graph.py"
COMPARE = "crbc_viz/app/app_pages/compare.py"


def _keys(at, kind: str) -> list:
    return [getattr(w, "key", None) for w in getattr(at, kind)]


def test_parameter_panel_draws_its_widgets_only_when_open():
    at = app()
    ok(at)
    assert not at.sidebar.number_input and not at.sidebar.select_slider and not at.sidebar.button
    at.session_state[PARAMS_OPEN] = True
    at.run()
    ok(at)
    assert "param.crbc.beta" in _keys(at.sidebar, "number_input")
    assert "param.crbc.depth" in _keys(at.sidebar, "select_slider")
    assert "reset.crbc" in _keys(at.sidebar, "button")


def test_graph_anchor_table_is_drawn_only_when_open():
    at = app()
    at.switch_page(GRAPH).run()
    ok(at)
    assert not at.dataframe  # no anchor chosen: the table is the page's only one
    at.session_state["graph_table_open"] = True
    at.run()
    ok(at)
    (table,) = at.dataframe
    n = int(at.session_state["_selection"].graph().num_nodes)
    assert list(table.value["anchor"]) == [f"s{i}" for i in range(n)]


def test_compare_tables_are_drawn_only_when_open():
    at = app()
    at.switch_page(COMPARE).run()
    ok(at)
    at.toggle(key="cmp_depth_open").set_value(True).run()
    ok(at)
    frames = len(at.dataframe)  # the disagreement table
    at.session_state["cmp_groups_open"] = True
    at.run()
    ok(at)
    assert len(at.dataframe) == frames + 1
    groups = at.dataframe[-1].value["group"]
    batch = at.session_state["_selection"].batch
    assert sorted(groups) == sorted(batch.group_labels())  # one row per group of the file
    at.session_state["cmp_pairs_open"] = True
    at.run()
    ok(at)
    assert len(at.dataframe) == frames + 2
    assert "N(s,a)" in at.dataframe[-1].value.columns
