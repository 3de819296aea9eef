"""Where the app may read rollout logs from: bundled samples, uploads, and server-side paths
confined to allowed roots (the repo's ``sample_rollouts`` and ``CRBC_VIZ_DATA_ROOTS``), by
the endings of `ALLOWED_SUFFIXES`: the log file endings (`crbc_viz.io.readers.SUFFIXES`), and
the trainers' ``torch.save`` dumps' (`DUMP_SUFFIXES`) where torch is installed; every file is
read in the parse child (`crbc_viz.ui.sandbox`), a dump weights-only as ``crbc-viz ingest``
reads it. A
server path may name a folder (an rLLM episodes folder, a log store): every file under it must
resolve inside the roots too, and it may hold at most `MAX_FOLDER_ENTRIES` files and folders.

No streamlit here, so the rules are unit-testable.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from ..io.importers import WALK_SUFFIXES
from ..io.readers import SUFFIXES as LOG_SUFFIXES  # the one list of log file endings

#: The endings the importers add to the log file endings (``crbc-viz ingest`` walks them too):
#: ``torch.save`` dumps (slime ``.pt``, GraphGPO ``.pth``), read weights-only, with torch.
DUMP_SUFFIXES = tuple(s for s in WALK_SUFFIXES if s not in LOG_SUFFIXES)
#: Whether torch is installed here (looked up, not imported: the parse child imports it).
TORCH_INSTALLED = importlib.util.find_spec("torch") is not None
#: What the app opens (uploads and server paths): the log file endings, and the dumps' endings
#: where torch is installed to read them.
ALLOWED_SUFFIXES = LOG_SUFFIXES + (DUMP_SUFFIXES if TORCH_INSTALLED else ())
#: Said where a dump cannot be read for want of torch.
NO_TORCH = (
    f"{'/'.join(DUMP_SUFFIXES)} dumps (slime, GraphGPO) need torch, which is not installed on "
    f"this server (pip install 'crbc-viz[torch]')"
)

__all__ = [
    "REPO_ROOT",
    "SAMPLES_DIR",
    "UPLOAD_DIR",
    "MAX_UPLOAD_MB",
    "ALLOWED_SUFFIXES",
    "LOG_SUFFIXES",
    "DUMP_SUFFIXES",
    "TORCH_INSTALLED",
    "NO_TORCH",
    "unsupported",
    "allowed_roots",
    "roots_help",
    "discover_samples",
    "default_sample",
    "resolve_data_path",
    "resolve_data_source",
    "folder_files",
    "source_stamp",
    "is_store_folder",
    "MAX_FOLDER_ENTRIES",
    "file_ref",
    "file_digest",
    "save_upload",
    "shown_name",
    "suffix_of",
    "prune_uploads",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "sample_rollouts"
MAX_UPLOAD_MB = 200
#: Uploads kept per server process, oldest removed first past either bound.
MAX_UPLOADS_TOTAL_MB = 2048
MAX_UPLOADS_KEPT = 64
_UPLOAD_PREFIX = "crbc-viz-uploads-"
#: The name each stored upload was last uploaded under (its resolved path -> name), so that
#: messages name the user's file and never the server's copy; the oldest are forgotten first.
_UPLOAD_NAMES: dict[str, str] = {}
_UPLOAD_NAMES_KEPT = 4 * MAX_UPLOADS_KEPT
_STALE_S = 7 * 86400
#: Files and folders a folder given as a server path may hold (it is listed on every rerun).
MAX_FOLDER_ENTRIES = 50_000


def _private_upload_dir() -> Path:
    """This server process's upload folder: made by `tempfile.mkdtemp` (a fresh, unpredictable
    name, mode 0700, owned by this user: no other local user can pre-create it as a symlink or
    read it), removed when the process exits; this user's folders left by killed servers more
    than a week ago are removed on the way."""
    tmp = Path(tempfile.gettempdir())
    now = time.time()
    try:
        for old in tmp.glob(_UPLOAD_PREFIX + "*"):
            st = old.lstat()
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and now - st.st_mtime > _STALE_S:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
    d = Path(tempfile.mkdtemp(prefix=_UPLOAD_PREFIX))
    atexit.register(shutil.rmtree, d, True)
    return d


UPLOAD_DIR = _private_upload_dir()
ENV_ROOTS = "CRBC_VIZ_DATA_ROOTS"
log = logging.getLogger(__name__)


def _root_entries() -> list[str]:
    """The entries of ``$CRBC_VIZ_DATA_ROOTS`` (``os.pathsep``-separated; the ``:`` of an
    ``s3://`` URL does not separate), stripped, empty ones left out."""
    import re

    raw = os.environ.get(ENV_ROOTS, "")
    parts = re.split(r":(?!//)", raw) if os.pathsep == ":" else raw.split(os.pathsep)
    return [p.strip() for p in parts if p.strip()]


def allowed_roots() -> list[Path]:
    """The sample folder, the upload folder, and each folder of ``$CRBC_VIZ_DATA_ROOTS``
    (``os.pathsep``-separated), resolved; its ``s3://`` entries are `allowed_s3_roots`."""
    roots = [SAMPLES_DIR, UPLOAD_DIR]
    for part in _root_entries():
        if not part.startswith("s3://"):
            roots.append(Path(part).expanduser())
    return [r.resolve() for r in roots]


def allowed_s3_roots() -> list[tuple[str, str]]:
    """(bucket, prefix) of each ``s3://BUCKET/PREFIX`` entry of ``$CRBC_VIZ_DATA_ROOTS`` (an
    entry that is not a valid s3 URL allows nothing; the server's log names it)."""
    from ..store.s3 import parse_url

    out = []
    for part in _root_entries():
        if part.startswith("s3://"):
            try:
                out.append(parse_url(part))
            except ValueError as exc:
                log.warning("%s: entry ignored (%s)", ENV_ROOTS, exc)
    return out


def resolve_s3_store(ref: str) -> str:
    """A store on S3 named by ``ref`` (``s3://BUCKET/PREFIX``), as its canonical URL, checked to
    lie at or under an ``s3://`` entry of ``$CRBC_VIZ_DATA_ROOTS`` (a whole segment:
    ``s3://b/runs`` allows ``s3://b/runs/x``, never ``s3://b/runs-other``).

    Raises:
        ValueError: not a valid s3 URL (a bucket name S3 refuses, a ``..`` segment ...), or
            outside the allowed roots (naming the reference, not the roots).
    """
    from ..store.s3 import parse_url

    shown = _shown(ref)
    try:
        bucket, prefix = parse_url(ref)
    except ValueError as exc:
        raise ValueError(f"'{shown}': {str(exc).split(': ', 1)[-1]}") from None
    for rb, rp in allowed_s3_roots():
        if rb == bucket and (not rp or prefix == rp or prefix.startswith(rp + "/")):
            return f"s3://{bucket}/{prefix}".rstrip("/")
    log.info("refused %s: outside the allowed s3 roots %s", shown, allowed_s3_roots())
    raise ValueError(f"'{shown}' is outside the allowed data folders; add it to {ENV_ROOTS} to open it")


def roots_help() -> str:
    """The allowed data folders as the page names them: those inside the app's folder relative
    to it (as a path typed on the page is read); the others, which would show the server's
    layout to every visitor, only counted (the server's log names them). The upload folder is
    left out (uploads are named by their content)."""
    upload = Path(UPLOAD_DIR).resolve()
    inside, outside = [], []
    for r in allowed_roots():
        if r == upload:
            continue
        try:
            inside.append(r.relative_to(REPO_ROOT).as_posix())
        except ValueError:
            outside.append(r)
    shown = ", ".join(dict.fromkeys(inside)) or "none in the app's folder"
    if outside:
        log.info("allowed data folders outside the app's folder: %s", outside)
        shown += f", and {len(outside)} more set in ${ENV_ROOTS} (its value on the server)"
    return shown + f"; extend with ${ENV_ROOTS}"


def _as_asked(path: Path) -> str:
    """A path under a folder the visitor named, as a message quotes it: relative to the app
    when it lies there (never the server's absolute layout around the app), else as it is."""
    try:
        return _shown(Path(path).relative_to(REPO_ROOT).as_posix())
    except ValueError:
        return _shown(str(path))


def suffix_of(name: str) -> str | None:
    """The allowed suffix ``name`` ends with (longest match), or None."""
    low = name.lower()
    for suf in sorted(ALLOWED_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return suf
    return None


def unsupported(name: str) -> str:
    """Why a file named ``name`` is not opened, in one line: a dump's ending where torch is not
    installed says so; any other ending lists the allowed ones."""
    if not TORCH_INSTALLED and name.lower().endswith(DUMP_SUFFIXES):
        return f"'{_shown(name)}': {NO_TORCH}"
    return f"'{_shown(name)}': unsupported file type; expected one of {', '.join(ALLOWED_SUFFIXES)}"


def discover_samples() -> list[str]:
    """Bundled sample logs as repo-relative paths (``sample_rollouts/**/*.jsonl*`` and other
    allowed suffixes), sorted."""
    if not SAMPLES_DIR.is_dir():
        return []
    out = []
    for p in SAMPLES_DIR.rglob("*"):
        if p.is_file() and suffix_of(p.name) and ".jsonl" in p.name.lower():
            out.append(p.relative_to(REPO_ROOT).as_posix())
    return sorted(out)


def default_sample(samples: list[str] | None = None) -> str | None:
    """The Sokoban sample when present, else the toy group, else the first sample."""
    samples = discover_samples() if samples is None else samples
    for want in ("sokoban", "toy"):
        for s in samples:
            if want in s.lower():
                return s
    return samples[0] if samples else None


def _confined(ref: str) -> Path:
    """``ref`` resolved (repo-relative or absolute, symlinks followed) and checked to lie under
    one of `allowed_roots`; raises ValueError naming the reference (the roots go to the server's log only)."""
    if not ref or "\x00" in ref:
        raise ValueError("no path given")
    shown = _shown(ref)
    if len(ref) > 4096:
        raise ValueError(f"'{shown}': path too long")
    try:
        p = Path(ref).expanduser()
        if not p.is_absolute():
            p = REPO_ROOT / p
        p = p.resolve()
        p.exists()  # a name too long or a link loop raises here, not later
    except (OSError, RuntimeError) as exc:  # its text may hold the resolved path: not shown
        raise ValueError(
            f"'{shown}': cannot open ({getattr(exc, 'strerror', None) or type(exc).__name__})"
        ) from None
    roots = allowed_roots()
    if not any(p == r or r in p.parents for r in roots):
        # The refusal names what was asked for; the folders (the server's layout) go to its log.
        log.info("refused %s (resolves to %s): outside the allowed data folders %s", shown, p, roots)
        raise ValueError(
            f"'{shown}' is outside the allowed data folders; add its folder to {ENV_ROOTS} to open it"
        )
    return p


def _shown(ref: str, limit: int = 200) -> str:
    """A reference as quoted in messages: bounded, head and tail kept."""
    return ref if len(ref) <= limit else ref[: limit // 2] + "…" + ref[-limit // 3 :]


def resolve_data_dir(ref: str) -> Path:
    """A folder (a log store) named by ``ref``, confined like `resolve_data_path`."""
    p = _confined(ref)
    if not p.is_dir():
        raise ValueError(f"'{_shown(ref)}' does not exist or is not a folder")
    return p


def resolve_data_path(ref: str) -> Path:
    """The file a reference names, checked: repo-relative or absolute, it must resolve (after
    symlinks) to an existing file with an allowed suffix under one of `allowed_roots`.

    Raises:
        ValueError: naming the reference (not the allowed roots: those go to the log).
    """
    p = _confined(ref)
    if suffix_of(p.name) is None:
        raise ValueError(unsupported(ref))
    if not p.is_file():
        raise ValueError(f"'{_shown(ref)}' does not exist or is not a regular file")
    return p


def resolve_data_source(ref: str) -> Path:
    """What a server path names, checked: a folder, confined like `resolve_data_dir`, or a file
    as `resolve_data_path` checks it.

    Raises:
        ValueError: naming the reference (not the allowed roots: those go to the log).
    """
    p = _confined(ref)
    return p if p.is_dir() else resolve_data_path(ref)


def is_store_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding a log store's marker (``store.json``)."""
    return Path(path).is_dir() and (Path(path) / "store.json").is_file()


def _inside(real: Path, roots: list[Path]) -> bool:
    return any(real == r or r in real.parents for r in roots)


def folder_files(folder: str | os.PathLike) -> list[Path]:
    """Every file under ``folder`` (links to files included; links to folders are not entered,
    as the importers do not enter them), sorted, each checked to resolve inside the allowed
    roots.

    Raises:
        ValueError: a file that resolves outside the roots, a subfolder that cannot be listed,
            or more than `MAX_FOLDER_ENTRIES` files and folders (naming the folder).
    """
    folder = Path(folder)
    roots = allowed_roots()
    out: list[Path] = []
    entries = 0

    def unreadable(exc: OSError):
        where = _as_asked(Path(exc.filename)) if exc.filename else "a subfolder"
        raise ValueError(f"'{_as_asked(folder)}': cannot list {where} ({exc.strerror or type(exc).__name__})")

    for root, dirs, names in os.walk(folder, onerror=unreadable):
        entries += len(dirs) + len(names)
        if entries > MAX_FOLDER_ENTRIES:
            raise ValueError(
                f"'{_as_asked(folder)}' holds more than {MAX_FOLDER_ENTRIES:,} files and folders; "
                f"open one of its folders, or ingest it into a log store (`crbc-viz ingest FOLDER "
                f"--store DIR`) and open the store on the Across training page"
            )
        for n in names:
            f = Path(root) / n
            try:
                real = f.resolve()
            except (OSError, RuntimeError) as exc:  # a link loop
                raise ValueError(f"'{_as_asked(f)}': cannot resolve ({type(exc).__name__})") from None
            if not _inside(real, roots):
                log.info("refused %s: it resolves to %s, outside the allowed data folders %s", f, real, roots)
                raise ValueError(
                    f"'{_as_asked(f)}' resolves outside the allowed data folders; remove the link, "
                    f"or add its folder to {ENV_ROOTS} to open it"
                )
            out.append(f)
    return sorted(out)


def source_stamp(path: str | os.PathLike) -> tuple[int, int]:
    """What changes when the content of a file or folder does: a file's (mtime_ns, size); a
    folder's latest mtime_ns (of itself, its subfolders and its files: a file added, removed or
    rewritten moves it) and its files' total size (`folder_files`).

    Raises:
        ValueError: as `folder_files`; OSError: a file that cannot be read.
    """
    p = Path(path)
    if not p.is_dir():
        st = os.stat(p)
        return st.st_mtime_ns, st.st_size
    latest, total = os.stat(p).st_mtime_ns, 0
    for f in folder_files(p):
        st = os.stat(f)
        latest, total = max(latest, st.st_mtime_ns, os.stat(f.parent).st_mtime_ns), total + st.st_size
    return latest, total


def file_ref(path: Path) -> str:
    """How a file is named in the URL: repo-relative for bundled samples, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of the file's bytes (the cache key of everything computed from it); of a folder,
    of each file's path under it and bytes (`folder_files`)."""
    h = hashlib.sha256()
    if Path(path).is_dir():
        for f in folder_files(path):
            name = f.relative_to(path).as_posix().encode("utf-8", "surrogateescape")
            h.update(len(name).to_bytes(8, "little") + name + bytes.fromhex(file_digest(f)))
        return h.hexdigest()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_upload(name: str, data: bytes) -> Path:
    """Write uploaded bytes to the upload folder under a content-hash name that keeps the
    original suffix (the loader detects the format from it).

    Raises:
        ValueError: unsupported suffix or over `MAX_UPLOAD_MB`.
    """
    suf = suffix_of(name)
    if suf is None:
        raise ValueError(unsupported(name))
    if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
        raise ValueError(f"'{_shown(name)}' is {len(data) / 2**20:.1f} MB; the limit is {MAX_UPLOAD_MB} MB")
    folder = _upload_folder()
    out = folder / (hashlib.sha256(data).hexdigest()[:20] + suf)
    if not out.exists():
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=suf)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    os.utime(out)  # most recently used: pruned last
    _remember_name(out, name)
    prune_uploads(keep=out)
    return out


def _remember_name(stored: Path, name: str) -> None:
    """Record ``name`` (its last path part, non-printable characters as ``?``, bounded) as
    the name of the stored upload ``stored``."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1] or name
    clean = "".join(c if c.isprintable() else "?" for c in base)
    key = str(Path(stored).resolve())
    _UPLOAD_NAMES.pop(key, None)
    _UPLOAD_NAMES[key] = _shown(clean, 120)
    while len(_UPLOAD_NAMES) > _UPLOAD_NAMES_KEPT:
        _UPLOAD_NAMES.pop(next(iter(_UPLOAD_NAMES)), None)


def shown_name(path: str | os.PathLike) -> str:
    """How messages name a file: an upload by the name it was last uploaded under, any other
    file by its name (never a folder of the server)."""
    try:
        key = str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError):
        key = str(path)
    return _UPLOAD_NAMES.get(key) or Path(path).name


def _upload_folder() -> Path:
    """`UPLOAD_DIR`, created 0700 when missing and checked: a real folder (not a symlink)
    owned by this user and closed to others; anything else is refused."""
    folder = Path(UPLOAD_DIR)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        log.error("the upload folder %s is not a private folder of this user", folder)
        raise ValueError(
            "the upload folder is not a private folder of the server's user "
            "(a symlink, another owner, or open to others); refusing to use it"
        )
    return folder


def prune_uploads(keep: Path | None = None) -> None:
    """Remove the oldest files of the upload folder until at most `MAX_UPLOADS_KEPT` files and
    `MAX_UPLOADS_TOTAL_MB` remain (``keep`` is never removed)."""
    try:
        files = [
            (p.stat().st_mtime, p.stat().st_size, p)
            for p in Path(UPLOAD_DIR).iterdir()
            if p.is_file() and not p.is_symlink()
        ]
    except OSError:
        return
    files.sort(key=lambda t: t[0])
    total = sum(size for _, size, _ in files)
    count = len(files)
    for _, size, p in files:
        if count <= MAX_UPLOADS_KEPT and total <= MAX_UPLOADS_TOTAL_MB * 2**20:
            break
        if keep is not None and p == keep:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        count -= 1
        total -= size
