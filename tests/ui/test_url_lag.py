"""A run whose query string is one this session wrote a few runs ago, and that is not a Back /
Forward step, comes from a browser that had not yet shown the latest write (a slider pressed
again while the last press's run ended): the press wins, the stale link is not applied. A link
this session never wrote is applied as before. (A full run of the browser walk once lost a
press this way: ``rr_lucky`` stayed 2 after three presses.)"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from test_app import REPO, TIMEOUT, ok


def _lesson5() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["lesson"] = "5"
    at.run()
    at.switch_page("crbc_viz/app/app_pages/learn.py").run()
    ok(at)
    return at


def _browser_shows(at: AppTest, query: dict) -> None:
    for k in list(at.query_params):
        del at.query_params[k]
    for k, v in query.items():
        at.query_params[k] = v


def _press(at: AppTest, key: str, value: int) -> None:
    at.slider(key=key).set_value(value).run()
    ok(at)


def test_a_press_is_not_undone_by_a_link_the_browser_has_not_updated():
    at = _lesson5()
    _press(at, "learn_rr_lucky", 2)
    one_behind = dict(at.query_params)
    assert one_behind["rr_lucky"] == "2"
    _press(at, "learn_rr_lucky", 3)
    two_behind_and_one = dict(at.query_params)
    _browser_shows(at, one_behind)  # the browser still shows the URL of the press before
    _press(at, "learn_rr_lucky", 4)
    assert at.slider(key="learn_rr_lucky").value == 4 and at.query_params["rr_lucky"] == "4"
    _browser_shows(at, one_behind)  # two writes behind now
    _press(at, "learn_rr_lucky", 1)  # back to the default: the link drops the field
    assert at.slider(key="learn_rr_lucky").value == 1 and "rr_lucky" not in at.query_params
    _browser_shows(at, two_behind_and_one)
    _press(at, "learn_rr_jump", 5)
    assert at.slider(key="learn_rr_jump").value == 5 and at.query_params["rr_jump"] == "5"
    assert at.slider(key="learn_rr_lucky").value == 1  # the stale rr_lucky=3 was not applied


def test_a_link_this_session_never_wrote_is_applied():
    at = _lesson5()
    _press(at, "learn_rr_lucky", 2)
    _browser_shows(at, {**dict(at.query_params), "rr_jump": "6"})  # a link opened in place
    at.run()
    ok(at)
    assert at.slider(key="learn_rr_jump").value == 6 and at.slider(key="learn_rr_lucky").value == 2
