"""`crbc_viz.data.batch_from_columns` is the one builder of a `RolloutBatch`: from step rows in
storage order it derives the offsets, the trajectory/group indices, the outcomes and the groups
table, and refuses rows whose trajectories or groups are split or whose ``step_idx`` does not
run 0..n-1. No other code in the package calls ``RolloutBatch(...)``.

The rows below are written out by hand (6 steps, 3 trajectories, 2 groups):

    row  group  traj  step  reward  done
     0   g0     a     0     0.0     F
     1   g0     a     1     1.0     T    trajectory 0: 2 steps, return 1.0, ended -> success
     2   g0     b     0     0.5     F    trajectory 1: 1 step, return 0.5, truncated -> failure
     3   g1     a     0     0.0     F
     4   g1     a     1    -1.0     F
     5   g1     a     2     0.0     T    trajectory 2: 3 steps, return -1.0 -> failure

(``a`` in g1 is another trajectory than ``a`` in g0: a trajectory is a group's.)
"""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crbc_viz.data import Layout, batch_from_columns
from crbc_viz.errors import BatchInvariantError
from helpers import ROOT


def _columns(**change) -> dict:
    cols = {
        "run_id": ["r"] * 6,
        "train_step": [0] * 6,
        "group_id": ["g0", "g0", "g0", "g1", "g1", "g1"],
        "traj_id": ["a", "a", "b", "a", "a", "a"],
        "step_idx": [0, 1, 0, 0, 1, 2],
        "reward": [0.0, 1.0, 0.5, 0.0, -1.0, 0.0],
        "done": [False, True, False, False, False, True],
    }
    cols.update(change)
    return {k: v for k, v in cols.items() if v is not None}


def _hash(n: int = 6) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.uint64)


@pytest.mark.parametrize("kind", ["arrow", "frame"])
def test_derived_arrays_match_hand_computation(kind):
    cols = _columns()
    steps = pa.table(cols) if kind == "arrow" else pd.DataFrame(cols)
    b = batch_from_columns(steps, step_anchor_hash=_hash(), source="hand")
    assert (b.arrow_steps is not None) == (kind == "arrow")  # before ``steps`` is read
    assert b.traj_offsets.tolist() == [0, 2, 3, 6]
    assert b.step_traj.tolist() == [0, 0, 1, 2, 2, 2]
    assert b.traj_group.tolist() == [0, 0, 1]
    assert b.group_traj_offsets.tolist() == [0, 2, 3]
    assert b.traj_success.tolist() == [True, False, False]
    assert b.traj_truncated.tolist() == [False, True, False]
    assert b.traj_return.tolist() == [1.0, 0.5, -1.0]
    assert b.steps["success"].tolist() == [True, True, False, False, False, False]
    assert b.groups["group_id"].tolist() == ["g0", "g1"]
    assert b.groups["run_id"].tolist() == ["r", "r"]
    assert b.source == "hand"


def test_logged_success_and_episode_return_win():
    # Logged flags: trajectory 0 says success on its last step, trajectory 2 too; trajectory 1
    # says so as well and is truncated (its last done is false): the explicit flag wins
    # (SCHEMA.md: "a failure unless the trainer logged success=true for it"), as on the schema
    # path; before the one rule (`crbc_viz.outcome_rule`) this path read it as a failure.
    b = batch_from_columns(
        pa.table(
            _columns(
                success=[False, True, True, False, False, True],
                episode_return=[0.0, 7.0, 3.0, 0.0, 0.0, -2.0],
            )
        ),
        step_anchor_hash=_hash(),
    )
    assert b.traj_truncated.tolist() == [False, True, False]
    assert b.traj_success.tolist() == [True, True, True]
    assert b.traj_return.tolist() == [7.0, 3.0, -2.0]
    assert b.steps["success"].tolist() == [True, True, True, True, True, True]


def test_threshold_and_no_done_column():
    # No done: nothing truncated; success is return > 0.75: 1.0 yes, 0.5 no, -1.0 no.
    b = batch_from_columns(
        pd.DataFrame(_columns(done=None)), step_anchor_hash=_hash(), success_threshold=0.75
    )
    assert b.traj_truncated.tolist() == [False, False, False]
    assert b.traj_success.tolist() == [True, False, False]


def test_given_layout_and_outcomes_are_used_and_checked():
    lay = Layout.of_lengths([2, 1, 3], [0, 0, 1], 2)
    b = batch_from_columns(
        pd.DataFrame(_columns()),
        layout=lay,
        step_anchor_hash=_hash(),
        traj_success=np.array([False, True, True]),
        traj_truncated=np.array([True, False, False]),
        traj_return=np.array([9.0, 8.0, 7.0]),
        groups=pd.DataFrame({"group_id": ["x", "y"]}, index=[5, 6]),
        success_column=False,
    )
    assert b.traj_success.tolist() == [False, True, True]
    assert b.traj_return.tolist() == [9.0, 8.0, 7.0]
    assert "success" not in b.steps.columns
    assert b.groups.index.tolist() == [0, 1]
    # A layout that cuts trajectory 0 after one step: row 1 then has step_idx 1 where 0 is due.
    with pytest.raises(BatchInvariantError, match=r"step_idx: row 1 has step_idx 1, expected 0"):
        batch_from_columns(
            pd.DataFrame(_columns()),
            layout=Layout.of_lengths([1, 2, 3], [0, 0, 1], 2),
            step_anchor_hash=_hash(),
        )
    # The offsets themselves go through check_batch: 5 steps' offsets for 6 rows.
    with pytest.raises(BatchInvariantError, match=r"traj_offsets: .*from 0 to 6"):
        batch_from_columns(
            pd.DataFrame(_columns()),
            layout=Layout.of_lengths([2, 1, 2], [0, 0, 1], 2),
            step_anchor_hash=_hash(),
            traj_success=np.zeros(3, bool),
            traj_truncated=np.zeros(3, bool),
            traj_return=np.zeros(3),
            success_column=False,
        )


MALFORMED = [
    # trajectory a of g0 resumes after b: rows 0, 1 (a), 2 (b), 3 (a again)
    (
        dict(
            group_id=["g0"] * 4 + ["g1"] * 2,
            traj_id=["a", "a", "b", "a", "c", "c"],
            step_idx=[0, 1, 0, 2, 0, 1],
        ),
        r"traj_id: the rows of each trajectory must be contiguous: row 3 starts trajectory 'a' again",
    ),
    # group g0 split by g1's rows
    (
        dict(group_id=["g0", "g0", "g1", "g0", "g1", "g1"], traj_id=["a", "a", "c", "b", "c", "c"]),
        r"group_id: the rows of each group must be contiguous: row 3 starts group 'g0' again",
    ),
    # steps of the first trajectory start at 1
    (dict(step_idx=[1, 2, 0, 0, 1, 2]), r"step_idx: row 0 has step_idx 1, expected 0"),
    # a step repeated in the last trajectory
    (dict(step_idx=[0, 1, 0, 0, 1, 1]), r"step_idx: row 5 has step_idx 1, expected 2"),
    # a missing group id
    (dict(group_id=["g0", None, "g0", "g1", "g1", "g1"]), r"group_id: 1 row\(s\) have no value"),
    # no reward and no episode_return: the return cannot be derived
    (dict(reward=None), r"reward: expected a number on every row"),
]


@pytest.mark.parametrize("kind", ["arrow", "frame"])
@pytest.mark.parametrize(("change", "message"), MALFORMED)
def test_malformed_columns_name_the_field(kind, change, message):
    cols = _columns(**change)
    steps = pa.table(cols) if kind == "arrow" else pd.DataFrame(cols)
    with pytest.raises(BatchInvariantError, match=message) as e:
        batch_from_columns(steps, step_anchor_hash=_hash(), source="bad.jsonl")
    assert "(from bad.jsonl)" in str(e.value)


def test_no_group_id_column():
    with pytest.raises(BatchInvariantError, match=r"group_id: the rows have no such column"):
        batch_from_columns(pa.table(_columns(group_id=None)), step_anchor_hash=_hash())


def test_rollout_batch_is_constructed_in_one_place():
    """Every path builds its batch through `batch_from_columns`: ``RolloutBatch(...)`` is
    called once in the package, there (``dataclasses.replace`` still runs `check_batch`)."""
    calls = []
    for path in sorted((ROOT / "crbc_viz").rglob("*.py")):
        finder = _Calls()
        finder.visit(ast.parse(path.read_text(encoding="utf-8")))
        calls += [(path.relative_to(ROOT).as_posix(), line, fn) for line, fn in finder.found]
    assert len(calls) == 1, f"RolloutBatch(...) is called in {len(calls)} places: {calls}"
    assert calls[0][0] == "crbc_viz/data.py" and calls[0][2] == "batch_from_columns", calls


class _Calls(ast.NodeVisitor):
    """Calls of ``RolloutBatch`` (by name or attribute) and the function each is in."""

    def __init__(self):
        self.stack, self.found = [], []

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name == "RolloutBatch":
            self.found.append((node.lineno, self.stack[-1] if self.stack else "<module>"))
        self.generic_visit(node)


@pytest.mark.parametrize("kind", ["arrow", "frame"])
def test_rows_without_a_group_key_column_and_no_groups_table_are_refused_by_name(kind):
    cols = {k: v for k, v in _columns().items() if k != "run_id"}
    steps = pa.table(cols) if kind == "arrow" else pd.DataFrame(cols)
    with pytest.raises(BatchInvariantError) as e:
        batch_from_columns(steps, step_anchor_hash=_hash(), source="hand")
    assert e.value.field == "run_id"
