"""The columnar lane (`crbc_viz.io.columnar`) builds exactly the batch the schema path builds,
declines what it cannot prove clean, and lets ``crbc-viz score`` run without pandas.

The oracle is the schema path itself (`build_batch(read_table(...))`, the reader and validator
every other loader test pins down), run on the same file: the lane must agree on every array,
on the step and group frames (columns, dtypes, values, order), on warnings and on the scored
output, for generated logs with every optional field the lane takes and for the bundled ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crbc_viz import _arrow
from crbc_viz.api import score
from crbc_viz.io import load_rollouts
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.columnar import batch_from_arrow, read_columnar
from crbc_viz.io.readers import read_table
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from strategies import step_tables

ROOT = Path(__file__).resolve().parents[2]
ARRAYS = (
    "step_traj",
    "step_anchor_hash",
    "traj_offsets",
    "traj_group",
    "traj_success",
    "traj_truncated",
    "traj_return",
    "group_traj_offsets",
)


def _write(tmp_path: Path, rows: list[dict], name: str = "log.jsonl") -> str:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(p)


def _schema_path(path: str, **kw):
    return build_batch(read_table(path), **kw)


def _lane(path: str, **kw):
    table = read_columnar(path)
    lists = not path.endswith(".parquet")
    return None if table is None else batch_from_arrow(table, path, lists=lists, **kw)


def assert_same_batch(lane, ref) -> None:
    """Every array, both frames, the notes and the CRBC output of two batches agree."""
    for f in ARRAYS:
        a, b = getattr(lane, f), getattr(ref, f)
        assert a.dtype == b.dtype, f
        np.testing.assert_array_equal(a, b, err_msg=f)
    assert (lane.source, lane.warnings, lane.skipped) == (ref.source, ref.warnings, ref.skipped)
    assert lane.num_groups == ref.num_groups
    # The scored output, from the Arrow rows (before the frame exists) and from the frame.
    ra, rb = score(lane, "crbc", backend="numpy"), score(ref, "crbc", backend="numpy")
    np.testing.assert_allclose(ra.advantage, rb.advantage, rtol=0, atol=1e-12)
    assert ra.to_arrow().equals(
        pa.Table.from_pandas(rb.to_frame(), preserve_index=False).replace_schema_metadata()
    )
    pd.testing.assert_frame_equal(lane.steps, ref.steps)
    pd.testing.assert_frame_equal(lane.groups, ref.groups)


# -- generated logs ------------------------------------------------------------------------------
@st.composite
def canonical_logs(draw):
    """Valid logs with the optional fields the lane takes, in any row order: run ids and training
    steps (or neither), actions missing on some rows, ``done`` / ``success`` present or not and
    per step, integer rewards, a logged ``episode_return``, list-of-string fields, extra fields,
    anchors as JSON-object text or non-NFC Unicode."""
    rows = draw(step_tables(max_groups=3, max_trajs=3, max_len=4, signals=False))
    runs = draw(st.sampled_from([None, ["r0"], ["r0", "r/1"]]))
    steps = draw(st.sampled_from([None, [0], [0, 7]]))
    spellings = {
        "A": "A",
        "B": draw(st.sampled_from(["B", '{"b": 1, "a": [1, 2]}', " [1, 2.0] "])),
        "C": draw(st.sampled_from(["C", unicodedata.normalize("NFD", "café"), "C  "])),
        "D": "é" if draw(st.booleans()) else "D",
    }
    drop_done, drop_success = draw(st.booleans()), draw(st.booleans())
    int_reward, logged_return, menus = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    won_so_far = draw(st.booleans())  # success false until the last row of a won rollout
    last = {(r["group_id"], r["traj_id"]): r["step_idx"] for r in sorted(rows, key=lambda r: r["step_idx"])}
    out = []
    for i, r in enumerate(rows):
        r = dict(r, anchor_obs=spellings[r["anchor_obs"]])
        if runs is not None:
            r["run_id"] = runs[hash(r["group_id"]) % len(runs)]
        if steps is not None:
            r["train_step"] = steps[int(r["group_id"][1:]) % len(steps)]
        if draw(st.integers(0, 5)) == 0:
            del r["action"]
        if drop_done:
            del r["done"]
        if drop_success:
            del r["success"]
        elif won_so_far and r["step_idx"] < last[(r["group_id"], r["traj_id"])]:
            r["success"] = False
        if int_reward:
            r["reward"] = int(r["reward"])
        if logged_return:  # on every row, changing along the rollout: the last one counts
            r["episode_return"] = float(r["step_idx"]) * 0.5 - 1.0
        if menus:  # a list of strings on every row (available_actions of ALFWorld, Sokoban ...)
            r["available_actions"] = ["go", r["anchor_obs"]][: 1 + i % 2]
        if i % 3 == 0:
            r["note"] = f"n{i}"
        out.append(r)
    perm = draw(st.permutations(range(len(out))))
    return [out[i] for i in perm]


def _write_any(folder: Path, rows: list[dict], fmt: str) -> str:
    """``rows`` as JSONL, as Parquet written by pandas (``DataFrame.to_parquet``: pandas
    metadata, ``large_string``) or by pyarrow (``Table.from_pylist``: missing keys are nulls)."""
    if fmt == "jsonl":
        return _write(folder, rows)
    p = folder / f"log_{fmt}.parquet"
    if fmt == "pandas-parquet":
        pd.DataFrame(rows).to_parquet(p)
    else:
        pq.write_table(pa.Table.from_pylist(rows), p)
    return str(p)


FORMATS = ("jsonl", "pandas-parquet", "arrow-parquet")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=canonical_logs(), threshold=st.sampled_from([0.0, 0.5]), fmt=st.sampled_from(FORMATS))
def test_lane_equals_the_schema_path_on_generated_logs(rows, threshold, fmt, tmp_path_factory):
    path = _write_any(tmp_path_factory.mktemp("lane"), rows, fmt)
    ref = _schema_path(path, success_threshold=threshold)
    lane = _lane(path, success_threshold=threshold)
    if lane is None:  # declined (a note the schema path writes): load_rollouts gives its batch
        lane = load_rollouts(path, success_threshold=threshold)
    assert_same_batch(lane, ref)


@pytest.mark.parametrize("fmt", FORMATS)
def test_lane_takes_the_benchmark_workload(fmt, tmp_path):
    """The CLI benchmark's log (groups x 8 rollouts, cycles) is read by the lane, as JSONL and
    as Parquet from either writer."""
    rows = batch_to_rows(random_mdp_batch(16, 8, 30, num_states=20, p_fail=0.05, seed=3))
    path = _write_any(tmp_path, rows, fmt)
    lane = load_rollouts(path)
    assert lane.arrow_steps is not None
    assert_same_batch(lane, _schema_path(path))


@pytest.mark.parametrize(
    "name",
    [
        "toy/toy_group.jsonl",
        "toy/rare_route.jsonl",
        "sokoban/sokoban.jsonl",
        "textworld/textworld_cooking.jsonl.gz",
    ],
)
def test_lane_equals_the_schema_path_on_bundled_logs(name):
    path = str(ROOT / "sample_rollouts" / name)
    lane = load_rollouts(path)
    assert lane.arrow_steps is not None, f"{name} should be read by the columnar lane"
    assert_same_batch(lane, _schema_path(path))


def _rows(n_traj: int = 2, n: int = 3) -> list[dict]:
    return [
        {
            "group_id": "g",
            "traj_id": f"t{t}",
            "step_idx": i,
            "reward": float(i == n - 1 and t == 0),
            "anchor_obs": f"s{i}",
            "action": "a",
            "done": i == n - 1,
            "success": t == 0,
        }
        for t in range(n_traj)
        for i in range(n)
    ]


def _mutate(kind: str) -> list[dict]:
    rows = _rows()
    if kind == "anchor_key":
        rows[0]["anchor_key"] = "k0"
    elif kind == "episode_return":
        rows[2]["episode_return"] = 1.0
    elif kind == "success_turns_false":
        rows[0]["success"], rows[1]["success"], rows[2]["success"] = True, False, False
    elif kind == "truncated_success":
        rows[2]["done"] = False
    elif kind == "duplicate_step":
        rows[1]["step_idx"] = 0
    elif kind == "gap":
        rows[2]["step_idx"] = 5
    elif kind == "integer_group_id":
        for r in rows:
            r["group_id"] = 7
    elif kind == "missing_anchor":
        del rows[1]["anchor_obs"]
    elif kind == "missing_reward":
        del rows[1]["reward"]
    elif kind == "success_missing_on_a_row":
        del rows[0]["success"]
    elif kind == "reward_too_large":
        rows[0]["reward"] = 1e16
    elif kind == "step_idx_negative":
        rows[0]["step_idx"] = -1
    elif kind == "text_id":
        rows[0]["traj_id"] = 5
    elif kind == "signal_json":
        rows[0]["rubric"] = "[]"
    return rows


DECLINED = [
    "anchor_key",
    "episode_return",
    "success_turns_false",
    "truncated_success",
    "duplicate_step",
    "gap",
    "integer_group_id",
    "missing_anchor",
    "missing_reward",
    "success_missing_on_a_row",
    "reward_too_large",
    "step_idx_negative",
    "text_id",
    "signal_json",
]


@pytest.mark.parametrize("kind", DECLINED)
def test_lane_declines_what_the_schema_path_must_see(kind, tmp_path):
    """Each of these needs a message, a warning or a rule of the schema path: the lane returns
    None, and `load_rollouts` answers exactly as the schema path does (batch or error)."""
    path = _write(tmp_path, _mutate(kind))
    assert _lane(path) is None
    try:
        ref = _schema_path(path)
    except Exception as exc:  # noqa: BLE001 (the same error, whatever its type)
        with pytest.raises(type(exc)) as got:
            load_rollouts(path)
        assert str(got.value) == str(exc)
        return
    batch = load_rollouts(path)
    assert_same_batch(batch, ref)


def test_parquet_with_a_stored_index_or_lists_goes_to_the_schema_path(tmp_path):
    """A pandas index written as a column, or list columns (which pyarrow converts to numpy
    arrays in the schema path's frame), are the schema path's to read."""
    rows = _rows()
    indexed = tmp_path / "indexed.parquet"
    pd.DataFrame(rows).set_index("traj_id", drop=False).to_parquet(indexed)
    listed = tmp_path / "listed.parquet"
    pd.DataFrame([dict(r, menu=["a", "b"]) for r in rows]).to_parquet(listed)
    for p in (str(indexed), str(listed)):
        assert _lane(p) is None
        batch = load_rollouts(p)
        assert_same_batch(batch, _schema_path(p))


def test_clean_mutation_base_is_taken(tmp_path):
    """The base of the declined cases is itself clean (so each case tests its one change)."""
    assert _lane(_write(tmp_path, _rows())) is not None


# -- the command line without pandas -------------------------------------------------------------
SCRIPT = """
import sys
from crbc_viz.cli import main
rc = main(["score", sys.argv[1], "-o", sys.argv[2]])
print("pandas imported" if "pandas" in sys.modules else "no pandas")
# pyarrow.compute builds a wrapper per kernel on import (~60 ms): the lane calls the kernels.
print("compute imported" if "pyarrow.compute" in sys.modules else "no compute")
sys.exit(rc)
"""


@pytest.mark.parametrize("fmt", ["jsonl", "arrow-parquet"])
def test_score_cli_on_a_clean_log_never_imports_pandas(fmt, tmp_path):
    rows = batch_to_rows(random_mdp_batch(8, 4, 20, num_states=10, p_fail=0.05, seed=5))
    log, out = _write_any(tmp_path, rows, fmt), tmp_path / "out.parquet"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, log, str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert "no pandas" in proc.stdout
    assert "no compute" in proc.stdout
    # The file pandas reads back is the frame the pandas writer would have written.
    want = score(_schema_path(log), "crbc").to_frame()
    pd.testing.assert_frame_equal(pd.read_parquet(out), want)
    assert (
        pq.read_table(out).schema.remove_metadata()
        == pa.Table.from_pandas(want, preserve_index=False).schema.remove_metadata()
    )


# -- numpy <-> Arrow helpers ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.float64, np.bool_])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000])
def test_arrow_helpers_round_trip(dtype, n):
    rng = np.random.default_rng(n)
    values = (rng.integers(0, 2, n) if dtype is np.bool_ else rng.integers(-50, 50, n)).astype(dtype)
    arr = _arrow.array(values)
    assert arr.to_pylist() == values.tolist()  # pyarrow's own reading of the buffers
    np.testing.assert_array_equal(_arrow.numbers(arr), values)
    if n > 3:  # sliced views (non-zero offsets, bits not on a byte boundary)
        np.testing.assert_array_equal(_arrow.numbers(arr.slice(3, n - 4)), values[3 : n - 1])
        chunked = pa.chunked_array([arr.slice(0, 3), arr.slice(3)])
        np.testing.assert_array_equal(_arrow.numbers(chunked), values)


def test_arrow_texts_and_take():
    words = ["", "a", "café", "naïve ☃", "x" * 300]
    arr = _arrow.texts(words)
    assert arr.to_pylist() == words and arr.type == pa.string()
    assert _arrow.take(arr, np.array([4, 0, 2])).to_pylist() == [words[4], words[0], words[2]]
    with pytest.raises(TypeError, match="no Arrow conversion"):
        _arrow.array(np.zeros(2, dtype=np.float16))


def test_arrow_call_and_cast_match_pyarrow_compute():
    """`call` / `cast` (the kernels without importing pyarrow.compute) give what the public
    pyarrow.compute functions give."""
    import pyarrow.compute as pc

    words = pa.chunked_array([["b", None, "a"], ["b", "c", None]])
    got, want = _arrow.call("dictionary_encode", words.combine_chunks()), pc.dictionary_encode(words)
    assert got.indices.to_pylist() == want.combine_chunks().indices.to_pylist()
    assert got.dictionary.to_pylist() == ["b", "a", "c"]
    filled = _arrow.call("coalesce", words, _arrow.texts(["?"])[0])
    assert filled.to_pylist() == pc.fill_null(words, "?").to_pylist()
    ints = pa.chunked_array([[3, -7], [12]])
    assert _arrow.call("min_max", ints).as_py() == {"min": -7, "max": 12}
    wide = _arrow.cast(words, pa.large_string())
    assert wide.type == pa.large_string() and wide.to_pylist() == words.to_pylist()
    assert _arrow.cast(words, pa.string()) is words  # already that type: untouched
    with pytest.raises(pa.ArrowInvalid):  # a checked cast, as pc.cast
        _arrow.cast(pa.array([2**40]), pa.int32())
    table = pa.table({"x": [10, 20, 30]})
    assert _arrow.take(table, np.array([2, 0])).column("x").to_pylist() == [30, 10]
    assert _arrow.take(table, pa.array([1])).column("x").to_pylist() == [20]
