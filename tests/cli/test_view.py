"""``crbc-viz view``: what it serves and refuses, checked without a browser (the browser test is
tests/e2e/test_view_browser.py): the page each kind of PATH opens on, the data folders it
allows, the packaged server settings, and the one-line refusals (port in use, missing PATH,
missing streamlit, a non-loopback --host)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from crbc_viz.cli import main
from crbc_viz.cli import view as view_cmd

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "sample_rollouts/toy/toy_group.jsonl"
STORE = REPO / "sample_rollouts/training/store"
VERL = REPO / "tests/fixtures/verl_real/rollout"  # one dump per train step: 1.jsonl, 2.jsonl
RLLM = REPO / "tests/fixtures/rllm_real/eval_run/episodes"  # an rLLM episodes folder: one source


def _query(page: str) -> tuple[str, dict]:
    parts = urlsplit("/" + page)
    return parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}


def test_each_kind_of_path_opens_its_page(tmp_path):
    roots, page = view_cmd.target(TOY, tmp_path)
    assert roots == [TOY.parent] and _query(page) == ("/graph", {"file": str(TOY)})
    roots, page = view_cmd.target(STORE, tmp_path)
    assert roots == [STORE] and _query(page) == ("/training", {"store": str(STORE)})
    roots, page = view_cmd.target(RLLM, tmp_path)
    assert roots == [RLLM] and _query(page) == ("/graph", {"file": str(RLLM)})
    assert not any(tmp_path.iterdir())  # nothing ingested for those


def test_a_folder_of_dumps_is_ingested_into_a_scratch_store(tmp_path):
    roots, page = view_cmd.target(VERL, tmp_path)
    assert roots == [VERL, tmp_path]
    path, q = _query(page)
    assert path == "/training" and q["store"] == str(tmp_path / "store")
    from crbc_viz.store import LogStore

    steps = LogStore(tmp_path / "store").train_steps()
    assert len(steps) == 2  # the folder's two files, one train step each


def test_the_packaged_settings_are_the_checkouts():
    from crbc_viz.app import STREAMLIT_CONFIG

    with open(REPO / ".streamlit/config.toml", "rb") as f:
        checkout = tomllib.load(f)
    with open(STREAMLIT_CONFIG, "rb") as f:
        packaged = tomllib.load(f)
    assert packaged == checkout
    flags = view_cmd.streamlit_flags()
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--client.showErrorDetails"] == "none"
    assert pairs["--server.maxUploadSize"] == "200"
    assert pairs["--browser.gatherUsageStats"] == "false"
    assert "--server.port" not in pairs  # view's own


def test_port_in_use_is_one_line(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["view", str(TOY), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: port {port} on 127.0.0.1 is in use (Address already in use): give another with --port\n"
    )


def test_missing_path_is_one_line(capsys, tmp_path):
    assert main(["view", str(tmp_path / "nope.jsonl")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.jsonl'}: no such file or folder\n"


def test_without_streamlit_is_the_missing_extra_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "streamlit", None)  # as if not installed
    assert main(["view", str(TOY)]) == 2
    err = capsys.readouterr().err
    assert (
        err == "error: crbc-viz view needs streamlit, which is not installed: pip install 'crbc-viz[app]'\n"
    )


@pytest.mark.parametrize("host, warned", [("127.0.0.1", False), ("localhost", False), ("0.0.0.0", True)])
def test_a_shared_host_is_warned_about(monkeypatch, capsys, host, warned):
    seen = {}
    monkeypatch.setattr(view_cmd, "_serve", lambda h, p, page, env: seen.update(host=h, env=env) or 0)
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", "/somewhere")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["view", str(TOY), "--host", host, "--port", str(port)]) == 0
    err = capsys.readouterr().err
    assert seen["host"] == host
    assert seen["env"]["CRBC_VIZ_DATA_ROOTS"].split(":") == ["/somewhere", str(TOY.parent)]
    if warned:
        assert err.count("\n") == 1 and err.startswith(
            f"warning: --host {host} serves the app to every machine"
        )
        assert str(TOY.parent) in err and "no login" in err
    else:
        assert err == ""


def package_only(tmp_path: Path) -> Path:
    """A folder on which only the package is importable (a link to it), outside the checkout."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "crbc_viz").symlink_to(REPO / "crbc_viz", target_is_directory=True)
    return site


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_it_serves_from_the_package_alone(tmp_path):
    """``python -m crbc_viz view`` run outside the checkout, with only the package importable (no
    app.py, no top-level app_pages, no .streamlit/config.toml): the server comes up healthy,
    its router and pages load, and SIGTERM stops it and removes nothing it was given."""
    site, work = package_only(tmp_path), tmp_path / "work"
    work.mkdir()
    log = tmp_path / "log.jsonl"
    shutil.copy(TOY, log)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "server.txt"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(u.find_spec('app_pages'), u.find_spec('app'))",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["None", "None"]
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "crbc_viz", "view", str(log), "--port", str(port)],
            cwd=work,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while not _healthy(f"http://127.0.0.1:{port}") and time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()
            time.sleep(0.25)
        assert _healthy(f"http://127.0.0.1:{port}"), out.read_text()
        first = out.read_text().splitlines()[0]
        assert first.startswith(f"crbc-viz view: open http://127.0.0.1:{port}/graph?file=")
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM: the server stopped cleanly, its status passed on
    assert log.is_file()
    assert not _healthy(f"http://127.0.0.1:{port}")  # the server stopped with it


# -- --map / --map-file: the log read through a field map ------------------------------------------
MAP = ["steps=turns", "group_id=^.task", "traj_id=^.ep", "step_idx=@order", "anchor_obs=o", "reward=r"]


def _custom_log(path: Path) -> Path:
    """A log of no trainer's layout: 2 groups (A, B), 3 episodes, 4 turns."""
    recs = [
        {"task": "A", "ep": "e1", "turns": [{"o": "s0", "r": 0}, {"o": "s1", "r": 1}]},
        {"task": "A", "ep": "e2", "turns": [{"o": "s0", "r": 0}]},
        {"task": "B", "ep": "e3", "turns": [{"o": "b0", "r": 0}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _map_args(items=MAP) -> list[str]:
    return [a for m in items for a in ("--map", m)]


def test_a_field_map_is_carried_in_the_link_as_the_import_options_carry_it(tmp_path, monkeypatch):
    from crbc_viz.ui.sandbox import ReadOptions, read, split_read_key

    log = _custom_log(tmp_path / "custom.jsonl")
    seen = {}
    monkeypatch.setattr(view_cmd, "_serve", lambda h, p, page, env: seen.update(page=page) or 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["view", str(log), "--port", str(port), *_map_args()]) == 0
    path, q = _query(seen["page"])
    assert path == "/graph"
    inner, opts = split_read_key(q["file"])  # the app's own reading of the link
    assert inner == str(log) and opts == ReadOptions("fieldmap", field_map="; ".join(MAP))
    batch = read(q["file"])  # what the parse child reads for that link
    assert (batch.num_groups, batch.num_trajectories, batch.num_steps) == (2, 3, 4)
    # The same map as a TOML file.
    toml = tmp_path / "map.toml"
    toml.write_text("[map]\n" + "".join(f'{m.split("=", 1)[0]} = "{m.split("=", 1)[1]}"\n' for m in MAP))
    assert main(["view", str(log), "--port", str(port), "--map-file", str(toml)]) == 0
    assert _query(seen["page"])[1]["file"] == q["file"]


def test_a_folder_read_through_a_map_is_ingested_with_it(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    _custom_log(logs / "step_1.jsonl")
    _custom_log(logs / "step_2.jsonl")
    from crbc_viz.io.importers.fieldmap import map_from_options
    from crbc_viz.store import LogStore

    roots, page = view_cmd.target(logs, tmp_path / "scratch", map_from_options(MAP))
    assert _query(page)[0] == "/training"
    with LogStore(tmp_path / "scratch" / "store") as st:
        assert st.summary()["steps"] == 8


@pytest.mark.parametrize(
    "args, said",
    [
        (["--map", "reward"], "--map: 'reward': expected target=path"),
        (["--map-file", "nope.toml"], "nope.toml: no such file"),
        (["--map", "reward=r"], "--map: the map names no group_id, traj_id, step_idx"),
    ],
)
def test_a_bad_map_is_ingests_error_before_the_server_starts(tmp_path, monkeypatch, capsys, args, said):
    log = _custom_log(tmp_path / "custom.jsonl")
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", str(log), "--store", str(tmp_path / "st"), *args]) == 2
    ingest_err = capsys.readouterr().err
    monkeypatch.setattr(view_cmd, "_serve", lambda *a: pytest.fail("the server started"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["view", str(log), "--port", str(port), *args]) == 2
    err = capsys.readouterr().err
    assert err == ingest_err and err.startswith("error: ")
    (problem,) = [line for line in err.splitlines() if said in line]  # the problem: one line


def test_a_map_with_a_store_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(view_cmd, "_serve", lambda *a: pytest.fail("the server started"))
    assert main(["view", str(STORE), *_map_args()]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a store holds canonical rows" in err
