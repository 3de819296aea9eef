"""An importer reads a reader's rows by column (`RawTable.columns`, `crbc_viz.io.arrow_rows.Columns`):
each column holds the values the pandas frame of the same table holds (its ``to_numpy()``: dtype
and every value's type, None and NaN told apart) — the oracle is pandas' own conversion
(`frame_of`: ``Table.to_pandas``), on every file the tests and samples ship and on tables of every
Arrow type a reader or an importer makes."""

from __future__ import annotations

import datetime
import decimal
import math

import numpy as np
import pyarrow as pa
import pytest
from test_arrow_rows import COLUMNS

from crbc_viz.errors import LoadError
from crbc_viz.io.arrow_rows import Columns, arrow_table, column_values, frame_of
from crbc_viz.io.readers import FORMATS, SUFFIXES, read_table
from helpers import ROOT


def _same(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.dtype == want.dtype, where
    assert len(got) == len(want), where
    for i, (a, b) in enumerate(zip(got.tolist(), want.tolist())):
        assert type(a) is type(b), f"{where} row {i}: {a!r} vs {b!r}"
        assert repr(a) == repr(b), f"{where} row {i}: {a!r} vs {b!r}"


def _check(table: pa.Table, where: str) -> None:
    frame = frame_of(table)
    for c in table.column_names:
        _same(column_values(table.column(c)), frame[c].to_numpy(), f"{where} column {c}")


def _files():
    roots = [ROOT / "sample_rollouts", ROOT / "tests" / "fixtures", ROOT / "tests" / "bad_inputs"]
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.name.lower().endswith(SUFFIXES) and p.stat().st_size < 20 << 20:
                yield p


FILES = list(_files())


def test_the_corpus_is_the_shipped_files():
    assert len(FILES) > 100  # every reader's format, clean and hostile


def test_every_shipped_files_columns_are_its_frames():
    """Every file any reader reads: its table's columns as `Columns` gives them equal the frame's."""
    checked = 0
    for p in FILES:
        try:
            raw = read_table(p)
        except (LoadError, ValueError):
            continue  # not readable as a table: nothing for an importer to read
        _check(raw.table, str(p.relative_to(ROOT)))
        cols = raw.columns
        assert list(cols) == raw.table.column_names and cols.rows == raw.table.num_rows
        checked += 1
    assert checked > 100


def test_columns_an_importer_builds_are_their_frames():
    table = arrow_table(COLUMNS)  # holds the values of the rows taken below
    _check(table, "importer columns")
    _check(table.take([2, 0, 1, 1]), "rows taken")
    _check(table.slice(1), "a slice")


TYPED = {
    "int8": pa.array([1, None, 3], pa.int8()),
    "uint64": pa.array([1, 2, 2**64 - 1], pa.uint64()),
    "uint64_missing": pa.array([1, None, 2**64 - 1], pa.uint64()),
    "float32": pa.array([0.5, None, 1.0], pa.float32()),
    "flags": pa.array([True, False, True]),
    "flags_missing": pa.array([True, None, False]),
    "text": pa.array(["a", "b", "c"]),
    "text_missing": pa.array(["a", None, ""]),
    "large_text": pa.array(["a", None, "c"], pa.large_string()),
    "nulls": pa.array([None, None, None], pa.null()),
    "bytes": pa.array([b"a", None, b""]),
    "lists": pa.array([[1, 2], None, []]),
    "text_lists": pa.array([["a", None], [], None]),
    "nested": pa.array([[[1.5]], [[None]], None]),
    "structs": pa.array([{"role": "user", "content": "hi"}, None, {"role": None, "content": "x"}]),
    "list_of_structs": pa.array([[{"role": "user", "n": 1}], [], None]),
    "timestamps": pa.array([1, None, 3], pa.timestamp("s")),
    "timestamps_tz": pa.array([1, None, 3], pa.timestamp("ms", tz="UTC")),
    "dates": pa.array([datetime.date(2026, 12, 5), None, datetime.date(1970, 1, 1)]),
    "decimals": pa.array([decimal.Decimal("1.5"), None, decimal.Decimal("-2")]),
    "dictionary": pa.array(["a", "b", None]).dictionary_encode(),
    "durations": pa.array([1, None, 2], pa.duration("s")),
    "nan": pa.array([math.nan, None, 1.0]),
}


@pytest.mark.parametrize("name", sorted(TYPED))
def test_each_arrow_type_is_held_as_the_frame_holds_it(name):
    table = pa.table({name: TYPED[name]})
    _check(table, name)
    chunked = pa.table({name: pa.chunked_array([TYPED[name].slice(0, 1), TYPED[name].slice(1)])})
    _check(chunked, f"{name} in two chunks")


def test_a_row_and_the_mapping():
    table = arrow_table({"a": [1, 2], "b": ["x", None], "c": [[1], None]})
    raw_cols = Columns(table)
    assert list(raw_cols) == ["a", "b", "c"] and len(raw_cols) == 3 and raw_cols.rows == 2
    assert "b" in raw_cols and "z" not in raw_cols
    row = raw_cols.row(1)
    assert list(row) == ["a", "b", "c"] and row["a"] == 2 and math.isnan(row["b"]) and row["c"] is None
    with pytest.raises(KeyError):
        raw_cols["z"]


def test_formats_covered():
    got = {p.name.lower().removesuffix(".gz").rsplit(".", 1)[-1] for p in FILES}
    assert {"jsonl", "json", "parquet", "csv"} <= got, (got, FORMATS)
