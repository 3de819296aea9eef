"""Every Learn lesson's code block, as the page shows it, run and compared with the numbers the
page shows next to it (`streamlit.testing.v1.AppTest`); the predictions; the edits panel."""

from __future__ import annotations

import contextlib
import io

import pytest
from test_learn import figures, go, learn, metrics, ok

TOL = 6e-4  # the page and the code both print 3 decimals (2 for A^G and lesson 5)


def run_shown_code(at) -> list[list[str]]:
    blocks = [c.value for c in at.code if "crbc_viz" in c.value]
    assert len(blocks) == 1, blocks
    assert len(blocks[0].splitlines()) <= 15
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "<lesson code>", "exec"), {})
    return [line.split() for line in out.getvalue().splitlines()]


def frame(at, column: str):
    """The first table on the page with ``column`` (the "what changed" table may come first)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def by_label(lines) -> dict[str, float]:
    return {" ".join(w[:-1]): float(w[-1]) for w in lines}


def test_code_blocks_print_what_the_page_shows():
    at = go(learn(), 1)
    at.multiselect(key="learn_flip_toy").select("t3").run()  # an edit the code must carry too
    ok(at)
    heat = figures(at)[0]["data"][0]
    page = {y.split()[0]: float(y.split()[-1]) for y in heat["y"]}
    printed = {w[0]: float(w[1]) for w in run_shown_code(at)}
    assert printed == pytest.approx(page, abs=0.006) and len(printed) == 4

    go(at, 2)
    lines = run_shown_code(at)
    m = metrics(at)
    assert lines[0] == ["steps", m["steps"], "anchors", m["anchors"]]
    assert lines[1][-1] == m["with ≥ 2 actions"]

    go(at, 3)
    table = frame(at, "action")
    printed = {w[0]: (float(w[1]), float(w[2])) for w in run_shown_code(at)}
    assert set(printed) == set(table["action"])
    for a, q, adv in zip(table["action"], table["Q⁰(s,a)"], table["A⁰ = Q⁰ − V⁰"]):
        assert printed[a] == pytest.approx((q, adv), abs=TOL)

    go(at, 4)
    at.select_slider(key="learn_k").set_value("3").run()
    ok(at)
    table = frame(at, "A⁽³⁾")
    printed = by_label(run_shown_code(at))
    page = dict(zip(table["anchor · action"], table["A⁽³⁾"]))
    assert printed == pytest.approx(page, abs=TOL) and page

    go(at, 6)
    table = frame(at, "Aˢ")
    page = dict(zip(table["anchor · action"], table["Aˢ"]))
    assert by_label(run_shown_code(at)) == pytest.approx(page, abs=TOL)

    go(at, 5, None)
    bars = figures(at)[0]["data"]
    page = [bars[j]["y"][i] for i in range(3) for j in (0, 1)]
    printed = [float(x) for w in run_shown_code(at) for x in w[1:]]
    assert printed == pytest.approx(page, abs=0.006)


def predictions(at):
    return [r for r in at.radio if r.label.startswith("**Predict first.**")]


def test_every_lesson_asks_before_it_answers_and_says_why():
    at = learn()
    for n in range(1, 7):
        go(at, n, "toy" if n != 5 else None)
        asks = predictions(at)
        assert len(asks) == (5 if n == 6 else 1)  # lesson 6 closes the set with a 4-question quiz
        for q in asks:
            assert q.value is None
        wrong = [o for o in asks[0].options if o != asks[0].options[-1]][0]
        asks[0].set_value(wrong).run()
        ok(at)
        shown = " ".join(m.value for m in [*at.success, *at.error])
        assert "because" in shown or "." in shown
        assert at.error or at.success


def test_drop_keeps_a_rollout_and_chips_show_the_outcome_after_flips():
    at = go(learn(), 1)
    at.multiselect(key="learn_flip_toy").select("t2").run()
    ok(at)
    assert "t2 (success)" in at.multiselect(key="learn_drop_toy").options  # t2 failed in the file
    for t in ("t1", "t2", "t3"):
        at.multiselect(key="learn_drop_toy").select(t).run()
        ok(at)
    drop = at.multiselect(key="learn_drop_toy")
    # The last rollout is not offered; a dropped one keeps the outcome it had (t2 flipped).
    assert drop.options == ["t1 (success)", "t2 (success)", "t3 (failure)"]
    assert at.multiselect(key="learn_flip_toy").options == ["t4 (success → failure)"]
    assert metrics(at)["rollouts"] == "1"
    at.multiselect(key="learn_drop_toy").unselect("t2").run()
    ok(at)
    assert at.multiselect(key="learn_flip_toy").value == ["t2"]  # put back: flipped again
    assert metrics(at)["successes"] == "2"  # t2 (flipped) and t4


def test_lesson6_gate_column_shows_what_the_gate_silences():
    from crbc_viz import build_graph, score
    from crbc_viz import teaching as T

    at = go(learn(), 6)
    table = frame(at, "Aˢ without the gate")
    assert (table["Aˢ without the gate"] == table["Aˢ"]).all()  # n = 2: s3 has Q = V already
    assert any("silences nothing" in c.value for c in at.caption)
    at.slider(key="learn_gate").set_value(3).run()
    ok(at)
    table = frame(at, "Aˢ")
    g = build_graph(T.batch_from_rows(T.read_rows(T.TOY_PATH)))
    free = score(g, "crbc", min_actions=1).pair_credit[T.pair_index(g, "s0", "a")]
    row = table[table["anchor · action"] == "s0 · a"].iloc[0]
    assert row["Aˢ"] == 0 and row["Aˢ without the gate"] == pytest.approx(free) and abs(free) > 0.01
    assert any("silences s0 · a" in c.value for c in at.caption)


def test_graph_page_opens_the_lessons_on_its_group():
    from streamlit.testing.v1 import AppTest
    from test_learn import REPO, TIMEOUT

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["group"] = "sokoban-sample/0/sokoban-task-02"
    at.switch_page("crbc_viz/app/app_pages/graph.py")
    at.run()
    ok(at)
    link = [e for e in at.get("page_link") if "Teach with this group" in e.proto.label]
    assert len(link) == 1 and "learn" in link[0].proto.page
    # The link's destination: the Learn page with the viewed group in the URL.
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in {"group": "sokoban-sample/0/sokoban-task-02", "data": "group", "lesson": "2"}.items():
        at.query_params[k] = v
    at.switch_page("crbc_viz/app/app_pages/learn.py")
    at.run()
    ok(at)
    assert at.radio(key="learn_data").value == "group"
    assert "sokoban-task-02" in at.radio(key="learn_data").format_func("group")
    # Independent count, straight from the log: task-02's steps.
    import json

    rows = [
        json.loads(line)
        for line in (REPO / "sample_rollouts/sokoban/sokoban.jsonl").read_text().splitlines()
        if line.strip()
    ]
    rows = [r for r in rows if r["group_id"] == "sokoban-task-02"]
    assert metrics(at)["steps"] == str(len(rows))
    assert metrics(at)["anchors"] == str(len({r["anchor_obs"] for r in rows}))
    lines = run_shown_code(at)
    assert "load_rollouts(" in [c.value for c in at.code if "crbc_viz" in c.value][0]
    assert lines[0] == ["steps", str(len(rows)), "anchors", metrics(at)["anchors"]]


def largest_by_api(before_rows, after_rows, params: dict) -> tuple[str, float, float]:
    """Independently of the page: every estimator through `crbc_viz.score` on both groups,
    steps matched by (rollout, step index), the largest move: (line text, before, after)."""
    from crbc_viz import build_graph, score
    from crbc_viz import teaching as T
    from crbc_viz.errors import CrbcVizError
    from crbc_viz.estimators import registry

    g0 = build_graph(T.batch_from_rows(before_rows))
    g1 = build_graph(T.batch_from_rows(after_rows))

    def by_step(g, r):
        s = g.batch.steps
        return dict(zip(zip(s["traj_id"].astype(str), s["step_idx"].astype(int)), r.credit.tolist()))

    best = (0.0, None)
    for name in registry.names():
        try:
            b = by_step(g0, score(g0, name))
            a = by_step(g1, score(g1, name, **params.get(name, {})))
        except CrbcVizError:
            continue
        for k in b:
            if k in a and abs(a[k] - b[k]) > best[0] + 1e-12:
                best = (abs(a[k] - b[k]), (name, k, b[k], a[k]))
    name, (traj, step), b, a = best[1]
    return f"step {step} of rollout {traj}", b, a


def test_an_edit_names_what_changed_most_for_each_estimator():
    from crbc_viz import teaching as T

    at = go(learn(), 3)
    assert not [m for m in at.markdown if "largest change" in m.value]
    at.multiselect(key="learn_flip_toy").select("t3").run()
    ok(at)
    line = [m.value for m in at.markdown if "The largest change:" in m.value]
    assert len(line) == 1
    rows = T.read_rows(T.TOY_PATH)
    where, b, a = largest_by_api(rows, T.apply_edits(rows, flip=["t3"]), {})
    assert f"{where} under " in line[0] and f"{b:+.2f} → {a:+.2f}" in line[0]
    table = frame(at, "largest change")
    assert {"GRPO", "CRBC", "visit-local", "GiGPO"} <= set(table["estimator"])
    assert dict(zip(table["estimator"], table["discount"]))["GRPO"] == "ignores β and γ"


def test_beta_moves_visit_local_credit_and_the_backup():
    at = go(learn(), 3)
    at.select_slider(key="learn_beta").set_value(0.9).run()
    ok(at)
    assert at.query_params["beta"] == "0.9"
    table = frame(at, "action")
    a0 = dict(zip(table["action"], table["A⁰ = Q⁰ − V⁰"]))
    # By hand: s4's visits are t3·g (t = 2 of 4, failed: G = 0), t4·i (t = 2 of 5: G = β⁴) and
    # t4·g (t = 3 of 5: G = β³); A⁰(i) = β⁴ − (β³ + β⁴)/3.
    b = 0.9
    assert a0["i"] == pytest.approx(b**4 - (b**3 + b**4) / 3, abs=1e-9)
    printed = {w[0]: float(w[2]) for w in run_shown_code(at)}
    assert printed["i"] == pytest.approx(b**4 - (b**3 + b**4) / 3, abs=6e-4)
    go(at, 4)
    at.select_slider(key="learn_k").set_value("1").run()
    ok(at)
    tex = [e.value for e in at.get("latex")]
    assert len(tex) == 1 and r"\cdot 0.9\cdot" in tex[0]  # the backup uses the chosen β


def test_add_a_rollout_through_an_anchor_and_its_code():
    at = go(learn(), 1)
    at.selectbox(key="learn_add_at_toy").set_value("t3@1").run()  # s4, as t3 reaches it
    assert at.selectbox(key="learn_add_at_toy").format_func("t3@1").startswith("s4 · via t3, step 1")
    at.button_group(key="learn_add_end_toy").set_value("S").run()
    at.button(key="learn_add_btn_toy").click().run()
    ok(at)
    assert metrics(at)["rollouts"] == "5" and metrics(at)["successes"] == "3"
    assert at.query_params["add"] == "t3@1:S"
    code = [c.value for c in at.code if "crbc_viz" in c.value][0]
    assert "add=[('t3', 1, True)]" in code
    heat = figures(at)[0]["data"][0]
    page = {y.split()[0]: float(y.split()[-1]) for y in heat["y"]}
    assert {w[0]: float(w[1]) for w in run_shown_code(at)} == pytest.approx(page, abs=0.006)
    assert "new1" in page and any("The largest change:" in m.value for m in at.markdown)
    at.multiselect(key="learn_add_toy").unselect("t3@1:S").run()  # its × removes it
    ok(at)
    assert metrics(at)["rollouts"] == "4" and "add" not in at.query_params
