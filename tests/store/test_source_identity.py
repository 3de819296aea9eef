"""A source's identity in the store is everything that gives its rows their meaning, not only
its bytes: SkyRL writes the train step only in the folder name (``global_step_<N>_evals``), so
two train steps whose files hold the same bytes are two sources, each ingested (whole folder,
one after the other, and by the ``--watch`` follower). A genuine re-ingest is skipped, by name;
a copy elsewhere whose folders give the same run and train step is skipped naming the source
it repeats; a store written before identities (manifests filed under the content digest) still
opens and re-ingesting its sources adds nothing.

Expected counts come from the fixture's truth.json (written by the generator that ran SkyRL's
own dump code), not from the ingest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crbc_viz.store import LogStore, ingest
from crbc_viz.store.watch import Watcher
from helpers import ROOT

SKYRL = ROOT / "tests" / "fixtures" / "skyrl_b328"
TRUTH = json.loads((SKYRL / "truth.json").read_text())["train_steps"]["10"]
EVALS = SKYRL / "export" / "dumped_evals" / "global_step_10_evals"


def two_steps(base: Path, run: str = "export") -> Path:
    """``<base>/<run>/dumped_evals/global_step_{10,20}_evals``: the same files, byte for byte."""
    dumped = base / run / "dumped_evals"
    for n in (10, 20):
        shutil.copytree(EVALS, dumped / f"global_step_{n}_evals")
    a, b = (dumped / f"global_step_{n}_evals" / "gsm8k.jsonl" for n in (10, 20))
    assert a.read_bytes() == b.read_bytes()
    return base / run


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def info(store: Path) -> dict:
    r = cli("info", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_both_steps(store: Path, run: str = "export") -> None:
    got = info(store)
    assert got["runs"] == [run] and got["train_steps"] == 2
    assert (got["steps"], got["trajectories"], got["groups"]) == (
        2 * TRUTH["steps"],
        2 * TRUTH["trajectories"],
        2 * TRUTH["groups"],
    )
    assert got["truncated"] == 2 * TRUTH["truncated"]
    with LogStore(store) as st:
        steps = st.train_steps()
        assert sorted(steps["train_step"].tolist()) == [10, 20]
        assert steps["steps"].tolist() == [TRUTH["steps"]] * 2


def test_two_train_steps_with_the_same_bytes_are_both_ingested_from_the_folder(tmp_path):
    run, store = two_steps(tmp_path), tmp_path / "S"
    r = cli("ingest", str(run), "--store", str(store), "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ingested  ") == 4 and "skipped" not in r.stdout
    assert_both_steps(store)
    # A genuine re-ingest of the same files at the same train steps: skipped, each by name.
    again = cli("ingest", str(run), "--store", str(store), "-q")
    assert again.returncode == 0, again.stderr
    skipped = [line for line in again.stdout.splitlines() if line.lstrip().startswith("skipped")]
    names = sorted(str(p) for p in run.rglob("*.jsonl") if p.name != "aggregated_results.jsonl")
    assert sorted(line.split()[1] for line in skipped) == names
    assert all("already in the store" in line for line in skipped)
    assert "0 source(s) ingested, 4 already in the store" in again.stdout
    assert_both_steps(store)


def test_one_after_the_other(tmp_path):
    run, store = two_steps(tmp_path), tmp_path / "S"
    dumped = run / "dumped_evals"
    for n in (10, 20):
        r = cli("ingest", str(dumped / f"global_step_{n}_evals"), "--store", str(store), "-q")
        assert r.returncode == 0 and "skipped" not in r.stdout, r.stdout + r.stderr
    assert_both_steps(store)


def test_the_watcher_ingests_both_train_steps(tmp_path):
    run, store = two_steps(tmp_path), tmp_path / "S"
    clock, events = [1000.0], []
    with Watcher(run, store, settle=1.0, clock=lambda: clock[0], on_event=events.append) as w:
        w.step()
        clock[0] += 5
        w.step()
        clock[0] += 5
        w.step()
    done = sorted(e.path for e in events if e.kind == "ingested")
    assert done == sorted(
        os.path.join("dumped_evals", f"global_step_{n}_evals", f)
        for n in (10, 20)
        for f in ("gsm8k.jsonl", "search_nq.jsonl")
    ), events
    assert not [e for e in events if e.kind == "present"]
    # SkyRL's metrics file beside the dumps is no log (claimed by no importer), as before.
    assert {os.path.basename(e.path) for e in events if e.kind == "failed"} <= {"aggregated_results.jsonl"}
    assert_both_steps(store)


def test_a_copy_is_skipped_naming_its_twin_and_another_run_is_ingested(tmp_path):
    store = tmp_path / "S"
    first = two_steps(tmp_path / "a")
    ingest(store, [first / "dumped_evals" / "global_step_10_evals"])
    # The same run folder name elsewhere: same run, same train step: a copy.
    copy = two_steps(tmp_path / "b")
    rep = ingest(store, [copy / "dumped_evals" / "global_step_10_evals"])
    assert [s["status"] for s in rep.sources] == ["skipped", "skipped"]
    for s in rep.sources:
        name = Path(s["path"]).name
        assert str(first / "dumped_evals" / "global_step_10_evals" / name) in s["why"]
    # Another run's folder: other rollouts, ingested.
    other = two_steps(tmp_path / "c", run="other")
    rep = ingest(store, [other / "dumped_evals" / "global_step_10_evals"])
    assert [s["status"] for s in rep.sources] == ["ingested", "ingested"]
    got = info(store)
    assert got["runs"] == ["export", "other"] and got["steps"] == 2 * TRUTH["steps"]


def test_options_are_part_of_the_identity(tmp_path):
    """The same file with another success threshold means other successes: it is not skipped
    as present (it holds the same trajectories, so it is refused, by name)."""
    from crbc_viz.io import LoadError

    run, store = two_steps(tmp_path), tmp_path / "S"
    f = run / "dumped_evals" / "global_step_10_evals" / "gsm8k.jsonl"
    ingest(store, [f])
    with pytest.raises(LoadError, match="already in the store"):
        ingest(store, [f], success_threshold=0.5)
    assert [s["status"] for s in ingest(store, [f]).sources] == ["skipped"]


def test_a_store_written_before_identities_opens_and_is_not_duplicated(tmp_path, monkeypatch):
    """A store whose manifests are filed under the content digest alone (as every store was
    before identities: same name, no identity fields), written here by the ingest with the
    identity switched off; re-ingesting its sources skips them; the second train step's same
    bytes are ingested; the bundled store opens."""
    from crbc_viz.store import identity

    run, store = two_steps(tmp_path), tmp_path / "S"
    step10 = run / "dumped_evals" / "global_step_10_evals"

    def legacy(src, **kw):
        ident = real(src, **kw)
        return identity.Identity(ident.content, ident.content, ident.meaning, ident.path)

    real = identity.source_identity
    ing = sys.modules["crbc_viz.store.ingest"]
    monkeypatch.setattr(ing, "source_identity", legacy)
    monkeypatch.setattr(ing, "stamp", lambda ident: {})
    ingest(store, [step10])
    monkeypatch.undo()
    with LogStore(store) as st:
        assert not any("identity" in m for m in st.manifests.values())
    rep = ingest(store, [step10])
    assert [s["status"] for s in rep.sources] == ["skipped", "skipped"]
    rep = ingest(store, [run])
    assert [s["status"] for s in rep.sources] == ["skipped", "skipped", "ingested", "ingested"]
    assert_both_steps(store)
    with LogStore(ROOT / "sample_rollouts" / "training" / "store") as st:
        assert st.num_steps == 133_633 and not any("identity" in m for m in st.manifests.values())
