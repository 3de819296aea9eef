"""Anchor identity: booleans are not numbers (SCHEMA.md, Conventions, "Anchor canonicalisation").

The spec's text decides every expectation here, written out by hand as a class label per
anchor: numbers compare by value (``1`` = ``1.0``, in objects and arrays alike), booleans are
not numbers (``true`` != ``1``, ``[true, false]`` != ``[1, 0]``) at any depth, a string that
is the JSON text of an array or object is that array or object (so a CSV / Parquet cell and a
JSONL value agree), and any other string stays a string (``"true"`` is not ``true``). Two
anchors must get one key exactly when they carry the same label, through `anchor_key`, the
schema path, the columnar lane, CSV, Parquet, the store and the trainer adapters' hashing.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import crbc_viz
from crbc_viz.integrations._core import anchor_hashes
from crbc_viz.io import anchor_key, load_rollouts
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.columnar import batch_from_arrow, read_columnar
from crbc_viz.io.readers import read_table
from crbc_viz.store import LogStore, ingest

# (anchor_obs as JSON would carry it, its identity by the spec's rules)
LABELLED = [
    ({"flag": True}, "obj-true"),
    ({"flag": 1}, "obj-1"),
    ({"flag": 1.0}, "obj-1"),
    ([True, False], "arr-bool"),
    ([1, 0], "arr-10"),
    ([1.0, -0.0], "arr-10"),
    ({"a": {"b": [True]}}, "nested-true"),
    ({"a": {"b": [1]}}, "nested-1"),
    ({"b": [1.0], "a": 0}, "nested-obj-1"),
    ({"a": 0, "b": [1]}, "nested-obj-1"),
    ({"a": False, "b": [1]}, "nested-obj-false"),
    ([True, 2], "mixed-true-2"),
    ([True, 2.0], "mixed-true-2"),
    ([1, 2], "arr-12"),
    ([[False, True]], "grid-bool"),
    ([[0, 1]], "grid-01"),
    ([{"x": False}], "list-obj-false"),
    ([{"x": 0}], "list-obj-0"),
]


def _assert_partition(keys, labels) -> None:
    """Keys are equal exactly where the hand-written labels are."""
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            same = keys[i] == keys[j]
            assert same == (labels[i] == labels[j]), (i, j, labels[i], labels[j])


def _rows(obs: list) -> list[dict]:
    return [
        {
            "group_id": "g",
            "traj_id": f"t{i}",
            "step_idx": 0,
            "reward": float(i % 2),
            "action": "go",
            "anchor_obs": o,
        }
        for i, o in enumerate(obs)
    ]


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _write_csv(path: Path, rows: list[dict]) -> str:
    """Every cell text; arrays and objects as JSON text (as pandas or a spreadsheet writes them)."""
    fields = list(rows[0])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for r in rows:
            w.writerow([r[f] if isinstance(r[f], str) else json.dumps(r[f]) for f in fields])
    return str(path)


def _hashes_in_row_order(batch) -> list[int]:
    """The step anchor hash of each trajectory's single step, in the file's row order."""
    traj = batch.steps["traj_id"].tolist()
    h = batch.step_anchor_hash.tolist()
    by_traj = dict(zip(traj, h))
    return [by_traj[f"t{i}"] for i in range(len(traj))]


# ================================================================ the key itself


@pytest.mark.parametrize(
    ("boolean", "number"),
    [
        (True, 1),
        (False, 0),
        (True, 1.0),
        (np.bool_(True), np.int64(1)),
        ({"flag": True}, {"flag": 1}),
        ({"flag": False}, {"flag": 0.0}),
        ([True, False], [1, 0]),
        ([True, False], [1.0, 0.0]),
        ([[True], [False]], [[1], [0]]),
        ({"a": {"b": [True, {"c": False}]}}, {"a": {"b": [1, {"c": 0}]}}),
        ([True, 2], [1, 2]),
        ([True, "x"], [1, "x"]),
        (np.array([True, False]), np.array([1, 0])),
        (np.array([[True, False]]), [[1.0, 0.0]]),
        ([np.array([True]), np.array([0])], [[1], [0]]),
        ("[true, false]", "[1, 0]"),
        ('{"flag": true}', '{"flag": 1}'),
    ],
)
def test_a_boolean_never_has_the_key_of_its_number(boolean, number):
    assert anchor_key(boolean) != anchor_key(number)


@pytest.mark.parametrize(
    ("spellings", "other"),
    [
        # one boolean anchor however it is carried, and not the number
        ([[True, False], np.array([True, False]), "[true, false]", " [true,false] "], [1, 0]),
        ([{"flag": True}, '{"flag": true}', {"flag": np.bool_(True)}], {"flag": 1}),
        ([[True, 2], [True, 2.0], "[true, 2.0]", [np.bool_(True), np.int64(2)]], [1, 2]),
        ([[[True], [False]], np.array([[True], [False]]), "[[true], [false]]"], [[1], [0]]),
        # numbers by value still, and not the boolean
        ([1, 1.0, np.int64(1), np.float64(1.0)], True),
        ([{"a": 1}, {"a": 1.0}, '{"a": 1.0}'], {"a": True}),
        ([[1, 0], [1.0, -0.0], np.array([1, 0]), "[1, 0]"], [True, False]),
    ],
)
def test_spellings_of_one_anchor_merge_and_booleans_stay_apart(spellings, other):
    keys = {anchor_key(s) for s in spellings}
    assert len(keys) == 1
    assert anchor_key(other) not in keys


def test_labelled_anchors_partition_by_the_spec():
    _assert_partition([anchor_key(o) for o, _ in LABELLED], [lab for _, lab in LABELLED])


def test_a_string_that_spells_a_boolean_stays_a_string():
    # Only JSON text of an array or object is parsed; "true" is text, not the boolean or 1.
    keys = [anchor_key(v) for v in ("true", True, 1, "1", "[true]", [True], [1])]
    _assert_partition(keys, ["s-true", "true", "1", "s-1", "arr-true", "arr-true", "arr-1"])


# ================================================================ through the loader


def test_jsonl_csv_parquet_and_the_lane_give_the_spec_s_anchors(tmp_path):
    obs = [o for o, _ in LABELLED]
    labels = [lab for _, lab in LABELLED]
    values = _write_jsonl(tmp_path / "values.jsonl", _rows(obs))  # objects: the schema path
    texts = _rows([json.dumps(o) for o in obs])  # JSON text cells: the columnar lane takes them
    text_jsonl = _write_jsonl(tmp_path / "text.jsonl", texts)
    text_csv = _write_csv(tmp_path / "text.csv", texts)
    text_parquet = str(tmp_path / "text.parquet")
    pq.write_table(pa.Table.from_pylist(texts), text_parquet)

    lane = batch_from_arrow(read_columnar(text_jsonl), text_jsonl)
    lane_pq = batch_from_arrow(read_columnar(text_parquet), text_parquet, lists=False)
    assert lane is not None and lane_pq is not None  # the lane took both files
    batches = [
        load_rollouts(values),
        build_batch(read_table(text_jsonl)),
        lane,
        load_rollouts(text_csv),
        lane_pq,
        build_batch(read_table(text_parquet)),
    ]
    first = _hashes_in_row_order(batches[0])
    _assert_partition(first, labels)
    for b in batches[1:]:
        assert _hashes_in_row_order(b) == first, b.source
    assert crbc_viz.build_graph(batches[0]).num_nodes == len(set(labels))


def test_csv_cells_and_jsonl_values_agree_on_booleans(tmp_path):
    cells = ["true", "[true]", "1", "[1]", '{"ok": true}', '{"ok": 1}']
    labels = ["s-true", "arr-true", "s-1", "arr-1", "obj-true", "obj-1"]
    c = load_rollouts(_write_csv(tmp_path / "c.csv", _rows(cells)))
    j = load_rollouts(
        _write_jsonl(tmp_path / "j.jsonl", _rows(["true", [True], "1", [1], {"ok": True}, {"ok": 1}]))
    )
    _assert_partition(_hashes_in_row_order(c), labels)
    assert _hashes_in_row_order(c) == _hashes_in_row_order(j)


def test_parquet_list_columns_of_booleans_are_not_numbers(tmp_path):
    base = {"group_id": ["g", "g"], "traj_id": ["t0", "t1"], "step_idx": [0, 0], "reward": [0.0, 1.0]}
    cases = {
        "bool": (pa.array([[True, False], [True, False]]), [True, False]),
        "int": (pa.array([[1, 0], [1, 0]]), [1, 0]),
        "double": (pa.array([[1.0, 0.0], [1.0, 0.0]]), [1.0, 0.0]),
        "grid_bool": (pa.array([[[True, False]], [[True, False]]]), [[True, False]]),
        "grid_int": (pa.array([[[1, 0]], [[1, 0]]]), [[1, 0]]),
    }
    keys = {}
    for name, (col, as_json) in cases.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({**base, "anchor_obs": col}), path)
        got = load_rollouts(path).steps["anchor_key"].tolist()
        assert got == [anchor_key(as_json)] * 2, name  # a Parquet list cell = the JSONL array
        keys[name] = got[0]
    _assert_partition(list(keys.values()), ["bool", "num", "num", "grid_bool", "grid_num"])


def test_store_ingest_keeps_booleans_apart(tmp_path):
    obs = [{"flag": True}, {"flag": 1}, {"flag": 1.0}, [True, False], [1, 0]]
    f = _write_jsonl(tmp_path / "s.jsonl", _rows(obs))
    ingest(tmp_path / "store", [f])
    batch = LogStore(tmp_path / "store").load_batch()
    _assert_partition(_hashes_in_row_order(batch), ["obj-true", "obj-1", "obj-1", "arr-bool", "arr-10"])


def test_trainer_adapter_hashing_keeps_booleans_apart():
    anchors = np.empty(6, dtype=object)
    anchors[:] = [True, 1, 1.0, False, 0, [True, False]]
    h = anchor_hashes(anchors).tolist()
    _assert_partition(h, ["true", "1", "1", "false", "0", "arr-bool"])
