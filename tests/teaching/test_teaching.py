"""The teaching material (crbc_viz.teaching, crbc_viz.views.learn): the rare-route trap, edits on
an in-memory copy, the depth family against the spec's numbers, and the figures' structure."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from crbc_viz import build_graph, load_rollouts, score
from crbc_viz import teaching as T
from crbc_viz.views import learn as V

BETA = 0.98


def trap_steps(graph, action=T.TRAP_ACTION) -> np.ndarray:
    return np.flatnonzero(graph.step_pair == T.pair_index(graph, T.TRAP_ANCHOR, action))


def routes_from_rows(rows):
    """Independent count, straight from the rows: per first action at `start`, (taken, succeeded,
    length of the shortest successful run)."""
    by_traj = defaultdict(list)
    for r in rows:
        by_traj[r["traj_id"]].append(r)
    out = defaultdict(lambda: [0, 0, None])
    for steps in by_traj.values():
        steps.sort(key=lambda r: r["step_idx"])
        assert steps[0]["anchor_obs"] == "start"
        rec = out[steps[0]["action"]]
        rec[0] += 1
        if steps[-1]["success"]:
            rec[1] += 1
            rec[2] = len(steps) if rec[2] is None else min(rec[2], len(steps))
    return dict(out)


def test_rare_route_file_is_the_generator_output():
    on_disk = [json.loads(line) for line in T.RARE_ROUTE_PATH.read_text().splitlines() if line]
    assert on_disk == T.rare_route_rows()


def test_rare_route_shortest_path_and_crbc_disagree_in_sign():
    rows = T.read_rows(T.RARE_ROUTE_PATH)
    routes = routes_from_rows(rows)
    # The jump is short but rarely lands; the walk is long but usually arrives.
    assert routes[T.TRAP_ACTION] == [4, 1, 2]
    assert routes[T.SAFE_ACTION] == [4, 3, 4]
    graph = build_graph(load_rollouts(T.RARE_ROUTE_PATH))
    sp = score(graph, "shortest_path", backend="numpy")
    cr = score(graph, "crbc", backend="numpy")
    jump = trap_steps(graph)
    assert jump.size == 4
    assert np.all(sp.credit[jump] > 0), sp.credit[jump]  # rewarded: the lucky route is shortest
    assert np.all(cr.credit[jump] < 0), cr.credit[jump]  # penalised: it lands 1 time in 4
    walk = trap_steps(graph, T.SAFE_ACTION)
    assert np.all(sp.credit[walk] < 0) and np.all(cr.credit[walk] > 0)
    # The closure's Q is the discounted success rate of each route as taken (a tree: exact).
    taken, ok, length = routes[T.TRAP_ACTION]
    q_jump = BETA**length * ok / taken
    taken, ok, length = routes[T.SAFE_ACTION]
    q_walk = BETA**length * ok / taken
    assert cr.q_value[jump][0] == pytest.approx(q_jump, abs=1e-12)
    assert cr.q_value[walk][0] == pytest.approx(q_walk, abs=1e-12)
    assert q_jump < q_walk


@pytest.mark.parametrize(
    "n_jump,n_lucky,n_walk,n_ok,crbc_sign",
    [(4, 1, 4, 3, -1), (6, 1, 3, 2, -1), (5, 2, 5, 4, -1), (4, 4, 4, 3, +1), (3, 2, 6, 1, +1)],
)
def test_shortest_path_ignores_how_often_the_jump_lands(n_jump, n_lucky, n_walk, n_ok, crbc_sign):
    graph = build_graph(T.batch_from_rows(T.rare_route_rows(n_jump, n_lucky, n_walk, n_ok)))
    sp = score(graph, "shortest_path", backend="numpy").credit[trap_steps(graph)]
    cr = score(graph, "crbc", backend="numpy").credit[trap_steps(graph)]
    assert np.all(sp > 0)
    assert np.all(np.sign(cr) == crbc_sign)


def test_rare_route_rows_validate_counts():
    with pytest.raises(ValueError, match="n_lucky"):
        T.rare_route_rows(n_jump=2, n_lucky=3)


def test_edits_apply_to_a_copy_and_never_touch_the_file(tmp_path, monkeypatch):
    before = T.TOY_PATH.read_bytes()
    rows = T.read_rows(T.TOY_PATH)
    snapshot = json.dumps(rows, sort_keys=True)
    edited = T.apply_edits(rows, flip=["t2"], drop=["t3"])
    assert json.dumps(rows, sort_keys=True) == snapshot  # input untouched
    assert T.traj_ids(edited) == ["t1", "t2", "t4"]
    t2 = [r for r in edited if r["traj_id"] == "t2"]
    assert all(r["success"] for r in t2)
    assert t2[-1]["reward"] == 1.0 and t2[-1]["done"] is True
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    batch = T.batch_from_rows(edited)
    assert list(tmp_path.iterdir()) == []  # the temporary JSONL is gone
    assert batch.num_trajectories == 3 and bool(np.all(batch.traj_success))
    assert T.TOY_PATH.read_bytes() == before
    back = T.apply_edits(edited, flip=["t2"])
    assert [r for r in back if r["traj_id"] == "t2"] == [r for r in rows if r["traj_id"] == "t2"]


def test_edits_reject_unknown_and_total_drops():
    rows = T.read_rows(T.TOY_PATH)
    with pytest.raises(ValueError, match="unknown rollout"):
        T.apply_edits(rows, flip=["nope"])
    with pytest.raises(ValueError, match="every rollout"):
        T.apply_edits(rows, drop=["t1", "t2", "t3", "t4"])


def test_flip_on_sokoban_moves_the_outcome_reward():
    rows = T.sokoban_rows()
    edited = T.apply_edits(rows, flip=["r2"])
    last = [r for r in edited if r["traj_id"] == "r2"][-1]
    orig = [r for r in rows if r["traj_id"] == "r2"][-1]
    assert last["success"] and last["done"]
    assert last["reward"] == pytest.approx(orig["reward"] + T.success_bonus(rows))
    assert T.batch_from_rows(edited).traj_success.sum() == 7


def test_sokoban_teaching_group_has_what_the_lessons_need():
    graph = build_graph(T.batch_from_rows(T.sokoban_rows()))
    b = graph.batch
    assert 2 <= int(b.traj_success.sum()) <= b.num_trajectories - 2
    pairs = np.unique(np.stack([graph.step_node, b.step_traj], 1), axis=0)
    shared = np.bincount(pairs[:, 0], minlength=graph.num_nodes) >= 2
    assert np.any(shared & (graph.node_num_actions >= 2))


def test_depth_family_reproduces_spec_14_5_and_respects_corollary_3():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    fam = T.depth_family(graph, beta=BETA, kmax=12)
    p = T.pair_index(graph, "s4", "i")
    for k, want in ((0, 0.3012), (1, 0.0921), (2, 0.0238), (3, 0.0015), (10, -0.0093)):
        assert fam["pair_adv"][k, p] == pytest.approx(want, abs=1e-4)
    assert fam["pair_adv_inf"][p] == pytest.approx(-0.0093, abs=1e-4)
    assert np.all(fam["err"] <= fam["bound"] + 1e-12)
    assert fam["err"][-1] < 1e-6 < fam["err"][0]
    assert np.all(np.diff(fam["bound"]) < 0)


def test_visit_local_returns_by_hand_and_teaching_anchor():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    s0 = int(np.flatnonzero(graph.node_anchor_obs == "s0")[0])
    v = T.anchor_visits(graph, s0, BETA)
    # τ1 (T = 3) and τ4 (T = 5) succeed from t = 1: G = β³ and β⁵; τ2 and τ3 fail: G = 0.
    assert sorted(np.round(v["G"], 12)) == sorted(np.round([BETA**3, 0, 0, BETA**5], 12))
    assert v["q0"]["a"] == pytest.approx(BETA**3 / 2)
    assert v["v0"] - v["q0"]["a"] == pytest.approx(-0.0093, abs=1e-4)
    # s4 is where K = 0 rewards the self-loop and the closure penalises it (§14.5).
    assert str(graph.node_anchor_obs[T.teaching_anchor(graph, BETA)]) == "s4"


def test_route_table_matches_the_independent_count():
    rows = T.rare_route_rows(5, 2, 3, 1)
    table = {d["action"]: d for d in T.route_table(rows, "start")}
    for action, (taken, ok, length) in routes_from_rows(rows).items():
        assert (
            table[action]["taken"],
            table[action]["succeeded"],
            table[action]["shortest success (steps)"],
        ) == (taken, ok, length)


def test_lessons_are_ordered_and_short():
    assert [ls.number for ls in T.LESSONS] == [1, 2, 3, 4, 5, 6]
    for ls in T.LESSONS:
        sentences = [s for s in ls.text.replace("…", "").split(". ") if s.strip()]
        assert 1 <= len(sentences) <= 4, ls.title
        assert ls.try_it


# ---------------------------------------------------------------- views (structure, no render)
def test_export_config_and_png_button():
    cfg = V.export_config("crbc-x", "svg")
    assert cfg["toImageButtonOptions"] == {"format": "svg", "filename": "crbc-x", "scale": 2}
    assert V.export_config("y", "png")["toImageButtonOptions"]["format"] == "png"
    with pytest.raises(ValueError):
        V.export_config("y", "pdf")
    page = V.with_png_button("<html><body><div id=\"mynetwork\"></div></body></html>", "a b<c>")
    # The graph's own export buttons (above the drawing) take the lesson's name; no button of
    # ours sits in a corner of the canvas, where the zoom buttons are.
    assert 'setAttribute("data-crbc-name", "abc")' in page and "<button" not in page
    assert page.count("</body>") == 1 and "big(nodes" not in page
    big = V.with_png_button("<body data-crbc-min-label='10'></body>", "g", projector=True)
    # Projector labels: at least 16 px on screen (the page's own minimum), not a fixed factor.
    assert "data-crbc-min-label='16'" in big and "#crbc-head { font-size: 16px" in big
    assert V.projector_graph("<body></body>") == V.projector_graph("<body></body>")


def test_wrap_title_breaks_between_words_and_never_inside_a_tag():
    text = "Gap to the closure, under a bound that shrinks like β<sup>K</sup> (β = 0.98)"
    out = V.wrap_title(text, 20)
    lines = out.split("<br>")
    assert " ".join(lines) == text  # nothing lost, nothing added but the breaks
    # Greedy, by hand: a word goes on the line while the visible text stays within 20.
    assert lines == ["Gap to the closure,", "under a bound that", "shrinks like β<sup>K</sup> (β =", "0.98)"]
    assert V.wrap_title("short", 20) == "short"
    assert V.wrap_title("a<br>b c", 3) == "a<br>b c"
    assert V.wrap_title("unbreakable-word x", 4) == "unbreakable-word<br>x"
    with pytest.raises(ValueError):
        V.wrap_title("x", 0)


def test_verdict_title_says_opposite_only_when_signs_differ():
    nan = float("nan")
    act = T.TRAP_ACTION
    assert "opposite verdicts" in V.verdict_title({"sp": (0.9, -0.9), "crbc": (-1.0, 1.0)}, act)
    assert "praises" in V.verdict_title({"sp": (0.9, -0.9), "crbc": (0.2, 1.0)}, act)
    assert "blames" in V.verdict_title({"sp": (-0.1, 0.0), "crbc": (-1.0, nan)}, act)
    assert "either way" in V.verdict_title({"sp": (0.0, 1.0), "crbc": (0.0, 1.0)}, act)
    assert "no verdict" in V.verdict_title({"sp": (nan, 1.0)}, act)
    assert "opposite" not in V.verdict_title({"sp": (0.5, 0.0), "crbc": (nan, 0.0)}, act)


def test_projector_figures_hold_no_font_under_16_px():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    grpo = score(graph, "grpo", backend="numpy")
    cr = score(graph, "crbc", backend="numpy")
    fam = T.depth_family(graph, kmax=5)
    labels, group_term, step_term = V.combination_steps(graph, cr, None, 5.0)
    figs = [
        V.grpo_figure(graph, grpo.credit, cr.q_value - cr.value, projector=True),
        V.visit_local_figure(T.anchor_visits(graph, 0), "s0", {"a": 0.47}, 0.46, projector=True),
        V.depth_gap_figure(fam["depths"], fam["err"], fam["bound"], None, BETA, projector=True),
        V.rare_route_figure({"a": (1.0, -1.0)}, ("x", "y"), projector=True),
        V.combination_figure(labels, group_term, step_term, "t", projector=True),
    ]
    for fig in figs:
        lay = fig.layout
        sizes = [lay.font.size, lay.legend.font.size, lay.title.font.size]
        sizes += [ax.tickfont.size for ax in [*fig.select_xaxes(), *fig.select_yaxes()]]
        sizes += [getattr(getattr(tr, "textfont", None), "size", None) for tr in fig.data]
        sizes += [an.font.size for an in lay.annotations]
        assert min(x for x in sizes if x is not None) >= 16, (lay.title.text, sizes)
    # The screen figures keep their own (smaller) tick labels: projector mode is what raises them.
    assert V.combination_figure(labels, group_term, step_term, "t").layout.xaxis.tickfont.size < 16


def test_graph_export_fits_the_whole_graph_first():
    from crbc_viz.views.graph_view import graph_html

    page = graph_html(build_graph(load_rollouts(T.TOY_PATH)), estimator="crbc", params_text="beta=0.9")
    js = page[page.index("window.crbcExport") :]
    assert js.index("network.fit(") > js.index("afterDrawing") and "toDataURL" in js
    assert "network.moveTo" in js and "data-crbc-name='graph_crbc_beta=0.9'" in page


def test_learn_figures_structure():
    graph = build_graph(load_rollouts(T.TOY_PATH))
    grpo = score(graph, "grpo", backend="numpy")
    cr = score(graph, "crbc", backend="numpy")
    fig = V.grpo_figure(graph, grpo.credit, cr.q_value - cr.value)
    hm = fig.data[0]
    assert hm.type == "heatmap" and len(hm.y) == 4 and len(hm.x) == 5
    marked = sum(cell.startswith("▲") for row in hm.text for cell in row)
    assert marked == 3 and "3 steps marked ▲" in fig.layout.title.text.replace("<br>", " ")
    assert fig.layout.font.size == V.FONT_SIZE
    rr = V.rare_route_figure(
        {"shortest_path": (0.9, -0.9), "crbc": (-1.0, 1.0)}, (T.TRAP_ACTION, T.SAFE_ACTION)
    )
    assert [t.name for t in rr.data] == [T.TRAP_ACTION, T.SAFE_ACTION]
    assert list(rr.data[0].y) == [0.9, -1.0]
    fam = T.depth_family(graph, kmax=5)
    gap = V.depth_gap_figure(fam["depths"], fam["err"], fam["bound"], 2, BETA)
    assert gap.layout.yaxis.type == "log" and len(gap.data) == 3
    comb = V.combination_figure(["a", "b"], np.array([1.0, -1.0]), np.array([0.5, 0.25]), "t")
    assert list(comb.data[2].y) == [1.5, -0.75] and comb.layout.barmode == "relative"
    vis = V.visit_local_figure(T.anchor_visits(graph, 0), "s0", {"a": 0.47, "f": 0.45}, 0.46)
    assert vis.data[0].type == "bar" and len(vis.data[1].y) == 4


def test_add_a_rollout_through_an_anchor_by_hand():
    rows = T.read_rows(T.TOY_PATH)
    # Through s4 as t3 reaches it (its step 1, action g), ending in SUCCESS.
    out = T.apply_edits(rows, flip=["t2"], add=[("t3", 1, True), ("t1", 0, False)])
    assert rows == T.read_rows(T.TOY_PATH)  # a copy
    new = [r for r in out if r["traj_id"] == "new1"]
    assert [(r["anchor_obs"], r["action"]) for r in new] == [("s0", "f"), ("s4", "g")]
    assert [r["reward"] for r in new] == [0.0, 1.0] and [r["done"] for r in new] == [False, True]
    assert all(r["success"] for r in new)
    new2 = [r for r in out if r["traj_id"] == "new2"]
    assert [(r["anchor_obs"], r["success"], r["reward"], r["done"]) for r in new2] == [
        ("s0", False, 0.0, True)
    ]
    # Visit-local at s4 by hand, β = 0.9 (G = β^(T−t+1), t 1-indexed): t3·g fails (0), t4·i
    # is step 2 of 5 (β⁴), t4·g step 3 of 5 (β³), new1·g step 2 of 2 (β).
    b = 0.9
    g = build_graph(T.batch_from_rows(T.apply_edits(rows, add=[("t3", 1, True)])))
    r = score(g, "visit_local", beta=b)
    q = {a: r.pair_q[T.pair_index(g, "s4", a)] for a in ("g", "i")}
    assert q["g"] == pytest.approx((0 + b**3 + b) / 3) and q["i"] == pytest.approx(b**4)
    assert T.parse_add(T.format_add(("t3", 1, True))) == ("t3", 1, True)
    with pytest.raises(ValueError, match="no step 7"):
        T.apply_edits(rows, add=[("t3", 7, True)])
    with pytest.raises(ValueError, match="written"):
        T.parse_add("t3:S")


def test_the_public_names_are_those_listed_before_the_rows_half_moved():
    """`teaching.__all__` takes the rows half from `teaching_rows.__all__`: the names are those
    of the literal list (commit 6ebc5c2) plus the add-a-rollout names added since, each once,
    each defined."""
    listed = {"Lesson", "LESSONS", "MARK_RULE", "REPO_ROOT", "TOY_PATH", "SOKOBAN_PATH", "SOKOBAN_GROUP"}
    listed |= {"RARE_ROUTE_PATH", "TRAP_ANCHOR", "TRAP_ACTION", "SAFE_ACTION", "read_rows", "sokoban_rows"}
    listed |= {"rare_route_rows", "write_rows", "traj_ids", "success_bonus", "apply_edits", "batch_from_rows"}
    listed |= {"depth_family", "anchor_visits", "teaching_anchor", "route_table", "pair_label", "pair_index"}
    listed |= {"backup_terms", "backup_value", "backup_once", "backup_latex", "node_short_name", "Prediction"}
    listed |= {"lesson_prediction", "QUIZ", "lesson_code", "GROUP_COLUMNS", "group_rows", "credit_by_pair"}
    listed |= {"biggest_change"}
    added = {"ADD_RULE", "added_rollout", "parse_add", "format_add"}
    assert len(T.__all__) == len(set(T.__all__)) == 42
    assert set(T.__all__) == listed | added
    assert all(hasattr(T, name) for name in T.__all__)
