"""The graph's layout and summary (`crbc_viz.views.layout`) and what the page draws from them:
time-limit edges, hover colours, the value legend's direction, self-loops. No browser here
(tests/e2e/test_graph_geometry.py measures the drawing in Chromium)."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.synthetic import random_mdp_batch
from crbc_viz.views.colors import VALUE_COLORSCALE, value_color
from crbc_viz.views.graph_view import graph_drawing, graph_html
from crbc_viz.views.layout import (
    MIN_GAP,
    OPEN_STEP,
    crossings,
    group_depths,
    layered_positions,
    layout_box,
    order_layers,
    start_anchors,
    summarise,
)
from crbc_viz.views.trajectories import anchor_panel_frame, failed_frame

REPO = Path(__file__).resolve().parents[2]
SOKOBAN = REPO / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
TEXTWORLD = REPO / "sample_rollouts" / "textworld" / "textworld_cooking.jsonl.gz"


def dataset(page: str, which: int) -> list[dict]:
    """The nodes (0) / edges (1) JSON embedded in the page's vis.DataSet calls."""
    return json.loads(re.findall(r"new vis\.DataSet\((\[.*?\])\);\n", page, flags=re.S)[which])


@pytest.fixture(scope="module")
def textworld():
    return build_graph(load_rollouts(TEXTWORLD).select_groups([9]))  # task-09: 104 anchors


@pytest.fixture(scope="module")
def big():
    """A random-MDP group of 1,939 anchors (none reaches the goal; 26 run out of steps)."""
    return build_graph(random_mdp_batch(num_groups=1, rollouts=48, max_steps=200, num_states=4000, seed=1))


def _successors(graph) -> tuple[dict, dict]:
    """Distinct successors / predecessors per anchor, read off the step arrays (self-loops out)."""
    succ: dict = {}
    pred: dict = {}
    for s, x in zip(graph.step_node.tolist(), graph.step_next.tolist()):
        if s != x:
            succ.setdefault(s, set()).add(x)
            if x >= 0:
                pred.setdefault(x, set()).add(s)
    return succ, pred


# ---------------------------------------------------------------- crossings and order
def test_crossings_count_proper_crossings_only():
    x = {"a": (0, 0), "b": (1, 1), "c": (0, 1), "d": (1, 0), "e": (2, 5)}
    assert crossings(x, [("a", "b"), ("c", "d")]) == 1  # an X
    assert crossings(x, [("a", "b"), ("a", "d")]) == 0  # a shared end is not a crossing
    assert crossings(x, [("a", "d"), ("c", "b")]) == 0  # parallel
    assert crossings(x, [("a", "b"), ("c", "d"), ("d", "c"), ("e", "e")]) == 1  # repeats, loops
    assert crossings(x, [("a", "b"), ("c", "zz")]) == 0  # an unplaced end is ignored


def test_order_layers_finds_the_fewest_crossings_of_small_graphs():
    """Against brute force: every order of two four-anchor columns between a start and the two
    pinned boundaries, on 30 random graphs given in shuffled order. The heuristic may miss the
    minimum (the problem is NP-hard), but by one crossing at most and rarely."""
    missed = []
    for seed in range(30):
        rng = random.Random(seed)
        cols = [["a"], [f"b{i}" for i in range(4)], [f"c{i}" for i in range(4)], ["S", "F"]]
        edges = [("a", b) for b in cols[1]]
        edges += [(b, c) for b in cols[1] for c in cols[2] if rng.random() < 0.35]
        edges += [(c, rng.choice("SF")) for c in cols[2]]
        items = cols[1] + cols[2]
        rng.shuffle(items)
        layer = {"a": 0, **{it: 1 if it[0] == "b" else 2 for it in items}, "S": 3, "F": 3}
        got = order_layers(layer, edges, pinned=3)
        assert got[0] == ["a"] and got[3] == ["S", "F"] and sorted(got[1]) == cols[1]
        best = min(
            crossings(
                {it: (c, r - (len(col) - 1) / 2) for c, col in enumerate(order) for r, it in enumerate(col)},
                edges,
            )
            for order in (
                [["a"], list(p1), list(p2), ["S", "F"]]
                for p1 in itertools.permutations(cols[1])
                for p2 in itertools.permutations(cols[2])
            )
        )
        mine = crossings(
            {it: (c, r - (len(col) - 1) / 2) for c, col in enumerate(got) for r, it in enumerate(col)}, edges
        )
        if mine != best:
            missed.append((seed, mine, best))
    assert all(mine - best <= 1 for _, mine, best in missed) and len(missed) <= 2, missed


def test_textworld_order_crosses_fewer_edges_than_igraph_alone(textworld):
    """The kept order is igraph's Sugiyama order or better; on this group, strictly better."""
    import igraph

    g = textworld
    depth = group_depths(g, 0)
    succ, _ = _successors(g)
    name = {-1: "SUCCESS", -2: "FAILURE"}
    edges = [(s, name.get(x, x)) for s, xs in succ.items() for x in xs]
    L = max(depth.values()) + 1
    layer = {**depth, "SUCCESS": L, "FAILURE": L}

    def count(columns):
        return crossings(
            {it: (c, r - (len(col) - 1) / 2) for c, col in enumerate(columns) for r, it in enumerate(col)},
            edges,
        )

    items = list(layer)
    idx = {it: i for i, it in enumerate(items)}
    ig = igraph.Graph(n=len(items), edges=sorted({(idx[u], idx[v]) for u, v in edges}), directed=True)
    xs = ig.layout_sugiyama(layers=[layer[it] for it in items]).coords
    alone = [sorted((it for it in items if layer[it] == c), key=lambda it: xs[idx[it]][0]) for c in range(L)]
    by_id = [[it for it in items if layer[it] == c] for c in range(L)]
    ours = order_layers(layer, edges, pinned=L)
    assert count(ours) < count(alone[:L] + [["SUCCESS", "FAILURE"]])
    assert count(ours) < count(by_id[:L] + [["SUCCESS", "FAILURE"]])


# ---------------------------------------------------------------- placement
def _min_distance(pos: dict) -> float:
    xy = np.array(list(pos.values()), dtype=float)
    d = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    return float(d.min())


def test_positions_fill_the_box_and_keep_their_distance():
    w, h = layout_box(620)
    # A long chain (60 columns of one anchor) wraps into rows; a column of 40 splits.
    chain = {i: i for i in range(60)}
    edges = [(i, i + 1) for i in range(59)] + [(59, "SUCCESS"), (30, "FAILURE")]
    pos = layered_positions(chain, edges, width=w, height=h)
    xy = np.array(list(pos.values()))
    assert np.ptp(xy[:, 0]) <= w + 1e-6 and np.ptp(xy[:, 1]) <= h + 1e-6
    assert np.ptp(xy[:, 0]) >= 0.95 * w and np.ptp(xy[:, 1]) >= 0.5 * h  # wrapped: uses the height
    assert _min_distance(pos) >= min(MIN_GAP.values())
    fan = {"root": 0, **{f"n{i}": 1 for i in range(40)}}
    edges = [("root", f"n{i}") for i in range(40)] + [(f"n{i}", "FAILURE") for i in range(40)]
    pos = layered_positions(fan, edges, width=w, height=h)
    xs = {round(pos[f"n{i}"][0], 3) for i in range(40)}
    assert len(xs) >= 2  # sub-columns
    assert _min_distance(pos) >= min(MIN_GAP.values())
    assert pos["SUCCESS"][1] < pos["FAILURE"][1] and pos["SUCCESS"][0] == pos["FAILURE"][0] == max(
        x for x, _ in pos.values()
    )


# ---------------------------------------------------------------- the summary
def test_small_groups_are_drawn_whole(textworld):
    sok = build_graph(load_rollouts(SOKOBAN).select_groups([4]))
    for g, n in ((sok, 34), (textworld, 104)):
        s = summarise(g, 0, max_nodes=120)
        assert len(s.anchors) == s.total == n and not s.clusters and not s.chains and not s.summarised


def test_summary_accounts_for_every_anchor(big):
    g = big
    s = summarise(g, 0, max_nodes=120)
    ids = set(range(g.num_nodes))
    drawn = set(s.anchors)
    clustered = [n for c in s.clusters for n in c.members]
    chained = [n for c in s.chains for n in c.interior]
    # a partition: each anchor drawn, in one cluster, or inside one chain
    assert len(clustered) == len(set(clustered)) and len(chained) == len(set(chained))
    assert drawn | set(clustered) | set(chained) == ids
    assert not (drawn & set(clustered)) and not (drawn & set(chained)) and not (set(clustered) & set(chained))
    assert s.summarised and len(drawn) <= 60 + len(start_anchors(g, 0))
    assert start_anchors(g, 0) <= drawn
    assert int(np.argmax(g.node_visits)) in drawn
    depth = group_depths(g, 0)
    for c in s.clusters:
        assert all(c.lo <= depth[n] <= c.hi for n in c.members)
        v = g.node_visits[list(c.members)]
        assert (np.diff(v) <= 0).all()  # most visited first
    succ, pred = _successors(g)
    name = {-1: "SUCCESS", -2: "FAILURE"}
    for ch in s.chains:
        walk = [ch.src, *ch.interior]
        for a, b in zip(walk, walk[1:]):
            assert succ[a] >= {b}
        assert {name.get(x, x) for x in succ[ch.interior[-1]]} == {ch.dst}
        for n in ch.interior:
            assert len(pred[n]) == 1 and len(succ[n]) == 1  # one way in, one way out
        assert ch.src in drawn and (ch.dst in drawn or ch.dst in ("SUCCESS", "FAILURE"))


def test_a_cluster_click_draws_its_most_visited_and_a_rollout_opens_its_path(big):
    g = big
    s = summarise(g, 0, max_nodes=120)
    c = max(s.clusters, key=lambda c: len(c.members))
    opened = summarise(g, 0, max_nodes=120, opened={c.lo: 1})
    assert set(opened.anchors) - set(s.anchors) == set(c.members[:OPEN_STEP])
    after = next(x for x in opened.clusters if x.lo == c.lo)
    # the rest stays in the cluster, unless a newly drawn anchor ends a chain through it
    chained = {n for ch in opened.chains for n in ch.interior}
    assert set(after.members) == set(c.members[OPEN_STEP:]) - chained
    b = g.batch
    longest = int(np.argmax(np.diff(b.traj_offsets)))
    path = set(g.step_node[b.traj_offsets[longest] : b.traj_offsets[longest + 1]].tolist())
    kept = summarise(g, 0, max_nodes=120, keep=path)
    assert path <= set(kept.anchors)
    with pytest.raises(ValueError, match="max_nodes"):
        summarise(g, 0, max_nodes=0)


def test_summary_page_draws_clusters_and_says_what_it_left_out(big):
    d = graph_drawing(big, None)
    nodes = {n["id"]: n for n in dataset(d.html, 0)}
    for c in d.summary.clusters:
        assert nodes[c.id]["label"] == f"+{len(c.members):,}"  # one line: it fits in its column
    assert len([k for k in nodes if isinstance(k, int)]) == len(d.summary.anchors)
    folded = sum(len(c.members) for c in d.summary.clusters)
    assert f"Summary of {big.num_nodes:,} anchors" in d.note and f"{folded:,} anchors in" in d.note
    assert f"{len(d.summary.chains)} linear chains" in d.note
    assert 'kind: id.indexOf("cluster:") === 0 ? "cluster"' in d.html


# ---------------------------------------------------------------- what the edges say
def _time_limit_log(path: Path) -> Path:
    """r0 fails after b at s1 (done=true); r1 takes b at s1 and runs out of steps (done=false);
    r2 takes c at s1 and succeeds."""
    rows = []
    for traj, last, done, ok in (
        ("r0", "b", True, False),
        ("r1", "b", False, False),
        ("r2", "c", True, True),
    ):
        for i, (obs, act) in enumerate((("s0", "a"), ("s1", last))):
            rows.append(
                {
                    "run_id": "tl",
                    "train_step": 0,
                    "group_id": "g",
                    "traj_id": traj,
                    "step_idx": i,
                    "anchor_obs": obs,
                    "action": act,
                    "reward": float(ok and i == 1),
                    "done": done and i == 1,
                    "success": ok,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_rollout_cut_by_the_time_limit_ends_in_a_dashed_time_limit_edge(tmp_path):
    g = build_graph(load_rollouts(_time_limit_log(tmp_path / "tl.jsonl")))
    s1 = next(n for n in range(g.num_nodes) if g.node_anchor_obs[n] == "s1")
    page = graph_html(g, score(g, "crbc", backend="numpy"))
    to_fail = [e for e in dataset(page, 1) if e["from"] == s1 and e["to"] == "FAILURE"]
    solid = [e for e in to_fail if not e["dashes"]]
    dashed = [e for e in to_fail if e["dashes"]]
    assert len(solid) == 1 and len(dashed) == 1
    assert dashed[0]["label"] == "time limit" and "ran out of steps" in dashed[0]["title"]
    assert "N(s,a,x) = 1 of N(s,a) = 2" in solid[0]["title"]  # only r0's real failure
    b_row = anchor_panel_frame(g, {}, s1).set_index("action").loc["b"]
    assert b_row["leads to"] == "FAILURE, ran out of steps"
    outcomes = failed_frame(g, [0, 1], None, "crbc")["outcome"].tolist()
    assert outcomes == ["failure", "ran out of steps"]


def test_edges_keep_their_credit_colour_on_hover_and_selection(textworld):
    page = graph_html(textworld, score(textworld, "crbc", backend="numpy"))
    edges = dataset(page, 1)
    assert edges and all(
        e["color"]["hover"] == e["color"]["highlight"] == e["color"]["color"]
        and e["color"]["inherit"] is False
        for e in edges
    )


def test_the_shortest_path_legend_runs_the_way_its_bar_does():
    g = build_graph(load_rollouts(REPO / "sample_rollouts" / "toy" / "toy_group.jsonl"))
    res = score(g, "shortest_path", backend="numpy")
    page = graph_html(g, res, estimator="shortest_path")
    legend = re.search(r"<div id='crbc-legend'>.*?</div>", page, flags=re.S).group(0)
    left = float(re.search(r"<span class='lo'>([^<]*)</span>", legend).group(1))
    right = float(re.search(r"<span class='hi'>([^<]*)</span>", legend).group(1))
    bar = re.search(
        r"class='bar value' style='background:linear-gradient\(to right, (#[0-9a-f]{6}) 0%.*?(#[0-9a-f]{6}) 100%\)",
        legend,
    )
    d = np.asarray(res.node_value, dtype=float)
    near, far = float(np.nanmin(d[np.isfinite(d)])), float(np.nanmax(d[np.isfinite(d)]))
    assert (left, right) == (near, far) and "(near → far)" in legend  # left to right: near → far
    nodes = {n["id"]: n for n in dataset(page, 0)}
    nearest = int(np.nanargmin(np.where(np.isfinite(d), d, np.inf)))
    assert nodes[nearest]["color"]["background"] == bar.group(1)  # the bar starts in its colour
    assert bar.group(1) == VALUE_COLORSCALE[-1][1] and bar.group(2) == VALUE_COLORSCALE[0][1]
    assert value_color(1.0, 0.0, 1.0) == VALUE_COLORSCALE[-1][1]


def test_self_loops_at_one_anchor_nest_with_distinct_sizes():
    g = build_graph(load_rollouts(SOKOBAN).select_groups([4]))
    edges = dataset(graph_html(g, None, show_action_labels=True), 1)
    by_node: dict = {}
    for e in edges:
        if e["from"] == e["to"]:
            by_node.setdefault(e["from"], []).append(e["selfReference"]["size"])
    several = [sizes for sizes in by_node.values() if len(sizes) > 1]
    assert several and all(len(set(s)) == len(s) for s in several)


def test_the_chosen_anchor_is_drawn_with_its_neighbours(big):
    g = big
    s = summarise(g, 0, max_nodes=120)
    hidden = max(s.clusters, key=lambda c: len(c.members)).members[-1]  # a least visited anchor
    d = graph_drawing(g, None, selected_node=hidden)
    succ, pred = _successors(g)
    near = {hidden} | {x for x in succ.get(hidden, ()) if x >= 0} | pred.get(hidden, set())
    assert near <= set(d.summary.anchors)
    chosen = next(n for n in dataset(d.html, 0) if n["id"] == hidden)
    assert chosen["borderWidth"] == 7
