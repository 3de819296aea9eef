"""Read a rollout log in a child process, so that no file can take the app server down.

The readers bound what a file may expand to (`crbc_viz.io`), but a native parser (pyarrow's
JSON reader, a Parquet decoder, zlib) can still crash on a hostile file, or a file can need more
memory than the server has. `open_batch` therefore reads every upload and every server path in
a fresh ``python -m crbc_viz.ui.sandbox_child`` process, limited to:

- ``$CRBC_VIZ_PARSE_MEMORY_MB`` MiB of address space (``RLIMIT_AS``, default
  `PARSE_MEMORY_MB`). Arrow uses the system allocator there and glibc two arenas, so the
  address space tracks the memory the parse really uses (jemalloc's and per-thread arenas'
  reservations would otherwise count against the limit without being used);
- ``$CRBC_VIZ_PARSE_TIMEOUT_S`` seconds of wall-clock time (default `PARSE_TIMEOUT_S`); the
  parent kills the child then, and the child arms an alarm of its own, so it ends even when the
  server is gone;
- no core file.

The child (`crbc_viz.ui.sandbox_child`) writes the `RolloutBatch`, or the error, as data (Arrow
IPC and JSON, `crbc_viz.ui.outcome`; never a pickle) into a folder of the parent's, which the
parent reads only after a clean exit and removes in any case (the child's ``$TMPDIR`` lies in
it too, so a killed child leaves no copy of an upload). A server path is read only if it is
still the file it resolved to (`open_batch`). A child that dies by a signal, or runs out of
memory or time, becomes a `ParseAbortedError`: one line that names the file as the user knows
it (an upload by the name it was uploaded under, never the server's copy's path). At most
`MAX_CHILDREN` children run at once, so concurrent uploads cannot add up past the host's memory.

What is read (`read`, in the child and for bundled samples alike): a file in any format the
importers detect (`crbc_viz.io.importers`: canonical logs, verl-agent dumps, verl
``rollout_data_dir`` files, ROLL dumps, TRL completions parquets, ms-swift ``completions.jsonl``),
an rLLM episodes folder, or one group of a log store. A key may carry the importer options of
``crbc-viz ingest`` (`ReadOptions`: ``import:<options>::<path>``). An upload is read under the
name it was uploaded under, in a private folder of the child (the importers take the train step
from a dump's file name and the run from its folder: never from the server's copy).

Bundled samples (files under `crbc_viz.ui.files.SAMPLES_DIR`, the bundled store included) are
trusted and read in this process: the default view pays no child start (~1 s).

Test hook: ``$CRBC_VIZ_PARSE_TEST_HOOK`` set to ``abort`` makes the child call `os.abort`,
``memory`` makes it allocate past its limit, ``sleep`` makes it outlive its timeout: the
failure paths, without a file that crashes today's parsers.

No streamlit here; `crbc_viz.ui.pipeline.load_batch` caches the outcome (a refusal included),
so the child runs once per file content.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from ..errors import LoadError, ParseAbortedError, Problem
from ..io import _guards
from ..io.importers import FOLDER_FORMATS, IMPORT_OPTIONS, TITLES
from .outcome import READ_AS_KEY, _BadOutcome, read_outcome

__all__ = [
    "open_batch",
    "read",
    "read_as",
    "ReadAs",
    "ReadOptions",
    "read_key",
    "split_read_key",
    "READ_PREFIX",
    "FOLDER_FORMATS",
    "FORMAT_TITLES",
    "is_trusted",
    "parse_limits",
    "PARSE_MEMORY_MB",
    "PARSE_TIMEOUT_S",
    "ENV_PARSE_MEMORY",
    "ENV_PARSE_TIMEOUT",
    "ENV_TEST_HOOK",
    "MAX_CHILDREN",
]

log = logging.getLogger(__name__)

#: Address space of the child that reads one file, in MiB (``$CRBC_VIZ_PARSE_MEMORY_MB``).
PARSE_MEMORY_MB = 4096
ENV_PARSE_MEMORY = "CRBC_VIZ_PARSE_MEMORY_MB"
#: Wall-clock seconds the child may take (``$CRBC_VIZ_PARSE_TIMEOUT_S``).
PARSE_TIMEOUT_S = 120
ENV_PARSE_TIMEOUT = "CRBC_VIZ_PARSE_TIMEOUT_S"
ENV_TEST_HOOK = "CRBC_VIZ_PARSE_TEST_HOOK"
#: Children reading at once; a further load waits for one of them to end.
MAX_CHILDREN = 2
_SLOTS = threading.BoundedSemaphore(MAX_CHILDREN)
#: The child's alarm rings this long after the parent's deadline (the parent kills it first).
_ALARM_GRACE_S = 5
#: A store group's key (`crbc_viz.ui.sources.Source.key`): ``store:<folder>::<run>/<step>/<gid>``.
_STORE_PREFIX, _STORE_SEP = "store:", "::"
_STDERR_TAIL = 4000
#: A file or folder read with importer options: ``import:<options>::<path>`` (`read_key`).
READ_PREFIX = "import:"
#: How the page names each importer's format ("Read as: …").
FORMAT_TITLES = TITLES
#: Importer options a key may carry (the names of ``crbc-viz ingest``'s flags).
_OPTION_NAMES = ("format", *IMPORT_OPTIONS)
_MAX_OPTION_CHARS = 200
_MAX_REWARD_COLUMNS = 64


@dataclass(frozen=True)
class ReadOptions:
    """How a file is read: ``crbc-viz ingest``'s ``--format``, ``--reward-columns`` and
    ``--success-column`` (the last two: TRL and ms-swift files; the last also ART and
    tinker-cookbook, naming a metrics key), and ``--map`` (a field
    map, `crbc_viz.io.importers.fieldmap`: the file is then read as ``fieldmap``).

    Attributes:
        fmt: ``auto`` (detected from the file's fields) or one importer's name.
        reward_columns: the reward-function columns; empty: the importer decides.
        success_column: the 0/1 column that is success; None: the importer decides.
        field_map: the field map as ``target=path; ...`` (``str`` of a `FieldMap`); "" none.
    """

    fmt: str = "auto"
    reward_columns: tuple[str, ...] = ()
    success_column: str | None = None
    field_map: str = ""

    def __post_init__(self) -> None:
        from ..io.importers import FORMATS

        if self.fmt != "auto" and self.fmt not in FORMATS:
            raise ValueError(f"format {self.fmt[:60]!r} is not one of: auto, {', '.join(FORMATS)}")
        self._check_map()
        if len(self.reward_columns) > _MAX_REWARD_COLUMNS:
            raise ValueError(f"reward columns: at most {_MAX_REWARD_COLUMNS} names")
        for what, name in [("reward column", c) for c in self.reward_columns] + (
            [("success column", self.success_column)] if self.success_column is not None else []
        ):
            if not isinstance(name, str) or not name.strip() or name != name.strip():
                raise ValueError(f"{what} {str(name)[:60]!r}: expected a column name")
            if len(name) > _MAX_OPTION_CHARS or "," in name or not name.isprintable():
                raise ValueError(
                    f"{what} {name[:60]!r}: a column name of at most {_MAX_OPTION_CHARS} printable "
                    f"characters, without commas"
                )

    def _check_map(self) -> None:
        """A field map reads the file as ``fieldmap``, and ``fieldmap`` needs one; the map's
        text is its canonical ``target=path; ...`` (what `from_text` makes)."""
        from ..io.importers.fieldmap import NAME, map_from_text

        if not self.field_map:
            if self.fmt == NAME:
                raise ValueError("format fieldmap: give a field map (target=path, one a line)")
            return
        if self.fmt != NAME:
            raise ValueError(f"a field map reads the file as {NAME}, not as {self.fmt[:60]}")
        try:
            text = str(map_from_text(self.field_map))
        except LoadError as exc:
            raise ValueError(f"field map: {exc.problems[0]}") from None
        if text != self.field_map:
            raise ValueError(f"field map {self.field_map[:120]!r}: expected it as {text[:120]!r}")

    @classmethod
    def from_text(
        cls, fmt: str, reward_columns: str, success_column: str, field_map: str = ""
    ) -> ReadOptions:
        """Options as typed: reward columns comma-separated (as ``--reward-columns A,B``),
        blank fields for "the importer decides"; a field map as ``target=path`` lines or a
        map file's TOML (the format is then ``fieldmap``).

        Raises:
            ValueError: naming the option and the value.
        """
        from ..io.importers.fieldmap import NAME, map_from_text

        cols = tuple(c.strip() for c in (reward_columns or "").split(",") if c.strip())
        text = ""
        if (field_map or "").strip():
            try:
                text = str(map_from_text(field_map))
            except LoadError as exc:
                raise ValueError(f"field map: {exc.problems[0]}") from None
            fmt = NAME if (fmt or "auto") == "auto" else fmt
        return cls(fmt or "auto", cols, (success_column or "").strip() or None, text)

    @property
    def is_default(self) -> bool:
        return self == ReadOptions()

    def encode(self) -> str:
        """The options as a query string (defaults left out; "" when all are defaults)."""
        pairs = []
        if self.fmt != "auto":
            pairs.append(("format", self.fmt))
        if self.reward_columns:
            pairs.append(("reward_columns", ",".join(self.reward_columns)))
        if self.success_column is not None:
            pairs.append(("success_column", self.success_column))
        if self.field_map:
            pairs.append(("field_map", self.field_map))
        return urlencode(pairs)

    @classmethod
    def decode(cls, text: str) -> ReadOptions:
        """The options of `encode`'s text.

        Raises:
            ValueError: an unknown or repeated option, or a bad value (naming it).
        """
        try:
            pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
        except ValueError:
            raise ValueError(f"import options {text[:120]!r}: expected name=value&…") from None
        seen: dict[str, str] = {}
        for name, value in pairs:
            if name not in _OPTION_NAMES:
                raise ValueError(f"unknown import option {name[:60]!r}; valid: {', '.join(_OPTION_NAMES)}")
            if name in seen:
                raise ValueError(f"import option {name!r} given twice")
            seen[name] = value
        if "reward_columns" in seen and not seen["reward_columns"].strip():
            raise ValueError("import option 'reward_columns' is empty")
        if "success_column" in seen and not seen["success_column"].strip():
            raise ValueError("import option 'success_column' is empty")
        if "field_map" in seen and not seen["field_map"].strip():
            raise ValueError("import option 'field_map' is empty")
        return cls.from_text(
            seen.get("format", "auto"),
            seen.get("reward_columns", ""),
            seen.get("success_column", ""),
            seen.get("field_map", ""),
        )

    def cli_flags(self) -> list[str]:
        """The same options as ``crbc-viz ingest`` flags."""
        out = [] if self.fmt == "auto" else ["--format", self.fmt]
        if self.reward_columns:
            out += ["--reward-columns", ",".join(self.reward_columns)]
        if self.success_column is not None:
            out += ["--success-column", self.success_column]
        if self.field_map:
            out = out[2:]  # "--format fieldmap": --map implies it
            for item in self.field_map.split("; "):
                out += ["--map", item]
        return out

    def importer_options(self) -> dict:
        """The options `crbc_viz.io.importers.import_source` takes (those that are set)."""
        out = {}
        if self.reward_columns:
            out["reward_columns"] = list(self.reward_columns)
        if self.success_column is not None:
            out["success_column"] = self.success_column
        if self.field_map:
            out["field_map"] = self.field_map
        return out


def read_key(path: str, options: ReadOptions) -> str:
    """The key (or reference) of ``path`` read with ``options``: ``path`` itself when they are
    the defaults, else ``import:<options>::<path>``."""
    return path if options.is_default else f"{READ_PREFIX}{options.encode()}{_STORE_SEP}{path}"


def split_read_key(key: str) -> tuple[str, ReadOptions]:
    """(path or reference, options) of a `read_key`.

    Raises:
        ValueError: a malformed ``import:`` key, or bad options (naming them).
    """
    if not key.startswith(READ_PREFIX):
        return key, ReadOptions()
    text, sep, inner = key[len(READ_PREFIX) :].partition(_STORE_SEP)
    if not sep or not inner:
        raise ValueError(f"'{key[:200]}': a reference with import options reads import:<options>::<file>")
    if inner.startswith((READ_PREFIX, _STORE_PREFIX)):
        raise ValueError(f"'{key[:200]}': import options apply to a file or folder, not to {inner[:40]!r}")
    return inner, ReadOptions.decode(text)


@dataclass(frozen=True)
class ReadAs:
    """How a file was read: the importer (`FORMAT_TITLES`), whether it was detected from the
    file's fields or chosen, and the importer's notes (what it could not recover, which columns
    it took for reward and success), and its per-file counts (`Imported.counts`: e.g.
    ``copies_dropped``, ``copies_suspected``) as ``(name, count)`` pairs."""

    fmt: str
    detected: bool
    notes: tuple[str, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()

    @property
    def title(self) -> str:
        return FORMAT_TITLES.get(self.fmt, self.fmt)


_READ_AS = READ_AS_KEY


def read_as(batch) -> ReadAs | None:
    """How ``batch`` was read from its file (None for a store group or a batch built otherwise)."""
    return getattr(batch, "__dict__", {}).get(_READ_AS)


def _mark(batch, how: ReadAs):
    # The batch is a frozen dataclass this module just built: the mark travels in its __dict__
    # (and in the child's outcome), read back by `read_as`.
    batch.__dict__[_READ_AS] = how
    return batch


def parse_limits() -> tuple[int, int]:
    """(address-space bytes, timeout seconds) of a child, from the environment.

    Raises:
        LoadError: a setting that is not a finite number > 0 (naming the variable).
    """
    return (
        _guards.mib_setting(ENV_PARSE_MEMORY, PARSE_MEMORY_MB),
        _guards.count_setting(ENV_PARSE_TIMEOUT, PARSE_TIMEOUT_S),
    )


def _path_of(key: str) -> str:
    """The file or folder a key reads (a store group's: its store folder)."""
    if key.startswith(_STORE_PREFIX):
        return key[len(_STORE_PREFIX) :].partition(_STORE_SEP)[0]
    if key.startswith(READ_PREFIX):
        return key[len(READ_PREFIX) :].partition(_STORE_SEP)[2]
    return key


def is_trusted(key: str) -> bool:
    """Whether ``key`` (a `Source.key`) lies under the bundled samples folder."""
    from .files import SAMPLES_DIR

    path = _path_of(key)
    try:
        p, root = Path(path).resolve(), SAMPLES_DIR.resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return p == root or root in p.parents


def _shown_name(key: str) -> str:
    """The file as the user knows it: an upload by the name it was uploaded under, a server
    file by its name, a store group as ``store folder/label``."""
    from .files import shown_name

    if key.startswith(_STORE_PREFIX):
        folder, _, label = key[len(_STORE_PREFIX) :].partition(_STORE_SEP)
        return f"{Path(folder).name}/{label}"
    return shown_name(_path_of(key))


def _is_upload(key: str) -> bool:
    """Whether ``key`` reads a file of the upload folder."""
    from . import files

    if key.startswith(_STORE_PREFIX):
        return False
    try:
        return Path(_path_of(key)).resolve().parent == Path(files.UPLOAD_DIR).resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def open_batch(key: str):
    """The `RolloutBatch` of a `crbc_viz.ui.sources.Source.key` (already resolved and
    confined), read in a limited child process unless the key is a bundled sample. A server
    path must still be the file (or folder) it resolved to: the device and inode it has now,
    with no link on its way, are the only ones the child reads (`_identity`).

    Raises:
        LoadError: the file's problems (an upload's server path replaced by its name);
            `ParseAbortedError` when the child died by a signal or ran out of memory or time,
            or the path changed after it was checked.
        StoreError: a store group that cannot be read.
    """
    if is_trusted(key):
        return read(key)
    memory, timeout = parse_limits()
    name, upload = _shown_name(key), _is_upload(key)
    job = {"key": key, "memory": memory, "timeout": timeout, "name": name if upload else None}
    job["ident"] = None if upload or key.startswith(_STORE_PREFIX) else _identity(key, name)
    with _SLOTS:
        outcome = _run_child(job, name)
    return _unpack(outcome, key, name, memory)


def _refusal(name: str, why: str) -> ParseAbortedError:
    return ParseAbortedError([Problem(name, None, None, why)])


_CHANGED = "it was replaced or removed (now a link, or another file) after it was checked; it was not read"


def _identity(key: str, name: str) -> list[int]:
    """[device, inode] of the file or folder ``key`` reads, as it is now: still its resolved path
    (no link on its way), a regular file or a folder; else refused."""
    path = _path_of(key)
    try:
        st = os.stat(path, follow_symlinks=False)
        unchanged = os.path.realpath(path) == path and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))
    except (OSError, ValueError):
        unchanged = False
    if not unchanged:
        raise _refusal(name, _CHANGED)
    return [st.st_dev, st.st_ino]


def _run_child(job: dict, name: str) -> tuple:
    """Run the child on ``job`` (`_child`); its outcome (`crbc_viz.ui.outcome.read_outcome`),
    or raise `ParseAbortedError`. Everything the child writes lies in a folder of this process
    (its outcome, and its temporary files: ``$TMPDIR`` points there), removed here whether
    the child ended or was killed."""
    key, memory, timeout = job["key"], job["memory"], job["timeout"]
    work = Path(tempfile.mkdtemp(prefix="crbc-viz-parse-"))  # 0700, removed below
    out, tmp, err = work / "out", work / "tmp", work / "stderr.txt"
    pkg_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_ARENA_MAX": "2",
        "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p),
        "TMPDIR": str(tmp),
    }
    argv = [sys.executable, "-m", f"{__package__}.sandbox_child", json.dumps({**job, "out": str(out)})]
    t0 = time.monotonic()
    try:
        out.mkdir()
        tmp.mkdir()
        with open(err, "wb") as err_fh:
            try:
                proc = subprocess.Popen(
                    argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=err_fh, stderr=err_fh
                )
            except OSError as exc:  # no process left to start (EAGAIN, ENOMEM)
                raise _refusal(name, f"its reader could not be started ({exc.strerror or exc})") from None
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                if proc.poll() is None:  # timed out, or this thread was interrupted
                    proc.kill()
                    proc.wait()
        tail = _tail(err)
        if rc is None:
            log.warning("reading %s timed out after %d s; child stderr:\n%s", key, timeout, tail)
            raise _refusal(
                name,
                f"reading it took longer than {timeout} s and was stopped; "
                f"set ${ENV_PARSE_TIMEOUT} to allow more",
            )
        if rc != 0:
            log.warning("reading %s: child exited with %d; its stderr:\n%s", key, rc, tail)
            raise _refusal(name, _death(rc, memory))
        if tail.strip():
            log.info("reading %s: child stderr:\n%s", key, tail)
        try:
            outcome = read_outcome(out, memory)
        except _BadOutcome as exc:  # none written, or not by this server's code
            log.warning("reading %s: the child's result is refused: %s", key, exc)
            raise _refusal(
                name, f"its reader's result is not one this server reads ({exc}); the file is refused"
            ) from None
        log.debug("read %s in a child in %.2f s", key, time.monotonic() - t0)
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tail(path: Path) -> str:
    """The last `_STDERR_TAIL` bytes of the child's output, for the server's log."""
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - _STDERR_TAIL))
        return fh.read().decode("utf-8", "replace")


def _death(rc: int, memory: int) -> str:
    """Why a child that exited with status ``rc`` gave no result, in words."""
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        why = f"reading it crashed the parser ({sig}); the file is refused"
        if -rc in (signal.SIGKILL, signal.SIGABRT):  # also how an allocation failure can end
            why += f" (if it is large: reading may use {memory // 2**20} MiB, ${ENV_PARSE_MEMORY})"
        return why
    return f"its reader exited with status {rc} without a result; the file is refused"


def _unpack(outcome: tuple, key: str, name: str, memory: int):
    """The batch of a child's outcome, or the error it stands for (raised)."""
    kind = outcome[0]
    path = _path_of(key)
    if kind == "ok":
        _, batch, how = outcome
        return batch if how is None else _mark(batch, ReadAs(*how))
    if kind == "error":
        err = outcome[1]
        if isinstance(err, LoadError) and _is_upload(key):  # the user's name, never the server copy's
            err = type(err)(_relabel(err.problems, path, name), err.total)
        raise err
    if kind == "memory":
        raise _refusal(
            name,
            f"reading it needs more than {memory // 2**20} MiB of memory; "
            f"set ${ENV_PARSE_MEMORY} to allow more",
        )
    if kind == "changed":
        raise _refusal(name, _CHANGED)
    what = outcome[1].replace(path, name) if _is_upload(key) else outcome[1]
    log.warning("reading %s failed in its child:\n%s", key, outcome[2])
    raise _refusal(name, f"its reader failed ({' '.join(what[:300].split())})")


def _relabel(problems: list[Problem], path: str, name: str) -> list[Problem]:
    """``problems`` with ``path`` written as ``name`` (in their file and their message)."""
    return [
        dataclasses.replace(p, path=p.path.replace(path, name), message=p.message.replace(path, name))
        for p in problems
    ]


# ---------------------------------------------------------------- what is read


def read(key: str, name: str | None = None, ident: list[int] | None = None):
    """The `RolloutBatch` of a `crbc_viz.ui.sources.Source.key`, read in this process (the
    child's work, and the bundled samples'); a file's batch is marked with how it was read
    (`read_as`). ``name``: an upload's name, under which it is read (see the module doc).
    ``ident``: [device, inode] the file must have (`_open_checked`); it is opened once, and
    read through that descriptor.

    A file is read with the importer its fields name (`crbc_viz.io.importers.detect`), or the
    one its options name; canonical logs with `crbc_viz.io.load_rollouts`. A file whose format
    cannot be detected is refused: with the detection's message (the fields seen, and those each
    format expects) when it is readable but has other fields, else with the canonical reader's
    problems (invalid JSON on line 1, a limit, not Parquet). A folder is read as one source
    of a ``FOLDER`` format (rLLM episodes: every episode file under it, as ``crbc-viz ingest``
    reads its episode folders). The read is `crbc_viz.io.importers.read_file`'s, whose source
    is read by `crbc_viz.io.importers.read_source` (ingest's own).
    Reward and success columns apply to the importers that take them (TRL, ms-swift); given
    for another format they are refused, never ignored.

    Raises:
        LoadError: naming the file (an upload by ``name``); StoreError: a store group.
        ValueError: a malformed key.
    """
    if key.startswith(_STORE_PREFIX):
        from ..store import LogStore

        folder, _, label = key[len(_STORE_PREFIX) :].partition(_STORE_SEP)
        return LogStore(folder).load_batch(group=label, text=True)
    path, options = split_read_key(key)
    if name is None and ident is None:
        return _read_file(path, options)
    with tempfile.TemporaryDirectory(prefix="crbc-viz-read-") as tmp:
        if ident is None:
            return _read_alias(_alias(path, name, Path(tmp)), name, options)
        fd = _open_checked(path, ident)
        try:
            return _read_alias(_mirror(path, fd, Path(tmp)), path if name is None else name, options)
        finally:
            os.close(fd)


def _read_alias(alias: Path, name: str, options: ReadOptions):
    """`_read_file` of ``alias``, every mention of it (source, warnings, notes, problems, an
    error's text) written as ``name``."""
    try:
        batch = _read_file(str(alias), options)
    except LoadError as e:
        raise type(e)(_relabel(e.problems, str(alias), name), e.total) from None
    except MemoryError:
        raise
    except Exception as e:  # its text may hold the path read: the user's name instead
        raise _ReadFailed(f"{type(e).__name__}: {e}".replace(str(alias), name)) from e
    how = read_as(batch)
    return _mark(
        _renamed(batch, str(alias), name),
        dataclasses.replace(how, notes=tuple(n.replace(str(alias), name) for n in how.notes)),
    )


class _Changed(Exception):
    """The path no longer names the file (or folder) that was checked."""


def _open_checked(path: str, ident: list[int]) -> int:
    """A descriptor of ``path``, opened once without following a link at its end, and checked
    to be the file or folder of ``ident`` ([device, inode], taken when it was checked); a link
    swapped in anywhere on its way gives another inode.

    Raises:
        _Changed: a link, another file, or none.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        raise _Changed() from None
    st = os.fstat(fd)
    if [st.st_dev, st.st_ino] != list(ident) or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        os.close(fd)
        raise _Changed()
    return fd


def _mirror(path: str, fd: int, folder: Path) -> Path:
    """A path under ``folder`` that ends in every folder name of ``path`` and its name (the
    importers take a run and a train step from them) and leads to the open file ``fd`` (a link
    to ``/proc/self/fd/<fd>``: opening it opens that file, whatever ``path`` names by then)."""
    proc = Path(f"/proc/self/fd/{fd}")
    if not proc.exists():  # no /proc: read by the name just checked
        log.warning("no /proc/self/fd here: %s is read by its name after its check", path)
        return Path(path)
    alias = folder / "files" / path.lstrip(os.sep)
    alias.parent.mkdir(parents=True)
    os.symlink(proc, alias)
    return alias


class _ReadFailed(Exception):
    """An upload's reader failed; the message names the upload as the user knows it."""


def _alias(path: str, name: str, folder: Path) -> Path:
    """``path`` as ``folder/upload/<name>`` (a hard link, else a copy), keeping its suffix."""
    suffix = Path(path).name[Path(path).name.find(".") :] if "." in Path(path).name else ""
    stem = name[: -len(suffix)] if suffix and name.lower().endswith(suffix.lower()) else name
    stem = re.sub(r"[^\w.()+ -]", "_", stem).lstrip(". ") or "upload"
    while len(stem.encode("utf-8")) > 150:
        stem = stem[:-1]
    out = folder / "upload" / (stem + suffix)
    out.parent.mkdir()
    try:
        os.link(path, out)
    except OSError:  # another file system
        shutil.copyfile(path, out)
    return out


def _renamed(batch, alias: str, name: str):
    """``batch`` with ``alias`` written as ``name`` in its source and warnings."""
    fields = {
        "source": batch.source.replace(alias, name),
        "warnings": tuple(w.replace(alias, name) for w in batch.warnings),
    }
    for k, v in fields.items():
        object.__setattr__(batch, k, v)
    return batch


def _read_file(path: str, options: ReadOptions):
    from ..io.importers import read_file

    got = read_file(path, options.fmt, **options.importer_options())
    return _mark(got.batch, ReadAs(got.fmt, got.detected, got.notes, got.counts))
