"""Matching diagnostics: how well a batch's steps merged into anchors, per group and per file.

Every graph estimator is only as good as the merge. Per group: steps, steps at shared anchors
(an anchor another rollout of the group also visits), singleton anchors (visited once: GiGPO's
step groups of one, whose step advantage is 0), anchors with one distinct action (Q = V there),
steps whose action was inferred (`crbc_viz.io.actions`: the log names none), truncated rollouts,
successes and failures; and, where the data explains why the group's step credit is degenerate,
the reason in one sentence (`degenerate_reason`). Per file: the sums, the number of degenerate
groups by reason, and the importer's padding-copy counts when it reports them.

Pure functions of an `AnchorGraph` (no streamlit, no printing): ``crbc-viz info`` and the app's
Data and Graph pages show what they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import AnchorGraph
from ..io.actions import missing_actions

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["REASONS", "group_matching", "matching_summary", "degenerate_reason", "reason_sentence"]

#: Why a group's step credit is degenerate, in the order they are looked for (the first that
#: holds is the group's reason).
REASONS = ("no_success", "no_shared_anchor", "one_action_everywhere", "no_failure")

#: Per-group count columns of `group_matching`.
_COUNTS = (
    "steps",
    "shared_steps",
    "anchors",
    "singleton_anchors",
    "one_action_anchors",
    "actions_inferred",
    "rollouts",
    "successes",
    "truncated",
)


def _counts(graph: AnchorGraph) -> dict[str, np.ndarray]:
    """The per-group count arrays ``[G]`` of `_COUNTS`."""
    b = graph.batch
    G = b.num_groups
    step_group = b.step_group
    shared = graph.shared_step_mask()
    visits = graph.node_visits
    return {
        "steps": np.bincount(step_group, minlength=G),
        "shared_steps": np.bincount(step_group[shared], minlength=G),
        "anchors": np.diff(graph.group_node_offsets),
        "singleton_anchors": np.bincount(graph.node_group[visits == 1], minlength=G),
        "one_action_anchors": np.bincount(graph.node_group[graph.node_num_actions == 1], minlength=G),
        "actions_inferred": np.bincount(step_group[missing_actions(b)], minlength=G),
        "rollouts": np.diff(b.group_traj_offsets),
        "successes": np.bincount(b.traj_group[b.traj_success], minlength=G),
        "truncated": np.bincount(b.traj_group[b.traj_truncated], minlength=G),
    }


def _reason_codes(c: dict) -> np.ndarray:
    """Per group, the index into `REASONS` of the first reason that holds, -1 where none
    does (``c``: count arrays, or scalars, with the keys of `_COUNTS`)."""
    tests = (
        np.asarray(c["successes"]) == 0,
        np.asarray(c["shared_steps"]) == 0,
        np.asarray(c["one_action_anchors"]) == np.asarray(c["anchors"]),
        np.asarray(c["successes"]) == np.asarray(c["rollouts"]),
    )
    out = np.full(np.shape(tests[0]), -1, np.int64)
    for k in range(len(tests) - 1, -1, -1):  # the first that holds wins
        out = np.where(tests[k], k, out)
    return out


def degenerate_reason(c: dict) -> str | None:
    """The first of `REASONS` that holds for one group's counts (a mapping with the keys of
    `_COUNTS`), or None: the group's step credit can tell actions apart."""
    k = int(_reason_codes(c))
    return None if k < 0 else REASONS[k]


def reason_sentence(reason: str | None, c: dict) -> str | None:
    """One sentence saying why a group's credit is degenerate (None when it is not)."""
    n = int(c["rollouts"])
    if reason == "no_success":
        return (
            f"None of the {n} rollouts succeeded: every anchor's value is 0, so every step's "
            f"credit is 0 whatever the graph."
        )
    if reason == "no_shared_anchor":
        return (
            f"No anchor is visited by two of the {n} rollouts: nothing merges (every step group "
            f"is of one), so there is nothing to compare a step with and its credit is 0."
        )
    if reason == "one_action_everywhere":
        inferred = int(c["actions_inferred"])
        why = "" if not inferred else f" ({inferred} step(s) log no action and are keyed by their transition)"
        return (
            f"Every anchor of this group has one action{why}: Q = V at every anchor, so every "
            f"step's credit is 0."
        )
    if reason == "no_failure":
        return (
            f"All {n} rollouts succeeded: no failure tells actions apart, so the credit only "
            f"reflects path length (the discount)."
        )
    return None


def group_matching(graph: AnchorGraph) -> pd.DataFrame:
    """One row per group: the counts of `_COUNTS`, ``reason`` (one of `REASONS` or None) and
    ``sentence`` (`reason_sentence`)."""
    import pandas as pd

    counts = _counts(graph)
    df = pd.DataFrame({k: v.astype(np.int64) for k, v in counts.items()})
    reasons, sentences = [], []
    for row in df.to_dict(orient="records"):
        r = degenerate_reason(row)
        reasons.append(r)
        sentences.append(reason_sentence(r, row))
    df.insert(0, "group", graph.batch.group_labels())
    df["reason"] = pd.Series(reasons, dtype=object)  # None where the credit is not degenerate
    df["sentence"] = pd.Series(sentences, dtype=object)
    return df


def matching_summary(graph: AnchorGraph, import_counts: dict | None = None, listed: int = 20) -> dict:
    """The per-file matching diagnostics (plain Python types, JSON-ready): the sums of
    `_COUNTS`, ``degenerate_groups`` (how many groups have each reason), the first ``listed``
    degenerate groups with their reason, and the importer's per-file counts (``import_counts``,
    e.g. ``copies_dropped`` / ``copies_suspected``; absent keys: not reported)."""
    counts = _counts(graph)
    out: dict = {k: int(v.sum()) for k, v in counts.items()}
    codes = _reason_codes(counts)
    hist = np.bincount(codes[codes >= 0], minlength=len(REASONS))
    out["degenerate_groups"] = {r: int(n) for r, n in zip(REASONS, hist)}
    labels = graph.batch.group_labels()
    out["degenerate_examples"] = [
        {"group": labels[g], "reason": REASONS[codes[g]]}
        for g in np.flatnonzero(codes >= 0)[:listed].tolist()
    ]
    for k, v in (import_counts or {}).items():
        out[k] = int(v)
    return out


def _rule_side(graph: AnchorGraph) -> dict:
    """The matching counts one anchor rule gives (`rule_comparison`)."""
    m = matching_summary(graph, listed=0)
    S, A = m["steps"], m["anchors"]
    return {
        "anchors": A,
        "shared_steps": m["shared_steps"],
        "shared_step_fraction": m["shared_steps"] / S if S else 0.0,
        "singleton_anchors": m["singleton_anchors"],
        "singleton_rate": m["singleton_anchors"] / A if A else 0.0,
        "degenerate_groups": m["degenerate_groups"],
    }


def rule_comparison(exact: AnchorGraph, ruled: AnchorGraph, estimator: str = "crbc") -> dict:
    """Before (``exact``: the graph under the exact anchor rule) and after (``ruled``: the same
    steps under another rule, `crbc_viz.io.anchor_rules`): the matching counts of each, how many
    anchors merged (exact anchors minus the rule's), and the step whose ``estimator`` credit
    changes most (largest |Δ credit|, named by group, trajectory and step; None when no step
    changes). JSON-ready."""
    from ..api import score

    b0, b1 = exact.batch, ruled.batch
    if b0.num_steps != b1.num_steps or not np.array_equal(b0.step_traj, b1.step_traj):
        raise ValueError("rule_comparison: the two graphs hold different steps")
    before, after = _rule_side(exact), _rule_side(ruled)
    c0 = np.asarray(score(exact, estimator, backend="numpy").credit, dtype=np.float64)
    c1 = np.asarray(score(ruled, estimator, backend="numpy").credit, dtype=np.float64)
    delta = c1 - c0
    out = {
        "estimator": estimator,
        "exact": before,
        "rule": after,
        "anchors_merged": before["anchors"] - after["anchors"],
        "steps_changed": int(np.count_nonzero(np.abs(delta) > 1e-12)),
        "largest_change": None,
    }
    if delta.size and np.abs(delta).max() > 1e-12:
        s = int(np.argmax(np.abs(delta)))
        t = int(b0.step_traj[s])
        labels = b0.group_labels()
        out["largest_change"] = {
            "group": labels[int(b0.traj_group[t])],
            "traj_id": str(b0.trajectories["traj_id"].iat[t]),
            "step_idx": int(s - b0.traj_offsets[t]),
            "credit_exact": float(c0[s]),
            "credit_rule": float(c1[s]),
            "delta": float(delta[s]),
        }
    return out


def rule_report(exact: AnchorGraph, ruled: AnchorGraph, rule) -> dict:
    """What ``info`` and the app's anchor panel show of an anchor rule (one function for both):
    `rule_comparison` of the two graphs plus the rule's ``name``, its ``scope`` and
    ``cross_task`` (`crbc_viz.anchor_merge.cross_task`: anchors of different groups the rule
    gives one key). JSON-ready."""
    from ..anchor_merge import cross_task

    out = {"name": rule.describe(), **rule_comparison(exact, ruled)}
    out["scope"] = rule.scope if rule.needs_text else "group"
    out["cross_task"] = cross_task(exact.batch, ruled.batch)
    return out


def rule_preview(batch, rule) -> dict:
    """`rule_report` of ``rule`` on ``batch`` (keyed by the exact rule): the batch is re-keyed
    by `crbc_viz.anchor_merge.apply_rule`, as the command line and the adapters key it."""
    from ..anchor_merge import apply_rule
    from ..graph import build_graph

    return rule_report(build_graph(batch), build_graph(apply_rule(batch, rule)), rule)


def cross_task_sentence(report: dict) -> str | None:
    """The warning (scope ``batch``) or note (scope ``group``) about anchors of different tasks
    that a rule gives one key; None when there are none."""
    c = report.get("cross_task") or {}
    if not c.get("keys"):
        return None
    names = ", ".join(c["groups"]) + (" …" if len(c["groups"]) >= 6 else "")
    if report.get("scope") == "batch":
        return (
            f"this rule merges anchors of different tasks: {c['keys']} key(s) shared by groups "
            f"{names} (--anchor-scope batch)"
        )
    return (
        f"this rule gives anchors of different tasks one key ({c['keys']} key(s), groups {names}); "
        f"they stay apart: merging stays within each group"
    )
