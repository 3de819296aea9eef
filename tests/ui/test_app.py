"""The app through `streamlit.testing.v1.AppTest`: every page, the key interactions, the URL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz import load_rollouts
from crbc_viz.estimators import registry
from crbc_viz.ui.files import default_sample
from crbc_viz.ui.sidebar import PARAMS_OPEN

REPO = Path(__file__).resolve().parents[2]
TOY = "sample_rollouts/toy/toy_group.jsonl"
TIMEOUT = 120


def app_pages() -> list[str]:
    """The page scripts of the router's ``PAGE_SPECS``, as paths relative to the checkout."""
    from crbc_viz.app.router import PAGE_SPECS
    from crbc_viz.ui.links import page_script

    return [str(Path(page_script(name)).relative_to(REPO)) for name, *_ in PAGE_SPECS]


def app(**query) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def text_of(at: AppTest) -> str:
    parts = (
        [m.value for m in at.markdown]
        + [c.value for c in at.caption]
        + [t.value for t in at.title]
        + [h.value for h in at.subheader]
    )
    return "\n".join(str(p) for p in parts)


def test_default_view_every_page():
    at = app()
    ok(at)
    sample = default_sample()
    batch = load_rollouts(REPO / sample)
    groups = next(m for m in at.metric if m.label == "Groups")
    assert groups.value == str(batch.num_groups)
    assert len(at.dataframe) >= 1
    assert at.sidebar.selectbox(key="group_pick").value == batch.group_label(0)
    pages = app_pages()
    assert len(pages) >= 5 and all((REPO / p).is_file() for p in pages), pages
    for page in pages:
        at.switch_page(page).run()
        ok(at)
    assert "estimator" not in at.query_params  # defaults stay out of the link


def test_graph_page_pick_group_estimator_and_trajectory():
    at = app()
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    ok(at)
    first = at.sidebar.selectbox(key="group_pick").value
    at.sidebar.selectbox(key="group_pick").select_index(1).run()
    ok(at)
    label = at.sidebar.selectbox(key="group_pick").value  # the full name (shown shortened)
    assert label != first and at.query_params["group"] == label
    assert label in text_of(at).replace("\\", "")
    at.sidebar.selectbox(key="estimator_pick").select("visit_local").run()
    ok(at)
    assert at.query_params["estimator"] == "visit_local"
    traj = at.selectbox(key="rollout_pick")
    traj.select(traj.options[1]).run()
    ok(at)
    assert at.query_params["rollout"] == at.selectbox(key="rollout_pick").value == "r0"
    at.number_input(key="graph_max_nodes").set_value(20).run()
    ok(at)


def test_deep_link_restores_selection():
    at = app(file=TOY, group="toy/0/toy", estimator="shortest_path")
    ok(at)
    assert at.sidebar.selectbox(key="group_pick").value == "toy/0/toy"
    assert at.sidebar.selectbox(key="estimator_pick").value == "shortest_path"
    assert at.query_params["file"] == TOY


def test_deep_link_with_params_and_bad_values():
    at = app(file=TOY, estimator="crbc", p="beta=0.9;depth=3;nope=1")
    ok(at)
    # The parameter panel starts closed (its widgets not drawn), the link's values in use.
    assert not at.sidebar.number_input and "beta=0.9" in at.query_params["p"]
    assert any("nope" in w.value for w in at.sidebar.warning)
    at.session_state[PARAMS_OPEN] = True
    at.run()
    ok(at)
    assert at.sidebar.number_input(key="param.crbc.beta").value == pytest.approx(0.9)
    assert at.sidebar.select_slider(key="param.crbc.depth").value == 3
    assert "beta=0.9" in at.query_params["p"]


def test_link_outside_allowed_roots_is_refused():
    at = app(file="/etc/passwd")
    ok(at)
    assert any("outside the allowed data folders" in e.value for e in at.sidebar.error)


def test_unknown_group_and_estimator_in_link():
    at = app(file=TOY, group="no/such/group", estimator="nope")
    ok(at)
    warnings = " ".join(w.value for w in at.sidebar.warning)
    assert "'nope'" in warnings and "no/such/group" in warnings
    assert at.sidebar.selectbox(key="estimator_pick").value == "crbc"


def test_parameter_widget_changes_url_and_result():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/graph.py")
    at.session_state[PARAMS_OPEN] = True
    at.run()
    at.sidebar.number_input(key="param.crbc.beta").set_value(0.9).run()
    ok(at)
    assert "beta=0.9" in at.query_params["p"]
    at.sidebar.select_slider(key="param.crbc.depth").set_value(0).run()
    ok(at)
    assert "depth=0" in at.query_params["p"]
    at.sidebar.button(key="reset.crbc").click().run()
    ok(at)
    assert "p" not in at.query_params
    # Closing the panel keeps what its widgets set (their state goes with them).
    at.sidebar.number_input(key="param.crbc.beta").set_value(0.8).run()
    at.session_state[PARAMS_OPEN] = False
    at.run()
    at.run()
    ok(at)
    assert not at.sidebar.number_input and "beta=0.8" in at.query_params["p"]
    at.session_state[PARAMS_OPEN] = True
    at.run()
    assert at.sidebar.number_input(key="param.crbc.beta").value == pytest.approx(0.8)


def test_trajectories_page_pick_rollout_and_step():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    ok(at)
    assert at.multiselect(key="traj_estimators").value == ["crbc", "visit_local", "shortest_path"]
    at.selectbox(key="rollout_pick").select("t4").run()
    ok(at)
    at.selectbox(key="step_pick").select(2).run()
    ok(at)
    assert (at.query_params["rollout"], at.query_params["step"]) == ("t4", "2")
    alt = at.dataframe[-1].value
    assert sorted(alt["action"]) == ["g", "i"]  # τ4 = s0 -f→ s4 -i→ s4 -g→ …: t2 is at s4
    at.multiselect(key="traj_estimators").set_value(["grpo", "crbc"]).run()
    ok(at)


def test_compare_page_estimators_and_depth():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    ok(at)
    assert len(at.get("plotly_chart")) == 1  # the heavy sections wait until they are opened
    at.toggle(key="cmp_depth_open").set_value(True).run()
    ok(at)
    assert len(at.get("plotly_chart")) == 3
    at.selectbox(key="cmp_b").select("visit_local").run()
    ok(at)
    at.selectbox(key="cmp_q").select("advantage").run()
    ok(at)
    for k in (5, "∞", 0):
        at.select_slider(key="cmp_k").set_value(k).run()
        ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["‖A^∞ − A^(K)‖∞"]) > 0  # K = 0 differs from the closure on the toy group
    at.selectbox(key="cmp_a").select("shortest_path").run()
    at.selectbox(key="cmp_b").select("shortest_path").run()
    ok(at)


def test_estimators_page_has_a_card_per_estimator():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/estimators.py").run()
    ok(at)
    titles = [s.value for s in at.subheader]
    assert titles == [s.title for s in registry.specs()]
    assert len(at.code) >= 2 * len(registry.specs())  # equation + source


def test_data_page_server_path_and_group_table():
    at = app()
    at.radio(key="data_source").set_value("Server path").run()
    at.text_input(key="server_path").input(str(REPO / TOY)).run()
    ok(at)
    assert at.sidebar.selectbox(key="group_pick").value == "toy/0/toy"
    assert at.query_params["file"] == TOY
    at.text_input(key="server_path").input("/etc/hostname").run()
    ok(at)
    assert any("outside the allowed" in e.value for e in at.error)
    at.radio(key="data_source").set_value("Bundled sample").run()
    ok(at)
    at.radio(key="data_source").set_value("Upload").run()
    ok(at)


@dataclass(frozen=True)
class _NoParams:
    pass


def _needs_signal(graph, params):
    raise registry.MissingSignalError("needs_gold", ["gold_logprob"])


@pytest.fixture
def signal_estimator():
    spec = registry.EstimatorSpec(
        name="needs_gold",
        title="Test: needs a logged signal",
        paper="—",
        equation="—",
        section="test",
        kernel=_needs_signal,
        params_cls=_NoParams,
        requires=("gold_logprob",),
    )
    registry.register(spec)
    try:
        yield spec
    finally:
        registry._REGISTRY.pop(spec.name, None)


def test_missing_signal_is_a_message_not_a_traceback(signal_estimator):
    at = app(file=TOY, estimator="needs_gold")
    for page in (
        "crbc_viz/app/app_pages/graph.py",
        "crbc_viz/app/app_pages/trajectories.py",
        "crbc_viz/app/app_pages/compare.py",
    ):
        at.switch_page(page).run()
        ok(at)
        if page.endswith("trajectories.py"):
            at.multiselect(key="traj_estimators").set_value(["crbc", "needs_gold"]).run()
            ok(at)
        if page.endswith("compare.py"):
            at.selectbox(key="cmp_a").select("needs_gold").run()
            ok(at)
        assert any("gold_logprob" in w.value for w in at.warning), page


def _refuses_input(graph, params):
    from crbc_viz.errors import EstimatorInputError

    raise EstimatorInputError(
        "refuser: field 'is_error' must be true, got False at group 'toy/0/toy', traj 't1', step 0"
    )


@pytest.fixture
def refusing_estimator():
    spec = registry.EstimatorSpec(
        name="refuser",
        title="Test: refuses its input",
        paper="—",
        equation="—",
        section="test",
        kernel=_refuses_input,
        params_cls=_NoParams,
    )
    registry.register(spec)
    try:
        yield spec
    finally:
        registry._REGISTRY.pop(spec.name, None)


def test_compare_shows_a_refusal_as_one_line_and_the_other_estimator(refusing_estimator):
    """A refused estimator is one warning line naming the row (no class name, no traceback);
    the other estimator of the pair is still shown, step by step."""
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    at.selectbox(key="cmp_a").select("refuser").run()
    at.selectbox(key="cmp_b").select("crbc").run()
    ok(at)
    warned = [w.value for w in at.warning]
    assert any("**refuser** — refuser: field 'is_error' must be true" in w and "step 0" in w for w in warned)
    assert not any("EstimatorInputError" in w for w in warned), warned
    alone = [d.value for d in at.dataframe if "crbc" in d.value.columns]
    assert alone and len(alone[0]) == 3 + 3 + 4 + 5, alone  # every step of the toy group (§14.1)


def test_every_registered_estimator_renders():
    """Each estimator's parameter widgets build, and its output (or its message) is placed."""
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    for name in registry.names():
        at.sidebar.selectbox(key="estimator_pick").select(name).run()
        ok(at)
        assert at.query_params.get("estimator", "crbc") == name
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    at.multiselect(key="traj_estimators").set_value(registry.names()[:6]).run()
    ok(at)


def test_file_rules(tmp_path, monkeypatch):
    from crbc_viz.ui import files

    assert files.resolve_data_path(TOY) == (REPO / TOY).resolve()
    for bad in ("/etc/passwd", "sample_rollouts/../pyproject.toml", str(tmp_path / "x.jsonl")):
        with pytest.raises(ValueError, match="outside the allowed"):
            files.resolve_data_path(bad)
    (tmp_path / "x.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("x")
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    assert files.resolve_data_path(str(tmp_path / "x.jsonl")) == (tmp_path / "x.jsonl").resolve()
    with pytest.raises(ValueError, match="unsupported file type"):
        files.resolve_data_path(str(tmp_path / "notes.txt"))
    with pytest.raises(ValueError, match="does not exist"):
        files.resolve_data_path(str(tmp_path / "missing.jsonl"))
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    saved = files.save_upload("run.JSONL.gz", b"abc")
    assert saved.name.endswith(".jsonl.gz") and saved.read_bytes() == b"abc"
    assert files.save_upload("again.jsonl.gz", b"abc") == saved  # content-addressed
    with pytest.raises(ValueError, match="unsupported"):
        files.save_upload("evil.html", b"<script>")
    monkeypatch.setattr(files, "MAX_UPLOAD_MB", 0)
    with pytest.raises(ValueError, match="limit"):
        files.save_upload("big.jsonl", b"x")
    assert files.default_sample(["a/toy/t.jsonl", "b/sokoban/s.jsonl.gz"]) == "b/sokoban/s.jsonl.gz"
    assert files.default_sample(["a/toy/t.jsonl", "c/other.jsonl"]) == "a/toy/t.jsonl"


# ---------------------------------------------------------------- the view is the URL
def test_every_control_is_in_the_link_and_restores_it():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    at.selectbox(key="rollout_pick").select("t3").run()
    at.selectbox(key="step_pick").select(3).run()
    at.selectbox(key="cmp_b").select("grpo").run()
    at.selectbox(key="cmp_q").select("advantage").run()
    at.toggle(key="cmp_depth_open").set_value(True).run()
    at.select_slider(key="cmp_k").set_value(4).run()
    at.toggle(key="cmp_all_open").set_value(True).run()
    ok(at)
    link = dict(at.query_params)
    assert link == {
        "file": TOY,
        "rollout": "t3",
        "step": "3",
        "b": "grpo",
        "q": "advantage",
        "depth": "True",
        "k": "4",
        "all": "True",
    }
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    at.multiselect(key="traj_estimators").set_value(["grpo", "crbc"]).run()
    ok(at)
    assert at.query_params["est"] == "grpo,crbc"
    # A fresh session opened on the link shows the same Compare view.
    fresh = app(**link)
    fresh.switch_page("crbc_viz/app/app_pages/compare.py").run()
    ok(fresh)
    assert fresh.selectbox(key="rollout_pick").value == "t3"
    assert fresh.selectbox(key="step_pick").value == 3
    assert fresh.selectbox(key="cmp_b").value == "grpo"
    assert fresh.selectbox(key="cmp_q").value == "advantage"
    assert fresh.select_slider(key="cmp_k").value == 4
    assert "Chosen: step **t3** of rollout **t3**" in text_of(fresh)


def test_history_step_restores_the_previous_view(monkeypatch):
    """Back / Forward re-run the script with an older query string: the view follows it, and
    fields absent from it go back to their defaults. (The browser marks such a run as a history
    step, which AppTest cannot send: `view._history_step` says so here; without it the older
    query string is a browser that has not shown the latest write, `test_url_lag`.)"""
    from crbc_viz.ui import view

    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    at.selectbox(key="rollout_pick").select("t2").run()
    before = dict(at.query_params)
    at.selectbox(key="rollout_pick").select("t4").run()
    at.selectbox(key="graph_labels").select("off").run()
    assert at.query_params["labels"] == "off"
    at.query_params.clear()
    at.query_params.update(before)  # what the browser sends after Back
    monkeypatch.setattr(view, "_history_step", lambda: True)
    at.run()
    ok(at)
    assert at.selectbox(key="rollout_pick").value == "t2"
    assert at.selectbox(key="graph_labels").value == "auto"
    assert dict(at.query_params) == before


def test_page_switch_keeps_the_view_and_the_selection():
    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    at.selectbox(key="rollout_pick").select("t2").run()
    at.selectbox(key="step_pick").select(1).run()
    for page in (
        "crbc_viz/app/app_pages/graph.py",
        "crbc_viz/app/app_pages/compare.py",
        "crbc_viz/app/app_pages/trajectories.py",
    ):
        at.switch_page(page).run()
        ok(at)
        assert at.selectbox(key="rollout_pick").value == "t2", page
        assert at.selectbox(key="step_pick").value == 1, page
    at.query_params.clear()  # a page switch that dropped the query string
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    assert at.selectbox(key="rollout_pick").value == "t2"


def test_link_with_unknown_selection_is_refused_with_a_message():
    at = app(file=TOY, rollout="nobody", step="99")
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    ok(at)
    assert at.selectbox(key="rollout_pick").value is None
    assert any("nobody" in w.value for w in at.warning)


def test_step_buttons_and_keys_walk_the_rollout():
    from crbc_viz.ui import links

    at = app(file=TOY, rollout="t4", step="0")
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    at.button(key="step_next").click().run()
    at.button(key="step_next").click().run()
    assert at.selectbox(key="step_pick").value == 2
    at.button(key="step_prev").click().run()
    assert at.selectbox(key="step_pick").value == 1
    for _ in range(6):
        at.button(key="step_next").click().run()
    assert at.selectbox(key="step_pick").value == 4  # t4 has 5 steps: clamped at t4
    ok(at)
    assert callable(links.on_key) and callable(links.on_pick)


def test_graph_click_and_cell_click_choose_the_selection(monkeypatch):
    """The click bridge's callbacks, given the trigger values the browser sends."""
    from crbc_viz.ui import links

    state = {
        "_rollout_anchors": {"0": 0, "1": 1},
        "_rollout_ids": ["t1", "t2", "t3", "t4"],
        "step_pick": 0,
        "rollout_pick": "t2",
        "_rollout_len": 3,
    }
    monkeypatch.setattr(links.st, "session_state", state)
    state["crbc_events"] = {"pick": {"kind": "node", "id": "1"}}
    links.on_pick()
    assert (state["anchor_pick"], state["step_pick"]) == ("s1", 1)
    state["crbc_events"] = {"pick": {"kind": "edge", "id": "3->FAILURE"}}
    links.on_pick()
    assert (state["anchor_pick"], state["step_pick"]) == ("s3", 1)  # t2 does not visit s3 first
    state["crbc_events"] = {"pick": {"kind": "step", "id": "2:3"}}
    links.on_pick()
    assert (state["rollout_pick"], state["step_pick"]) == ("t3", 3)
    state["crbc_events"] = {"key": {"dir": -1}}
    links.on_key()
    assert state["step_pick"] == 2
    state["crbc_events"] = {"pick": {"kind": "node", "id": "SUCCESS"}}
    links.on_pick()  # a boundary is not an anchor: nothing changes
    assert state["step_pick"] == 2


def test_why_did_this_fail_lists_failed_rollouts_and_blamed_steps():
    at = app(file=TOY, rollout="t2")
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    ok(at)
    failed = next(d.value for d in at.dataframe if "worst credit [crbc]" in d.value.columns)
    assert failed["rollout"].tolist() == ["t2", "t3"]
    worst = next(d.value for d in at.dataframe if "their actions" in d.value.columns)
    # t2 = s0 -a→ s1 -d→ s3 -e→ FAILURE: d at s1 is its most negative crbc step; the other
    # rollouts through s1 (t1, t3, t4) all took b there, two of them succeeded.
    assert worst.iloc[0]["t"] == 1 and worst.iloc[0]["action"] == "d"
    assert worst.iloc[0]["others there"] == "3 rollouts, 2 succeeded"
    assert worst.iloc[0]["their actions"] == "b: 2/3 succeeded"


def test_compare_all_estimators_marks_the_unrunnable():
    at = app(file=TOY, rollout="t3", all="True")
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    ok(at)
    charts = at.get("plotly_chart")
    assert len(charts) == 3  # scatter, rank matrix, step × estimator heatmap
    warned = " ".join(w.value for w in at.warning)
    for name in ("trace", "abc", "iapo"):
        assert f"**{name}** cannot run" in warned


def test_constant_group_has_no_nan_text(tmp_path, monkeypatch):
    from helpers import write_jsonl

    rows = [
        {
            "run_id": "c",
            "train_step": 0,
            "group_id": "g",
            "traj_id": f"r{i}",
            "step_idx": 0,
            "reward": 0.0,
            "done": True,
            "success": False,
            "action": "x",
            "anchor_obs": "s",
        }
        for i in range(3)
    ]
    path = write_jsonl(tmp_path / "const.jsonl", rows)
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    at = app(file=str(path))
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    ok(at)
    shown = " ".join(str(m.value) for m in at.metric) + text_of(at)
    assert "nan" not in shown.lower() and "None" not in shown
    assert any("undefined" in str(m.value) for m in at.metric)


def test_estimators_page_contents_and_project_reference():
    from crbc_viz.views.reference import anchor_of

    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/estimators.py").run()
    ok(at)
    toc = next(m.value for m in at.markdown if m.value.startswith("**Contents**"))
    doc = (REPO / "docs" / "estimators.md").read_text(encoding="utf-8")
    for spec in registry.specs():
        assert f"(#{anchor_of(spec.title)})" in toc
        assert f"\n## {spec.title}\n" in doc, f"docs/estimators.md lacks {spec.name}: regenerate it"
        for info in registry.param_infos(spec.params_cls):
            assert f"| `{info.name}` |" in doc.split(f"\n## {spec.title}\n")[1].split("\n## ")[0]
    assert anchor_of("CRBC — Cross-Rollout Bellman Closure") == "crbc--cross-rollout-bellman-closure"


def test_sokoban_anchor_is_drawn_as_a_board():
    from crbc_viz.views.board import board_html, is_board

    board = "#####\n#@$.#\n#####"
    html = board_html(board)
    assert is_board(board) and html.count("<tr>") == 3 and html.count("<td") == 15
    assert "#1565c0" in html and "#e0a030" in html and "#d32f2f" in html  # player, box, target
    assert board_html("corridor 2") == "" and board_html("<img src=x>\n#@#\n###") == ""
    at = app(rollout="r0", step="0")  # the default view: the Sokoban sample
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    ok(at)
    assert any("crbc-board" in h.proto.body for h in at.get("html"))


def test_upload_links_are_content_addressed_and_failures_are_errors(tmp_path, monkeypatch):
    from crbc_viz.ui import files
    from crbc_viz.ui.sidebar import FILE_KEY, link_ref

    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    good = files.save_upload("mine.jsonl", (REPO / TOY).read_bytes())
    ref = files.file_ref(good)
    assert link_ref(ref) == "upload:" + good.name
    at = app()
    at.session_state[FILE_KEY] = ref
    at.session_state["data_upload"] = ("mine.jsonl", ref)
    at.run()
    ok(at)
    assert at.query_params["file"] == "upload:" + good.name
    assert any("Opened the upload" in s.value for s in at.success)
    assert any("works on this server" in c.value for c in at.sidebar.caption)
    # The same link in a new session opens the same bytes; an unknown upload says why.
    again = app(file="upload:" + good.name)
    ok(again)
    assert again.sidebar.selectbox(key="group_pick").value == "toy/0/toy"
    gone = app(file="upload:0123456789abcdef0000.jsonl")
    assert any("does not hold" in e.value for e in gone.sidebar.error)
    # A file that uploads but does not load is an error, never "Uploaded" in green.
    bad = files.save_upload("broken.jsonl", b"{not json\n")
    at = app()
    at.session_state[FILE_KEY] = files.file_ref(bad)
    at.session_state["data_upload"] = ("broken.jsonl", files.file_ref(bad))
    at.run()
    ok(at)
    assert not at.success and any("could not be opened" in e.value for e in at.error)


def test_compare_exports_are_named_with_parameters():
    import json

    at = app(file=TOY, estimator="crbc", p="beta=0.9", depth="True")
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    ok(at)
    names = [json.loads(c.proto.config)["toImageButtonOptions"]["filename"] for c in at.get("plotly_chart")]
    assert any("crbc_beta=0.9_" in n and "shortest_path" in n for n in names), names
    assert any("depth-gap" in n for n in names)


def test_step_chosen_with_its_rollout_by_a_click_is_kept():
    """A cell click sets rollout and step in one go (before the step picker exists): the link
    read at session start must not reset the step later."""
    from crbc_viz.ui.selection import STEP_OWNER

    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/trajectories.py").run()
    at.session_state["rollout_pick"] = "t4"
    at.session_state["step_pick"] = 1
    at.session_state[STEP_OWNER] = "t4"
    at.run()
    ok(at)
    assert at.selectbox(key="step_pick").value == 1
    assert (at.query_params["rollout"], at.query_params["step"]) == ("t4", "1")


def test_large_group_focuses_on_the_chosen_rollout(tmp_path, monkeypatch):
    import json

    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    batch = random_mdp_batch(
        num_groups=1, rollouts=16, max_steps=40, num_states=600, p_fail=0.01, seed=3, text=True
    )
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r, default=str) + "\n" for r in batch_to_rows(batch)))
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    at = app(file=str(path))
    at.switch_page("crbc_viz/app/app_pages/graph.py").run()
    ok(at)
    total = int(
        next(c.value for c in at.caption if "anchors · estimator" in c.value)
        .split(" anchors")[0]
        .split("· ")[-1]
    )
    assert total > 150
    assert any("choose a rollout or an anchor" in i.value for i in at.info)
    rid = at.selectbox(key="rollout_pick").options[1]
    at.selectbox(key="rollout_pick").select_index(1).run()
    ok(at)
    assert at.toggle(key="graph_focus").value is True
    shown = next(i.value for i in at.info if i.value.startswith("Showing"))
    assert "the chosen rollout" in shown and int(shown.split()[1]) < total
    at.toggle(key="graph_focus").set_value(False).run()
    ok(at)
    assert at.query_params["focus"] == "False"
    del rid  # noqa


def test_scatter_point_click_chooses_the_step():
    from crbc_viz.ui.selection import step_from_points

    at = app(file=TOY)
    at.switch_page("crbc_viz/app/app_pages/compare.py").run()
    traces = at.session_state["_scatter_steps"]
    # toy: failed rollouts t2 (global steps 3-5) and t3 (6-9), in step order
    assert traces[1] == [3, 4, 5, 6, 7, 8, 9]
    assert step_from_points([{"curve_number": 1, "point_index": 4}], traces) == 7
    assert step_from_points([{"customdata": ["t3", 1, "g", "s4", 7]}], traces) == 7
    assert step_from_points([{"curve_number": 5, "point_index": 0}], traces) is None
    assert step_from_points([], traces) is None
