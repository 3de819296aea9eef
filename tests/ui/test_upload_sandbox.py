"""Uploads and server paths are read in a limited child process (`crbc_viz.ui.sandbox`): a
file that crashes the parser, or runs it out of memory or time, is a one-line refusal that
names the user's file, and the server process lives on.

The failure paths are driven by the sandbox's test hook (``$CRBC_VIZ_PARSE_TEST_HOOK``) and by
real hostile files: a JSONL line whose ``anchor_obs`` nests 100,000 arrays deep (pyarrow's JSON
reader overflows its stack on it) and one whose anchor is an array of 10 million numbers. A
call that could crash runs in a subprocess, so a broken sandbox fails the test instead of
killing pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.errors import LoadError, ParseAbortedError
from crbc_viz.io import load_rollouts
from crbc_viz.ui import files, pipeline, sandbox

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "sample_rollouts/toy/toy_group.jsonl"
HOOK = sandbox.ENV_TEST_HOOK


def hostile_line(anchor_json: str) -> str:
    """One valid step row of the toy group whose ``anchor_obs`` is the raw JSON text given."""
    row = json.loads(TOY.read_text().splitlines()[0])
    row.pop("anchor_obs")
    return json.dumps(row)[:-1] + ', "anchor_obs": ' + anchor_json + "}\n"


def deep_log(path: Path) -> Path:
    path.write_text(hostile_line("[" * 100_000 + "]" * 100_000))
    return path


def wide_log(path: Path) -> Path:
    path.write_text(hostile_line("[" + ",".join(["1"] * 10_000_000) + "]"))
    return path


def _upload(tmp_path, monkeypatch, name: str, data: bytes) -> Path:
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    return files.save_upload(name, data)


def _one_line_naming(msg: str, name: str) -> None:
    assert "\n" not in msg, msg
    assert msg.startswith(name + ":"), msg
    assert "crbc-viz-uploads" not in msg and str(files.UPLOAD_DIR) not in msg, msg


def test_abort_in_the_child_is_a_one_line_refusal_naming_the_upload(tmp_path, monkeypatch):
    stored = _upload(tmp_path, monkeypatch, "my run.jsonl", TOY.read_bytes())
    monkeypatch.setenv(HOOK, "abort")
    with pytest.raises(ParseAbortedError) as err:
        sandbox.open_batch(str(stored))
    msg = str(err.value)
    _one_line_naming(msg, "my run.jsonl")
    assert "crashed the parser (SIGABRT)" in msg and stored.name not in msg


def test_memory_past_the_limit_is_refused_naming_the_setting(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    path.write_bytes(TOY.read_bytes())
    monkeypatch.setenv(HOOK, "memory")
    monkeypatch.setenv(sandbox.ENV_PARSE_MEMORY, "900")
    with pytest.raises(ParseAbortedError) as err:
        sandbox.open_batch(str(path))
    _one_line_naming(str(err.value), "big.jsonl")
    assert "more than 900 MiB" in str(err.value) and sandbox.ENV_PARSE_MEMORY in str(err.value)


def _children_reading(path: Path) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "crbc_viz.ui.sandbox" in cmd and str(path) in cmd:
            out.append(cmd)
    return out


def test_a_child_past_its_timeout_is_killed_and_refused(tmp_path, monkeypatch):
    path = tmp_path / "slow.jsonl"
    path.write_bytes(TOY.read_bytes())
    monkeypatch.setenv(HOOK, "sleep")
    monkeypatch.setenv(sandbox.ENV_PARSE_TIMEOUT, "2")
    t0 = time.monotonic()
    with pytest.raises(ParseAbortedError) as err:
        sandbox.open_batch(str(path))
    assert time.monotonic() - t0 < 2 + 30  # killed (it would sleep 1e6 s); room for a busy machine
    _one_line_naming(str(err.value), "slow.jsonl")
    assert "longer than 2 s" in str(err.value)
    assert _children_reading(path) == []  # killed and reaped, not left running


def test_bad_limit_settings_are_refused_naming_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "a.jsonl"
    path.write_bytes(TOY.read_bytes())
    for env, raw in ((sandbox.ENV_PARSE_MEMORY, "lots"), (sandbox.ENV_PARSE_TIMEOUT, "0")):
        monkeypatch.setenv(env, raw)
        with pytest.raises(LoadError, match=env):
            sandbox.open_batch(str(path))
        monkeypatch.delenv(env)


def test_a_file_read_in_the_child_equals_the_file_read_here(tmp_path, monkeypatch):
    path = tmp_path / "copy.jsonl"
    path.write_bytes(TOY.read_bytes())
    started = []
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        started.append(argv)
        return real_popen(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    got, want = sandbox.open_batch(str(path)), load_rollouts(path)
    assert len(started) == 1 and str(path) in " ".join(started[0])  # read there, not here
    assert got.steps.equals(want.steps) and got.groups.equals(want.groups)
    for name in ("step_traj", "step_anchor_hash", "traj_offsets", "traj_success", "traj_return"):
        assert (getattr(got, name) == getattr(want, name)).all(), name
    assert (got.source, got.warnings) == (want.source, want.warnings)


def test_load_errors_of_an_upload_name_the_upload_not_the_server_copy(tmp_path, monkeypatch):
    stored = _upload(tmp_path, monkeypatch, "broken.jsonl", b"{not json\n")
    with pytest.raises(LoadError) as err:
        sandbox.open_batch(str(stored))
    msg = str(err.value)
    assert "broken.jsonl:line 1" in msg, msg
    assert str(stored) not in msg and str(tmp_path) not in msg, msg


def test_bundled_samples_are_read_here_without_a_child(monkeypatch):
    def no_child(*a, **k):
        raise AssertionError("a bundled sample started a child process")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert sandbox.is_trusted(str(TOY))
    assert sandbox.open_batch(str(TOY.resolve())).num_steps == load_rollouts(TOY).num_steps
    assert not sandbox.is_trusted(str(REPO / "sample_rollouts/../README.md"))


def test_a_refusal_is_cached_so_the_child_runs_once_per_file(tmp_path, monkeypatch):
    path = tmp_path / "crash.jsonl"
    path.write_bytes(TOY.read_bytes() + b"\n")  # a content (digest) no other test loads
    monkeypatch.setenv(HOOK, "abort")
    calls = []
    real = sandbox.open_batch

    def counted(key):
        calls.append(key)
        return real(key)

    monkeypatch.setattr(sandbox, "open_batch", counted)
    pipeline._load_outcome.clear()
    digest = files.file_digest(path)
    for _ in range(3):
        with pytest.raises(ParseAbortedError, match="crash.jsonl"):
            pipeline.load_batch(digest, str(path))
    assert calls == [str(path)]
    pipeline._load_outcome.clear()


def _survives(tmp_path: Path, log: Path, env: dict) -> subprocess.CompletedProcess:
    """`sandbox.open_batch` on ``log`` in a fresh interpreter (a crash there fails the test,
    not pytest): prints ``CLASS|message`` of the refusal, or ``loaded``."""
    code = (
        "import sys\n"
        "from crbc_viz.ui import sandbox\n"
        "try:\n"
        "    sandbox.open_batch(sys.argv[1]); print('loaded')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__ + '|' + str(e))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(log)],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nesting_100k_deep_is_refused_and_the_server_process_lives(tmp_path):
    proc = _survives(tmp_path, deep_log(tmp_path / "deep.jsonl"), {})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    kind, _, msg = proc.stdout.strip().partition("|")
    assert kind in ("ParseAbortedError", "LoadError"), proc.stdout[-2000:]
    assert "deep.jsonl" in msg and "Traceback" not in proc.stdout
    if kind == "ParseAbortedError":
        assert "\n" not in msg


def test_an_anchor_of_10_million_numbers_is_refused_in_bounded_time(tmp_path):
    """Loading it takes far longer than 3 s today (every number is visited in Python): the
    child is stopped at its timeout (or a reader bound refuses it sooner)."""
    log = wide_log(tmp_path / "wide.jsonl")
    t0 = time.monotonic()
    proc = _survives(tmp_path, log, {sandbox.ENV_PARSE_TIMEOUT: "3"})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    kind, _, msg = proc.stdout.strip().partition("|")
    assert kind in ("ParseAbortedError", "LoadError") and "wide.jsonl" in msg, proc.stdout[-2000:]
    assert time.monotonic() - t0 < 3 + 30  # stopped (room for a busy machine)


def test_the_page_shows_a_crash_as_one_line_naming_the_upload(tmp_path, monkeypatch):
    from crbc_viz.ui.sidebar import FILE_KEY

    stored = _upload(tmp_path, monkeypatch, "mine (2).jsonl", TOY.read_bytes() + b"\n\n")
    monkeypatch.setenv(HOOK, "abort")
    ref = files.file_ref(stored)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120).run()  # the default view first
    at.session_state[FILE_KEY] = ref
    at.session_state["data_upload"] = ("mine (2).jsonl", ref)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value for e in at.error] + [e.value for e in at.sidebar.error]
    assert any("mine (2).jsonl: reading it crashed the parser (SIGABRT)" in s for s in shown), shown
    assert not any(str(tmp_path) in s for s in shown), shown
    pipeline._load_outcome.clear()
