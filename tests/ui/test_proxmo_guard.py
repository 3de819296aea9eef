"""ProxMO's cost in a page view is bounded: its softmax compares every two distinct step texts of
a group, so a group of many texts that share words would hold the shared server for minutes. The
app refuses it past `PROXMO_MAX_PAIRS` (``$CRBC_VIZ_PROXMO_MAX_PAIRS``) with the reason in place
of the estimator's output; below the bound it runs as before."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from test_app import REPO, TIMEOUT, TOY, ok

from crbc_viz import build_graph
from crbc_viz.estimators.proxmo import similarity_pairs
from crbc_viz.result import CreditResult
from crbc_viz.teaching_rows import batch_from_rows
from crbc_viz.ui import pipeline


def _rows(group: str, texts: list[str], success: bool) -> list[dict]:
    return [
        {
            "group_id": group,
            "traj_id": f"{group}-r",
            "step_idx": i,
            "anchor_obs": t,
            "action": "go",
            "reward": float(success) if i == len(texts) - 1 else 0.0,
            "done": i == len(texts) - 1,
            "success": success,
        }
        for i, t in enumerate(texts)
    ]


@pytest.fixture
def graph():
    # group a: 2 distinct texts over 3 steps (4 pairs); group b: 3 distinct (9 pairs)
    rows = _rows("a", ["open door", "open door", "take key"], True)
    rows += _rows("b", ["open door", "go north", "take key", "go north"], False)
    rows += _rows("b", ["open door"], True)  # a second rollout of b, a text b already has
    for r in rows[-1:]:
        r["traj_id"] = "b-r2"
    return build_graph(batch_from_rows(rows))


def test_pairs_are_the_squared_distinct_texts_per_group(graph):
    pairs, g, texts = similarity_pairs(graph)
    assert (pairs, texts) == (2 * 2 + 3 * 3, 3)
    assert graph.batch.group_label(g).endswith("/b")


def test_refused_past_the_bound_with_the_numbers(graph, monkeypatch):
    monkeypatch.setenv(pipeline.ENV_PROXMO_MAX_PAIRS, "12")
    why = pipeline._score(graph, "proxmo", (), "numpy")
    assert isinstance(why, str)
    assert "13 pairs" in why and "3 distinct texts" in why and "/b'" in why
    assert "CRBC_VIZ_PROXMO_MAX_PAIRS" in why and "crbc-viz score --estimator proxmo computes it" in why
    assert isinstance(pipeline._score(graph, "crbc", (), "numpy"), CreditResult)  # others run
    monkeypatch.setenv(pipeline.ENV_PROXMO_MAX_PAIRS, "13")
    assert isinstance(pipeline._score(graph, "proxmo", (), "numpy"), CreditResult)


def test_a_bad_setting_is_named_not_a_traceback(graph, monkeypatch):
    monkeypatch.setenv(pipeline.ENV_PROXMO_MAX_PAIRS, "lots")
    why = pipeline._score(graph, "proxmo", (), "numpy")
    assert isinstance(why, str) and "CRBC_VIZ_PROXMO_MAX_PAIRS" in why and "'lots'" in why


@pytest.fixture
def fresh_caches():
    """The pages' results are cached by file, group, estimator and parameters, not by the
    server's settings (fixed while it runs): none from another test, none left to one."""
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()
    st.cache_data.clear()


def test_the_pages_show_the_refusal(monkeypatch, fresh_caches):
    monkeypatch.setenv(pipeline.ENV_PROXMO_MAX_PAIRS, "1")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["file"] = TOY
    at.query_params["estimator"] = "proxmo"
    at.run()
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    ok(at)
    shown = [w.value for w in at.warning] + [e.value for e in at.error] + [m.value for m in at.markdown]
    assert any("ProxMO compares every two distinct step texts" in s for s in shown), shown
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    at.toggle(key="cmp_all_open").set_value(True).run()
    ok(at)
    listed = [w.value for w in at.warning if "estimators cannot run on this group" in w.value]
    assert len(listed) == 1 and "**proxmo** cannot run: ProxMO compares every two" in listed[0], listed
