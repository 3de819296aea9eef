"""A log store under hostile conditions: part paths DuckDB would read as glob patterns, a store
folder whose name holds glob characters, a read-only store, an empty store, a source that
changed after its ingest was killed, a part torn by a crash, and a ``--run-id`` that is not
UTF-8. Expected values come from loading the log files directly."""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crbc_viz import load_rollouts
from crbc_viz.cli import main as cli_main
from crbc_viz.io import LoadError
from crbc_viz.store import CRASH_ENV, LogStore, StoreError, drop_incomplete, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from helpers import ROOT, write_jsonl


def log_file(path: Path, run: str, groups: int = 3, seed: int = 0) -> Path:
    rows = batch_to_rows(random_mdp_batch(groups, 3, 6, seed=seed))
    for r in rows:
        r["run_id"] = run
    return write_jsonl(path, rows)


def manifest_of(store: Path) -> Path:
    (found,) = (store / "manifest").glob("*.json")
    return found


@pytest.mark.parametrize("folder", ["store", "d" * 80 + "/" + "e" * 80 + "/store"])
def test_a_part_path_with_a_glob_character_is_refused(tmp_path, folder):
    """DuckDB expands ``*`` in a path it is given: a manifest naming ``steps/x/*.parquet`` (a
    real file of that name, so the existence check passed) read every part in that folder,
    a symlink to another store's part outside it included. The refusal is said whole however
    long the store's path (it was cut at 200 characters, the reason with it)."""
    ingest(tmp_path / "outside", [log_file(tmp_path / "o.jsonl", "SECRET", seed=1)])
    store = tmp_path / folder
    ingest(store, [log_file(tmp_path / "i.jsonl", "mine", seed=2)])
    mfile = manifest_of(store)
    man = json.loads(mfile.read_text())
    part = store / man["parts"][0]["path"]
    os.symlink(next((tmp_path / "outside" / "steps").rglob("*.parquet")), part.with_name("zz.parquet"))
    shutil.copy(part, part.with_name("*.parquet"))
    man["parts"][0]["path"] = str(Path(man["parts"][0]["path"]).with_name("*.parquet"))
    mfile.write_text(json.dumps(man))
    with pytest.raises(StoreError, match=r"glob character") as err:
        LogStore(store).search_steps("")
    assert mfile.name in str(err.value)


def test_a_store_folder_named_with_glob_characters_reads_its_own_parts(tmp_path):
    """A store in ``s[1]`` and a copy of it in ``s1`` whose part holds another run id: ``[1]`` is
    a glob class to DuckDB, so queries of the first store read the copy's part."""
    first = log_file(tmp_path / "a.jsonl", "first", groups=2, seed=5)
    ingest(tmp_path / "s[1]", [first])
    shutil.copytree(tmp_path / "s[1]", tmp_path / "s1")
    # rewrite the copy's part with another run's rows under the same name
    man = json.loads(manifest_of(tmp_path / "s1").read_text())
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = tmp_path / "s1" / man["parts"][0]["path"]
    table = pq.read_table(part)
    column = pa.array(["copy"] * table.num_rows, type=table.schema.field("run_id").type)
    table = table.set_column(table.schema.get_field_index("run_id"), "run_id", column)
    pq.write_table(table, part)
    got = LogStore(tmp_path / "s[1]").load_batch()
    assert set(got.steps["run_id"]) == {"first"}
    assert got.num_steps == load_rollouts(first).num_steps


def _read_only(monkeypatch, store: Path) -> None:
    """The store's folders refuse new files, as a read-only mount or a folder without write
    permission does for a user who is not root (tests run as root, which file modes do not
    stop): creating a folder or a temporary file under the store raises EACCES/EROFS."""
    real = store.resolve()
    mkstemp, mkdir = tempfile.mkstemp, pathlib.Path.mkdir

    def under(p) -> bool:
        p = Path(p).resolve()
        return p == real or real in p.parents

    def no_mkstemp(*a, **k):
        if under(k.get("dir") or (a[2] if len(a) > 2 else tempfile.gettempdir())):
            raise PermissionError(errno.EACCES, "Permission denied", str(k.get("dir")))
        return mkstemp(*a, **k)

    def no_mkdir(self, *a, **k):
        if under(self) and not self.exists():
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return mkdir(self, *a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", no_mkstemp)
    monkeypatch.setattr(pathlib.Path, "mkdir", no_mkdir)


def test_trends_on_a_read_only_store_answers_without_its_cache(tmp_path, monkeypatch, capsys, caplog):
    """Simulated with a monkeypatch (root ignores file modes): the cache write fails, the
    trends still print, a warning says the cache was not written, nothing lands in the store."""
    f = log_file(tmp_path / "log.jsonl", "ro", groups=4, seed=6)
    store = tmp_path / "store"
    ingest(store, [f])
    before = sorted(p.relative_to(store).as_posix() for p in store.rglob("*"))
    _read_only(monkeypatch, store)
    with caplog.at_level(logging.WARNING):
        rc = cli_main(["trends", "-q", "--backend", "numpy", "--json", "--store", str(store)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (row,) = json.loads(out)["steps"]
    want = load_rollouts(f)
    assert (row["run_id"], row["steps"], row["groups"], row["trajectories"]) == (
        "ro",
        want.num_steps,
        want.num_groups,
        want.num_trajectories,
    )
    assert row["success_rate"] == pytest.approx(float(want.traj_success.mean()))
    assert any("trends not cached" in r.getMessage() for r in caplog.records)
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*")) == before


def test_trends_of_an_empty_store_or_a_missing_run_says_why(tmp_path, capsys):
    """It printed an empty table and exited 0."""
    empty = tmp_path / "empty"
    LogStore(empty, create=True)
    assert cli_main(["trends", "-q", "--store", str(empty)]) == 2
    assert "no log has been ingested into it yet" in capsys.readouterr().err
    store = tmp_path / "store"
    ingest(store, [log_file(tmp_path / "log.jsonl", "only", seed=7)])
    assert cli_main(["trends", "-q", "--store", str(store), "--run", "nope"]) == 2
    assert "no run 'nope' in the store (runs: only)" in capsys.readouterr().err


def test_export_of_an_empty_store_or_a_missing_run_is_one_line_exit_2(tmp_path, capsys):
    """It ended in a ValueError traceback."""
    empty = tmp_path / "empty"
    LogStore(empty, create=True)
    assert (
        cli_main(["export", "--store", str(empty), "--estimator", "crbc", "--out", str(tmp_path / "a.csv")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to export: no log has been ingested into it yet" in err
    store = tmp_path / "store"
    ingest(store, [log_file(tmp_path / "log.jsonl", "only", seed=7)])
    argv = [
        "export",
        "--store",
        str(store),
        "--run",
        "nope",
        "--estimator",
        "crbc",
        "--out",
        str(tmp_path / "b.csv"),
    ]
    assert cli_main(argv) == 2
    assert "no group matches run='nope'" in capsys.readouterr().err
    assert not (tmp_path / "a.csv").exists() and not (tmp_path / "b.csv").exists()


def _ingest_killed_after(store: Path, f: Path, parts: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env[CRASH_ENV] = str(parts)
    code = f"from crbc_viz.store import ingest; ingest({str(store)!r}, [{str(f)!r}], part_rows=40)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 17, proc.stderr  # the crash hook's exit: killed after `parts` parts


def test_a_source_changed_after_a_kill_is_named_as_such(tmp_path):
    """Killed mid-ingest, the log then grew: the message blamed a duplicate trajectory "already
    in the store (from <this same file>)"; it now says the file changed after the interrupted
    ingest and how to recover, and recovering gives exactly the new file's rows."""
    f = log_file(tmp_path / "log.jsonl", "grow", groups=6, seed=8)
    store = tmp_path / "store"
    _ingest_killed_after(store, f, 1)
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    extra = [dict(r, group_id=r["group_id"] + "-later") for r in rows[:10]]
    write_jsonl(f, rows + extra)
    with pytest.raises(LoadError) as err:
        ingest(store, [f])
    msg = str(err.value)
    assert "changed after its ingest" in msg and "was interrupted" in msg, msg
    assert "drop-incomplete" in msg and "already in the store" not in msg
    assert len(err.value.problems) == 1
    assert drop_incomplete(store) == [str(f)]
    ingest(store, [f])
    got = LogStore(store).load_batch()
    want = load_rollouts(f)
    assert got.num_steps == want.num_steps and got.num_groups == want.num_groups


@pytest.mark.parametrize("killed", [False, True], ids=["complete", "killed"])
def test_a_torn_part_is_written_again_on_the_next_ingest(tmp_path, killed):
    """A part the manifest names but the disk holds only in part (a crash before it was
    flushed): the next ingest skipped it (complete source: "skipped"; killed source: resumed
    past it) and every read failed with "re-ingest its source"."""
    f = log_file(tmp_path / "log.jsonl", "torn", groups=6, seed=9)
    store = tmp_path / "store"
    if killed:
        _ingest_killed_after(store, f, 2)
    else:
        ingest(store, [f], part_rows=40)
    man = json.loads(manifest_of(store).read_text())
    assert len(man["parts"]) >= 2
    part = store / man["parts"][0]["path"]
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    with pytest.raises(StoreError, match="re-ingest its source"):
        LogStore(store).load_batch()
    (entry,) = ingest(store, [f], part_rows=40).sources
    assert entry["status"] == "resumed"
    assert any("written again" in w and man["parts"][0]["path"] in w for w in entry["warnings"])
    got, want = LogStore(store).load_batch(), load_rollouts(f)
    assert got.num_steps == want.num_steps
    assert sorted(zip(got.steps["group_id"], got.steps["traj_id"], got.steps["step_idx"])) == sorted(
        zip(want.steps["group_id"], want.steps["traj_id"], want.steps["step_idx"])
    )
    parts = json.loads(manifest_of(store).read_text())["parts"]
    assert [p["path"] for p in parts] == sorted(p["path"] for p in parts)  # back in plan order


def test_a_run_id_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    """``--run-id $'\\xff'`` reaches Python as a lone surrogate: pyarrow raised a
    UnicodeEncodeError traceback from inside the ingest."""
    f = log_file(tmp_path / "log.jsonl", "x", seed=10)
    with pytest.raises(StoreError, match=r"run_id \(--run-id\) .*not valid UTF-8"):
        ingest(tmp_path / "s", [f], run_id="\udcff")
    assert not (tmp_path / "s").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "ingest", str(f), "--store", str(tmp_path / "s"), "-q"]
        + ["--run-id", b"\xff"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: run_id (--run-id)") and proc.stderr.count("\n") == 1
