"""The Graph page's anchor-rule panel (AppTest): for every rule, its preview shows the numbers
``crbc-viz info --anchor-rule`` prints for the same file, the warning names the tasks a batch
scope merges, and applying the rule draws the graph ``crbc-viz score --anchor-rule`` keys (its
anchors in the group: the distinct ``anchor_key`` of the score output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_app import app, ok, text_of

from crbc_viz.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from test_anchor_merge import rows  # noqa: E402

GRAPH = "crbc_viz/app/app_pages/graph.py"
#: (link fields, command-line options)
CASES = {
    "drop": ({"arule": "drop", "adrop": r"\s*session=\w+"}, ["--anchor-drop", r"\s*session=\w+"]),
    "rtmc": ({"arule": "rtmc"}, ["--anchor-rule", "rtmc"]),
    "similar": (
        {"arule": "similar", "athr": "0.85"},
        ["--anchor-rule", "similar", "--anchor-threshold", "0.85"],
    ),
    "tfidf": ({"arule": "tfidf", "athr": "0.5"}, ["--anchor-rule", "tfidf", "--anchor-threshold", "0.5"]),
    "similar-batch": (
        {"arule": "similar", "athr": "0.8", "ascope": "batch", "aclust": "components"},
        [
            "--anchor-rule",
            "similar",
            "--anchor-threshold",
            "0.8",
            "--anchor-scope",
            "batch",
            "--anchor-cluster",
            "components",
        ],
    ),
}


@pytest.fixture
def log(tmp_path, monkeypatch):
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(tmp_path))
    return p


def _info(log, opts, capsys) -> dict:
    capsys.readouterr()
    assert main(["info", str(log), *opts, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["anchor_rule"]


def _group_anchors(log, opts, tmp_path, group="kitchen") -> int:
    out = tmp_path / "s.csv"
    assert main(["score", str(log), *opts, "--backend", "numpy", "-o", str(out)]) == 0
    df = pd.read_csv(out)
    return int(df.loc[df["group_id"] == group, "anchor_key"].nunique())


def _panel_table(at) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if list(d.value.columns) == ["", "exact", "rule"])


@pytest.mark.parametrize("name", list(CASES))
def test_preview_equals_info_and_applying_changes_the_graph(log, tmp_path, capsys, name):
    fields, opts = CASES[name]
    info = _info(log, opts, capsys)
    at = app(file=str(log), group="tasks/0/kitchen", **fields)
    at.switch_page(GRAPH).run()
    ok(at)
    table = _panel_table(at)
    a, b = info["exact"], info["rule"]
    assert table["exact"].tolist() == [
        str(a["anchors"]),
        f"{a['shared_step_fraction']:.3f}",
        f"{a['singleton_rate']:.3f}",
    ]
    assert table["rule"].tolist() == [
        str(b["anchors"]),
        f"{b['shared_step_fraction']:.3f}",
        f"{b['singleton_rate']:.3f}",
    ]
    page = text_of(at)
    m = info["anchors_merged"]
    what = f"{m} merged" if m >= 0 else f"{-m} split"
    assert f"{a['anchors']} → {b['anchors']} anchors ({what})" in page
    c = info["largest_change"]
    assert (
        f"group {c['group']} traj {c['traj_id']} step {c['step_idx']}: {c['credit_exact']:.4g} → {c['credit_rule']:.4g}"
        in page
    )
    warned = [w.value for w in at.warning if "different tasks" in w.value]
    if info["scope"] == "batch":
        assert warned and "tasks/0/kitchen" in warned[0] and "tasks/0/garden" in warned[0]
    else:
        assert not warned

    exact_nodes = _group_anchors(log, [], tmp_path)
    assert f"{exact_nodes} anchors" in page  # not applied yet: the exact graph
    at.toggle(key="graph_anchor_apply").set_value(True).run()
    ok(at)
    want = _group_anchors(log, opts, tmp_path)
    assert want != exact_nodes or name == "tfidf"
    assert f"· {want} anchors ·" in text_of(at)
    assert at.query_params.get("aapply") == "True"


def test_a_bad_rule_is_one_line_and_the_graph_stays_exact(log, tmp_path):
    at = app(file=str(log), group="tasks/0/kitchen", arule="fields", afields="board", aapply="True")
    at.switch_page(GRAPH).run()
    ok(at)
    assert any("missing in every anchor" in e.value for e in at.error), [e.value for e in at.error]
    assert f"· {_group_anchors(log, [], tmp_path)} anchors ·" in text_of(at)
