"""Input guards shared by every reader and importer: what an input file may be and how much it
may expand to, each limit a setting with a clear error naming it (issue 14 item 2 and 8).

- `check_input_file`: regular files only (a FIFO would block or be half-eaten by a format
  sniff; ``/dev/zero`` or a link to it never ends), symlink loops and over-long names named.
- `open_input`: the file's bytes (through gzip when it is gzip), counted *after*
  decompression; reading past ``$CRBC_VIZ_MAX_INPUT_MB`` raises `LoadError`.
- `Budget`: rows, distinct field names and kept problems of one file, each capped
  (``$CRBC_VIZ_MAX_ROWS``, ``$CRBC_VIZ_MAX_FIELDS``, ``$CRBC_VIZ_MAX_PROBLEMS``).
- `first_line`: the first non-blank line of a file for a format sniff, bounded by the line
  limit (a file of one 10 GB line is never read whole to detect its format).

Every limit error is one line: the file, what was exceeded, and the variable that raises it.
"""

from __future__ import annotations

import errno
import gzip
import io
import math
import os
import stat
from dataclasses import dataclass, field

from .errors import LoadError, Problem

__all__ = [
    "ENV_MAX_INPUT",
    "ENV_MAX_ROWS",
    "ENV_MAX_FIELDS",
    "ENV_MAX_PROBLEMS",
    "ENV_MAX_CELLS",
    "MAX_INPUT_MB",
    "MAX_ROWS",
    "MAX_FIELDS",
    "MAX_PROBLEMS",
    "MAX_CELLS",
    "mib_setting",
    "count_setting",
    "check_input_file",
    "open_input",
    "Budget",
    "first_line",
    "limit_error",
]

#: Largest input after decompression, in MiB (``$CRBC_VIZ_MAX_INPUT_MB``).
MAX_INPUT_MB = 1024
ENV_MAX_INPUT = "CRBC_VIZ_MAX_INPUT_MB"
#: Most step rows one file may hold (``$CRBC_VIZ_MAX_ROWS``).
MAX_ROWS = 2_000_000
ENV_MAX_ROWS = "CRBC_VIZ_MAX_ROWS"
#: Most distinct field names one file may use (``$CRBC_VIZ_MAX_FIELDS``): each becomes a column.
MAX_FIELDS = 1000
ENV_MAX_FIELDS = "CRBC_VIZ_MAX_FIELDS"
#: Most table cells (rows x distinct fields) one file may expand to (``$CRBC_VIZ_MAX_CELLS``):
#: a field that appears once still takes a cell in every row.
MAX_CELLS = 100_000_000
ENV_MAX_CELLS = "CRBC_VIZ_MAX_CELLS"
#: Most problems kept for one file (``$CRBC_VIZ_MAX_PROBLEMS``); past it the file is refused.
MAX_PROBLEMS = 10_000
ENV_MAX_PROBLEMS = "CRBC_VIZ_MAX_PROBLEMS"
_GZIP_MAGIC = b"\x1f\x8b"


def _setting(env: str) -> float | None:
    raw = os.environ.get(env, "").strip()
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        raise LoadError([Problem(env, None, None, f"expected a number, got {raw[:40]!r}")]) from None
    if not (v > 0) or not math.isfinite(v):
        raise LoadError([Problem(env, None, None, f"must be a finite number > 0, got {raw[:40]!r}")])
    return v


def mib_setting(env: str, default_mb: float) -> int:
    """A size limit in bytes from ``$env`` (MiB, finite, > 0) or the default; a bad setting
    (text, ``0``, ``inf``, ``nan``) is a `LoadError` naming the variable."""
    v = _setting(env)
    return int((default_mb if v is None else v) * 2**20)


def count_setting(env: str, default: int) -> int:
    """A count limit from ``$env`` (finite, > 0) or the default."""
    v = _setting(env)
    return int(default if v is None else v)


def limit_error(path: str, what: str, env: str, line: int | None = None, where: str = "line") -> LoadError:
    """The one-line error for an exceeded limit: file (and line), what passed which limit, and
    the setting that raises it."""
    return LoadError([Problem(path, line, None, f"{what}; set ${env} to raise the limit", where)])


def check_input_file(path: str) -> os.stat_result:
    """``stat`` of ``path`` after symlinks, refusing anything but a regular file.

    Raises:
        LoadError: no such file, a symlink loop, a name too long, a folder, or a FIFO, socket
            or device (never opened, so nothing blocks and nothing endless is read).
    """
    path = str(path)
    if "\x00" in path:
        raise LoadError([Problem(repr(path)[:200], None, None, "file name contains a NUL character")])
    shown = path if len(path) <= 300 else path[:150] + "…" + path[-100:]
    try:
        st = os.stat(path)
    except OSError as exc:
        reason = {
            errno.ENOENT: "no such file",
            errno.ELOOP: "symbolic link loop (the link points back at itself)",
            errno.ENAMETOOLONG: "file name too long",
            errno.ENOTDIR: "no such file (a parent is not a folder)",
            errno.EACCES: "permission denied",
        }.get(exc.errno, exc.strerror or str(exc))
        raise LoadError([Problem(shown, None, None, reason)]) from None
    if stat.S_ISDIR(st.st_mode):
        raise LoadError([Problem(shown, None, None, "is a directory, expected a file")])
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(st.st_mode)
            else "a character device"
            if stat.S_ISCHR(st.st_mode)
            else "a block device"
            if stat.S_ISBLK(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        raise LoadError(
            [
                Problem(
                    shown,
                    None,
                    None,
                    f"is {kind}; only regular files are read (copy the data to a file first)",
                )
            ]
        )
    return st


class _Capped(io.RawIOBase):
    """A readable stream that raises once more than ``cap`` bytes came out of ``inner``."""

    def __init__(self, inner, cap: int, path: str, gz: bool, env: str = ENV_MAX_INPUT):
        self._inner, self._cap, self._path, self._gz, self.count = inner, cap, path, gz, 0
        self._env = env

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        want = min(len(b), self._cap + 1 - self.count)
        if want <= 0:
            want = min(len(b), 1)
        # Straight into the caller's buffer: a large read (the fast JSONL reader reads the
        # whole file at once) is then one copy, not two.
        n = self._inner.readinto(memoryview(b).cast("B")[:want]) or 0
        self.count += n
        if self.count > self._cap:
            what = "decompressed gzip data" if self._gz else "the file"
            raise limit_error(
                self._path, f"{what} is larger than the limit of {self._cap / 2**20:g} MiB", self._env
            )
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def open_input(
    path: str, cap: int | None = None, *, check: bool = True, env: str | None = None
) -> io.BufferedReader:
    """The bytes of regular file ``path`` (gunzipped when it starts with the gzip magic), as a
    buffered stream that raises `LoadError` once more than ``$CRBC_VIZ_MAX_INPUT_MB`` bytes
    have been decompressed from it, or more than ``cap`` when that is smaller (its setting
    ``env`` named in the message)."""
    path = str(path)
    if check:
        check_input_file(path)
    limit = mib_setting(ENV_MAX_INPUT, MAX_INPUT_MB)
    if cap is not None and int(cap) < limit:
        limit, env = int(cap), env or ENV_MAX_INPUT
    else:
        env = ENV_MAX_INPUT
    cap = limit
    fh = open(path, "rb")
    gz = fh.read(2) == _GZIP_MAGIC
    fh.seek(0)
    inner = gzip.GzipFile(fileobj=fh, mode="rb") if gz else fh
    if gz:
        inner.myfileobj = fh  # closed with the gzip stream
    return io.BufferedReader(_Capped(inner, cap, path, gz, env), buffer_size=1 << 16)


def first_line(path: str, limit: int, *, max_blank: int = 1000) -> bytes | None:
    """The first non-blank line of ``path`` (BOM stripped), read in at most ``limit`` bytes;
    None when the file is empty, the line is longer than ``limit`` or only blank lines come
    within the first ``max_blank`` lines."""
    with open_input(path) as fh:
        for i in range(max_blank):
            raw = fh.readline(limit + 1)
            if not raw or (len(raw) > limit and not raw.endswith(b"\n")):
                return None
            if i == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if raw.strip():
                return raw
    return None


@dataclass
class Budget:
    """Per-file caps on rows, distinct field names and kept problems (defaults from the
    environment). ``rows(n)`` / ``fields(keys)`` / ``problem(p)`` raise a one-line `LoadError`
    naming the file, the line and the setting once a cap is passed."""

    path: str
    where: str = "line"
    max_rows: int = field(default_factory=lambda: count_setting(ENV_MAX_ROWS, MAX_ROWS))
    max_fields: int = field(default_factory=lambda: count_setting(ENV_MAX_FIELDS, MAX_FIELDS))
    max_problems: int = field(default_factory=lambda: count_setting(ENV_MAX_PROBLEMS, MAX_PROBLEMS))
    max_cells: int = field(default_factory=lambda: count_setting(ENV_MAX_CELLS, MAX_CELLS))
    seen: set = field(default_factory=set)
    n_rows: int = 0

    def rows(self, n: int, line: int | None = None) -> None:
        self.n_rows = n
        if n > self.max_rows:
            raise limit_error(
                self.path, f"more than the limit of {self.max_rows:,} rows", ENV_MAX_ROWS, line, self.where
            )
        self._cells(line)

    def _cells(self, line) -> None:
        if self.n_rows * len(self.seen) > self.max_cells:
            raise limit_error(
                self.path,
                f"{self.n_rows:,} rows x {len(self.seen):,} distinct "
                f"fields is more than the limit of {self.max_cells:,} table cells",
                ENV_MAX_CELLS,
                line,
                self.where,
            )

    def fields(self, keys, line: int | None = None) -> None:
        if self.seen.issuperset(keys):
            return
        self.seen.update(keys)
        if len(self.seen) > self.max_fields:
            raise limit_error(
                self.path,
                f"more than the limit of {self.max_fields:,} distinct field names (each becomes a column)",
                ENV_MAX_FIELDS,
                line,
                self.where,
            )
        self._cells(line)

    def problems(self, problems: list, line: int | None = None) -> None:
        if len(problems) > self.max_problems:
            stop = Problem(
                self.path,
                line,
                None,
                f"more than {self.max_problems:,} problems; "
                f"stopped reading (is this a rollout log?); set ${ENV_MAX_PROBLEMS} to "
                f"raise the limit",
                self.where,
            )
            raise LoadError([stop] + problems[:20], total=len(problems) + 1)
