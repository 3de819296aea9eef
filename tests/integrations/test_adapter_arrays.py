"""The adapters' array path (crbc_viz.integrations._core): rows are placed by counting and the
batch keeps its step columns as Arrow, so no pandas frame is built between the trainer's
arrays and the credit; the loader's checks still hold on it (a reward beyond the loader's
bound, an empty batch); ids read through their trajectories give the CLI's credit whether the
trainer repeats one id object or hands over equal copies; rLLM observations that are arrays
are anchors like any other.

Expected values come from ``crbc-viz score`` on the same rows, or from a mirror argument (two
trajectories alike but for their outcome get opposite credit), never from the adapter itself.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_integrations import SOKOBAN, cli_scores, expected, per_row, rows_of, verl_agent_batch

from crbc_viz.integrations._core import IntegrationInputError, canonical_steps, score_steps

GROUP = np.array(["g"] * 4, dtype=object)
TRAJ = np.array(["a", "a", "b", "b"], dtype=object)
STEP = np.array([0, 1, 0, 1])
ANCHOR = np.array(["s0", "s1", "s0", "s2"], dtype=object)


def test_scoring_builds_no_frame():
    steps = canonical_steps(GROUP, TRAJ, STEP, ANCHOR, np.array([0.0, 1.0, 0.0, 0.0]))
    adv = score_steps(steps).numpy()
    assert steps.batch.arrow_steps is not None  # the rows are still Arrow: nothing read a frame
    assert adv[0] > 0 > adv[2]
    rows = steps.canonical_rows()  # asked for: the frame, with plain text columns
    assert rows["traj_id"].tolist() == ["a", "a", "b", "b"] and rows["action"].dtype == object


def test_a_reward_beyond_the_loaders_bound_is_refused_naming_the_row():
    with pytest.raises(IntegrationInputError, match=r"trainer batch: reward: row 1 is 1e\+16, beyond"):
        canonical_steps(GROUP, TRAJ, STEP, ANCHOR, np.array([0.0, 1e16, 0.0, 0.0]))


def test_a_step_reward_that_overflows_is_refused():
    """verl: two finite token rewards whose sum is infinite make a step reward the loader would
    refuse; it is not scored as a number."""
    from crbc_viz.integrations.verl import compute_advantage

    tlr = torch.zeros(2, 4, dtype=torch.float64)
    tlr[0, 0] = tlr[0, 1] = 1e308
    uid = np.array(["g", "g"], dtype=object)
    anchors = np.empty(2, dtype=object)
    anchors[:] = [["s0"], ["s0"]]
    with pytest.raises(IntegrationInputError, match=r"verl batch: reward: row 0 is inf, beyond"):
        compute_advantage(tlr, torch.ones(2, 4), uid, non_tensor_batch={"uid": uid, "crbc_anchors": anchors})


def test_an_empty_batch_is_refused():
    empty = np.zeros(0, dtype=object)
    with pytest.raises(IntegrationInputError, match="trainer batch: no steps"):
        canonical_steps(empty, empty, np.zeros(0, np.int64), empty, np.zeros(0))


def test_ids_read_through_trajectories_equal_the_cli(tmp_path):
    """Trajectory ids unique in the batch (``group/traj``, as verl-agent's traj_uid): the group
    of each row is read through its trajectory; one id object repeated on a trajectory's rows
    and equal copies of it give the CLI's credit alike."""
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc"], tmp_path)
    idx, tlr, mask, col = verl_agent_batch(rows, seed=9)
    traj = np.array([f"{g}/{t}" for g, t in zip(col("group_id"), col("traj_id"))], dtype=object)
    shared = {v: v for v in traj}
    for ids in (np.array([shared[v] for v in traj], dtype=object), traj):  # one object / copies
        adv, _ = compute_advantage(
            tlr,
            mask,
            col("anchor_obs"),
            col("group_id"),
            ids,
            col("step_idx", np.int64),
            actions=col("action"),
            success=col("success", bool),
        )
        np.testing.assert_allclose(per_row(adv, mask), expected(df, rows, idx), atol=1e-9, rtol=0)


def test_rllm_array_observations_are_anchors():
    """Observations that are numpy arrays (a board): once an error (``obs in (None, "")`` asks
    an array for its truth value); now anchors, and the outcome decides the credit's sign."""
    from crbc_viz.integrations.rllm import assign_step_advantages

    def groups(rewards):
        return [
            SimpleNamespace(
                group_id="g",
                trajectories=[
                    SimpleNamespace(
                        uid=u,
                        reward=r,
                        steps=[
                            SimpleNamespace(observation=np.array(o), input=None, action=None, reward=0.0)
                            for o in obs
                        ],
                    )
                    for u, r, obs in zip("ab", rewards, ([[0, 0], [0, 1]], [[0, 0], [1, 0]]))
                ],
            )
        ]

    def adv(gs):
        assign_step_advantages(gs, action=None)
        return [s.advantage for t in gs[0].trajectories for s in t.steps]

    wins = adv(groups((1.0, 0.0)))
    assert wins[0] > 0 > wins[2]
    assert adv(groups((0.0, 1.0))) == [-v for v in wins]


def test_text_that_is_not_valid_unicode_keeps_its_identity():
    """A lone surrogate in an id or an action (Python text that is no UTF-8) is stored escaped
    in the Arrow columns; the rows keep their identity, so the credit is that of clean names."""

    def obj(*v):
        return np.array(list(v), dtype=object)

    def adv(g, acts):
        steps = canonical_steps(
            obj(g, g, g, g), TRAJ, STEP, ANCHOR, np.array([0.0, 1.0, 0.0, 0.0]), actions=obj(*acts)
        )
        return score_steps(steps).numpy(), steps.canonical_rows()

    clean, _ = adv("g", ("u", "x", "y", "u"))
    odd, rows = adv("g\udc80", ("\udc80", "x", "y", "\udc80"))
    np.testing.assert_array_equal(odd, clean)
    assert rows["group_id"].tolist() == ["g\\udc80"] * 4 and rows["action"][0] == "\\udc80"
