"""The Learn page through `streamlit.testing.v1.AppTest`: every lesson, the deep link, the K
control, flipping an outcome, dropping a rollout, the rare-route sliders and the weights."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz import teaching as T

REPO = Path(__file__).resolve().parents[2]
PAGE = "crbc_viz/app/app_pages/learn.py"
TIMEOUT = 120


def learn(lesson: int | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    if lesson is not None:
        at.query_params["lesson"] = str(lesson)
    at.switch_page(PAGE)
    at.run()
    ok(at)
    return at


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def go(at: AppTest, lesson: int, data: str | None = "toy") -> AppTest:
    at.radio(key="learn_lesson").set_value(lesson).run()
    ok(at)
    if data is not None:
        at.radio(key="learn_data").set_value(data).run()
        ok(at)
    assert at.query_params.get("lesson", "1") == str(lesson)  # lesson 1 is the default
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _decode(x):
    """plotly ≥ 6 ships numpy arrays as ``{"dtype", "bdata"[, "shape"]}``; turn them back."""
    if isinstance(x, dict) and "bdata" in x and "dtype" in x:
        a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
        if "shape" in x:
            a = a.reshape([int(n) for n in str(x["shape"]).split(",")])
        return a.tolist()
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def figures(at: AppTest) -> list[dict]:
    return [_decode(json.loads(e.proto.spec)) for e in at.get("plotly_chart")]


def configs(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.config) for e in at.get("plotly_chart")]


def test_every_lesson_on_both_data_sets():
    at = learn()
    assert at.radio(key="learn_lesson").value == 1
    for n in range(1, 7):
        for data in ("toy", "sokoban") if n != 5 else (None,):
            go(at, n, data)
            assert at.header[0].value.startswith(f"{n}. {T.LESSONS[n - 1].title}")
            assert any(T.LESSONS[n - 1].try_it in m.value for m in at.markdown)
            # every lesson shows one interactive figure (a chart or the graph iframe)
            assert len(at.get("plotly_chart")) + len(at.get("iframe")) >= 1
    for cfg in configs(at):
        assert cfg["toImageButtonOptions"]["format"] == "svg"


def test_deep_link_opens_the_lesson_and_export_format():
    at = learn(lesson=4)
    assert at.radio(key="learn_lesson").value == 4
    assert at.select_slider(key="learn_k").value == "0"
    at.button_group(key="learn_export").set_value("png").run()
    ok(at)
    assert all(c["toImageButtonOptions"]["format"] == "png" for c in configs(at))
    bad = learn(lesson=99)
    assert bad.radio(key="learn_lesson").value == 1


def test_lesson1_flip_an_outcome_moves_the_blame():
    at = go(learn(), 1)
    before = metrics(at)
    heat = figures(at)[0]["data"][0]["z"]
    assert before["successes"] == "2"
    at.multiselect(key="learn_flip_toy").select("t3").run()
    ok(at)
    after = metrics(at)
    assert after["successes"] == "3"
    heat2 = figures(at)[0]["data"][0]["z"]
    assert heat2 != heat
    assert heat2[2][0] > 0 > heat[2][0]  # t3's row turned from blame to praise
    at.button(key="learn_reset_toy").click().run()
    ok(at)
    assert metrics(at)["successes"] == "2"


def test_lesson2_highlight_and_drop_a_rollout():
    at = go(learn(), 2)
    assert metrics(at)["steps"] == "15" and metrics(at)["anchors"] == "5"
    sb = at.selectbox(key="learn_highlight")
    sb.select(sb.options[2]).run()
    ok(at)
    at.multiselect(key="learn_drop_toy").select("t4").run()
    ok(at)
    assert metrics(at)["steps"] == "10"
    assert (
        at.selectbox(key="learn_highlight").value == "(none)"
        or len(at.selectbox(key="learn_highlight").options) == 4
    )


def test_lesson3_anchor_preview_and_flip():
    at = go(learn(), 3)
    anchor = at.selectbox(key="learn_anchor_toy")
    assert anchor.format_func(anchor.value).startswith("s4")  # K = 0 and ∞ disagree there
    table = at.dataframe[0].value
    a0 = dict(zip(table["action"], table["A⁰ = Q⁰ − V⁰"]))
    assert a0["i"] == pytest.approx(0.3012, abs=1e-4)
    at.toggle(key="learn_preview").set_value(True).run()
    ok(at)
    names = [t.get("name") for t in figures(at)[0]["data"]]
    assert "closure Q(s,a) (lesson 4)" in names
    at.multiselect(key="learn_flip_toy").select("t3").run()  # g now succeeds too: i loses
    ok(at)
    vl = next(d.value for d in at.dataframe if "action" in d.value.columns)  # after the changes table
    a0_after = dict(zip(vl["action"], vl["A⁰ = Q⁰ − V⁰"]))
    assert a0_after["i"] < 0 < a0["i"]


def test_lesson4_k_control_and_bound():
    at = go(learn(), 4)
    m0 = metrics(at)
    gap0, bound0 = float(m0["largest gap to the closure"]), float(m0["guaranteed bound on the gap"])
    assert 0 < gap0 <= bound0
    seen = [gap0]
    for k in ("1", "2", "3", "10"):
        at.select_slider(key="learn_k").set_value(k).run()
        ok(at)
        m = metrics(at)
        gap, bound = float(m["largest gap to the closure"]), float(m["guaranteed bound on the gap"])
        assert gap <= bound < bound0
        seen.append(gap)
    assert seen[-1] < 1e-3 < seen[0]
    at.select_slider(key="learn_k").set_value("1").run()
    assert int(metrics(at)["anchors whose V moved at this step"]) >= 1
    fig = figures(at)[0]
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert any(t.get("name") == "K = 1" for t in fig["data"])
    at.select_slider(key="learn_k").set_value("∞").run()
    ok(at)
    assert float(metrics(at)["largest gap to the closure"]) == 0.0
    # Editing the data recomputes the bound from scratch.
    at.select_slider(key="learn_k").set_value("0").run()
    at.multiselect(key="learn_drop_toy").select("t2").run()
    ok(at)
    assert float(metrics(at)["guaranteed bound on the gap"]) != bound0
    at.radio(key="learn_data").set_value("sokoban").run()
    ok(at)
    at.select_slider(key="learn_k").set_value("5").run()
    ok(at)
    # The graph's two stacked layers: this K's drawing and the one before it (swapped in place).
    pages = [f.proto.srcdoc for f in at.get("iframe")]
    assert len(pages) == 2 and sum("crbc K = 5" in p for p in pages) == 1, [p[:80] for p in pages]


def _jump_credit(at: AppTest) -> dict[str, float]:
    bars = figures(at)[0]["data"][0]
    assert bars["name"] == T.TRAP_ACTION
    by_label = dict(zip(bars["x"], bars["y"]))
    return {"shortest_path": by_label["shortest path (GraphGPO)"], "crbc": by_label["CRBC closure (K = ∞)"]}


def test_lesson5_rare_route_trap_and_sliders():
    at = go(learn(), 5, None)
    c = _jump_credit(at)
    assert c["shortest_path"] > 0 > c["crbc"]
    routes = at.dataframe[0].value
    assert list(routes["taken"]) == [4, 4] and list(routes["succeeded"]) == [1, 3]
    at.slider(key="learn_rr_lucky").set_value(4).run()  # the jump now always lands
    ok(at)
    c = _jump_credit(at)
    assert c["shortest_path"] > 0 and c["crbc"] > 0
    at.slider(key="learn_rr_jump").set_value(2).run()  # lucky is clamped to 2
    ok(at)
    assert at.slider(key="learn_rr_lucky").value == 2
    at.slider(key="learn_rr_lucky").set_value(1).run()
    at.multiselect(key="learn_drop_rare_route").select("j1").run()  # drop the failed jump
    ok(at)
    c = _jump_credit(at)
    assert c["crbc"] > 0  # now it always landed
    at.multiselect(key="learn_flip_rare_route").select("j0").run()
    ok(at)
    assert _jump_credit(at)["crbc"] < 0


def test_lesson6_weights_sigma_and_gate():
    at = go(learn(), 6)
    fig = figures(at)[0]
    group_term, step_term, total = (fig["data"][i]["y"] for i in range(3))
    assert any(abs(s) > 1e-9 for s in step_term)
    at.slider(key="learn_ws").set_value(0.0).run()  # w_S = 0: back to GRPO
    ok(at)
    fig = figures(at)[0]
    assert fig["data"][2]["y"] == pytest.approx(fig["data"][0]["y"])
    at.slider(key="learn_ws").set_value(5.0).run()
    table = at.dataframe[0].value
    s0a = table[table["anchor · action"] == "s0 · a"]["Aˢ"].iloc[0]
    assert s0a == pytest.approx(0.0699, abs=1e-4)  # §14.4, σ_min = 0.1
    at.select_slider(key="learn_smin").set_value(0.001).run()
    ok(at)
    table = at.dataframe[0].value
    assert table[table["anchor · action"] == "s0 · a"]["Aˢ"].iloc[0] == pytest.approx(1.0, abs=1e-3)
    at.slider(key="learn_gate").set_value(3).run()  # no toy anchor has 3 actions
    ok(at)
    assert all(abs(v) < 1e-12 for v in at.dataframe[0].value["Aˢ"])
    at.radio(key="learn_data").set_value("sokoban").run()
    ok(at)
    assert at.selectbox(key="learn_comb_traj_sokoban").value in ("r2", "r3")
    at.multiselect(key="learn_flip_sokoban").select("r2").run()
    ok(at)


def test_lesson_state_is_in_the_link_and_restores():
    at = go(learn(), 4, "sokoban")
    at.button(key="learn_k_next").click().run()
    at.button(key="learn_k_next").click().run()
    ok(at)
    assert at.select_slider(key="learn_k").value == "2"
    at.button(key="learn_k_prev").click().run()
    assert at.select_slider(key="learn_k").value == "1"
    at.multiselect(key="learn_flip_sokoban").select(at.multiselect(key="learn_flip_sokoban").options[0]).run()
    ok(at)
    link = dict(at.query_params)
    assert link["lesson"] == "4" and link["data"] == "sokoban" and link["lk"] == "1" and link["flip"]
    fresh = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in link.items():
        fresh.query_params[k] = v
    fresh.switch_page(PAGE)
    fresh.run()
    ok(fresh)
    assert fresh.radio(key="learn_lesson").value == 4
    assert fresh.radio(key="learn_data").value == "sokoban"
    assert fresh.select_slider(key="learn_k").value == "1"
    assert fresh.multiselect(key="learn_flip_sokoban").value == link["flip"].split(",")


def test_play_backs_up_to_the_closure_and_next_lesson_button():
    at = go(learn(), 4)
    for _ in range(len(T.LESSONS) and 3):
        at.button(key="learn_k_next").click().run()
    assert at.select_slider(key="learn_k").value == "3"
    at.session_state["learn_k"] = "20"
    at.run()
    at.button(key="learn_k_next").click().run()  # 20 → ∞ stops a play
    assert at.select_slider(key="learn_k").value == "∞"
    assert at.toggle(key="learn_play").value is False
    at.button(key="learn_next").click().run()
    ok(at)
    assert at.radio(key="learn_lesson").value == 5
    at.button(key="learn_next").click().run()
    assert at.radio(key="learn_lesson").value == 6
    assert not [b for b in at.button if b.key == "learn_next"]  # the last lesson has none


def test_lesson6_labels_steps_apart_from_rollout_names_and_legend_shows_both_signs():
    at = go(learn(), 6)
    fig = figures(at)[0]
    xs = fig["data"][0]["x"]
    assert all(" step " in x for x in xs) and not any(" t0 " in x for x in xs)
    names = [d.get("name", "") for d in fig["data"] if d.get("showlegend", True) is not False]
    assert any("> 0" in n for n in names) and any("< 0" in n for n in names)
