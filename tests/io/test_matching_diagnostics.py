"""`crbc_viz.analysis.matching`: per-group and per-file matching diagnostics against hand counts."""

from __future__ import annotations

import json

from crbc_viz.analysis.matching import REASONS, group_matching, matching_summary
from crbc_viz.graph import build_graph
from crbc_viz.io import load_rollouts


def _row(g, t, k, s, *, won, last, action=None, done=None):
    r = {
        "group_id": g,
        "traj_id": t,
        "step_idx": k,
        "reward": float(won and last),
        "anchor_obs": s,
        "success": won,
    }
    if action is not None:
        r["action"] = action
    r["done"] = last if done is None else done
    return r


def _groups():
    rows = []
    # "mixed": a: S -go-> A (win); b: S -go-> B (loss); c: S -back-> S -go-> A, cut (done=false)
    rows += [
        _row("mixed", "a", 0, "S", won=True, last=False, action="go"),
        _row("mixed", "a", 1, "A", won=True, last=True),
    ]
    rows += [
        _row("mixed", "b", 0, "S", won=False, last=False, action="go"),
        _row("mixed", "b", 1, "B", won=False, last=True),
    ]
    rows += [
        _row("mixed", "c", 0, "S", won=False, last=False, action="back"),
        _row("mixed", "c", 1, "S", won=False, last=False, action="go"),
        _row("mixed", "c", 2, "A", won=False, last=True, done=False),
    ]
    # "lost": two rollouts, no success
    rows += [
        _row("lost", "a", 0, "S", won=False, last=True, action="x"),
        _row("lost", "b", 0, "S", won=False, last=True, action="y"),
    ]
    # "apart": no anchor shared
    rows += [
        _row("apart", "a", 0, "P", won=True, last=True, action="x"),
        _row("apart", "b", 0, "Q", won=False, last=True, action="x"),
    ]
    # "won": every rollout succeeded, two actions at S
    rows += [
        _row("won", "a", 0, "S", won=True, last=True, action="x"),
        _row("won", "b", 0, "S", won=True, last=True, action="y"),
    ]
    return rows


def test_hand_counted_groups(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _groups()))
    g = build_graph(load_rollouts(path))
    t = group_matching(g).set_index("group")
    mixed = t.loc["m/0/mixed"]
    # steps 7; anchors S, A, B; S visited 4 times (a, b, c twice) by 3 rollouts, A twice (a, c),
    # B once; shared steps = S's 4 + A's 2 = 6; singleton anchors: B = 1; actions inferred: the
    # three last steps (A, B, A) = 3; one-action anchors: S has go / back, A has ->SUCCESS (a)
    # and ->FAILURE (c, cut), B has ->FAILURE only -> 1
    assert (mixed.steps, mixed.shared_steps, mixed.anchors, mixed.singleton_anchors) == (7, 6, 3, 1)
    assert (mixed.actions_inferred, mixed.one_action_anchors) == (3, 1)
    assert (mixed.rollouts, mixed.successes, mixed.truncated) == (3, 1, 1)
    assert mixed.reason is None and mixed.sentence is None
    assert t.loc["m/0/lost", "reason"] == "no_success"
    assert t.loc["m/0/apart", "reason"] == "no_shared_anchor"
    assert t.loc["m/0/won", "reason"] == "no_failure"
    assert "None of the 2 rollouts succeeded" in t.loc["m/0/lost", "sentence"]

    s = matching_summary(g, {"copies_dropped": 2})
    assert (s["steps"], s["shared_steps"], s["anchors"], s["singleton_anchors"]) == (13, 10, 7, 3)
    assert (s["actions_inferred"], s["truncated"], s["rollouts"], s["copies_dropped"]) == (3, 1, 9, 2)
    assert s["degenerate_groups"] == dict(zip(REASONS, (1, 1, 0, 1)))
    assert [e["group"] for e in s["degenerate_examples"]] == ["m/0/lost", "m/0/apart", "m/0/won"]


def test_one_action_everywhere(tmp_path):
    rows = [
        _row("one", t, k, s, won=w, last=k == 1, action="go")
        for t, w in (("a", True), ("b", False))
        for k, s in enumerate("ST")
    ]
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    row = group_matching(build_graph(load_rollouts(path))).iloc[0]
    assert row.reason == "one_action_everywhere" and row.one_action_anchors == row.anchors == 2
    assert "Q = V" in row.sentence


def test_an_importers_copy_counts_reach_the_store_summary(tmp_path, monkeypatch, capsys):
    """`Imported.counts` (filled by an importer: here a wrapped ROLL importer reporting two
    dropped padding copies) is kept in the store's manifest and summed by ``info --store``."""
    from crbc_viz.cli import main
    from crbc_viz.io.importers import roll
    from crbc_viz.store import ingest
    from helpers import ROOT

    real = roll.read

    def read(path):
        imp = real(path)
        imp.counts["copies_dropped"] = 2
        return imp

    monkeypatch.setattr(roll, "read", read)
    ingest(tmp_path / "s", [ROOT / "tests/fixtures/roll_real/rollout_dump/rollout_dump_data.step_1.jsonl"])
    assert main(["info", "--store", str(tmp_path / "s"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["copies_dropped"] == 2
