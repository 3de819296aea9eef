"""Getting around Across training: every control is in the URL (a link restores it), the trend
hover names every run drawn at a point and a click there keeps the chosen run, and "Find steps"
shows numbers as numbers, no internal columns, and a trajectory at the chosen run and step."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.views.training import drill_target, point_targets, point_ties, steps_table, trends_figure
from helpers import ROOT

RUNS = ("alpha", "beta")
STEPS = (0, 1)


def _rows():
    """Two runs × two train steps × two groups × two rollouts of two steps; every trajectory id
    (``t0``, ``t1``) repeats in every run, step and group; rewards are negative until the end."""
    for run in RUNS:
        for ts in STEPS:
            for g in ("g0", "g1"):
                for r in range(2):
                    for i in range(2):
                        yield {
                            "run_id": run,
                            "train_step": ts,
                            "group_id": g,
                            "traj_id": f"t{r}",
                            "step_idx": i,
                            "action": "-go" if i == 0 else "stop",
                            "anchor_obs": f"{g} cell {i}",
                            "reward": -0.25 if i == 0 else float(r == 0),
                            "done": i == 1,
                            "success": r == 0,
                        }


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    log = root / "two_runs.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    st_dir = root / "store"
    subprocess.run(
        [sys.executable, "-m", "crbc_viz", "ingest", str(log), "--store", str(st_dir), "-q"],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    return root, st_dir


def _app(monkeypatch, root, query: dict) -> AppTest:
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update(query)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_every_training_control_is_in_the_url(store, monkeypatch):
    root, st_dir = store
    at = _app(monkeypatch, root, {"store": str(st_dir)})
    at.selectbox(key="training_group").set_value("g1").run()
    at.multiselect(key="training_runs").set_value(["beta"]).run()
    at.multiselect(key="training_metrics").set_value(["success_rate", "disagreement"]).run()
    at.text_input(key="training_search").set_value("stop").run()
    at.text_input(key="training_traj").set_value("t1").run()
    assert not at.exception
    q = dict(at.query_params)
    got = {k: (v[0] if isinstance(v, list) else v) for k, v in q.items()}
    assert got["tgroup"] == "g1"
    assert got["truns"] == "beta"
    assert got["metrics"] == "success_rate,disagreement"
    assert got["find"] == "stop" and got["traj"] == "t1"


def test_a_link_restores_the_training_controls(store, monkeypatch):
    root, st_dir = store
    at = _app(
        monkeypatch,
        root,
        {"store": str(st_dir), "run": "beta", "tstep": "0", "tgroup": "g1", "metrics": "success_rate"},
    )
    assert at.selectbox(key="training_group").value == "g1"
    assert at.selectbox(key="training_run").value == "beta"
    assert at.multiselect(key="training_metrics").value == ["success_rate"]
    # A value the page cannot show is refused by name, and the default is shown.
    at2 = _app(monkeypatch, root, {"store": str(st_dir), "tgroup": "nope"})
    assert at2.selectbox(key="training_group").value == "g0"
    assert any("tgroup = 'nope'" in w.value for w in at2.warning)


def test_trajectory_lookup_is_scoped_and_numbers_stay_numbers(store, monkeypatch):
    root, st_dir = store
    at = _app(monkeypatch, root, {"store": str(st_dir), "run": "beta", "tstep": "0", "traj": "t1"})
    frames = [d.value for d in at.dataframe]
    found = [f for f in frames if "traj_id" in f.columns]
    assert len(found) == 1, [list(f.columns) for f in frames]
    rows = found[0]
    # t1 exists in both runs and both steps: 2 groups × 2 steps at (beta, 0) only.
    assert len(rows) == 4
    assert set(rows["run_id"]) == {"beta"} and set(rows["train_step"].tolist()) == {0}
    assert not [c for c in rows.columns if str(c).startswith("_")], list(rows.columns)
    assert pd.api.types.is_numeric_dtype(rows["reward"]), rows["reward"].dtype
    assert sorted(rows["reward"].tolist()) == [-0.25, -0.25, 0.0, 0.0]
    # The text search: numbers as numbers, a formula-like action cell still guarded.
    at.text_input(key="training_search").set_value("go").run()
    hits = [d.value for d in at.dataframe if "action" in d.value.columns][0]  # drawn first
    assert pd.api.types.is_numeric_dtype(hits["reward"]) and set(hits["reward"]) == {-0.25}
    assert set(hits["action"]) == {"'-go"}


def test_steps_table_hides_internal_columns_and_scopes():
    df = pd.DataFrame(
        {
            "_part": ["p0", "p0", "p1"],
            "_row": [0, 1, 0],
            "_source": ["a", "a", "b"],
            "step_idx": [0, 1, 0],
            "run_id": ["r", "r", "s"],
            "train_step": [5, 5, 5],
            "reward": [-1.5, 2.0, 3.0],
            "extra": [[1, 2], "x", None],
        }
    )
    t = steps_table(df, run="r", train_step=5)
    assert list(t.columns) == ["run_id", "train_step", "step_idx", "reward", "extra"]
    assert t["reward"].tolist() == [-1.5, 2.0] and t["reward"].dtype.kind == "f"
    assert t["extra"].tolist() == ["[1, 2]", "x"]


def _two_runs_tied():
    # alpha and beta share the point (train_step 2, success 0.5); gamma is elsewhere.
    return pd.DataFrame(
        {
            "run_id": ["alpha", "alpha", "beta", "beta", "gamma", "gamma"],
            "train_step": [1, 2, 1, 2, 1, 2],
            "success_rate": [0.25, 0.5, 0.75, 0.5, 0.0, 0.9],
        }
    )


def test_hover_names_every_run_at_a_shared_point():
    fig = trends_figure(_two_runs_tied(), ["success_rate"])
    by_run = {tr.meta["run_id"]: tr for tr in fig.data}
    hover = {run: [list(c) for c in tr.customdata] for run, tr in by_run.items()}
    assert hover["alpha"] == [["alpha", ""], ["alpha", "<br>same point: beta"]]
    assert hover["beta"] == [["beta", ""], ["beta", "<br>same point: alpha"]]
    assert hover["gamma"] == [["gamma", ""], ["gamma", ""]]
    assert all("%{customdata[1]}" in tr.hovertemplate for tr in fig.data)


def test_click_on_a_shared_point_keeps_the_chosen_run():
    fig = trends_figure(_two_runs_tied(), ["success_rate"])
    targets, ties = point_targets(fig), point_ties(fig)
    beta = targets.index("beta")  # drawn after alpha: on top, the trace plotly reports
    point = {"curve_number": beta, "x": 2, "y": 0.5}
    assert drill_target(targets, point, ties, current="alpha") == ("alpha", 2)
    assert drill_target(targets, point, ties, current="gamma") == ("beta", 2)
    # Not a shared point: the clicked trace's run, whatever was chosen.
    assert drill_target(targets, {"curve_number": beta, "x": 1}, ties, current="alpha") == ("beta", 1)


def test_run_names_in_the_hover_are_inert():
    steps = _two_runs_tied().replace({"run_id": {"gamma": "<b>%{y}</b>"}})
    fig = trends_figure(steps, ["success_rate"])
    tr = next(t for t in fig.data if t.meta["run_id"] == "<b>%{y}</b>")
    assert tr.customdata[0][0] == "&lt;b&gt;%&#123;y}&lt;/b&gt;"
    assert "<b>" not in tr.hovertemplate


def test_disagree_most_ranks_by_the_absolute_gap():
    from crbc_viz.views.compare import top_disagreements

    # Ranks tie everywhere (A constant but for one step); the gaps are read off by hand.
    df = pd.DataFrame(
        {
            "step": [0, 1, 2, 3, 4],
            "A": [0.0, 0.0, 0.0, 0.0, 1.0],
            "B": [0.0, -3.0, 0.5, float("nan"), 1.25],
        }
    )
    top = top_disagreements(df, "A", "B", k=3)
    assert top["step"].tolist() == [1, 2, 4]
    assert top["gap"].tolist() == [3.0, 0.5, 0.25]


def _compare(at_query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update(at_query)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/compare.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_compare_tables_lead_with_both_values_and_undefined_is_a_dash():
    at = _compare({"file": "sample_rollouts/toy/toy_group.jsonl", "a": "crbc", "b": "shortest_path"})
    top = [d for d in at.dataframe if "traj_id" in d.value.columns and "gap" in d.value.columns]
    assert top, [list(d.value.columns) for d in at.dataframe]
    cols = list(top[0].value.columns)
    assert cols[:4] == ["t", "crbc", "shortest_path", "gap"], cols
    gaps = top[0].value["gap"].tolist()
    assert gaps == sorted(gaps, reverse=True) and all(g > 0 for g in gaps)
    at.session_state["cmp_groups_open"] = True  # the per-group table's panel (drawn when open)
    at.run()
    per = [d for d in at.dataframe if "spearman" in d.value.columns]
    assert per
    shown = per[0].value[["spearman", "disagreement"]].to_numpy().ravel().tolist()
    assert all(re.fullmatch(r"-?\d\.\d{3}|—", v) for v in shown), shown


def test_undefined_disagreement_is_a_dash_in_the_drill_down():
    from crbc_viz.views.training import groups_table

    g = pd.DataFrame(
        {
            "run_id": ["r", "r"],
            "train_step": [3, 3],
            "group_id": ["g0", "g1"],
            "rollouts": [4, 4],
            "success_rate": [0.5, 1.0],
            "disagreement": [float("nan"), 0.25],
        }
    )
    t = groups_table(g)
    assert list(t.columns)[:3] == ["group", "disagreement", "success"]
    assert t["disagreement"].tolist() == ["—", "0.250"]
    assert t["success"].tolist() == [0.5, 1.0]
