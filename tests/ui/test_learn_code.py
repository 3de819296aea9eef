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
    table = at.dataframe[0].value
    printed = {w[0]: (float(w[1]), float(w[2])) for w in run_shown_code(at)}
    assert set(printed) == set(table["action"])
    for a, q, adv in zip(table["action"], table["Q⁰(s,a)"], table["A⁰ = Q⁰ − V⁰"]):
        assert printed[a] == pytest.approx((q, adv), abs=TOL)

    go(at, 4)
    at.select_slider(key="learn_k").set_value("3").run()
    ok(at)
    table = at.dataframe[0].value
    printed = by_label(run_shown_code(at))
    page = dict(zip(table["anchor · action"], table["A⁽³⁾"]))
    assert printed == pytest.approx(page, abs=TOL) and page

    go(at, 6)
    table = at.dataframe[0].value
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
    drop = at.multiselect(key="learn_drop_toy")
    assert drop.proto.max_selections == 3  # "select all" cannot drop the 4th
    at.multiselect(key="learn_flip_toy").select("t2").run()
    ok(at)
    labels = at.multiselect(key="learn_drop_toy").options
    assert "t2 (success)" in labels  # t2 failed in the file; flipped, it is a success now


def test_lesson6_gated_column_names_the_single_action_anchor():
    at = go(learn(), 6)
    table = at.dataframe[0].value
    gated = dict(zip(table["anchor · action"], table["gated"]))
    assert gated["s3 · e"] and not gated["s0 · a"]  # s3 saw one action (§14.4: 0, gate)


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


def test_an_edit_names_what_changed_most_for_each_estimator():
    at = go(learn(), 3)
    assert not [m for m in at.markdown if "What changed most" in m.value]
    at.multiselect(key="learn_flip_toy").select("t3").run()
    ok(at)
    line = [m.value for m in at.markdown if "What changed most" in m.value]
    assert len(line) == 1
    assert all(f"{name}:" in line[0] for name in ("GRPO", "visit-local", "CRBC")) and "→" in line[0]


def test_beta_moves_visit_local_credit_and_the_backup():
    at = go(learn(), 3)
    at.select_slider(key="learn_beta").set_value(0.9).run()
    ok(at)
    assert at.query_params["beta"] == "0.9"
    table = at.dataframe[0].value
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
