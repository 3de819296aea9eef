"""Lesson 4's Play through `streamlit.testing.v1.AppTest`: each step of K is taken before the K
control and the Play toggle are drawn (setting a drawn widget's state stops the page), the link
follows K, and Play stops at the closure (K = ∞)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from crbc_viz.ui.pipeline import LEARN_KMAX

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120


def test_play_steps_k_to_the_closure_and_stops():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["lesson"] = "4"
    at.query_params["lk"] = str(LEARN_KMAX - 1)  # two steps from ∞: the run stays short
    at.switch_page("crbc_viz/app/app_pages/learn.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.select_slider(key="learn_k").value == str(LEARN_KMAX - 1)
    # The run returns when Play has stopped: K - 1 → K → ∞, one rerun a second.
    at.toggle(key="learn_play").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.select_slider(key="learn_k").value == "∞"
    assert at.toggle(key="learn_play").value is False
    assert at.query_params["lk"] == "∞"
    assert not at.error
