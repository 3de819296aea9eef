"""Uploading a trainer's ``torch.save`` dump (slime ``.pt``, GraphGPO ``.pth``): read in the
parse child (`crbc_viz.ui.sandbox`), weights-only, as ``crbc-viz ingest`` reads it; a pickle
that would run code is refused in one line naming the upload and runs nothing; where torch is
not installed the upload control says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.errors import LoadError
from crbc_viz.ui import files, sandbox

REPO = Path(__file__).resolve().parents[2]
SLIME = REPO / "tests/fixtures/slime"
GRAPHGPO = REPO / "tests/fixtures/graphgpo"
CASES = [
    (SLIME / "debug/rollout_3.pt", "slime"),
    (SLIME / "compact/rollout_5.pt", "slime"),
    (GRAPHGPO / "batch_step4.pth", "graphgpo"),
]


def _truth(path: Path) -> dict:
    folder = SLIME if path.is_relative_to(SLIME) else GRAPHGPO
    return json.loads((folder / "truth.json").read_text())[path.relative_to(folder).as_posix()]


def _upload(tmp_path, monkeypatch, name: str, data: bytes) -> Path:
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    return files.save_upload(name, data)


@pytest.mark.parametrize("path,fmt", CASES, ids=lambda c: c.name if isinstance(c, Path) else None)
def test_an_uploaded_dump_is_read_in_the_child_as_ingest_reads_it(tmp_path, monkeypatch, path, fmt):
    pytest.importorskip("torch")
    from crbc_viz.io.importers import read_file

    started = []
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        started.append(argv)
        return real_popen(argv, **kw)

    stored = _upload(tmp_path, monkeypatch, path.name, path.read_bytes())
    monkeypatch.setattr(subprocess, "Popen", popen)
    got = sandbox.open_batch(str(stored))
    assert len(started) == 1 and str(stored) in " ".join(started[0])  # read there, not here
    how = sandbox.read_as(got)
    assert (how.fmt, how.detected) == (fmt, True)
    truth, want = _truth(path), read_file(str(path)).batch
    assert (got.num_groups, got.num_trajectories, got.num_steps) == (
        truth["groups"],
        truth["trajectories"],
        truth["steps"],
    )
    assert (got.num_groups, got.num_trajectories, got.num_steps) == (
        want.num_groups,
        want.num_trajectories,
        want.num_steps,
    )
    assert path.name in got.source and str(stored) not in got.source


class Evil:
    """Unpickling this would run ``touch <marker>``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["rollout_1.pt", "batch.pth"])
def test_an_uploaded_pickle_that_runs_code_is_refused_in_one_line_and_runs_nothing(
    tmp_path, monkeypatch, name
):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    src = tmp_path / "src" / name
    src.parent.mkdir()
    if name.endswith(".pth"):
        keys = ("uid", "traj_uid", "anchor_obs", "next_obs", "text_actions")
        ntb = {k: np.array(["a"], dtype=object) for k in keys}
        ntb["episode_rewards"] = np.array([Evil(marker)], dtype=object)
        torch.save({"batch": None, "non_tensor_batch": ntb, "meta_info": {}}, src)
    else:
        sample = {"group_index": 0, "index": 0, "rollout_id": None, "prompt": "p", "response": "r"}
        sample |= {"reward": 1.0, "status": "completed"}
        torch.save({"rollout_id": 1, "samples": [{**sample, "metadata": {"x": Evil(marker)}}]}, src)
    stored = _upload(tmp_path, monkeypatch, "my dump " + name, src.read_bytes())
    with pytest.raises(LoadError) as err:
        sandbox.open_batch(str(stored))
    msg = str(err.value).split("\n", 1)[-1].strip()  # "1 problem in input:" then the one line
    assert len(err.value.problems) == 1 and "\n" not in msg, str(err.value)
    assert msg.startswith(f"my dump {name}") and "system" in msg and "refused, never unpickled" in msg, msg
    assert str(stored) not in str(err.value) and "crbc-viz-uploads" not in str(err.value)
    assert not marker.exists()


def test_without_torch_the_upload_control_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "TORCH_INSTALLED", False)
    monkeypatch.setattr(files, "ALLOWED_SUFFIXES", files.LOG_SUFFIXES)
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    with pytest.raises(ValueError) as err:
        files.save_upload("rollout_3.pt", b"PK")
    assert str(err.value) == f"'rollout_3.pt': {files.NO_TORCH}" and "\n" not in str(err.value)
    assert not (tmp_path / "up").exists() or not any((tmp_path / "up").iterdir())
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/data.py").run()
    at.radio(key="data_source").set_value("Upload").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [c.value for c in at.caption if "torch" in c.value] == [files.NO_TORCH]
