"""What the Learn page says, read from the rendered page (`streamlit.testing.v1.AppTest`), and
projector mode (``?projector=1``): the wording a lecturer reads aloud must match the numbers on
screen. Expected values come from ESTIMATORS.md §14.4 and from counting the rare-route data."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from test_learn import PAGE, REPO, TIMEOUT, figures, go, learn, ok

from crbc_viz import teaching as T


def lesson_text(at) -> str:
    return " ".join(m.value for m in at.markdown)


def title(fig: dict) -> str:
    return fig["layout"]["title"]["text"].replace("<br>", " ")


def test_lesson1_defines_the_mark_once_and_marks_what_it_says():
    at = go(learn(), 1)
    text = lesson_text(at)
    rule = T.MARK_RULE
    # Lesson 1 comes before Q and V are introduced (lesson 3): the rule does not name them.
    assert "Q − V" not in rule and "Q" not in rule.split()
    assert f"▲ marks {rule}" in text
    # No second definition: not "moves the successful rollouts made too" (t3's f is one, and
    # its Q − V is negative), not "good step" in the title.
    assert "successful rollouts made too" not in text
    fig = figures(at)[0]
    assert "good step" not in title(fig) and "3 steps marked ▲" in title(fig)
    assert at.metric[2].label == "steps marked ▲" and rule in at.metric[2].help
    # §14.4: A∞ > 0 at (s0,a), (s1,b), (s4,g). Failed rollouts: t2 = a, d, e; t3 = f, g, b, h.
    heat = fig["data"][0]
    rows = [y.split()[0] for y in heat["y"]]
    marked = {
        (rows[r], heat["x"][c]) for r, row in enumerate(heat["text"]) for c, v in enumerate(row) if "▲" in v
    }
    assert marked == {("t2", "step 0"), ("t3", "step 1"), ("t3", "step 2")}
    assert heat["text"][rows.index("t3")][0] == "f"  # also taken by t4, which succeeded: unmarked


def test_step_columns_are_not_named_like_the_toy_rollouts():
    at = go(learn(), 1)
    heat = figures(at)[0]["data"][0]
    rollouts = {y.split()[0] for y in heat["y"]}
    assert rollouts == {"t1", "t2", "t3", "t4"}
    assert heat["x"] == [f"step {i}" for i in range(5)] and not rollouts & set(heat["x"])
    at = go(at, 3)
    dots = figures(at)[0]["data"][1]
    assert "· step %{customdata[1]}" in dots["hovertemplate"]


def test_lesson4_says_the_bound_not_the_gap_shrinks_like_beta_k():
    at = go(learn(), 4)
    text = lesson_text(at)
    assert "shrinks at least as fast" not in text
    assert "It is the bound that shrinks like $\\beta^K$" in text
    fig_title = title(figures(at)[0])
    assert "Gap to the closure shrinks" not in fig_title
    assert "under a bound that shrinks like β<sup>K</sup>" in fig_title


def test_lesson5_title_follows_the_verdicts():
    at = go(learn(), 5, None)
    assert "opposite verdicts" in title(figures(at)[0])
    # Every walk fails: Q(start, walk) = 0 < Q(start, jump) = β²·1/4 for the closure and the
    # visit-local average, and the ledge is still the shortest way to SUCCESS: all praise it.
    at.slider(key="learn_rr_walk_ok").set_value(0).run()
    ok(at)
    fig = figures(at)[0]
    jump = dict(zip(fig["data"][0]["x"], fig["data"][0]["y"]))
    assert all(v > 0 for v in jump.values())
    assert "opposite" not in title(fig)
    assert f"every estimator here praises ‘{T.TRAP_ACTION}’" in title(fig)


def test_projector_mode_from_the_link():
    at = learn(lesson=3)
    assert at.toggle(key="projector_mode").value is False
    assert at.dataframe and not at.table
    fresh = learn_with({"lesson": "3", "projector": "1"})
    assert fresh.toggle(key="projector_mode").value is True
    assert fresh.table and not fresh.dataframe  # HTML tables: their text is sized by the page's CSS
    fig = figures(fresh)[0]
    assert fig["layout"]["font"]["size"] >= 16 and fig["layout"]["legend"]["font"]["size"] >= 16
    assert any("html { font-size: clamp(16px" in m.value for m in fresh.markdown)
    fresh.toggle(key="projector_mode").set_value(False).run()
    ok(fresh)
    assert "projector" not in dict(fresh.query_params) and fresh.dataframe


def test_refused_projector_value_is_named():
    at = learn_with({"projector": "yes"})
    warnings = " ".join(w.value for w in at.warning)
    assert "projector = 'yes' from the link is refused" in warnings
    assert at.toggle(key="projector_mode").value is False


def learn_with(query: dict) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page(PAGE)
    at.run()
    ok(at)
    return at
