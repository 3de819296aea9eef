""" "Why this number": the arithmetic a click on an edge (or a step) shows equals the spec's hand
vectors (ESTIMATORS.md §14.3–§14.5, §14.10 on the toy group), a brute force written from the
raw rows (value iteration over counted transitions, Python's statistics), and, for every
registered estimator, the estimator's own credit and advantage on every step. The graph page
embeds the explanations escaped (no markup or script from a logged action or anchor), bounded."""

from __future__ import annotations

import html
import json
import math
import re
import statistics
from collections import Counter, defaultdict

import numpy as np
import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz import teaching as T
from crbc_viz.estimators import registry
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from crbc_viz.views import why as W
from crbc_viz.views.graph_values import truncated_steps
from crbc_viz.views.graph_view import graph_html

TOL = 1.5e-4  # the spec's numbers are written to 4 decimals


@pytest.fixture(scope="module")
def toy():
    return build_graph(load_rollouts(T.TOY_PATH))


def _lines(w: W.Why) -> dict:
    return {ln.key: ln.value for ln in w.lines}


def _step(graph, traj: str, t: int) -> int:
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()
    return int(np.flatnonzero((ids == traj) & (b.step_pos == t))[0])


def _why(graph, result, traj, t) -> W.Why:
    return W.explain(graph, result, W.edge_steps(graph, _step(graph, traj, t)))


# ---------------------------------------------------------------- the spec's hand vectors
#: §14.4: the final credit 1·A^G + 5·A^S of every step, rollout by rollout.
CRBC_FINAL = {
    "t1": [1.2155, 3.7528, 4.4016],
    "t2": [-0.5166, -9.5263, -0.8660],
    "t3": [-1.2155, -0.6331, 2.0207, -7.9371],
    "t4": [0.5166, 0.4001, 1.0990, 3.7528, 4.4016],
}


def test_crbc_panel_lines_are_the_spec_vector(toy):
    r = score(toy, "crbc", backend="numpy", beta=0.98)
    # (s1, b), reached by t1 at t = 1: V 0.4802, Q 0.6403, A∞ +0.1601, σ 0.2772, A^S +0.5774.
    got = _lines(_why(toy, r, "t1", 1))
    want = {"V": 0.4802, "Q": 0.6403, "A_inf": 0.1601, "sigma": 0.2772, "credit": 0.5774, "advantage": 3.7528}
    assert all(abs(got[k] - v) < TOL for k, v in want.items()), got
    # (s0, a): σ(s0) = 0.0070 < σ_min = 0.1, so A^S = +0.0070 / 0.1 = +0.0699.
    got = _lines(_why(toy, r, "t1", 0))
    assert abs(got["sigma"] - 0.0070) < TOL and abs(got["credit"] - 0.0699) < TOL, got
    # (s3, e): one action at s3, the gate gives 0; (s2, h): −0.6533 / 0.4620 = −1.4142.
    w = _why(toy, r, "t2", 2)
    assert _lines(w)["credit"] == 0.0 and "gate" in next(ln.expr for ln in w.lines if ln.key == "credit")
    assert abs(_lines(_why(toy, r, "t3", 3))["credit"] + 1.4142) < TOL
    for traj, finals in CRBC_FINAL.items():
        for t, want in enumerate(finals):
            assert abs(_lines(_why(toy, r, traj, t))["advantage"] - want) < TOL, (traj, t)


def test_crbc_backup_table_is_the_successors(toy):
    """Q(s1, b) = 0.98 × (3/3 × V(s2)), V(s2) = 0.6533; the table lists s2 with count 3."""
    r = score(toy, "crbc", backend="numpy", beta=0.98)
    w = _why(toy, r, "t1", 1)
    succ = w.tables[0]
    assert succ.cols[:4] == ("x", "count", "P", "V")
    assert [(row[0], row[1]) for row in succ.rows] == [("s2", 3)]
    assert abs(succ.rows[0][3] - 0.6533) < TOL and abs(w.checks["Q_backup"] - 0.6403) < TOL
    # (s2, c) → SUCCESS, whose value is the reward 1: Q = 0.98.
    w = _why(toy, r, "t1", 2)
    assert w.tables[0].rows[0][0].startswith("SUCCESS") and w.tables[0].rows[0][3] == 1.0
    assert abs(_lines(w)["Q"] - 0.98) < 1e-12


def test_visit_local_is_the_suffix_returns_averaged(toy):
    """§14.5, K = 0: A(s0,a) = +0.0093, A(s4,g) = −0.1506, A(s4,i) = +0.3012; Q⁰(s1,b) is the
    mean of G = 0.98², 0, 0.98² over its three occurrences."""
    r = score(toy, "visit_local", backend="numpy", beta=0.98)
    assert abs(_lines(_why(toy, r, "t1", 0))["A_inf"] - 0.0093) < TOL
    assert abs(_lines(_why(toy, r, "t3", 1))["A_inf"] + 0.1506) < TOL
    assert abs(_lines(_why(toy, r, "t4", 1))["A_inf"] - 0.3012) < TOL
    w = _why(toy, r, "t1", 1)
    G = sorted(row[-1] for row in w.tables[0].rows)
    assert np.allclose(G, [0.0, 0.98**2, 0.98**2]) and abs(_lines(w)["Q"] - 2 * 0.98**2 / 3) < 1e-12


#: §14.3, mean_std_norm with trajectory statistics: (A^S, A^E + A^S) of every step.
GIGPO = {
    "t1": [(0.9523, 1.8183), (0.8660, 1.7320), (0.5773, 1.4434)],
    "t2": [(-0.8638, -1.7298), (-0.8660, -1.7320), (0.0, -0.8660)],
    "t3": [(-0.8638, -1.7298), (-1.1536, -2.0196), (-0.8660, -1.7320), (-1.1547, -2.0207)],
    "t4": [(0.7752, 1.6412), (0.5324, 1.3984), (0.6211, 1.4872), (0.8660, 1.7320), (0.5773, 1.4434)],
}


def test_gigpo_panel_is_the_spec_vector(toy):
    r = score(toy, "gigpo", backend="numpy", mode="mean_std_norm", episode_stats="trajectory")
    for traj, rows in GIGPO.items():
        for t, (a_s, final) in enumerate(rows):
            got = _lines(_why(toy, r, traj, t))
            assert abs(got["credit"] - a_s) < TOL and abs(got["advantage"] - final) < TOL, (traj, t, got)
    # The step group of s0: its four visits' returns 0.95², 0, 0, 0.95⁴ (t2 and t3 fail).
    w = _why(toy, r, "t1", 0)
    assert sorted(row[-1] for row in w.tables[0].rows) == pytest.approx([0, 0, 0.95**4, 0.95**2])


def test_shortest_path_panel_is_the_spec_vector(toy):
    """§14.10: d(s0) = 3, the route s1 → s2 → SUCCESS, and the source-normalised credits."""
    r = score(toy, "shortest_path", backend="numpy")
    w = _why(toy, r, "t1", 0)
    got = _lines(w)
    assert got["d_s"] == 3 and got["route"] == 2
    assert next(ln.expr for ln in w.lines if ln.key == "route") == "s1 → s2 → SUCCESS"
    want = {("t1", 0): 0.8659, ("t3", 0): -0.8659, ("t1", 1): 0.5, ("t2", 1): -1.5, ("t1", 2): 0.5773}
    want |= {("t3", 3): -1.1547, ("t2", 2): 0.0, ("t3", 1): 0.5772, ("t4", 1): -1.1545}
    for (traj, t), v in want.items():
        assert abs(_lines(_why(toy, r, traj, t))["credit"] - v) < TOL, (traj, t)


# ---------------------------------------------------------------- a brute force from the rows
def _brute_crbc(rows: list[dict], beta: float, sigma_min: float, w_g: float, w_s: float) -> dict:
    """CRBC from the raw rows with dicts and value iteration; {(traj, step_idx): (V, Q, A^S, A)}."""
    trajs = defaultdict(list)
    for r in rows:
        trajs[r["traj_id"]].append(r)
    n_sax, n_sa, n_s = Counter(), Counter(), Counter()
    for steps in trajs.values():
        steps.sort(key=lambda r: r["step_idx"])
        for k, r in enumerate(steps):
            x = steps[k + 1]["anchor_obs"] if k + 1 < len(steps) else ("+" if r["success"] else "-")
            n_sax[(r["anchor_obs"], r["action"], x)] += 1
            n_sa[(r["anchor_obs"], r["action"])] += 1
            n_s[r["anchor_obs"]] += 1
    V = defaultdict(float, {"+": 1.0, "-": 0.0})

    def q(s, a):
        return beta * sum(c * V[x] for (s2, a2, x), c in n_sax.items() if (s2, a2) == (s, a)) / n_sa[(s, a)]

    for _ in range(3000):  # β = 0.9: 0.9^3000 is far below float precision
        new = {s: sum(n_sa[(s2, a)] / n_s[s] * q(s, a) for (s2, a) in n_sa if s2 == s) for s in n_s}
        V.update(new)
    R = {t: float(steps[0]["success"]) for t, steps in trajs.items()}
    mean, std = statistics.mean(R.values()), statistics.stdev(R.values())
    out = {}
    for t, steps in trajs.items():
        for r in steps:
            s, a = r["anchor_obs"], r["action"]
            acts = [a2 for (s2, a2) in n_sa if s2 == s]
            sigma = math.sqrt(sum(n_sa[(s, b)] / n_s[s] * (q(s, b) - V[s]) ** 2 for b in acts))
            a_s = (q(s, a) - V[s]) / max(sigma, sigma_min) if len(acts) >= 2 else 0.0
            a_g = (R[t] - mean) / (std + 1e-6) if std > 0 else 0.0
            out[(t, r["step_idx"])] = (V[s], q(s, a), a_s, w_g * a_g + w_s * a_s)
    return out


@pytest.mark.parametrize("seed", [5, 11])
def test_crbc_panel_equals_a_brute_force(seed):
    batch = random_mdp_batch(num_groups=1, rollouts=10, max_steps=25, num_states=15, seed=seed)
    rows = batch_to_rows(batch)
    graph = build_graph(batch)
    r = score(graph, "crbc", backend="numpy", beta=0.9, sigma_min=0.05, w_group=0.5, w_step=2.0)
    brute = _brute_crbc(rows, 0.9, 0.05, 0.5, 2.0)
    ex = W.Explainer(graph, r)
    for s in range(graph.batch.num_steps):
        w = ex.explain(W.edge_steps(graph, s))
        got = _lines(w)
        visit = w.tables[-1].rows[0]
        V, Q, a_s, final = brute[(visit[0], visit[1])]
        assert abs(got["V"] - V) < 1e-9 and abs(got["Q"] - Q) < 1e-9 and abs(w.checks["Q_backup"] - Q) < 1e-9
        assert abs(got["credit"] - a_s) < 1e-9 and abs(got["advantage"] - final) < 1e-9, (s, got)
        assert abs(w.checks["V_sum"] - V) < 1e-9


# ---------------------------------------------------------------- every estimator
def _graphs():
    sok = load_rollouts("sample_rollouts/sokoban/sokoban.jsonl").select_groups([0, 4])
    mdp = random_mdp_batch(num_groups=2, rollouts=12, max_steps=30, num_states=30, seed=3)
    return [build_graph(load_rollouts(T.TOY_PATH)), build_graph(sok), build_graph(mdp)]


CONFIGS = [(n, {}) for n in registry.names()] + [
    ("crbc", {"depth": 2}),
    ("crbc", {"depth": 1, "beta": 1.0}),
    ("shortest_path", {"exponent": "d", "ddof": 0}),
    ("gigpo", {"mode": "mean_std_norm"}),
    ("gigpo", {"similarity": True, "similarity_thresh": 0.8}),
]


@pytest.mark.parametrize(("name", "kw"), CONFIGS, ids=[f"{n}{kw or ''}" for n, kw in CONFIGS])
def test_the_final_line_is_the_estimators_credit(name, kw):
    """On every step of three graphs, the panel's credit and advantage (and the per-visit
    table, which holds the columns of ``crbc-viz score``) are the estimator's."""
    ran = 0
    for graph in _graphs():
        try:
            r = score(graph, name, backend="numpy", **kw)
        except Exception as e:  # an estimator that needs a signal these logs lack
            assert type(e).__name__ == "MissingSignalError", e
            continue
        ran += 1
        ex = W.Explainer(graph, r)
        cut = truncated_steps(graph)
        for e in np.unique(graph.step_edge):
            s = int(np.flatnonzero(graph.step_edge == e)[0])
            w = ex.explain(W.edge_steps(graph, s, cut))
            for col, want in (("credit", r.credit), ("advantage", r.advantage)):
                np.testing.assert_allclose(getattr(w, col), want[w.steps], rtol=0, atol=1e-12, err_msg=col)
            visits = w.tables[-1]
            for k, row in enumerate(visits.rows):
                vals = dict(zip(visits.cols, row))
                s_k = int(w.steps[k])
                for col in ("value", "q_value", "credit", "advantage"):
                    want = float(getattr(r, col)[s_k])
                    assert vals[col] == pytest.approx(want, abs=1e-12, nan_ok=True), (col, s_k)
    assert ran or registry.get(name).requires


# ---------------------------------------------------------------- the graph page
def _payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="crbc-why-data">(.*?)</script>', page, re.S)
    assert m, "no embedded explanations"
    return json.loads(m.group(1))


def test_graph_page_embeds_each_drawn_edges_explanation(toy):
    r = score(toy, "crbc", backend="numpy")
    page = graph_html(toy, r)
    data = _payload(page)
    edges = json.loads(re.search(r"edges = new vis\.DataSet\((\[.*?\])\);", page, re.S).group(1))
    # Every (anchor, action) edge drawn (all 9 of the toy's) has its panel, keyed by its vis id.
    assert set(data["edges"]) == {e["id"] for e in edges} and len(data["edges"]) == 9
    h = data["edges"]["1->2#2"]
    assert "data-why='credit' data-val='0.577350" in h and "<b>+0.5774</b>" in h
    assert 'id="crbc-why"' in page and "network.on(\"click\"" in page
    assert W.open_why(page, "1->2#2").count("data-crbc-why-open='1-&gt;2#2'") == 1
    assert "crbc-why-data" not in graph_html(toy, None)  # nothing to explain without a result


def test_graph_page_payload_is_bounded(toy, monkeypatch):
    monkeypatch.setattr(W, "MAX_WHY_EDGES", 3)
    data = _payload(graph_html(toy, score(toy, "crbc", backend="numpy")))
    assert len(data["edges"]) == 3 and len(data["more"]) == 6 and "most travelled" in data["none"]
    # The three most travelled edges: s0 -a-> s1, s0 -f-> s4 and s1 -b-> s2 (2, 2 and 3 visits).
    assert set(data["edges"]) >= {"1->2#2"}


EVIL_ACTION = "<img src=x onerror=alert(1)>'\"&"
EVIL_ANCHOR = "</script><script>alert('anchor')</script>"


def test_logged_text_cannot_inject_markup_or_script(tmp_path):
    rows = [
        {
            "traj_id": "a",
            "step_idx": 0,
            "anchor_obs": EVIL_ANCHOR,
            "action": EVIL_ACTION,
            "reward": 0,
            "success": True,
        },
        {"traj_id": "a", "step_idx": 1, "anchor_obs": "s1", "action": "ok", "reward": 1, "success": True},
        {
            "traj_id": "b",
            "step_idx": 0,
            "anchor_obs": EVIL_ANCHOR,
            "action": "</script>",
            "reward": 0,
            "success": False,
        },
        {"traj_id": "b", "step_idx": 1, "anchor_obs": "s1", "action": "ok", "reward": 0, "success": False},
    ]
    path = tmp_path / "evil.jsonl"
    path.write_text("".join(json.dumps({"group_id": "g", **r}) + "\n" for r in rows))
    graph = build_graph(load_rollouts(path))
    for name in ("crbc", "gigpo", "shortest_path", "grpo"):
        r = score(graph, name, backend="numpy")
        page = graph_html(graph, r)
        m = re.search(r'<script type="application/json" id="crbc-why-data">(.*?)</script>', page, re.S)
        raw = m.group(1)
        assert "<" not in raw  # the JSON cannot end its script element
        panels = list(json.loads(raw)["edges"].values())
        for h in panels:
            assert "<img" not in h and "<script" not in h and "</script" not in h
        assert any(html.escape(EVIL_ACTION, quote=True) in h for h in panels)  # shown, as text
        panel = W.why_html(graph, {name: r}, W.edge_steps(graph, 0))
        assert (
            "<img" not in panel and "<script" not in panel and html.escape(EVIL_ACTION, quote=True) in panel
        )
    assert "<img" not in W.open_why("<body x>", "\"'><img src=x>")


def test_the_app_draws_without_panels_and_adds_the_clicked_edges_own():
    """The Graph page (which reruns on a click) builds no explanation when it draws: the page
    is as light as one without the panel, and the rerun adds the clicked edge's panel before
    the panel's script, equal to the one the exported page embeds."""
    import re
    from html import escape as html_escape

    from crbc_viz import build_graph, load_rollouts, score
    from crbc_viz.views.graph_view import graph_drawing
    from crbc_viz.views.why import edge_explanation, open_why

    g = build_graph(load_rollouts("sample_rollouts/toy/toy_group.jsonl"))
    r = score(g, "crbc", backend="numpy")
    lazy = graph_drawing(g, r, why_on_click=True).html
    full = graph_drawing(g, r).html
    assert "Q(s,a)" not in lazy.split('id="crbc-why-data"')[1].split("</script>")[0]
    edge = "1->2#2"
    html = edge_explanation(g, r, edge)
    assert html and edge_explanation(g, r, "1->2#chain") is None and edge_explanation(g, None, edge) is None
    page = open_why(lazy, edge, html)
    assert page.index('id="crbc-why-extra"') < page.index('<div id="crbc-why" ')
    assert f"data-crbc-why-open='{html_escape(edge)}'" in page
    embedded = re.search(r'id="crbc-why-data">(.*?)</script>', full, re.S).group(1)
    assert json.loads(embedded)["edges"][edge] == html


@pytest.mark.parametrize("name", ["crbc", "visit_local", "gigpo", "shortest_path", "grpo"])
def test_the_panel_writes_math_not_caret_notation(toy, name):
    """Superscripts and subscripts are set as such (A<sup>S</sup>, σ<sub>min</sub>): no ``^`` or
    ``x_y`` is left in the text a person reads, on every edge of the toy group."""
    r = score(toy, name, backend="numpy")
    seen = 0
    for e in np.unique(toy.step_edge):
        s = int(np.flatnonzero(toy.step_edge == e)[0])
        panel = W.why_html(toy, {name: r}, W.edge_steps(toy, s))
        seen += panel.count("<sup>") + panel.count("<sub>")
        # (the style block, and the heading that names the estimator as the CLI does)
        prose = re.sub(r"<style>.*?</style>|<h4>.*?</h4>", " ", panel, flags=re.S)
        text = html.unescape(re.sub(r"<[^>]*>", " ", prose))
        assert "^" not in text, text
        assert not re.search(r"[A-Za-zα-ωΑ-Ω]_[A-Za-z0-9(]", text), text
    assert seen, "the panel set no superscript or subscript at all"
