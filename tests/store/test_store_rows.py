"""The store's read side on Arrow (`crbc_viz.store.rows`, `LogStore.load_batch`): the batch's rows
are the frame DuckDB itself reads from the parts (its own ``.df()``, the oracle here), JSON
columns decoded as ``json.loads`` decodes each cell, the text joined by part and row; the batch
is assembled without pandas, and the decoded values live as long as the batch."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crbc_viz._arrow import array
from crbc_viz.store import LogStore, ingest
from crbc_viz.store.rows import decode_json, join_text, python_values

ROOT = Path(__file__).resolve().parents[2]
SAMPLES, FIXTURES, BAD = ROOT / "sample_rollouts", ROOT / "tests" / "fixtures", ROOT / "tests" / "bad_inputs"


def _nullable_log(path: Path) -> Path:
    """Extras missing on some rows: integers, flags, numbers, text, objects; action and
    observation missing on some rows; groups all-success, no-success and mixed."""
    rows, k = [], 0
    for g, outcomes in {"g_yes": (True, True), "g_no": (False, False), "g_mixed": (True, False)}.items():
        for t, ok in enumerate(outcomes):
            n = 2 + (k % 2)
            for i in range(n):
                r = {"run_id": "nul", "train_step": 3, "group_id": g, "traj_id": f"t{t}", "step_idx": i}
                r |= {"anchor_obs": f"state {i} of {g}", "reward": float(i == n - 1 and ok)}
                r |= {"done": i == n - 1, "success": ok}
                if k % 3:
                    r["action"] = f"act-{k}"
                if k % 2 == 0:
                    r["n_int"] = k * 7
                if k % 4 == 1:
                    r["flag"] = k % 8 == 1
                if k % 6 == 0:
                    r["note"] = f"note {k}"
                if k % 3 == 1:
                    r["obj"] = {"k": k, "v": [k, None]}
                if k % 2:
                    r["observation"] = f"You see room {k}"
                rows.append(r)
                k += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


#: Stores whose rows DuckDB reads with missing values of every kind: sources with different
#: columns (an integer or flag column missing on a whole source's rows: pandas nullable
#: columns), an action column with no value at all, JSON columns (objects, lists), text in a
#: side table, a log cut into many parts.
STORES = {
    "mixed_columns": [
        (SAMPLES / "toy/toy_group.jsonl", {}),
        (SAMPLES / "search/search_signals.jsonl", {}),
        (BAD / "object_anchor.jsonl", {"run_id": "obj"}),
        (BAD / "extra_fields.jsonl", {"run_id": "extra"}),
    ],
    "nullable": [(None, {})],
    "action_without_values": [(FIXTURES / "art/art_jsonl", {})],
    "many_parts": [(SAMPLES / "sokoban/sokoban.jsonl", {"part_rows": 150})],
    "list_anchor": [(BAD / "array_anchor.jsonl", {})],
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("stores")
    out = {}
    for name, calls in STORES.items():
        root = base / name
        for src, opts in calls:
            src = _nullable_log(base / "nullable.jsonl") if src is None else src
            ingest(root, [str(src)], **opts)
        out[name] = root
    return out


def _duckdb_rows(root: Path) -> pd.DataFrame:
    """The oracle: every step row as DuckDB's own frame reads it from the store's parts, the
    text side table joined by (part, row) and each ``<name>__json`` cell decoded with
    ``json.loads`` (the plain column's value where a row has one)."""
    import duckdb

    con = duckdb.connect()
    steps = sorted(str(p) for p in (root / "steps").rglob("*.parquet"))
    df = con.execute(
        "SELECT * FROM read_parquet(?, union_by_name=true, hive_partitioning=false)", [steps]
    ).df()
    texts = sorted((root / "text").rglob("*.parquet")) if (root / "text").exists() else []
    if texts:
        frames = []
        for p in texts:
            t = con.execute("SELECT * FROM read_parquet(?, hive_partitioning=false)", [str(p)]).df()
            t.insert(0, "_part", p.stem)
            frames.append(t)
        df = df.merge(pd.concat(frames, ignore_index=True), on=["_part", "_row"], how="left")
    for col in [c for c in df.columns if c.endswith("__json")]:
        base = col[: -len("__json")]
        vals = np.empty(len(df), dtype=object)
        vals[:] = [json.loads(v) if isinstance(v, str) else None for v in df[col]]
        if base in df.columns:
            plain = df[base].astype(object).to_numpy()
            vals = np.where(pd.isna(plain), vals, plain)
        df = df.drop(columns=[col])
        df[base] = vals
    return df.set_index(["_part", "_row"], drop=False)


def _cell(v):
    """A value told apart by type: None, NaN, pd.NA, int and float are different cells."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, float) and math.isnan(v):
        return ("nan",)
    return (type(v).__name__, repr(v))


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_store_batchs_rows_are_the_rows_duckdb_reads(stores, name):
    batch = LogStore(stores[name]).load_batch(text=True)
    got = batch.steps
    want = _duckdb_rows(stores[name]).loc[list(zip(got["_part"], got["_row"]))]
    assert len(want) == len(got) == batch.num_steps
    for col in got.columns:
        if col == "success":  # the trajectory's outcome on every one of its steps (checked below)
            continue
        w = want[col]
        if col in ("run_id", "group_id", "traj_id"):
            w = w.astype(object)  # a batch's ids are Python strings in object columns
        if col not in ("observation", "response"):  # text: read part by part, dtype by part
            assert str(got[col].dtype) == str(w.dtype), col
        assert [_cell(v) for v in got[col].tolist()] == [_cell(v) for v in w.tolist()], col
    outcome = want["success"].astype(object).fillna(False).to_numpy(bool)
    first = batch.traj_offsets[:-1]
    assert batch.traj_success.tolist() == outcome[first].tolist()
    assert got["success"].tolist() == np.repeat(outcome[first], batch.traj_len).tolist()
    kinds = {str(got[c].dtype) for c in got.columns}
    if name == "mixed_columns":
        assert {"Int64", "boolean"} <= kinds  # the nullable columns are really exercised
    if name == "action_without_values":
        assert got["action"].dtype == object and got["action"].isna().all()


def test_the_decoded_values_live_as_long_as_the_batch(stores):
    batch = LogStore(stores["list_anchor"]).load_batch()
    for _ in range(3):  # other batches made and dropped meanwhile
        assert len(LogStore(stores["list_anchor"]).load_batch().steps)
    gc.collect()
    anchors = batch.steps["anchor_obs"].tolist()
    assert anchors and all(isinstance(a, list) for a in anchors)


def test_a_store_batch_is_assembled_without_pandas(stores):
    script = (
        "import sys\n"
        "from crbc_viz.store import LogStore\n"
        f"b = LogStore({str(stores['many_parts'])!r}).load_batch(text=True)\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
        "assert b.has_step_column('observation') and 'pandas' not in sys.modules\n"
        "assert b.arrow_steps is None  # rows that convert their own way are read through the frame\n"
        "print(b.num_steps, b.steps.shape[0], 'pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    n, rows, pandas_after = out.stdout.split()
    assert n == rows == "2215" and pandas_after == "True"


def test_join_text_takes_each_rows_text_by_part_and_row():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n, m = int(rng.integers(0, 30)), int(rng.integers(0, 30))
        steps = pa.table(
            {
                "_part": [f"p{int(v)}" for v in rng.integers(0, 3, n)],
                "_row": array(rng.integers(0, 12, n).astype(np.int64)),
            }
        )
        keys = {(f"p{int(p)}", int(r)) for p, r in zip(rng.integers(0, 4, m), rng.integers(0, 12, m))}
        keys = sorted(keys)
        text = pa.table(
            {
                "_part": [k[0] for k in keys],
                "_row": array(np.array([k[1] for k in keys], dtype=np.int64)),
                "observation": [f"obs {k}" if i % 3 else None for i, k in enumerate(keys)],
            }
        )
        if text.num_rows == 0:
            continue
        got = join_text(steps, text).column("observation").to_pylist()
        by_key = {k: (f"obs {k}" if i % 3 else None) for i, k in enumerate(keys)}
        want = [
            by_key.get((p, r))
            for p, r in zip(steps.column("_part").to_pylist(), steps.column("_row").to_pylist())
        ]
        assert got == want


def test_decode_json_prefers_the_plain_value_and_decodes_the_rest():
    table = pa.table(
        {
            "a": ["x", None, None, "y"],
            "a__json": [None, '{"k": [1, 2]}', None, None],
            "b__json": ["[1, 2]", None, '"s"', "3"],
        }
    )
    out = decode_json(table)
    assert out.column_names == ["a", "b"]
    assert python_values(out.column("a")).tolist() == ["x", {"k": [1, 2]}, None, "y"]
    assert python_values(out.column("b")).tolist() == [[1, 2], None, "s", 3]


def test_array_with_valid_puts_nulls_where_a_value_is_not_valid():
    got = array(np.array([1, 2, 3, 4], dtype=np.int64), valid=np.array([True, False, True, False]))
    assert got.to_pylist() == [1, None, 3, None]
    flags = array(np.array([True, False, True]), valid=np.array([False, True, True]))
    assert flags.to_pylist() == [None, False, True]


@pytest.mark.parametrize("name", ["action_without_values", "nullable", "mixed_columns"])
def test_a_store_batch_is_scored_from_arrow_as_its_frame_scores_it(stores, name):
    """The actions are read from the Arrow column (no frame): the same action ids, inferred
    actions and credit as when the frame has been read first (pandas' factorisation)."""
    from crbc_viz.api import score
    from crbc_viz.graph import build_graph
    from crbc_viz.io.actions import missing_actions

    arrow = LogStore(stores[name]).load_batch()
    framed = LogStore(stores[name]).load_batch()
    assert len(framed.steps) and framed.plain_column("action") is None  # read through the frame
    assert arrow.plain_column("action") is not None
    assert missing_actions(arrow).tolist() == missing_actions(framed).tolist()
    from crbc_viz.graph import _logged_actions

    assert [v.tolist() for v in _logged_actions(arrow)] == [v.tolist() for v in _logged_actions(framed)]
    ga, gf = build_graph(arrow), build_graph(framed)
    assert ga.step_action.tolist() == gf.step_action.tolist()
    for est in ("crbc", "gigpo", "visit_local"):
        assert score(ga, est).advantage.tolist() == score(gf, est).advantage.tolist()


def test_a_store_batch_is_scored_without_pandas(stores):
    script = (
        "import sys\n"
        "from crbc_viz.api import score\n"
        "from crbc_viz.graph import build_graph\n"
        "from crbc_viz.store import LogStore\n"
        f"b = LogStore({str(stores['nullable'])!r}).load_batch(anchor_obs=False)\n"
        "r = score(build_graph(b), 'crbc')\n"
        "print(len(r.advantage), 'pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    n, pandas_loaded = out.stdout.split()
    assert int(n) > 0 and pandas_loaded == "False"
