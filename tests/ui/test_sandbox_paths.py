"""What the parse child leaves and what it opens (`crbc_viz.ui.sandbox`): a child stopped at its
time limit leaves no copy of the upload behind (the server removes the child's temporary files),
and a server path that is swapped for a link to a file outside the data folders after it was
checked is not read: one line says the file changed.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from crbc_viz.errors import ParseAbortedError
from crbc_viz.ui import files, sandbox, sources

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "sample_rollouts/toy/toy_group.jsonl"


def _slow_after_copy(folder: Path, marker: Path) -> Path:
    """A ``sitecustomize`` for the child: once it has linked or copied a file (the upload, under
    the name it was uploaded under), it marks ``marker`` and sleeps past any time limit."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import os, shutil, time\n"
        f"_MARK = {str(marker)!r}\n"
        "def _slow(real):\n"
        "    def wrapped(*a, **k):\n"
        "        out = real(*a, **k)\n"
        "        open(_MARK, 'w').close()\n"
        "        time.sleep(600)\n"
        "        return out\n"
        "    return wrapped\n"
        "os.link = _slow(os.link)\n"
        "shutil.copyfile = _slow(shutil.copyfile)\n"
    )
    return folder


def test_an_upload_stopped_at_the_time_limit_leaves_no_copy_in_tmpdir(tmp_path, monkeypatch):
    private = tmp_path / "tmpdir"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    stored = files.save_upload("slow run.jsonl", TOY.read_bytes())
    marker = tmp_path / "copied"
    hooks = _slow_after_copy(tmp_path / "hooks", marker)
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    monkeypatch.setenv(sandbox.ENV_PARSE_TIMEOUT, "8")
    with pytest.raises(ParseAbortedError, match="longer than 8 s") as err:
        sandbox.open_batch(str(stored))
    assert str(err.value).startswith("slow run.jsonl:")
    assert marker.exists(), "the child was stopped before it copied the upload: the test proves nothing"
    assert sorted(p.name for p in private.rglob("*")) == []


def _secret(path: Path) -> Path:
    rows = [json.loads(line) for line in TOY.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "run_id": "TOP-SECRET"}) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "when", ["before the server starts the child", "after its check, before the child opens it"]
)
def test_a_server_path_swapped_for_a_link_after_its_check_is_not_read(tmp_path, monkeypatch, when):
    root = tmp_path / "root"
    root.mkdir()
    secret = _secret(tmp_path / "outside.jsonl")  # outside every data folder
    log = root / "run.jsonl"
    log.write_bytes(TOY.read_bytes())
    monkeypatch.setenv(files.ENV_ROOTS, str(root))
    src = sources.resolve(str(log))  # the check: confined to the data folders

    def swap() -> None:
        log.unlink()
        log.symlink_to(secret)

    started = []
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        started.append(argv)
        if when.startswith("after"):
            swap()
        return real_popen(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    if when.startswith("before"):
        swap()
    with pytest.raises(ParseAbortedError) as err:
        batch = sandbox.open_batch(src.key)
        pytest.fail(f"read {sorted(set(batch.steps['run_id']))}")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("run.jsonl:") and "TOP-SECRET" not in msg, msg
    assert "replaced" in msg and "not read" in msg, msg
    assert bool(started) == when.startswith("after")


def test_a_server_file_replaced_by_another_file_after_its_check_is_not_read(tmp_path, monkeypatch):
    """Renamed over by another file (no link anywhere): another inode, refused the same way."""
    root = tmp_path / "root"
    root.mkdir()
    log = root / "run.jsonl"
    log.write_bytes(TOY.read_bytes())
    monkeypatch.setenv(files.ENV_ROOTS, str(root))
    src = sources.resolve(str(log))
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        _secret(root / "other.jsonl").replace(log)
        return real_popen(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(ParseAbortedError, match="replaced"):
        sandbox.open_batch(src.key)
