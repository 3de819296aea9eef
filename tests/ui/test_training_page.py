"""The Across-training page: a store under an allowed root opens, trends and drill-down render,
search and trajectory lookup work; a store outside the allowed roots is refused."""

import re
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from helpers import ROOT


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    st_dir = root / "store"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "crbc_viz",
            "ingest",
            str(ROOT / "sample_rollouts/sokoban/sokoban.jsonl"),
            "--store",
            str(st_dir),
            "-q",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    return root, st_dir


def _app(monkeypatch, allowed):
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(allowed))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    return at


def test_trends_search_and_lookup(store, monkeypatch):
    root, st_dir = store
    at = _app(monkeypatch, root)
    at.text_input(key="training_store").set_value(str(st_dir)).run()
    assert not at.exception and not at.error
    assert at.query_params["store"] == str(st_dir)
    assert any("train_step 0" in s.value for s in at.subheader)
    at.text_input(key="training_search").set_value("PUSH LEFT").run()  # case-insensitive
    assert any(re.match(r"[1-9]\d* step\(s\)", c.value) for c in at.caption)  # found some
    at.text_input(key="training_traj").set_value("r3").run()
    assert any("of trajectory id 'r3'" in c.value for c in at.caption)
    assert not at.exception


def test_store_outside_allowed_roots_is_refused(store, monkeypatch, tmp_path):
    _, st_dir = store
    at = _app(monkeypatch, tmp_path)  # the store's folder is not an allowed root
    at.text_input(key="training_store").set_value(str(st_dir)).run()
    assert at.error and "outside the allowed data folders" in at.error[0].value


def test_counts_add_up_and_run_step_are_in_the_link(store, monkeypatch):
    """One sokoban run of one train_step: the caption says so (not runs × steps summed)."""
    root, st_dir = store
    at = _app(monkeypatch, root)
    at.text_input(key="training_store").set_value(str(st_dir)).run()
    assert not at.exception
    cap = " ".join(c.value for c in at.caption)
    assert "1 run(s) × 1 training steps" in cap, cap
    at.query_params.clear()
    at.query_params.update({"store": str(st_dir), "tstep": "0"})
    at.run()
    assert not at.exception and at.selectbox(key="training_step").value == 0


def test_a_store_group_opens_from_its_link_with_the_file_s_credit(store, monkeypatch):
    """``?file=store:<folder>::run/step/gid`` loads the group from the store itself (no temporary
    file) and the Graph page's CRBC credit equals the credit computed from the log file."""
    import numpy as np

    import crbc_viz
    from crbc_viz.ui import sources

    root, st_dir = store
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(root))
    src = ROOT / "sample_rollouts/sokoban/sokoban.jsonl"
    batch = crbc_viz.load_rollouts(src)
    label = batch.group_labels()[0]
    run, ts, gid = label.split("/", 2)
    ref = sources.store_group_ref(st_dir, run, int(ts), gid)
    assert ref.startswith("store:") and ref.endswith("::" + label)
    got = sources.open_batch(sources.resolve(ref).key)
    want = crbc_viz.score(batch.select_groups([0]), "crbc").advantage
    np.testing.assert_allclose(crbc_viz.score(got, "crbc").advantage, want, atol=1e-12)

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"file": ref})
    at.run()
    at.switch_page("crbc_viz/app/app_pages/graph.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(label in c.value for c in at.sidebar.caption)
    assert not list((ROOT / "tests").glob("**/store-group-*.parquet"))


@pytest.mark.parametrize(
    "ref, why",
    [
        ("store:nowhere", "a store reference reads"),
        ("store:{st}::no/0/such", "no group"),
        ("store:/etc::a/0/b", "outside the allowed data folders"),
    ],
)
def test_a_bad_store_link_says_why(store, monkeypatch, ref, why):
    root, st_dir = store
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"file": ref.format(st=st_dir)})
    at.run()
    assert not at.exception
    assert at.sidebar.error and why in at.sidebar.error[0].value, [e.value for e in at.sidebar.error]


def test_drill_down_shows_a_dash_where_no_advantage_was_logged(store, monkeypatch):
    """The Sokoban sample logs no advantage: the drill-down's |trainer adv| reads "—" (a text
    column, so no cell is flagged as a wrong type), never "None"."""
    import json

    root, st_dir = store
    at = _app(monkeypatch, root)
    at.text_input(key="training_store").set_value(str(st_dir)).run()
    assert not at.exception and not at.error
    table = next(d for d in at.dataframe if "|trainer adv|" in d.value.columns)
    col = table.value["|trainer adv|"].tolist()
    assert col and set(col) == {"—"}, col
    assert "None" not in table.value.astype(str).to_numpy().ravel().tolist()
    assert "Not drawn (no value in the logs): mean |trainer advantage|." in [c.value for c in at.caption]
    config = json.loads(table.proto.columns)
    assert "no advantage" in config["|trainer adv|"]["help"]
    assert config["|trainer adv|"].get("type_config", {}).get("type") != "number", config["|trainer adv|"]
