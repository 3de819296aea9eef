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

import copy
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .analysis.depth import depth_family  # noqa: F401  (one copy, in analysis; re-exported)
from .estimators.crbc import CRBCParams
from .estimators.crbc import crbc as crbc_fn
from .graph import AnchorGraph
from .io import load_rollouts

__all__ = [
    "Lesson",
    "LESSONS",
    "MARK_RULE",
    "REPO_ROOT",
    "TOY_PATH",
    "SOKOBAN_PATH",
    "SOKOBAN_GROUP",
    "RARE_ROUTE_PATH",
    "TRAP_ANCHOR",
    "TRAP_ACTION",
    "SAFE_ACTION",
    "read_rows",
    "sokoban_rows",
    "rare_route_rows",
    "write_rows",
    "traj_ids",
    "success_bonus",
    "apply_edits",
    "batch_from_rows",
    "depth_family",
    "anchor_visits",
    "teaching_anchor",
    "route_table",
    "pair_label",
    "pair_index",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_PATH = REPO_ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl"
SOKOBAN_PATH = REPO_ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
RARE_ROUTE_PATH = REPO_ROOT / "sample_rollouts" / "toy" / "rare_route.jsonl"
#: The Sokoban teaching group: 6 successes and 2 failures over 18 anchors, 7 of which see ≥ 2
#: actions (the smallest sample group with ≥ 2 of each outcome and a shared branching anchor).
SOKOBAN_GROUP = "sokoban-task-00"

#: The rare-route trap: at ``start`` the agent can ``jump the gap`` (short, but it rarely lands)
#: or ``walk around`` (three steps longer, usually arrives).
TRAP_ANCHOR = "start"
TRAP_ACTION = "jump the gap"
SAFE_ACTION = "walk around"


#: What ▲ marks in lesson 1 (its one definition: the lesson text, the figure and the count say it).
MARK_RULE = "a step of a failed rollout whose closure advantage Q − V is positive"


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    text: str
    try_it: str


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        1,
        "Trajectory-level credit (GRPO)",
        "GRPO scores a whole rollout: A^G = (R − mean R) / std R over the group, and every step "
        "of the rollout gets that same number. A failed rollout is blamed at every step, its "
        f"good moves included: ▲ marks {MARK_RULE}.",
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
        "anchors and edges disappear or thin out.",
    ),
    Lesson(
        3,
        "Visit-local averaging (depth K = 0)",
        "The simplest step credit pools what happened after each visit of an anchor: every "
        "visit carries its realized discounted return G = β^(T−t+1)·R, Q⁰(s,a) averages G over "
        "the visits that took a, and V⁰(s) over all visits. A = Q⁰ − V⁰ only sees the suffixes "
        "that passed through this very anchor.",
        "Flip the outcome of a rollout that passes through the anchor: only its own dots move, "
        "and the credit of the action it took changes sign if the average crosses V⁰.",
    ),
    Lesson(
        4,
        "Bellman backup, one depth at a time",
        "Each backup replaces the realized suffixes by the values of the successor anchors: "
        "Q^(K) = B V^(K−1) and V^(K) = T V^(K−1). Information travels one edge per step "
        "through the shared anchors. The gap to the exact closure (K = ∞, one linear solve) "
        "stays under the Corollary-3 bound 2β^K/(1−β)·‖TV⁰ − V⁰‖∞. It is the bound that "
        "shrinks like β^K; the gap only has to stay under it, and often falls faster.",
        "Move K from 0 to ∞ and watch the colours settle; then flip an outcome or drop a "
        "rollout: the bound and the observed gap are recomputed from scratch.",
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
        "CRBC's step credit is A^S = 1{≥ 2 actions at s}·(Q − V)/max(σ(s), σ_min): anchors "
        "with a single observed action say nothing (the gate), and σ(s) puts every anchor on "
        "the same scale. The policy loss then uses w_G·A^G + w_S·A^S: the trajectory "
        "outcome plus the step-level correction.",
        "Set w_S = 0 to get back GRPO; set w_G = 0 to keep only the step credit; lower σ_min "
        "and watch near-ties get blown up; turn the gate off.",
    ),
)


# ---------------------------------------------------------------- rows in, rows out
def read_rows(path: str | os.PathLike, group_id: str | None = None) -> list[dict]:
    """The JSON rows of a JSONL log (only ``group_id``'s rows if given), in file order."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if group_id is None or row.get("group_id") == group_id:
                    rows.append(row)
    return rows


def sokoban_rows() -> list[dict]:
    """The rows of the Sokoban teaching group (`SOKOBAN_GROUP`)."""
    return read_rows(SOKOBAN_PATH, SOKOBAN_GROUP)


def rare_route_rows(
    n_jump: int = 4, n_lucky: int = 1, n_walk: int = 4, n_walk_success: int = 3
) -> list[dict]:
    """The rare-route trap as rows of one group (ESTIMATORS.md §3a, CRBC's criticism).

    At ``start`` there are two actions:

    - ``jump the gap`` → ``ledge``, then ``leap`` → SUCCESS (lucky, ``n_lucky`` of ``n_jump``
      rollouts) or → FAILURE (the others). Two steps.
    - ``walk around`` → ``corridor 1`` → ``corridor 2`` → ``corridor 3`` → SUCCESS
      (``n_walk_success`` of ``n_walk``); the others ``take the wrong door`` at ``corridor 3``
      → FAILURE. Four steps.

    With the defaults, d(ledge) = 1 < d(corridor 1) = 3, so shortest-path credit prefers the jump,
    while the jump lands 1 time in 4 and the walk arrives 3 times in 4, so the closure's
    Q(start, jump) = β²/4 < Q(start, walk) = 3β⁴/4 and CRBC penalises it.

    Rollouts are ordered jumps first; ``traj_id`` is ``j0…`` / ``w0…`` so a route is visible in
    its name. Reward 1 on the successful last step, else 0; ``success`` on every row.
    """
    if not (1 <= n_jump and 0 <= n_lucky <= n_jump and 1 <= n_walk and 0 <= n_walk_success <= n_walk):
        raise ValueError(
            f"rare_route_rows needs 1 ≤ n_jump, 0 ≤ n_lucky ≤ n_jump, 1 ≤ n_walk, "
            f"0 ≤ n_walk_success ≤ n_walk; got n_jump={n_jump}, n_lucky={n_lucky}, "
            f"n_walk={n_walk}, n_walk_success={n_walk_success}"
        )
    rows: list[dict] = []

    def add(traj: str, path: list[tuple[str, str]], ok: bool) -> None:
        for i, (anchor, action) in enumerate(path):
            last = i == len(path) - 1
            rows.append(
                {
                    "run_id": "teach",
                    "train_step": 0,
                    "group_id": "rare-route",
                    "traj_id": traj,
                    "step_idx": i,
                    "anchor_obs": anchor,
                    "action": action,
                    "reward": 1.0 if (ok and last) else 0.0,
                    "done": last,
                    "success": ok,
                    "env_name": "rare-route trap (crbc_viz.teaching)",
                }
            )

    for j in range(n_jump):
        add(f"j{j}", [(TRAP_ANCHOR, TRAP_ACTION), ("ledge", "leap")], j < n_lucky)
    for w in range(n_walk):
        ok = w < n_walk_success
        add(
            f"w{w}",
            [
                (TRAP_ANCHOR, SAFE_ACTION),
                ("corridor 1", "go on"),
                ("corridor 2", "go on"),
                ("corridor 3", "open the exit" if ok else "take the wrong door"),
            ],
            ok,
        )
    return rows


def write_rows(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Write rows as JSONL (one ``json.dumps(row, sort_keys=True)`` per line)."""
    path = Path(path)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return path


def traj_ids(rows: list[dict]) -> list[str]:
    """Trajectory ids in first-occurrence order."""
    return list(dict.fromkeys(str(r["traj_id"]) for r in rows))


def _last_rows(rows: list[dict]) -> dict[str, dict]:
    last: dict[str, dict] = {}
    for r in rows:
        t = str(r["traj_id"])
        if t not in last or r["step_idx"] >= last[t]["step_idx"]:
            last[t] = r
    return last


def success_bonus(rows: list[dict]) -> float:
    """How much the last step's reward differs between a success and a failure in these rows
    (median last reward of successes − of failures; 1.0 when one outcome is missing)."""
    last = _last_rows(rows).values()
    ok = [float(r.get("reward", 0.0)) for r in last if r.get("success")]
    bad = [float(r.get("reward", 0.0)) for r in last if not r.get("success")]
    if not ok or not bad:
        return 1.0
    return float(np.median(ok) - np.median(bad))


def apply_edits(rows: list[dict], *, flip=(), drop=()) -> list[dict]:
    """A new list of rows with the outcome of the rollouts in ``flip`` reversed and those in
    ``drop`` removed; ``rows`` is not modified.

    Flipping sets ``success`` on every row of the rollout, moves its last reward (and
    ``episode_return`` where logged) by ± `success_bonus`, and marks a new success ``done``.

    Raises:
        ValueError: an id that is not a rollout of ``rows``, or every rollout dropped.
    """
    ids = traj_ids(rows)
    flip, drop = {str(t) for t in flip}, {str(t) for t in drop}
    unknown = sorted((flip | drop) - set(ids))
    if unknown:
        raise ValueError(f"apply_edits: unknown rollout(s) {unknown}; the rows hold {ids}")
    if ids and set(ids) <= drop:
        raise ValueError("apply_edits: dropping every rollout leaves no group")
    bonus = success_bonus(rows)
    out = []
    for r in rows:
        t = str(r["traj_id"])
        if t in drop:
            continue
        r = copy.deepcopy(r)
        if t in flip:
            now = not bool(r.get("success"))
            sign = 1.0 if now else -1.0
            r["success"] = now
            if "episode_return" in r and r["episode_return"] is not None:
                r["episode_return"] = float(r["episode_return"]) + sign * bonus
        out.append(r)
    # The last step carries the outcome's reward; a new success terminates there.
    orig_last = _last_rows(rows)
    new_last = _last_rows(out)
    for t in flip - drop:
        r, o = new_last[t], orig_last[t]
        now = bool(r["success"])
        r["reward"] = float(o.get("reward", 0.0)) + (bonus if now else -bonus)
        if now:
            r["done"] = True
    return out


def batch_from_rows(rows: list[dict], **load_kwargs):
    """Load rows through the ordinary loader, from a temporary JSONL deleted on return."""
    with tempfile.TemporaryDirectory(prefix="crbc-teach-") as d:
        path = write_rows(Path(d) / "rows.jsonl", rows)
        return load_rollouts(path, **load_kwargs)


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
