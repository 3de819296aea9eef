"""The parse child's outcome comes back as data (Arrow IPC and JSON, `crbc_viz.ui.outcome`),
never as a pickle: a result file that anything else wrote (a child taken over, a process that
can write the child's folder) runs no code, touches no file and is one line of refusal; a real
batch comes back equal, field for field and cell for cell, to the batch the in-process loader
reads from the same file.

The hostile results are written by a stand-in for the child (`subprocess.Popen` patched: it
writes the files into the folder the server gave the child, then runs a child that does
nothing), at every name the server may read a result from.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.data import ArrowRows, RolloutBatch
from crbc_viz.errors import LoadError, ParseAbortedError
from crbc_viz.ui import files, sandbox

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "sample_rollouts/toy/toy_group.jsonl"
RESULT_NAMES = ("outcome.pickle", "outcome.json", "steps.arrow", "groups.arrow", "arrays.arrow")


# ---------------------------------------------------------------- a stand-in child


def _fake_child(monkeypatch, write) -> list:
    """Patch `subprocess.Popen` so that the "child" is ``write(folder)`` (for every folder the
    server may read a result from: the child's working folder and its ``out`` folder), then a
    process that exits 0. Returns the list of argv started."""
    real = subprocess.Popen
    started = []

    def popen(argv, **kw):
        started.append(argv)
        work = Path(kw["cwd"])
        for folder in (work, work / "out"):
            if folder.is_dir():
                write(folder)
        return real([sys.executable, "-c", "pass"], **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


class _MakeFile:
    """Unpickled: ``numpy.memmap(path, 'uint8', 'w+', 0, (1,))`` creates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (np.memmap, (self.path, "uint8", "w+", 0, (1,)))


class _Truncate:
    """Unpickled: ``pyarrow.OSFile(path, 'w')`` truncates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (pa.OSFile, (self.path, "w"))


def _log(tmp_path: Path, name: str = "run.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(TOY.read_bytes())
    return path


def _one_line(err: pytest.ExceptionInfo, name: str) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(name + ":"), msg
    return msg


def test_a_pickled_result_runs_nothing_and_touches_no_file(tmp_path, monkeypatch):
    """A pickle that, unpickled, creates a file (numpy.memmap) and truncates another
    (pyarrow.OSFile), put where the server reads the child's result."""
    created, victim = tmp_path / "created-by-pickle", tmp_path / "victim.txt"
    victim.write_text("keep me")
    payload = pickle.dumps(("ok", [_MakeFile(created), _Truncate(victim)]), protocol=pickle.HIGHEST_PROTOCOL)

    def write(folder: Path) -> None:
        for name in RESULT_NAMES:
            (folder / name).write_bytes(payload)

    path = _log(tmp_path)
    started = _fake_child(monkeypatch, write)
    with pytest.raises(ParseAbortedError) as err:
        sandbox.open_batch(str(path))
    assert started, "no child was started"
    assert not created.exists(), "unpickling the result created a file"
    assert victim.read_text() == "keep me", "unpickling the result truncated a file"
    msg = _one_line(err, "run.jsonl")
    assert "result" in msg, msg


@pytest.mark.parametrize(
    "case, why",
    [
        ("error-class", "class 'SystemExit'"),
        ("error-path", "class 'os.system'"),
        ("deep-json", "not the JSON"),
        ("not-json", "not the JSON"),
        ("link", "no outcome.json"),
        ("fifo", "not a regular file"),
        ("kind", "kind 'eval'"),
        ("bad-arrow", "steps.arrow is not a valid Arrow file"),
        ("cell-tag", "tagged 'pickle'"),
        ("lengths", "disagree in length"),
        ("arrow-type", "types the readers do not make"),
        ("frame-dtype", "not int64"),
        ("unhashable", "cannot be rebuilt"),
    ],
)
def test_a_malformed_result_is_one_line_of_refusal(tmp_path, monkeypatch, real_outcome, case, why):
    real = real_outcome  # the files a real child wrote for the toy log, altered below
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")

    def write(folder: Path) -> None:
        if folder.name != "out":
            return
        for name, data in real.items():
            (folder / name).write_bytes(data)
        meta = json.loads(real["outcome.json"])
        target = folder / "outcome.json"
        if case == "error-class":
            target.write_text(json.dumps({"kind": "error", "class": "SystemExit", "message": "bye"}))
        elif case == "error-path":
            target.write_text(json.dumps({"kind": "error", "class": "os.system", "message": "id"}))
        elif case == "deep-json":
            target.write_text("[" * 200_000 + "]" * 200_000)
        elif case == "not-json":
            target.write_bytes(b"\x80\x04\x95garbage")
        elif case == "link":
            target.unlink()
            target.symlink_to(secret)
        elif case == "fifo":
            target.unlink()
            os.mkfifo(target)
        elif case == "kind":
            target.write_text(json.dumps({"kind": "eval"}))
        elif case == "bad-arrow":
            (folder / "steps.arrow").write_bytes(b"ARROW1\x00\x00" + b"\xff" * 64 + b"ARROW1")
        elif case == "cell-tag":  # one object column whose cell names a tag no type has
            cell = pa.array(['{"$": "pickle", "v": "gASV"}'], pa.large_string())
            (folder / "steps.arrow").write_bytes(_ipc(pa.table({"c0": cell})))
            column = {"name": "c", "cells": True, "dtype": "object"}
            meta["batch"]["steps"] = {"lane": "frame", "rows": 1, "columns": [column], "columns_dtype": "str"}
            target.write_text(json.dumps(meta))
        elif case == "arrow-type":  # rows as Arrow, of a type no reader makes
            meta["batch"]["steps"] = {"lane": "arrow"}
            target.write_text(json.dumps(meta))
            (folder / "steps.arrow").write_bytes(_ipc(pa.table({"a": pa.array([{"x": 1}])})))
        elif case in ("frame-dtype", "unhashable"):  # a column that is not what its layout says
            name = "c" if case == "frame-dtype" else {"$": "dict", "v": [[[1], 2]]}
            column = {"name": name, "cells": False, "dtype": "int64"}
            meta["batch"]["steps"] = {"lane": "frame", "rows": 1, "columns": [column], "columns_dtype": "str"}
            target.write_text(json.dumps(meta))
            values = pa.array(["x"]) if case == "frame-dtype" else pa.array([1])
            (folder / "steps.arrow").write_bytes(_ipc(pa.table({"c0": values})))
        elif case == "lengths":
            arrays = pa.ipc.open_file(pa.py_buffer(real["arrays.arrow"])).read_all()
            cols = {n: arrays.column(n) for n in arrays.column_names}
            cols["traj_return"] = pa.array([[1.0]], pa.large_list(pa.float64()))
            (folder / "arrays.arrow").write_bytes(_ipc(pa.table(cols)))

    path = _log(tmp_path)
    _fake_child(monkeypatch, write)
    with pytest.raises(ParseAbortedError) as err:
        sandbox.open_batch(str(path))
    msg = _one_line(err, "run.jsonl")
    assert why in msg and "TOP SECRET" not in msg, msg


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def real_outcome(tmp_path_factory) -> dict[str, bytes]:
    """The files a real child writes for the toy log (captured before the server removes them)."""
    captured: dict[str, bytes] = {}
    real_rmtree = shutil.rmtree

    def keep(path, *a, **k):
        out = Path(path) / "out"
        if out.is_dir() and not captured:
            captured.update({p.name: p.read_bytes() for p in out.iterdir()})
        return real_rmtree(path, *a, **k)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(shutil, "rmtree", keep)
        sandbox.open_batch(str(_log(tmp_path_factory.mktemp("real"), "real.jsonl")))
    assert set(captured) >= {"outcome.json", "steps.arrow", "groups.arrow", "arrays.arrow"}, captured
    return captured


def test_an_error_comes_back_as_its_class_and_problems(tmp_path, monkeypatch):
    problem = ["/srv/x.jsonl", 3, "reward", "expected a number", "line"]

    def write(folder: Path) -> None:
        if folder.name == "out":
            out = {"kind": "error", "class": "LoadError", "message": "m", "problems": [problem], "total": 7}
            (folder / "outcome.json").write_text(json.dumps(out))

    _fake_child(monkeypatch, write)
    with pytest.raises(LoadError) as err:
        sandbox.open_batch(str(_log(tmp_path)))
    assert type(err.value) is LoadError and err.value.total == 7
    (p,) = err.value.problems
    assert (p.path, p.line, p.field, p.message, p.where) == tuple(problem)


# ---------------------------------------------------------------- a real batch, field for field


def _same(a, b) -> bool:
    """``a`` and ``b`` are the same value of the same type (NaN equal to NaN, containers and
    arrays element by element, dict keys in order)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:
            return all(_same(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, np.floating):
        return a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if a is pd.NA or a is pd.NaT:
        return a is b
    return bool(a == b)


def _assert_same_frame(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert type(got.index) is type(want.index) and got.index.equals(want.index), what
    assert list(got.columns) == list(want.columns) and got.columns.dtype == want.columns.dtype, what
    for i, col in enumerate(want.columns):
        g, w = got.iloc[:, i], want.iloc[:, i]
        assert g.dtype == w.dtype, (what, col, g.dtype, w.dtype)
        if w.dtype == object:
            bad = [j for j in range(len(w)) if not _same(g.iloc[j], w.iloc[j])]
            assert not bad, (what, col, bad[:3], g.iloc[bad[0]], w.iloc[bad[0]])
        else:
            assert g.equals(w), (what, col)


def assert_same_batch(got: RolloutBatch, want: RolloutBatch, rename: tuple[str, str] | None = None) -> None:
    """Every field of ``got`` equals ``want``'s (``rename``: ``want``'s path written as the
    upload's name in its source and notes)."""

    def text(s: str) -> str:
        return s.replace(*rename) if rename else s

    for slot in ("_steps_rows", "_groups_rows"):  # the rows as stored, before any conversion
        g, w = got.__dict__[slot], want.__dict__[slot]
        assert type(g) is type(w), (slot, type(g), type(w))
        if isinstance(w, ArrowRows):
            assert g.table.equals(w.table, check_metadata=True), slot
    for f in dataclasses.fields(RolloutBatch):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, pd.DataFrame):
            _assert_same_frame(g, w, f.name)
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), f.name
        elif isinstance(w, str):
            assert g == text(w), (f.name, g, w)
        else:
            assert type(g) is type(w) and g == tuple(text(x) for x in w), (f.name, g, w)
    how_g, how_w = sandbox.read_as(got), sandbox.read_as(want)
    assert how_w is not None and how_g == dataclasses.replace(
        how_w, notes=tuple(text(n) for n in how_w.notes)
    )
    assert set(got.__dict__) == set(want.__dict__)


def _exotic_parquet(path: Path) -> Path:
    """The toy log as a canonical Parquet file with extra columns of every kind pandas makes
    object cells of (lists as arrays, structs as dicts, maps as lists of tuples, dates, times,
    decimals, bytes) and plain dtypes beside them (timestamps, categories, float32)."""
    rows = [json.loads(line) for line in TOY.read_text().splitlines()]
    t = pa.Table.from_pylist(rows)
    n = t.num_rows
    extra = {
        "x_list": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int64())),
        "x_struct": pa.array([{"a": i, "b": "é" * i, "$": None} for i in range(n)]),
        "x_date": pa.array([datetime.date(2020, 1, 1 + i % 20) for i in range(n)]),
        "x_time": pa.array([datetime.time(1, 2, i % 60, 5) for i in range(n)]),
        "x_dec": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(10, 2)),
        "x_bin": pa.array([bytes([i, 0, 255]) for i in range(n)]),
        "x_map": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        "x_ts": pa.array([datetime.datetime(2021, 5, 1, 12, i % 60) for i in range(n)], pa.timestamp("us")),
        "x_cat": pa.array(["a" if i % 2 else "b" for i in range(n)]).dictionary_encode(),
        "x_f32": pa.array([i / 3 for i in range(n)], pa.float32()),
        "x_nan": pa.array([float("nan") if i % 2 else -0.0 for i in range(n)]),
    }
    for name, arr in extra.items():
        t = t.append_column(name, arr)
    pq.write_table(t, path)
    return path


def _rllm_folder(tmp_path: Path) -> Path:
    dst = tmp_path / "train_logs" / "episodes"
    shutil.copytree(REPO / "tests/fixtures/rllm_real/train_logs/episodes", dst)
    return dst


@pytest.mark.parametrize(
    "source",
    [
        "sample_rollouts/toy/toy_group.jsonl",  # Arrow rows (the columnar lane)
        "sample_rollouts/search/search_signals.jsonl",  # lists, dicts and NaN in object columns
        "tests/bad_inputs/object_anchor.jsonl",
        "tests/bad_inputs/extra_fields.jsonl",
        "tests/fixtures/trl_run/completions/completions_00010.parquet",  # an importer, its notes
        "exotic.parquet",
        "rllm folder",
    ],
)
def test_a_server_file_read_in_the_child_equals_the_in_process_read(tmp_path, monkeypatch, source):
    if source == "exotic.parquet":
        path = _exotic_parquet(tmp_path / source)
    elif source == "rllm folder":
        path = _rllm_folder(tmp_path)
    else:
        path = tmp_path / "run" / Path(source).name
        path.parent.mkdir()
        shutil.copy(REPO / source, path)
    key = str(path.resolve())
    started = _count_children(monkeypatch)
    got = sandbox.open_batch(key)
    assert len(started) == 1  # read in a child
    assert_same_batch(got, sandbox.read(key))


def _count_children(monkeypatch) -> list:
    started, real = [], subprocess.Popen

    def popen(argv, **kw):
        started.append(argv)
        return real(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


def test_an_upload_read_in_the_child_equals_the_in_process_read_under_its_name(tmp_path, monkeypatch):
    """A TRL completions file uploaded as ``completions_00010.parquet`` (the train step is in its
    name): the child reads the server's copy under that name."""
    src = REPO / "tests/fixtures/trl_run/completions/completions_00010.parquet"
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    stored = files.save_upload("completions_00010.parquet", src.read_bytes())
    got = sandbox.open_batch(str(stored))
    here = tmp_path / "upload" / "completions_00010.parquet"  # a file of that name, read here
    here.parent.mkdir()
    shutil.copy(src, here)
    want = sandbox.read(str(here))
    assert_same_batch(got, want, rename=(str(here), "completions_00010.parquet"))
    assert int(got.steps["train_step"].iloc[0]) == 10


def test_a_store_group_read_in_the_child_equals_the_in_process_read(tmp_path):
    from crbc_viz.store import ingest

    ingest(tmp_path / "store", [_log(tmp_path)])
    label = sandbox.read(str(_log(tmp_path))).group_labels()[0]
    key = f"store:{tmp_path / 'store'}::{label}"
    got, want = sandbox.open_batch(key), sandbox.read(key)
    for name in (f.name for f in dataclasses.fields(RolloutBatch)):
        g, w = getattr(got, name), getattr(want, name)
        if isinstance(w, pd.DataFrame):
            _assert_same_frame(g, w, name)
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), name
        else:
            assert g == w, name
    assert sandbox.read_as(got) is None and sandbox.read_as(want) is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        -(2**70),
        float("inf"),
        -0.0,
        "\ud800 lone surrogate",
        [1, [2.5, None], "x"],
        {"a": 1, "$": 2},
        {1: "int key", (1, 2): "tuple key"},
        (1, "two"),
        b"\x00\xff",
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array(["a", None, 3], dtype=object),
        np.float32(1.5),
        np.datetime64("2020-01-01T00:00:00.123456789"),
        np.str_("s"),
        decimal.Decimal("-1.50"),
        datetime.datetime(2020, 1, 2, 3, 4, 5, 6),
        datetime.timedelta(days=-1, seconds=5, microseconds=7),
        pd.Timestamp("2020-01-01 00:00:00.000000001"),
        pd.NA,
        pd.NaT,
    ],
)
def test_every_cell_type_round_trips_with_its_type(value):
    from crbc_viz.ui import outcome

    text = json.dumps(outcome.encode_cell(value), ensure_ascii=True)
    assert _same(outcome.decode_cell(json.loads(text)), value)


def test_a_value_the_format_cannot_carry_is_refused_by_name():
    from crbc_viz.ui import outcome

    with pytest.raises(outcome._Unsendable, match="set"):
        outcome.encode_cell({1, 2})
