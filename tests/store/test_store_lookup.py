"""Looking a group up by its reference: a ``run/train_step/group_id`` reference reads its own
partition only (a bare id is probed over the store: both readings still count), and a resolved
reference is not read again until the store's parts change."""

from __future__ import annotations

from pathlib import Path

import pytest

from crbc_viz.store import LogStore, StoreError, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from helpers import write_jsonl


def _log(path: Path, run: str, train_step: int, seed: int, group_ids=None) -> Path:
    rows = batch_to_rows(random_mdp_batch(3, 3, 6, seed=seed))
    for r in rows:
        r["run_id"], r["train_step"] = run, train_step
        if group_ids is not None:
            r["group_id"] = group_ids[r["group_id"]]
    return write_jsonl(path, rows)


def test_a_run_step_group_reference_reads_its_partition_only(tmp_path, monkeypatch):
    ingest(tmp_path / "s", [_log(tmp_path / f"l{t}.jsonl", "r", t, seed=t) for t in (0, 1, 2)], run_id=None)
    st = LogStore(tmp_path / "s")
    read: list[set] = []
    real_select = LogStore._select

    def spy(self, select, parts, **kw):
        read.append({(p.run_id, p.train_step) for p in parts})
        return real_select(self, select, parts, **kw)

    monkeypatch.setattr(LogStore, "_select", spy)
    assert st.resolve_group("r/1/task-00001") == ("r", 1, "task-00001")
    # The partition (r, 1) only: the bare reading "r/1/task-00001" is no group id here.
    assert read and all(parts == {("r", 1)} for parts in read)
    assert st.groups(group="r/2/task-00000")["train_step"].tolist() == [2]
    with pytest.raises(StoreError, match="no group 'r/3/task-00000'"):
        st.resolve_group("r/3/task-00000")

    # Both readings still count: group ``b`` of run ``a`` at train step 1 beside a group whose
    # id is ``a/1/b`` itself (found by the probe over every partition).
    names = {"task-00000": "a/1/b", "task-00001": "other", "task-00002": "third"}
    ingest(tmp_path / "s", [_log(tmp_path / "x.jsonl", "x", 0, seed=5, group_ids=names)], run_id=None)
    assert LogStore(tmp_path / "s").resolve_group("a/1/b") == ("x", 0, "a/1/b")
    names["task-00000"] = "b"
    ingest(tmp_path / "s", [_log(tmp_path / "a.jsonl", "a", 1, seed=6, group_ids=names)], run_id=None)
    with pytest.raises(StoreError, match="ambiguous") as err:
        LogStore(tmp_path / "s").resolve_group("a/1/b")
    assert "(2 matches: x/0/a/1/b, a/1/b)" in str(err.value)


def test_a_resolved_reference_is_not_read_again_until_the_store_changes(tmp_path, monkeypatch):
    ingest(tmp_path / "s", [_log(tmp_path / "l0.jsonl", "r", 0, seed=0)], run_id=None)
    calls = []
    real_groups = LogStore.groups

    def spy(self, **kw):
        calls.append(kw.get("group"))
        return real_groups(self, **kw)

    monkeypatch.setattr(LogStore, "groups", spy)
    for _ in range(3):  # a page's rerun opens the store again each time
        assert LogStore(tmp_path / "s").resolve_group("task-00001") == ("r", 0, "task-00001")
    assert calls == ["task-00001"]
    # A commit that makes the bare id ambiguous: the answer given before is not reused.
    ingest(tmp_path / "s", [_log(tmp_path / "l1.jsonl", "r", 1, seed=1)], run_id=None)
    with pytest.raises(StoreError, match="ambiguous"):
        LogStore(tmp_path / "s").resolve_group("task-00001")
    assert len(calls) == 2
