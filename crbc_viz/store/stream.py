"""Streamed reading of one large source for `crbc_viz.store.ingest`: a canonical JSONL or
Parquet file over `STREAM_MIN_BYTES` is read in chunks of about `STREAM_CHUNK_BYTES` cut at
group boundaries, each by the ordinary reader (every guard and message applies, relabelled
with the source's path and lines), one chunk in memory at a time."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from ..data import GROUP_KEY
from ..errors import LoadError, Problem

__all__ = [
    "source_batches",
    "streams",
    "STREAM_MIN_BYTES",
    "STREAM_CHUNK_BYTES",
    "PARQUET_BATCH_ROWS",
]

#: Canonical JSONL and Parquet sources larger than one chunk are ingested in chunks of about
#: `STREAM_CHUNK_BYTES` cut at group boundaries, one chunk in memory at a time, so peak
#: memory does not grow with the file (bench/ingest_bench.py: ~0.5 GB at any size).
STREAM_MIN_BYTES = 48 << 20
STREAM_CHUNK_BYTES = 48 << 20
#: Rows per record batch read from a streamed Parquet source (chunks gather whole batches).
PARQUET_BATCH_ROWS = 4096


class _NotGroupContiguous(Exception):
    """A group's rows recur after another group's: the file must be read whole."""


def streams(src) -> bool:
    """Whether ``src`` is ingested chunk by chunk (a large canonical JSONL or Parquet file)."""
    return _stream_format(src) is not None


def _fits_whole(src) -> bool:
    """Whether the source is within the whole-file readers' input limit."""
    from ..io import _guards

    return os.path.getsize(src.files[0]) <= _guards.mib_setting(_guards.ENV_MAX_INPUT, _guards.MAX_INPUT_MB)


def _stream_format(src) -> str | None:
    from ..io.readers import detect_format

    if src.fmt != "canonical" or len(src.files) != 1 or os.path.getsize(src.files[0]) < STREAM_MIN_BYTES:
        return None
    try:
        fmt = detect_format(src.files[0])
    except LoadError:
        return None
    return fmt if fmt in ("jsonl", "parquet") else None


def _chunk_key(line: bytes):
    """(run_id, train_step, group_id) of one JSONL line, or None when it does not parse."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    return tuple(str(obj.get(k)) for k in GROUP_KEY)


def _stream_raw_chunks(src, tmp_dir: Path):
    """The source's rows as `RawTable` chunks of about `STREAM_CHUNK_BYTES`, each cut where
    the group key changes, read by the ordinary reader (every guard and message applies) and
    relabelled with the source's path and its own line numbers. Lines go straight to the
    chunk file (only the chunk's last line is held), and nothing of a chunk is referenced
    here once it is yielded."""
    from ..io import _guards
    from ..io.readers import max_line_bytes, read_table

    if _stream_format(src) == "parquet":
        yield from _stream_parquet_chunks(src, tmp_dir)
        return
    path = src.files[0]
    limit = max_line_bytes()
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / "chunk.jsonl"
    first_line = 1
    out = None
    try:
        with _guards.open_input(path) as fh:
            out = open(tmp, "wb")
            size = lines = 0
            last = last_key = None  # the chunk's last line; the group key it ends in
            while True:
                raw = fh.readline(limit + 1)
                if raw and len(raw) > limit and not raw.endswith(b"\n"):
                    raise _NotGroupContiguous()  # an over-long line: the whole-file reader reports it
                if raw and size >= STREAM_CHUNK_BYTES:
                    if last_key is None:
                        last_key = _chunk_key(last)
                    key = _chunk_key(raw)
                    if key is not None and key != last_key:
                        raw_next = raw  # a new group past the chunk size: cut here
                    elif size + len(raw) > 4 * STREAM_CHUNK_BYTES:
                        raise _NotGroupContiguous()
                    else:
                        raw_next = None
                else:
                    raw_next = None
                if raw and raw_next is None:
                    out.write(raw)
                    size, lines, last = size + len(raw), lines + 1, raw
                    continue
                out.close()
                if lines:
                    yield _relabel(read_table(str(tmp), "jsonl"), str(tmp), path, first_line - 1)
                    first_line += lines
                if not raw:
                    break
                out = open(tmp, "wb")
                out.write(raw)
                size, lines, last, last_key = len(raw), 1, raw, None
    finally:
        if out is not None:
            out.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _stream_parquet_chunks(src, tmp_dir: Path):
    """A Parquet source's rows as `RawTable` chunks of about `STREAM_CHUNK_BYTES` decoded, cut
    where the group key changes: record batches are gathered, the chunk is written to a chunk
    file and read by the ordinary Parquet reader (its guards and messages apply), and its rows
    are relabelled as the source's. A file pyarrow cannot iterate, or a group longer than four
    chunks, is left to the whole-file reader (`_NotGroupContiguous`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io.readers import read_table

    path = src.files[0]
    try:
        # pre_buffer=False: with it, pyarrow keeps every row group's bytes it has read until the
        # file is closed (peak 646 MB for a 3.9M-step file against 209 MB without, at any size).
        pf = pq.ParquetFile(path, pre_buffer=False)
        meta, schema = pf.metadata, pf.schema_arrow
    except Exception:  # noqa: BLE001  (pyarrow raises several types; the whole-file reader names it)
        raise _NotGroupContiguous() from None
    keys = [k for k in GROUP_KEY if k in schema.names]
    if "group_id" not in keys or meta.num_rows == 0:
        raise _NotGroupContiguous()
    per_chunk = None  # rows a chunk holds: from the first batch's decoded (Arrow) size
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / "chunk.parquet"
    pending: list = []
    rows = offset = 0

    def read(table):
        pq.write_table(table, tmp)
        return _relabel(read_table(str(tmp), "parquet"), str(tmp), path, offset)

    try:
        batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS)
        while True:
            try:
                rb = next(batches, None)
            except Exception:  # noqa: BLE001  (a corrupt page: the whole-file reader reports it)
                raise _NotGroupContiguous() from None
            if rb is not None:
                if per_chunk is None:
                    per_chunk = max(1, STREAM_CHUNK_BYTES * rb.num_rows // max(rb.nbytes, 1))
                pending.append(rb)
                rows += rb.num_rows
                if rows < per_chunk:
                    continue
            if not rows:
                break
            table = pa.Table.from_batches(pending, schema=schema)
            cut = rows if rb is None else _last_group_start(table, keys)
            if cut == 0:
                if rows > 4 * per_chunk:
                    raise _NotGroupContiguous()
                continue
            raw = read(table.slice(0, cut))
            offset += cut
            yield raw
            del raw
            tail = table.slice(cut)
            pending, rows = tail.combine_chunks().to_batches(), tail.num_rows
            del table, tail
            pa.default_memory_pool().release_unused()  # the pool keeps freed chunks otherwise
            if rb is None:
                break
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _last_group_start(table, keys: list[str]) -> int:
    """The first row of the run of rows at the end of ``table`` that share its last row's group
    key (0 when every row does)."""
    same = np.ones(table.num_rows, dtype=bool)
    for k in keys:
        col = table.column(k).to_numpy(zero_copy_only=False)
        same &= col == col[-1]
    differ = np.flatnonzero(~same)
    return int(differ[-1]) + 1 if differ.size else 0


def _relabel(raw, tmp: str, path: str, offset: int):
    """``raw`` read from a chunk file as if read from ``path``: lines shifted by ``offset``."""

    def fix(p: Problem) -> Problem:
        return Problem(
            path if p.path == tmp else p.path,
            None if p.line is None else p.line + offset,
            p.field,
            p.message.replace(tmp, path),
            p.where,
        )

    raw.path = path
    raw.line = raw.line + offset
    raw.problems = [fix(p) for p in raw.problems]
    raw.notes = [n.replace(tmp, path) for n in raw.notes]
    return raw


def source_batches(src, tmp_dir: Path, *, run_id, import_options, lenient, success_threshold, stream):
    """(batch, import) of the whole source, or of each streamed chunk in file order (chunk
    files under ``tmp_dir``). Raises `_NotGroupContiguous` when a streamed source must be read
    whole; the options are `crbc_viz.store.ingest.ingest`'s."""
    from ..io.anchor_rules import using
    from ..io.assemble import build_batch
    from ..io.importers import read_source
    from ..io.importers._common import Imported
    from ..io.importers.fieldmap import relabel

    def batch_of(imp):
        if run_id is not None:
            imp.raw.set_column("run_id", run_id)
        try:
            with using(None):  # the store keeps exact keys; a rule re-keys them at read time
                return build_batch(imp.raw, lenient=lenient, success_threshold=success_threshold), imp
        except LoadError as exc:  # a field map's values: named by their map entries
            raise relabel(exc, getattr(imp, "labels", None)) from None

    if not (stream and streams(src)):
        yield batch_of(read_source(src, **(import_options or {})))
        return
    keys = {k: k for k in ("group_id", "traj_id", "step_idx")}
    seen: set = set()
    for raw in _stream_raw_chunks(src, tmp_dir):
        try:
            batch, imp = batch_of(Imported(raw, "canonical", keys))
        except LoadError:
            # A trajectory split across chunks (the file is not group-contiguous) reads as
            # bad steps here: within the whole-file reader's limit, that reader decides (and
            # names a real problem exactly as it would); beyond it, the chunk's message stands.
            if _fits_whole(src):
                raise _NotGroupContiguous() from None
            raise
        groups = set(batch.groups[list(GROUP_KEY)].astype(str).itertuples(index=False, name=None))
        if groups & seen:
            raise _NotGroupContiguous()
        seen |= groups
        yield batch, imp
        del raw, batch, imp  # not held while the next chunk is read
