"""What each Learn lesson shows besides its figures: its tables, anchor and rollout names, and
the numbers its text quotes (`crbc_viz.views.learn` re-exports all of it).

Pure: tables as pandas frames, text as strings; nothing imports streamlit.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pandas as pd

from .. import teaching as T
from ..analysis.depth import anchor_spread
from ..graph import AnchorGraph


# ---------------------------------------------------------------- what each lesson shows
def superscripts(text: str) -> str:
    """``A^G`` → A<sup>G</sup>, ``β^(T−t+1)`` → β<sup>(T−t+1)</sup> (the lesson texts are ours)."""
    return re.sub(r"\^(\([^)]*\)|[A-Za-z0-9∞]+)", r"<sup>\1</sup>", text)


def anchor_name(graph: AnchorGraph, n: int) -> str:
    """The anchor's own text when it is short and one line, else ``s<n>``."""
    text = str(graph.node_anchor_obs[n])
    return text if len(text) <= 14 and "\n" not in text else f"s{n}"


def anchor_text(graph: AnchorGraph, n: int) -> str | None:
    """The anchor's text when it spans several lines (a board worth drawing), else None."""
    text = str(graph.node_anchor_obs[n])
    return text if "\n" in text else None


def good_steps_blamed(graph: AnchorGraph, bellman: np.ndarray) -> int:
    """Steps of failed rollouts whose closure advantage Q − V is positive."""
    failed = ~graph.batch.traj_success[graph.batch.step_traj]
    return int(np.sum(failed & (bellman > 1e-9)))


def rollout_names(graph: AnchorGraph) -> list[str]:
    """The traj_id of each rollout, in rollout order."""
    b = graph.batch
    return b.steps["traj_id"].astype(str).to_numpy()[b.traj_offsets[:-1]].tolist()


def rollout_options(graph: AnchorGraph) -> list[str]:
    """``"<traj_id> (success|failure)"`` per rollout, in rollout order."""
    b = graph.batch
    return [
        f"{t_id} ({'success' if b.traj_success[t] else 'failure'})"
        for t, t_id in enumerate(rollout_names(graph))
    ]


def anchor_counts(graph: AnchorGraph) -> dict[str, int]:
    """Steps, anchors, anchors shared by ≥ 2 rollouts, anchors with ≥ 2 actions."""
    b = graph.batch
    pairs = np.unique(np.stack([graph.step_node, b.step_traj], 1), axis=0)
    shared = int(np.sum(np.bincount(pairs[:, 0], minlength=graph.num_nodes) >= 2))
    return {
        "steps": int(b.num_steps),
        "anchors": int(graph.num_nodes),
        "shared": shared,
        "branching": int(np.sum(graph.node_num_actions >= 2)),
    }


def branching_anchors(graph: AnchorGraph) -> dict[str, str]:
    """{anchor key: label} of the anchors where ≥ 2 actions were observed (all anchors if none)."""
    cand = [n for n in range(graph.num_nodes) if graph.node_num_actions[n] >= 2] or list(
        range(graph.num_nodes)
    )
    return {
        str(graph.node_anchor_key[n]): f"{anchor_name(graph, n)} · {int(graph.node_visits[n])} "
        f"visits, {int(graph.node_num_actions[n])} actions"
        for n in cand
    }


def default_anchor(graph: AnchorGraph, beta: float) -> str:
    """The key of `teaching.teaching_anchor`."""
    return str(graph.node_anchor_key[T.teaching_anchor(graph, beta)])


def node_of_key(graph: AnchorGraph, key: str) -> int:
    return [str(k) for k in graph.node_anchor_key].index(key)


def _pairs_of(graph: AnchorGraph, n: int) -> range:
    return range(int(graph.node_pair_offsets[n]), int(graph.node_pair_offsets[n + 1]))


def pair_values(graph: AnchorGraph, result, n: int) -> tuple[dict, float]:
    """({action: Q(s, a)}, V(s)) of anchor ``n`` under ``result``."""
    q = {str(graph.action_names[graph.pair_action[p]]): float(result.pair_q[p]) for p in _pairs_of(graph, n)}
    return q, float(result.node_value[n])


def visit_local_table(graph: AnchorGraph, vl, n: int) -> pd.DataFrame:
    """Per action of anchor ``n``: visits, Q⁰, A⁰ = Q⁰ − V⁰ and the step credit (``vl`` = the
    visit-local result)."""
    ps = list(_pairs_of(graph, n))
    return pd.DataFrame(
        {
            "action": [str(graph.action_names[graph.pair_action[p]]) for p in ps],
            "visits N(s,a)": graph.pair_count[ps],
            "Q⁰(s,a)": vl.pair_q[ps],
            "A⁰ = Q⁰ − V⁰": vl.pair_q[ps] - vl.node_value[n],
            "step credit Aˢ": vl.pair_credit[ps],
        }
    )


def moved_anchors(fam: dict, k: int | None) -> int:
    """Anchors whose V changed between K − 1 and K (0 for K = 0 and ∞)."""
    if k in (None, 0):
        return 0
    return int(np.sum(np.abs(fam["node_value"][k] - fam["node_value"][k - 1]) > 1e-12))


def depth_table(graph: AnchorGraph, fam: dict, k: int | None, label: str) -> pd.DataFrame:
    """A^(K) next to A^∞ at the branching (anchor, action) pairs, and whether the signs agree."""
    gated = np.flatnonzero(graph.node_num_actions[graph.pair_node] >= 2)
    A_k = fam["pair_adv_inf"] if k is None else fam["pair_adv"][k]
    col = depth_column(label)
    table = pd.DataFrame(
        {
            "anchor · action": [T.pair_label(graph, p) for p in gated],
            col: A_k[gated],
            CLOSURE_COLUMN: fam["pair_adv_inf"][gated],
        }
    )
    table["sign agrees"] = np.sign(table[col].round(12)) == np.sign(table[CLOSURE_COLUMN].round(12))
    return table


_SUP = str.maketrans("0123456789∞", "⁰¹²³⁴⁵⁶⁷⁸⁹∞")
#: Lesson 4's table: the closure's advantage column.
CLOSURE_COLUMN = "A at K = ∞ (closure)"


def depth_column(label: str) -> str:
    """``A⁽³⁾`` for K = 3 (rendered superscript digits); the closure's column at ∞."""
    return CLOSURE_COLUMN if label == "∞" else f"A⁽{label.translate(_SUP)}⁾"


def _trap_pair(graph: AnchorGraph, action: str) -> int | None:
    try:
        return T.pair_index(graph, T.TRAP_ANCHOR, action)
    except KeyError:
        return None


def _fmt(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.3f}"


def rare_route_numbers(graph: AnchorGraph, results: dict, crbc, shortest_path) -> dict:
    """Lesson 5's numbers: ``credits`` {label: (trap credit, safe credit)} (mean step credit of
    each action at the trap anchor, NaN if not taken) for each of ``results`` {label: result};
    the closure's Q of both routes (text) and the shortest-path hops of the ledge and corridor."""
    pairs = [_trap_pair(graph, a) for a in (T.TRAP_ACTION, T.SAFE_ACTION)]

    def mean_credit(res, p):
        return float("nan") if p is None else float(np.mean(res.credit[graph.step_pair == p]))

    def hops(anchor):
        for n in range(graph.num_nodes):
            if str(graph.node_anchor_obs[n]) == anchor:
                return str(int(shortest_path.node_value[n]))
        return "—"

    return {
        "credits": {label: tuple(mean_credit(r, p) for p in pairs) for label, r in results.items()},
        "q": tuple(_fmt(float("nan") if p is None else float(crbc.pair_q[p])) for p in pairs),
        "d_ledge": hops("ledge"),
        "d_corridor": hops("corridor 1"),
    }


def combination_steps(graph: AnchorGraph, res, pick: str | None, w_step: float):
    """(labels, group term, step term) of the steps shown: every step (``pick`` None) or the
    steps of rollout ``pick``. Labels say "step k", not "tk": the toy rollouts are named t1 … t4."""
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()
    names = rollout_names(graph)
    if pick is None:
        steps = np.arange(b.num_steps)
    else:
        t = names.index(pick)
        steps = np.arange(b.traj_offsets[t], b.traj_offsets[t + 1])
    acts = b.steps["action"].fillna("").astype(str).to_numpy()
    pos = b.step_pos
    labels = [f"{ids[s]} step {int(pos[s])} · {acts[s][:12]}" for s in steps]
    step_term = w_step * res.credit[steps]
    return labels, res.advantage[steps] - step_term, step_term


def default_combination_rollout(graph: AnchorGraph) -> str | None:
    """None (all steps) for a small group, else the first failed rollout (or the first)."""
    b = graph.batch
    if b.num_steps <= 40:
        return None
    failed = [t for t in range(b.num_trajectories) if not b.traj_success[t]]
    return rollout_names(graph)[failed[0] if failed else 0]


def combination_table(graph: AnchorGraph, res, ungated) -> pd.DataFrame:
    """At every (anchor, action) pair: the anchor's number of actions, μ(a|s), A = Q − V, σ(s)
    (`analysis.depth.anchor_spread`), the step credit Aˢ and, from ``ungated`` (the same
    estimator with the gate at one action), Aˢ without the gate: where the two differ the gate
    silenced the anchor. Single-action anchors are listed too: they are what the gate is for,
    though their Q − V is 0 already."""
    sp = anchor_spread(graph, res)
    ps = np.arange(graph.pair_node.shape[0])
    return pd.DataFrame(
        {
            "anchor · action": [T.pair_label(graph, p) for p in ps],
            "actions at s": graph.node_num_actions[graph.pair_node],
            "μ(a|s)": sp["mu"][ps],
            "A = Q − V": sp["adv"][ps],
            "σ(s)": sp["sigma"][graph.pair_node[ps]],
            GATE_OFF_COLUMN: ungated.pair_credit[ps],
            "Aˢ": res.pair_credit[ps],
        }
    )


#: Lesson 6's table: the step credit the gate would leave (the gate at one action).
GATE_OFF_COLUMN = "Aˢ without the gate"


def prediction_key(pred, key: str) -> str:
    """A prediction's widget key: ``key`` plus a digest of its options, so that new data
    (other options) asks afresh instead of keeping a choice that is no longer offered."""
    return f"{key}_{zlib.crc32('|'.join(pred.options).encode()):08x}"
