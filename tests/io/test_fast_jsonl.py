"""The vectorised JSONL path (`readers._read_jsonl_fast`) reads exactly what the streaming
reader reads, or declines: same batch, or the same error, on every JSONL input we have."""

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crbc_viz.io.readers as R
from crbc_viz.io import LoadError
from crbc_viz.io.assemble import build_batch

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    {
        *glob.glob(str(ROOT / "tests" / "**" / "*.jsonl*"), recursive=True),
        *glob.glob(str(ROOT / "sample_rollouts" / "**" / "*.jsonl*"), recursive=True),
    }
)


def _load(path, fast: bool, monkeypatch):
    if not fast:
        monkeypatch.setattr(R, "_read_jsonl_fast", lambda p, limit: None)
    try:
        return build_batch(R.read_table(path, "jsonl"))
    except LoadError as exc:
        return str(exc)
    finally:
        monkeypatch.undo()


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if list(a.steps.columns) != list(b.steps.columns):
        return False
    for c in a.steps.columns:
        x, y = a.steps[c].tolist(), b.steps[c].tolist()
        if any(not (u == v or (pd.isna(u) and pd.isna(v))) for u, v in zip(x, y)):
            return False
    return (
        np.array_equal(a.step_anchor_hash, b.step_anchor_hash)
        and np.array_equal(a.traj_success, b.traj_success)
        and np.array_equal(a.traj_offsets, b.traj_offsets)
        and a.warnings == b.warnings
    )


@pytest.mark.parametrize("path", FILES, ids=[Path(f).name for f in FILES])
def test_fast_and_streaming_readers_agree(path, monkeypatch):
    assert _same(_load(path, True, monkeypatch), _load(path, False, monkeypatch))


def test_fast_path_is_taken_on_a_clean_log():
    raw = R._read_jsonl_fast(str(ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl"), R.max_line_bytes())
    assert raw is not None and list(raw.line[:3]) == [1, 2, 3]


ROW = '{"group_id":"g","traj_id":"t","step_idx":%d,"reward":%s}'


@pytest.mark.parametrize(
    "text",
    [
        ROW % (0, "NaN") + "\n",  # non-finite literal
        ROW % (0, "0") + "\n\n" + ROW % (1, "1") + "\n",  # blank line (line numbers shift)
        ROW % (0, "0") + "\nnull\n",  # not an object
        ROW % (0, "0") + ROW % (1, "1") + "\n",  # two objects on one line
        '{"group_id":"g","traj_id":"t","steps":[{"step_idx":0,"reward":1}]}\n',  # trajectory row
        ROW % (0, "123456789012345678901234") + "\n",  # integer past int64
        '{"group_id":"g","traj_id":"t","step_idx":0,"reward":0,"anchor_obs":[1,2]}\n',  # array
        '{"group_id":"g","traj_id":"t","step_idx":0,"reward":0,"x":"\\ud800"}\n',  # lone surrogate
        ROW % (0, "0") + "\n" + '{"group_id":1,"traj_id":"t","step_idx":1,"reward":0}\n',  # type change
    ],
)
def test_fast_path_declines(tmp_path, text):
    p = tmp_path / "x.jsonl"
    p.write_text(text)
    assert R._read_jsonl_fast(str(p), R.max_line_bytes()) is None


def test_fast_path_declines_over_the_line_limit(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(ROW % (0, "0") + "\n")
    assert R._read_jsonl_fast(str(p), 10) is None
