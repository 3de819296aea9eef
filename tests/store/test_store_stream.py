"""Streamed ingest: a large canonical JSONL file is read in chunks cut at group boundaries
(memory independent of the file's size) and gives the same store as a whole-file read."""

import importlib
import json

import numpy as np
import pytest

from crbc_viz.io import LoadError
from crbc_viz.store import LogStore, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

st = importlib.import_module("crbc_viz.store.stream")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _parquet(path, rows):
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path, row_group_size=97)
    return path


@pytest.fixture
def rows():
    return batch_to_rows(random_mdp_batch(num_groups=30, rollouts=4, max_steps=20, seed=3))


def _small_chunks(monkeypatch, nbytes=20_000):
    monkeypatch.setattr(st, "STREAM_MIN_BYTES", 1)
    monkeypatch.setattr(st, "STREAM_CHUNK_BYTES", nbytes)


def _table(root):
    b = LogStore(root).load_batch()
    return b.steps.sort_values(["group_id", "traj_id", "step_idx"]).reset_index(drop=True), b


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_streamed_store_equals_whole_file(tmp_path, rows, monkeypatch, fmt):
    log = (_write if fmt == "jsonl" else _parquet)(tmp_path / f"log.{fmt}", rows)
    ingest(tmp_path / "whole", [log])
    chunks = []
    real = st._stream_raw_chunks

    def counting(src, tmp_dir):
        for raw in real(src, tmp_dir):
            chunks.append(len(raw.records))
            yield raw

    _small_chunks(monkeypatch, 20_000 if fmt == "jsonl" else 4_000)
    monkeypatch.setattr(st, "PARQUET_BATCH_ROWS", 64)
    monkeypatch.setattr(st, "_stream_raw_chunks", counting)
    rep = ingest(tmp_path / "streamed", [log])
    assert len(chunks) > 3 and sum(chunks) == len(rows) and rep.rows == len(rows)
    a, ba = _table(tmp_path / "whole")
    b, bb = _table(tmp_path / "streamed")
    cols = ["group_id", "traj_id", "step_idx", "reward", "action", "anchor_obs", "success"]
    assert a[cols].equals(b[cols])
    assert np.array_equal(np.sort(ba.step_anchor_hash), np.sort(bb.step_anchor_hash))
    assert not any((tmp_path / "streamed" / ".ingest-tmp").iterdir())


def test_bad_line_in_a_later_chunk_names_the_file_and_line_and_leaves_nothing(tmp_path, rows, monkeypatch):
    lines = [json.dumps(r) for r in rows]
    lines[-5] = '{"group_id": "x", oops}'
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    _small_chunks(monkeypatch)
    monkeypatch.setattr(st, "_fits_whole", lambda src: False)  # the chunk's own message
    with pytest.raises(LoadError) as err:
        ingest(tmp_path / "store", [log])
    assert f"{log}:line {len(lines) - 4}: invalid JSON" in str(err.value)
    store = tmp_path / "store"
    assert not list(store.glob("steps/**/*.parquet")) and not list(store.glob("manifest/*.json"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_groups_that_recur_fall_back_to_a_whole_file_read(tmp_path, rows, monkeypatch, fmt):
    half = len(rows) // 2
    recurring = rows[half:] + rows[:half] + [rows[0] | {"traj_id": "extra"}]
    log = (_write if fmt == "jsonl" else _parquet)(tmp_path / f"log.{fmt}", recurring)
    ingest(tmp_path / "whole", [log])
    _small_chunks(monkeypatch, 2_000)
    rep = ingest(tmp_path / "streamed", [log])
    assert rep.rows == len(rows) + 1
    a, _ = _table(tmp_path / "whole")
    b, _ = _table(tmp_path / "streamed")
    assert a[["group_id", "traj_id", "step_idx", "reward"]].equals(
        b[["group_id", "traj_id", "step_idx", "reward"]]
    )


def test_a_bad_row_of_a_later_parquet_chunk_reads_as_the_whole_file_says(tmp_path, rows, monkeypatch):
    """The streamed error names the source and the same row as the whole-file reader (the
    oracle), and nothing is left behind."""
    rows = [dict(r) for r in rows]
    rows[-7]["step_idx"] = -3
    log = _parquet(tmp_path / "log.parquet", rows)
    with pytest.raises(LoadError) as whole:
        ingest(tmp_path / "whole", [log])
    _small_chunks(monkeypatch, 4_000)
    monkeypatch.setattr(st, "PARQUET_BATCH_ROWS", 64)
    with pytest.raises(LoadError) as streamed:
        ingest(tmp_path / "store", [log])
    assert str(streamed.value) == str(whole.value)
    # Beyond the whole-file limit the chunk's own (relabelled) message stands: the same.
    monkeypatch.setattr(st, "_fits_whole", lambda src: False)
    with pytest.raises(LoadError) as chunk:
        ingest(tmp_path / "store", [log])
    assert str(chunk.value) == str(whole.value)
    assert f"{log}:row" in str(streamed.value) and "step_idx" in str(streamed.value)
    store = tmp_path / "store"
    assert not list(store.glob("steps/**/*.parquet")) and not list(store.glob("manifest/*.json"))


def test_a_trajectory_split_across_jsonl_chunks_is_read_whole(tmp_path, monkeypatch):
    """Small groups and a file cut mid-trajectory: a chunk sees steps that do not start at 0,
    which is the chunking's doing, not the file's; the whole-file reader decides."""
    rows = batch_to_rows(random_mdp_batch(num_groups=80, rollouts=2, max_steps=4, seed=5))
    cut = next(i for i in range(len(rows) // 2, len(rows)) if rows[i]["step_idx"] > 0)
    log = _write(tmp_path / "log.jsonl", rows[cut:] + rows[:cut])
    ingest(tmp_path / "whole", [log])
    _small_chunks(monkeypatch, 3_000)
    rep = ingest(tmp_path / "streamed", [log])
    assert rep.rows == len(rows)
    a, _ = _table(tmp_path / "whole")
    b, _ = _table(tmp_path / "streamed")
    assert a[["group_id", "traj_id", "step_idx"]].equals(b[["group_id", "traj_id", "step_idx"]])
