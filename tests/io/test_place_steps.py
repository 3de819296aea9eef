"""`crbc_viz.io.assemble.place_steps` (rows in any order, steps repeated -> unique steps in batch
order, by counting) and `assemble_arrow`, against a brute force over Python tuples: sort the
distinct (group, trajectory, step) keys, take each key's lowest row, and walk each trajectory
for the first step index out of place."""

from __future__ import annotations

import numpy as np
import pytest

from crbc_viz.io.assemble import assemble_arrow, dictionary, place_steps


def brute(g, t, s):
    """``(first, row_step, traj_len, traj_group_rank, gap)`` by sorting tuples."""
    keys = sorted({(int(g[i]), int(t[i]), int(s[i])) for i in range(len(t))})
    for trajectory in sorted({(a, b) for a, b, _ in keys}):
        got = [k for a, b, k in keys if (a, b) == trajectory]
        for want, k in enumerate(got):
            if k != want:
                row = min(i for i in range(len(t)) if (g[i], t[i], s[i]) == (*trajectory, k))
                return None, None, None, None, (row, want, k)
    first = [min(i for i in range(len(t)) if (g[i], t[i], s[i]) == key) for key in keys]
    row_step = [keys.index((int(g[i]), int(t[i]), int(s[i]))) for i in range(len(t))]
    trajs = sorted({(a, b) for a, b, _ in keys})
    lens = [sum(1 for a, b, _ in keys if (a, b) == tr) for tr in trajs]
    groups = sorted({a for a, _ in trajs})
    return first, row_step, lens, [groups.index(a) for a, _ in trajs], None


def random_rows(rng, gaps: bool):
    T = int(rng.integers(1, 6))
    traj_group = rng.integers(0, 3, T) * 2  # unused group codes in between
    rows = []
    for tr in range(T):
        n = int(rng.integers(1, 5))
        steps = list(range(n))
        if gaps and rng.random() < 0.5:
            steps = [k + (k >= 1) * int(rng.integers(0, 2)) for k in steps]
        for k in steps:
            rows += [(traj_group[tr], 3 * tr + 1, k)] * int(rng.integers(1, 3))  # copies, sparse codes
    order = rng.permutation(len(rows))
    g, t, s = (np.array([rows[i][j] for i in order], dtype=np.int64) for j in range(3))
    return g, t, s


@pytest.mark.parametrize("seed", range(40))
def test_place_steps_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    g, t, s = random_rows(rng, gaps=seed % 2 == 1)
    first, row_step, lens, group_rank, gap = brute(g, t, s)
    got = place_steps(g, t, s)
    assert got.gap == gap
    if gap is None:
        assert got.first.tolist() == first
        assert got.row_step.tolist() == row_step
        assert got.layout.traj_len.tolist() == lens
        assert got.layout.traj_group.tolist() == group_rank


def test_a_huge_step_index_is_a_gap_not_an_allocation():
    got = place_steps(np.zeros(3, np.int64), np.zeros(3, np.int64), np.array([0, 1, 2**31 - 1]))
    assert got.gap == (2, 2, 2**31 - 1) and got.first is None


def test_refuses_what_no_caller_may_pass():
    with pytest.raises(ValueError, match="two groups"):
        place_steps(np.array([0, 1]), np.array([0, 0]), np.array([0, 1]))
    with pytest.raises(ValueError, match=">= 0"):
        place_steps(np.array([0]), np.array([0]), np.array([-1]))
    with pytest.raises(ValueError, match="3 step indices"):
        place_steps(np.array([0, 0]), np.array([0, 0]), np.array([0, 1, 2]))


def test_assemble_arrow_builds_no_frame_until_asked():
    got = place_steps(np.array([0, 0, 0]), np.array([0, 0, 1]), np.array([1, 0, 0]))
    lay = got.layout
    batch = assemble_arrow(
        {"group_id": dictionary(np.zeros(3), ["g"]), "traj_id": dictionary(lay.step_traj, ["a", "b"])},
        lay,
        group_columns={
            "run_id": dictionary(np.zeros(1), ["r"]),
            "train_step": dictionary(np.zeros(1), ["0"]),
            "group_id": dictionary(np.zeros(1), ["g"]),
        },
        step_anchor_hash=np.arange(3, dtype=np.uint64),
        traj_success=np.array([True, False]),
        traj_truncated=np.zeros(2, bool),
        traj_return=np.array([1.0, 0.0]),
    )
    assert batch.arrow_steps is not None  # still Arrow
    assert batch.steps["traj_id"].astype(str).tolist() == ["a", "a", "b"]
    assert batch.steps["success"].tolist() == [True, True, False]  # the trajectory's outcome per step
    with pytest.raises(ValueError, match="train_step"):
        assemble_arrow(
            {},
            lay,
            group_columns={
                "run_id": dictionary(np.zeros(1), ["r"]),
                "group_id": dictionary(np.zeros(1), ["g"]),
            },
            step_anchor_hash=np.arange(3, dtype=np.uint64),
            traj_success=np.zeros(2, bool),
            traj_truncated=np.zeros(2, bool),
            traj_return=np.zeros(2),
        )
