"""``python -m bench.timed_streamlit run app.py …``: Streamlit's CLI with every script run
timed on the server, for `bench.browser_bench`.

Each run (full or fragment) appends one JSON line to the file named by ``$CRBC_BENCH_RUNLOG``:
``{"start": wall-clock s, "wall": s, "cpu": s of the script thread's CPU time, "end": event,
"asked": wall-clock s}``, from Streamlit's own ``SCRIPT_STARTED`` event to the run's stop event
(success, fragment success, stopped for a rerun, compile error); ``asked``: when the server
received the last rerun request before the run started (None for a rerun the script asked
for). The app itself is not changed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from streamlit.runtime.scriptrunner import script_runner as _sr

_LOCK = threading.Lock()
_ASKED: dict[str, float] = {}  # session id: when its last rerun request arrived
_ENDS = {
    _sr.ScriptRunnerEvent.SCRIPT_STOPPED_WITH_SUCCESS,
    _sr.ScriptRunnerEvent.FRAGMENT_STOPPED_WITH_SUCCESS,
    _sr.ScriptRunnerEvent.SCRIPT_STOPPED_FOR_RERUN,
    _sr.ScriptRunnerEvent.SCRIPT_STOPPED_WITH_COMPILE_ERROR,
}


def _receiver(path: str):
    started: dict[int, tuple[float, float, float]] = {}

    def on_event(runner, event=None, **_kw) -> None:
        if event == _sr.ScriptRunnerEvent.SCRIPT_STARTED:
            asked = _ASKED.pop(getattr(runner, "_session_id", ""), None)
            started[id(runner)] = (time.time(), time.perf_counter(), time.thread_time(), asked)
        elif event in _ENDS and id(runner) in started:
            wall0, t0, c0, asked = started.pop(id(runner))
            row = {
                "asked": asked,
                "start": wall0,
                "wall": time.perf_counter() - t0,
                "cpu": time.thread_time() - c0,
                "end": str(event.name),
            }
            with _LOCK, open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    return on_event


def _install(path: str) -> None:
    init = _sr.ScriptRunner.__init__
    receiver = _receiver(path)

    def timed_init(self, *a, **kw):
        init(self, *a, **kw)
        self.on_event.connect(receiver, weak=False)

    _sr.ScriptRunner.__init__ = timed_init

    from streamlit.runtime.app_session import AppSession

    handle = AppSession.handle_backmsg

    def timed_handle(self, msg):
        if msg.WhichOneof("type") == "rerun_script":
            _ASKED[self.id] = time.time()
        return handle(self, msg)

    AppSession.handle_backmsg = timed_handle


def main() -> None:
    path = os.environ.get("CRBC_BENCH_RUNLOG")
    if path:
        _install(path)
    from streamlit.web.cli import main as cli

    sys.argv[0] = "streamlit"
    cli(prog_name="streamlit")


if __name__ == "__main__":
    main()
