"""Lesson 4's Play through `streamlit.testing.v1.AppTest`: each step of K is taken before the K
control and the Play toggle are drawn (setting a drawn widget's state stops the page), the link
follows K, and Play stops at the closure (K = ∞). Its clock runs in the page (a browser test
times it: tests/e2e/test_no_traceback.py); here each step's trigger is set by hand."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from crbc_viz.ui.pipeline import LEARN_KMAX

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120


def tick(at: AppTest) -> AppTest:
    """What Play's clock in the page does (`crbc_viz.ui.links.stack_keeper`): its trigger's
    callback marks the run it starts as a step."""
    at.session_state["_learn_play_tick"] = True
    return at.run()


def test_play_steps_k_to_the_closure_and_stops():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["lesson"] = "4"
    at.query_params["lk"] = str(LEARN_KMAX - 1)  # two steps from ∞
    at.switch_page("crbc_viz/app/app_pages/learn.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.select_slider(key="learn_k").value == str(LEARN_KMAX - 1)
    at.toggle(key="learn_play").set_value(True).run()
    # The server never steps on its own: the page's clock asks for each step.
    assert at.select_slider(key="learn_k").value == str(LEARN_KMAX - 1)
    tick(at)
    assert at.select_slider(key="learn_k").value == str(LEARN_KMAX)
    assert at.toggle(key="learn_play").value is True
    tick(at)
    assert not at.exception, [e.value for e in at.exception]
    assert at.select_slider(key="learn_k").value == "∞"
    assert at.toggle(key="learn_play").value is False  # Play stops at the closure
    assert at.query_params["lk"] == "∞"
    tick(at)  # a tick that comes after Play stopped steps nothing
    assert at.select_slider(key="learn_k").value == "∞"
    assert not at.error


def test_a_tick_after_play_was_turned_off_steps_nothing():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["lesson"] = "4"
    at.query_params["lk"] = "3"
    at.switch_page("crbc_viz/app/app_pages/learn.py")
    at.run()
    at.toggle(key="learn_play").set_value(True).run()
    tick(at)
    assert at.select_slider(key="learn_k").value == "4"
    at.toggle(key="learn_play").set_value(False).run()
    tick(at)
    assert at.select_slider(key="learn_k").value == "4"
    assert not at.exception, [e.value for e in at.exception]
