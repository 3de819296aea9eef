"""Follow a trainer's dump folder while it trains: each log is ingested once it is complete, and
again, as a new version of the same source, when it grows (``crbc-viz ingest --watch DIR``).

A log is *complete* when it has not changed for ``settle`` seconds (size, mtime and inode, as seen
by the scans) and its format says it ends there (`incomplete_reason`, in
`crbc_viz.store.complete`): JSONL and CSV end with a newline, JSON with ``]`` or ``}``, a gzip
stream reaches its end marker, a Parquet file's footer reads. Until then it is *pending*, never
committed. A log that changes after it was ingested is ingested again with ``replace=True``
(`crbc_viz.store.ingest.IngestSession.add`): the store switches from the old version to the new one
in one manifest write, so it holds the log's whole content once. Sources are keyed by content and
path (`crbc_viz.store.identity`), so after a kill -9 a new watcher ingests what is missing exactly
once (an interrupted source is resumed, or dropped when its log changed since).

The folder is walked as ``ingest DIR`` walks it (`crbc_viz.io.importers.expand_sources`): every
log file below it, one source each; a folder of a ``FOLDER`` format (rLLM episodes: ``--format
rllm``, or detected from its first episode file) gives one source per episode folder. Hidden files and folders, the
store itself and files of other suffixes (a trainer's ``*.tmp``) are never read.

Scans are driven by the file system's change events (watchdog: inotify, FSEvents, ...), with a
full rescan every `RESCAN_S` seconds in case events were lost, or by polling (a stat of the tree
every ``poll_interval`` seconds: network file systems, where events do not arrive). An idle
watcher only waits.

The watcher writes `STATUS_FILE` into the store (pending logs, counts, a heartbeat time) for the
app's Across training page; `store_state` (`crbc_viz.store.watch_status`) reads what that page shows without opening the store.
No streamlit here.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._extras import MissingExtra, install_hint, require
from ..errors import StoreError
from ..io.write import atomic_path
from .complete import incomplete_reason
from .ingest import IngestSession
from .watch_status import HEARTBEAT_S, STATUS_FILE, read_status, store_state

__all__ = [
    "Watcher",
    "WatchEvent",
    "incomplete_reason",
    "store_state",
    "read_status",
    "SETTLE_S",
    "POLL_S",
    "HEARTBEAT_S",
    "RESCAN_S",
    "GRACE_S",
    "STATUS_FILE",
]

log = logging.getLogger(__name__)

#: Seconds a log must stay unchanged before it is read (``--settle``).
SETTLE_S = 5.0
#: Seconds between two scans when polling (``--poll-interval``).
POLL_S = 2.0
#: With change events, a full rescan this often anyway (events can be lost: a full queue).
RESCAN_S = 30.0
#: Seconds the files of a replaced version are kept after the switch (a page that listed them
#: just before it can still read them).
GRACE_S = 30.0
#: How soon a stop asked by a signal ends the wait between two scans (s).
STOP_POLL_S = 0.25
#: Pending logs named in the status file (the count is always whole).
STATUS_LISTED = 20


@dataclass(frozen=True)
class WatchEvent:
    """What the watcher did or saw, one per line of ``ingest --watch``.

    ``kind``: ``ingested`` (a new source), ``replaced`` (a new version of a source), ``resumed``
    (an interrupted ingest finished), ``present`` (already in the store), ``failed`` (the log
    cannot be ingested as it is: ``error``), ``waiting`` (settled but not complete: ``message``
    says why), ``changed`` (the log changed while it was read: read again once it settles),
    ``heartbeat``, ``note``.
    """

    kind: str
    path: str = ""
    fmt: str = ""
    steps: int = 0
    train_steps: int = 0
    message: str = ""
    error: BaseException | None = None


@dataclass
class _Unit:
    """One source as the watcher tracks it: a log file, or an rLLM episode folder."""

    files: tuple[str, ...]
    sig: tuple
    since: float  # clock time ``sig`` was first seen
    done: tuple | None = None  # the signature last ingested (or refused): not read again
    told: tuple | None = None  # the signature a ``waiting`` line was given for


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat()


def _finite(name: str, value: float, *, low: float, positive: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise StoreError(f"{name}: expected a number of seconds, got {value!r}") from None
    if not math.isfinite(v) or v < low or (positive and v <= 0):
        raise StoreError(
            f"{name}: expected a finite number of seconds {'> 0' if positive else f'>= {low:g}'}, got {value!r}"
        )
    return v


class Watcher:
    """Follow ``folder`` into the store at ``store``.

    Args:
        folder: the trainer's dump folder (must exist).
        store: the store folder (created when missing; may lie inside ``folder``: it is skipped).
        fmt: ``auto`` or a format name, as for ``ingest``.
        settle: seconds a log must stay unchanged before it is read.
        poll: scan every ``poll_interval`` seconds instead of waiting for change events.
        heartbeat: seconds between heartbeat events while idle.
        grace: seconds a replaced version's files are kept after the switch.
        on_event: called with each `WatchEvent`.
        clock: the monotonic clock (tests pass their own).
        ingest_options: `IngestSession` options (``lenient``, ``success_threshold``,
            ``run_id``, ``part_rows``, ``import_options``).

    Raises:
        StoreError: ``folder`` is not a folder, a setting is not a finite number of seconds,
            or the store cannot be opened (another ingest holds its lock).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        store: str | os.PathLike,
        *,
        fmt: str = "auto",
        settle: float = SETTLE_S,
        poll: bool = False,
        poll_interval: float = POLL_S,
        heartbeat: float = HEARTBEAT_S,
        grace: float = GRACE_S,
        on_event: Callable[[WatchEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **ingest_options,
    ):
        from ..io.importers import FORMATS
        from .s3 import is_s3_url

        if is_s3_url(store):
            raise StoreError(
                f"--store {store}: --watch follows a run into a local store folder only; ingest "
                f"into a store on S3 with `crbc-viz ingest LOG... --store {store}`"
            )
        if fmt != "auto" and fmt not in FORMATS:
            raise StoreError(f"format {fmt!r}: expected auto or one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self.settle = _finite("--settle", settle, low=0.0)
        self.poll = bool(poll)
        self.poll_interval = _finite("--poll-interval", poll_interval, low=0.0, positive=True)
        self.heartbeat = _finite("--heartbeat", heartbeat, low=0.0, positive=True)
        self.grace = _finite("grace", grace, low=0.0)
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise StoreError(
                f"{self.folder}: no such folder to watch (--watch takes the trainer's dump folder)"
            )
        self.on_event = on_event or (lambda ev: None)
        self.clock = clock
        here, there = self.folder.resolve(), Path(store).resolve()
        if there == here or there in here.parents:
            raise StoreError(
                f"--store {store} holds the watched folder {folder}: the store's own files would be "
                f"read as logs; give a store folder outside it (or inside it: it is skipped)"
            )
        self.session = IngestSession(store, **ingest_options)
        self.store = self.session.root
        self._store_ids = self._ids(self.store)
        self._units: dict[str, _Unit] = {}
        from ..io.importers import FOLDER_FORMATS

        # The FOLDER format the folder is read as ("": file by file; None: not decided yet).
        self._layout: str | None = None if fmt == "auto" else (fmt if fmt in FOLDER_FORMATS else "")
        self._last_beat = self.clock()
        self._last_scan = -math.inf
        self._status_key = None
        self._undecided = False
        self._replaced_at: float | None = None  # clock time of the last version switch
        #: Set by `stop`: a plain flag, since a signal handler must take no lock (see `stop`).
        self._stop_asked = False
        self.wake = threading.Event()
        self.counts = {"ingested": 0, "replaced": 0, "present": 0, "failed": 0}
        self.started_at = _now_iso()
        try:
            # Versions a stopped or killed watcher switched from: removed now, or after the grace.
            self.session.collect_replaced(self.grace)
        except BaseException:
            self.session.close()
            raise
        if any(m.get("replaces") for m in self.session.store.manifests.values()):
            self._replaced_at = self.clock()

    # -- lifecycle ------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask `run` to return (after the log being ingested, if any): safe from a signal handler.

        It only sets a flag: an `Event` takes a lock that this same thread may hold when the
        signal lands (inside ``wake.clear()`` or ``wake.wait()``), and setting it there would
        block forever. `run` waits in slices of `STOP_POLL_S`, so it sees the flag that soon."""
        self._stop_asked = True

    def close(self) -> None:
        """Write the final status and release the store."""
        with contextlib.suppress(OSError):
            self._write_status(force=True, stopped=True)
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- scanning -------------------------------------------------------------------------------
    @staticmethod
    def _ids(path: Path) -> tuple | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _walk(self) -> dict[str, tuple]:
        """Every log file below the folder (as ``ingest DIR`` lists them): path -> (size,
        mtime_ns, inode). Hidden entries, the store and symlinked folders are skipped."""
        from ..io.importers import WALK_SUFFIXES as _SUFFIXES  # what expand_sources walks

        out: dict[str, tuple] = {}
        stack = [str(self.folder)]
        while stack:
            d = stack.pop()
            try:
                it = os.scandir(d)
            except OSError:
                continue  # removed since it was listed (or unreadable: nothing to ingest there)
            with it:
                for e in it:
                    if e.name.startswith("."):
                        continue
                    try:
                        if e.is_dir(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            if (st.st_dev, st.st_ino) != self._store_ids:
                                stack.append(e.path)
                        elif e.name.lower().endswith(_SUFFIXES) and e.is_file():
                            st = e.stat()
                            out[e.path] = (st.st_size, st.st_mtime_ns, st.st_ino)
                    except OSError:
                        continue  # removed while listed
        return out

    def _folder_layout(self, files: dict[str, tuple]) -> str | None:
        """The ``FOLDER`` format the folder holds (one source per folder of its files; "" for
        none: one source per file): given by ``--format``, else decided once from the first
        record of the first file of each ``FOLDER`` format (in path order) as soon as those
        records read (a settled, whole file whose record does not read is not one); None until
        then."""
        if self._layout is not None:
            return self._layout
        from ..io.importers import _REG, peek_fields

        for m in _REG.folders:
            eps = sorted(f for f in files if m.is_folder_file(f))
            if not eps:
                continue  # no file of it yet: every file is its own source (decided later)
            first = eps[0]
            fields = peek_fields(first)
            if fields:
                if m.sniff(fields):
                    self._layout = m.NAME
                    return self._layout
                continue
            u = self._units.get(first)
            settled = (
                u is not None and u.sig == ((first, *files[first]),) and self.clock() - u.since >= self.settle
            )
            if not (settled and incomplete_reason(first) is None):
                return None  # the first file's record does not read yet
        if any(m.is_folder_file(f) for m in _REG.folders for f in files):
            self._layout = ""  # read one file at a time, each naming why
        return self._layout if self._layout is not None else ""

    def scan(self) -> None:
        """Stat the tree and update every source's signature (a changed one restarts its settle
        time)."""
        from ..io.importers import _REG

        now = self.clock()
        self._last_scan = now
        files = self._walk()
        layout = self._folder_layout(files)
        self._undecided = layout is None
        units: dict[str, list[str]] = {}
        for f in files:
            if layout:
                if _REG.by_name[layout].is_folder_file(f):
                    units.setdefault(os.path.dirname(f), []).append(f)
            else:  # one source per file (and, undecided, tracked per file until decided)
                units[f] = [f]
        seen = {}
        for path, fs in units.items():
            fs.sort()
            sig = tuple((f, *files[f]) for f in fs)
            u = self._units.get(path)
            if u is None:
                u = _Unit(tuple(fs), sig, now)
            elif u.sig != sig:
                u.files, u.sig, u.since = tuple(fs), sig, now
            seen[path] = u
        self._units = seen

    # -- one pass -------------------------------------------------------------------------------
    def pending(self) -> list[str]:
        """Sources seen whose current content is not in the store yet (settling, incomplete,
        or about to be read)."""
        return sorted(p for p, u in self._units.items() if u.sig != u.done)

    def _ready(self, now: float) -> list[str]:
        return sorted(
            p
            for p, u in self._units.items()
            if u.sig != u.done and u.told != u.sig and now - u.since >= self.settle
        )

    def step(self) -> list[WatchEvent]:
        """Scan, then ingest every source that is complete; returns (and reports) what happened."""
        events: list[WatchEvent] = []

        def emit(ev: WatchEvent) -> None:
            events.append(ev)
            self.on_event(ev)

        self.scan()
        if self._undecided:
            self.scan()  # the layout may be decided now that the first file settled
        for path in self._ready(self.clock()):
            if self._stop_asked:
                break
            # Undecided (rLLM or not: the first JSON file does not read yet), only say why
            # a log waits; nothing is read as a source until it is decided.
            self._consider(path, emit, ingest=not self._undecided)
        if self._replaced_at is not None and self.clock() - self._replaced_at >= self.grace:
            self.session.collect_replaced(0.0)  # the last switch is older than the grace
            self._replaced_at = None
        if events:
            self._last_beat = self.clock()
        elif self.clock() - self._last_beat >= self.heartbeat:
            self._last_beat = self.clock()
            n = len(self.pending())
            emit(
                WatchEvent(
                    "heartbeat",
                    message=f"watching {self.folder}: {self.counts['ingested'] + self.counts['replaced']} "
                    f"log(s) ingested, {n} pending",
                )
            )
            self._write_status(force=True)
        self._write_status()
        return events

    def _rel(self, path: str) -> str:
        try:
            return os.path.relpath(path, self.folder)
        except ValueError:
            return path

    def _consider(self, path: str, emit, *, ingest: bool = True) -> None:
        """Ingest one settled source when it is complete (``ingest=False``: only say why it
        cannot be, once per content)."""
        from ..io.importers import Source, expand_sources

        u = self._units[path]
        for f in u.files:
            why = incomplete_reason(f)
            if why is not None:
                if u.told != u.sig:
                    u.told = u.sig
                    emit(WatchEvent("waiting", self._rel(f), message=why))
                return
        if not ingest:
            return
        before = u.sig
        try:
            if os.path.isdir(path):
                (src,) = [Source(path, self._layout, u.files)]
            else:
                (src,) = expand_sources([path], self.fmt)
            self._write_status(force=True, writing=path)
            entry = self.session.add(src, replace=True)
        except FileNotFoundError:
            return  # removed since the scan: the next scan forgets it
        except Exception as exc:  # noqa: BLE001  (one log that cannot be ingested never stops the watch)
            u.done = before
            self.counts["failed"] += 1
            emit(WatchEvent("failed", self._rel(path), error=exc))
            return
        after = tuple((f, *self._stat(f)) for f in u.files)
        u.done = before
        if after != before:
            # Written while it was read: the version committed may be a mix; the next one,
            # once the log settles again, replaces it.
            emit(
                WatchEvent(
                    "changed",
                    self._rel(path),
                    message="changed while it was read; read again once it settles",
                )
            )
        man = self.session.store.manifests.get(entry["digest"], {})
        train_steps = len({(str(p["run_id"]), int(p["train_step"])) for p in man.get("parts", [])})
        if entry["status"] == "skipped":
            kind = "present"
        elif entry.get("replaced"):
            kind = "replaced"
            self._replaced_at = self.clock()
        elif entry["status"] == "resumed":
            kind = "resumed"
        else:
            kind = "ingested"
        self.counts[kind if kind in ("present", "replaced") else "ingested"] += 1
        fields = (entry["format"], int(entry["rows"]), train_steps, entry.get("why", ""))
        emit(WatchEvent(kind, self._rel(path), *fields))

    @staticmethod
    def _stat(f: str) -> tuple:
        try:
            st = os.stat(f)
        except OSError:
            return (None, None, None)
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    # -- waiting --------------------------------------------------------------------------------
    def next_wait(self) -> float:
        """Seconds until the watcher has something to do that no change event announces: a
        source's settle time ending, a heartbeat, a replaced version's grace ending, the next
        poll (or, with events, the next safety rescan)."""
        now = self.clock()
        waits = [self._last_beat + self.heartbeat - now, self._last_scan + RESCAN_S - now]
        if self._replaced_at is not None:
            waits.append(self._replaced_at + self.grace - now)
        if self.poll or self._undecided:
            waits.append(self._last_scan + self.poll_interval - now)
        else:
            waits += [
                u.since + self.settle - now
                for u in self._units.values()
                if u.sig != u.done and u.told != u.sig
            ]
        return max(0.0, min(waits))

    def _observe(self, emit):
        """Start a change-event observer that sets `wake`; None (and a note) when there is none."""
        try:
            FileSystemEventHandler = require("watchdog.events").FileSystemEventHandler
            Observer = require("watchdog.observers").Observer
        except MissingExtra:
            emit(
                WatchEvent(
                    "note",
                    message=f"watchdog is not installed: polling every {self.poll_interval:g} s "
                    f"(for change events: {install_hint('watch')})",
                )
            )
            return None
        ignored = {"opened", "closed_no_write"}
        store = str(self.store.resolve())
        wake = self.wake

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ignored:
                    return
                src = os.fsdecode(event.src_path)
                if src == store or src.startswith(store + os.sep):
                    return  # the store's own writes
                wake.set()

        obs = Observer()
        try:
            obs.schedule(Handler(), str(self.folder.resolve()), recursive=True)
            obs.start()
        except OSError as exc:  # e.g. the inotify watch limit
            with contextlib.suppress(Exception):
                obs.stop()
            emit(
                WatchEvent(
                    "note",
                    message=f"no file change events ({exc}): polling every {self.poll_interval:g} s",
                )
            )
            self.poll = True
            return None
        return obs

    def run(self) -> None:
        """Follow the folder until `stop` is called."""
        observer = None if self.poll else self._observe(self.on_event)
        try:
            while not self._stop_asked:
                self.wake.clear()
                self.step()
                if self._stop_asked:
                    break
                self._sleep(self.next_wait())
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=5)

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until a file event sets `wake`, or until `stop` is asked."""
        end = time.monotonic() + seconds
        while not self._stop_asked:
            left = end - time.monotonic()
            if left <= 0 or self.wake.wait(min(left, STOP_POLL_S)):
                return

    # -- status ---------------------------------------------------------------------------------
    def _write_status(
        self, *, force: bool = False, writing: str | None = None, stopped: bool = False
    ) -> None:
        """Write `STATUS_FILE` when what it says changed (or ``force``: a heartbeat)."""
        pending = self.pending()
        key = (tuple(pending), tuple(sorted(self.counts.items())), writing, stopped)
        if not force and key == self._status_key:
            return
        self._status_key = key
        status = {
            "folder": str(self.folder.resolve()),
            "pid": os.getpid(),
            "started_at": self.started_at,
            "updated_at": _now_iso(),
            "heartbeat_s": self.heartbeat,
            "settle_s": self.settle,
            "mode": "polling" if self.poll else "events",
            "pending": len(pending),
            "pending_paths": [self._rel(p) for p in pending[:STATUS_LISTED]],
            "writing": self._rel(writing) if writing else None,
            **self.counts,
        }
        if stopped:
            status["stopped_at"] = status["updated_at"]
            status["writing"] = None
        # Replaced atomically, not flushed to the disk: a status lost in a crash is rewritten
        # by the next watcher, and a fsync per log would be most of a small log's cost.
        with atomic_path(self.store / STATUS_FILE) as tmp:
            Path(tmp).write_text(json.dumps(status, indent=1), encoding="utf-8")
