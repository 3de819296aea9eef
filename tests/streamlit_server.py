"""Start and stop a real ``streamlit run app.py`` for the browser tests and benchmarks.

Readiness is polled on ``/_stcore/health`` in a bounded loop (no fixed sleeps).
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
    "wait_until",
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
):
    """Start the app; return (process, base URL) once ``/_stcore/health`` answers 200.

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
            "streamlit",
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
        cwd=REPO,
        env={**os.environ, **(env or {})},
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
def streamlit_server(env: dict | None = None, log_path=None):
    proc, url = start_server(env=env, log_path=log_path)
    try:
        yield url
    finally:
        stop_server(proc)


#: Streamlit's own ready state: no status widget ("Running..."), no skeleton, and no element left
#: stale by a script run in progress (the frontend marks the previous run's elements
#: ``data-stale="true"`` from the moment a rerun starts until the new run replaces them).
IDLE_JS = (
    "() => !document.querySelector('[data-testid=\"stStatusWidget\"]') && "
    "document.querySelectorAll('[data-testid=\"stSkeleton\"]').length === 0 && "
    "document.querySelectorAll('[data-stale=\"true\"]').length === 0"
)


def app_idle(pg, timeout_ms: int = WAIT_MS) -> None:
    """Wait until Streamlit reports the script run finished (its status widget is gone, no
    skeleton and no stale element is left) — the app's own ready state, no sleeps."""
    pg.wait_for_selector("[data-testid='stApp']", timeout=timeout_ms)
    pg.wait_for_function(IDLE_JS, timeout=timeout_ms)


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
