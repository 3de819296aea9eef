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
    subprocess.run([sys.executable, "-m", "crbc_viz", "ingest", str(ROOT / "sample_rollouts/sokoban/sokoban.jsonl"),
                    "--store", str(st_dir), "-q"], check=True, cwd=ROOT, capture_output=True)
    return root, st_dir


def _app(monkeypatch, allowed):
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(allowed))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("app_pages/training.py")
    at.run()
    return at


def test_trends_search_and_lookup(store, monkeypatch):
    root, st_dir = store
    at = _app(monkeypatch, root)
    at.text_input(key="training_store").set_value(str(st_dir)).run()
    assert not at.exception and not at.error
    assert at.query_params["store"] == str(st_dir)
    assert any("train_step 0" in s.value for s in at.subheader)
    at.text_input(key="training_search").set_value("PUSH LEFT").run()   # case-insensitive
    assert any(re.match(r"[1-9]\d* step\(s\)", c.value) for c in at.caption)   # found some
    at.text_input(key="training_traj").set_value("r3").run()
    assert any("of trajectory id 'r3'" in c.value for c in at.caption)
    assert not at.exception


def test_store_outside_allowed_roots_is_refused(store, monkeypatch, tmp_path):
    _, st_dir = store
    at = _app(monkeypatch, tmp_path)          # the store's folder is not an allowed root
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
