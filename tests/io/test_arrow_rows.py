"""The importers' rows as Arrow (`crbc_viz.io.arrow_rows`): an importer's rows are an Arrow table
until someone reads ``records``, and the frame made from that table is the one pandas builds
from the same columns (values, dtypes, missing values, rows taken)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from crbc_viz.io.arrow_rows import arrow_table, frame_of, held
from crbc_viz.io.importers import expand_sources, read_source
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
