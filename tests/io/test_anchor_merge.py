"""The anchor rules that re-key a batch (`crbc_viz.anchor_merge`): RTMC signatures (hand-counted
sets of earlier actions), GiGPO's difflib threshold and ProxMO's TF-IDF cosine (the expected
clusters come from a brute force over ``difflib.SequenceMatcher.ratio`` and scikit-learn's
``TfidfVectorizer``, not from the implementation); merging stays within a group unless the
scope is the batch, and the CLI, a trainer adapter and the app's preview agree."""

from __future__ import annotations

import difflib
import json

import pytest

from crbc_viz.anchor_merge import apply_rule, coarsen_action
from crbc_viz.graph import build_graph
from crbc_viz.io import load_rollouts
from crbc_viz.io.anchor_rules import AnchorRuleError, make_rule

#: Two tasks (groups); each rollout's texts differ in a session tag and small wording.
TEXTS = {
    "kitchen": [
        ["You are in the kitchen. A fridge is here. session=ab12", "The fridge is open. session=ab12"],
        ["You are in the kitchen. A fridge is here. session=zz99", "The fridge is open. session=zz99"],
        ["You are in the kitchen. A stove is here. session=qq00", "The stove is hot. session=qq00"],
    ],
    "garden": [
        ["You are in the garden. A hose is here. session=ab12", "The hose is wet. session=ab12"],
        ["You are in the kitchen. A fridge is here. session=kk11", "The fridge is open. session=kk11"],
        ["You are in the garden. A rake is here. session=mm22", "The rake is old. session=mm22"],
    ],
}
ACTIONS = [["open fridge", "eat"], ["open fridge", "look"], ["light stove", "eat"]]
OK = [True, False, True]


def rows():
    out = []
    for g, trajs in TEXTS.items():
        for t, (texts, acts, ok) in enumerate(zip(trajs, ACTIONS, OK)):
            for s, (obs, act) in enumerate(zip(texts, acts)):
                last = s == len(texts) - 1
                r = {"group_id": g, "traj_id": f"t{t}", "step_idx": s, "anchor_obs": obs, "action": act}
                r.update(reward=float(ok and last), done=last)
                if last:
                    r["success"] = ok
                out.append(r)
    return out


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return str(p)


def _partition(batch) -> list[set]:
    """The steps that share a node, as sets of (group, traj, step) — the merge to compare."""
    g = build_graph(batch)
    tr = batch.trajectories
    out: dict = {}
    for s in range(batch.num_steps):
        t = int(batch.step_traj[s])
        key = (str(tr["group_id"].iat[t]), str(tr["traj_id"].iat[t]), int(s - batch.traj_offsets[t]))
        out.setdefault(int(g.step_node[s]), set()).add(key)
    return sorted(out.values(), key=lambda x: sorted(x))


def _brute(texts_by_step: dict, same) -> list[set]:
    """GiGPO's greedy clustering by brute force: per group, distinct texts in sorted order
    join the first representative ``same(text, rep)`` accepts."""
    groups: dict = {}
    for key, text in sorted(texts_by_step.items(), key=lambda kv: kv[1]):
        groups.setdefault(key[0], []).append((key, text))
    out = []
    for members in groups.values():
        reps: list = []
        clusters: dict = {}
        for key, text in members:
            for r in reps:
                if text == r or same(text, r):
                    clusters[r].add(key)
                    break
            else:
                reps.append(text)
                clusters[text] = {key}
        out.extend(clusters.values())
    return sorted(out, key=lambda x: sorted(x))


def _step_texts():
    out = {}
    for g, trajs in TEXTS.items():
        for t, texts in enumerate(trajs):
            for s, obs in enumerate(texts):
                out[(g, f"t{t}", s)] = obs
    # first-occurrence order of the file: group by group, trajectory by trajectory, step order
    return dict(sorted(out.items(), key=lambda kv: (list(TEXTS).index(kv[0][0]), kv[0][1], kv[0][2])))


def test_rtmc_signatures_are_the_sets_of_earlier_actions(log):
    batch = apply_rule(load_rollouts(log), make_rule("rtmc"))
    # Per group: step 0 of every rollout has the empty set; step 1 has {open fridge} (t0, t1)
    # or {light stove} (t2): three nodes per group, six in all (hand-counted).
    want = []
    for g in TEXTS:
        want += [
            {(g, "t0", 0), (g, "t1", 0), (g, "t2", 0)},
            {(g, "t0", 1), (g, "t1", 1)},
            {(g, "t2", 1)},
        ]
    assert _partition(batch) == sorted(want, key=lambda x: sorted(x))


def test_rtmc_coarsening_drops_content_hashes():
    assert coarsen_action("edit a1b2c3d4 main.py") == coarsen_action("edit 9f8e main.py") == "edit main.py"
    assert coarsen_action("view beef cafe") == "view beef cafe"  # hex words without a digit stay


@pytest.mark.parametrize("thresh", [0.8, 0.85, 0.9])
def test_similar_equals_difflib_brute_force(log, thresh):
    exact = load_rollouts(log)
    batch = apply_rule(exact, make_rule("similar", threshold=thresh))
    assert build_graph(batch).num_nodes < build_graph(exact).num_nodes  # the rule merges some
    want = _brute(_step_texts(), lambda a, r: difflib.SequenceMatcher(None, a, r).ratio() >= thresh)
    assert _partition(batch) == want


@pytest.mark.parametrize("thresh", [0.3, 0.5, 0.7])
def test_tfidf_equals_sklearn_brute_force(log, thresh):
    from sklearn.feature_extraction.text import TfidfVectorizer

    exact = load_rollouts(log)
    batch = apply_rule(exact, make_rule("tfidf", threshold=thresh))
    assert build_graph(batch).num_nodes < build_graph(exact).num_nodes  # the rule merges some
    texts = _step_texts()
    want = []
    for g in TEXTS:
        docs = [t for k, t in texts.items() if k[0] == g]  # one row per step, as ProxMO fits
        vec = TfidfVectorizer(max_features=1024).fit(docs)
        X = vec.transform(docs)
        row = {d: i for i, d in reversed(list(enumerate(docs)))}
        cos = (X @ X.T).toarray()
        sub = {k: t for k, t in texts.items() if k[0] == g}
        want += _brute(sub, lambda a, r: cos[row[a], row[r]] >= thresh - 1e-12)
    assert _partition(batch) == sorted(want, key=lambda x: sorted(x))


def test_merging_stays_within_groups_unless_the_scope_is_the_batch(log):
    from crbc_viz.analysis.matching import cross_task_sentence, rule_preview

    exact = load_rollouts(log)
    # garden/t1 repeats kitchen/t0's texts with another session: similar at 0.9.
    rule = make_rule("similar", threshold=0.9)
    for part in _partition(apply_rule(exact, rule)):
        assert len({k[0] for k in part}) == 1
    r = rule_preview(exact, rule)
    assert r["cross_task"] == {"keys": 0, "groups": []} and cross_task_sentence(r) is None
    batch_rule = make_rule("similar", threshold=0.9, scope="batch")
    r = rule_preview(exact, batch_rule)
    assert r["cross_task"]["keys"] == 2  # garden/t1's two anchors take kitchen's keys
    assert r["cross_task"]["groups"] == ["tasks/0/kitchen", "tasks/0/garden"]
    assert "merges anchors of different tasks" in cross_task_sentence(r)
    # Through the batch scope garden/t1 joins kitchen's representative: its key is kitchen's.
    ruled = apply_rule(exact, batch_rule)
    keys = ruled.steps.set_index(["group_id", "traj_id", "step_idx"])["anchor_key"]
    assert keys[("garden", "t1", 0)] == keys[("kitchen", "t0", 0)]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"name": "similar", "threshold": 1.0}, "strictly between 0 and 1"),
        ({"name": "tfidf", "threshold": 0.0}, r"in \(0, 1\]"),
        ({"name": "rtmc", "threshold": 0.5}, "an option of --anchor-rule similar or tfidf"),
        ({"name": "similar", "scope": "world"}, "expected one of group, batch"),
        ({"name": "tfidf", "cluster": "kmeans"}, "expected one of greedy, components"),
    ],
)
def test_bad_similarity_options_are_refused(kwargs, needle):
    with pytest.raises(AnchorRuleError, match=needle):
        make_rule(**kwargs)


def test_components_merge_chains_greedy_does_not(tmp_path):
    # a ~ b and b ~ c but a !~ c: greedy keeps c apart from a's cluster; components join all.
    a, b, c = "aaaaaaaaaa", "aaaaaaaaab", "aaaaaaaabb"
    assert difflib.SequenceMatcher(None, b, a).ratio() >= 0.9
    assert difflib.SequenceMatcher(None, c, b).ratio() >= 0.9
    assert difflib.SequenceMatcher(None, c, a).ratio() < 0.9
    rs = [
        {
            "group_id": "g",
            "traj_id": f"t{i}",
            "step_idx": 0,
            "anchor_obs": o,
            "action": "x",
            "reward": 1.0 * i,
        }
        for i, o in enumerate((a, b, c))
    ]
    p = tmp_path / "chain.jsonl"
    p.write_text("".join(json.dumps({**r, "done": True}) + "\n" for r in rs))
    exact = load_rollouts(str(p))
    assert build_graph(apply_rule(exact, make_rule("similar", threshold=0.9))).num_nodes == 2
    assert (
        build_graph(apply_rule(exact, make_rule("similar", threshold=0.9, cluster="components"))).num_nodes
        == 1
    )


def test_work_limit_refuses_with_one_line(log, monkeypatch):
    monkeypatch.setenv("CRBC_VIZ_MAX_SIMILARITY_WORK", "50")
    with pytest.raises(AnchorRuleError, match="passed the work limit of 50"):
        apply_rule(load_rollouts(log), make_rule("similar", threshold=0.5))


def test_rewriting_then_similarity(tmp_path):
    """drop + similar: the session tags are removed before the texts are compared."""
    a, b = "The fridge is open. session=ab12", "The fridge is open! session=zz99"
    assert difflib.SequenceMatcher(None, b, a).ratio() < 0.94
    assert difflib.SequenceMatcher(None, b[:-13], a[:-13]).ratio() >= 0.94  # without " session=…"
    rs = [
        {
            "group_id": "g",
            "traj_id": f"t{i}",
            "step_idx": 0,
            "anchor_obs": o,
            "action": "x",
            "reward": 1.0 * i,
        }
        for i, o in enumerate((a, b))
    ]
    p = tmp_path / "pair.jsonl"
    p.write_text("".join(json.dumps({**r, "done": True}) + "\n" for r in rs))
    exact = load_rollouts(str(p))
    drop = [r"\s*session=\w+"]
    assert build_graph(apply_rule(exact, make_rule("similar", threshold=0.94))).num_nodes == 2
    assert build_graph(apply_rule(exact, make_rule(drop=drop))).num_nodes == 2
    assert build_graph(apply_rule(exact, make_rule("similar", drop=drop, threshold=0.94))).num_nodes == 1
