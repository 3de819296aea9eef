"""Views are tested without rendering: the structure of the HTML / figures they return."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz.views.colors import CREDIT_COLORSCALE, MISSING_COLOR, credit_color, credit_limit, value_color
from crbc_viz.views.compare import (
    SVG_MAX_POINTS,
    agreement_by_group,
    depth_error_figure,
    depth_lines_figure,
    scatter_figure,
    sign_agreement,
    spearman,
    top_disagreements,
)
from crbc_viz.views.graph_values import select_nodes
from crbc_viz.views.graph_view import graph_html
from crbc_viz.views.layout import layered_layout
from crbc_viz.views.trajectories import step_alternatives, step_frame, trajectory_table

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "sample_rollouts" / "toy" / "toy_group.jsonl"
PAYLOAD_IMG = "<img src=x onerror=window.__xss=1>"
PAYLOAD_SCRIPT = "</script><script>window.__xss=2</script>"


@pytest.fixture(scope="module")
def toy():
    g = build_graph(load_rollouts(TOY))
    return g, {n: score(g, n, backend="numpy") for n in ("crbc", "visit_local", "shortest_path")}


def write_xss_log(path: Path) -> Path:
    """A two-rollout group whose anchors and actions carry HTML / script payloads."""
    rows = []
    for traj, ok, acts in (("r0", True, [PAYLOAD_IMG, "go"]), ("r1", False, [PAYLOAD_SCRIPT, "stop"])):
        for i, act in enumerate(acts):
            rows.append(
                {
                    "run_id": "xss",
                    "train_step": 0,
                    "group_id": "g<b>1</b>",
                    "traj_id": traj,
                    "step_idx": i,
                    "reward": float(ok and i == 1),
                    "done": i == 1,
                    "success": ok,
                    "action": act,
                    "anchor_obs": PAYLOAD_SCRIPT if i == 0 else PAYLOAD_IMG + traj,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self._in = [], False

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._in = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = False

    def handle_data(self, data):
        if self._in:
            self.scripts[-1] += data


def dataset(page: str, which: int) -> list[dict]:
    """The nodes (0) / edges (1) JSON embedded in the page's vis.DataSet calls."""
    found = re.findall(r"new vis\.DataSet\((\[.*?\])\);\n", page, flags=re.S)
    return json.loads(found[which])


# ---------------------------------------------------------------- colours
def test_credit_scale_is_diverging_and_symmetric():
    assert credit_color(0.0, 1.0) == CREDIT_COLORSCALE[2][1]
    assert credit_color(-1.0, 1.0) == CREDIT_COLORSCALE[0][1]
    assert credit_color(5.0, 1.0) == CREDIT_COLORSCALE[-1][1]  # clipped
    assert credit_color(float("nan"), 1.0) == MISSING_COLOR
    assert credit_limit(np.array([0.2, -0.7, np.nan])) == pytest.approx(0.7)
    assert credit_limit(np.zeros(3)) == 1.0
    assert value_color(None, 0, 1) == MISSING_COLOR
    assert value_color(0.0, 0, 1) != value_color(1.0, 0, 1)


# ---------------------------------------------------------------- layout
def test_layered_layout_depths_and_boundaries(toy):
    g, _ = toy
    pos = layered_layout(g, 0, x_gap=100, y_gap=50)
    key = {str(a): n for n, a in enumerate(g.node_anchor_obs)}
    assert pos[key["s0"]][0] == 0
    assert pos[key["s1"]][0] == 100 and pos[key["s4"]][0] == 100  # one hop from s0
    assert pos[key["s2"]][0] == 200 and pos[key["s3"]][0] == 200
    assert pos["SUCCESS"][0] == pos["FAILURE"][0] == 300  # right of the deepest layer
    assert pos["SUCCESS"][1] < pos["FAILURE"][1]
    ys = [pos[key["s1"]][1], pos[key["s4"]][1]]
    assert len(set(ys)) == 2  # spread within the layer


def test_select_nodes_keeps_top_visits_and_path(toy):
    g, _ = toy
    assert len(select_nodes(g, 0, max_nodes=100)) == g.num_nodes
    top2 = select_nodes(g, 0, max_nodes=2)
    assert set(top2) == set(np.argsort(-g.node_visits, kind="stable")[:2])
    rare = int(np.argmin(g.node_visits))
    assert rare in set(select_nodes(g, 0, max_nodes=2, keep=[rare]))


# ---------------------------------------------------------------- graph HTML
def test_graph_html_structure(toy):
    g, res = toy
    page = graph_html(g, res["crbc"])
    nodes, edges = dataset(page, 0), dataset(page, 1)
    ids = [n["id"] for n in nodes]
    assert len(nodes) == g.num_nodes + 2 and "SUCCESS" in ids and "FAILURE" in ids
    boundary = {n["id"]: n for n in nodes if n["id"] in ("SUCCESS", "FAILURE")}
    assert all(n["shape"] == "box" for n in boundary.values())
    assert boundary["SUCCESS"]["color"]["background"] != boundary["FAILURE"]["color"]["background"]
    assert all("x" in n and "y" in n for n in nodes)
    assert len(edges) == g.edge_pair.shape[0]
    # node size grows with visits, edge width with counts
    anchors = [n for n in nodes if isinstance(n["id"], int)]
    by_visits = sorted(anchors, key=lambda n: g.node_visits[n["id"]])
    assert by_visits[0]["size"] < by_visits[-1]["size"]
    assert max(e["width"] for e in edges) > min(e["width"] for e in edges)
    # options: physics off, curved edges (a straight edge can run through other nodes)
    assert '"physics": {"enabled": false}' in page and '"type": "curvedCW"' in page
    # a click posts the node / edge to the app; edges have "src->dst" ids
    assert 'crbc: "pick"' in page and all("->" in e["id"] for e in edges)
    # no network access needed: vis-network inlined, CDN tags removed
    assert "cdn.jsdelivr" not in page and "cdnjs.cloudflare" not in page
    assert "vis.Network" in page
    # one tooltip per node carries V; edges carry credit
    s0 = next(n for n in anchors if g.node_anchor_obs[n["id"]] == "s0")
    assert "V(s) = 0.4636" in s0["title"]
    assert all("credit" in e["title"] for e in edges)


def test_graph_legend_says_what_colour_means(toy):
    g, res = toy
    sp = graph_html(g, res["shortest_path"], estimator="shortest_path")
    assert "d(s): hops to SUCCESS" in sp and "(near → far)" in sp and "d = 0" in sp
    cr = graph_html(g, res["crbc"], estimator="crbc", params_text="beta=0.9", selected_node=1)
    assert "(beta=0.9)" in cr and "V = 1" not in cr
    chosen = next(n for n in dataset(cr, 0) if n["id"] == 1)
    assert chosen["borderWidth"] == 7


def test_neighbourhood_and_worst_steps(toy):
    from crbc_viz.views.layout import neighbourhood
    from crbc_viz.views.trajectories import worst_steps

    g, res = toy
    nodes = {str(g.node_anchor_obs[n]): n for n in range(g.num_nodes)}
    near = {str(g.node_anchor_obs[n]) for n in neighbourhood(g, [nodes["s3"]])}
    assert near == {"s1", "s3"}  # s3's only predecessor is s1; it ends at FAILURE
    ws = worst_steps(g, {"crbc": res["crbc"]}, 1, "crbc", k=2)  # τ2 = s0 -a→ s1 -d→ s3 -e→ ✗
    assert ws["action"].tolist() == ["d", "e"] and ws.iloc[0]["anchor"] == "s1"
    assert worst_steps(g, {"crbc": "cannot run"}, 1, "crbc").empty


def test_graph_html_highlight_path(toy):
    g, res = toy
    page = graph_html(g, res["crbc"], highlight_traj=3)
    edges = dataset(page, 1)
    labelled = [e for e in edges if e["label"].startswith("t")]
    assert sorted(sum((e["label"][1:].split(",") for e in labelled), [])) == sorted(
        str(i) for i in range(int(g.batch.traj_len[3]))
    )
    faded = [e for e in edges if e["color"]["opacity"] < 1]
    assert faded and len(faded) + len(labelled) == len(edges)


def test_graph_html_without_result_and_filtered(toy):
    g, _ = toy
    keep = select_nodes(g, 0, max_nodes=2)
    page = graph_html(g, None, nodes=keep)
    nodes = dataset(page, 0)
    assert len(nodes) == 2 + 2
    assert all(n["color"]["background"] == MISSING_COLOR for n in nodes if isinstance(n["id"], int))


def test_graph_html_escapes_payloads(tmp_path):
    g = build_graph(load_rollouts(write_xss_log(tmp_path / "xss.jsonl")))
    page = graph_html(g, score(g, "crbc", backend="numpy"), highlight_traj=0)
    # the payloads never appear raw anywhere in the page
    assert PAYLOAD_IMG not in page and "<script>window.__xss" not in page
    # the embedded JSON cannot close its script tag: every '<' in data is \u003c
    parser = _Scripts()
    parser.feed(page)
    data_script = next(s for s in parser.scripts if "new vis.DataSet(" in s)
    for blob in re.findall(r"new vis\.DataSet\((\[.*?\])\);", data_script, flags=re.S):
        assert "<" not in blob and ">" not in blob
        titles = [x.get("title", "") for x in json.loads(blob)]
        joined = "".join(titles)
        assert "&lt;img src=x onerror=window.__xss=1&gt;" in joined or "&lt;/script&gt;" in joined
    # utils.js, vis-network, the drawing, the tooltip fix-up, the "Why this number" data (JSON,
    # not run) and its panel: a payload opened no extra script
    assert len(parser.scripts) == 6
    assert all("window.__xss" not in s for i, s in enumerate(parser.scripts) if i not in (2, 4))
    why = parser.scripts[4]
    assert '<script type="application/json" id="crbc-why-data">' in page and "<" not in why
    assert "&lt;img src=x onerror=window.__xss=1&gt;" in "".join(json.loads(why)["edges"].values())


# ---------------------------------------------------------------- trajectories
def test_trajectory_table_rows_chips_and_messages(toy):
    g, res = toy
    page = trajectory_table(
        g, {**res, "needs_signal": "estimator 'x' needs logged field(s) 'y'"}, selected=(0, 1)
    )
    assert page.count("<tr>") == 1 + g.batch.num_trajectories
    assert page.count("title='crbc'") == g.batch.num_steps
    assert "needs logged field(s)" in page
    assert page.count("outline:3px") == 1
    assert ">success<" in page and ">failure<" in page


def test_trajectory_table_escapes(tmp_path):
    g = build_graph(load_rollouts(write_xss_log(tmp_path / "xss.jsonl")))
    page = trajectory_table(g, {"crbc": score(g, "crbc", backend="numpy")})
    assert "<img" not in page and "<script" not in page
    assert "&lt;img" in page


def test_step_alternatives_lists_every_action_at_the_anchor(toy):
    g, res = toy
    s1_step = 1  # τ1 step 1 sits at s1, where b and d were taken
    alt = step_alternatives(g, res, s1_step)
    assert sorted(alt["action"]) == ["b", "d"]
    assert alt.loc[alt["action"] == "b", "taken here"].item()
    assert alt.loc[alt["action"] == "b", "credit [crbc]"].item() == pytest.approx(0.5774, abs=1e-4)
    assert alt.loc[alt["action"] == "d", "credit [crbc]"].item() == pytest.approx(-1.7321, abs=1e-4)


# ---------------------------------------------------------------- compare
def test_rank_statistics():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert sign_agreement([1, -1, 0, 2], [3, 1, 0, -1]) == pytest.approx(0.5)
    df = agreement_by_group(np.array([0, 0, 0, 1, 1, 1]), [1, 2, 3, 1, 2, 3], [1, 2, 3, 3, 2, 1], 2)
    assert df["disagreement"].tolist() == pytest.approx([0.0, 2.0])


def test_compare_figures(toy):
    g, res = toy
    df = step_frame(g, res)
    assert len(df) == g.batch.num_steps and {"crbc", "shortest_path"} <= set(df.columns)
    top = top_disagreements(df, "crbc", "shortest_path", k=3)
    assert len(top) == 3 and top["gap"].is_monotonic_decreasing
    fig = scatter_figure(df, "crbc", "shortest_path", highlight=0)
    assert isinstance(fig, go.Figure)
    assert sum(len(t.x) for t in fig.data[:2]) == g.batch.num_steps
    # A group's few steps are drawn as SVG (no WebGL context to start in the page); many as WebGL.
    assert [t.type for t in fig.data] == ["scatter"] * 3
    big = pd.concat([df] * (SVG_MAX_POINTS // len(df) + 1), ignore_index=True)
    assert [t.type for t in scatter_figure(big, "crbc", "shortest_path").data] == ["scattergl"] * 2
    A = np.array([[0.1, -0.2], [0.05, -0.1], [0.0, 0.0]])
    f2 = depth_lines_figure([0, 1, 2], A, np.array([0.0, 0.0]), ["p0", "p1"], selected_k=1)
    assert len(f2.data) == 3
    f3 = depth_error_figure([0, 1, 2], np.array([0.2, 0.1, 0.0]), np.array([1, 0.5, 0.25]), 1)
    assert f3.layout.yaxis.type == "log" and len(f3.data) == 2


def test_spearman_matches_scipy_with_ties():
    from scipy.stats import spearmanr

    from crbc_viz.views.compare import spearman

    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 60).astype(float)  # many ties
    b = a + rng.normal(size=60)
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)


def test_step_depths_put_the_rollout_in_step_order(toy):
    from crbc_viz.views.layout import step_depths

    g, _ = toy
    nodes = {str(g.node_anchor_obs[n]): n for n in range(g.num_nodes)}
    d = step_depths(g, 3, list(range(g.num_nodes)))  # τ4 = s0 -f→ s4 -i→ s4 -g→ s1 -b→ s2 -c→ ✓
    assert [d[nodes[k]] for k in ("s0", "s4", "s1", "s2")] == [0, 1, 3, 4]
    assert d[nodes["s3"]] == 4  # off the path: one after its neighbour s1
