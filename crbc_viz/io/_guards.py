"""Input guards shared by every reader and importer: what an input file may be and how much it
may expand to, each limit a setting with a clear error naming it.

- `check_input_file`: regular files only (a FIFO would block or be half-eaten by a format
  sniff; ``/dev/zero`` or a link to it never ends), symlink loops and over-long names named.
- `open_input`: the file's bytes (through gzip when it is gzip), counted *after*
  decompression; reading past ``$CRBC_VIZ_MAX_INPUT_MB`` raises `LoadError`.
- `Budget`: rows, distinct field names, kept problems and the memory the parsed rows take
  (estimated before they are parsed) of one file, each capped (``$CRBC_VIZ_MAX_ROWS``,
  ``$CRBC_VIZ_MAX_FIELDS``, ``$CRBC_VIZ_MAX_PROBLEMS``, ``$CRBC_VIZ_MAX_MEMORY_MB``).
- `json_problem` / `json_shape`: the nesting depth and the number of values of a JSON text,
  counted on its bytes (strings and escapes respected) *before* a native parser sees them:
  pyarrow's JSON reader dies (SIGSEGV) on nesting some 20,000 deep or on a list of ten million
  numbers, and ``json.loads`` of 30 MB of ``[{},{},...]`` takes some 700 MB
  (``$CRBC_VIZ_MAX_DEPTH``, ``$CRBC_VIZ_MAX_ITEMS``).
- `json_cost`: what ``json.loads`` allocates for a text, estimated from its byte counts.
- `first_line`: the first non-blank line of a file for a format sniff, bounded by the line
  limit (a file of one 10 GB line is never read whole to detect its format).

Every limit error is one line: the file (and line), what was exceeded, and the variable that
raises it.
"""

from __future__ import annotations

import errno
import gzip
import io
import math
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from ..errors import LoadError, Problem

__all__ = [
    "ENV_MAX_INPUT",
    "ENV_MAX_ROWS",
    "ENV_MAX_FIELDS",
    "ENV_MAX_PROBLEMS",
    "ENV_MAX_CELLS",
    "ENV_MAX_DEPTH",
    "ENV_MAX_ITEMS",
    "ENV_MAX_MEMORY",
    "MAX_INPUT_MB",
    "MAX_ROWS",
    "MAX_FIELDS",
    "MAX_PROBLEMS",
    "MAX_CELLS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_MEMORY_MB",
    "CELL_BYTES",
    "mib_setting",
    "count_setting",
    "check_input_file",
    "open_input",
    "Budget",
    "first_line",
    "first_line_numbered",
    "limit_error",
    "json_shape",
    "json_problem",
    "json_cost",
    "check_json",
    "max_depth",
    "max_items",
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
#: Deepest nesting of one JSON line, cell or row of a document (``$CRBC_VIZ_MAX_DEPTH``): the
#: row object is level 1, so ``{"anchor_obs": [[1]]}`` is 3 deep.
MAX_DEPTH = 100
ENV_MAX_DEPTH = "CRBC_VIZ_MAX_DEPTH"
#: Most JSON values (array elements and object members, nested ones included) in one JSONL
#: line or one JSON text cell (``$CRBC_VIZ_MAX_ITEMS``).
MAX_ITEMS = 1_000_000
ENV_MAX_ITEMS = "CRBC_VIZ_MAX_ITEMS"
#: Most memory, in MiB, that the parsed rows of one file may take (``$CRBC_VIZ_MAX_MEMORY_MB``):
#: charged from the bytes *before* they are parsed (`json_cost`, Arrow and table sizes), so a
#: refused file never takes it.
MAX_MEMORY_MB = 768
ENV_MAX_MEMORY = "CRBC_VIZ_MAX_MEMORY_MB"
#: Bytes one cell of the row table takes while it is built and validated (a pandas object or
#: float64 column, the copy validation makes, the parser's per-row objects): rows x distinct
#: fields x this is charged to the memory budget, whether or not a row has the field.
CELL_BYTES = 32
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


#: Largest single read from a gzip stream (a larger one holds the data twice while it is copied).
_GZ_READ = 1 << 23


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
        if self._gz:  # gzip decompresses a read into a new object first: keep that one small
            want = min(want, _GZ_READ)
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
    """The first non-blank line of ``path`` (see `first_line_numbered`)."""
    return first_line_numbered(path, limit, max_blank=max_blank)[1]


def first_line_numbered(path: str, limit: int, *, max_blank: int = 1000) -> tuple[int, bytes | None]:
    """(its line number, the first non-blank line of ``path``) (BOM stripped), read in at most
    ``limit`` bytes; the line is None when the file is empty, the line is longer than
    ``limit`` or only blank lines come within the first ``max_blank`` lines."""
    with open_input(path) as fh:
        for i in range(max_blank):
            raw = fh.readline(limit + 1)
            if not raw or (len(raw) > limit and not raw.endswith(b"\n")):
                return i + 1, None
            if i == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if raw.strip():
                return i + 1, raw
    return max_blank, None


@dataclass
class Budget:
    """Per-file caps on rows, distinct field names, kept problems and memory (defaults from the
    environment). ``rows(n)`` / ``fields(keys)`` / ``problem(p)`` / ``spend(nbytes)`` raise a
    one-line `LoadError` naming the file, the line and the setting once a cap is passed.

    The memory charged is what was `spend`-ed (the parsed values, estimated before parsing)
    plus the row table those rows become: rows x distinct fields x `CELL_BYTES`."""

    path: str
    where: str = "line"
    max_rows: int = field(default_factory=lambda: count_setting(ENV_MAX_ROWS, MAX_ROWS))
    max_fields: int = field(default_factory=lambda: count_setting(ENV_MAX_FIELDS, MAX_FIELDS))
    max_problems: int = field(default_factory=lambda: count_setting(ENV_MAX_PROBLEMS, MAX_PROBLEMS))
    max_cells: int = field(default_factory=lambda: count_setting(ENV_MAX_CELLS, MAX_CELLS))
    max_bytes: int = field(default_factory=lambda: mib_setting(ENV_MAX_MEMORY, MAX_MEMORY_MB))
    seen: set = field(default_factory=set)
    n_rows: int = 0
    spent: int = 0

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
        self._memory(line)

    def memory(self) -> int:
        """The bytes charged so far: values spent plus the table's cells."""
        return self.spent + self.n_rows * len(self.seen) * CELL_BYTES

    def _memory(self, line) -> None:
        used = self.memory()
        if used > self.max_bytes:
            then = (
                f": {self.n_rows:,} rows x {len(self.seen):,} distinct fields and "
                f"{self.spent / 2**20:,.0f} MiB of parsed values"
                if self.n_rows
                else ", estimated from its bytes before parsing"
            )
            raise limit_error(
                self.path,
                f"reading it takes more than the memory limit of {self.max_bytes / 2**20:g} MiB "
                f"(about {used / 2**20:,.0f} MiB by then{then})",
                ENV_MAX_MEMORY,
                line,
                self.where,
            )

    def spend(self, nbytes: int, line: int | None = None) -> None:
        """Charge ``nbytes`` that are about to be allocated (call it before allocating)."""
        self.spent += int(nbytes)
        self._memory(line)

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


# ---------------------------------------------------------------- JSON shape, before parsing
_SCAN_CHUNK = 1 << 20
_OPEN, _CLOSE = 0x7B, 0x7D  # "{" / "}"; "[" / "]" are the same bytes with bit 0x20 clear


def max_depth() -> int:
    """The deepest JSON nesting accepted (``$CRBC_VIZ_MAX_DEPTH`` or `MAX_DEPTH`)."""
    return count_setting(ENV_MAX_DEPTH, MAX_DEPTH)


def max_items() -> int:
    """The most JSON values in one line or cell (``$CRBC_VIZ_MAX_ITEMS`` or `MAX_ITEMS`)."""
    return count_setting(ENV_MAX_ITEMS, MAX_ITEMS)


def json_shape(data) -> tuple[int, int]:
    """(deepest bracket nesting, number of values) of the JSON text ``data`` (bytes-like),
    counted on its bytes: brackets and commas inside strings (escaped quotes respected) do not
    count. The value count is structural commas + opening brackets + 1, which is exact for
    valid JSON but for empty containers (counted as one value each). Linear, in 1 MiB pieces
    (a hostile 32 MiB line costs a few MiB); never raises on invalid JSON (what it reports up
    to the first error is what a parser would build before failing)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    in_str = esc = False
    depth = deepest = values = 0
    for lo in range(0, len(buf), _SCAN_CHUNK):
        b = buf[lo : lo + _SCAN_CHUNK]
        n = len(b)
        escaped = np.zeros(n + 1, dtype=bool)
        slashes = np.flatnonzero(b == 0x5C)
        esc_in = esc
        if esc:
            escaped[0] = True
            if slashes.size and slashes[0] == 0:
                slashes = slashes[1:]  # the second half of a "\\" pair that began before
        if slashes.size:
            cut = np.flatnonzero(np.diff(slashes) != 1)
            run_start = np.r_[slashes[0], slashes[cut + 1]]
            run_end = np.r_[slashes[cut], slashes[-1]] + 1
            escaped[run_end[(run_end - run_start) % 2 == 1]] = True  # after an odd run
        esc = bool(escaped[n])
        quotes = np.flatnonzero(b == 0x22)
        quotes = quotes[~escaped[quotes]]
        folded = b | 0x20
        opens = np.flatnonzero(folded == _OPEN)
        closes = np.flatnonzero(folded == _CLOSE)
        commas = np.flatnonzero(b == 0x2C)
        if slashes.size or esc_in:  # an escaped byte is no bracket (outside a string: invalid)
            opens, closes, commas = (x[~escaped[x]] for x in (opens, closes, commas))
        # A byte is inside a string when an odd number of real quotes precede it.
        opens = opens[(np.searchsorted(quotes, opens) + in_str) % 2 == 0]
        closes = closes[(np.searchsorted(quotes, closes) + in_str) % 2 == 0]
        values += int(((np.searchsorted(quotes, commas) + in_str) % 2 == 0).sum()) + len(opens)
        if opens.size:
            step = np.zeros(n, dtype=np.int8)
            step[opens] = 1
            step[closes] = -1
            deepest = max(deepest, depth + int(np.cumsum(step, dtype=np.int64).max()))
        depth += len(opens) - len(closes)
        in_str = bool((in_str + len(quotes)) % 2)
    return deepest, values + 1


def json_problem(text, depth_limit: int | None = None, items_limit: int | None = None) -> str | None:
    """Why the JSON text ``text`` (bytes or str) may not reach a parser, or None: nested deeper
    than ``$CRBC_VIZ_MAX_DEPTH`` or holding more than ``$CRBC_VIZ_MAX_ITEMS`` values. Cheap
    byte counts first; the exact scan (`json_shape`) only for texts with many brackets or
    commas."""
    depth_limit = max_depth() if depth_limit is None else depth_limit
    items_limit = max_items() if items_limit is None else items_limit
    wide = isinstance(text, str)
    opens = text.count("[" if wide else b"[") + text.count("{" if wide else b"{")
    if opens <= depth_limit and opens + text.count("," if wide else b",") < items_limit:
        return None
    depth, values = json_shape(text.encode("utf-8", "surrogatepass") if wide else text)
    if depth > depth_limit:
        return (
            f"JSON nesting too deep: nested deeper than {depth_limit} levels (the limit; "
            f"set ${ENV_MAX_DEPTH} to raise the limit)"
        )
    if values > items_limit:
        return (
            f"JSON holds {values:,} values, more than the limit of {items_limit:,} in one "
            f"{'line' if isinstance(text, bytes) else 'value'}; set ${ENV_MAX_ITEMS} to raise the limit"
        )
    return None


def check_json(text, path: str, line: int | None = None, where: str = "line", field: str | None = None):
    """``text`` unchanged when `json_problem` finds nothing, else a one-line `LoadError` naming
    the file, the line and the limit (for a parser call that must not see it:
    ``json.loads(check_json(line, path, i))``)."""
    why = json_problem(text)
    if why is not None:
        raise LoadError([Problem(path, line, field, why, where)])
    return text


def json_cost(text) -> int:
    """Bytes ``json.loads`` allocates for the JSON text ``text`` (bytes), estimated from its
    byte counts and meant to be high: each object 200, each array 64, each value or key 48
    (a float, a small string, a list slot or a dict entry) and the text itself once (four
    times when it is not ASCII: one wide character makes a whole string 4 bytes a character).
    ``[{},{},...]`` is 72 bytes a value in Python against 251 charged; a row of ten flat
    fields about 1.3 kB against as much charged."""
    b = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    chars = len(b) if b.isascii() else 4 * len(b)
    return chars + 200 * b.count(b"{") + 64 * b.count(b"[") + 48 * (b.count(b",") + b.count(b":")) + 100
