"""Integers beyond int64 in a log: an extra field (or a signal such as ``advantage`` or
``num_tokens``) that no int64 column holds is kept in the store as text, exactly; a canonical
field that holds one is refused by name (one ``error:`` line, exit 2, no traceback), and so are
``score`` and ``info`` of that file; the ``--watch`` follower refuses such a log and goes on
with the next one. JSONL (the schema path and its Arrow lane) and Parquet inputs alike."""

from __future__ import annotations

import decimal
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.errors import LoadError
from crbc_viz.store import LogStore
from helpers import ROOT

BIG = 2**70 + 1  # not a float either: 2**70 + 1 has no exact double


def rows(run: str = "r", train_step: int = 0) -> list[dict]:
    return [
        {
            "run_id": run,
            "train_step": train_step,
            "group_id": "g",
            "traj_id": f"t{t}",
            "step_idx": s,
            "anchor_obs": f"o{s}",
            "action": "a",
            "reward": float(t == 0 and s == 1),
            "done": s == 1,
        }
        for t in range(2)
        for s in range(2)
    ]


def jsonl(path: Path, rs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rs))
    return path


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def with_field(field: str, value, where=(0, 1, 2, 3)) -> list[dict]:
    rs = rows()
    for i in where:
        rs[i][field] = value
    return rs


@pytest.mark.parametrize(
    "field,where",
    [("extra", (0,)), ("extra", (0, 1, 2, 3)), ("advantage", (0, 1, 2, 3)), ("num_tokens", (2,))],
)
def test_an_extra_integer_beyond_int64_is_kept_exactly(tmp_path, field, where):
    f = jsonl(tmp_path / "big.jsonl", with_field(field, BIG, where))
    r = cli("ingest", str(f), "--store", str(tmp_path / "S"), "-q")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    with LogStore(tmp_path / "S") as st:
        b = st.load_batch()
        got = dict(zip(b.steps["traj_id"] + "/" + b.steps["step_idx"].astype(str), b.steps[field]))
    want = {f"t{i // 2}/{i % 2}": BIG if i in where else None for i in range(4)}
    assert {k: (None if pd.isna(v) else v) for k, v in got.items()} == want
    for cmd in (["score", str(f), "--out", str(tmp_path / "o.csv")], ["info", str(f)]):
        r = cli(*cmd)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_parquet_integers_beyond_int64(tmp_path):
    t = pa.Table.from_pylist(rows())
    pq.write_table(t.append_column("extra", pa.array([2**64 - 1] * 4, pa.uint64())), tmp_path / "u.parquet")
    dec = pa.array([decimal.Decimal(BIG)] * 4, pa.decimal128(38, 0))
    pq.write_table(t.append_column("advantage", dec), tmp_path / "d.parquet")
    for name, field, want in (("u", "extra", 2**64 - 1), ("d", "advantage", BIG)):
        store = tmp_path / f"S{name}"
        r = cli("ingest", str(tmp_path / f"{name}.parquet"), "--store", str(store), "-q")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        with LogStore(store) as st:
            vals = st.load_batch().steps[field].tolist()
        assert [int(v) for v in vals] == [want] * 4


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_canonical_field_beyond_int64_is_refused_by_name(tmp_path, fmt):
    if fmt == "jsonl":
        f = jsonl(tmp_path / "bad.jsonl", with_field("train_step", BIG))
    else:
        t = pa.Table.from_pylist(rows())
        t = t.set_column(
            t.column_names.index("train_step"), "train_step", pa.array([2**64 - 1] * 4, pa.uint64())
        )
        f = tmp_path / "bad.parquet"
        pq.write_table(t, f)
    for cmd in (
        ["ingest", str(f), "--store", str(tmp_path / "S"), "-q"],
        ["score", str(f), "--out", str(tmp_path / "o.csv")],
        ["info", str(f)],
    ):
        r = cli(*cmd)
        out = r.stdout + r.stderr
        assert r.returncode == 2 and "Traceback" not in out, out
        assert sum(line.startswith("error:") for line in out.splitlines()) == 1
        assert f"{f}:" in out and "train_step" in out


def test_a_canonical_column_the_store_cannot_hold_names_the_log():
    """The store's own guard, behind the readers' checks: a canonical value its column type
    cannot hold is a `LoadError` naming the log and the field, not an OverflowError."""
    from crbc_viz.store.rows import arrow_column  # the write side's column rule

    with pytest.raises(LoadError, match=r"x\.jsonl: field 'train_step'"):
        arrow_column("train_step", pd.Series([1, BIG], dtype=object), "x.jsonl")
    name, arr = arrow_column("extra", pd.Series([1, BIG], dtype=object), "x.jsonl")
    assert name == "extra__json" and arr.to_pylist() == ["1", str(BIG)]


def test_the_watcher_goes_on_after_a_log_it_cannot_ingest(tmp_path):
    from test_watch import Proc

    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    jsonl(logs / "step_0.jsonl", [{**r, "extra": BIG} for r in rows(train_step=0)])
    w = Proc(logs, store, "--settle", "0.3")
    try:
        w.wait_for("ingested  step_0.jsonl")
        jsonl(logs / "step_1.jsonl", [{**r, "train_step": BIG} for r in rows(train_step=1)])
        w.wait_for("failed  step_1.jsonl")
        assert "integer out of range" in w.wait_for("step_1.jsonl:line 1: field 'train_step'")
        jsonl(logs / "step_2.jsonl", rows(train_step=2))
        w.wait_for("ingested  step_2.jsonl")
        assert w.p.poll() is None
        assert w.kill(signal.SIGTERM) == 0
        w.wait_for("stopped: 2 logs ingested")
    finally:
        if w.p.poll() is None:
            w.p.kill()
    assert not any("Traceback" in line for line in w.seen)
    with LogStore(store) as st:
        assert sorted(st.train_steps()["train_step"]) == [0, 2] and st.num_steps == 8


def test_the_watcher_goes_on_after_an_unexpected_error(tmp_path, monkeypatch):
    """An error no reader foresaw (here a TypeError from the ingest of one log) is reported for
    that log, with its type; the next log is ingested."""
    from crbc_viz.store.ingest import IngestSession
    from crbc_viz.store.watch import Watcher

    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    jsonl(logs / "a.jsonl", rows(train_step=0))
    jsonl(logs / "b.jsonl", rows(train_step=1))
    real = IngestSession.add

    def add(self, src, **kw):
        if src.path.endswith("a.jsonl"):
            raise TypeError("not foreseen")
        return real(self, src, **kw)

    monkeypatch.setattr(IngestSession, "add", add)
    clock, events = [1000.0], []
    with Watcher(logs, store, settle=1.0, clock=lambda: clock[0], on_event=events.append) as w:
        w.step()
        clock[0] += 5
        w.step()
    assert [(e.kind, e.path) for e in events if e.kind in ("failed", "ingested")] == [
        ("failed", "a.jsonl"),
        ("ingested", "b.jsonl"),
    ]
    assert isinstance(events[0].error, TypeError)
