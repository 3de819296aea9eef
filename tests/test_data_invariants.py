"""`RolloutBatch` checks its own arrays wherever it is built, `dataclasses.replace` included:
offsets from 0 to the counts and never decreasing, one value per step / trajectory / group,
the trajectory and group indices the offsets imply, the documented dtypes. A violation is one
`BatchInvariantError` naming the field.

The batch below is written out by hand: 2 groups, 3 trajectories of 2, 1 and 2 steps (5 steps);
trajectories 0 and 1 are group 0's, trajectory 2 is group 1's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from crbc_viz.data import RolloutBatch, check_batch
from crbc_viz.errors import BatchInvariantError, CrbcVizError


def _fields() -> dict:
    return dict(
        steps=pd.DataFrame({"traj_id": ["a", "a", "b", "c", "c"], "action": ["x", "y", "x", "x", "y"]}),
        step_traj=np.array([0, 0, 1, 2, 2], np.int64),
        step_anchor_hash=np.array([1, 2, 1, 1, 3], np.uint64),
        traj_offsets=np.array([0, 2, 3, 5], np.int64),
        traj_group=np.array([0, 0, 1], np.int64),
        traj_success=np.array([True, False, True]),
        traj_truncated=np.array([False, False, True]),
        traj_return=np.array([1.0, 0.0, 1.0]),
        group_traj_offsets=np.array([0, 2, 3], np.int64),
        groups=pd.DataFrame({"run_id": ["r", "r"], "train_step": [0, 0], "group_id": ["g0", "g1"]}),
        source="hand.jsonl",
    )


# (field, bad value, what the message must say after "<field>: ")
BAD = [
    ("traj_offsets", np.array([0, 2, 3]), r"from 0 to 5 \(the number of steps\), ends at 3"),
    ("traj_offsets", np.array([0, 2, 5]), r"expected 4 offsets \(3 trajectories in traj_group"),
    ("traj_offsets", np.array([0, 3, 2, 5]), r"non-decreasing .* decreases at index 2 \(3 -> 2\)"),
    ("traj_offsets", np.array([1, 2, 3, 5]), r"from 0 to 5 .* starts at 1"),
    ("traj_offsets", np.array([0, 2, 3, 6]), r"from 0 to 5 .* ends at 6"),
    ("traj_offsets", np.zeros(0, np.int64), r"from 0 to 5 .* got none"),
    ("group_traj_offsets", np.array([0, 3]), r"expected 3 offsets \(2 rows of groups"),
    ("group_traj_offsets", np.array([0, 2, 2]), r"from 0 to 3 \(the number of trajectories\), ends at 2"),
    ("group_traj_offsets", np.array([0, 2, 1, 3]), r"decreases at index 2"),
    ("step_traj", np.array([0, 0, 1, 2, 3]), r"index 4 is 3, but the offsets put it in trajectory 2"),
    ("step_traj", np.array([0, 0, 1, 2, -1]), r"index 4 is -1"),
    ("step_traj", np.array([0, 1, 0, 2, 2]), r"index 1 is 1, but the offsets put it in trajectory 0"),
    ("step_traj", np.array([0, 0, 1, 2]), r"expected one value per step \(5\), got 4"),
    ("traj_group", np.array([0, 0, 2]), r"index 2 is 2, but the offsets put it in group 1"),
    ("traj_group", np.array([0, 1, 1]), r"index 1 is 1, but the offsets put it in group 0"),
    ("step_anchor_hash", np.array([1, 2, 1, 1], np.uint64), r"expected one value per step \(5\), got 4"),
    ("step_anchor_hash", np.array([1, 2, 1, 1, 3], np.int64), r"dtype kind 'u', got int64\[5\]"),
    ("step_anchor_hash", np.array([1, 2, 1, 1, 3], np.uint32), r"expected uint64, got uint32"),
    ("traj_success", np.array([True, False]), r"expected one value per trajectory \(3\), got 2"),
    ("traj_success", np.array([1, 0, 1]), r"dtype kind 'b', got int64\[3\]"),
    ("traj_truncated", np.array([False, False, True, True]), r"one value per trajectory \(3\), got 4"),
    ("traj_return", np.array([1.0, 0.0]), r"one value per trajectory \(3\), got 2"),
    ("traj_return", np.array([1, 0, 1]), r"dtype kind 'f', got int64\[3\]"),
    ("traj_offsets", [0, 2, 3, 5], r"1-D numpy array of dtype kind 'iu', got list"),
    ("traj_offsets", np.array([0.0, 2, 3, 5]), r"dtype kind 'iu', got float64\[4\]"),
    ("step_traj", np.array([[0, 0, 1, 2, 2]]), r"1-D numpy array .* got int64\[1, 5\]"),
]
# Rows that disagree with the arrays: named by the offsets that must end at (or count) them.
BAD_ROWS = [
    ("steps", lambda f: f["steps"].iloc[:4], "traj_offsets", r"from 0 to 4 \(the number of steps\)"),
    (
        "groups",
        lambda f: f["groups"].iloc[:1],
        "group_traj_offsets",
        r"expected 2 offsets \(1 rows of groups",
    ),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(BAD)]


def test_the_hand_built_batch_is_valid():
    b = RolloutBatch(**_fields())
    assert (b.num_steps, b.num_trajectories, b.num_groups) == (5, 3, 2)
    check_batch(b)


@pytest.mark.parametrize("name, value, what", BAD, ids=IDS)
def test_a_hand_built_batch_that_breaks_an_invariant_is_refused(name, value, what):
    with pytest.raises(
        BatchInvariantError, match=rf"^RolloutBatch \(from hand.jsonl\): {name}: .*{what}"
    ) as e:
        RolloutBatch(**{**_fields(), name: value})
    assert e.value.field == name
    assert isinstance(e.value, ValueError) and isinstance(e.value, CrbcVizError)


@pytest.mark.parametrize("name, value, what", BAD, ids=IDS)
def test_replace_that_breaks_an_invariant_is_refused(name, value, what):
    good = RolloutBatch(**_fields())
    with pytest.raises(BatchInvariantError, match=rf": {name}: .*{what}"):
        dataclasses.replace(good, **{name: value})


@pytest.mark.parametrize("rows, cut, name, what", BAD_ROWS, ids=[r[0] for r in BAD_ROWS])
def test_rows_that_disagree_with_the_arrays_are_refused(rows, cut, name, what):
    fields = _fields()
    with pytest.raises(BatchInvariantError, match=rf": {name}: .*{what}"):
        RolloutBatch(**{**fields, rows: cut(fields)})
    with pytest.raises(BatchInvariantError, match=rf": {name}: .*{what}"):
        dataclasses.replace(RolloutBatch(**fields), **{rows: cut(fields)})


def test_empty_trajectories_and_groups_are_allowed():
    """Offsets only need never to decrease: a zero-length trajectory or group still builds."""
    f = _fields()
    b = RolloutBatch(
        **{
            **f,
            "traj_offsets": np.array([0, 2, 2, 3, 5]),
            "traj_group": np.array([0, 0, 0, 2]),
            "step_traj": np.array([0, 0, 2, 3, 3]),
            "traj_success": np.ones(4, bool),
            "traj_truncated": np.zeros(4, bool),
            "traj_return": np.ones(4),
            "group_traj_offsets": np.array([0, 3, 3, 4]),
            "groups": pd.DataFrame({"group_id": ["g0", "empty", "g1"]}),
        }
    )
    assert b.traj_len.tolist() == [2, 0, 1, 2] and b.num_groups == 3


def test_a_valid_replace_still_builds():
    b = dataclasses.replace(RolloutBatch(**_fields()), traj_success=np.array([False, False, True]))
    assert b.traj_success.tolist() == [False, False, True]


def test_the_message_without_a_source():
    with pytest.raises(BatchInvariantError, match=r"^RolloutBatch: traj_offsets: "):
        RolloutBatch(**{**_fields(), "source": "", "traj_offsets": np.array([0, 2, 3])})


# ---------------------------------------------------------------- every builder still builds


def _loader_batches(tmp_path):
    """A batch from each way the package builds one."""
    from crbc_viz.integrations._core import canonical_steps
    from crbc_viz.io import load_rollouts
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.readers import read_table
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    synth = random_mdp_batch(num_groups=5, rollouts=4, max_steps=12, num_states=6, seed=3)
    log = tmp_path / "log.jsonl"
    pd.DataFrame(batch_to_rows(synth)).to_json(log, orient="records", lines=True)
    yield "synthetic", synth
    lane = load_rollouts(log)
    assert lane.arrow_steps is not None  # read by the columnar lane, not the schema path
    yield "columnar lane", lane
    yield "schema path", build_batch(read_table(str(log)))
    yield "select_groups", synth.select_groups([3, 0, 3])
    yield "select no groups", synth.select_groups([])
    s = canonical_steps(
        np.array(["g", "g", "g", "g"]),
        np.array(["a", "a", "b", "b"]),
        np.array([0, 1, 0, 1]),
        np.array(["s0", "s1", "s0", "s2"]),
        np.array([0.0, 1.0, 0.0, 0.0]),
    )
    yield "canonical_steps", s.batch


def test_every_builder_makes_a_batch_that_passes(tmp_path):
    seen = []
    for name, b in _loader_batches(tmp_path):
        check_batch(b)
        assert b.traj_offsets[-1] == b.num_steps, name
        seen.append(name)
    assert len(seen) == 6
