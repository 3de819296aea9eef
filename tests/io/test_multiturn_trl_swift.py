"""Multi-turn completions read as turns, by the history-free rule (SCHEMA.md): one step per
assistant turn, its anchor the environment's message (user / tool) before it.

Files written by the trainers' own code (generators in tests/fixtures/generators/ name the version
they ran); the expected trajectories, turns and anchors are the generators' truth.json, recorded
by the scripted policy from what the trainer handed it, never re-derived from the files.
"""

from __future__ import annotations

import collections
import json

import pytest

from crbc_viz.io.assemble import build_batch
from crbc_viz.io.importers import expand_sources, import_source
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"


def _load(path, fmt="auto"):
    (src,) = expand_sources([path], fmt)
    imp = import_source(src)
    return imp, build_batch(imp.raw)


def _anchors_by_group(steps, key_of_group):
    """{group key: sorted list of each trajectory's per-turn anchors}, from loaded step rows."""
    s = steps.sort_values(["group_id", "traj_id", "step_idx"], kind="stable")
    out = collections.defaultdict(list)
    for (g, _), t in s.groupby(["group_id", "traj_id"], sort=False):
        assert t["step_idx"].tolist() == list(range(len(t)))
        out[key_of_group(t)].append([json.loads(a) if a.startswith("[") else a for a in t["anchor_obs"]])
    return {k: sorted(v, key=json.dumps) for k, v in out.items()}


def _truth(name):
    return json.loads((FIX / name / "truth.json").read_text())["train_steps"]


@pytest.mark.parametrize("step", ["1", "2"])
def test_trl_tool_calling_completion_is_one_step_per_assistant_turn(step):
    """TRL 1.16.0's GRPOTrainer with tools: the completion is [assistant (tool call), tool,
    assistant ...]; each assistant turn is a step whose anchor is the tool result before it (the
    user message for the first), and a rollout cut by max_tool_calling_iterations ends on a tool
    call left unanswered: truncated."""
    t = _truth("trl_tools")[step]
    imp, b = _load(FIX / "trl_tools" / "trl_run" / "completions" / f"completions_{int(step):05d}.parquet")
    assert imp.fmt == "trl"
    assert (b.num_groups, b.num_trajectories, b.num_steps) == (t["groups"], t["trajectories"], t["steps"])
    assert int(b.traj_success.sum()) == t["successes"]
    last = b.steps.groupby("traj_id")["done"].last()
    assert int((~last.astype(bool)).sum()) == t["truncated"]
    got = _anchors_by_group(b.steps, lambda traj: traj["anchor_obs"].iloc[0])
    assert got == t["anchors_by_group"]
    # the outcome reward sits on the last turn only
    s = b.steps.sort_values(["traj_id", "step_idx"])
    assert (s.groupby("traj_id")["reward"].apply(lambda r: (r.iloc[:-1] == 0).all())).all()


def test_trl_tool_turns_merge_at_shared_tool_results():
    """Rollouts of one prompt that reach the same tool result share that anchor (history-free):
    the graph has fewer nodes than steps."""
    from crbc_viz.graph import build_graph

    _, b = _load(FIX / "trl_tools" / "trl_run" / "completions" / "completions_00002.parquet")
    g = build_graph(b)
    assert g.num_nodes < b.num_steps


@pytest.mark.parametrize("fixture", ["swift46_multiturn", "swift36_multiturn", "swift3_real"])
def test_ms_swift_multi_turn_prompt_is_one_step_per_assistant_turn(fixture):
    """ms-swift logs ``messages[:-1]`` (the whole conversation before the last reply: chat-templated
    text from 3.5, a message list in 3.4) and the last reply: each assistant turn of the prompt and
    the completion is a step, anchored at the user message before it, not at the prompt so far."""
    truth = _truth(fixture)
    imp, b = _load(FIX / fixture / "output" / "completions.jsonl")
    assert imp.fmt == "ms-swift"
    for step, t in truth.items():
        s = b.steps[b.steps["train_step"] == int(step)]
        assert s["traj_id"].nunique() == t["trajectories"] and len(s) == t["steps"]
        assert _anchors_by_group(s, lambda traj: traj["anchor_obs"].iloc[0]) == t["anchors_by_group"]
        # the sequence reward sits on the last turn: earlier turns carry 0
        s = s.sort_values(["traj_id", "step_idx"])
        assert (s.groupby("traj_id")["reward"].apply(lambda r: (r.iloc[:-1] == 0).all())).all()
