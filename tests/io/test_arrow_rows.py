"""The importers' rows as Arrow (`crbc_viz.io.arrow_rows`): an importer's rows are an Arrow table
until someone reads ``records``, the frame made from that table is the one pandas builds from
the same columns (values, dtypes, missing values, rows taken), and a clean table is assembled by
the columnar lane into the batch the schema path builds (`crbc_viz.io.columnar.batch_of_import`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from crbc_viz.errors import LoadError
from crbc_viz.io.arrow_rows import arrow_table, frame_of, held
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.columnar import batch_of_import
from crbc_viz.io.importers import expand_sources, read_source
from crbc_viz.io.readers import RawTable
from helpers import ROOT


@pytest.mark.parametrize(
    "source",
    [
        "trl_real/trl_run/completions/completions_00001.parquet",
        "verl_real/rollout_v1/1.jsonl",
        "rllm_real/train_logs/episodes/train_step_1_epoch_0",
        "roll_real/rollout_dump/rollout_dump_data.step_1.jsonl",
        "swift46_multiturn/output/completions.jsonl",
        "verl_agent_real/crbc_dump/crbc_step_000001.jsonl",
        "slime/debug/rollout_3.pt",
    ],
)
def test_an_importers_rows_are_an_arrow_table_until_read(source):
    src = expand_sources([str(ROOT / "tests" / "fixtures" / source)])[0]
    imp = read_source(src)
    table = imp.raw.arrow
    assert table is not None and table.num_rows == len(imp.raw.line) > 0
    df = imp.raw.records  # the frame, made once
    assert imp.raw.arrow is None and imp.raw.records is df
    assert list(df.columns) == table.column_names and len(df) == table.num_rows


#: Columns as importers build them, each beside what a frame made by pandas from them holds.
COLUMNS = {
    "ints": [1, 2, 3],
    "ints_missing": [1, None, 3],
    "mixed_numbers": [1, 2.5, None],
    "nan": [math.nan, 1.0, 2.0],
    "flags": [True, False, True],
    "flags_missing": [True, None, False],
    "flags_nan": [True, math.nan, False],
    "text": ["a", "b", "c"],
    "text_missing": ["a", None, math.nan],
    "none": [None, None, None],
    "lists": [[1, 2], [], ["x"]],
    "dicts": [{"a": 1}, {"b": None}, {}],
    "mixed": [1, "a", True],
    "int_and_flag": [1, True, 0],
    "nan_and_flags": [math.nan, False, True],
    "float_and_flag": [0.5, True, None],
    "flag_and_int": [True, 1, None],
    "huge": [2**70, 1, 2],
    "np_ints": np.array([1, 2, 3], dtype=np.int64),
    "np_int32": np.array([1, 2, 3], dtype=np.int32),
    "np_floats": np.array([0.5, np.nan, 1.0]),
    "np_bools": np.array([True, False, True]),
    "np_text_objects": np.array(["a", None, "c"], dtype=object),
    "np_int_objects": np.array([1, 2, None], dtype=object),
    "np_flag_objects": np.array([True, None, False], dtype=object),
    "numpy_scalars": [np.int64(1), np.float64(2.0), np.int64(3)],
    "one_text": "run",
    "one_int": 0,
    "one_flag": True,
    "one_none": None,
    "series_text": pd.Series(["x", None, "z"]),
    "series_objects": pd.Series([1, "a", None], dtype=object),
    "series_ints": pd.Series([4, 5, 6]),
}


def test_the_frame_of_an_arrow_table_is_the_frame_pandas_builds():
    want = pd.DataFrame(COLUMNS)
    got = frame_of(arrow_table(COLUMNS))
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for c in want.columns:  # the same Python values in object columns, not only equal ones
        if want[c].dtype == object:
            assert [type(v) for v in got[c]] == [type(v) for v in want[c]], c


def test_rows_taken_from_the_table_are_the_frames_rows():
    want = pd.DataFrame(COLUMNS).iloc[[2, 0]].reset_index(drop=True)
    table = arrow_table(COLUMNS)
    got = frame_of(table.take([2, 0]))
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("name", sorted(c for c in COLUMNS if not c.startswith("one_")))
def test_held_values_are_the_frames(name):
    want = pd.DataFrame(COLUMNS)[name].to_numpy()
    got = held(COLUMNS[name], 3)
    assert got.dtype == want.dtype
    assert [repr(v) for v in got.tolist()] == [repr(v) for v in want.tolist()]


def test_an_empty_table_is_an_empty_frame():
    cols = {"a": [], "b": np.zeros(0, dtype=np.int64), "c": "run", "d": None}
    pd.testing.assert_frame_equal(frame_of(arrow_table(cols)), pd.DataFrame(cols))


#: Importer outputs whose table is clean (plain Arrow columns): the columnar lane assembles them.
CLEAN = [
    "trl_real/trl_run/completions/completions_00001.parquet",
    "trl_tools/trl_run/completions/completions_00002.parquet",
    "skyrl_stepwise/export/dumped_evals/global_step_30_evals/gsm8k.jsonl",
    "graphgpo/batch_padded_step4.pth",
    "roll_native/rollout_dump/rollout_dump_data.step_1.jsonl",
    "ragen/results/eval/val_rollouts_20261205_031500.jsonl",
    "slime/compact/rollout_5.pt",
    "verifiers_0110/outputs/evals/guess--scripted/0a1b2c3d/results.jsonl",
]
ARRAYS = ("step_traj", "step_anchor_hash", "traj_offsets", "traj_group", "traj_success", "traj_truncated")


@pytest.mark.parametrize("source", CLEAN)
def test_a_clean_import_is_assembled_from_arrow_as_the_schema_path_assembles_it(source):
    """The oracle is the schema path (`build_batch`: the frame, validated) on the same source."""
    src = expand_sources([str(ROOT / "tests" / "fixtures" / source)])[0]
    ref = build_batch(read_source(src).raw)
    imp = read_source(src)
    got = batch_of_import(imp.raw)
    assert imp.raw.arrow is not None  # the lane took it: no frame was made
    for f in (*ARRAYS, "traj_return"):
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype == b.dtype, f
        np.testing.assert_array_equal(a, b, err_msg=f)
    assert (got.source, got.warnings, got.skipped) == (ref.source, ref.warnings, ref.skipped)
    pd.testing.assert_frame_equal(got.steps, ref.steps, check_exact=True)
    pd.testing.assert_frame_equal(got.groups, ref.groups, check_exact=True)


def test_an_import_the_lane_cannot_prove_clean_goes_the_schema_path():
    """Message lists (an `ObjectColumn`) and duplicated steps: the schema path reads and names."""
    src = expand_sources(
        [str(ROOT / "tests" / "fixtures" / "rllm_real/train_logs/episodes/train_step_1_epoch_0")]
    )[0]
    imp = read_source(src)
    batch = batch_of_import(imp.raw)
    assert imp.raw.arrow is not None  # validated as Arrow: no frame of the importer's rows
    assert len(batch.steps) == imp.raw.arrow.num_rows
    rows = {"group_id": ["g", "g"], "traj_id": ["t", "t"], "step_idx": [0, 0], "reward": [0.0, 1.0]}
    raw = RawTable(
        "dup.jsonl", arrow_table({**rows, "anchor_obs": ["a", "b"]}), np.array([1, 2]), "line", False
    )
    with pytest.raises(LoadError, match="step_idx"):
        batch_of_import(raw)


def test_object_values_live_as_long_as_a_held_table_and_no_longer():
    """A table derived from another (``select``, ``set_column``) keeps the `ObjectColumn`
    values once held, after the first is gone; when both are gone the values are released."""
    import gc

    from crbc_viz.io import arrow_rows

    before = len(arrow_rows._VALUES)
    first = arrow_table({"msgs": [[{"role": "user"}], {"k": 1}], "n": [1, 2]})
    derived = arrow_rows.hold(first.select(["msgs"]))
    del first
    gc.collect()
    assert list(arrow_rows.object_values(derived.column("msgs"))) == [[{"role": "user"}], {"k": 1}]
    del derived
    gc.collect()
    assert len(arrow_rows._VALUES) == before


def test_raw_set_column_keeps_every_object_column():
    """`RawTable.set_column` (the store sets ``run_id`` so) on an importer's table with a column
    of Python values: the new table holds the old column's values and the new one's."""
    import gc

    from crbc_viz.io.arrow_rows import object_values

    raw = RawTable("x.jsonl", arrow_table({"a": [1, 2], "o": [[1], {}]}), np.array([1, 2]), "line", False)
    raw.set_column("m", [{"k": 1}, 2])
    raw.set_column("a", 7)
    gc.collect()
    table = raw.table
    assert list(object_values(table.column("o"))) == [[1], {}]
    assert list(object_values(table.column("m"))) == [{"k": 1}, 2]
    assert table.column("a").to_pylist() == [7, 7]
