"""Data sources the pages pass around instead of files: a rollout log file, an upload, or one
group of a log store, each named by a reference that goes into the URL (``?file=…``).

- ``path/to/log.jsonl`` (repo-relative or absolute, under an allowed root): a log file, in any
  format the importers detect (a canonical log, a trainer's dump); ``path/to/episodes``: an
  rLLM episodes folder;
- ``upload:<sha256>.<suffix>``: a file uploaded to this server, by content address;
- ``import:<options>::<file reference>``: either of those read with importer options
  (``format=trl&reward_columns=a,b&success_column=c``, `crbc_viz.ui.sandbox.ReadOptions`), so
  the link reads the file as its sharer saw it;
- ``store:<store folder>::<run>/<train_step>/<group_id>``: one group of a log store, read
  from the store itself (no temporary file), so the link works on any server with the store.

`resolve` checks a reference (confined to the allowed data folders, see `crbc_viz.ui.files`)
and returns a `Source`; `open_batch` loads the `Source.key` it names; `open_store` opens a
store folder for the Across-training page. Every store the app opens is a `LogStore` of this
module: the files its manifests name must lie inside the allowed data folders too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadError
from ..store import LogStore as _LogStore
from ..store import StoreError
from ..store.s3 import is_remote, is_s3_url
from . import files as _files
from . import sandbox as _sandbox
from .files import file_ref, resolve_data_dir, resolve_data_path
from .sandbox import FOLDER_FORMATS, FORMAT_TITLES, READ_PREFIX, ReadOptions, read_key, split_read_key

__all__ = [
    "Source",
    "LogStore",
    "resolve",
    "open_batch",
    "open_store",
    "store_group_ref",
    "default_store",
    "link_ref",
    "resolve_ref",
    "is_upload",
    "file_part",
    "ingest_command",
    "load_error_text",
    "FOLDER_FORMATS",
    "FORMAT_TITLES",
    "ReadOptions",
    "UPLOAD_PREFIX",
    "READ_PREFIX",
    "STORE_PREFIX",
    "BUNDLED_STORE",
    "STORE_ENV",
    "store_state",
]

#: Uploads are named in links by their content hash (``upload:<sha>.<suffix>``): the same
#: bytes give the same link, but only the server that received them holds the file.
UPLOAD_PREFIX = "upload:"
#: A store group: ``store:<folder>::<run>/<train_step>/<group_id>``.
STORE_PREFIX = "store:"
_SEP = "::"
#: The bundled store (a Sokoban group-RL run per estimator, `experiments/sokoban_grpo`),
#: opened when no store is named in the URL or $CRBC_VIZ_STORE.
BUNDLED_STORE = "sample_rollouts/training/store"
STORE_ENV = "CRBC_VIZ_STORE"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """A checked data source.

    Attributes:
        ref: the reference as written in the URL.
        key: what `open_batch` loads (the file's resolved path, with its importer options as
            ``import:<options>::<path>``, or ``store:<abs folder>::label``); the pipeline's
            caches take it beside the content digest.
        name: shown in the sidebar (the file name, an upload's as uploaded, or ``store/label``).
        group: the store group's label (``run/train_step/group_id``), None for a file.
        stamp: what changes when the content does: (mtime_ns, size) of a file (a folder: see
            `crbc_viz.ui.files.source_stamp`), the store's fingerprint for a store group.
        file: the resolved file or folder read ("" for a store group).
        options: the importer options it is read with.
    """

    ref: str
    key: str
    name: str
    group: str | None = None
    stamp: tuple = ()
    file: str = ""
    options: ReadOptions = ReadOptions()

    @property
    def is_store(self) -> bool:
        return self.group is not None

    @property
    def read_tag(self) -> str:
        """What decides how the file's bytes are read besides the bytes: its key (the importer
        options, and the path whose folder and name give a trainer dump's run and train step)
        and its name (an upload is read under it), as a short hash."""
        text = f"{self.key}\0{self.name}".encode("utf-8", "surrogateescape")
        return hashlib.sha256(text).hexdigest()[:16]


def store_group_ref(store_dir: str | os.PathLike, run: str, train_step: int, group_id: str) -> str:
    """The reference of one store group (what "Open in the Graph page" puts in the URL)."""
    folder = str(store_dir) if is_s3_url(str(store_dir)) else file_ref(Path(store_dir))
    return f"{STORE_PREFIX}{folder}{_SEP}{run}/{int(train_step)}/{group_id}"


def file_part(ref: str) -> str:
    """The file reference inside ``ref`` (without its importer options)."""
    return ref[len(READ_PREFIX) :].partition(_SEP)[2] if ref.startswith(READ_PREFIX) else ref


def link_ref(ref: str) -> str:
    """The reference as written in a link (uploads by content address)."""
    if ref.startswith(READ_PREFIX):
        head = ref[: len(ref) - len(file_part(ref))]
        return head + link_ref(file_part(ref))
    try:
        p = Path(ref)
        if p.is_absolute() and p.resolve().parent == Path(_files.UPLOAD_DIR).resolve():
            return UPLOAD_PREFIX + p.name
    except (OSError, ValueError):
        pass
    return ref


def is_upload(ref: str | None) -> bool:
    return bool(ref) and link_ref(file_part(ref)).startswith(UPLOAD_PREFIX)


def load_error_text(err: Exception) -> str:
    """A load error as a page says it: one problem on one line (no "1 problem in input" head),
    several as the error's lines."""
    problems = getattr(err, "problems", None)
    if isinstance(err, LoadError) and len(problems) == 1 and err.total == 1:
        return str(problems[0])
    return str(err)


def ingest_command(shown: str, options: ReadOptions, store: str = "crbc-store") -> str:
    """The ``crbc-viz ingest`` command line that reads the file or folder ``shown`` (an upload by
    the name it was uploaded under) with ``options`` into the log store ``store``."""
    return shlex.join(["crbc-viz", "ingest", shown, *options.cli_flags(), "--store", store])


def resolve_ref(ref: str) -> Path:
    """A file reference (a path or ``upload:…``) as a checked path (see `resolve_data_path`)."""
    if ref.startswith(UPLOAD_PREFIX):
        name = ref[len(UPLOAD_PREFIX) :]
        if "/" in name or "\\" in name or not name:
            raise ValueError("the link names an upload with an invalid name")
        path = Path(_files.UPLOAD_DIR) / name
        if not path.exists():
            raise ValueError(
                "the link names an upload this server does not hold (uploads stay on "
                "the server that received them); upload the file again on the Data page"
            )
        try:
            return resolve_data_path(str(path))
        except ValueError as e:  # named as asked, never by the upload folder's path
            raise ValueError(str(e).replace(str(path), ref)) from None
    return resolve_data_path(ref)


def resolve(ref: str) -> Source:
    """The source a reference names, checked.

    Raises:
        ValueError: the reference is malformed, outside the allowed data folders or missing
            (the message names it); StoreError: the folder is not a store or lacks the group.
    """
    if ref.startswith(STORE_PREFIX):
        folder, sep, label = ref[len(STORE_PREFIX) :].partition(_SEP)
        if not sep or not label:
            raise ValueError(
                f"'{ref[:200]}': a store reference reads store:<folder>{_SEP}<run>/<train_step>/<group_id>"
            )
        store = open_store(folder)
        run, ts, gid = store.resolve_group(label)
        label = f"{run}/{ts}/{gid}"
        return Source(
            ref=store_group_ref(store.root, run, ts, gid),
            key=f"{STORE_PREFIX}{store.root}{_SEP}{label}",
            name=f"{store.root.name}/{label}",
            group=label,
            stamp=(store.fingerprint,),
        )
    inner, options = split_read_key(ref)
    if inner.startswith(UPLOAD_PREFIX):
        path = resolve_ref(inner)
    else:
        path = _files.resolve_data_source(inner)
        if _files.is_store_folder(path):
            raise ValueError(
                f"'{_files._shown(inner)}' is a log store: open it on the Across training page "
                f"(give it as a server path on the Data page for a link)"
            )
    try:
        stamp = _files.source_stamp(path)
    except OSError as exc:
        raise ValueError(f"'{_files._shown(inner)}': cannot read ({exc.strerror or exc})") from None
    name = _files.shown_name(path) if is_upload(inner) else path.name
    return Source(
        ref=read_key(file_ref(path), options),
        key=read_key(str(path), options),
        name=name,
        stamp=stamp,
        file=str(path),
        options=options,
    )


class LogStore(_LogStore):
    """A log store as the app opens it. Each time its manifests are read, every file the store
    reads is checked to resolve (symlinks followed) inside one of the allowed data folders
    (`crbc_viz.ui.files.allowed_roots`): the store folder, its marker, each manifest, each
    part and text file a manifest names, and the trends cache (``cache/`` and its files, which
    the trends read and write). The store's own check keeps parts under its ``steps/`` and
    ``text/`` folders; this one also covers the files that check does not (manifests, cache).

    Part paths are relative to the store folder, so a store copied from another machine opens
    where its files lie inside a root. A manifest's ``path`` (where the source log was read
    from, an absolute path of the machine that ingested it) is a record, never opened: it is
    not checked.

    Raises:
        StoreError: (a ``ValueError``) naming the manifest and the file outside the roots, or
            any error of `crbc_viz.store.LogStore`.
    """

    def refresh(self) -> None:
        super().refresh()
        _check_within_roots(self)


def _check_within_roots(store: _LogStore) -> None:
    """Raise a `StoreError` naming the first file of ``store`` that lies outside the roots (a
    store on S3: its prefix lies under an ``s3://`` root; it holds no links, and the store's
    own check keeps every part key under its ``steps/`` and ``text/``)."""
    if is_remote(store.root):
        try:
            _files.resolve_s3_store(str(store.root))
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        return
    try:
        _check_files(store, _files.allowed_roots())
    except OSError as exc:  # a folder of the store that cannot be listed
        raise StoreError(f"{store.root}: cannot check the store's files ({exc})") from None


def _check_files(store: _LogStore, roots: list[Path]) -> None:
    real = _realpaths()
    # Resolved roots as text: "inside" is a prefix test that ends at a path separator.
    prefixes = [str(r) if str(r).endswith(os.sep) else str(r) + os.sep for r in roots]

    def refuse_outside(path: Path | str, what: str) -> None:
        try:
            text = real(str(path))
        except (OSError, RuntimeError) as exc:  # a link loop
            raise StoreError(f"{what}: cannot resolve it ({type(exc).__name__})") from None
        if not any(text == str(r) or text.startswith(p) for r, p in zip(roots, prefixes)):
            # Where it leads and the folders (the server's layout) go to the log only.
            log.info("refused %s: it resolves to %s, outside the allowed data folders %s", what, text, roots)
            raise StoreError(
                f"{what} resolves outside the allowed data folders (the store links out of them): "
                f"remove the link, or add its target's folder to {_files.ENV_ROOTS} to open it"
            )

    root = store.root
    refuse_outside(root, f"store folder {root}")
    refuse_outside(root / "store.json", f"store marker {root / 'store.json'}")
    mdir = root / "manifest"
    for mfile in sorted(mdir.glob("*.json")) if mdir.is_dir() else []:
        refuse_outside(mfile, f"manifest {mfile}")
    for digest, man in store.sources.items():
        mfile = mdir / f"{digest}.json"
        for part in man.get("parts", []):
            for rel in (part.get("path"), part.get("text")):
                if rel is not None:
                    refuse_outside(os.path.join(root, rel), f"{mfile}: part {str(rel)[:300]!r}")
    cache = root / "cache"
    if cache.is_symlink() or cache.exists():
        refuse_outside(cache, f"the trends cache {cache}")
        if cache.is_dir():
            for f in cache.iterdir():
                refuse_outside(f, f"the trends cache file {f}")


def _realpaths():
    """``str(Path(path).resolve())`` for many paths in few folders. A folder resolved once is
    not walked again, so a path costs one ``lstat`` of its last component (a store's few
    hundred part files, each ~10 folders deep, were ~10,000 ``lstat`` calls per check). A
    component that is a link, ``.`` or ``..`` is resolved in full by ``Path.resolve``."""
    import stat

    memo: dict[str, str] = {}

    def real(path: str) -> str:
        below: list[tuple[str, str]] = []  # (path, its last component), deepest first
        cur = path
        while cur not in memo:
            parent, name = os.path.split(cur)
            if not parent or parent == cur or name in ("", ".", ".."):
                memo[cur] = str(Path(cur).resolve())
                break
            below.append((cur, name))
            cur = parent
        head = memo[cur]
        for full, name in reversed(below):
            joined = os.path.join(head, name)
            try:
                plain = not stat.S_ISLNK(os.lstat(joined).st_mode)
            except OSError:  # missing or unreadable: taken as it is written, as realpath does
                plain = True
            head = memo[full] = joined if plain else str(Path(full).resolve())
        return head

    return real


def open_batch(key: str):
    """The `RolloutBatch` of a `Source.key` (already resolved: no confinement check here), read
    in this process as the sandbox's child reads it (`crbc_viz.ui.sandbox.read`)."""
    if key.startswith(STORE_PREFIX):
        folder, _, label = key[len(STORE_PREFIX) :].partition(_SEP)
        return LogStore(folder).load_batch(group=label, text=True)
    return _sandbox.read(key)


def open_store(ref: str) -> LogStore:
    """The log store in folder ``ref``, confined to the allowed data folders.

    Raises:
        ValueError: outside the allowed folders or not a folder; StoreError: not a store.
    """
    if is_s3_url(ref):  # s3://BUCKET/PREFIX under an s3:// entry of CRBC_VIZ_DATA_ROOTS
        return LogStore(_files.resolve_s3_store(ref))
    return LogStore(resolve_data_dir(ref))


def store_state(ref: str) -> dict:
    """What the Across-training page shows while it follows the store in folder ``ref``
    (`crbc_viz.store.watch.store_state`: one listing, no manifest read), confined like
    `open_store`; a watcher status file that resolves outside the allowed folders is not read.

    Raises:
        ValueError: outside the allowed folders or not a folder.
    """
    from ..store.watch import STATUS_FILE
    from ..store.watch import store_state as _state

    if is_s3_url(ref):  # no watcher writes to a store on S3: its manifests' listing only
        return _state(_files.resolve_s3_store(ref), status=False)
    root = resolve_data_dir(ref)
    state = _state(root, status=False)
    status = root / STATUS_FILE
    if status.is_symlink() or status.exists():
        real = status.resolve()
        if not any(real == r or r in real.parents for r in _files.allowed_roots()):
            state["watch"] = {"error": f"{status} resolves outside the allowed data folders; not read"}
        else:
            state = _state(root)
    return state


def default_store(from_url: str | None) -> str:
    """The store the Across-training page opens: the URL's, else $CRBC_VIZ_STORE, else the
    bundled one when it is there, else none ("")."""
    return (
        from_url
        or os.environ.get(STORE_ENV, "")
        or (BUNDLED_STORE if (_files.REPO_ROOT / BUNDLED_STORE / "store.json").is_file() else "")
    )
