"""One read of a source: the importers' table says which formats are folders (``FOLDER``),
which options each takes (``OPTIONS``) and which file endings are its own (``FILE_SUFFIXES``);
detection, the folder walk, `read_source` / `read_file`, ingest and the watcher derive the rest.

A folder format registered in the table alone (a module written here, nothing else edited) is
detected, walked, read, ingested and followed; each file's first record is read once per walk;
a folder of slime / GraphGPO torch dumps is walked and ingested."""

from __future__ import annotations

import collections
import inspect
import json
import os
import shutil
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crbc_viz.io.importers as importers
from crbc_viz.io.importers import IMPORTERS, expand_sources, read_file
from crbc_viz.io.readers import RawTable
from crbc_viz.store import LogStore, ingest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


# -- a folder format written here and registered in the table only ---------------------------
def _toy_module() -> types.ModuleType:
    """A ``FOLDER`` importer: every ``*.toy.jsonl`` under a folder, canonical step rows marked
    with a ``toy_run`` field; one source per folder holding them."""
    m = types.ModuleType("toy_folder")
    m.NAME, m.TITLE, m.SIGNATURE = "toy", "toy episodes folder", ("toy_run",)
    m.FOLDER, m.OPTIONS = True, ()
    m.sniff = lambda fields: "toy_run" in fields
    m.is_folder_file = lambda path: os.path.basename(path).endswith(".toy.jsonl")

    def folder_files(folder):
        return sorted(str(p) for p in Path(folder).rglob("*.toy.jsonl"))

    def read(path):
        frames = [pd.read_json(f, lines=True) for f in folder_files(path)]
        df = pd.concat(frames, ignore_index=True).drop(columns=["toy_run"])
        line = np.concatenate([np.arange(1, len(f) + 1) for f in frames])
        raw = RawTable(path, df, line, "line", False)
        return importers.Imported(raw, "toy", {k: k for k in ("group_id", "traj_id", "step_idx")})

    m.folder_files, m.read = folder_files, read
    return m


def _toy_rows(group: str, trajs: dict[str, int]) -> str:
    rows = [
        {"toy_run": 1, "group_id": group, "traj_id": t, "step_idx": i, "reward": 1.0, "anchor_obs": f"s{i}"}
        for t, n in trajs.items()
        for i in range(n)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The table with the toy importer first, and a folder of two toy episode folders (3 + 2
    steps in group A, 1 step in group B) beside a side file no walk reads."""
    monkeypatch.setattr(importers, "_REG", importers.Registry((_toy_module(), *IMPORTERS)))
    root = tmp_path / "toy"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "ep.toy.jsonl").write_text(_toy_rows("A", {"t1": 3, "t2": 2}))
    (root / "b" / "ep.toy.jsonl").write_text(_toy_rows("B", {"t3": 1}))
    (root / "a" / "notes.txt").write_text("not a log\n")
    return root


def test_a_folder_format_registered_in_the_table_alone_is_read_everywhere(toy, tmp_path):
    assert importers.detect(str(toy)) == "toy"
    srcs = expand_sources([toy])
    assert [(s.fmt, Path(s.path).name, len(s.files)) for s in srcs] == [("toy", "a", 1), ("toy", "b", 1)]
    got = read_file(toy)
    assert (got.fmt, got.detected) == ("toy", True)
    assert (got.batch.num_groups, got.batch.num_trajectories, got.batch.num_steps) == (2, 3, 6)
    imp = importers.read_source(str(toy / "a"))  # a path: detected here
    assert imp.fmt == "toy" and len(imp.raw.records) == 5
    report = ingest(tmp_path / "store", [toy])
    assert [(s["format"], s["rows"]) for s in report.sources] == [("toy", 5), ("toy", 1)]
    with LogStore(tmp_path / "store") as st:
        assert st.summary()["steps"] == 6


def test_the_watcher_follows_a_folder_format_of_the_table(toy, tmp_path):
    from crbc_viz.store.watch import Watcher

    clock = types.SimpleNamespace(t=1000.0)
    events = []
    with Watcher(toy, tmp_path / "store", settle=2.0, clock=lambda: clock.t, on_event=events.append) as w:
        w.step()
        clock.t += 5
        w.step()
    done = sorted((os.path.basename(e.path), e.fmt) for e in events if e.kind == "ingested")
    assert done == [("a", "toy"), ("b", "toy")]
    with LogStore(tmp_path / "store") as st:
        assert st.summary()["steps"] == 6


def test_a_file_format_named_for_a_folder_is_refused_naming_the_folder_formats(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"a": 1}) + "\n")
    with pytest.raises(importers.LoadError, match="a folder is read as rLLM episodes; trl dumps are files"):
        read_file(tmp_path, "trl")


# -- the table's members, and what is derived from them ---------------------------------------
def test_options_and_folders_come_from_the_table():
    for m in IMPORTERS:
        params = inspect.signature(m.read).parameters
        keywords = {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY}
        assert set(m.OPTIONS) == keywords & {"reward_columns", "success_column", "field_map"}, m.NAME
        assert importers.takes(m.NAME) == set(m.OPTIONS)
    assert importers.IMPORT_OPTIONS == ("reward_columns", "success_column", "field_map")
    assert importers.FOLDER_FORMATS == ("rllm",)
    assert {".pt", ".pth"} <= set(importers.WALK_SUFFIXES)


def test_an_importer_whose_members_disagree_is_refused():
    bad = _toy_module()
    del bad.folder_files
    with pytest.raises(ValueError, match="toy_folder: a FOLDER importer needs"):
        importers.Registry((bad,))
    bad = _toy_module()
    bad.OPTIONS = ("field_map",)  # its read takes no such keyword
    with pytest.raises(ValueError, match=r"toy_folder: OPTIONS \['field_map'\]"):
        importers.Registry((bad,))


# -- detection once --------------------------------------------------------------------------
@pytest.fixture
def peeks(monkeypatch):
    """Every first-record read of the detection, by path."""
    seen: collections.Counter = collections.Counter()
    real = importers.peek_fields

    def counted(path):
        seen[os.path.normpath(str(path))] += 1
        return real(path)

    monkeypatch.setattr(importers, "peek_fields", counted)
    return seen


def test_each_file_of_a_walked_folder_is_detected_once(peeks):
    folder = FIX / "verl_041" / "rollout"
    srcs = expand_sources([folder])
    assert srcs and all(s.fmt == "verl" for s in srcs)
    assert {os.path.normpath(s.path) for s in srcs} == set(peeks)
    assert set(peeks.values()) == {1}, peeks


def test_a_named_format_reads_each_first_record_once(peeks, tmp_path):
    folder = tmp_path / "dumps"
    shutil.copytree(FIX / "verl_041" / "rollout", folder)
    (folder / "other.jsonl").write_text(json.dumps({"nothing": 1}) + "\n")
    expand_sources([folder], "verl")
    assert set(peeks.values()) == {1}, peeks


def test_a_folder_source_is_detected_once_when_read_and_ingested(peeks, tmp_path):
    folder = FIX / "rllm_real" / "eval_run" / "episodes"
    read_file(folder)
    assert sum(peeks.values()) == 1, peeks
    peeks.clear()
    ingest(tmp_path / "store", [folder])
    assert sum(peeks.values()) == 1, peeks


# -- torch dumps in a folder walk ------------------------------------------------------------
def test_a_folder_of_torch_dumps_is_walked_and_ingested(tmp_path):
    pytest.importorskip("torch")
    folder = tmp_path / "dumps"
    folder.mkdir()
    shutil.copy(FIX / "slime" / "debug" / "rollout_3.pt", folder / "rollout_3.pt")
    shutil.copy(FIX / "graphgpo" / "batch_step4.pth", folder / "batch_step4.pth")
    srcs = expand_sources([folder])
    assert [(Path(s.path).name, s.fmt) for s in srcs] == [
        ("batch_step4.pth", "graphgpo"),
        ("rollout_3.pt", "slime"),
    ]
    slime = json.loads((FIX / "slime" / "truth.json").read_text())["debug/rollout_3.pt"]
    graphgpo = json.loads((FIX / "graphgpo" / "truth.json").read_text())["batch_step4.pth"]
    report = ingest(tmp_path / "store", [folder])
    assert [s["rows"] for s in report.sources] == [graphgpo["steps"], slime["steps"]]
    with LogStore(tmp_path / "store") as st:
        assert st.summary()["steps"] == slime["steps"] + graphgpo["steps"]
