"""Opening a store again in the app (each rerun of a page does) costs a listing, not a re-read:
manifests parsed once per process and folder (a rewritten one parsed again), and the
confinement check resolves each file with one ``lstat`` of its own, with the answers of
``Path.resolve`` (links, ``..``, missing files, link loops)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from crbc_viz.store import ingest
from crbc_viz.store import query as store_query
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from crbc_viz.ui import sources
from helpers import write_jsonl


def _store(tmp_path: Path, monkeypatch, steps: int = 3) -> Path:
    """A store of ``steps`` train steps under an allowed root, last written a minute ago."""
    root = tmp_path / "allowed"
    logs = []
    for t in range(steps):
        rows = batch_to_rows(random_mdp_batch(2, 3, 5, seed=t))
        for r in rows:
            r["run_id"], r["train_step"] = "r", t
        logs.append(write_jsonl(tmp_path / f"l{t}.jsonl", rows))
    ingest(root / "store", logs, run_id=None)
    past = time.time() - 60
    for f in (root / "store").rglob("*"):
        os.utime(f, (past, past), follow_symlinks=False)
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(root))
    return root / "store"


def test_a_folder_s_manifests_are_parsed_once_per_process(tmp_path, monkeypatch):
    store = _store(tmp_path, monkeypatch)
    parsed = []
    check = store_query._check_manifest
    monkeypatch.setattr(
        store_query, "_check_manifest", lambda root, f, m: (parsed.append(f.name), check(root, f, m))
    )
    first = sources.open_store(str(store))
    assert len(parsed) == len(first.manifests) == 3
    again = sources.LogStore(store)  # the trends' own store of the folder, as pipeline opens it
    assert len(parsed) == 3 and again.fingerprint == first.fingerprint
    plain = store_query.LogStore(first.root)  # the store a group is loaded from (sandbox.read)
    assert len(parsed) == 3 and plain.fingerprint == first.fingerprint
    # A manifest rewritten since: parsed again, its new content seen.
    mfile = next((store / "manifest").glob("*.json"))
    man = json.loads(mfile.read_text())
    man["notes"] = ["rewritten"]
    mfile.write_text(json.dumps(man))
    seen = sources.open_store(str(store))
    assert parsed[3:] == [mfile.name] and seen.manifests[man["digest"]]["notes"] == ["rewritten"]


def test_the_confinement_check_costs_one_lstat_per_file(tmp_path, monkeypatch):
    store = _store(tmp_path, monkeypatch, steps=6)
    opened = sources.open_store(str(store))
    # the folder, its marker, each manifest and its part, the trends cache
    files = 2 + 2 * len(opened.manifests) + len(list((store / "cache").glob("*")))
    calls = []
    lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: (calls.append(p), lstat(p, *a, **k))[1])
    sources._check_within_roots(opened)
    # Each part lies 4 folders below the store, the store ~8 below /: resolving each path
    # from / took ~12 lstat calls per file.
    assert len(calls) <= 2 * files + 40, (len(calls), files)


def test_the_resolver_answers_as_path_resolve(tmp_path, monkeypatch):
    d = tmp_path / "t"
    (d / "a" / "b").mkdir(parents=True)
    (d / "a" / "b" / "f").write_text("x")
    (d / "out").mkdir()
    (d / "out" / "g").write_text("y")
    (d / "a" / "to_out").symlink_to(d / "out")
    (d / "a" / "b" / "link_f").symlink_to("../../out/g")
    (d / "loop1").symlink_to(d / "loop2")
    (d / "loop2").symlink_to(d / "loop1")
    monkeypatch.chdir(d)
    cases = [
        d / "a" / "b" / "f",
        d / "a" / "to_out" / "g",
        d / "a" / "to_out" / ".." / "a" / "b" / "f",
        d / "a" / "b" / "link_f",
        d / "a" / "b" / "missing" / "x",
        d / "a" / "b" / "." / "f",
        f"{d}/a/b/",
        f"{d}/a//b/f",
        "a/b/f",
        "a/to_out/../out/g",
        Path("/"),
        str(d / "a") + "/x" * 3000,  # deep and missing
    ]
    real = sources._realpaths()
    for p in cases:
        assert real(str(p)) == str(Path(p).resolve()), p
        assert real(str(p)) == str(Path(p).resolve()), p  # answered from its memo
    for p in (d / "loop1", d / "loop1" / "x"):
        with pytest.raises(RuntimeError):
            Path(p).resolve()
        with pytest.raises(RuntimeError):
            real(str(p))
