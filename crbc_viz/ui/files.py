"""Where the app may read rollout logs from: bundled samples, uploads, and server-side paths
confined to allowed roots (the repo's ``sample_rollouts`` and ``CRBC_VIZ_DATA_ROOTS``).

No streamlit here, so the rules are unit-testable.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["REPO_ROOT", "SAMPLES_DIR", "UPLOAD_DIR", "MAX_UPLOAD_MB", "ALLOWED_SUFFIXES",
           "allowed_roots", "discover_samples", "default_sample", "resolve_data_path",
           "file_ref", "file_digest", "save_upload", "suffix_of"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "sample_rollouts"
UPLOAD_DIR = Path(tempfile.gettempdir()) / "crbc-viz-uploads"
MAX_UPLOAD_MB = 200
ALLOWED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".pq", ".csv",
                    ".jsonl.gz", ".ndjson.gz", ".json.gz", ".csv.gz")
ENV_ROOTS = "CRBC_VIZ_DATA_ROOTS"


def allowed_roots() -> list[Path]:
    """The sample folder, the upload folder, and each entry of ``$CRBC_VIZ_DATA_ROOTS``
    (``os.pathsep``-separated), resolved."""
    roots = [SAMPLES_DIR, UPLOAD_DIR]
    for part in os.environ.get(ENV_ROOTS, "").split(os.pathsep):
        if part.strip():
            roots.append(Path(part.strip()).expanduser())
    return [r.resolve() for r in roots]


def suffix_of(name: str) -> str | None:
    """The allowed suffix ``name`` ends with (longest match), or None."""
    low = name.lower()
    for suf in sorted(ALLOWED_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return suf
    return None


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
    one of `allowed_roots`; raises ValueError naming the reference and the roots."""
    if not ref or "\x00" in ref:
        raise ValueError("no path given")
    p = Path(ref).expanduser()
    if not p.is_absolute():
        p = REPO_ROOT / p
    p = p.resolve()
    roots = allowed_roots()
    if not any(p == r or r in p.parents for r in roots):
        raise ValueError(f"'{ref}' is outside the allowed data folders "
                         f"({', '.join(str(r) for r in roots)}); add its folder to "
                         f"{ENV_ROOTS} to open it")
    return p


def resolve_data_dir(ref: str) -> Path:
    """A folder (a log store) named by ``ref``, confined like `resolve_data_path`."""
    p = _confined(ref)
    if not p.is_dir():
        raise ValueError(f"'{ref}' does not exist or is not a folder")
    return p


def resolve_data_path(ref: str) -> Path:
    """The file a reference names, checked: repo-relative or absolute, it must resolve (after
    symlinks) to an existing file with an allowed suffix under one of `allowed_roots`.

    Raises:
        ValueError: naming the reference and the allowed roots.
    """
    p = _confined(ref)
    if suffix_of(p.name) is None:
        raise ValueError(f"'{ref}': unsupported file type; expected one of {', '.join(ALLOWED_SUFFIXES)}")
    if not p.is_file():
        raise ValueError(f"'{ref}' does not exist or is not a file")
    return p


def file_ref(path: Path) -> str:
    """How a file is named in the URL: repo-relative for bundled samples, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of the file's bytes (the cache key of everything computed from it)."""
    h = hashlib.sha256()
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
        raise ValueError(f"'{name}': unsupported file type; expected one of {', '.join(ALLOWED_SUFFIXES)}")
    if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
        raise ValueError(f"'{name}' is {len(data) / 2**20:.1f} MB; the limit is {MAX_UPLOAD_MB} MB")
    UPLOAD_DIR.mkdir(parents=True, exist_ok=True)
    out = UPLOAD_DIR / (hashlib.sha256(data).hexdigest()[:20] + suf)
    if not out.exists():
        fd, tmp = tempfile.mkstemp(dir=UPLOAD_DIR, suffix=suf)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    return out
