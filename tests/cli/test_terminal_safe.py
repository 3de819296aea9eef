"""Every text a command prints from data or paths goes through the one terminal-safe function
(`crbc_viz.safetext.term`): a run id, group id, trajectory id, action or file name holding ESC
sequences (CSI, an OSC window title ended by BEL), a C1 control, U+202E and a newline is shown
escaped by every command (score, info, ingest and its --watch lines, export, trends,
drop-incomplete, argparse's own error line), and a command that fails prints exactly one
``error:`` line (a newline in a file name forges no second one)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT

#: What a hostile name holds: CSI (clear screen), OSC (window title) ended by BEL, a C1 control
#: (the 8-bit OSC), a right-to-left override, and a newline that would start a forged line.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9d\u202e\nerror: forged"
RAW = ("\x1b", "\x07", "\x9d", "\u202e")


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def check(r: subprocess.CompletedProcess, *, fails: bool) -> str:
    out = r.stdout + r.stderr
    assert not [c for c in RAW if c in out], (r.args, out)
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if re.match(r"(crbc-viz[\w -]*: )?error:", line)]
    if fails:
        assert r.returncode == 2 and len(errors) == 1, out
    else:
        assert r.returncode == 0 and not errors, out
    return out


def hostile_log(folder: Path, name: str = "log") -> Path:
    rows = [
        {
            "run_id": "run" + HOSTILE,
            "train_step": 0,
            "group_id": "g" + HOSTILE,
            "traj_id": f"t{t}" + HOSTILE,
            "step_idx": s,
            "anchor_obs": f"o{s}",
            "action": "a" + HOSTILE,
            "reward": float(t == 0 and s == 1),
            "done": s == 1,
            "advantage": 0.5,
        }
        for t in range(2)
        for s in range(2)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / (name + HOSTILE + ".jsonl")
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_every_command_prints_hostile_ids_and_names_escaped(tmp_path):
    f = hostile_log(tmp_path)
    store = str(tmp_path / ("S" + HOSTILE))
    out = check(cli("ingest", str(f), "--store", store, "-q"), fails=False)
    assert "\\x1b]0;pwned\\x07" in out  # shown, escaped
    assert "already in the store" in check(cli("ingest", str(f), "--store", store, "-q"), fails=False)
    check(cli("info", str(f)), fails=False)
    check(cli("info", "--store", store), fails=False)
    check(cli("info", "--store", store, "--group", "g" + HOSTILE), fails=False)
    check(cli("-v", "score", str(f), "--out", str(tmp_path / ("o" + HOSTILE + ".csv"))), fails=False)
    check(cli("score", "--store", store, "--out", str(tmp_path / ("p" + HOSTILE + ".csv"))), fails=False)
    out = check(cli("trends", "--store", store, "-q", "--no-cache"), fails=False)
    assert "run\\x1b[2J" in out
    check(cli("trends", "--store", store, "-q", "--train-step", "0"), fails=False)
    check(cli("export", "--store", store, "--out", str(tmp_path / ("e" + HOSTILE + ".csv"))), fails=False)
    check(cli("drop-incomplete", "--store", store), fails=False)
    check(cli("estimators"), fails=False)


def test_a_failing_command_prints_one_error_line(tmp_path):
    bad = tmp_path / ("bad" + HOSTILE + ".jsonl")
    bad.write_text('{"group_id": 1}\n{"traj_id": 2}\n')
    store = str(tmp_path / ("S" + HOSTILE))
    check(cli("ingest", str(hostile_log(tmp_path)), "--store", store, "-q"), fails=False)
    for argv in (
        ["ingest", str(bad), "--store", store, "-q"],
        ["info", str(bad)],
        ["score", str(bad), "--out", str(tmp_path / "x.csv")],
        ["ingest", str(tmp_path / ("missing" + HOSTILE + ".jsonl")), "--store", store],
        ["info", "--store", store, "--group", "nope" + HOSTILE],
        ["trends", "--store", store, "-q", "--run", "nope" + HOSTILE],
        ["info", str(bad), "unexpected" + HOSTILE],  # argparse's own error line
        ["score", str(bad), "--out", str(tmp_path / ("x" + HOSTILE + ".txt"))],
    ):
        check(cli(*argv), fails=True)


def test_watch_lines_are_escaped(tmp_path):
    """The real ``ingest --watch``: a log it cannot read and one it ingests, both with hostile
    names and ids; its output (stdout and stderr, in a file) holds no raw control character."""
    logs, store, out = tmp_path / "logs", tmp_path / "store", tmp_path / "out.txt"
    logs.mkdir()
    (logs / ("bad" + HOSTILE + ".jsonl")).write_text('{"group_id": 1}\n')
    argv = ["ingest", "--watch", str(logs), "--store", str(store), "--settle", "0.3", "-v"]
    with open(out, "w") as fh:
        p = subprocess.Popen(
            [sys.executable, "-m", "crbc_viz", *argv],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:

            def wait_for(needle: str) -> None:
                deadline = time.monotonic() + 60
                while needle not in out.read_text(errors="replace"):
                    assert time.monotonic() < deadline and p.poll() is None, out.read_text()
                    time.sleep(0.1)

            wait_for("failed  bad")
            hostile_log(logs, "good")
            wait_for("ingested  good")
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=60) == 0
        finally:
            if p.poll() is None:
                p.kill()
    text = out.read_text()
    assert "stopped: 1 log ingested" in text and "\\x1b]0;pwned\\x07" in text, text
    assert not [c for c in RAW if c in text], text
    assert not [line for line in text.splitlines() if line.startswith("error:")], text
