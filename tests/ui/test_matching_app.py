"""The matching diagnostics on the Data and Graph pages (AppTest): the counts are the CLI's, and a
group whose credit is degenerate for a reason the data explains is said so in one sentence."""

from __future__ import annotations

import json

from test_app import app, ok, text_of

from crbc_viz.cli import main


def _rows():
    rows = []
    # group "one": both rollouts take the one logged action "go" at S and at T: one action at
    # every anchor, so Q = V and every credit is 0 (a success and a failure notwithstanding).
    for t, won in (("a", True), ("b", False)):
        for k, s in enumerate(("S", "T")):
            rows.append(
                {
                    "group_id": "one",
                    "traj_id": t,
                    "step_idx": k,
                    "reward": float(won and k == 1),
                    "anchor_obs": s,
                    "action": "go",
                    "done": k == 1,
                    "success": won,
                }
            )
    # group "two": no action logged; S leads to A (success) or B (failure): credit +1 / -1.
    for t, nxt, won in (("c", "A", True), ("d", "B", False)):
        for k, s in enumerate(("S", nxt)):
            rows.append(
                {
                    "group_id": "two",
                    "traj_id": t,
                    "step_idx": k,
                    "reward": float(won and k == 1),
                    "anchor_obs": s,
                    "done": k == 1,
                    "success": won,
                }
            )
    return rows


def test_data_and_graph_pages_say_why_a_group_is_degenerate(tmp_path, monkeypatch, capsys):
    path = tmp_path / "two_groups.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    assert main(["info", str(path), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["matching"]
    # hand counts: 8 steps; shared: S in both groups (2 + 2 steps) and T in group one (2) = 6;
    # anchors S, T | S, A, B = 5, visited once: A, B = 2; inferred: group two's 4 steps
    assert (m["steps"], m["shared_steps"], m["anchors"], m["singleton_anchors"]) == (8, 6, 5, 2)
    assert (m["actions_inferred"], m["truncated"], m["rollouts"]) == (4, 0, 4)
    assert m["degenerate_groups"]["one_action_everywhere"] == 1 and sum(m["degenerate_groups"].values()) == 1

    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    at = app(file=str(path), group="two_groups/0/one")
    ok(at)
    page = text_of(at)
    assert f"{m['shared_steps']} of {m['steps']} steps at shared anchors" in page
    assert f"{m['singleton_anchors']} of {m['anchors']} anchors visited once" in page
    assert f"{m['actions_inferred']} of {m['steps']} steps' actions inferred" in page
    assert "1 group(s) with degenerate credit: 1 one action at every anchor" in page
    sentence = "Every anchor of this group has one action: Q = V at every anchor"
    assert any(sentence in w.value for w in at.warning), [w.value for w in at.warning]

    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    ok(at)
    assert "4 of 4 steps at shared anchors" in text_of(at)  # S and T, both rollouts
    assert any(sentence in w.value for w in at.warning)
    assert [e.label for e in at.expander if e.label == "Draw the graph anyway"]

    at = app(file=str(path), group="two_groups/0/two")
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    ok(at)
    assert "2 of 4 steps at shared anchors" in text_of(at)  # S only
    assert "4 of 4 steps' actions inferred" in text_of(at)
    assert not any("Q = V" in w.value for w in at.warning)
    assert not [e for e in at.expander if e.label == "Draw the graph anyway"]
