"""The on-disk format of a log store: constants, the marker and manifests, part paths, the
ingest lock and the JSON-encoded column convention (shared by `query` and `ingest`).

Layout of a store folder::

    store.json                               marks the folder as a store (format, version)
    manifest/<key>.json                      one per ingested source: its parts, keys, notes
    steps/run_id=<run>/train_step=<n>/<digest16>-<k>.parquet   hot columns (ids, reward,
                                             action, anchor key + 64-bit hash, outcome ...)
    text/run_id=<run>/train_step=<n>/<digest16>-<k>.parquet    observation / response, aligned
                                             row for row with the steps part (joined on demand)
    cache/                                   derived tables (trends), keyed by the manifest

Crash safety: every part is written to a temporary name, flushed to the disk and renamed into
place; the source's manifest file is rewritten (temp + rename) only after the part is in place.
Readers list only parts named by a manifest, so a crash leaves a readable store, and re-running
the ingest resumes the source where it stopped (part names are deterministic). A source whose
identity (its bytes, path and options: `crbc_viz.store.identity`) is already complete in the
store is skipped, unless one of its parts cannot be read or holds another row count than its
manifest records: that part is written again.

A store on S3 (``s3://BUCKET/PREFIX``, `crbc_viz.store.s3`) has the same layout under its prefix;
a part is uploaded under a temporary key and copied to its key before its manifest names it, and
the lock is a lease object (``.lease``) created with a conditional write.

Versions (``ingest --watch``, a log that grows while a trainer appends to it): the new content's
manifest lists the digests it ``replaces``; readers hide it while it is incomplete and hide the
old version once it is complete (`crbc_viz.store.manifests.hidden_sources`), so the switch is the
one manifest write that marks the new version complete; the old files are removed after.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreError  # noqa: F401  (re-exported)
from ..io.write import atomic_path
from .s3 import check_key, is_remote

__all__ = [
    "StoreError",
    "Part",
    "STORE_FILE",
    "STORE_FORMAT",
    "STORE_VERSION",
    "TEXT_COLUMNS",
    "CRASH_ENV",
    "DEFAULT_PART_ROWS",
]

STORE_FILE = "store.json"
STORE_FORMAT = "crbc-viz-store"
STORE_VERSION = 2
TEXT_COLUMNS = ("observation", "response")
#: Test hook: ``os._exit`` after this many parts were committed by one ingest process.
CRASH_ENV = "CRBC_VIZ_INGEST_CRASH_AFTER_PARTS"
DEFAULT_PART_ROWS = 500_000
_JSON_SUFFIX = "__json"
# Columns the store adds; dropped from RolloutBatch.steps except the text join keys.
_INTERNAL_DROP = ("_anchor_hash", "_traj_return", "_truncated")
_CANONICAL_TYPES = {
    "run_id": "string",
    "train_step": "int64",
    "group_id": "string",
    "traj_id": "string",
    "step_idx": "int64",
    "reward": "float64",
    "action": "string",
    "anchor_key": "string",
    "done": "bool",
    "success": "bool",
    "episode_return": "float64",
    "is_action_valid": "bool",
    "env_name": "string",
    "split": "string",
}
_DROP_AT_INGEST = ("state_hash",)  # folded into anchor_key by build_batch


@dataclass(frozen=True)
class Part:
    """One committed part: its steps file, its text file (or None), and where it belongs."""

    path: str
    text: str | None
    source: str
    run_id: str
    train_step: int
    rows: int
    order: tuple


_OUTCOME_COUNTS = ("trajectories", "truncated", "truncated_success")


def _sum_outcome_counts(manifests) -> dict:
    """Trajectory and truncation counts over the complete sources (None where one was ingested
    before they were recorded); ``truncation_known``: some source logs ``done``."""
    ms = [m for m in manifests if m.get("complete")]
    out: dict = {}
    for k in _OUTCOME_COUNTS:
        vals = [m.get(k) for m in ms]
        ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals)
        out[k] = sum(vals) if ok else None
    flags = [m.get("done_logged") for m in ms]
    out["truncation_known"] = any(flags) if all(isinstance(v, bool) for v in flags) else None
    return out


def _read_marker(marker: Path) -> dict:
    """``store.json`` as a dict, or a `StoreError` naming it (garbage, not an object)."""
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise StoreError(
            f"{marker}: not a valid store marker ({str(exc)[:200]}); expected "
            f'{{"format": "{STORE_FORMAT}", "version": {STORE_VERSION}}}'
        ) from None
    if not isinstance(meta, dict):
        raise StoreError(f"{marker}: not a valid store marker (expected a JSON object)")
    return meta


#: Characters DuckDB's ``read_parquet`` expands as a glob pattern; ingest never writes them in a
#: part path (run ids are percent-encoded), and `glob_literal` escapes them in the store's folder.
GLOB_CHARS = "*?["


def glob_literal(path: str) -> str:
    """``path`` as a pattern DuckDB matches only literally: each glob character in a
    one-character class (``a[1]`` -> ``a[[]1]``), so a store in a folder named ``runs[1]`` reads
    its own parts, never those of ``runs1``."""
    return "".join(f"[{c}]" if c in GLOB_CHARS else c for c in path)


def _confined_part(root: Path, manifest: Path, rel, top: str) -> None:
    """A part path of a manifest must be a relative path under ``root/top`` that exists as a
    regular file (no ``..``, no absolute path, no symlink out of the store, no glob character:
    DuckDB would expand ``steps/x/*.parquet`` to every file there, symlinks out included)."""
    bad = None
    if is_remote(root):
        bad = _confined_key(root, rel, top)
    elif not isinstance(rel, str) or not rel:
        bad = "is not a path"
    elif any(c in rel for c in GLOB_CHARS):
        bad = "holds a glob character (*, ? or [) that would name other files than itself"
    elif (
        os.path.isabs(rel)
        or rel.startswith(("/", "\\"))
        or ".." in Path(rel).parts
        or Path(rel).parts[0] != top
        or "\x00" in rel
    ):
        bad = f"is outside the store's {top}/ folder"
    else:
        full = (root / rel).resolve()
        if (root.resolve() / top) not in full.parents:
            bad = f"resolves outside the store's {top}/ folder"
        elif not full.is_file():
            bad = "is missing (deleted or never written)"
    if bad:
        raise StoreError(
            f"{manifest}: part {str(rel)[:300]!r} {bad}; the manifest is damaged or "
            f"tampered with: restore the file, or remove this manifest and re-ingest "
            f"its source"
        )


def _confined_key(root, rel, top: str) -> str | None:
    """`_confined_part`'s check of a part key of a store on S3 (no links there: a key names
    itself, once it is a plain key under ``top/``, and is listed)."""
    why = check_key(rel) if isinstance(rel, str) else "is not a path"
    if why:
        return why
    if any(c in rel for c in GLOB_CHARS):
        return "holds a glob character (*, ? or [) that would name other files than itself"
    if rel.split("/", 1)[0] != top or "/" not in rel:
        return f"is outside the store's {top}/ folder"
    if not root.has_file(rel):
        return "is missing (deleted or never written)"
    return None


def _check_manifest(root: Path, f: Path, m) -> None:
    """Refuse a manifest that is not what ingest writes, or that names files outside the store."""
    try:
        ok = (
            isinstance(m, dict)
            and isinstance(m["digest"], str)
            and isinstance(m.get("parts", []), list)
            and isinstance(m.get("replaces", []), list)
            and all(isinstance(r, str) for r in m.get("replaces", []))
        )
        for p in m.get("parts", []) if ok else []:
            ok = (
                ok
                and isinstance(p, dict)
                and isinstance(p["run_id"], (str, int))
                and not isinstance(p["train_step"], bool)
                and int(p["train_step"]) == p["train_step"]
                and int(p["rows"]) >= 0
            )
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise StoreError(
            f"{f}: damaged manifest (missing or mistyped digest/parts/replaces/run_id/"
            f"train_step/rows); remove it and re-ingest its source"
        )
    for p in m.get("parts", []):
        _confined_part(root, f, p["path"], "steps")
        if p.get("text") is not None:
            _confined_part(root, f, p["text"], "text")


def _write_json(path: Path, obj) -> None:
    if is_remote(path):  # one PUT: the object appears whole; only while the lease is held
        path.check_lease()
        path.write_bytes(json.dumps(obj, indent=1, ensure_ascii=False).encode("utf-8"))
        return
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())


@contextlib.contextmanager
def _locked(root: Path):
    if is_remote(root):  # a lease object taken by a conditional write (crbc_viz.store.s3)
        from .s3 import Lease

        with Lease(root):
            yield
        return
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{root}: another ingest is writing to this store") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _partition_dir(run_id: str, train_step: int) -> str:
    """The partition folder of a part. A long run id (a folder name is at most 255 bytes, and
    percent-encoding triples non-ASCII) keeps a readable head plus a hash of the whole id;
    readers take run ids from the manifest and the rows, never from this name."""
    q = urllib.parse.quote(str(run_id), safe='')
    if len(q) > 150:
        h = hashlib.blake2b(str(run_id).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        q = f"{q[:100]}~{h}"
    return f"run_id={q}/train_step={int(train_step)}"
