"""Start and stop a real ``streamlit run app.py`` for the browser tests and benchmarks.

Readiness is polled on ``/_stcore/health`` in a bounded loop (no fixed sleeps). A page's
script runs are followed on its websocket (`RunTracker`: the rerun requests the browser sends,
the run starts and ends the server sends), so `app_idle` cannot mistake the page as it was
before an action's rerun started for the page after it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

__all__ = [
    "free_port",
    "start_server",
    "stop_server",
    "streamlit_server",
    "app_idle",
    "rerun",
    "RunTracker",
    "track",
    "track_browser",
    "wait_until",
    "click_node",
    "steady_node_point",
    "draw_anyway",
    "REPO",
    "WAIT_MS",
    "CHROMIUM",
    "CHROMIUM_ARGS",
]

#: Longest wait for one browser condition (ms).
WAIT_MS = 90_000
#: Debian's Chromium (installed by `make browser-deps`) and the flags every browser test launches it with.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def start_server(
    port: int | None = None,
    env: dict | None = None,
    timeout: float = 60.0,
    log_path: str | os.PathLike | None = None,
    module: str = "streamlit",
    cwd: str | os.PathLike | None = None,
):
    """Start the app; return (process, base URL) once ``/_stcore/health`` answers 200.
    ``module``: what ``python -m`` runs with ``run app.py …`` (a wrapper of Streamlit's CLI,
    such as the benchmark's run timer, may take its place). ``cwd``: the checkout whose
    ``app.py`` runs (default: this one); its ``crbc_viz`` is imported ahead of any installed one.

    Raises:
        RuntimeError: the server exited or did not become healthy within ``timeout`` seconds
            (its log is included).
    """
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            module,
            "run",
            "app.py",
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        cwd=cwd or REPO,
        env={
            **os.environ,
            **(
                {"PYTHONPATH": os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")]))}
                if cwd
                else {}
            ),
            **(env or {}),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _healthy(url):
            return proc, url
        try:
            proc.wait(timeout=0.25)  # bounded wait between polls; returns early if it exits
        except subprocess.TimeoutExpired:
            pass
    tail = Path(log_path).read_text(errors="replace")[-3000:] if log_path else ""
    stop_server(proc)
    raise RuntimeError(
        f"streamlit did not become healthy at {url} within {timeout:.0f}s "
        f"(exit code {proc.returncode}).\n{tail}"
    )


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def streamlit_server(env: dict | None = None, log_path=None, module: str = "streamlit", cwd=None):
    proc, url = start_server(env=env, log_path=log_path, module=module, cwd=cwd)
    try:
        yield url
    finally:
        stop_server(proc)


#: Streamlit's own ready state: the app connected and its script not running
#: (``data-test-script-state``), no status widget ("Running..."), no skeleton, and no element
#: left stale by a script run in progress (the frontend marks the previous run's elements
#: ``data-stale="true"`` from the moment a rerun starts until the new run replaces them).
IDLE_JS = (
    "() => { const app = document.querySelector('[data-testid=\"stApp\"]'); "
    "return !!app && app.getAttribute('data-test-connection-state') === 'CONNECTED' && "
    "app.getAttribute('data-test-script-state') === 'notRunning' && "
    "!document.querySelector('[data-testid=\"stStatusWidget\"]') && "
    "document.querySelectorAll('[data-testid=\"stSkeleton\"]').length === 0 && "
    "document.querySelectorAll('[data-stale=\"true\"]').length === 0; }"
)
#: How often a wait looks again at a condition it cannot be told about (ms).
POLL_MS = 25
#: A page counts as idle when it is so at two looks this far apart with no script-run message
#: between them: a rerun request a click has just sent reaches the websocket listener a moment
#: after the click returns (ms).
SETTLE_MS = 60


class RunTracker:
    """The script runs of one page, read from Streamlit's own messages on its websocket: the
    rerun requests the browser sends (``BackMsg.rerun_script``, a widget change, a page link,
    a fragment's timer, the first run of a page load) and the run starts and ends the server
    sends (``ForwardMsg.new_session``, ``ForwardMsg.script_finished``).

    ``finished``: runs finished so far (full or fragment; a run stopped early for a rerun is
    not counted). Attach it before the page opens its websocket (`track`, `track_browser`)."""

    def __init__(self, pg):
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self._back, self._fwd = BackMsg, ForwardMsg
        self._early = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_EARLY_FOR_RERUN")
        self.seq = 0  # every message below, in the order the browser saw them
        self.sent = self.started = self.ended = 0  # the seq of the last of each
        self.stopped_early = False
        self.finished = 0
        self.sockets = 0
        pg.on("websocket", self._socket)

    def _socket(self, ws) -> None:
        if "_stcore/stream" not in ws.url:
            return
        self.sockets += 1
        ws.on("framesent", self._on_sent)
        ws.on("framereceived", self._on_received)

    def _parse(self, cls, payload):
        if isinstance(payload, str):
            return None
        msg = cls()
        try:
            msg.ParseFromString(payload)
        except Exception:  # not one of Streamlit's messages
            return None
        return msg.WhichOneof("type"), msg

    def _on_sent(self, payload) -> None:
        kind = self._parse(self._back, payload)
        if kind and kind[0] == "rerun_script":
            self.seq += 1
            self.sent = self.seq

    def _on_received(self, payload) -> None:
        kind = self._parse(self._fwd, payload)
        if not kind:
            return
        if kind[0] == "new_session":
            self.seq += 1
            self.started = self.seq
        elif kind[0] == "script_finished":
            self.seq += 1
            self.ended = self.seq
            self.stopped_early = kind[1].script_finished == self._early
            self.finished += 0 if self.stopped_early else 1

    def idle(self, since: int | None = None) -> bool:
        """No run in progress or asked for, and (``since``: a `finished` count read before an
        action) a run finished after it."""
        if since is not None and self.finished <= since:
            return False
        return self.ended > max(self.sent, self.started) and not self.stopped_early


def track(pg) -> RunTracker:
    """The page's `RunTracker`, attached now if it has none (before its first ``goto``)."""
    tr = getattr(pg, "_crbc_runs", None)
    if tr is None:
        tr = RunTracker(pg)
        pg._crbc_runs = tr
    return tr


def track_browser(br):
    """Make every page ``br`` opens (``br.new_page()``, ``br.new_context().new_page()``) carry
    a `RunTracker` from its start. Returns ``br``."""

    def tracked(ctx):
        ctx.on("page", track)
        return ctx

    new_context, new_page = br.new_context, br.new_page
    br.new_context = lambda *a, **kw: tracked(new_context(*a, **kw))

    def page(*a, **kw):
        pg = new_page(*a, **kw)
        track(pg)  # the "page" event of its own context has already fired
        return pg

    br.new_page = page
    return br


def _idle_now(pg, tr, since) -> bool:
    try:
        return (tr is None or tr.idle(since)) and bool(pg.evaluate(IDLE_JS))
    except Exception:  # the page is navigating: its document is being replaced
        return False


def app_idle(pg, timeout_ms: int = WAIT_MS, since: int | None = None) -> None:
    """Wait until Streamlit reports the script run finished — the app's own ready state, no
    sleeps: on a tracked page (`track`), no rerun the browser asked for is still to start or
    to finish; Streamlit's script state is "notRunning"; no status widget, skeleton or stale
    element is left; and so at two looks `SETTLE_MS` apart with no run message in between.
    ``since``: a `RunTracker.finished` count read before an action: wait for a run finished
    after it, too (`rerun` does this around an action).

    Raises:
        AssertionError: not idle within ``timeout_ms`` (what was seen is named).
    """
    tr = getattr(pg, "_crbc_runs", None)
    if tr is not None and not tr.sockets:
        tr = None  # attached after the page connected: its messages are not seen
    deadline = time.monotonic() + timeout_ms / 1000
    pg.wait_for_selector("[data-testid='stApp']", timeout=timeout_ms)
    while True:
        if _idle_now(pg, tr, since):
            seq = tr.seq if tr is not None else None
            pg.wait_for_timeout(SETTLE_MS)  # events are delivered while it waits
            if _idle_now(pg, tr, since) and (tr is None or tr.seq == seq):
                return
        elif tr is not None and tr.idle(since):
            # Only the page is still drawing: let the browser tell us when it is done.
            left = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                pg.wait_for_function(IDLE_JS, timeout=min(left, 2000))
            except Exception:  # not yet (or navigating): look again below
                pass
            continue
        if time.monotonic() > deadline:
            state = vars(tr) if tr is not None else "untracked"
            raise AssertionError(f"the app was not idle within {timeout_ms / 1000:.0f} s ({state})")
        pg.wait_for_timeout(POLL_MS)  # the polling interval; websocket events arrive meanwhile


@contextmanager
def rerun(pg, timeout_ms: int = WAIT_MS):
    """``with rerun(pg): <an action>`` waits, after the action, for a script run that finished
    after it, then for the app to be idle (`app_idle`): never the page as it was before.
    The page must be tracked (`track`, `track_browser`); an action that starts no run times
    out."""
    tr = getattr(pg, "_crbc_runs", None)
    if tr is None or not tr.sockets:
        raise RuntimeError("rerun() needs a page tracked before it opened the app (track, track_browser)")
    before = tr.finished
    yield
    app_idle(pg, timeout_ms, since=before)


def wait_until(pg, check, what: str, timeout_ms: int = WAIT_MS):
    """Poll ``check()`` on an idle app until it returns something truthy, and return that.

    An action's rerun (or the parse child behind an upload) can start after ``app_idle`` first
    sees the page idle, so a test waits on the condition it means to assert, not on the first
    render. Raises ``AssertionError`` naming ``what`` and the last value seen on timeout.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        app_idle(pg, timeout_ms)
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so within {timeout_ms / 1000:.0f} s (last seen: {last!r})")
        pg.wait_for_timeout(100)  # the polling interval between two checks of the condition


def steady_node_point(pg, frame, canvas, node_id, timeout_ms: int = WAIT_MS) -> tuple[float, float]:
    """Where node ``node_id`` of the graph in ``frame`` is on the page, once it stays there for
    two looks 100 ms apart (a canvas that follows the drawing's height can still be resizing, or
    refitting, right after it is first drawn): the point a click on it must use."""
    last: list = [None]

    def probe():
        at = frame.evaluate("(id) => network.canvasToDOM(network.getPositions([id])[id])", node_id)
        box = canvas.bounding_box()
        now = (round(box["x"] + at["x"], 1), round(box["y"] + at["y"], 1)) if box and at else None
        same = now is not None and now == last[0]
        last[0] = now
        return now if same else None

    return wait_until(pg, probe, f"node {node_id} keeps its place on screen", timeout_ms)


#: Records, in the graph's frame, the nodes each click of vis-network's hit (installed once).
_CLICK_LOG = """() => {
  if (!window.__crbcClickLog) {
    window.__crbcClickLog = [];
    network.on("click", (p) => window.__crbcClickLog.push((p.nodes || []).map(String)));
  }
  return window.__crbcClickLog.length;
}"""


def click_node(pg, frame, canvas, node_id, took_effect, what: str, tries: int = 3, timeout_ms: int = WAIT_MS):
    """Click node ``node_id`` of the graph in ``frame`` as a person does (the mouse, at the point
    where the node stays on screen) and return ``took_effect()`` once it is truthy
    (`wait_until`).

    The page around a drawing can still move between the look and the click (a note appearing
    above the frame on a busy machine): a click that vis-network saw land on no node, or on
    another one, is a miss, and the node is looked up and clicked again (``tries`` clicks in
    all). A click that hit the node and did nothing fails with ``what``: that is the app's
    fault, never retried."""
    hits: list = []
    for _ in range(tries):
        seen = frame.evaluate(_CLICK_LOG)
        pg.mouse.click(*steady_node_point(pg, frame, canvas, node_id, timeout_ms))
        try:
            pg.wait_for_timeout(200)  # vis-network reports a click after the mouse is up
            hits = frame.evaluate("() => window.__crbcClickLog")[seen:]
        except Exception:  # the frame was replaced: the click took effect
            hits = None
        if hits is None or any(str(node_id) in h for h in hits):
            return wait_until(pg, took_effect, what, timeout_ms)
    raise AssertionError(f"{tries} clicks at node {node_id} never landed on it (vis-network saw {hits!r})")


def draw_anyway(pg, timeout_ms: int = WAIT_MS) -> bool:
    """On the Graph page of a group whose credit is all 0 for a reason the data explains (no
    success, ...), the page says why and keeps the graph in a "Draw the graph anyway" expander:
    open it (a no-op on any other group). Returns whether it was there."""
    app_idle(pg, timeout_ms)
    summary = pg.locator("[data-testid='stExpander'] summary", has_text="Draw the graph anyway")
    if not summary.count():
        return False
    summary.first.click()
    app_idle(pg, timeout_ms)
    return True
