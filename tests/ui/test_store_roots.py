"""A log store the app opens lies inside the allowed data folders, and so does every file it
reads: the parts and text files its manifests name, the manifests, and its trends cache. A
store copied from another machine (its manifests recording that machine's source paths) still
opens where its files lie inside a root."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from crbc_viz import load_rollouts
from crbc_viz.store import StoreError, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from crbc_viz.ui import sources
from helpers import write_jsonl


def _log(path: Path, run: str, seed: int) -> Path:
    rows = batch_to_rows(random_mdp_batch(3, 3, 6, seed=seed))
    for r in rows:
        r["run_id"] = run
    return write_jsonl(path, rows)


@pytest.fixture()
def layout(tmp_path, monkeypatch):
    """(allowed root holding a store, the store's log, a folder outside every root holding
    another store)."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    f = _log(tmp_path / "mine.jsonl", "mine", seed=1)
    ingest(allowed / "store", [f])
    ingest(outside / "store", [_log(tmp_path / "secret.jsonl", "SECRET", seed=2)])
    monkeypatch.setenv("CRBC_VIZ_DATA_ROOTS", str(allowed))
    return allowed, f, outside


def _manifest(store: Path) -> Path:
    (found,) = (store / "manifest").glob("*.json")
    return found


def test_a_store_from_another_machine_opens_and_one_linking_out_is_refused(layout):
    """The copy opens with the rows of its log; then its trends cache is made a link to a
    folder outside every root (trends would read and write there): refused, naming it."""
    allowed, f, outside = layout
    copy = allowed / "copied"
    shutil.copytree(allowed / "store", copy)
    mfile = _manifest(copy)
    man = json.loads(mfile.read_text())
    man["path"] = "/home/someone-else/runs/train_step_0005.jsonl"  # the other machine's path
    mfile.write_text(json.dumps(man))
    batch = sources.open_store(str(copy)).load_batch()
    assert batch.num_steps == load_rollouts(f).num_steps and set(batch.steps["run_id"]) == {"mine"}

    os.symlink(outside / "store" / "steps", copy / "cache")
    with pytest.raises(StoreError, match="outside the allowed data folders") as err:
        sources.open_store(str(copy))
    assert "trends cache" in str(err.value) and str(copy / "cache") in str(err.value)
    # the same check holds for every way the app opens a store (the trends page's LogStore)
    with pytest.raises(StoreError, match="outside the allowed data folders"):
        sources.LogStore(copy)


def test_files_a_store_reads_through_links_out_of_the_roots_are_refused(layout):
    """A cache file, and a manifest, that are symlinks to files outside every root."""
    allowed, _, outside = layout
    store = allowed / "store"
    (store / "cache").mkdir(exist_ok=True)
    leak = store / "cache" / "trends-0.steps.parquet"
    leak.symlink_to(next((outside / "store" / "steps").rglob("*.parquet")))
    with pytest.raises(StoreError, match="outside the allowed data folders") as err:
        sources.open_store(str(store))
    assert str(leak) in str(err.value)
    leak.unlink()
    sources.open_store(str(store))  # opens again

    mfile = _manifest(store)
    real = outside / "manifest.json"
    real.write_text(mfile.read_text())
    mfile.unlink()
    mfile.symlink_to(real)
    with pytest.raises(StoreError, match="outside the allowed data folders") as err:
        sources.open_store(str(store))
    assert f"manifest {mfile}" in str(err.value)


def test_a_manifest_naming_files_out_of_the_roots_by_a_glob_is_refused(layout):
    """A part path ``steps/…/*.parquet`` (a real file of that name) beside a symlink to a part
    outside every root: DuckDB expanded the glob and the app's search showed the outside
    store's rows."""
    allowed, _, outside = layout
    store = allowed / "store"
    mfile = _manifest(store)
    man = json.loads(mfile.read_text())
    part = store / man["parts"][0]["path"]
    part.with_name("zz.parquet").symlink_to(next((outside / "store" / "steps").rglob("*.parquet")))
    shutil.copy(part, part.with_name("*.parquet"))
    man["parts"][0]["path"] = str(Path(man["parts"][0]["path"]).with_name("*.parquet"))
    mfile.write_text(json.dumps(man))
    with pytest.raises(StoreError, match="glob character"):
        sources.open_store(str(store)).search_steps("")
    with pytest.raises(StoreError, match="glob character"):
        sources.resolve(sources.store_group_ref(store, "mine", 0, "task-00000"))
