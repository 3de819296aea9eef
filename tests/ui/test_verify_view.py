"""The Data page's "Logged vs recomputed advantage" view (`streamlit.testing`): shown for a
file that carries the trainer's own advantage, disagreeing groups first, absent otherwise.
Which verl-agent group disagrees is read independently from the legacy hook dump (every batch
row): the one whose batch held an ``adjust_batch`` padding copy."""

from __future__ import annotations

import collections
import json

from test_open_trainer_files import FIX, REPO, TRL, app, ok, roots, server_path  # noqa: F401

TITLE = "Logged vs recomputed advantage"


def _copy_group(step: int) -> str:
    rows = [
        json.loads(x)
        for x in (FIX / f"verl_agent_real/legacy_hook/crbc_step_{step:06d}.jsonl").read_text().splitlines()
    ]
    seen = collections.Counter((r["uid"], r["traj_uid"], r["step"]) for r in rows)
    (uid,) = {u for (u, _, _), n in seen.items() if n > 1}
    return uid


def _view(at):
    (exp,) = [e for e in at.expander if e.label == TITLE]
    return exp


def test_verl_agent_file_lists_the_padding_copy_group_first(roots):  # noqa: F811
    at = server_path(app(), FIX / "verl_agent_real/crbc_dump/crbc_step_000001.jsonl")
    ok(at)
    exp = _view(at)
    assert [w.value for w in exp.warning][0].startswith("1 of 3 groups disagree with gigpo")
    table = exp.dataframe[0].value
    assert table["status"].tolist() == ["DISAGREES", "agrees", "agrees"]
    assert table["group"].iloc[0].endswith("/" + _copy_group(1))
    assert any("adjust_batch" in c.value for c in exp.caption)


def test_trl_file_agrees_and_a_file_without_advantage_has_no_view(roots):  # noqa: F811
    at = server_path(app(), TRL)
    assert [s.value for s in _view(at).success][0].startswith("All 4 groups agree with grpo")
    at = server_path(at, REPO / "sample_rollouts/toy/toy_group.jsonl")
    assert not [e for e in at.expander if e.label == TITLE]
