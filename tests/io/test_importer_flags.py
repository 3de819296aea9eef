"""Success and other true/false flags in the importers: one rule (`crbc_viz.io.flags`), so no
importer reads a failure as a success. rLLM's ``is_correct: "false"`` is a problem naming the
file, item and field (``bool("false")`` was True); TRL's 0/1 success column written as strings
is read (it was dropped, and success fell back to reward > 0); ROLL's ``done`` and verl-agent's
``active_masks`` are read as flags (in a CSV the text ``false`` is false), a value that is not
one is a problem naming its line.

Every file is written here by hand; the expected successes are the flags written, counted by
hand, never the importer's own output.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crbc_viz.io import LoadError
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.flags import not_a_flag, read_flags
from crbc_viz.io.importers import expand_sources, import_source


def load(path, fmt, **options):
    (src,) = expand_sources([path], fmt)
    imp = import_source(src, **options)
    return imp, build_batch(imp.raw)


# ---- the shared reading ---------------------------------------------------------------------


def test_read_flags_takes_bools_and_0_1_only():
    values = [True, False, np.bool_(True), 1, 0, np.int8(1), 1.0, 0.0, np.float32(0)]
    flags, bad = read_flags(values)
    assert flags.tolist() == [True, False, True, True, False, True, True, False, False]
    assert bad.tolist() == []
    hostile = [float("nan"), None, "False", "false", "true", "0", 2, -1, 0.5, b"1", [1], pd.NA]
    flags, bad = read_flags(hostile)
    assert bad.tolist() == list(range(len(hostile)))
    assert not flags.any()
    # vectorised paths: float with NaN, int with 2, text without text=True
    assert read_flags(np.array([1.0, np.nan, 0.0]))[1].tolist() == [1]
    assert read_flags(np.array([1, 2, 0]))[1].tolist() == [1]
    assert read_flags(np.array(["true", "false"]))[1].tolist() == [0, 1]


def test_read_flags_text_only_when_asked():
    flags, bad = read_flags(["true", " FALSE ", "1", "0", "True", "yes", "", "nan", None], text=True)
    assert flags[:5].tolist() == [True, False, True, False, True]
    assert bad.tolist() == [5, 6, 7, 8]
    assert read_flags(pd.Series(["1", "0"], dtype="string"), text=True)[0].tolist() == [True, False]
    assert not_a_flag(np.float64("nan")) == "expected a bool or 0/1, got float64 nan"
    assert not_a_flag("yes", text=True) == "expected a bool, 0/1 or the text true/false, got str 'yes'"


# ---- rLLM: is_correct -----------------------------------------------------------------------


def rllm_episode(eid, **fields):
    step = {"observation": "s0", "action": "a", "reward": 1.0, "done": True}
    return {"id": eid, **fields, "trajectories": [{"uid": "u", "reward": 1.0, "steps": [step]}]}


def write_episodes(folder, episodes):
    d = folder / "step_1"
    d.mkdir(parents=True)
    for k, ep in enumerate(episodes):
        (d / f"episode_{k}.json").write_text(json.dumps(ep))
    return folder


@pytest.mark.parametrize("value,shown", [("false", "str 'false'"), (None, "NoneType None"), (2, "int 2")])
def test_rllm_is_correct_that_is_not_a_flag_is_a_problem(tmp_path, value, shown):
    root = write_episodes(
        tmp_path, [rllm_episode("t:0", is_correct=True), rllm_episode("t:1", is_correct=value)]
    )
    with pytest.raises(LoadError) as e:
        load(root, "rllm")
    msg = str(e.value)
    assert "episode_1.json:item 0: field 'is_correct'" in msg and shown in msg
    assert "episode_0.json" not in msg


def test_rllm_is_correct_flags_and_missing(tmp_path):
    # Every trajectory has reward 1.0: were success read from it, all four would succeed.
    root = write_episodes(
        tmp_path,
        [
            rllm_episode("a:0", is_correct=False),
            rllm_episode("b:0", is_correct=0),
            rllm_episode("c:0", is_correct=1),
            rllm_episode("d:0"),  # no is_correct: the return (1.0) > 0 decides, noted
        ],
    )
    imp, b = load(root, "rllm")
    got = dict(zip(b.trajectories["traj_id"], b.trajectories["success"]))
    assert got == {"a:0": False, "b:0": False, "c:0": True, "d:0": True}
    assert any("1 episode(s) have no is_correct" in n for n in imp.notes)


# ---- TRL: a 0/1 success column written as strings -------------------------------------------


def trl_file(tmp_path, won, **extra):
    """16 completions, 4 prompts x 4; one reward function (format_reward = 0.2 everywhere, so
    the logged advantage is 0) and a success column ``won`` that is not a reward."""
    n = len(won)
    df = pd.DataFrame(
        {
            "step": 1,
            "prompt": [f"p{k // 4}" for k in range(n)],
            "completion": [f"c{k}" for k in range(n)],
            "format_reward": 0.2,
            "won": won,
            **extra,
            "advantage": 0.0,
        }
    )
    p = tmp_path / "completions" / "completions_00001.parquet"
    p.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(p)
    return p


WON = ["1", "0", "0", "0"] * 4  # 4 of 16 succeeded


def test_trl_success_column_of_strings_is_read(tmp_path):
    imp, b = load(trl_file(tmp_path, WON), "trl")
    assert b.traj_success.tolist() == [w == "1" for w in WON]  # 4/16, not reward > 0's 16/16
    assert any("success = won" in n for n in imp.notes)
    all_failed = trl_file(tmp_path / "b", ["0"] * 16)
    assert load(all_failed, "trl")[1].traj_success.sum() == 0


def test_trl_success_column_of_true_false_text(tmp_path):
    text = ["true", "False", " FALSE", "false"] * 4
    p = trl_file(tmp_path, text)
    expected = [w == "1" for w in WON]
    assert load(p, "trl")[1].traj_success.tolist() == expected
    assert load(p, "trl", success_column="won")[1].traj_success.tolist() == expected


def test_trl_success_named_column_that_is_not_flags_is_named(tmp_path):
    imp, b = load(trl_file(tmp_path, ["yes", "no", "no", "no"] * 4), "trl")
    note = next(n for n in imp.notes if "success = reward > the success threshold" in n)
    assert "won (row 0: 'yes')" in note
    with pytest.raises(LoadError) as e:
        load(trl_file(tmp_path / "b", ["1", "0", None, "maybe"] * 4), "trl", success_column="won")
    msg = str(e.value)
    assert "8 problems" in msg and ":row 2: field 'won'" in msg and "got str 'maybe'" in msg


# ---- ROLL done, verl-agent active_masks ------------------------------------------------------


def roll_rows(done):
    return [
        {
            "traj_group_id": "g",
            "traj_id": "t",
            "step": k,
            "state_hash": f"s{k}",
            "step_scores": 0.0,
            "done": d,
        }
        for k, d in enumerate(done)
    ]


def test_roll_done_that_is_not_a_flag_is_a_problem(tmp_path):
    p = tmp_path / "roll.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in roll_rows([False, "False"])) + "\n")
    with pytest.raises(LoadError) as e:
        load(p, "roll")
    assert "roll.jsonl:line 2: field 'done': expected a bool or 0/1, got str 'False'" in str(e.value)


def test_roll_csv_done_false_is_truncation(tmp_path):
    p = tmp_path / "roll.csv"
    pd.DataFrame(roll_rows([False, False])).assign(done=["false", "false"]).to_csv(p, index=False)
    b = load(p, "roll")[1]
    assert b.traj_truncated.tolist() == [True]  # bool("false") would have called it ended


def verl_agent_rows(active):
    return [
        {"uid": "g", "traj_uid": "t", "step": k, "anchor_obs": f"s{k}", "rewards": 0.0, "active_masks": a}
        for k, a in enumerate(active)
    ]


def test_verl_agent_active_masks_are_flags(tmp_path):
    p = tmp_path / "crbc_step_1.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in verl_agent_rows([True, "False", None])) + "\n")
    with pytest.raises(LoadError) as e:
        load(p, "verl-agent")
    msg = str(e.value)
    assert "line 2: field 'active_masks': expected a bool or 0/1, got str 'False'" in msg
    assert "line 3: field 'active_masks': expected a bool or 0/1, got NoneType None" in msg
    c = tmp_path / "crbc_step_2.csv"
    pd.DataFrame(verl_agent_rows(["true", "true", "false"])).to_csv(c, index=False)
    assert load(c, "verl-agent")[1].num_steps == 2  # the inactive third row is dropped


# ---- rewards and scores: numbers, or their text, or a problem naming file, line and field ------

FIX = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"


def _truth(name):
    return {int(k): v for k, v in json.loads((FIX / name / "truth.json").read_text())["train_steps"].items()}


def test_read_numbers_takes_numbers_and_their_text_only():
    from crbc_viz.io.flags import not_a_number, read_numbers

    nums, bad = read_numbers([1, 0.5, np.float32(2), np.int64(-3), "0.5", " 1e-3 ", "-2", None, float("nan")])
    assert nums[:7].tolist() == [1.0, 0.5, 2.0, -3.0, 0.5, 0.001, -2.0] and bad.tolist() == []
    assert np.isnan(nums[7:]).all()  # missing, not bad: the caller decides
    hostile = [
        True,
        np.bool_(False),
        "False",
        "nan",
        "inf",
        "1e400",
        "0x1",
        "1_000",
        "",
        [],
        {},
        [1],
        10**400,
        float("inf"),
    ]
    nums, bad = read_numbers(hostile)
    assert bad.tolist() == list(range(len(hostile))) and np.isnan(nums).all()
    assert read_numbers(["0.5"], text=False)[1].tolist() == [0]
    assert read_numbers(np.array([1.0, np.inf]))[1].tolist() == [1]
    assert not_a_number(True) == "expected a number, got bool True"
    assert not_a_number("False") == "expected a number, got str 'False'"
    assert not_a_number(10**400).startswith("expected a finite number, got an integer too large")


def _trl_as_text(tmp_path, step):
    """TRL's own completions file (tests/fixtures/trl_real, written by TRL 1.16's
    GRPOTrainer.log) with its reward-function columns rewritten as the text of their numbers."""
    df = pd.read_parquet(FIX / "trl_real" / "trl_run" / "completions" / f"completions_{step:05d}.parquet")
    for c in ("reward_won", "format_reward"):
        df[c] = [repr(float(v)) for v in df[c]]  # "0.0", "1.0", "0.2"
    p = tmp_path / "trl_run" / "completions" / f"completions_{step:05d}.parquet"
    p.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(p)
    return p


@pytest.mark.parametrize("step", [1, 2, 3])
def test_trl_reward_columns_written_as_text_are_read_as_numbers(tmp_path, step):
    """With the reward columns as strings, success fell back to reward > 0 (16 of 16, the
    format reward is 0.2 everywhere) or the file was refused; read as numbers, success is
    reward_won's, as many as TRL's reward function scored (the generator's truth)."""
    want = _truth("trl_real")[step]["successes"]
    p = _trl_as_text(tmp_path, step)
    for options in ({}, {"reward_columns": ["reward_won", "format_reward"]}):
        imp, b = load(p, "trl", **options)
        assert int(b.traj_success.sum()) == want, (options, imp.notes)
        assert len(b.traj_success) == 16
        assert any(
            "numbers written as text read as numbers in column(s): reward_won (16)" in n for n in imp.notes
        )
        assert any(
            f"success = reward_won (the 0/1 reward column named like a success): {want} of 16" in n
            for n in imp.notes
        )


@pytest.mark.parametrize(
    "spell",
    [lambda v: v == 1.0, lambda v: "true" if v else "false", lambda v: "True" if v else "False", repr],
    ids=["json-bools", "true-false", "True-False", "number-text"],
)
def test_ms_swift3_reward_won_as_flags_or_text_is_the_success(tmp_path, spell):
    """ms-swift 3.4.1's completions.jsonl (tests/fixtures/swift3_real) with reward_won written as
    JSON booleans or text: success was silently taken from Format (22); it is reward_won's (5,
    the generator's truth), and the reward is Format + reward_won as ms-swift summed them."""
    src = FIX / "swift3_real" / "output" / "completions.jsonl"
    lines = [json.loads(x) for x in src.read_text().splitlines()]
    fmt_sum = sum(sum(o["Format"]) for o in lines)  # 22: what success was wrongly read from
    won_sum = sum(sum(o["reward_won"]) for o in lines)
    for o in lines:
        o["reward_won"] = [spell(v) for v in o["reward_won"]]
    p = tmp_path / "output" / "completions.jsonl"
    p.parent.mkdir()
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    imp, b = load(p, "ms-swift")
    truth = _truth("swift3_real")
    assert int(b.traj_success.sum()) == sum(t["successes"] for t in truth.values()) == won_sum == 5
    assert fmt_sum == 22
    assert float(b.steps["reward"].sum()) == fmt_sum + won_sum
    assert any("success = reward_won" in n and "5 of 24" in n for n in imp.notes), imp.notes


def test_ms_swift3_reward_column_with_other_text_is_refused_by_line_and_column(tmp_path):
    src = FIX / "swift3_real" / "output" / "completions.jsonl"
    lines = [json.loads(x) for x in src.read_text().splitlines()]
    lines[1]["reward_won"][3] = "won"
    p = tmp_path / "output" / "completions.jsonl"
    p.parent.mkdir()
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    with pytest.raises(LoadError) as e:
        load(p, "ms-swift")
    assert "completions.jsonl:line 2: field 'reward_won': expected a number, got str 'won'" in str(e.value)


def test_trl_fallback_from_a_success_column_names_both_columns_and_counts(tmp_path):
    """won holds text that is not a flag: success falls back to the 0/1 reward column, and the
    note names both columns with their counts (it was silent about won)."""
    won = ["yes", "no", "no", "no"] * 4
    fmt = [1.0, 1.0, 0.0, 1.0] * 4  # 12 of 16
    imp, b = load(trl_file(tmp_path, won, check=fmt), "trl", reward_columns=["format_reward", "check"])
    assert int(b.traj_success.sum()) == 12
    note = next(n for n in imp.notes if n.startswith("success = check"))
    assert "12 of 16 completions" in note
    assert "not won (row 0: 'yes') [16 of 16 rows not flags]" in note


def test_trl_reward_column_with_a_value_that_is_not_a_number_is_refused(tmp_path):
    """A reward column holding numbers and other text is refused by row and column, declared or
    found by its name; it is never left out of the reward, nor its text read as 0."""
    acc = ["1.0", "0.0", "0.5", "x"] * 4
    for k, options in enumerate(({}, {"reward_columns": ["format_reward", "accuracy_reward"]})):
        with pytest.raises(LoadError) as e:
            load(trl_file(tmp_path / str(k), WON, accuracy_reward=acc), "trl", **options)
        msg = str(e.value)
        assert "4 problems" in msg and ":row 3: field 'accuracy_reward':" in msg, msg
        assert "expected a number, got str 'x'" in msg
