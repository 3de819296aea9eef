"""A refused reference names what the visitor asked for, never the server's layout: no data
root, no upload folder, no folder of the app's install in what a page shows (the folders go to
the server's log; the Data page's help names those inside the app's folder, relative to it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.ui import files

REPO = Path(__file__).resolve().parents[2]


def _server_paths(root: Path) -> list[str]:
    return [
        str(root),
        str(root.resolve()),
        str(files.UPLOAD_DIR),
        str(Path(files.UPLOAD_DIR).resolve()),
        str(REPO),
    ]


def _shown(at: AppTest) -> list[str]:
    """Every message the page shows (main area and sidebar)."""
    out = []
    for where in (at, at.sidebar):
        for kind in ("error", "warning", "info", "success", "caption", "markdown"):
            out += [str(e.value) for e in getattr(where, kind)]
    return out


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "private-data-root"
    root.mkdir()
    monkeypatch.setenv(files.ENV_ROOTS, str(root))
    return root


@pytest.mark.parametrize("asked", ["/etc/passwd", "store:/etc::a/0/b", "../../../../../../etc/hosts.jsonl"])
def test_a_refused_file_link_names_the_link_not_the_server_folders(root, asked):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params.update({"file": asked})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    refusals = [e.value for e in at.sidebar.error if "outside the allowed data folders" in e.value]
    assert refusals, [e.value for e in at.sidebar.error]
    assert (asked.removeprefix("store:").split("::")[0]) in refusals[0], refusals[0]
    leaks = [(p, s) for s in _shown(at) for p in _server_paths(root) if p in s]
    assert not leaks, leaks


def test_a_refused_store_names_the_folder_not_the_server_folders(root):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    at.text_input(key="training_store").set_value("/tmp").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and "'/tmp' is outside the allowed data folders" in at.error[0].value, at.error
    leaks = [(p, s) for s in _shown(at) for p in _server_paths(root) if p in s]
    assert not leaks, leaks


def test_the_data_page_help_names_only_the_folders_inside_the_app(root):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/data.py")
    at.run()
    at.radio(key="data_source").set_value("Server path").run()
    help_text = at.text_input(key="server_path").proto.help
    assert "sample_rollouts" in help_text and "1 more set in $CRBC_VIZ_DATA_ROOTS" in help_text, help_text
    assert root.name not in help_text, help_text
    assert not [p for p in _server_paths(root) if p in help_text], help_text
