"""``ingest --watch``: a log is ingested once complete (settled, whole), never half-written; a log
that grows is ingested again as a new version that replaces the old one, so the store holds
its content once; readers never see two versions; a kill -9 at any point is recovered by the
next start; SIGTERM stops cleanly; an idle watcher only waits.

Most tests drive `Watcher.step` with a hand-moved clock (no threads, no sleeps); the process
tests run the real command and wait on its output lines with a timeout. Expected step counts
are the files' line counts (one canonical step per line)."""

from __future__ import annotations

import gzip
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.cli import main as cli
from crbc_viz.store import CRASH_ENV, LogStore, incomplete_sources, ingest
from crbc_viz.store.watch import RESCAN_S, STATUS_FILE, Watcher, incomplete_reason, read_status, store_state
from helpers import ROOT

RUN = "live"


def step_rows(train_step: int, groups: int = 2, rollouts: int = 2, length: int = 3) -> list[dict]:
    """Canonical rows of one train step: ``groups`` x ``rollouts`` trajectories of ``length``."""
    rows = []
    for g in range(groups):
        for r in range(rollouts):
            ok = (g + r + train_step) % 2 == 0
            for i in range(length):
                last = i == length - 1
                rows.append(
                    {
                        "run_id": RUN,
                        "train_step": train_step,
                        "group_id": f"g{g}",
                        "traj_id": f"t{train_step}-{g}-{r}",
                        "step_idx": i,
                        "action": "right" if (i + r) % 2 else "up",
                        "anchor_obs": f"cell {g}-{i}",
                        "reward": float(ok and last),
                        "done": last,
                        "success": ok,
                    }
                )
    return rows


def text(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def lines(*paths: Path) -> int:
    """Steps in whole canonical JSONL files: their newline count (the expected value)."""
    return sum(p.read_bytes().count(b"\n") for p in paths)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def watcher(folder, store, clock, events, **kw) -> Watcher:
    kw.setdefault("settle", 2.0)
    return Watcher(folder, store, clock=clock, on_event=events.append, **kw)


def kinds(events, kind) -> list[str]:
    return [e.path for e in events if e.kind == kind]


def visible(store: Path) -> dict:
    with LogStore(store) as st:
        return {**st.summary(), "manifests": len(st.manifests)}


def distinct_steps(store: Path) -> int:
    with LogStore(store) as st:
        b = st.load_batch()
        keys = b.steps[["run_id", "train_step", "group_id", "traj_id", "step_idx"]].astype(str)
        return len(keys.drop_duplicates())


# -- completeness ---------------------------------------------------------------------------------
def test_half_written_jsonl_waits_and_is_never_committed(tmp_path):
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    full = text(step_rows(0))
    f = logs / "step_0.jsonl"
    f.write_text(full[: len(full) // 2 + 7])  # cut inside a line
    with watcher(logs, store, clock, ev) as w:
        w.step()
        clock.t += 5  # settled, but the last line has no newline
        w.step()
        assert kinds(ev, "waiting") == ["step_0.jsonl"] and "newline" in ev[-1].message
        assert visible(store)["steps"] == 0 and visible(store)["manifests"] == 0
        clock.t += 5
        w.step()
        assert len(kinds(ev, "waiting")) == 1  # told once per content
        f.write_text(full)
        w.step()
        clock.t += 1  # changed 1 s ago: not settled yet (settle 2 s)
        w.step()
        assert not kinds(ev, "ingested")
        clock.t += 1.5
        w.step()
    assert kinds(ev, "ingested") == ["step_0.jsonl"]
    got = [e for e in ev if e.kind == "ingested"][0]
    assert (got.fmt, got.steps, got.train_steps) == ("canonical", lines(f), 1)
    assert visible(store)["steps"] == lines(f) == 12


def test_parquet_waits_for_its_footer_and_gzip_for_its_end(tmp_path):
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist(step_rows(3)), whole)
    data = whole.read_bytes()
    (logs / "s3.parquet").write_bytes(data[: len(data) - 20])  # footer not written yet
    gz = gzip.compress(text(step_rows(4)).encode())
    (logs / "s4.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    with watcher(logs, store, clock, ev) as w:
        w.step()
        clock.t += 3
        w.step()
        assert sorted(kinds(ev, "waiting")) == ["s3.parquet", "s4.jsonl.gz"]
        assert visible(store)["steps"] == 0
        (logs / "s3.parquet").write_bytes(data)
        (logs / "s4.jsonl.gz").write_bytes(gz)
        w.step()
        clock.t += 3
        w.step()
    assert sorted(kinds(ev, "ingested")) == ["s3.parquet", "s4.jsonl.gz"]
    assert visible(store)["steps"] == 12 + 12 and visible(store)["train_steps"] == 2


@pytest.mark.parametrize(
    "name, content, complete",
    [
        ("a.json", b'[{"a": 1}, {"a"', False),
        ("a.json", b'[{"a": 1}]  \n', True),
        ("a.csv", b"a,b\n1,2", False),
        ("a.csv", b"a,b\n1,2\n", True),
        ("a.ndjson", b"", False),
        ("a.jsonl.gz", gzip.compress(b'{"a": 1}', mtime=0), False),
        ("a.jsonl.gz", gzip.compress(b'{"a": 1}\n', mtime=0), True),
        ("a.jsonl.gz", b"\x1f\x8b\x08\x00garbage", False),
        ("a.parquet", b"PAR1" + b"\0" * 20 + b"PAR1", False),  # magic at the end, no footer
    ],
)
def test_incomplete_reason(tmp_path, name, content, complete):
    p = tmp_path / name
    p.write_bytes(content)
    assert (incomplete_reason(str(p)) is None) is complete


# -- versions -------------------------------------------------------------------------------------
def test_growing_log_is_replaced_and_held_once(tmp_path):
    """A trainer appends a train step to one log: the new version replaces the old one (no step
    lost, none twice); the old version's files go after the grace time."""
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    f = logs / "rollouts.jsonl"
    f.write_text(text(step_rows(0)))
    with watcher(logs, store, clock, ev, grace=10.0) as w:
        w.step()
        clock.t += 3
        w.step()
        assert visible(store)["steps"] == lines(f) == 12
        with open(f, "a") as fh:
            fh.write(text(step_rows(1, groups=3)))
        w.step()
        clock.t += 3
        w.step()
        assert [e.kind for e in ev if e.kind in ("ingested", "replaced")] == ["ingested", "replaced"]
        rep = [e for e in ev if e.kind == "replaced"][0]
        assert (rep.steps, rep.train_steps) == (lines(f), 2) == (12 + 18, 2)
        v = visible(store)
        assert (v["steps"], v["sources"], v["train_steps"], v["manifests"]) == (30, 1, 2, 2)
        assert distinct_steps(store) == 30
        clock.t += 11  # past the grace time: the replaced version's files are removed
        w.step()
    v = visible(store)
    assert (v["steps"], v["sources"], v["manifests"]) == (30, 1, 1)
    parts = sorted(p.name for p in (store / "steps").rglob("*.parquet"))
    assert len(parts) == 2  # one part per train step of the new version, none of the old one


def test_rewritten_log_back_to_an_earlier_content(tmp_path):
    """A log that goes back to content an earlier version held is that content again, visible."""
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    f = logs / "r.jsonl"
    first, second = text(step_rows(0)), text(step_rows(0)) + text(step_rows(1))
    with watcher(logs, store, clock, ev, grace=1000.0) as w:
        for content in (first, second, first):
            f.write_text(content)
            w.step()
            clock.t += 3
            w.step()
            assert visible(store)["steps"] == content.count("\n")
    assert visible(store)["sources"] == 1


def test_kill_mid_replacement_readers_see_the_old_version_then_restart_completes(tmp_path):
    """kill -9 after the new version's first part: readers still see the old version whole
    (never old + part of new); the next start finishes the new version and replaces the old."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    f = logs / "run.jsonl"
    f.write_text(text(step_rows(0)))
    ingest(store, [f])
    old = lines(f)
    with open(f, "a") as fh:
        fh.write(text(step_rows(1)) + text(step_rows(2)))  # the new version has 3 parts
    env = {**os.environ, CRASH_ENV: "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "crbc_viz",
            "ingest",
            "--watch",
            str(logs),
            "--store",
            str(store),
            "--settle",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 17, res.stderr  # the crash hook: killed after one committed part
    v = visible(store)
    assert (v["steps"], v["train_steps"], v["incomplete_sources"]) == (old, 1, 1)
    clock, ev = Clock(), []
    with watcher(logs, store, clock, ev, settle=0.0, grace=0.0) as w:
        w.step()
        w.step()
    assert kinds(ev, "replaced") == ["run.jsonl"]
    v = visible(store)
    assert (v["steps"], v["train_steps"], v["incomplete_sources"], v["manifests"]) == (lines(f), 3, 0, 1)
    assert distinct_steps(store) == lines(f) == 36


def test_killed_while_the_log_changed_again_drops_the_partial_version(tmp_path):
    """kill -9 mid-ingest, then the log grows again before the restart: the partial version's
    content is gone from the log, so it is dropped and the whole new content ingested once."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    f = logs / "run.jsonl"
    f.write_text(text(step_rows(0)) + text(step_rows(1)) + text(step_rows(2)))
    env = {**os.environ, CRASH_ENV: "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "crbc_viz", "ingest", "--watch", str(logs), "--store", str(store)]
    res = subprocess.run(cmd + ["--settle", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 17, res.stderr
    assert visible(store)["incomplete_sources"] == 1
    with open(f, "a") as fh:
        fh.write(text(step_rows(3)))
    clock, ev = Clock(), []
    with watcher(logs, store, clock, ev, settle=0.0, grace=0.0) as w:
        w.step()
    v = visible(store)
    assert (v["steps"], v["train_steps"], v["incomplete_sources"], v["manifests"]) == (lines(f), 4, 0, 1)
    assert distinct_steps(store) == 48


# -- the folder -----------------------------------------------------------------------------------
def test_walks_like_ingest_and_skips_store_hidden_and_temp_files(tmp_path):
    logs, clock, ev = tmp_path / "logs", Clock(), []
    (logs / "run_a" / "deep").mkdir(parents=True)
    (logs / ".hidden").mkdir()
    store = logs / "store"  # the store inside the watched folder is not read as logs
    (logs / "run_a" / "deep" / "s0.jsonl").write_text(text(step_rows(0)))
    (logs / "s1.jsonl.tmp").write_text(text(step_rows(1)))  # a trainer's temporary name
    (logs / ".hidden" / "s2.jsonl").write_text(text(step_rows(2)))
    (logs / ".s3.jsonl").write_text(text(step_rows(3)))
    with watcher(logs, store, clock, ev) as w:
        w.step()
        clock.t += 3
        w.step()
        clock.t += 3
        w.step()
    assert kinds(ev, "ingested") == [os.path.join("run_a", "deep", "s0.jsonl")]
    assert not kinds(ev, "failed") and visible(store)["steps"] == 12


def test_rllm_episode_folder_is_one_source_and_grows(tmp_path):
    """rLLM episode folders are one source each, as `ingest DIR` reads them; a new episode file
    in a folder makes a new version of that folder's source."""
    src = ROOT / "tests" / "fixtures" / "rllm_real" / "eval_run" / "episodes"
    eps = sorted(src.glob("*.json"))
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    (logs / "episodes").mkdir(parents=True)
    for e in eps[:4]:
        (logs / "episodes" / e.name).write_bytes(e.read_bytes())
    with watcher(logs, store, clock, ev) as w:
        w.step()
        clock.t += 3
        w.step()
        assert kinds(ev, "ingested") == ["episodes"] and ev[-1].fmt == "rllm"
        for e in eps[4:]:
            (logs / "episodes" / e.name).write_bytes(e.read_bytes())
        w.step()
        clock.t += 3
        w.step()
    assert kinds(ev, "replaced") == ["episodes"]
    whole = tmp_path / "whole"
    ingest(whole, [src.parent])  # what ingest of the whole folder holds: the expected store
    assert visible(store)["steps"] == visible(whole)["steps"] > 0
    assert visible(store)["trajectories"] == visible(whole)["trajectories"] == len(eps)


def test_bad_log_reported_once_until_it_changes(tmp_path):
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    bad = logs / "bad.jsonl"
    rows = step_rows(0)
    bad.write_text(text([{k: v for k, v in r.items() if k != "traj_id"} for r in rows]))
    with watcher(logs, store, clock, ev) as w:
        for _ in range(3):
            w.step()
            clock.t += 3
        assert kinds(ev, "failed") == ["bad.jsonl"] and "bad.jsonl" in str(ev[-1].error)
        bad.write_text(text(rows))
        w.step()
        clock.t += 3
        w.step()
    assert kinds(ev, "ingested") == ["bad.jsonl"] and visible(store)["steps"] == 12


# -- cost, status ---------------------------------------------------------------------------------
def test_idle_watcher_only_waits(tmp_path):
    """Idle with change events: the next wake-up is the heartbeat or the safety rescan, not a
    poll; polling: one stat of the tree per poll interval."""
    logs, clock, ev = tmp_path / "logs", Clock(), []
    logs.mkdir()
    (logs / "s.jsonl").write_text(text(step_rows(0)))
    with watcher(logs, tmp_path / "store", clock, ev, heartbeat=600.0) as w:
        w.step()
        assert w.next_wait() == pytest.approx(2.0)  # the settle time of the new log
        clock.t += 3
        w.step()
        assert w.next_wait() == pytest.approx(RESCAN_S)
    with watcher(logs, tmp_path / "store2", clock, [], poll=True, poll_interval=7.0, heartbeat=600.0) as w:
        w.step()
        clock.t += 3
        w.step()
        assert w.next_wait() == pytest.approx(7.0)


def test_status_file_and_store_state(tmp_path):
    logs, store, clock, ev = tmp_path / "logs", tmp_path / "store", Clock(), []
    logs.mkdir()
    (logs / "a.jsonl").write_text(text(step_rows(0)))
    with watcher(logs, store, clock, ev, heartbeat=5.0) as w:
        w.step()
        st = read_status(store)
        assert st["alive"] and st["pending"] == 1 and st["pending_paths"] == ["a.jsonl"]
        sig0 = store_state(store)["signature"]
        clock.t += 3
        w.step()
        st, state = read_status(store), store_state(store)
        assert st["pending"] == 0 and st["ingested"] == 1
        assert state["signature"] != sig0 and state["manifests"] == 1 and state["changed_at"] is not None
        clock.t += 6
        w.step()
        assert [e.kind for e in ev][-1] == "heartbeat"
    st = read_status(store)
    assert st["stopped"] and not st["alive"]
    (store / STATUS_FILE).write_text('{"pending": "many"}')
    assert "mistyped" in read_status(store)["error"]
    (store / STATUS_FILE).write_bytes(b"x" * 70_000)
    assert "larger" in read_status(store)["error"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["ingest", "--store", "S"], "give the log files"),
        (["ingest", "x.jsonl", "--watch", "D", "--store", "S"], "not both"),
        (["ingest", "x.jsonl", "--store", "S", "--settle", "1"], "--settle: option(s) of --watch"),
        (["ingest", "--watch", "{file}", "--store", "S"], "no such folder"),
        (["ingest", "--watch", "{logs}", "--store", "S", "--settle", "nan"], "--settle"),
        (["ingest", "--watch", "{logs}", "--store", "{logs}"], "holds the watched folder"),
        (
            ["ingest", "--watch", "{logs}", "--store", "S", "--poll", "--poll-interval", "0"],
            "--poll-interval",
        ),
    ],
)
def test_cli_usage_errors(tmp_path, capsys, argv, says):
    (tmp_path / "logs").mkdir()
    (tmp_path / "a.jsonl").write_text("")
    argv = [a.format(file=tmp_path / "a.jsonl", logs=tmp_path / "logs") for a in argv]
    argv = [str(tmp_path / "S") if a == "S" else a for a in argv]
    assert cli(argv) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "S" / "manifest").exists()


# -- the real command -----------------------------------------------------------------------------
class Proc:
    """``crbc-viz ingest --watch`` in a child process; its output lines read with a timeout."""

    def __init__(self, logs: Path, store: Path, *extra: str):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "crbc_viz", "ingest", "--watch", str(logs), "--store", str(store), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        import time

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {needle!r} within {timeout} s; got {self.seen}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if needle in line:
                return line

    def kill(self, sig) -> int:
        self.p.send_signal(sig)
        return self.p.wait(timeout=30)


def test_sigkill_while_a_log_is_half_written_then_restart(tmp_path):
    """The watcher is killed while a log is half written; restarted after the log is whole, the
    store holds exactly the steps of the whole logs; SIGTERM stops it with exit status 0."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    a, b = logs / "train_step_0000.jsonl", logs / "train_step_0001.jsonl"
    a.write_text(text(step_rows(0)))
    w = Proc(logs, store, "--settle", "0.3")
    try:
        assert "12 steps, 1 train step" in w.wait_for("ingested  train_step_0000.jsonl")
        full = text(step_rows(1, groups=3))
        b.write_text(full[: len(full) // 3 + 5])  # inside a line
        w.wait_for("waiting  train_step_0001.jsonl")
        assert w.kill(signal.SIGKILL) == -signal.SIGKILL
    finally:
        if w.p.poll() is None:
            w.p.kill()
    b.write_text(full)
    w = Proc(logs, store, "--settle", "0.3")
    try:
        assert "18 steps, 1 train step" in w.wait_for("ingested  train_step_0001.jsonl")
        assert w.kill(signal.SIGTERM) == 0
        w.wait_for("stopped: 1 log ingested")
    finally:
        if w.p.poll() is None:
            w.p.kill()
    out = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "info", "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    info = json.loads(out.stdout)
    assert (info["steps"], info["train_steps"], info["incomplete_sources"]) == (lines(a, b), 2, 0)
    assert lines(a, b) == 30 and distinct_steps(store) == 30
    with LogStore(store) as st:
        assert not incomplete_sources(st)


def test_follows_the_bundled_trainer_while_it_trains(tmp_path):
    """`experiments/sokoban_grpo` writes each train step's log under a temporary name and
    renames it into place: a watcher running beside it (its real loop, in a thread) ingests
    every train step once, as the trainer writes them."""
    from experiments.sokoban_grpo.trainer import LOG_DIR, Config, train

    out, store = tmp_path / "run", tmp_path / "store"
    (out / LOG_DIR).mkdir(parents=True)
    got: queue.Queue = queue.Queue()
    w = Watcher(out / LOG_DIR, store, settle=0.2, on_event=got.put)
    loop = threading.Thread(target=w.run, daemon=True)
    loop.start()
    try:
        cfg = Config(
            env="chain", steps=4, pool=4, groups=4, rollouts=4, env_kwargs={"length": 3, "max_steps": 6}
        )
        train(cfg, out, progress=False)
        ingested = []
        while len(ingested) < 4:
            ev = got.get(timeout=30)
            assert ev.kind in ("ingested", "heartbeat", "note"), ev
            ingested += [ev.path] if ev.kind == "ingested" else []
    finally:
        w.stop()
        loop.join(timeout=30)
        w.close()
    assert sorted(ingested) == [f"train_step_{t:04d}.jsonl" for t in range(4)]
    logs = sorted((out / LOG_DIR).glob("*.jsonl"))
    v = visible(store)
    assert (v["steps"], v["train_steps"], v["runs"]) == (lines(*logs), 4, ["crbc-s0"])


def test_trends_of_a_growing_store_compute_only_new_or_changed_train_steps(tmp_path, monkeypatch):
    """The page recomputes trends each time the followed store changes: train steps whose parts
    did not change are not computed again, and the result equals a computation from scratch."""
    from collections import OrderedDict

    import pandas as pd

    from crbc_viz.analysis import trends

    calls = []
    real = trends.step_trends

    def counting(batch, **kw):
        calls.append(sorted({int(t) for t in batch.groups["train_step"]}))
        return real(batch, **kw)

    monkeypatch.setattr(trends, "step_trends", counting)
    monkeypatch.setattr(trends, "_STEP_MEMO", OrderedDict())
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    files = [logs / f"s{t}.jsonl" for t in range(3)]
    for t in (0, 1):
        files[t].write_text(text(step_rows(t)))
    ingest(store, files[:2])

    def computed():
        calls.clear()
        with LogStore(store) as st:
            return trends.store_trends(st, cache=False), list(calls)

    assert computed()[1] == [[0], [1]]
    files[2].write_text(text(step_rows(2)))
    ingest(store, [files[2]])
    assert computed()[1] == [[2]]
    with open(files[1], "a") as fh:  # train step 1 grows a group: a new version of its log
        fh.write(text([r for r in step_rows(1, groups=3) if r["group_id"] == "g2"]))
    ingest(store, [files[1]], replace=True)
    grown, done = computed()
    assert done == [[1]] and grown.steps["groups"].tolist() == [2, 3, 2]
    monkeypatch.setattr(trends, "_STEP_MEMO", OrderedDict())
    fresh, done = computed()
    assert done == [[0], [1], [2]]
    pd.testing.assert_frame_equal(grown.steps, fresh.steps)
    pd.testing.assert_frame_equal(grown.groups, fresh.groups)


def test_started_before_the_trainer_creates_its_folder_and_stops_on_sigint(tmp_path):
    logs, store = tmp_path / "run" / "logs", tmp_path / "store"
    w = Proc(logs, store, "--settle", "0.3")
    try:
        w.wait_for("did not exist: created it")
        w.wait_for("watching")
        (logs / "train_step_0000.jsonl").write_text(text(step_rows(0)))
        w.wait_for("ingested  train_step_0000.jsonl")
        assert w.kill(signal.SIGINT) == 0
        w.wait_for("stopped: 1 log ingested")
    finally:
        if w.p.poll() is None:
            w.p.kill()
    assert visible(store)["steps"] == 12 and read_status(store)["stopped"]
