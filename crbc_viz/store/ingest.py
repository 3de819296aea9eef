"""The write side of a log store: `ingest` (whole-source or streamed, resumable, crash-safe)
and `drop_incomplete`. A large source is read chunk by chunk by `crbc_viz.store.stream`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..data import RolloutBatch
from ..errors import LoadError
from ..io.importers import expand_sources
from ..io.write import atomic_path
from .identity import (
    _RepeatsSource,
    copy_of,
    existing_traj_overlap,
    file_digest,
    manifest_key,
    source_identity,
    stamp,
    twins,
)
from .layout import (
    CRASH_ENV,
    DEFAULT_PART_ROWS,
    StoreError,
    _locked,
    _partition_dir,
    _write_json,
)
from .query import LogStore, incomplete_sources
from .rows import tables_of
from .s3 import is_remote, store_root
from .stream import _NotGroupContiguous, source_batches

if TYPE_CHECKING:
    pass

__all__ = ["ingest", "IngestReport", "IngestOptions", "IngestSession", "drop_incomplete", "file_digest"]

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What an ingest did, per source: ``status`` is ``ingested``, ``resumed`` or ``skipped``."""

    sources: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s["rows"] for s in self.sources if s["status"] != "skipped")


@dataclass(frozen=True)
class IngestOptions:
    """The per-store options of an ingest: the keyword arguments of `ingest` (documented there)."""

    lenient: bool = False
    success_threshold: float = 0.0
    run_id: str | None = None
    part_rows: int = DEFAULT_PART_ROWS
    progress: Callable[[dict], None] | None = None
    import_options: dict | None = None


def _outcome_counts(batch: RolloutBatch) -> dict:
    """Per-source counts kept in its manifest (docs/schema.md, "Success and truncation")."""
    from ..analysis.summary import truncation_known

    return {
        "trajectories": batch.num_trajectories,
        "truncated": int(batch.traj_truncated.sum()),
        "truncated_success": int((batch.traj_truncated & batch.traj_success).sum()),
        "done_logged": truncation_known(batch),
    }


def _write_parquet(table, path: Path, *, text: bool) -> None:
    """Write a part under a temporary name, flush it to the disk, then rename it into place: the
    manifest that names it is written after, so it never names a part the disk does not hold."""
    import pyarrow.parquet as pq

    if is_remote(path):
        _write_parquet_s3(table, path, text=text)
        return
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


def _write_parquet_s3(table, path, *, text: bool) -> None:
    """`_write_parquet` on S3: uploaded under a temporary key (an object appears only once its
    upload completed), then copied to its key; the manifest that names it is written after."""
    import pyarrow.parquet as pq

    tmp = path.temporary()
    opts = (
        {"row_group_size": 4096, "use_dictionary": ["_row"], "write_statistics": ["_row"]}
        if text
        else {"row_group_size": 65536}
    )
    try:
        pq.write_table(table, tmp.location, filesystem=tmp.filesystem, compression="zstd", **opts)
        path.commit_from(tmp)
    finally:
        tmp.unlink(missing_ok=True)


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
                if is_remote(root):
                    ok = pq.read_metadata((root / rel).location, filesystem=root.filesystem)
                    ok = ok.num_rows == int(p["rows"])
                else:
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
    import pandas as pd

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
    """Remove every incomplete source from the store at ``root`` (its manifest, then its parts),
    under the ingest lock; returns the source paths dropped. Complete sources are untouched."""
    root = store_root(root)
    LogStore(root)  # a store, or a StoreError
    dropped = []
    with _locked(root):
        store = LogStore(root)
        for m in incomplete_sources(store):
            _drop_source(root, m)
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
    sources = expand_sources(paths, fmt)  # a Source is taken as it is; each source is read by read_source
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
        self.root = store_root(root)  # a Path, or an S3Path for s3://BUCKET/PREFIX
        self.options = IngestOptions(lenient, success_threshold, run_id, part_rows, progress, import_options)
        self.crash_after = _crash_after()
        self.committed = 0
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_locked(self.root))
        try:
            self.store = LogStore(self.root, create=True)
            self._stack.callback(self.store.close)
            (self.root / "manifest").mkdir(exist_ok=True)
            if is_remote(self.root):
                self.root.clear_temporary()  # uploads a killed writer left (the lease is ours)
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
        the new version complete (`crbc_viz.store.manifests.hidden_sources`); until then readers
        see the old version whole. Their files are removed by `collect_replaced`. An
        incomplete earlier version of the path (an ingest killed before the log changed
        again) is removed first: its content is gone from the log and cannot be resumed.

        A source already in the store is skipped (``why`` says how): the same file with the
        same content and options (`crbc_viz.store.identity`), or a copy of another source whose
        rows it repeats (same bytes and options, another path giving the same runs and train
        steps). The same bytes in another train step's folder are another source.

        Raises:
            LoadError: the source cannot be read or validated, or holds trajectories another
                source in the store already holds (what it wrote is rolled back, as on any
                error; a kill leaves its manifest incomplete, to be resumed).
        """
        opts, root, store = self.options, self.root, self.store
        nbytes = sum(os.path.getsize(f) for f in src.files)
        ident = source_identity(
            src,
            run_id=opts.run_id,
            import_options=opts.import_options,
            success_threshold=opts.success_threshold,
        )
        digest = manifest_key(ident, src.fmt, store.manifests)
        replaced = self._prepare_version(src.path, digest) if replace else []
        man, torn = _readable_parts(root, store.manifests.get(digest))
        if man is not None and man.get("complete"):
            return _skip(
                src, nbytes, man, "already in the store (same file, content and options)", opts.progress
            )
        copies = twins(ident, src.fmt, store.sources, replaced) if man is None else []
        new = {"replaces": replaced, "ident": ident, "copies": copies}
        resumed = man is not None
        if man is not None and replaced:
            man = {**man, "replaces": sorted(set(man.get("replaces", [])) | set(replaced))}
        rows_of = man.get("part_rows", opts.part_rows) if man else opts.part_rows
        mpath = root / "manifest" / f"{digest}.json"
        had_manifest = mpath.exists()
        try:
            try:
                man, notes, skipped = self._write_source(src, digest, man, rows_of, stream=True, **new)
            except _NotGroupContiguous:
                # Groups recur later in the file: chunks cannot be cut at group boundaries.
                _rollback(root, mpath, man, had_manifest)
                man = _readable_parts(root, store.manifests.get(digest))[0]
                if man is not None and replaced:
                    man = {**man, "replaces": sorted(set(man.get("replaces", [])) | set(replaced))}
                man, notes, skipped = self._write_source(src, digest, man, rows_of, stream=False, **new)
        except _RepeatsSource as rep:
            why = f"already in the store: same content, run and train step(s) as {rep.source.get('path')}"
            return _skip(src, nbytes, rep.source, why, opts.progress)
        except Exception:  # noqa: BLE001  (any error: nothing of this run stays; re-raised)
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
        if opts.progress:
            opts.progress(entry)
        return entry

    def _write_source(
        self, src, digest: str, man: dict | None, rows_of: int, *, stream: bool, replaces, ident, copies
    ):
        """Write one source's parts (chunk by chunk when it streams); returns the manifest, the
        import notes and the skipped rows of every chunk, and counts the committed parts. No
        chunk is referenced while the next one is read, so a streamed source's peak memory is
        one chunk's. Raises `_RepeatsSource` before writing when the first batch repeats the
        rollouts of one of ``copies`` (`copy_of`)."""
        opts, root = self.options, self.root
        state = {"k": 0, "committed": self.committed, "counts": None, "digest": digest, "rows_of": rows_of}
        state["done"] = {p["path"] for p in man["parts"]} if man else set()  # parts written before
        notes, skipped, first = [], [], True
        if is_remote(root):  # the chunk files of a streamed source: a local folder
            import tempfile

            tmp_dir = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="crbc-viz-ingest-")))
        else:
            tmp_dir = root / ".ingest-tmp"
        batches = source_batches(
            src,
            tmp_dir,
            run_id=opts.run_id,
            import_options=opts.import_options,
            lenient=opts.lenient,
            success_threshold=opts.success_threshold,
            stream=stream,
        )
        for batch, imp in batches:
            if first and copies and (twin := copy_of(batch, copies)) is not None:
                raise _RepeatsSource(twin)
            overlap = existing_traj_overlap(self.store, batch, digest, src.path, exclude=replaces)
            if overlap:
                raise LoadError(overlap)
            if first:
                man = man or {**_new_manifest(src, digest, imp, rows_of, replaces), **stamp(ident)}
                man["rows"], man["skipped"], man["warnings"] = 0, 0, []
                first = False
            notes = list(imp.notes)
            skipped += list(batch.skipped)
            _write_batch_parts(root, batch, man, state, self.crash_after, opts.progress)
            del batch, imp  # not held while the next chunk is read
        self.committed = state["committed"]
        return man, notes, skipped

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


def _skip(src, nbytes: int, man: dict, why: str, progress) -> dict:
    """The report entry of a source already in the store as ``man`` (``why``: how)."""
    log.info("%s: skipped, %s", src.path, why)
    entry = {"path": src.path, "format": src.fmt, "status": "skipped", "rows": man["rows"], "bytes": nbytes}
    entry.update(parts=len(man["parts"]), notes=man.get("notes", []), warnings=[], replaced=[])
    entry.update(digest=man["digest"], why=why)
    if progress:
        progress(entry)
    return entry


def _new_manifest(src, digest: str, imp, rows_of: int, replaces) -> dict:
    """The manifest of a source ingested for the first time, before any part is written."""
    return {
        "digest": digest,
        "path": os.path.abspath(src.path),
        "format": src.fmt,
        "source_keys": imp.source_keys,
        "notes": list(imp.notes),
        "counts": dict(getattr(imp, "counts", {}) or {}),  # the importer's per-file counts
        "warnings": [],
        "skipped": 0,
        "rows": 0,
        "part_rows": rows_of,
        "parts": [],
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(),
        "complete": False,
        **({"replaces": list(replaces)} if replaces else {}),
    }


def _write_batch_parts(root, batch, man: dict, state: dict, crash_after, progress) -> None:
    """Add one batch (a whole source or a chunk) to the source's manifest and write its parts.
    ``state``: the source's ``digest``, ``rows_of``, ``done``; ``k``, ``committed``, ``counts`` go on."""
    digest, rows_of, done_paths = state["digest"], state["rows_of"], state["done"]
    mpath = root / "manifest" / f"{digest}.json"
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
        hot, txt = tables_of(
            sub, np.full(n, stem, dtype=object), np.arange(n, dtype=np.int32), digest, man["path"]
        )
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
