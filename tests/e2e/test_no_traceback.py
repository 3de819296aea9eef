"""No traceback reaches a browser, in a real `streamlit run app.py` driven by Debian's headless
Chromium (Playwright's Python package, never `playwright install`).

The server is started by a small launcher that plants two failures before handing over to
Streamlit's own command line: the Estimators page's ``specs()`` raises (an exception inside a
page body), and ``view.sync_in`` raises for ``?crash=outside`` (an exception before any page
runs, outside the app's guard). Both messages carry a server path. The browser must show a short
message and no path, source line, exception type or "Traceback"; the server log must hold the
details. Also here: a link's refused parameter is a visible warning, and lesson 4's Play moves K.
Screenshots go to ``test-output/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from crbc_viz.views.learn import CLOSURE_COLUMN
from streamlit_server import CHROMIUM, WAIT_MS, _healthy, app_idle, free_port, stop_server

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
PLANTED = "planted failure in /work/secret/planted_module.py, line 7"
#: What no page may show: server paths, source files, the traceback header, the exception.
LEAKS = ("/work", ".py", "Traceback", "RuntimeError", "planted")

LAUNCHER = f'''
import sys

sys.path.insert(0, {str(REPO)!r})  # this checkout's package, as ``python -m streamlit`` from REPO

import streamlit as st

import crbc_viz.views.reference as reference
from crbc_viz.ui import view


def planted_specs(*args, **kwargs):
    raise RuntimeError({PLANTED!r})


_sync_in = view.sync_in


def planted_sync_in():
    if st.query_params.get("crash") == "outside":
        raise RuntimeError({PLANTED!r} + " (outside the guard)")
    return _sync_in()


reference.specs = planted_specs
view.sync_in = planted_sync_in

from streamlit.web.cli import main

sys.exit(main())
'''

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, server log path) of the app started through the planting launcher."""
    OUT.mkdir(exist_ok=True)
    launcher = tmp_path_factory.mktemp("launcher") / "launch.py"
    launcher.write_text(LAUNCHER)
    log_path = OUT / "streamlit-no-traceback-server.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(launcher), "run", "app.py", "--server.address", "127.0.0.1"]
            + ["--server.port", str(port), "--server.headless", "true", "--server.fileWatcherType", "none"]
            + ["--browser.gatherUsageStats", "false"],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            try:
                proc.wait(timeout=0.25)  # bounded wait between polls; returns early if it exits
            except subprocess.TimeoutExpired:
                pass
        yield url, log_path
    finally:
        stop_server(proc)


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1600})
    pg = ctx.new_page()
    try:
        yield pg
    finally:
        ctx.close()


def body_text(pg) -> str:
    return pg.locator("body").inner_text()


def test_exception_in_a_page_shows_a_short_message_and_no_path(server, page):
    url, log_path = server
    page.goto(f"{url}/estimators")
    page.get_by_text("Something went wrong on this page; details are in the server log").wait_for(
        timeout=WAIT_MS
    )
    app_idle(page)
    text = body_text(page)
    assert not [s for s in LEAKS if s in text], text
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(OUT / "no_traceback_page.png"), full_page=True)
    log = log_path.read_text(errors="replace")
    assert PLANTED in log and "Traceback" in log  # the details are on the server


def test_exception_outside_the_guard_is_redacted(server, page):
    url, log_path = server
    page.goto(f"{url}/?crash=outside")
    page.locator("[data-testid='stException']").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    text = body_text(page)
    assert not [s for s in LEAKS if s in text], text
    page.screenshot(path=str(OUT / "no_traceback_outside.png"), full_page=True)
    assert PLANTED + " (outside the guard)" in log_path.read_text(errors="replace")


def test_refused_link_parameter_is_a_visible_warning(server, page):
    url, _ = server
    q = urllib.parse.urlencode({"estimator": "gigpo", "p": "similarity_thresh=1e-300;gamma=2;omega=nan"})
    page.goto(f"{url}/?{q}")
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.locator("[data-testid='stAlertContentWarning']").nth(1).wait_for(timeout=WAIT_MS)
    app_idle(page)
    warnings = sidebar.locator("[data-testid='stAlertContentWarning']").all_inner_texts()
    assert len(warnings) == 2, warnings
    assert any("'gamma'" in w and "2.0" in w and "[0, 1]" in w and "default 0.95" in w for w in warnings)
    assert any("'omega'" in w and "NaN" in w for w in warnings)
    sidebar.get_by_text("Parameters of gigpo").click()
    field = sidebar.get_by_role("spinbutton", name="similarity_thresh")
    field.wait_for(timeout=WAIT_MS)
    assert field.input_value() == "1e-300"  # the registry's (0, 1) holds it: shown as given
    page.screenshot(path=str(OUT / "refused_link_parameter.png"), full_page=True)


#: On every animation frame of the page: K as the slider shows it, and which drawing of lesson 4's
#: graph is in view: the top-most layer of the graph's stack that is neither see-through (its
#: page hidden until drawn, no document yet, the empty layer) nor undrawn; 0 when none is.
_PLAY_FRAMES_JS = """() => { window.__crbcFrames = []; const look = () => {
  const t = document.querySelector('.st-key-learn_k [data-testid="stSliderThumbValue"]');
  const ws = Array.from(document.querySelectorAll('.st-key-learn_graph_stack > *'));
  ws.sort((a, b) => (+getComputedStyle(b).zIndex || 0) - (+getComputedStyle(a).zIndex || 0));
  let shown = 0;
  for (const w of ws) {
    const f = w.querySelector('iframe'); const d = f && f.contentDocument; const b = d && d.body;
    if (!b || b.hasAttribute('data-crbc-blank') || d.defaultView.getComputedStyle(b).visibility === 'hidden') continue;
    const m = d.querySelector("meta[name='crbc-layer']");
    shown = b.getAttribute('data-crbc-ready') === '1' && m ? 1 + (+m.content) : 0;
    break;
  }
  window.__crbcFrames.push([performance.now(), t ? t.textContent : null, shown]);
  requestAnimationFrame(look); }; requestAnimationFrame(look); }"""


def test_play_in_lesson_4_moves_k_to_the_closure(server, page):
    """Play steps K to the closure, once a second, never ahead of the drawing: in every frame
    a drawn graph is in view (its layers swap without a blank or half-drawn canvas), never an
    older drawing than one already shown, and each step's drawing is shown before the next K."""
    url, _ = server
    page.goto(f"{url}/learn?lesson=4&lk=17")
    page.get_by_role("heading", name="4. Bellman backup").wait_for(timeout=WAIT_MS)
    page.frame_locator("iframe").first.locator("body[data-crbc-ready='1']").wait_for(
        state="attached", timeout=WAIT_MS
    )
    app_idle(page)
    page.evaluate(_PLAY_FRAMES_JS)
    play = page.get_by_role("switch", name="Play")
    page.locator("[data-testid='stCheckbox']").filter(has=play).locator("label").click()
    for k in ("18", "19", "20", "∞"):  # one backup per second; the URL follows K
        page.wait_for_function(
            "k => new URLSearchParams(location.search).get('lk') === k", arg=k, timeout=WAIT_MS
        )
    app_idle(page)
    page.wait_for_function(
        "() => { const f = window.__crbcFrames; return f.length && f[f.length - 1][2] > 0; }", timeout=WAIT_MS
    )
    frames = page.evaluate("() => window.__crbcFrames")
    assert len(frames) > 30, frames
    blank = [f for f in frames if f[2] == 0]
    assert not blank, f"{len(blank)} of {len(frames)} frames show no drawn graph: {blank[:5]}"
    shown = [f[2] for f in frames]
    assert all(b >= a for a, b in zip(shown, shown[1:])), "an older drawing came back into view"
    steps = [(t, k) for (t, k, _), (_, k0, _) in zip(frames[1:], frames) if k != k0]
    assert [k for _, k in steps] == ["18", "19", "20", "∞"], steps
    ticks = page.evaluate("() => window.__crbcStack.ticks")
    assert len(ticks) >= 4, ticks
    gaps = [(b - a) / 1000 for a, b in zip(ticks, ticks[1:])]
    assert min(gaps) >= 1.0 - 1e-3, gaps  # Play's clock asks for a step once a second, never faster
    for (t0, _), (t1, _) in zip(steps, steps[1:]):
        # Each K's drawing came into view before the next K: Play never ran ahead of the graph.
        before = max(v for t, _, v in frames if t < t0)
        assert any(v > before for t, _, v in frames if t0 <= t < t1), (t0, t1, before)
    # The closure's column heads the table: "A at K = ∞ (closure) at the … pairs"
    page.get_by_text(f"{CLOSURE_COLUMN} at the", exact=False).first.wait_for(timeout=WAIT_MS)
    assert not play.is_checked()  # Play stops at the closure
    assert page.locator("[data-testid='stException']").count() == 0
    assert "Something went wrong" not in body_text(page)
    page.screenshot(path=str(OUT / "learn_lesson4_play.png"), full_page=True)
