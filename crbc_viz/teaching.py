"""Teaching material for the Learn page: the lesson texts, the rare-route trap as data, edits
applied to an in-memory copy of a group's rows, and the small computations the lessons plot.

Pure: no streamlit. Files on disk are only read (`read_rows`); an edited group is loaded from a
temporary JSONL that is deleted before `batch_from_rows` returns.

>>> rows = rare_route_rows()
>>> b = batch_from_rows(rows)
>>> b.num_trajectories, int(b.traj_success.sum())
(8, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import teaching_rows
from .analysis.depth import depth_family  # noqa: F401  (one copy, in analysis; re-exported)
from .estimators.crbc import CRBCParams
from .estimators.crbc import crbc as crbc_fn
from .graph import FAILURE, SUCCESS, AnchorGraph
from .ops.advantage import group_advantage
from .teaching_rows import (  # noqa: F401  (the rows half of the lessons; re-exported)
    ADD_RULE,
    RARE_ROUTE_PATH,
    REPO_ROOT,
    SAFE_ACTION,
    SOKOBAN_GROUP,
    SOKOBAN_PATH,
    TOY_PATH,
    TRAP_ACTION,
    TRAP_ANCHOR,
    _last_rows,
    added_rollout,
    apply_edits,
    batch_from_rows,
    format_add,
    parse_add,
    rare_route_rows,
    read_rows,
    sokoban_rows,
    success_bonus,
    traj_ids,
    write_rows,
)

__all__ = [
    *teaching_rows.__all__,  # the rows half, re-exported above
    "Lesson",
    "LESSONS",
    "MARK_RULE",
    "depth_family",
    "anchor_visits",
    "teaching_anchor",
    "route_table",
    "pair_label",
    "pair_index",
    "backup_terms",
    "backup_value",
    "backup_once",
    "backup_latex",
    "node_short_name",
    "Prediction",
    "lesson_prediction",
    "QUIZ",
    "lesson_code",
    "GROUP_COLUMNS",
    "group_rows",
    "credit_by_pair",
    "biggest_change",
]

#: What ▲ marks in lesson 1 (its one definition: the lesson text, the figure and the count say it).
#: Said without Q and V, which lesson 1 has not introduced yet.
MARK_RULE = (
    "a step of a failed rollout that the closure (lesson 4) credits anyway: from that state, the "
    "action it took leads to SUCCESS more often than the state's average"
)


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    #: Markdown; math between ``$…$`` (rendered by Streamlit, never caret notation on screen).
    text: str
    try_it: str


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        1,
        "Trajectory-level credit (GRPO)",
        "GRPO scores a whole rollout: $A^G = (R - \\bar R)\\,/\\,\\sigma_R$ over the group (R = 1 for a "
        "success, 0 for a failure), and every step of the rollout gets that same number. A failed "
        f"rollout is blamed at every step, its good moves included: ▲ marks {MARK_RULE}.",
        "Flip the outcome of one rollout, or drop one: every cell of the changed rows moves "
        "together, and so does the rest of the group through the mean and std.",
    ),
    Lesson(
        2,
        "Anchors: one state, many rollouts",
        "Rollouts of the same task revisit the same environment states. Merging them at these "
        "shared states (anchors) turns the group into one graph whose edges are the observed "
        "actions, with two absorbing boundaries: SUCCESS (value 1) and FAILURE (value 0).",
        "Highlight a rollout to see where its path joins the others; drop a rollout and watch "
        "anchors and edges disappear or thin out, or add one through an anchor and watch its "
        "edge to SUCCESS or FAILURE appear or thicken.",
    ),
    Lesson(
        3,
        "Visit-local averaging (depth K = 0)",
        "The simplest step credit pools what happened after each visit of an anchor: every "
        "visit carries its realized discounted return $G = \\beta^{T-t+1} R$, $Q^0(s,a)$ averages "
        "G over the visits that took a, and $V^0(s)$ over all visits. $A^0 = Q^0 - V^0$ only sees "
        "the suffixes that passed through this very anchor.",
        "Flip the outcome of a rollout that passes through the anchor: only its own dots move, "
        "and the credit of the action it took changes sign if the average crosses $V^0$.",
    ),
    Lesson(
        4,
        "Bellman backup, one depth at a time",
        "Paths merge where they intersect: at K = 0 each visit is valued by its own suffix and "
        "the visits are averaged at their anchor (lesson 3). Each backup then replaces the "
        "realized suffixes by the values of the successor anchors, "
        "$V^{(K)}(s) = \\sum_a \\mu(a|s)\\,\\beta \\sum_{x} P(x|s,a)\\,V^{(K-1)}(x)$ with "
        "V(SUCCESS) = 1 and V(FAILURE) = 0, so information travels one edge per step through "
        "the shared anchors until the values settle at the exact closure (K = ∞, one linear "
        "solve). How far K is from the closure has a guaranteed ceiling, the bound of "
        "Corollary 3 in the CRBC paper: "
        "$\\|A^{\\infty} - A^{(K)}\\|_\\infty \\le \\frac{2\\beta^K}{1-\\beta}\\,\\|TV^0 - V^0\\|_\\infty$, "
        "where $\\|TV^0 - V^0\\|_\\infty$ is how much the first backup moved any anchor. "
        "It is the bound that shrinks like $\\beta^K$; the gap only has to stay under it, and "
        "often falls faster.",
        "Step K with ◀ K / K ▶ (or Play) and watch the node colours settle; then flip an "
        "outcome, drop a rollout or add one through an anchor: the bound and the observed gap are "
        "recomputed from scratch.",
    ),
    Lesson(
        5,
        "The rare-route trap",
        "Shortest-path credit (GraphGPO) asks only how close an action can get to SUCCESS: one "
        "lucky short run makes ‘jump the gap’ look best, however often that jump failed. The "
        "closure weighs every route by how often it was taken, so the jump's Q is its real "
        "success rate discounted by its length — and the long but reliable walk wins.",
        "Raise the number of lucky jumps until the closure changes its mind, or set the "
        "successful walks to 0; shortest-path credit keeps rewarding the jump throughout.",
    ),
    Lesson(
        6,
        "Gate, normalisation and the group advantage",
        "CRBC's step credit is "
        "$A^S = \\mathbb{1}\\{\\ge 2 \\text{ actions at } s\\}\\cdot(Q - V)\\,/\\,\\max(\\sigma(s), \\sigma_{\\min})$: "
        "anchors with a single observed action say nothing (the gate), and σ(s) puts every "
        "anchor on the same scale. The policy loss then uses $w_G A^G + w_S A^S$: the "
        "trajectory outcome plus the step-level correction.",
        "Set $w_S = 0$ to get back GRPO; set $w_G = 0$ to keep only the step credit; lower "
        "$\\sigma_{\\min}$ and watch near-ties get blown up; raise the gate to 3 actions and watch "
        "it silence the two-action anchors (their Aˢ drops to 0).",
    ),
)


# ---------------------------------------------------------------- what the lessons compute
def pair_label(graph: AnchorGraph, p: int, names: bool = True) -> str:
    """``"s3 · push up"`` (or the anchor text itself when it is short) for pair ``p``."""
    n = int(graph.pair_node[p])
    lo = int(graph.group_node_offsets[graph.node_group[n]])
    anchor = str(graph.node_anchor_obs[n])
    node = anchor if (names and len(anchor) <= 14 and "\n" not in anchor) else f"s{n - lo}"
    return f"{node} · {graph.action_names[graph.pair_action[p]]}"


def pair_index(graph: AnchorGraph, anchor: str, action: str) -> int:
    """The pair of (anchor text, action) in ``graph``.

    Raises:
        KeyError: no such pair (naming the pairs there are).
    """
    for p in range(graph.pair_node.shape[0]):
        if (
            str(graph.node_anchor_obs[graph.pair_node[p]]) == anchor
            and str(graph.action_names[graph.pair_action[p]]) == action
        ):
            return p
    raise KeyError(f"no pair ({anchor!r}, {action!r}) in the graph")


def anchor_visits(graph: AnchorGraph, node: int, beta: float = CRBCParams.beta) -> dict:
    """Every visit of anchor ``node`` with its realized return G = β^(T−t+1)·R (1-indexed t).

    Returns:
        ``{"traj": [..], "t": [..], "action": [..], "G": array, "success": array,
        "q0": {action: mean G}, "v0": mean G, "mu": {action: share of visits}}``.
    """
    b = graph.batch
    steps = np.flatnonzero(graph.step_node == node)
    ids = b.steps["traj_id"].astype(str).to_numpy()
    T = b.traj_len[b.step_traj[steps]]
    pos1 = b.step_pos[steps] + 1
    ok = b.traj_success[b.step_traj[steps]]
    G = beta ** (T - pos1 + 1) * ok.astype(np.float64)
    acts = [str(graph.action_names[a]) for a in graph.step_action[steps]]
    q0 = {a: float(np.mean([g for g, x in zip(G, acts) if x == a])) for a in dict.fromkeys(acts)}
    mu = {a: acts.count(a) / len(acts) for a in q0}
    return {
        "traj": ids[steps].tolist(),
        "t": b.step_pos[steps].tolist(),
        "action": acts,
        "G": G,
        "success": ok,
        "q0": q0,
        "v0": float(np.mean(G)) if G.size else math.nan,
        "mu": mu,
    }


def teaching_anchor(graph: AnchorGraph, beta: float = CRBCParams.beta) -> int:
    """An anchor worth looking at: shared by ≥ 2 rollouts with ≥ 2 actions, preferring one where
    visit-local averaging (K = 0) and the closure disagree in sign on some action, then the most
    visited. Falls back to the most visited anchor."""
    b = graph.batch
    pairs = np.unique(np.stack([graph.step_node, b.step_traj], axis=1), axis=0)
    n_traj = np.bincount(pairs[:, 0], minlength=graph.num_nodes)
    cand = np.flatnonzero((n_traj >= 2) & (graph.node_num_actions >= 2))
    if not cand.size:
        return int(np.argmax(graph.node_visits))
    a0 = crbc_fn(graph, beta=beta, depth=0)
    ai = crbc_fn(graph, beta=beta)
    A0 = a0.pair_q - a0.node_value[graph.pair_node]
    Ai = ai.pair_q - ai.node_value[graph.pair_node]
    flip = np.zeros(graph.num_nodes, bool)
    np.logical_or.at(flip, graph.pair_node, (np.sign(A0) * np.sign(Ai)) < 0)
    key = [(not flip[n], -int(graph.node_visits[n]), int(n)) for n in cand]
    return int(cand[min(range(len(cand)), key=key.__getitem__)])


def route_table(rows: list[dict], anchor: str) -> list[dict]:
    """Per first action taken at ``anchor``: how many rollouts took it, how many succeeded, and
    the length of the shortest successful continuation (from the rows, no graph)."""
    by_traj: dict[str, list[dict]] = {}
    for r in rows:
        by_traj.setdefault(str(r["traj_id"]), []).append(r)
    out: dict[str, dict] = {}
    for steps in by_traj.values():
        steps = sorted(steps, key=lambda r: r["step_idx"])
        for i, r in enumerate(steps):
            if r["anchor_obs"] == anchor:
                a = str(r["action"])
                d = out.setdefault(
                    a, {"action": a, "taken": 0, "succeeded": 0, "shortest success (steps)": None}
                )
                d["taken"] += 1
                if r["success"]:
                    d["succeeded"] += 1
                    n = len(steps) - i
                    cur = d["shortest success (steps)"]
                    d["shortest success (steps)"] = n if cur is None else min(cur, n)
                break
    for d in out.values():
        d["success rate"] = d["succeeded"] / d["taken"]
    return list(out.values())


# ---------------------------------------------------------------- lesson 4: one backup, in numbers
def _successor_value(v: np.ndarray, x: int) -> float:
    if x == SUCCESS:
        return 1.0
    if x == FAILURE:
        return 0.0
    return float(v[x])


def backup_terms(graph: AnchorGraph, v_prev: np.ndarray, node: int, beta: float) -> list[dict]:
    """The terms of one Bellman backup at ``node``, from the counts of the graph:
    ``[{"action", "mu", "next": [(successor, P, V_prev(successor)), …]}]`` with
    μ(a|s) = N(s,a)/N(s), P(x|s,a) = N(s,a,x)/N(s,a), V(SUCCESS) = 1, V(FAILURE) = 0
    (``successor`` is a node index, `SUCCESS` or `FAILURE`)."""
    out = []
    visits = float(graph.node_visits[node])
    for p in range(int(graph.node_pair_offsets[node]), int(graph.node_pair_offsets[node + 1])):
        n_sa = float(graph.pair_count[p])
        nxt = [
            (
                int(graph.edge_next[e]),
                float(graph.edge_count[e]) / n_sa,
                _successor_value(v_prev, int(graph.edge_next[e])),
            )
            for e in np.flatnonzero(graph.edge_pair == p)
        ]
        out.append(
            {"action": str(graph.action_names[graph.pair_action[p]]), "mu": n_sa / visits, "next": nxt}
        )
    return out


def backup_value(terms: list[dict], beta: float) -> float:
    """V(s) = Σ_a μ(a|s) · β Σ_x P(x|s,a) V(x) of `backup_terms`."""
    return float(sum(t["mu"] * beta * sum(p * v for _, p, v in t["next"]) for t in terms))


def backup_once(graph: AnchorGraph, v_prev: np.ndarray, beta: float) -> np.ndarray:
    """One Bellman backup of every anchor: V_{k+1}(s) = Σ_a μ(a|s) Σ_x P(x|s,a)·β·V_k(x)."""
    return np.array(
        [backup_value(backup_terms(graph, v_prev, n, beta), beta) for n in range(graph.num_nodes)]
    )


def node_short_name(graph: AnchorGraph, x: int) -> str:
    """``SUCCESS`` / ``FAILURE`` for a boundary; an anchor's text when short, else ``s<k>``."""
    if x == SUCCESS:
        return "SUCCESS"
    if x == FAILURE:
        return "FAILURE"
    anchor = str(graph.node_anchor_obs[x])
    lo = int(graph.group_node_offsets[graph.node_group[x]])
    return anchor if (len(anchor) <= 14 and "\n" not in anchor) else f"s{x - lo}"


def _tex_name(name: str) -> str:
    return "\\text{" + name.replace("\\", "").replace("{", "").replace("}", "").replace("_", "\\_") + "}"


def backup_latex(graph: AnchorGraph, v_prev: np.ndarray, node: int, beta: float, k: int | None) -> str:
    """The backup at ``node`` as LaTeX with this group's numbers (2–3 decimals):
    V^(K)(s) = Σ_a μ(a|s)·β·Σ_x P(x|s,a)·V^(K−1)(x) = … = value. ``k`` None: the closure,
    where one more backup gives V back (V^∞ = T V^∞)."""
    terms = backup_terms(graph, v_prev, node, beta)
    s = _tex_name(node_short_name(graph, node))
    lhs, prev = ("V^{\\infty}", "V^{\\infty}") if k is None else (f"V^{{({k})}}", f"V^{{({k - 1})}}")
    parts = []
    for t in terms:
        inner = " + ".join(
            f"{p:.2f}\\cdot \\underset{{{_tex_name(node_short_name(graph, x))}}}{{{v:.3f}}}"
            for x, p, v in t["next"]
        )
        parts.append(
            f"\\underbrace{{{t['mu']:.2f}}}_{{\\mu({_tex_name(t['action'])})}}\\cdot {beta:g}\\cdot({inner})"
        )
    value = backup_value(terms, beta)
    # One line per action, so that the equation fits a projector's width.
    body = " \\\\\n&\\quad + ".join(parts)
    return (
        "\\begin{aligned}\n"
        f"{lhs}({s}) &= \\sum_a \\mu(a|s)\\,\\beta\\sum_x P(x|s,a)\\,{prev}(x) \\\\\n"
        f"&= {body} \\\\\n"
        f"&= {value:.3f}\n"
        "\\end{aligned}"
    )


# ---------------------------------------------------------------- predict, then reveal
@dataclass(frozen=True)
class Prediction:
    """One question a lesson asks before it shows the answer; ``why`` (markdown) is said after
    the choice, right or wrong."""

    question: str
    options: tuple[str, ...]
    answer: str
    why: str


def _adv_at(result, graph: AnchorGraph, node: int) -> dict[str, float]:
    ps = range(int(graph.node_pair_offsets[node]), int(graph.node_pair_offsets[node + 1]))
    return {
        str(graph.action_names[graph.pair_action[p]]): float(result.pair_q[p] - result.node_value[node])
        for p in ps
    }


def _predict_grpo(graph: AnchorGraph) -> Prediction:
    b = graph.batch
    failed = [t for t in range(b.num_trajectories) if not b.traj_success[t]] or [0]
    t = failed[0]
    s_lo, s_hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
    name = str(b.steps["traj_id"].iloc[s_lo])
    same = "every step the same"
    steps = [f"step {i}" for i in range(min(s_hi - s_lo, 4))]
    a_g = float(group_advantage(graph)[t])
    return Prediction(
        f"Rollout {name} {'succeeded' if b.traj_success[t] else 'failed'}. Which of its steps "
        "does GRPO blame (or praise) the most?",
        (*steps, same),
        same,
        f"GRPO copies one number to every step of {name}: $A^G = {a_g:+.2f}$. It cannot tell a "
        "good move from the mistake that lost the rollout.",
    )


def _predict_anchors(graph: AnchorGraph) -> Prediction:
    b = graph.batch
    steps, anchors = int(b.num_steps), int(graph.num_nodes)
    shared = np.unique(np.stack([graph.step_node, b.step_traj], axis=1), axis=0)
    n_shared = int(np.sum(np.bincount(shared[:, 0], minlength=graph.num_nodes) >= 2))
    opts = sorted({steps, anchors, int(b.num_trajectories), max(1, anchors - 1), anchors + 2})
    return Prediction(
        f"This group has {steps} steps in {b.num_trajectories} rollouts. How many anchors "
        "(distinct states) will its graph have?",
        tuple(str(o) for o in opts),
        str(anchors),
        f"{steps} steps visit only {anchors} distinct states; {n_shared} of them are shared by "
        "≥ 2 rollouts — there the paths merge.",
    )


def _predict_best(graph: AnchorGraph, node: int, result, how: str, other=None) -> Prediction:
    adv = _adv_at(result, graph, node)
    best = max(adv, key=adv.get)
    name = node_short_name(graph, node)
    listed = ", ".join(f"‘{a}’ {v:+.3f}" for a, v in adv.items())
    why = f"Q − V at {name}: {listed}."
    if other is not None:
        o = _adv_at(other, graph, node)
        o_best = max(o, key=o.get)
        why += (
            f" Visit-local averaging preferred ‘{o_best}’ too: here the suffixes already agree "
            "with the backed-up values."
            if o_best == best
            else f" Visit-local averaging preferred ‘{o_best}’: backing values up through the "
            "shared anchors changed the verdict."
        )
    return Prediction(
        f"At anchor {name}, which action gets the most credit under {how}?",
        tuple(adv),
        best,
        why,
    )


def _predict_trap(credits: dict) -> Prediction:
    """Does the closure praise or blame the jump? (``credits``' last entry is the closure's.)"""
    listed = "; ".join(f"{k}: {v[0]:+.2f}" for k, v in credits.items() if math.isfinite(v[0]))
    closure = list(credits.values())[-1][0] if credits else math.nan
    if not math.isfinite(closure) or abs(closure) <= 1e-9:
        answer = "neither"
    else:
        answer = "praises it" if closure > 0 else "blames it"
    return Prediction(
        f"Does the CRBC closure praise or blame ‘{TRAP_ACTION}’ at ‘{TRAP_ANCHOR}’?",
        ("praises it", "blames it", "neither"),
        answer,
        f"Credit of ‘{TRAP_ACTION}’ — {listed or 'no rollout takes it'}. The closure values "
        "the jump by how often it actually landed, discounted by its length, against the walk "
        "valued the same way; shortest-path credit only asks how short the way to SUCCESS can be.",
    )


def lesson_prediction(
    n: int,
    graph: AnchorGraph,
    *,
    beta: float = CRBCParams.beta,
    node: int | None = None,
    credits: dict | None = None,
) -> Prediction:
    """Lesson ``n``'s question on this graph (``node``: lessons 3 and 4's anchor, by default
    `teaching_anchor`; ``credits``: lesson 5's {estimator: (trap credit, safe credit)})."""
    if n == 1:
        return _predict_grpo(graph)
    if n == 2:
        return _predict_anchors(graph)
    if n in (3, 4):
        node = teaching_anchor(graph, beta) if node is None else node
        vl = crbc_fn(graph, beta=beta, depth=0)
        if n == 3:
            return _predict_best(graph, node, vl, "visit-local averaging (K = 0)")
        return _predict_best(graph, node, crbc_fn(graph, beta=beta), "the CRBC closure (K = ∞)", vl)
    if n == 5:
        return _predict_trap(credits or {})
    return Prediction(
        "Set $w_S = 0$. Whose advantage does the policy loss use then?",
        ("visit-local averaging's", "the CRBC closure's", "GRPO's"),
        "GRPO's",
        "With $w_S = 0$ only $w_G A^G$ is left: the trajectory-level GRPO advantage, the same "
        "number at every step of a rollout.",
    )


#: The short quiz that closes the set: (question, options, answer, why).
QUIZ: tuple[Prediction, ...] = (
    Prediction(
        "Which estimator gives every step of a rollout the same credit?",
        ("visit-local averaging", "GRPO", "CRBC"),
        "GRPO",
        "GRPO's $A^G$ is one number per rollout (lesson 1).",
    ),
    Prediction(
        "Visit-local averaging values an action at an anchor by…",
        (
            "the values of the successor anchors",
            "the shortest way to SUCCESS",
            "the suffixes of the visits that took it there",
        ),
        "the suffixes of the visits that took it there",
        "$Q^0(s,a)$ is the mean realized return of those visits only (lesson 3).",
    ),
    Prediction(
        "Why does the closure not fall for the rare-route trap?",
        (
            "it ignores short routes",
            "it weighs every route by how often it was taken",
            "it uses a smaller β",
        ),
        "it weighs every route by how often it was taken",
        "Q(start, jump) is the jump's real success rate, discounted by its length (lesson 5).",
    ),
    Prediction(
        "An anchor where only one action was ever taken gets step credit…",
        ("the same as its rollout's GRPO advantage", "1", "0 (the gate)"),
        "0 (the gate)",
        "With one action Q = V there, and the gate sets $A^S = 0$ (lesson 6).",
    ),
)


# ---------------------------------------------------------------- code that equals the picture
_HEAD = (
    "from crbc_viz import build_graph, score\n"
    "from crbc_viz.teaching import {names}\n"
    "rows = apply_edits({source}, flip={flip}, drop={drop}{add})\n"
    "g = build_graph(batch_from_rows(rows))\n"
)
_BODY = {
    1: 'r = score(g, "grpo")\n'
    "for t in range(g.batch.num_trajectories):\n"
    "    s = g.batch.traj_offsets[t]\n"
    '    print(g.batch.steps["traj_id"].iloc[s], f"{{r.credit[s]:+.2f}}")\n',
    2: 'print("steps", g.batch.num_steps, "anchors", g.num_nodes)\n'
    'print("with >= 2 actions", int((g.node_num_actions >= 2).sum()))\n',
    3: 'r = score(g, "visit_local", beta={beta})\n'
    "n = {node}  # anchor {name}\n"
    "for p in range(g.node_pair_offsets[n], g.node_pair_offsets[n + 1]):\n"
    "    q = r.pair_q[p]\n"
    '    print(g.action_names[g.pair_action[p]], f"{{q:.3f}}", f"{{q - r.node_value[n]:+.3f}}")\n',
    4: 'r = score(g, "crbc", beta={beta}, depth={depth})\n'
    "for p in range(len(g.pair_node)):\n"
    "    n = g.pair_node[p]\n"
    "    if g.node_num_actions[n] >= 2:\n"
    '        print(pair_label(g, p), f"{{r.pair_q[p] - r.node_value[n]:+.3f}}")\n',
    5: 'for name in ("shortest_path", "visit_local", "crbc"):\n'
    '    r = score(g, name{beta5})\n'
    "    c = [r.credit[g.step_pair == pair_index(g, TRAP_ANCHOR, a)].mean() for a in (TRAP_ACTION, SAFE_ACTION)]\n"
    '    print(name, *(f"{{x:+.2f}}" for x in c))\n',
    6: 'r = score(g, "crbc", {beta6}w_group={w_group}, w_step={w_step}, sigma_min={sigma_min}, min_actions={gate})\n'
    "for p in range(len(g.pair_node)):\n"
    '    print(pair_label(g, p), f"{{r.pair_credit[p]:+.3f}}")\n',
}


def lesson_code(
    n: int,
    dataset: str,
    *,
    flip=(),
    drop=(),
    add=(),
    rr: tuple = (),
    beta: float = CRBCParams.beta,
    node: int = 0,
    node_name: str = "",
    k: int | None = None,
    params: dict | None = None,
) -> str:
    """A short block (crbc_viz only) that prints the numbers lesson ``n`` shows for ``dataset``
    (``toy``, ``sokoban``, ``rare_route`` with sizes ``rr``, or ``group`` with ``rr`` = (file
    name, group index): a group of a loaded log) with these edits and settings; ``k``: lesson 4's
    backups (None: the closure, K = ∞)."""
    source = {
        "toy": ("read_rows(TOY_PATH)", "read_rows, TOY_PATH"),
        "sokoban": ("sokoban_rows()", "sokoban_rows"),
        "rare_route": (f"rare_route_rows{tuple(rr)!r}", "rare_route_rows"),
        # A loaded group: ``rr`` = (file name as shown, group index).
        "group": (f"group_rows(load_rollouts({rr[0]!r}), {rr[-1]})" if rr else "", "group_rows"),
    }[dataset]
    extra = {4: ", pair_label", 6: ", pair_label", 5: ", pair_index, TRAP_ANCHOR, TRAP_ACTION, SAFE_ACTION"}
    names = f"apply_edits, batch_from_rows, {source[1]}{extra.get(n, '')}"
    adds = f", add={[(str(a), int(b), bool(c)) for a, b, c in add]}" if add else ""
    head = _HEAD.format(names=names, source=source[0], flip=sorted(flip), drop=sorted(drop), add=adds)
    if dataset == "group":
        head = head.replace("import build_graph, score", "import build_graph, load_rollouts, score")
    p = dict(params or {})
    body = _BODY[n].format(
        beta=f"{beta:g}",
        # β where it is not the default (lessons 5 and 6 leave it out then)
        beta5=""
        if beta == CRBCParams.beta
        else f', **({{"beta": {beta:g}}} if name != "shortest_path" else {{}})',
        beta6="" if beta == CRBCParams.beta else f"beta={beta:g}, ",
        node=int(node),
        name=node_name,
        depth='float("inf")' if k is None else int(k),
        w_group=f"{p.get('w_group', 1.0):g}",
        w_step=f"{p.get('w_step', 5.0):g}",
        sigma_min=f"{p.get('sigma_min', 0.1):g}",
        gate=int(p.get("min_actions", 2)),
    )
    return head + body


# ---------------------------------------------------------------- teach with a loaded group
#: The columns of a group's rows that the lessons use (the rest of a trainer's log is left out).
GROUP_COLUMNS = (
    "run_id",
    "train_step",
    "group_id",
    "traj_id",
    "step_idx",
    "anchor_obs",
    "action",
    "reward",
    "done",
    "success",
    "episode_return",
)


def _plain(v):
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if hasattr(v, "item"):
        return _plain(v.item())
    return str(v)


def group_rows(batch, group: int) -> list[dict]:
    """Group ``group`` of a loaded batch as teaching rows (`GROUP_COLUMNS`, in step order), so
    that the lessons, their edits and their code blocks run on a real training log's group."""
    steps = batch.steps.iloc[np.flatnonzero(batch.step_group == group)]
    cols = [c for c in GROUP_COLUMNS if c in steps.columns]
    rows = []
    for rec in steps[cols].to_dict("records"):
        row = {k: _plain(v) for k, v in rec.items()}
        if row.get("episode_return") is None:
            row.pop("episode_return", None)
        row["step_idx"] = int(row["step_idx"])
        row["success"] = bool(row["success"])
        row["done"] = bool(row.get("done"))
        row["anchor_obs"] = "" if row.get("anchor_obs") is None else str(row["anchor_obs"])
        row["action"] = "" if row.get("action") is None else str(row["action"])
        row["traj_id"] = str(row["traj_id"])
        rows.append(row)
    return rows


# ---------------------------------------------------------------- what an edit changed most
def credit_by_pair(graph: AnchorGraph, result) -> dict[tuple[str, str], float]:
    """{(anchor text, action): mean step credit over the steps that took it} — keyed by the
    log's own names, so that two graphs of the same group (before / after an edit) line up."""
    sums: dict[tuple[str, str], list[float]] = {}
    for p in range(graph.pair_node.shape[0]):
        steps = np.flatnonzero(graph.step_pair == p)
        key = (str(graph.node_anchor_obs[graph.pair_node[p]]), str(graph.action_names[graph.pair_action[p]]))
        sums[key] = [float(np.mean(result.credit[steps]))] if steps.size else [0.0]
    return {k: v[0] for k, v in sums.items()}


def biggest_change(before: dict, after: dict) -> tuple[tuple[str, str], float, float] | None:
    """The (anchor, action) whose credit moved most between two `credit_by_pair` maps (pairs
    present in both), with its credit before and after; None when nothing moved (> 1e-9)."""
    common = [k for k in after if k in before]
    if not common:
        return None
    k = max(common, key=lambda k: abs(after[k] - before[k]))
    if abs(after[k] - before[k]) <= 1e-9:
        return None
    return k, before[k], after[k]
