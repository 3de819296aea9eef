"""Hostile input to the trainer adapters (crbc_viz.integrations): a success flag that is not a
bool or 0/1 (NaN, None, the text "False"), a non-finite or textual reward, a response mask of
another shape, a step index past the loader's bound, NaN or non-UTF-8 uids, step starts that
are not integers, anchors given as one string, and `score_steps` given arrays that disagree.
Each raises `IntegrationInputError` naming the argument and the row, and is never read as a
success or a failure.

The batch is two one-group trajectories from one start state: ``a`` (s0 -> s1, reward 1 on its
last step) and ``b`` (s0 -> s2, reward 0). With success taken from the flags, swapping the flags
of ``a`` and ``b`` must negate every advantage (the two trajectories are mirror images apart
from their outcome), so a flag that was read, and read the right way round, is visible in the
output without recomputing any credit here.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from crbc_viz.errors import BackendUnavailable
from crbc_viz.integrations._core import IntegrationInputError, canonical_steps, score_steps

# verl-agent / ROLL shape: one row per step.
GROUP = np.array(["g"] * 4, dtype=object)
TRAJ = np.array(["a", "a", "b", "b"], dtype=object)
STEP = np.array([0, 1, 0, 1], dtype=np.int64)
ANCHOR = np.array(["s0", "s1", "s0", "s2"], dtype=object)
A_WINS = np.array([True, True, False, False])


def verl_agent(**kw):
    from crbc_viz.integrations.verl_agent import compute_advantage

    tlr = torch.zeros(4, 3)
    tlr[1, 0] = 1.0  # trajectory a's last step
    args = dict(
        token_level_rewards=tlr,
        response_mask=torch.ones(4, 3),
        anchor_obs=ANCHOR,
        index=GROUP,
        traj_index=TRAJ,
        step_index=STEP,
    )
    args.update(kw)
    adv, _ = compute_advantage(**args)
    return adv[:, 0].numpy()


def roll(**nt):
    from crbc_viz.integrations.roll import response_level_advantages

    base = {
        "traj_group_id": GROUP,
        "traj_id": TRAJ,
        "step": STEP,
        "state_hash": ANCHOR,
        "step_scores": np.zeros(4),
    }
    base.update(nt)
    return response_level_advantages(SimpleNamespace(batch={}, non_tensor_batch=base)).numpy()


def obj(*values):
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


# ---- success flags: one rule everywhere ----------------------------------------------------

HOSTILE_FLAGS = [
    (np.array([1.0, 1.0, np.nan, 0.0]), 2, "nan"),  # NaN: bool(nan) is True
    (obj("False", "False", True, True), 0, "'False'"),  # bool("False") is True
    (obj(True, True, None, None), 2, "None"),  # None is not False
    (np.array([1, 1, 0, 2]), 3, "2"),
]


@pytest.mark.parametrize("flags,row,shown", HOSTILE_FLAGS)
def test_roll_success_must_be_a_flag(flags, row, shown):
    with pytest.raises(
        IntegrationInputError, match=rf"ROLL batch: non_tensor_batch\['success'\]: row {row} .*{shown}"
    ):
        roll(success=flags)


@pytest.mark.parametrize("flags,row,shown", HOSTILE_FLAGS)
def test_verl_agent_success_and_won_must_be_flags(flags, row, shown):
    with pytest.raises(IntegrationInputError, match=rf"verl-agent batch: success: row {row} .*{shown}"):
        verl_agent(success=flags)
    with pytest.raises(IntegrationInputError, match=rf"verl-agent batch: won: row {row} .*{shown}"):
        verl_agent(won=flags)


def test_valid_flags_in_every_form_give_the_same_credit_and_are_read_the_right_way_round():
    wins = roll(success=A_WINS)
    assert wins[0] > 0 > wins[2]  # the success's first step is credited, the failure's blamed
    np.testing.assert_array_equal(roll(success=~A_WINS), -wins)  # swapped flags: mirrored credit
    for form in (
        A_WINS.astype(np.int64),
        A_WINS.astype(np.float64),
        obj(True, True, False, False),
        obj(1, 1, 0, 0),
        torch.tensor(A_WINS),
        list(A_WINS.astype(int)),
    ):
        np.testing.assert_array_equal(roll(success=form), wins)
        np.testing.assert_array_equal(verl_agent(success=form), verl_agent(success=A_WINS))
    np.testing.assert_array_equal(verl_agent(won=np.array([0.0, 1.0, 0.0, 0.0])), verl_agent(success=A_WINS))
    # ... and the hostile forms of the same flags raise instead of being read.
    with pytest.raises(IntegrationInputError, match="row 0 is not a flag"):
        roll(success=obj("True", "True", "False", "False"))


def test_roll_episode_scores_must_be_finite():
    with pytest.raises(
        IntegrationInputError, match=r"non_tensor_batch\['episode_scores'\]: row 2 is not finite"
    ):
        roll(episode_scores=np.array([1.0, 1.0, np.nan, np.nan]))
    with pytest.raises(
        IntegrationInputError, match=r"non_tensor_batch\['step_scores'\]: row 1 is not a number"
    ):
        roll(step_scores=obj(0.0, "nan", 0.0, 0.0))
    np.testing.assert_array_equal(roll(episode_scores=np.array([1.0, 1.0, 0.0, 0.0])), roll(success=A_WINS))


def test_verl_crbc_success_must_be_a_flag():
    from crbc_viz.integrations.verl import compute_advantage

    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 1, 1, 1]], dtype=torch.float32)  # 2 steps per row
    tlr = torch.zeros(2, 5)
    uid = obj("g", "g")
    anchors = obj(["s0", "s1"], ["s0", "s2"])

    def run(**nt):
        adv, _ = compute_advantage(
            tlr, mask, uid, non_tensor_batch={"uid": uid, "crbc_anchors": anchors, **nt}
        )
        return adv

    for bad, row in ((np.array([np.nan, 0.0]), 0), (obj(True, "false"), 1), (obj(None, True), 0)):
        with pytest.raises(
            IntegrationInputError, match=rf"verl batch: crbc_success: row {row} is not a flag"
        ):
            run(crbc_success=bad)
    wins = run(crbc_success=np.array([True, False]))
    assert wins[0, 3] > 0 > wins[1, 2]
    assert torch.equal(run(crbc_success=np.array([False, True])), -wins)
    for form in (np.array([1, 0]), np.array([1.0, 0.0]), torch.tensor([True, False]), obj(1, 0)):
        assert torch.equal(run(crbc_success=form), wins)


def test_trl_given_success_is_checked_as_a_flag():
    """TRL's success list: a completion's own value (checked by the credit), else reward > 0."""
    from crbc_viz.integrations._core import token_steps, trajectory_credit
    from crbc_viz.integrations.trl import _success_values

    everyone = [{"success": None}, {"success": "false"}]
    succ = _success_values(everyone, [1.0, 0.0])
    assert succ == [True, "false"]  # passed on as given, not bool("false")
    mask = torch.ones(2, 2)
    tok_step, n_steps = token_steps(mask, [[0, 1], [0, 1]])
    with pytest.raises(IntegrationInputError, match="success: row 1 is not a flag"):
        trajectory_credit(
            ["g", "g"], torch.zeros(2, 2), tok_step, n_steps, [["s0", "s1"], ["s0", "s2"]], success=succ
        )


# ---- rewards --------------------------------------------------------------------------------


def rllm_groups(traj_rewards=(1.0, 0.0), step_reward=0.0):
    return [
        SimpleNamespace(
            group_id="g",
            trajectories=[
                SimpleNamespace(
                    uid=uid,
                    reward=r,
                    steps=[
                        SimpleNamespace(
                            observation=o, input=None, action=None, reward=step_reward, advantage=None
                        )
                        for o in obs
                    ],
                )
                for uid, r, obs in zip("ab", traj_rewards, (["s0", "s1"], ["s0", "s2"]))
            ],
        )
    ]


@pytest.mark.parametrize(
    "traj_rewards,step_reward,where,shown",
    [
        ((1.0, float("nan")), 0.0, "trajectory 1", "nan"),  # NaN > 0 is False: a silent failure
        ((1.0, "nan"), 0.0, "trajectory 1", "'nan'"),
        ((1.0, 0.0), None, "trajectory 0, step 0", "None"),  # once read as 0.0
        ((1.0, 0.0), "1.0", "trajectory 0, step 0", "'1.0'"),
        ((1.0, 0.0), float("inf"), "trajectory 0, step 0", "inf"),
    ],
)
def test_rllm_rewards_must_be_finite_numbers(traj_rewards, step_reward, where, shown):
    from crbc_viz.integrations.rllm import assign_step_advantages

    with pytest.raises(IntegrationInputError, match=rf"rLLM group 'g', {where}: reward is .*{shown}"):
        assign_step_advantages(rllm_groups(traj_rewards, step_reward), action=None)


def test_rllm_numeric_rewards_still_work():
    from crbc_viz.integrations.rllm import assign_step_advantages

    def adv(groups):
        assign_step_advantages(groups, action=None)
        return [s.advantage for t in groups[0].trajectories for s in t.steps]

    ref = adv(rllm_groups((1.0, 0.0)))
    assert ref[0] > 0 > ref[2]
    assert adv(rllm_groups((0.0, 1.0))) == [-v for v in ref]  # swapped outcome: mirrored credit
    assert adv(rllm_groups((np.float32(1.0), 0), np.int64(0))) == ref
    with pytest.raises(IntegrationInputError, match="trajectory 1: reward is nan"):
        adv(rllm_groups((1.0, np.float64("nan"))))


# ---- shapes and ids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mask,match",
    [
        (torch.ones(4, 1), r"response_mask: shape \(4, 1\) differs from token_level_rewards's \(4, 3\)"),
        (torch.ones(4, 9), r"response_mask: shape \(4, 9\) differs"),
        (torch.full((4, 3), 2.0), r"response_mask: row 0 holds 2\.0"),
    ],
)
def test_verl_agent_response_mask_must_match_the_rewards(mask, match):
    with pytest.raises(IntegrationInputError, match=match):
        verl_agent(response_mask=mask)


def test_verl_response_mask_must_match_the_rewards():
    from crbc_viz.integrations.verl import compute_advantage

    uid = obj("g", "g")
    nt = {"uid": uid, "crbc_anchors": obj(["s0"], ["s0"])}
    with pytest.raises(IntegrationInputError, match=r"response_mask: shape \(2, 9\) differs"):
        compute_advantage(torch.zeros(2, 4), torch.ones(2, 9), uid, non_tensor_batch=nt)
    with pytest.raises(IntegrationInputError, match=r"response_mask: shape \(2, 1\) differs"):
        compute_advantage(torch.zeros(2, 4), torch.ones(2, 1), uid, non_tensor_batch=nt)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"step_index": np.array([0, 2**63 - 1, 0, 1])}, r"step_index: row 1 is 9223372036854775807, above"),
        (
            {"step_index": np.array([0, 2**64 - 1, 0, 1], dtype=np.uint64)},
            r"step_index: row 1 is 18446744073709551615",
        ),
        ({"step_index": np.array([0.0, 1e30, 0.0, 1.0])}, r"step_index: row 1 is not an integer"),
        ({"step_index": obj(0, True, 0, 1)}, r"step_index: row 1 is not an integer"),
        ({"index": np.array([1.0, 1.0, np.nan, np.nan])}, r"index: row 2 is NaN"),
        ({"traj_index": np.array([0.0, 0.0, np.nan, np.nan])}, r"traj_index: row 2 is NaN"),
        ({"index": np.array([b"g", b"g", b"\xff", b"\xff"])}, r"index: row 2 is bytes that are not UTF-8"),
        ({"index": obj(b"g", b"g", b"\xfe", b"\xfe")}, r"index: row 2 is bytes that are not UTF-8"),
    ],
)
def test_verl_agent_step_index_and_ids(kw, match):
    with pytest.raises(IntegrationInputError, match=match):
        verl_agent(**kw)


def test_utf8_bytes_ids_equal_their_text():
    text = verl_agent(index=np.array(["é"] * 4, dtype=object))
    np.testing.assert_array_equal(verl_agent(index=np.array(["é".encode()] * 4)), text)
    np.testing.assert_array_equal(verl_agent(index=obj(*["é".encode()] * 4)), text)


def _verl(nt_extra, tlr=None):
    from crbc_viz.integrations.verl import compute_advantage

    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 1, 1, 1]], dtype=torch.float32)
    uid = obj("g", "g")
    nt = {"uid": uid, "crbc_anchors": obj(["s0", "s1"], ["s0", "s2"]), **nt_extra}
    return compute_advantage(torch.zeros(2, 5) if tlr is None else tlr, mask, uid, non_tensor_batch=nt)[0]


@pytest.mark.parametrize(
    "starts,match",
    [
        (obj(None, [0, 2]), r"crbc_step_starts: row 0: expected a list of token offsets, got NoneType"),
        (obj([0, np.nan], [0, 2]), r"crbc_step_starts: row 0: offsets must be integers, got float nan"),
        (obj([0, 2.5], [0, 2]), r"crbc_step_starts: row 0: offsets must be integers, got float 2\.5"),
        (obj([0, 3], "02"), r"crbc_step_starts: row 1: expected a list of token offsets, got str"),
    ],
)
def test_verl_step_starts_must_be_integer_offsets(starts, match):
    with pytest.raises(IntegrationInputError, match=match):
        _verl({"crbc_step_starts": starts})


def test_verl_integral_float_step_starts_equal_int_ones():
    with pytest.raises(IntegrationInputError, match="got float 3.5"):  # once truncated to 3
        _verl({"crbc_step_starts": obj([0.0, 3.5], [0.0, 2.0])})
    assert torch.equal(
        _verl({"crbc_step_starts": obj([0.0, 3.0], [0.0, 2.0])}),
        _verl({"crbc_step_starts": obj([0, 3], [0, 2])}),
    )


def test_anchors_given_as_one_string_are_not_split_into_characters():
    from crbc_viz.integrations.trl import _local_steps

    # "ab" has the row's 2 steps' worth of characters: once split silently into "a", "b".
    with pytest.raises(IntegrationInputError, match=r"verl batch: row 0: crbc_anchors is a str \('ab'\)"):
        _verl({"crbc_anchors": obj("ab", ["s0", "s2"])})
    with pytest.raises(
        IntegrationInputError, match=r"non_tensor_batch\['crbc_anchors'\]: expected one entry per row"
    ):
        _verl({"crbc_anchors": "s0s1"})
    with pytest.raises(IntegrationInputError, match=r"TRL completion 1: crbc_anchors is str 'xy'"):
        _local_steps([{"crbc_anchors": ["x"]}, {"crbc_anchors": "xy"}], ["p", "q"], 2, None, None, None)
    with pytest.raises(IntegrationInputError, match=r"TRL completion 0: actions is str"):
        _local_steps([{}], ["p"], 1, lambda **kw: [{"anchors": ["x"], "actions": "a"}], None, None)


# ---- score_steps: the public array entry point ----------------------------------------------


@pytest.fixture(scope="module")
def steps():
    return canonical_steps(GROUP, TRAJ, STEP, ANCHOR, np.array([0.0, 1.0, 0.0, 0.0]))


def _with_batch(steps, **arrays):
    """``steps`` with its batch's arrays swapped in place: `RolloutBatch` refuses such arrays
    when built, `dataclasses.replace` included (tests/test_data_invariants.py), so only a batch
    changed after it was built carries them, and `score_steps` still checks for that."""
    batch = copy.copy(steps.batch)
    for name, value in arrays.items():
        object.__setattr__(batch, name, value)
    return dataclasses.replace(steps, batch=batch)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda s: "not steps", r"steps: expected the Steps that canonical_steps returns, got str"),
        (
            lambda s: dataclasses.replace(s, row_step=np.array([0, 1, 2, -1])),
            r"row_step: row 3 is -1, outside 0\.\.3",
        ),
        (
            lambda s: dataclasses.replace(s, row_step=np.array([0, 1, 2, 4])),
            r"row_step: row 3 is 4, outside 0\.\.3",
        ),
        (
            lambda s: dataclasses.replace(s, row_step=np.array([0.0, 1, 2, 3])),
            r"row_step: expected .* got float64\[4\]",
        ),
        (
            lambda s: _with_batch(s, step_anchor_hash=s.batch.step_anchor_hash[:3]),
            r"step_anchor_hash: expected 4 values, got 3",
        ),
        (
            lambda s: _with_batch(s, step_anchor_hash=s.batch.step_anchor_hash.astype(np.uint32)),
            r"step_anchor_hash: expected uint64",
        ),
        (
            lambda s: _with_batch(s, traj_offsets=np.array([0, 3, 2])),
            r"traj_offsets: expected non-decreasing offsets from 0 to 4",
        ),
        (
            lambda s: _with_batch(s, step_traj=np.array([0, 0, 1, 5])),
            r"step_traj: row 3 is 5, outside 0\.\.1",
        ),
        (
            lambda s: _with_batch(s, traj_success=np.array([1, 0])),
            r"traj_success: expected .* got int64\[2\]",
        ),
    ],
)
def test_score_steps_checks_its_arrays(steps, make, match):
    with pytest.raises(IntegrationInputError, match=match):
        score_steps(make(steps))


def test_score_steps_names_a_bad_device(steps):
    with pytest.raises(
        IntegrationInputError, match=r"device: expected 'cpu', 'cuda' or 'cuda:<n>', got 'bogus'"
    ):
        score_steps(steps, device="bogus")
    with pytest.raises(IntegrationInputError, match=r"device: expected the CPU or a CUDA device, got meta"):
        score_steps(steps, device="meta")
    with pytest.raises(BackendUnavailable, match=r"device: cuda:99 was asked for"):
        score_steps(steps, device="cuda:99")
    good = score_steps(steps).numpy()
    assert good[0] > 0 > good[2]  # trajectory a (reward 1) beats b from the shared start
