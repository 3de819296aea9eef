"""Anchor rules (`crbc_viz.io.anchor_rules`): a rule merges anchors that differ only in a
session id or an irrelevant JSON field; expected counts are hand-counted, and the credit under
a rule is compared with the credit of the same log whose anchors were rewritten by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crbc_viz.api import score
from crbc_viz.graph import build_graph
from crbc_viz.io import load_rollouts
from crbc_viz.io.anchor_rules import AnchorRuleError, make_rule, using


def _row(g, t, s, obs, action, reward, done, success=None):
    r = {"group_id": g, "traj_id": t, "step_idx": s, "anchor_obs": obs, "action": action}
    r.update(reward=reward, done=done)
    if success is not None:
        r["success"] = success
    return r


def session_rows(rewrite=None):
    """Two groups; in each, rollouts a (success) and b (failure) pass 'start' and 'mid', each
    with its own session id; group h repeats g's exact texts (it must not merge with g)."""
    rows = []
    for g in ("g", "h"):
        for t, sess, act, ok in (("a", "abc", "L", True), ("b", "xyz", "R", False)):
            for s, where in enumerate(("start", "mid")):
                obs = f"{where} session={sess}" if rewrite is None else rewrite(where)
                last = s == 1
                rows.append(
                    _row(g, t, s, obs, "L" if s == 0 else act, float(ok and last), last, ok if last else None)
                )
    return rows


def object_rows(rewrite=None):
    """One group; three rollouts visit board 0 then board 1; the anchor object also carries a
    clock 't' that differs on every step."""
    rows = []
    clock = 0
    for t, act, ok in (("a", "up", True), ("b", "down", False), ("c", "up", True)):
        for s in range(2):
            clock += 1
            obs = {"board": [s, 0], "t": clock, "inv": {"keys": 1}}
            obs = obs if rewrite is None else rewrite(obs)
            last = s == 1
            rows.append(
                _row("g", t, s, obs, "go" if s == 0 else act, float(ok and last), last, ok if last else None)
            )
    return rows


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _load(path, rule=None):
    with using(rule):
        return load_rollouts(path)


def _shared_fraction(graph):
    return float(graph.shared_step_mask().mean())


def test_drop_merges_session_ids_within_groups_only(tmp_path):
    p = write(tmp_path / "s.jsonl", session_rows())
    exact = build_graph(_load(p))
    assert len(exact.node_visits) == 8  # 2 groups x 2 rollouts x 2 steps, all distinct
    assert _shared_fraction(exact) == 0.0
    ruled = build_graph(_load(p, make_rule("drop", drop=[r"\s*session=\w+"])))
    # per group: 'start' (a, b) and 'mid' (a, b) -> 2 anchors; two groups -> 4, never merged across
    assert len(ruled.node_visits) == 4
    assert sorted(ruled.node_visits.tolist()) == [2, 2, 2, 2]
    assert _shared_fraction(ruled) == 1.0
    # the raw anchor stays for display
    assert "session=abc" in str(ruled.batch.step_column("anchor_obs")[0])


def test_drop_credit_equals_hand_rewritten_log(tmp_path):
    p = write(tmp_path / "s.jsonl", session_rows())
    q = write(tmp_path / "hand.jsonl", session_rows(rewrite=lambda where: where))
    got = score(_load(p, make_rule(drop=[r"\s*session=\w+"])), "crbc", backend="numpy").credit
    want = score(load_rollouts(q), "crbc", backend="numpy").credit
    np.testing.assert_allclose(got, want, atol=1e-12)
    exact = score(load_rollouts(p), "crbc", backend="numpy").credit
    assert not np.allclose(exact, want)  # the rule changes the credit


def test_fields_merge_objects_and_credit_equals_hand_rewritten_log(tmp_path):
    p = write(tmp_path / "o.jsonl", object_rows())
    q = write(tmp_path / "hand.jsonl", object_rows(rewrite=lambda o: {"board": o["board"], "inv.keys": 1}))
    exact = build_graph(_load(p))
    assert len(exact.node_visits) == 6 and _shared_fraction(exact) == 0.0
    rule = make_rule("fields", fields="board,inv.keys")
    ruled = build_graph(_load(p, rule))
    assert len(ruled.node_visits) == 2  # board [0,0] and [1,0]
    assert _shared_fraction(ruled) == 1.0
    got = score(ruled, "crbc", backend="numpy").credit
    want = score(load_rollouts(q), "crbc", backend="numpy").credit
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_fields_apply_to_json_text_in_csv(tmp_path):
    import pandas as pd

    rows = object_rows()
    for r in rows:
        r["anchor_obs"] = json.dumps(r["anchor_obs"])
    p = tmp_path / "o.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    ruled = build_graph(_load(str(p), make_rule(fields="board")))
    assert len(ruled.node_visits) == 2


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"drop": ["("]}, "not a valid regular expression"),
        ({"drop": ["(a+)+"]}, "repetition inside a repetition"),
        ({"drop": [r"(\w*)*x"]}, "repetition inside a repetition"),
        ({"drop": ["a" * 201]}, "at most 200"),
        ({"drop": ["x*"]}, "empty text"),
        ({"fields": " , "}, "empty field list"),
        ({"name": "fields"}, "--anchor-fields"),
        ({"name": "coarse"}, "expected one of"),
    ],
)
def test_bad_rules_are_refused(kwargs, needle):
    with pytest.raises(AnchorRuleError) as e:
        make_rule(**kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_field_missing_in_every_anchor_is_refused(tmp_path):
    p = write(tmp_path / "o.jsonl", object_rows())
    rule = make_rule(fields="board,bord")
    _load(p, rule)
    with pytest.raises(AnchorRuleError, match="bord missing in every anchor"):
        rule.check_found()


def test_integrations_key_by_the_rule_in_force():
    from crbc_viz.integrations._core import anchor_hashes

    anchors = np.array(["start session=abc", "start session=xyz", "start"], dtype=object)
    exact = anchor_hashes(anchors)
    assert len(set(exact.tolist())) == 3
    with using(make_rule(drop=[r"\s*session=\w+"])):
        ruled = anchor_hashes(anchors)
    assert len(set(ruled.tolist())) == 1
    np.testing.assert_array_equal(anchor_hashes(anchors), exact)  # outside the block: exact again


def test_a_logged_anchor_key_is_kept(tmp_path):
    rows = session_rows()
    for i, r in enumerate(rows):
        r["anchor_key"] = f"k{i}"  # every step its own logged key
    p = write(tmp_path / "k.jsonl", rows)
    ruled = build_graph(_load(p, make_rule(drop=[r"\s*session=\w+"])))
    assert len(ruled.node_visits) == 8
