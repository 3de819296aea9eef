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


def test_play_steps_come_a_second_apart_however_long_a_run_takes(monkeypatch):
    """Play's pause is what is left of its second after the step's run began (it was a full
    second after the run: a run of 0.3 s made steps 1.3 s apart), and none past it."""
    import time

    from crbc_viz.ui import links

    calls: list = []
    monkeypatch.setattr(links.view, "sync_out", lambda: calls.append("url"))
    monkeypatch.setattr(links.st, "rerun", lambda: calls.append("rerun"))
    monkeypatch.setattr(time, "sleep", calls.append)
    links.pause_then_rerun(1.0, since=time.monotonic() - 0.3)
    assert calls[0] == "url" and calls[2] == "rerun" and len(calls) == 3
    assert 0.6 < calls[1] <= 0.7, calls  # 1 s − the 0.3 s the run took (− the call itself)
    calls.clear()
    links.pause_then_rerun(1.0, since=time.monotonic() - 1.4)  # a run longer than the second
    assert calls == ["url", "rerun"]
    calls.clear()
    links.pause_then_rerun(1.0)  # no start given: the whole second, as before
    assert calls == ["url", 1.0, "rerun"]
