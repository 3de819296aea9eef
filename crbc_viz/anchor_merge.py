"""The anchor rules that re-key a loaded batch (`crbc_viz.io.anchor_rules`, README "Anchor
rules"): RTMC's state signatures and the similarity rules (GiGPO's difflib threshold, ProxMO's
TF-IDF cosine). One function, `apply_rule`, turns a batch keyed by the exact rule into the
batch any rule keys: the command line, the trainer adapters and the app all go through it (the
command line and the adapters key the rewriting rules while loading, then call `merge_anchors`;
the result is the same, `tests/io/test_anchor_merge.py`).

Similarity clustering (``greedy`` or ``components``, `crbc_viz.io.anchor_rules`) runs over the
anchor nodes of the batch's graph within each group (scope ``group``) or over the whole batch
(scope ``batch``), in the order of their texts (sorted; GiGPO walks the batch in arrival order,
which a trainer shuffles: sorted, the same rows merge the same way from a file and from an
adapter); each node's text is ``str`` of its logged observation (after the fields / drop
rewriting), as GiGPO's ``str(obs)``. A node whose
step logged no observation (a precomputed ``anchor_key``) is never merged. Every step of a
cluster takes the key of the cluster's representative (its first node). The comparisons are
charged to GiGPO's similarity work limit (`crbc_viz.estimators.gigpo.similarity_budget`):
past it the rule is refused with one line before the work is done.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from .data import RolloutBatch
from .io.anchor_rules import AnchorRule, AnchorRuleError, rekey, using
from .io.anchors import anchor_hash64

__all__ = ["apply_rule", "merge_anchors", "cross_task", "coarsen_action", "rtmc_signatures", "node_clusters"]

#: A content hash in an action's text (a hex run of 4+ characters holding a digit): RTMC's
#: coarsening drops it, so two edits of one file that differ only in their hash merge.
_HASH = re.compile(r"\b(?=[0-9A-Fa-f]*[0-9])[0-9A-Fa-f]{4,}\b")
_SPACE = re.compile(r"\s+")


def coarsen_action(text: str) -> str:
    """An action's text without its content hashes (RTMC's coarsening), spaces collapsed."""
    return _SPACE.sub(" ", _HASH.sub("", text)).strip()


def apply_rule(batch: RolloutBatch, rule: AnchorRule | None) -> RolloutBatch:
    """``batch`` (keyed by the exact rule) keyed by ``rule``: the fields / drop rewriting re-keys
    each step from its logged ``anchor_obs`` (a precomputed key is kept), then the batch rules
    (`merge_anchors`). ``batch`` itself when the rule is exact."""
    if rule is None or rule.exact:
        return batch
    if rule.rewrites and batch.has_step_column("anchor_obs"):
        steps = batch.steps
        with using(rule):
            h, k = rekey(
                steps["anchor_obs"].to_numpy(dtype=object),
                steps["anchor_key"].to_numpy(dtype=object),
                batch.step_anchor_hash,
            )
        rule.check_found()  # a field no anchor has: refused, as the command line refuses it
        batch = _rekeyed(batch, h, k)
    return merge_anchors(batch, rule)


def merge_anchors(batch: RolloutBatch, rule: AnchorRule | None) -> RolloutBatch:
    """``batch`` re-keyed by ``rule``'s batch rule (``rtmc``, ``similar``, ``tfidf``); itself
    for the other rules. Its steps are keyed already by the rule's rewriting.

    Raises:
        AnchorRuleError: a similarity rule past the work limit, or a batch without anchor texts.
    """
    if rule is None or rule.merge is None or batch.num_steps == 0:
        return batch
    if rule.merge == "rtmc":
        h = rtmc_signatures(batch)
        return _rekeyed(batch, h, np.array([f"{x:016x}" for x in h.tolist()], dtype=object))
    from .graph import build_graph

    graph = build_graph(batch)
    rep = node_clusters(graph, rule)
    first = graph.node_first_step[rep]
    keys = batch.steps["anchor_key"].to_numpy(dtype=object)
    return _rekeyed(batch, batch.step_anchor_hash[first][graph.step_node], keys[first][graph.step_node])


def _rekeyed(batch: RolloutBatch, hashes: np.ndarray, keys: np.ndarray) -> RolloutBatch:
    steps = batch.steps.assign(anchor_key=np.asarray(keys, dtype=object))
    return dataclasses.replace(batch, steps=steps, step_anchor_hash=np.asarray(hashes, dtype=np.uint64))


def rtmc_signatures(batch: RolloutBatch) -> np.ndarray:
    """RTMC's state signature of every step ``[S]`` (uint64): the set of the coarsened actions
    (`coarsen_action`) its trajectory took before it — cumulative and order-invariant, so the
    first step of every trajectory has the empty set (ESTIMATORS.md §7.1). The actions are the
    graph's (`crbc_viz.graph.action_ids`: a step that logs none is keyed by its transition)."""
    from .graph import action_ids

    step_action, names = action_ids(batch)
    op_names = [coarsen_action(str(n)) for n in names]
    op_code = {n: i for i, n in enumerate(dict.fromkeys(op_names))}
    ops = np.array([op_code[n] for n in op_names], dtype=np.int64)[step_action] if len(names) else step_action
    by_code = list(op_code)
    cache: dict[frozenset, int] = {}

    def sig(seen: frozenset) -> int:
        got = cache.get(seen)
        if got is None:
            got = cache[seen] = anchor_hash64(["__rtmc_signature__", sorted(by_code[i] for i in seen)])
        return got

    out = np.empty(batch.num_steps, dtype=np.uint64)
    offsets = batch.traj_offsets.tolist()
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        seen: frozenset = frozenset()
        cur = sig(seen)
        for s in range(lo, hi):
            out[s] = cur
            op = int(ops[s])
            if op not in seen:
                seen = seen | {op}
                cur = sig(seen)
    return out


class _Work:
    """Similarity work charged before it is done (GiGPO's limit), refused past it."""

    def __init__(self, rule: AnchorRule):
        from .errors import EstimatorInputError
        from .estimators.gigpo import ENV_SIMILARITY_WORK, similarity_budget

        try:
            self.budget = similarity_budget()
        except EstimatorInputError as exc:
            raise AnchorRuleError(str(exc)) from None
        self.spent, self.rule, self.env, self.where = 0, rule, ENV_SIMILARITY_WORK, ""

    def charge(self, steps: int) -> None:
        self.spent += steps
        if self.spent > self.budget:
            raise AnchorRuleError(
                f"--anchor-rule {self.rule.merge}: comparing anchor texts pairwise passed the work "
                f"limit of {self.budget:,} steps{self.where}; raise --anchor-threshold, cluster "
                f"per group (--anchor-scope group), or set ${self.env} to raise the limit"
            )


def _node_texts(graph, rule: AnchorRule) -> tuple[list[str], np.ndarray]:
    """(text of every node, whether it has a logged observation) ``[N]``."""
    import pandas as pd

    b = graph.batch
    if not b.has_step_column("anchor_obs"):
        raise AnchorRuleError(
            f"--anchor-rule {rule.merge}: the batch holds no anchor observations to compare "
            f"(only precomputed keys)"
        )
    obs = b.steps["anchor_obs"].to_numpy(dtype=object)[graph.node_first_step]
    has = ~pd.isna(obs)
    texts = [str(rule.apply(o) if rule.rewrites else o) if ok else "" for o, ok in zip(obs, has)]
    return texts, np.asarray(has, dtype=bool)


def node_clusters(graph, rule: AnchorRule) -> np.ndarray:
    """The representative node of every node ``[N]`` under similarity rule ``rule`` (a node
    that merges with nothing is its own representative); the clustering is described in the
    module's docstring."""
    texts, has = _node_texts(graph, rule)
    rep = np.arange(graph.num_nodes, dtype=np.int64)
    work = _Work(rule)
    if rule.scope == "batch":
        units = [(np.arange(graph.num_nodes), "")]
    else:
        labels = graph.batch.group_labels()
        units = [
            (
                np.arange(graph.group_node_offsets[g], graph.group_node_offsets[g + 1]),
                f" in group '{labels[g]}'",
            )
            for g in range(graph.num_groups)
        ]
    weights = graph.node_visits
    node_hash = graph.batch.step_anchor_hash[graph.node_first_step]
    for nodes, where in units:
        work.where = where
        # By text (then key), not by arrival: a trainer's shuffled rows merge as the file's do.
        nodes = np.array(sorted(nodes[has[nodes]].tolist(), key=lambda n: (texts[n], int(node_hash[n]))))
        if len(nodes) < 2:
            continue
        sim = _pair_test(rule, [texts[n] for n in nodes], weights[nodes], work)
        local = _greedy(len(nodes), sim) if rule.cluster == "greedy" else _components(len(nodes), sim)
        rep[nodes] = nodes[local]
    return rep


def _greedy(n: int, sim) -> np.ndarray:
    """GiGPO's clustering: item i joins the first cluster whose representative r has
    ``sim(i, r)``, else opens one; the representative of every item ``[n]``."""
    out = np.empty(n, dtype=np.int64)
    reps: list[int] = []
    for i in range(n):
        for r in reps:
            if sim(i, r):
                out[i] = r
                break
        else:
            reps.append(i)
            out[i] = i
    return out


def _components(n: int, sim) -> np.ndarray:
    """Connected components of "``sim(i, j)`` or ``sim(j, i)``"; the representative of every
    item ``[n]`` is its component's first item."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for j in range(n):
        for i in range(j):
            ri, rj = find(i), find(j)
            if ri != rj and (sim(j, i) or sim(i, j)):
                parent[max(ri, rj)] = min(ri, rj)
    return np.array([find(i) for i in range(n)], dtype=np.int64)


def _pair_test(rule: AnchorRule, texts: list[str], weights: np.ndarray, work: _Work):
    """``sim(i, j)``: whether item i is similar to item j under ``rule`` (difflib's ratio of
    (i, j) in that order, GiGPO's ``are_similar(obs, rep)``; or the TF-IDF cosine)."""
    t = float(rule.threshold)
    if rule.merge == "similar":
        from collections import Counter

        from .estimators.gigpo import similar

        counts: dict[int, Counter] = {}

        def count(i: int) -> Counter:
            if i not in counts:
                work.charge(len(texts[i]) + 1)
                counts[i] = Counter(texts[i])
            return counts[i]

        return lambda i, j: similar(texts[i], texts[j], t, count(i), count(j), work)
    from .estimators.proxmo import tfidf_vectors

    vec = tfidf_vectors(texts, np.asarray(weights, dtype=np.float64), 1024)
    if vec is None:  # no word in any text: nothing to compare
        return lambda i, j: False
    work.charge(len(texts) * len(texts))
    cos = (vec @ vec.T).toarray()
    return lambda i, j: bool(cos[i, j] >= t - 1e-12)


def cross_task(exact: RolloutBatch, ruled: RolloutBatch) -> dict:
    """Anchors of different tasks (groups) that ``ruled`` gives one key while their exact keys
    differ: ``{"keys": how many such keys, "groups": the groups' labels (at most 6)}``. Within
    scope ``group`` they stay apart in the graph (a node per group and key); the app and
    ``info`` say so, and warn when the rule's scope is the batch."""
    g = exact.step_group
    e, r = exact.step_anchor_hash, ruled.step_anchor_hash
    if not len(g):
        return {"keys": 0, "groups": []}
    trip = np.unique(np.stack([r, g.astype(np.uint64), e], axis=1), axis=0)
    rk, first = np.unique(trip[:, 0], return_index=True)
    bounds = np.r_[first, len(trip)]
    labels = exact.group_labels()
    bad, groups = 0, []
    for a, b in zip(bounds[:-1], bounds[1:]):
        rows = trip[a:b]
        if len(np.unique(rows[:, 1])) > 1 and len(np.unique(rows[:, 2])) > 1:
            bad += 1
            for gi in np.unique(rows[:, 1]).tolist():
                if labels[int(gi)] not in groups:
                    groups.append(labels[int(gi)])
    return {"keys": int(bad), "groups": groups[:6]}
