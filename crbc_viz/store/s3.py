"""A log store on S3-compatible object storage: ``s3://BUCKET/PREFIX`` wherever a store folder
is named (``--store``, the app's ``?store=``, ``CRBC_VIZ_DATA_ROOTS``).

`S3Path` is the store's root (and every key under it) with the few `pathlib.Path` operations
the store uses (``/``, ``name``, ``exists``, ``read_text``, ``unlink`` ...), so the store's code
runs unchanged on a folder or a prefix; the Parquet parts are read and written through
pyarrow's S3 file system (`s3_filesystem`), the queries run in DuckDB over pyarrow datasets of
the parts (`crbc_viz.store.query`).

Credentials, endpoint and region come from the standard AWS environment variables:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` (or a profile, as the
AWS SDK finds it), ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (an S3-compatible server),
``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (default ``us-east-1``).

Atomicity: an object appears whole or not at all (a PUT, or a multipart upload completed on
close); a part is uploaded under a temporary key (``.ingest-tmp/``), copied to its final key,
and named by its source's manifest only after that, so a reader never lists a half-written
part, as in a folder.

One writer at a time: `Lease`, an object ``.lease`` under the prefix created with a
conditional write (``If-None-Match: *``: of two writers exactly one creates it, the other is
refused), renewed by its holder (``If-Match`` on its ETag) and released at the end. A writer
killed without releasing it leaves a lease that expires ``ttl`` seconds (`LEASE_ENV`, default
`LEASE_S`) after its last renewal, as the server's clock measures it (its ``Last-Modified``
against the ``Date`` of the reply); the next writer then takes it over by a conditional write
on the stale lease's ETag, so two writers never both take over. The holder checks before each
manifest write (the commit point) that its last successful renewal is less than half a ``ttl``
old, and stops with a `StoreError` otherwise. pyarrow cannot send conditional headers: the
lease goes through boto3 (the ``s3`` extra), needed by writers only (ingest, drop-incomplete).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from types import SimpleNamespace

from ..errors import StoreError

__all__ = ["S3Path", "is_s3_url", "is_remote", "store_root", "s3_filesystem", "Lease", "LEASE_ENV", "LEASE_S"]

#: Reads of an object before its bytes are taken as they are (`S3Path.read_bytes`).
_READ_TRIES = 5

log = logging.getLogger(__name__)

SCHEME = "s3://"
#: Seconds a writer's lease lasts without renewal (its holder renews it every quarter of this).
LEASE_ENV = "CRBC_VIZ_S3_LEASE_S"
LEASE_S = 60.0
LEASE_NAME = ".lease"
TMP_NAME = ".ingest-tmp"
_FS_CACHE: dict[tuple, object] = {}
_FS_LOCK = threading.Lock()


def is_s3_url(value) -> bool:
    """Whether ``value`` names a store on S3 (an ``s3://`` URL or an `S3Path`)."""
    return isinstance(value, S3Path) or (isinstance(value, str) and value.startswith(SCHEME))


def is_remote(path) -> bool:
    """Whether ``path`` (a store root or a path under one) is an `S3Path`."""
    return isinstance(path, S3Path)


def store_root(root):
    """A store root as the store's code takes it: an `S3Path` for an ``s3://`` URL, else a
    `pathlib.Path` (exactly ``Path(root)``)."""
    from pathlib import Path

    if isinstance(root, S3Path):
        return root
    if isinstance(root, str) and root.startswith(SCHEME):
        return S3Path.from_url(root)
    return Path(root)


def _bad_segment(seg: str) -> bool:
    return seg in ("", ".", "..") or "\\" in seg or any(ord(c) < 32 or ord(c) == 127 for c in seg)


def check_key(rel: str) -> str | None:
    """Why ``rel`` (a ``/``-separated key below a store's prefix) is not a plain key, or None:
    an empty, ``.`` or ``..`` segment, a backslash or a control character (S3 keys are
    literal: ``steps/../x`` would be another object than the path it reads as)."""
    if not isinstance(rel, str) or not rel:
        return "is not a key"
    if rel.startswith("/") or any(_bad_segment(s) for s in rel.split("/")):
        return "is not a plain key (an empty, '.' or '..' segment, a backslash or a control character)"
    return None


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://BUCKET/PREFIX`` (the prefix without slashes at its ends).

    Raises:
        StoreError: not an s3 URL, no bucket, a bucket name S3 does not allow, or a prefix
            with an empty, ``.`` or ``..`` segment, a backslash or a control character.
    """
    if not url.startswith(SCHEME):
        raise StoreError(f"{url[:300]!r}: not an s3:// URL")
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    ok = 3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in bucket)
    if not ok or not bucket[0].isalnum() or not bucket[-1].isalnum() or not bucket.isascii():
        raise StoreError(
            f"{url[:300]!r}: not a valid bucket name {bucket[:80]!r} (3 to 63 lowercase letters, "
            f"digits, '.' or '-'); give the store as s3://BUCKET/PREFIX"
        )
    prefix = prefix.strip("/")
    if prefix and (why := check_key(prefix)):
        raise StoreError(f"{url[:300]!r}: the prefix {why}")
    return bucket, prefix


def s3_filesystem():
    """pyarrow's S3 file system configured from the AWS environment variables (one per
    endpoint, region and access key in this process)."""
    import pyarrow.fs as pafs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    key = (endpoint, region, os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_PROFILE"))
    with _FS_LOCK:
        fs = _FS_CACHE.get(key)
        if fs is None:
            kw = {
                "region": region,
                "connect_timeout": 10,
                "request_timeout": 120,
                "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
            }
            if endpoint:
                kw["endpoint_override"] = endpoint
            fs = _FS_CACHE[key] = pafs.S3FileSystem(**kw)
    return fs


class _Store:
    """What every `S3Path` of one store shares: the file system, the bucket, the store's
    prefix, the key listings of one manifest refresh and the writer's lease."""

    def __init__(self, bucket: str, prefix: str):
        self.fs = s3_filesystem()
        self.bucket, self.prefix = bucket, prefix
        self.listing: dict[str, set[str]] = {}
        self.lease: Lease | None = None


class S3Path:
    """A key of a store on S3, with the `pathlib.Path` operations the store uses. ``str()``
    is its ``s3://`` URL; `location` what pyarrow's file system is given."""

    __slots__ = ("_store", "key")
    is_remote = True

    def __init__(self, store: _Store, key: str):
        self._store, self.key = store, key

    @classmethod
    def from_url(cls, url: str) -> S3Path:
        bucket, prefix = parse_url(url)
        return cls(_Store(bucket, prefix), prefix)

    # -- naming ---------------------------------------------------------------------------------
    def __truediv__(self, rel) -> S3Path:
        rel = str(rel).strip("/")
        return S3Path(self._store, f"{self.key}/{rel}" if self.key else rel)

    def __str__(self) -> str:
        return f"{SCHEME}{self._store.bucket}/{self.key}".rstrip("/")

    def __repr__(self) -> str:
        return f"S3Path({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, S3Path) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else self._store.bucket

    @property
    def stem(self) -> str:
        n = self.name
        return n.rsplit(".", 1)[0] if "." in n[1:] else n

    @property
    def parent(self) -> S3Path:
        return S3Path(self._store, self.key.rsplit("/", 1)[0] if "/" in self.key else "")

    @property
    def location(self) -> str:
        """``bucket/key``: the path pyarrow's S3 file system takes."""
        return f"{self._store.bucket}/{self.key}".rstrip("/")

    @property
    def filesystem(self):
        return self._store.fs

    @property
    def root(self) -> S3Path:
        """The store's root (its prefix)."""
        return S3Path(self._store, self._store.prefix)

    def resolve(self) -> S3Path:
        return self

    # -- reading --------------------------------------------------------------------------------
    def _info(self):
        return self._store.fs.get_file_info(self.location)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.Directory

    def is_symlink(self) -> bool:
        return False

    def read_bytes(self) -> bytes:
        """The object's bytes, as one version: pyarrow sizes a read by a HEAD and then GETs that
        many bytes, so an object replaced in between (a manifest rewritten as parts commit) came
        back cut at the old size. Read again until the length read is the object's size."""
        for _ in range(_READ_TRIES):
            with self._store.fs.open_input_stream(self.location) as fh:
                data = fh.read()
            if self._info().size == len(data):
                break
        return data

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def _entries(self, recursive: bool = False):
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(self.location, allow_not_found=True, recursive=recursive)
        return self._store.fs.get_file_info(sel)

    def iterdir(self):
        """The files and "folders" (common prefixes) directly under this key."""
        base = self._store.bucket + "/"
        return [S3Path(self._store, i.path[len(base) :]) for i in self._entries()]

    def scandir(self) -> list:
        """The files directly under this key as `os.DirEntry`-like objects (``name``, ``path``
        (an `S3Path`), ``stat()`` with ``st_size``, ``st_mtime_ns``, ``st_mtime``, ``st_ino`` 0)."""
        import pyarrow.fs as pafs

        out = []
        for i in self._entries():
            if i.type != pafs.FileType.File:
                continue
            path = self / i.base_name
            mt = i.mtime_ns or 0
            st = SimpleNamespace(st_size=i.size, st_mtime_ns=mt, st_mtime=mt / 1e9, st_ino=0)
            out.append(SimpleNamespace(name=i.base_name, path=path, stat=lambda *a, _st=st, **k: _st))
        return out

    def has_file(self, rel: str) -> bool:
        """Whether the object ``rel`` (below this store's root) exists, from one recursive
        listing of its top folder per manifest refresh (`forget_listing`)."""
        top = rel.split("/", 1)[0]
        keys = self._store.listing.get(top)
        if keys is None:
            import pyarrow.fs as pafs

            base = self.root / top
            cut = len(self.root.location) + 1
            keys = {i.path[cut:] for i in base._entries(recursive=True) if i.type == pafs.FileType.File}
            self._store.listing[top] = keys
        return rel in keys

    def forget_listing(self) -> None:
        self._store.listing.clear()

    # -- writing --------------------------------------------------------------------------------
    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to make: a prefix exists once a key is written under it."""

    def write_bytes(self, data: bytes) -> None:
        """One object, whole: uploaded under a temporary key (`temporary`), then copied to this
        key by the server (`commit_from`). A server may keep what it received of a PUT whose
        writer was killed (SeaweedFS did, once, for a manifest); a copy is whole or absent."""
        tmp = self.temporary()
        try:
            with self._store.fs.open_output_stream(tmp.location) as fh:
                fh.write(data)
            self.commit_from(tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)  # nothing left under .ingest-tmp/
            raise

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        import pyarrow.fs as pafs

        if self._info().type == pafs.FileType.NotFound:
            if missing_ok:
                return
            raise FileNotFoundError(2, "no such object", str(self))
        self._store.fs.delete_file(self.location)

    def temporary(self) -> S3Path:
        """A fresh key under the store's ``.ingest-tmp/`` for an upload that is then copied
        to this one (`commit_from`)."""
        return self.root / f"{TMP_NAME}/{uuid.uuid4().hex}-{self.name}"

    def commit_from(self, tmp: S3Path) -> None:
        """Copy the whole object ``tmp`` to this key, then delete ``tmp``."""
        self._store.fs.move(tmp.location, self.location)

    def clear_temporary(self) -> None:
        """Delete what a killed writer left under ``.ingest-tmp/`` (under the lease)."""
        with contextlib.suppress(FileNotFoundError, OSError):
            self._store.fs.delete_dir_contents((self.root / TMP_NAME).location, missing_dir_ok=True)

    @property
    def lease(self) -> Lease | None:
        return self._store.lease

    def check_lease(self) -> None:
        """Before a commit: the writer still holds the store's lease (when it took one)."""
        if self._store.lease is not None:
            self._store.lease.check()


# -- the writer's lease ---------------------------------------------------------------------------
def _lease_ttl() -> float:
    raw = os.environ.get(LEASE_ENV)
    if not raw:
        return LEASE_S
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not (v == v and 0.5 <= v <= 86400):
        raise StoreError(f"{LEASE_ENV}={raw[:50]!r}: expected seconds between 0.5 and 86400")
    return v


def _boto_client():
    from .._extras import require

    what = "a writer of a store on S3 (its lease: a conditional write)"
    boto3 = require("boto3", what)
    Config = require("botocore.config", what).Config

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    cfg = Config(
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        s3={"addressing_style": "path"},
    )
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=cfg)


def _status(exc) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class Lease:
    """The one-writer lease of the store at ``root`` (an `S3Path`), a context manager: taken
    on entry (or a `StoreError` naming its holder), renewed by a daemon thread, released on
    exit. See the module's text for the protocol."""

    def __init__(self, root: S3Path, ttl: float | None = None):
        self.root = root.root
        self.obj = self.root / LEASE_NAME
        self.ttl = _lease_ttl() if ttl is None else float(ttl)
        self.owner = uuid.uuid4().hex
        self.etag: str | None = None
        self.renewed = 0.0  # time.monotonic() when the last successful write was sent
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = None

    def _body(self) -> bytes:
        doc = {
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ttl_s": self.ttl,
            "renewed_at": _dt.datetime.now(_dt.UTC).isoformat(),
        }
        return json.dumps(doc).encode()

    def _put(self, **cond) -> str:
        sent = time.monotonic()
        r = self._client.put_object(
            Bucket=self.root._store.bucket, Key=self.obj.key, Body=self._body(), **cond
        )
        self.renewed = sent
        return r["ETag"]

    def __enter__(self) -> Lease:
        self._client = _boto_client()
        ClientError = self._client.exceptions.ClientError
        try:
            self.etag = self._put(IfNoneMatch="*")
        except ClientError as exc:
            if _status(exc) not in (409, 412):
                raise StoreError(f"{self.root}: cannot take the store's lease ({exc})") from None
            self._take_over()
        except Exception as exc:  # noqa: BLE001  (botocore's connection errors: one line)
            raise StoreError(f"{self.root}: cannot take the store's lease ({exc})") from None
        self.root._store.lease = self
        self._thread = threading.Thread(target=self._renew_loop, name="crbc-viz-s3-lease", daemon=True)
        self._thread.start()
        return self

    def _take_over(self) -> None:
        """The lease exists: take it over when it has expired, else refuse."""
        ClientError = self._client.exceptions.ClientError

        try:
            r = self._client.get_object(Bucket=self.root._store.bucket, Key=self.obj.key)
            raw = r["Body"].read(65536)
        except ClientError as exc:
            if _status(exc) == 404:  # released meanwhile: one more conditional create
                try:
                    self.etag = self._put(IfNoneMatch="*")
                    return
                except ClientError:
                    pass
            raise StoreError(
                f"{self.root}: another ingest is writing to this store (its lease changed while "
                f"it was read); try again"
            ) from None
        try:
            doc = json.loads(raw)
            ttl = float(doc.get("ttl_s", LEASE_S))
        except (ValueError, TypeError, AttributeError):
            doc, ttl = {}, LEASE_S
        now = _server_date(r)
        age = (now - r["LastModified"]).total_seconds() if now is not None else 0.0
        holder = f"{doc.get('host', '?')} pid {doc.get('pid', '?')}" if isinstance(doc, dict) else "?"
        if age <= ttl:
            raise StoreError(
                f"{self.root}: another ingest is writing to this store (its lease {self.obj.name} is "
                f"held by {holder}, renewed {age:.0f} s ago; it expires {ttl:.0f} s after its last "
                f"renewal if that writer stopped)"
            )
        try:
            self.etag = self._put(IfMatch=r["ETag"])
        except ClientError:
            raise StoreError(
                f"{self.root}: another ingest is writing to this store (it took over the expired "
                f"lease of {holder} first)"
            ) from None
        log.warning("%s: took over the lease of %s, expired %.0f s ago", self.root, holder, age - ttl)

    def _renew_loop(self) -> None:
        ClientError = self._client.exceptions.ClientError

        while not self._stop.wait(self.ttl / 4):
            try:
                self.etag = self._put(IfMatch=self.etag)
            except ClientError as exc:
                if _status(exc) in (404, 409, 412):
                    self.lost = "another writer took it over"
                    return
                log.warning("%s: lease renewal failed (%s); retrying", self.root, exc)
            except Exception as exc:  # noqa: BLE001  (a dropped connection: try again)
                log.warning("%s: lease renewal failed (%s); retrying", self.root, exc)

    def check(self) -> None:
        """Raise a `StoreError` unless this writer may still commit."""
        if self.lost is None and time.monotonic() - self.renewed > self.ttl / 2:
            self.lost = f"not renewed for {time.monotonic() - self.renewed:.0f} s"
        if self.lost is not None:
            raise StoreError(
                f"{self.root}: this ingest lost the store's lease ({self.lost}); nothing more is "
                f"committed: run the ingest again to resume"
            )

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.root._store.lease is self:
            self.root._store.lease = None
        if self.lost is None and self.etag is not None:
            with contextlib.suppress(Exception):
                self._client.delete_object(
                    Bucket=self.root._store.bucket, Key=self.obj.key, IfMatch=self.etag
                )


def _server_date(reply) -> _dt.datetime | None:
    """The ``Date`` of a boto3 reply (the server's clock), None without one."""
    from email.utils import parsedate_to_datetime

    raw = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(raw) if raw else None
    except (TypeError, ValueError):
        return None
