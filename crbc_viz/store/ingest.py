"""The write side of a log store: `ingest` (whole-source or streamed, resumable, crash-safe)
and `drop_incomplete`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import GROUP_KEY, RolloutBatch
from ..errors import LoadError, Problem
from ..io.write import atomic_path
from .layout import (
    _CANONICAL_TYPES,
    _DROP_AT_INGEST,
    _JSON_SUFFIX,
    CRASH_ENV,
    DEFAULT_PART_ROWS,
    TEXT_COLUMNS,
    StoreError,
    _locked,
    _partition_dir,
    _write_json,
)
from .query import LogStore, incomplete_sources

__all__ = ["ingest", "IngestReport", "IngestSession", "drop_incomplete", "file_digest"]

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What an ingest did, per source: ``status`` is ``ingested``, ``resumed`` or ``skipped``."""

    sources: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.sources if s["status"] != "skipped")


def _outcome_counts(batch: RolloutBatch) -> dict:
    """Per-source counts kept in its manifest (docs/schema.md, "Success and truncation")."""
    from ..analysis.summary import truncation_known

    return {
        "trajectories": batch.num_trajectories,
        "truncated": int(batch.traj_truncated.sum()),
        "truncated_success": int((batch.traj_truncated & batch.traj_success).sum()),
        "done_logged": truncation_known(batch),
    }


def file_digest(paths: Iterable[str], root: str | None = None) -> str:
    """BLAKE2b-128 over the bytes of ``paths`` (and their names relative to ``root``)."""
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        if root is not None:
            h.update(os.path.relpath(p, root).encode() + b"\0")
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def _with_run_id(digest: str, run_id: str | None) -> str:
    """The source digest, distinct per ``--run-id`` override: the same file ingested under
    another run id is another source (not skipped as already present); without an override
    the digest is the file's own, as before."""
    if run_id is None:
        return digest
    h = hashlib.blake2b(digest_size=16)
    h.update(digest.encode() + b"\0run_id\0" + str(run_id).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _arrow_column(name: str, values: pd.Series):
    """(column name, pyarrow array) for a steps column; non-scalar values go to ``<name>__json``."""
    import pyarrow as pa

    kind = _CANONICAL_TYPES.get(name)
    if kind is None:
        if values.dtype != object and not isinstance(values.dtype, pd.StringDtype):
            if isinstance(values.dtype, pd.CategoricalDtype):
                values = values.astype(object)
            else:
                return name, pa.array(values.to_numpy(), from_pandas=True)
        inferred = pd.api.types.infer_dtype(values, skipna=True)
        kind = {
            "string": "string",
            "boolean": "bool",
            "integer": "int64",
            "floating": "float64",
            "mixed-integer-float": "float64",
            "empty": None,
        }.get(inferred, "json")
        if kind is None:
            return name, None
    if kind == "json":
        arr = [
            None
            if (v is None or (isinstance(v, float) and v != v))
            else json.dumps(v.tolist() if isinstance(v, np.ndarray) else v, ensure_ascii=False, default=str)
            for v in values.to_numpy(dtype=object)
        ]
        return name + _JSON_SUFFIX, pa.array(arr, type=pa.string())
    if kind == "string":
        obj = values.to_numpy(dtype=object)
        return name, pa.array(obj, type=pa.string(), from_pandas=True)
    typ = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[kind]
    return name, pa.array(values.to_numpy(dtype=object), type=typ, from_pandas=True)


def _tables(batch: RolloutBatch, stem_of_row: np.ndarray, row_in_part: np.ndarray, source: str):
    """(hot table, text table or None) for the batch's steps in their final row order."""
    import pyarrow as pa

    steps = batch.steps
    hot, txt = {}, {}
    hot["_part"] = pa.array(stem_of_row, type=pa.string())
    hot["_row"] = pa.array(row_in_part, type=pa.int32())
    for c in steps.columns:
        if c in _DROP_AT_INGEST or c.startswith("_"):
            continue
        name, arr = _arrow_column(c, steps[c])
        if arr is None:
            continue
        (txt if c in TEXT_COLUMNS else hot)[name] = arr
    hot["_anchor_hash"] = pa.array(batch.step_anchor_hash, type=pa.uint64())
    hot["_traj_return"] = pa.array(np.repeat(batch.traj_return, batch.traj_len), type=pa.float64())
    hot["_truncated"] = pa.array(np.repeat(batch.traj_truncated, batch.traj_len), type=pa.bool_())
    hot["_source"] = pa.array(np.full(len(steps), source[:16], dtype=object), type=pa.string())
    text_table = None
    if txt:
        txt = {"_row": hot["_row"], **txt}
        text_table = pa.table(txt)
    return pa.table(hot), text_table


def _write_parquet(table, path: Path, *, text: bool) -> None:
    """Write a part under a temporary name, flush it to the disk, then rename it into place: the
    manifest that names it is written after, so it never names a part the disk does not hold."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        if text:
            pq.write_table(
                table,
                tmp,
                compression="zstd",
                row_group_size=4096,
                use_dictionary=["_row"],
                write_statistics=["_row"],
            )
        else:
            pq.write_table(table, tmp, compression="zstd", row_group_size=65536)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _part_number(part: dict) -> int:
    """The ``k`` of a part named ``<digest16>-<k>.parquet``: its place in the source's plan."""
    return int(Path(part["path"]).stem.rsplit("-", 1)[1])


def _readable_parts(root: Path, man: dict | None) -> tuple[dict | None, list[str]]:
    """``man`` without the parts whose files are not what it records, and their paths: a part
    (or its text file) that Parquet cannot read, or that holds another row count (a write torn
    by a crash before it reached the disk). Those parts are written again by the ingest, which
    resumes the source (a complete one included) instead of skipping it."""
    if man is None:
        return None, []
    import pyarrow.parquet as pq

    torn = []
    for p in man.get("parts", []):
        for rel in (p["path"], p.get("text")):
            if rel is None:
                continue
            try:
                ok = pq.read_metadata(root / rel).num_rows == int(p["rows"])
            except Exception:  # noqa: BLE001  (pyarrow raises several types for a damaged file)
                ok = False
            if not ok:
                torn.append(p["path"])
                break
    if not torn:
        return man, []
    return {**man, "parts": [p for p in man["parts"] if p["path"] not in torn], "complete": False}, torn


def _plan_parts(batch: RolloutBatch, part_rows: int):
    """Row order (grouped by partition, batch order inside) and the part of every row: cut at
    group boundaries once a part holds ``part_rows`` rows."""
    g_run = batch.groups["run_id"].astype(str).to_numpy()
    g_step = batch.groups["train_step"].to_numpy(np.int64)
    pcode, puniq = pd.MultiIndex.from_arrays([g_run, g_step]).factorize()
    group_steps = np.bincount(batch.step_group, minlength=batch.num_groups)
    g_order = np.argsort(pcode, kind="stable")
    plan = []  # (partition (run, step), [groups])
    for code in range(len(puniq)):
        gs = g_order[pcode[g_order] == code]
        cur, n = [], 0
        for g in gs:
            if cur and n + group_steps[g] > part_rows:
                plan.append((puniq[code], cur))
                cur, n = [], 0
            cur.append(g)
            n += group_steps[g]
        if cur:
            plan.append((puniq[code], cur))
    return plan


def _crash_after() -> int | None:
    v = os.environ.get(CRASH_ENV)
    return int(v) if v else None


def _existing_traj_overlap(
    store: LogStore, batch: RolloutBatch, digest: str, path: str, exclude=()
) -> list[Problem]:
    """Trajectories of ``batch`` some other visible source already holds (``exclude``: the
    versions this one replaces)."""
    pairs = {(str(r), int(t)) for r, t in zip(batch.groups["run_id"], batch.groups["train_step"])}
    parts = [
        p
        for p in store.parts
        if (p.run_id, p.train_step) in pairs and p.source != digest and p.source not in exclude
    ]
    if not parts:
        return []
    first = batch.steps.iloc[batch.traj_offsets[:-1]]
    new = pd.DataFrame(
        {
            "run_id": first["run_id"].astype(str).to_numpy(),
            "train_step": first["train_step"].to_numpy(np.int64),
            "group_id": first["group_id"].astype(str).to_numpy(),
            "traj_id": first["traj_id"].astype(str).to_numpy(),
        }
    )
    store.con.register("__new_trajs", new)
    try:
        hit = store.con.execute(
            f"SELECT DISTINCT s.run_id, s.train_step, s.group_id, s.traj_id, s._source AS src FROM "
            f"{store._FROM} s JOIN __new_trajs n USING (run_id, train_step, group_id, traj_id) "
            f"LIMIT 20",
            [store._files(parts)],
        ).df()
    finally:
        store.con.unregister("__new_trajs")
    by_src = {d[:16]: m for d, m in store.sources.items()}
    here = os.path.abspath(path)
    problems, told = [], set()
    for r in hit.itertuples():
        man = by_src.get(r.src, {})
        where = f"trajectory '{r.traj_id}' of group '{r.run_id}/{r.train_step}/{r.group_id}'"
        if not man.get("complete", True) and man.get("path") == here:
            # This very path, under another digest, interrupted: the file changed since.
            if r.src not in told:
                told.add(r.src)
                problems.append(Problem(path, None, None, _changed_since_interrupt(store, man, where)))
            continue
        interrupted = (
            ""
            if man.get("complete", True)
            else f"; that copy is an interrupted ingest: `crbc-viz drop-incomplete --store {store.root}` "
            f"removes it"
        )
        problems.append(
            Problem(
                path,
                None,
                "traj_id",
                f"{where} is already in the store (from {man.get('path', r.src)}); remove one "
                f"copy or give the files distinct run ids (--run-id){interrupted}",
            )
        )
    return problems


def _changed_since_interrupt(store: LogStore, man: dict, where: str) -> str:
    """What happened when a file is ingested again after a kill -9 and a change: the store
    holds part of its earlier content, which can no longer be resumed."""
    done = sum(int(p["rows"]) for p in man.get("parts", []))
    return (
        f"this file changed after its ingest into {store.root} was interrupted (started "
        f"{man.get('started_at', '?')}; {done:,} of {int(man.get('rows', 0)):,} steps of its earlier "
        f"content committed, {where} among them, which the new content holds too); the partial "
        f"earlier content cannot be resumed: remove it with `crbc-viz drop-incomplete --store "
        f"{store.root}`, then ingest the file again"
    )


def _check_run_id(run_id) -> None:
    """A ``run_id`` override is stored as UTF-8 text in every row and hashed into the source's
    digest: a string that cannot be encoded (a lone surrogate, as Python decodes an argument
    that is not valid UTF-8) is refused before anything is written."""
    if run_id is None:
        return
    text = str(run_id)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreError(
            f"run_id (--run-id) {text[:100]!r}: not valid UTF-8 text (character "
            f"{text[exc.start]!r} at position {exc.start}); give the run id as UTF-8"
        ) from None


def drop_incomplete(root: str | os.PathLike) -> list[str]:
    """Remove every incomplete source from the store at ``root`` (its parts, then its manifest),
    under the ingest lock; returns the source paths dropped. Complete sources are untouched."""
    root = Path(root)
    LogStore(root)  # a store, or a StoreError
    dropped = []
    with _locked(root):
        store = LogStore(root)
        for m in incomplete_sources(store):
            for p in m.get("parts", []):
                for rel in (p.get("path"), p.get("text")):
                    if rel:
                        with contextlib.suppress(FileNotFoundError):
                            (root / rel).unlink()
            (root / "manifest" / f"{m['digest']}.json").unlink()
            dropped.append(str(m.get("path", m["digest"])))
        store.close()
    return dropped


def _drop_source(root: Path, man: dict) -> None:
    """Remove one source: its manifest first (no reader lists its parts from then on), then its
    part files (a crash in between leaves unlisted files, which an ingest of the same content
    writes over)."""
    with contextlib.suppress(FileNotFoundError):
        (root / "manifest" / f"{man['digest']}.json").unlink()
    for p in man.get("parts", []):
        for rel in (p.get("path"), p.get("text")):
            if rel:
                with contextlib.suppress(FileNotFoundError):
                    (root / rel).unlink()


def _sources(paths, fmt: str):
    """``paths`` as sources: a `Source` is taken as it is (the `crbc_viz.store.watch` follower
    builds its own), every other item goes through `expand_sources`."""
    from ..io.importers import Source, expand_sources

    if not any(isinstance(p, Source) for p in paths):
        return expand_sources(paths, fmt)
    return [s for p in paths for s in ([p] if isinstance(p, Source) else expand_sources([p], fmt))]


def ingest(
    root: str | os.PathLike,
    paths,
    *,
    fmt: str = "auto",
    lenient: bool = False,
    success_threshold: float = 0.0,
    run_id: str | None = None,
    part_rows: int = DEFAULT_PART_ROWS,
    progress: Callable[[dict], None] | None = None,
    import_options: dict | None = None,
    replace: bool = False,
) -> IngestReport:
    """Normalise every log in ``paths`` into the store at ``root`` (created when missing).

    Args:
        paths: files or folders (see `crbc_viz.io.importers.expand_sources`), or `Source` objects.
        fmt: ``auto`` or a format name (``crbc_viz.io.importers.FORMATS``).
        lenient: skip bad rows (reported per source) instead of failing.
        success_threshold: see `crbc_viz.io.load_rollouts`.
        run_id: the run_id of every row (default: the log's own, else the importer's
            choice: the dump folder's run folder, else the file name).
        part_rows: the most rows per Parquet part (parts end at group boundaries).
        progress: called with a dict after each source (``path``, ``status``, ``rows``,
            ``bytes``) and each part (``part``, ``rows``).
        import_options: importer options (``reward_columns``, ``success_column``), see
            `crbc_viz.io.importers.import_source`.
        replace: a log whose path is in the store with other content (it grew, or was
            rewritten) is ingested as a new version of that source, which replaces the old
            one (see `IngestSession.add`); without it, the new content is another source.

    Returns:
        An `IngestReport`.

    Raises:
        LoadError: a source could not be read or validated (sources before it stay committed).
        StoreError: the folder is not a store, another ingest holds its lock, or ``run_id``
            is not valid UTF-8 text.
    """
    _check_run_id(run_id)
    sources = _sources(paths, fmt)
    report = IngestReport()
    with IngestSession(
        root,
        lenient=lenient,
        success_threshold=success_threshold,
        run_id=run_id,
        part_rows=part_rows,
        progress=progress,
        import_options=import_options,
    ) as session:
        for src in sources:
            report.sources.append(session.add(src, replace=replace))
    return report


class IngestSession:
    """An ingest into one store kept open across sources: the store's lock is held and its
    manifests are read once, then refreshed incrementally after each source. `ingest` uses one
    per call; the `crbc_viz.store.watch` follower keeps one for its whole run, so a long watch
    costs one listing per file, not a re-read of every manifest.

    Args: as `ingest` (the per-store options).

    Raises:
        StoreError: the folder is not a store, another ingest holds its lock, or ``run_id``
            is not valid UTF-8 text.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        lenient: bool = False,
        success_threshold: float = 0.0,
        run_id: str | None = None,
        part_rows: int = DEFAULT_PART_ROWS,
        progress: Callable[[dict], None] | None = None,
        import_options: dict | None = None,
    ):
        _check_run_id(run_id)
        self.root = Path(root)
        self.options = (lenient, success_threshold, run_id, part_rows, progress, import_options)
        self.crash_after = _crash_after()
        self.committed = 0
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_locked(self.root))
        try:
            self.store = LogStore(self.root, create=True)
            self._stack.callback(self.store.close)
            (self.root / "manifest").mkdir(exist_ok=True)
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        """Release the store (its connection, then the lock)."""
        self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def add(self, src, *, replace: bool = False) -> dict:
        """Ingest one `Source`; returns its report entry (``status``: ``ingested``, ``resumed``,
        ``skipped``; ``replaced``: the digests of the versions it replaces).

        With ``replace``, the store keeps one version per source path, the newest content read:
        the complete sources ingested from the same path with other content are recorded in
        the new manifest (``replaces``) and hidden from readers in the one write that marks
        the new version complete (`crbc_viz.store.query.hidden_sources`); until then readers
        see the old version whole. Their files are removed by `collect_replaced`. An
        incomplete earlier version of the path (an ingest killed before the log changed
        again) is removed first: its content is gone from the log and cannot be resumed.

        Raises:
            LoadError: the source cannot be read or validated, or holds trajectories another
                source in the store already holds (what it wrote is rolled back when it
                streamed; otherwise its manifest stays incomplete, as after a crash).
        """
        lenient, success_threshold, run_id, part_rows, progress, import_options = self.options
        root, store = self.root, self.store
        nbytes = sum(os.path.getsize(f) for f in src.files)
        digest = _with_run_id(
            file_digest(src.files, src.path if len(src.files) > 1 or src.files[0] != src.path else None),
            run_id,
        )
        replaced = self._prepare_version(src.path, digest) if replace else []
        man, torn = _readable_parts(root, store.manifests.get(digest))
        if man is not None and man.get("complete"):
            entry = {
                "path": src.path,
                "format": src.fmt,
                "status": "skipped",
                "rows": man["rows"],
                "bytes": nbytes,
                "parts": len(man["parts"]),
                "notes": man.get("notes", []),
                "warnings": [],
                "replaced": [],
                "digest": digest,
            }
            if progress:
                progress(entry)
            return entry
        resumed = man is not None
        if man is not None and replaced:
            man = {**man, "replaces": sorted(set(man.get("replaces", [])) | set(replaced))}
        rows_of = man.get("part_rows", part_rows) if man else part_rows
        mpath = root / "manifest" / f"{digest}.json"
        had_manifest = mpath.exists()

        rest = (
            rows_of,
            run_id,
            import_options,
            lenient,
            success_threshold,
            self.committed,
            self.crash_after,
            progress,
        )
        try:
            man, notes, skipped, self.committed = _ingest_source(
                root, store, src, digest, man, *rest, stream=True, replaces=replaced
            )
        except _NotGroupContiguous:
            # Groups recur later in the file: chunks cannot be cut at group boundaries.
            _rollback(root, mpath, man, had_manifest)
            man = _readable_parts(root, store.manifests.get(digest))[0]
            if man is not None and replaced:
                man = {**man, "replaces": sorted(set(man.get("replaces", [])) | set(replaced))}
            man, notes, skipped, self.committed = _ingest_source(
                root, store, src, digest, man, *rest, stream=False, replaces=replaced
            )
        except LoadError:
            if _streams(src):
                _rollback(root, mpath, store.manifests.get(digest), had_manifest)
            raise
        man["parts"].sort(key=_part_number)  # a part written again goes back to its place
        man["complete"] = True
        man["completed_at"] = _dt.datetime.now(_dt.UTC).isoformat()
        _write_json(mpath, man)
        store.refresh()
        if torn:
            man["warnings"].append(
                f"{len(torn)} part(s) of this source in the store could not be read or held "
                f"another row count than recorded (torn by a crash before they reached the "
                f"disk) and were written again: {', '.join(torn[:5])}{' ...' if len(torn) > 5 else ''}"
            )
        entry = {
            "path": src.path,
            "format": src.fmt,
            "status": "resumed" if resumed else "ingested",
            "rows": man["rows"],
            "bytes": nbytes,
            "parts": len(man["parts"]),
            "notes": notes,
            "warnings": list(man["warnings"]),
            "skipped": skipped,
            "replaced": list(man.get("replaces", [])),
            "digest": digest,
        }
        if progress:
            progress(entry)
        return entry

    def _prepare_version(self, path: str, digest: str) -> list[str]:
        """Make way for content ``digest`` of log ``path`` as its newest version; returns the
        digests of the complete versions it is to replace."""
        here = os.path.abspath(path)
        root, store = self.root, self.store
        changed = False
        for d, m in list(store.manifests.items()):
            if d != digest and m.get("complete") and digest in m.get("replaces", ()):
                # The log went back to content an earlier version replaced: that copy goes, and
                # no manifest may still name it as replaced (it would hide the new copy).
                if digest in store.manifests:
                    _drop_source(root, store.manifests[digest])
                _write_json(
                    root / "manifest" / f"{d}.json",
                    {**m, "replaces": [r for r in m["replaces"] if r != digest]},
                )
                changed = True
        if changed:
            store.refresh()
        for d, m in list(store.manifests.items()):
            if d != digest and m.get("path") == here and not m.get("complete"):
                _drop_source(root, m)  # partial earlier content: not in the log any more
                changed = True
        if changed:
            store.refresh()
        return sorted(
            d for d, m in store.sources.items() if d != digest and m.get("path") == here and m.get("complete")
        )

    def collect_replaced(self, grace_s: float = 0.0) -> list[str]:
        """Remove the files of sources replaced by a version complete for at least ``grace_s``
        seconds (a reader that listed the old parts just before the switch can still read them
        meanwhile); returns the digests removed."""
        root, store = self.root, self.store
        now = _dt.datetime.now(_dt.UTC)
        gone: list[str] = []
        for d, m in list(store.manifests.items()):
            if not m.get("complete") or not m.get("replaces"):
                continue
            try:
                age = (now - _dt.datetime.fromisoformat(m["completed_at"])).total_seconds()
            except (KeyError, TypeError, ValueError):
                age = float("inf")  # completed before the time was recorded
            if age < grace_s:
                continue
            for r in m["replaces"]:
                if r in store.manifests and r != d:
                    _drop_source(root, store.manifests[r])
                    gone.append(r)
            _write_json(root / "manifest" / f"{d}.json", {k: v for k, v in m.items() if k != "replaces"})
        if gone or any(m.get("replaces") for m in store.manifests.values()):
            store.refresh()
        return gone


#: Canonical JSONL and Parquet sources larger than one chunk are ingested in chunks of about
#: `STREAM_CHUNK_BYTES` cut at group boundaries, one chunk in memory at a time, so peak
#: memory does not grow with the file (bench/ingest_bench.py: ~0.5 GB at any size).
STREAM_MIN_BYTES = 48 << 20
STREAM_CHUNK_BYTES = 48 << 20
#: Rows per record batch read from a streamed Parquet source (chunks gather whole batches).
PARQUET_BATCH_ROWS = 4096


class _NotGroupContiguous(Exception):
    """A group's rows recur after another group's: the file must be read whole."""


def _streams(src) -> bool:
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


def _rollback(root: Path, mpath: Path, man: dict | None, had_manifest: bool) -> None:
    """Remove what an interrupted streamed source wrote in this run (its parts and, when it
    was new, its manifest), so a failed or restarted source leaves nothing behind."""
    try:
        cur = json.loads(mpath.read_text()) if mpath.exists() else None
    except (OSError, ValueError):
        cur = None
    keep = {p["path"] for p in (man or {}).get("parts", [])} if had_manifest else set()
    for p in (cur or {}).get("parts", []):
        if p["path"] in keep:
            continue
        for rel in (p.get("path"), p.get("text")):
            if rel:
                with contextlib.suppress(FileNotFoundError):
                    (root / rel).unlink()
    if not had_manifest:
        with contextlib.suppress(FileNotFoundError):
            mpath.unlink()
    elif man is not None:
        _write_json(mpath, man)


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


def _source_batches(root: Path, src, run_id, import_options, lenient, success_threshold, stream):
    """(batch, import) of the whole source, or of each streamed chunk in file order."""
    from ..io.importers import import_source
    from ..io.importers._common import Imported
    from ..io.schema import build_batch

    def batch_of(imp):
        if run_id is not None:
            imp.raw.records["run_id"] = run_id
        return build_batch(imp.raw, lenient=lenient, success_threshold=success_threshold), imp

    if not (stream and _streams(src)):
        yield batch_of(import_source(src, **(import_options or {})))
        return
    keys = {k: k for k in ("group_id", "traj_id", "step_idx")}
    seen: set = set()
    for raw in _stream_raw_chunks(src, root / ".ingest-tmp"):
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


def _ingest_source(
    root,
    store,
    src,
    digest,
    man,
    rows_of,
    run_id,
    import_options,
    lenient,
    success_threshold,
    committed,
    crash_after,
    progress,
    *,
    stream,
    replaces=(),
):
    """Write one source's parts (chunk by chunk when it streams); returns the manifest, the
    import notes, the skipped rows of every chunk and the running count of committed parts.
    No chunk is referenced while the next one is read, so a streamed source's peak memory is
    one chunk's."""
    mpath = root / "manifest" / f"{digest}.json"
    done_paths = {p["path"] for p in man["parts"]} if man else set()
    state = {"k": 0, "committed": committed, "counts": None}
    notes: list = []
    skipped: list = []
    first = True
    for batch, imp in _source_batches(root, src, run_id, import_options, lenient, success_threshold, stream):
        overlap = _existing_traj_overlap(store, batch, digest, src.path, exclude=replaces)
        if overlap:
            raise LoadError(overlap)
        if first:
            man = man or {
                "digest": digest,
                "path": os.path.abspath(src.path),
                "format": src.fmt,
                "source_keys": imp.source_keys,
                "notes": list(imp.notes),
                "warnings": [],
                "skipped": 0,
                "rows": 0,
                "part_rows": rows_of,
                "parts": [],
                "started_at": _dt.datetime.now(_dt.UTC).isoformat(),
                "complete": False,
                **({"replaces": list(replaces)} if replaces else {}),
            }
            man["rows"], man["skipped"], man["warnings"] = 0, 0, []
            first = False
        notes = list(imp.notes)
        skipped += list(batch.skipped)
        _write_batch_parts(root, batch, digest, man, mpath, rows_of, done_paths, state, crash_after, progress)
        del batch, imp  # not held while the next chunk is read
    return man, notes, skipped, state["committed"]


def _write_batch_parts(
    root, batch, digest, man, mpath, rows_of, done_paths, state, crash_after, progress
) -> None:
    """Add one batch (a whole source or a chunk) to the source's manifest and write its parts."""
    man["rows"] += batch.num_steps
    man["skipped"] += len(batch.skipped)
    man["warnings"] += [w for w in batch.warnings if w not in man["warnings"]]
    c = _outcome_counts(batch)
    counts = state["counts"]
    state["counts"] = counts = c if counts is None else {key: counts[key] + c[key] for key in c}
    man.update(counts)
    _write_json(mpath, man)
    for (prun, pstep), gs in _plan_parts(batch, rows_of):
        stem = f"{digest[:16]}-{state['k']:04d}"
        state["k"] += 1
        pdir = _partition_dir(prun, pstep)
        rel = f"steps/{pdir}/{stem}.parquet"
        if rel in done_paths:
            continue
        sub = batch.select_groups(gs) if len(gs) != batch.num_groups else batch
        n = sub.num_steps
        hot, txt = _tables(sub, np.full(n, stem, dtype=object), np.arange(n, dtype=np.int32), digest)
        del sub
        trel = None
        if txt is not None:
            trel = f"text/{pdir}/{stem}.parquet"
            _write_parquet(txt, root / trel, text=True)
        del txt
        _write_parquet(hot, root / rel, text=False)
        del hot
        man["parts"].append(
            {"path": rel, "text": trel, "run_id": str(prun), "train_step": int(pstep), "rows": n}
        )
        _write_json(mpath, man)
        state["committed"] += 1
        if progress:
            progress({"part": rel, "rows": n})
        if crash_after is not None and state["committed"] >= crash_after:
            os._exit(17)  # test hook: simulate a crash right after a commit
