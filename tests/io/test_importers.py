"""Importers: each trainer's fixture (tests/fixtures/, written to the framework's documented
format) imports to the canonical rows its content implies; detection picks the right
importer or names the file and what was expected.

Expected values below are read off the fixture files by hand, not recomputed by the code.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crbc_viz.graph import build_graph
from crbc_viz.io import LoadError
from crbc_viz.io.assemble import build_batch
from crbc_viz.io.importers import FORMATS, detect, expand_sources, import_source
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"
VERL_AGENT = FIX / "verl_agent" / "crbc_step_000003.jsonl"
VERL_AGENT_ROLLOUT = FIX / "verl_agent_rollout" / "rollout" / "4.jsonl"
VERL = FIX / "verl_run" / "rollout" / "7.jsonl"
ROLL = FIX / "roll_run" / "roll_steps.jsonl"
RLLM = FIX / "rllm_run"
TRL = FIX / "trl_run" / "completions" / "completions_00010.parquet"


def load(path, fmt="auto", options=None, **kw):
    (src,) = expand_sources([path], fmt)
    imp = import_source(src, **(options or {}))
    return src, imp, build_batch(imp.raw, **kw)


def per_traj(batch):
    tr = batch.trajectories
    return dict(zip(tr["traj_id"], zip(tr["num_steps"], tr["success"])))


@pytest.mark.parametrize(
    "path,fmt",
    [
        (VERL_AGENT, "verl-agent"),
        (VERL, "verl"),
        (ROLL, "roll"),
        (RLLM, "rllm"),
        (TRL, "trl"),
        (ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl", "canonical"),
    ],
)
def test_detect(path, fmt):
    assert detect(str(path)) == fmt


def test_detect_unknown_names_file_and_expected(tmp_path):
    bad = tmp_path / "weird.jsonl"
    bad.write_text(json.dumps({"foo": 1, "bar": 2}) + "\n")
    with pytest.raises(LoadError) as e:
        detect(str(bad))
    msg = str(e.value)
    assert "weird.jsonl" in msg and "bar, foo" in msg
    for name in FORMATS:
        assert name in msg
    assert "uid, traj_uid" in msg


def test_unknown_format_name():
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        expand_sources([VERL_AGENT], "nope")


def test_verl_agent_dump():
    src, imp, b = load(VERL_AGENT)
    assert src.fmt == "verl-agent"
    # 10 rows, one with active_masks=false -> 9 steps; groups u-a (t1, t2) and u-b (t3, t4).
    assert b.num_steps == 9
    assert b.groups["group_id"].tolist() == ["u-a", "u-b"]
    assert per_traj(b) == {"t1": (3, True), "t2": (3, False), "t3": (2, False), "t4": (1, True)}
    assert set(b.steps["train_step"]) == {3}
    assert set(b.steps["run_id"]) == {"verl_agent"}
    assert set(b.steps["env_name"]) == {"alfworld"}
    # action parsed from <action>...</action>
    t1 = b.steps[b.steps["traj_id"] == "t1"]
    assert t1["action"].tolist() == ["go to fridge 1", "open fridge 1", "take apple 1"]
    assert t1["reward"].tolist() == [0.0, 0.0, 10.0]
    assert (
        b.steps.loc[(b.steps["traj_id"] == "t2") & (b.steps["step_idx"] == 1), "is_action_valid"].item()
        is False
    )
    # anchors: u-a has start, at fridge 1, fridge 1 open, at counter 1 -> 4 nodes; u-b 2.
    g = build_graph(b)
    assert np.diff(g.group_node_offsets).tolist() == [4, 2]
    assert imp.source_keys == {"uid": "group_id", "traj_uid": "traj_id", "step": "step_idx"}
    assert b.steps["advantage"].tolist()[:3] == [0.9, 0.9, 0.9]


def test_verl_agent_dump_without_step_is_an_error(tmp_path):
    # _balance_batch shuffles the rows: without the turn index they cannot be ordered
    rows = [json.loads(x) for x in VERL_AGENT.read_text().splitlines()]
    for r in rows:
        del r["step"]
    p = tmp_path / "crbc_step_000009.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LoadError, match="cannot be put back in order") as e:
        load(p)
    assert "crbc_step_000009.jsonl" in str(e.value) and "'step'" in str(e.value)


def test_verl_agent_rollout_data_dir_is_labelled_anchorless():
    src, imp, b = load(VERL_AGENT_ROLLOUT, "verl-agent")
    assert src.fmt == "verl-agent"
    assert any("lacking anchors" in n for n in imp.notes)
    assert any("no anchor_obs" in w for w in b.warnings)
    # 3 lines -> 3 one-step trajectories; the two lines with the same prompt share a group.
    assert b.num_trajectories == 3 and b.num_groups == 2
    assert sorted(np.diff(b.group_traj_offsets).tolist()) == [1, 2]
    # no anchors: nothing merges, each step is its own node
    assert build_graph(b).num_nodes == 3
    # auto-detection reads the same file as plain verl
    assert detect(str(VERL_AGENT_ROLLOUT)) == "verl"


def test_verl_rollout_data_dir():
    _, imp, b = load(VERL)
    assert b.num_groups == 2 and b.num_trajectories == 5
    assert np.diff(b.group_traj_offsets).tolist() == [2, 3]
    assert b.traj_success.tolist() == [True, False, True, False, True]
    assert set(b.steps["run_id"]) == {"verl_run"} and set(b.steps["train_step"]) == {7}
    # verl logs no action: the output is the response, and each step is identified by its
    # transition (SCHEMA.md), not by its text
    assert "action" not in b.steps and b.steps["response"].iloc[2] == "\\boxed{42}"
    assert imp.source_keys == {"step": "train_step", "line": "src_line"}
    assert b.steps["src_line"].tolist() == [1, 2, 3, 4, 5]
    # one anchor (the prompt) per group
    assert build_graph(b).num_nodes == 2


def test_verl_identical_lines_are_kept_with_a_note(tmp_path):
    lines = VERL.read_text().splitlines()
    assert lines[2] == lines[4]  # two samples of "What is 7*6?" both answered \boxed{42}
    _, imp, b = load(VERL)
    assert b.num_trajectories == 5 and any("kept 1 line(s) equal to an earlier line" in n for n in imp.notes)
    p = tmp_path / "rollout" / "7.jsonl"
    p.parent.mkdir()
    p.write_text("\n".join(lines + [lines[1], lines[1]]) + "\n")
    _, imp, b = load(p)
    assert b.num_trajectories == 7  # kept: GRPO samples of one prompt can coincide
    assert any(
        "kept 3 line(s) equal to an earlier line" in n and "--format verl-agent" in n for n in imp.notes
    )
    assert any("up to 2 of them may be adjust_batch padding copies" in n for n in imp.notes)
    # verl-agent: equal lines may be adjust_batch copies or real steps alike; all are kept, and a
    # row is copied at most once, so the pair holds at most 1 copy and the triple at most 1
    _, imp, b = load(p, "verl-agent")
    assert b.num_trajectories == 7 and imp.counts.get("copies_suspected", 0) == 2
    assert any("up to 2 of these 7 lines may be adjust_batch padding copies" in n for n in imp.notes)


def test_roll_step_wise():
    _, imp, b = load(ROLL)
    assert b.num_groups == 1
    assert b.groups["group_id"].item() == "SimpleSokoban_0_12_777"
    assert per_traj(b) == {"SimpleSokoban_0_12_777_0": (3, True), "SimpleSokoban_0_12_777_1": (2, False)}
    t0 = b.steps[b.steps["traj_id"] == "SimpleSokoban_0_12_777_0"]
    assert t0["reward"].tolist() == [-0.1, -0.1, 10.0]  # element `step` of the per-step list
    assert b.traj_return.tolist() == [9.8, -0.2]
    assert set(b.steps["train_step"]) == {12} and set(b.steps["env_name"]) == {"SimpleSokoban"}
    # state_hash s0 is shared by both rollouts' first step: nodes s0, s1, s2, s3
    g = build_graph(b)
    assert g.num_nodes == 4
    assert b.steps["anchor_key"].tolist()[:3] == ["s0", "s1", "s2"]
    assert b.traj_truncated.tolist() == [False, True]


def test_rllm_episode_folder():
    (src,) = expand_sources([RLLM])
    assert src.fmt == "rllm" and len(src.files) == 3
    _, imp, b = load(RLLM)
    assert b.groups["group_id"].tolist() == ["task-7:solver", "task-9:solver"]
    assert per_traj(b) == {
        "task-7:0": (2, True),
        "task-7:1": (2, False),
        "task-9:0": (1, False),
        "task-9:1": (2, True),
    }
    assert set(b.steps["train_step"]) == {2} and set(b.steps["run_id"]) == {"rllm_run"}
    assert b.steps["action"].tolist()[:2] == ["2", "1"]
    assert b.steps["response"].iloc[0] == "I move 2"
    # observation is the anchor: task-7 visits G0 (both), G1, G2 -> 3 nodes; task-9: G0, G1
    g = build_graph(b)
    assert np.diff(g.group_node_offsets).tolist() == [3, 2]
    assert imp.source_keys["episode_id"] == "src_episode_id"
    assert b.steps["src_traj_uid"].iloc[0] == "uid-task-7:0"


def test_rllm_bad_episode_names_file(tmp_path):
    d = tmp_path / "step_1"
    d.mkdir()
    (d / "a.json").write_text(json.dumps({"id": "x:0", "trajectories": [{"steps": "nope"}]}))
    with pytest.raises(LoadError) as e:
        load(tmp_path, "rllm")
    assert "a.json" in str(e.value) and "trajectories[0].steps" in str(e.value)


def test_trl_completions():
    # a hand-written file (advantages rounded by hand): the reward columns are declared
    _, imp, b = load(TRL, options={"reward_columns": ["accuracy_reward", "format_reward"]})
    assert b.num_groups == 2 and b.num_trajectories == 6
    assert any("success = accuracy_reward" in n for n in imp.notes)
    # reward = accuracy + format
    assert b.steps["reward"].tolist() == [2.0, 1.0, 1.0, 2.0, 2.0, 1.0]
    # success is the 0/1 accuracy column, not reward > threshold (row 3: accuracy 1, format 0)
    assert b.traj_success.tolist() == [True, False, True, True, True, False]
    assert set(b.steps["train_step"]) == {10} and set(b.steps["run_id"]) == {"trl_run"}
    assert b.steps["advantage"].tolist() == [0.58, -1.15, 0.58, 0.58, 0.58, -1.15]
    assert imp.source_keys == {"step": "train_step", "row": "src_row"}
    assert build_graph(b).num_nodes == 2


def test_trl_missing_reward_column(tmp_path):
    p = tmp_path / "completions_00001.parquet"
    pd.DataFrame({"step": [1], "prompt": ["a"], "completion": ["b"]}).to_parquet(p)
    with pytest.raises(LoadError, match="no reward column"):
        load(p, "trl")


def test_forced_format_mismatch_names_missing_fields():
    with pytest.raises(LoadError) as e:
        load(VERL, "roll")
    assert "7.jsonl" in str(e.value) and "traj_group_id" in str(e.value)


def test_folder_of_dumps_expands_in_natural_order(tmp_path):
    for step in (10, 9):
        (tmp_path / f"{step}.jsonl").write_text(VERL.read_text())
    srcs = expand_sources([tmp_path])
    assert [s.path.rsplit("/", 1)[1] for s in srcs] == ["9.jsonl", "10.jsonl"]
    assert {s.fmt for s in srcs} == {"verl"}
