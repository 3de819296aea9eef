"""The Graph page's "Download this view as HTML": the button is there (disabled when the chosen
estimator cannot run on the group), and the page it serves is the chosen group under the chosen
estimator with the file's provenance. AppTest cannot fetch a deferred download, so the page is
built from the run's selection by the same function the button calls."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from crbc_viz.ui.share import view_page
from crbc_viz.ui.sidebar import _SEL

REPO = Path(__file__).resolve().parents[2]
LABEL = "Download this view as HTML"


def _button(at: AppTest):
    found = [b for b in at.get("download_button") if b.proto.label == LABEL]
    assert len(found) == 1, [b.proto.label for b in at.get("download_button")]
    return found[0].proto


def test_graph_page_downloads_the_chosen_view():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.selectbox(key="group_pick").select_index(3).run()
    label = at.sidebar.selectbox(key="group_pick").value  # the full name (shown shortened)
    at.sidebar.selectbox(key="estimator_pick").select("visit_local").run()
    assert not at.exception, [e.value for e in at.exception]
    b = _button(at)
    assert not b.disabled and b.ignore_rerun and b.deferred_file_id
    sel = at.session_state[_SEL]
    page = view_page(sel)
    assert page.startswith("<!doctype html>") and page.count("<iframe ") == 1
    assert "anchor graph, visit_local" in page
    prov = dict(re.findall(r"<tr data-crbc-prov='[^']*'><td>(.*?)</td><td>(.*?)</td></tr>", page))
    run, step, gid = label.split("/")
    assert (prov["run"], prov["train step"], prov["group"].split(" (")[0]) == (run, step, gid)
    assert prov["file"] == Path(sel.source.file).name and prov["read as"] == "canonical log (detected)"
    assert prov["file SHA-256"] == hashlib.sha256(Path(sel.source.file).read_bytes()).hexdigest()
    assert "params [visit_local]" in prov


def test_the_button_is_disabled_when_the_estimator_cannot_run():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    at.sidebar.selectbox(key="estimator_pick").select("trace").run()  # needs gold_logprob
    assert not at.exception, [e.value for e in at.exception]
    b = _button(at)
    assert b.disabled and "trace cannot run on this group" in b.help
