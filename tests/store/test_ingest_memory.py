"""Streamed ingest holds one chunk at a time: when the next chunk is read, nothing of the
previous one (its raw table, its batch, its Arrow tables) is still referenced, so peak memory
is one chunk's whatever the file's size (the RSS figures are in bench/RESULTS.md)."""

import gc
import importlib
import json
import weakref

from crbc_viz.store import LogStore, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

ing = importlib.import_module("crbc_viz.store.ingest")  # the module (the package attribute is the function)
st = importlib.import_module("crbc_viz.store.stream")


def test_no_chunk_is_alive_when_the_next_is_read(tmp_path, monkeypatch):
    rows = batch_to_rows(random_mdp_batch(num_groups=40, rollouts=4, max_steps=20, seed=5))
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(st, "STREAM_MIN_BYTES", 1)
    monkeypatch.setattr(st, "STREAM_CHUNK_BYTES", 20_000)
    real_chunks, real_build = st._stream_raw_chunks, ing._write_batch_parts
    raws, batches, alive_at_read = [], [], []

    def watched_chunks(src, tmp_dir):
        it = real_chunks(src, tmp_dir)
        while True:
            gc.collect()
            alive_at_read.append(sum(r() is not None for r in raws + batches))
            raw = next(it, None)
            if raw is None:
                return
            raws.append(weakref.ref(raw.records))
            yield raw
            del raw

    def watched_parts(root, batch, *a, **k):
        batches.append(weakref.ref(batch.steps))
        return real_build(root, batch, *a, **k)

    monkeypatch.setattr(st, "_stream_raw_chunks", watched_chunks)
    monkeypatch.setattr(ing, "_write_batch_parts", watched_parts)
    rep = ingest(tmp_path / "s", [log])
    assert rep.rows == len(rows) == LogStore(tmp_path / "s").num_steps
    assert len(raws) > 5 and len(batches) == len(raws)
    assert alive_at_read == [0] * (len(raws) + 1)
