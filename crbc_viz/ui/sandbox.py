"""Read a rollout log in a child process, so that no file can take the app server down.

The readers bound what a file may expand to (`crbc_viz.io`), but a native parser (pyarrow's
JSON reader, a Parquet decoder, zlib) can still crash on a hostile file, or a file can need more
memory than the server has. `open_batch` therefore reads every upload and every server path in
a fresh ``python -m crbc_viz.ui.sandbox`` process, limited to:

- ``$CRBC_VIZ_PARSE_MEMORY_MB`` MiB of address space (``RLIMIT_AS``, default
  `PARSE_MEMORY_MB`). Arrow uses the system allocator there and glibc two arenas, so the
  address space tracks the memory the parse really uses (jemalloc's and per-thread arenas'
  reservations would otherwise count against the limit without being used);
- ``$CRBC_VIZ_PARSE_TIMEOUT_S`` seconds of wall-clock time (default `PARSE_TIMEOUT_S`); the
  parent kills the child then, and the child arms an alarm of its own, so it ends even when the
  server is gone;
- no core file.

The child pickles the `RolloutBatch` (or the `LoadError`'s problems) into a private temporary
folder under a temporary name and renames it once complete; the parent reads it only after a
clean exit. A child that dies by a signal, or runs out of memory or time, becomes a
`ParseAbortedError`: one line that names the file as the user knows it (an upload by the name
it was uploaded under, never the server's copy's path). At most `MAX_CHILDREN` children run at
once, so concurrent uploads cannot add up past the host's memory.

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
import faulthandler
import io
import logging
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from ..errors import CrbcVizError, LoadError, ParseAbortedError, Problem
from ..io import _guards

__all__ = [
    "open_batch",
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


def parse_limits() -> tuple[int, int]:
    """(address-space bytes, timeout seconds) of a child, from the environment.

    Raises:
        LoadError: a setting that is not a finite number > 0 (naming the variable).
    """
    return (
        _guards.mib_setting(ENV_PARSE_MEMORY, PARSE_MEMORY_MB),
        _guards.count_setting(ENV_PARSE_TIMEOUT, PARSE_TIMEOUT_S),
    )


def is_trusted(key: str) -> bool:
    """Whether ``key`` (a `Source.key`) lies under the bundled samples folder."""
    from .files import SAMPLES_DIR

    path = key[len(_STORE_PREFIX) :].partition(_STORE_SEP)[0] if key.startswith(_STORE_PREFIX) else key
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
    return shown_name(key)


def _is_upload(key: str) -> bool:
    from .sources import is_upload

    return not key.startswith(_STORE_PREFIX) and is_upload(key)


def open_batch(key: str):
    """The `RolloutBatch` of a `crbc_viz.ui.sources.Source.key` (already resolved and
    confined), read in a limited child process unless the key is a bundled sample.

    Raises:
        LoadError: the file's problems (an upload's server path replaced by its name);
            `ParseAbortedError` when the child died by a signal or ran out of memory or time.
        StoreError: a store group that cannot be read.
    """
    if is_trusted(key):
        from .sources import open_batch as read

        return read(key)
    memory, timeout = parse_limits()
    name = _shown_name(key)
    with _SLOTS:
        outcome = _run_child(key, name, memory, timeout)
    return _unpack(outcome, key, name)


def _refusal(name: str, why: str) -> ParseAbortedError:
    return ParseAbortedError([Problem(name, None, None, why)])


class _OutcomeUnpickler(pickle.Unpickler):
    """Reads the child's outcome, and nothing else: only classes and functions of the modules a
    batch or a load error is built from may be named (numpy, pandas, pyarrow, crbc_viz, and a few
    plain builtins), so a pickle from anywhere else cannot run code in the server. The child
    writes it with `pickle.dumps` of its own objects: the file's bytes cannot choose them."""

    _MODULES = ("numpy", "pandas", "pyarrow", "crbc_viz", "collections", "datetime", "copyreg")
    _BUILTINS = frozenset(
        {
            "list",
            "dict",
            "tuple",
            "set",
            "frozenset",
            "int",
            "float",
            "complex",
            "str",
            "bytes",
            "bytearray",
            "bool",
            "slice",
            "range",
            "object",
            "type",
            "getattr",
        }
    )

    def find_class(self, module: str, name: str):
        root = module.split(".")[0]
        if (module == "builtins" and name in self._BUILTINS and name != "getattr") or (
            root in self._MODULES and not name.startswith("__")
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a parse outcome")


def _run_child(key: str, name: str, memory: int, timeout: int) -> tuple:
    """Run the child on ``key``; its pickled outcome, or raise `ParseAbortedError`."""
    work = Path(tempfile.mkdtemp(prefix="crbc-viz-parse-"))  # 0700, removed below
    out, err = work / "outcome.pickle", work / "stderr.txt"
    pkg_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_ARENA_MAX": "2",
        "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p),
    }
    argv = [sys.executable, "-m", __name__, key, str(out), str(memory), str(timeout)]
    t0 = time.monotonic()
    try:
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
            with open(out, "rb") as fh:
                outcome = _OutcomeUnpickler(fh).load()
        except Exception as exc:  # none written, or from other code than this server's
            raise _refusal(name, f"its reader ended without a result ({type(exc).__name__})") from None
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


def _unpack(outcome: tuple, key: str, name: str):
    """The batch of a child's outcome, or the error it stands for (raised)."""
    kind = outcome[0]
    if kind == "ok":
        return outcome[1]
    if kind == "load":
        _, problems, total = outcome
        if _is_upload(key):  # named by the user's name, never by the server copy's path
            problems = [
                dataclasses.replace(p, path=p.path.replace(key, name), message=p.message.replace(key, name))
                for p in problems
            ]
        raise LoadError(problems, total)
    if kind == "error":
        raise outcome[1]
    if kind == "memory":
        raise _refusal(
            name,
            f"reading it needs more than {outcome[1] // 2**20} MiB of memory; "
            f"set ${ENV_PARSE_MEMORY} to allow more",
        )
    what = outcome[1].replace(key, name) if _is_upload(key) else outcome[1]
    log.warning("reading %s failed in its child:\n%s", key, outcome[2])
    raise _refusal(name, f"its reader failed ({what[:300]})")


# ---------------------------------------------------------------- the child


def _limit_memory(memory: int) -> None:
    """``RLIMIT_AS`` (else ``RLIMIT_DATA``) of this process to ``memory`` bytes; no core file."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for which in ("RLIMIT_AS", "RLIMIT_DATA"):
        if hasattr(resource, which):
            try:
                resource.setrlimit(getattr(resource, which), (memory, memory))
                return
            except (ValueError, OSError) as exc:
                log.warning("cannot set %s to %d bytes: %s", which, memory, exc)
    log.warning("no memory limit could be set: this read is bounded by its timeout only")


def _test_hook(memory: int) -> None:
    hook = os.environ.get(ENV_TEST_HOOK, "")
    if hook == "abort":
        os.abort()
    elif hook == "memory":
        bytearray(memory + 1)
    elif hook == "sleep":
        time.sleep(1e6)
    elif hook:
        raise ValueError(f"${ENV_TEST_HOOK}: expected abort, memory or sleep, got {hook[:40]!r}")


def _read(key: str):
    """What `crbc_viz.ui.sources.open_batch` does, without importing `crbc_viz.ui.files`
    (whose import makes the server's upload folder)."""
    if key.startswith(_STORE_PREFIX):
        from ..store import LogStore

        folder, _, label = key[len(_STORE_PREFIX) :].partition(_STORE_SEP)
        return LogStore(folder).load_batch(group=label, text=True)
    from ..io import load_rollouts

    return load_rollouts(key)


def _roundtrips(exc: BaseException) -> bool:
    try:
        return str(_OutcomeUnpickler(io.BytesIO(pickle.dumps(exc))).load()) == str(exc)
    except Exception:
        return False


def _child(argv: list[str]) -> int:
    """``python -m crbc_viz.ui.sandbox KEY OUT MEMORY_BYTES TIMEOUT_S``: read ``KEY`` under
    the limits, pickle the outcome to ``OUT`` (complete or absent)."""
    key, out, memory, timeout = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    faulthandler.enable()  # a crash leaves the Python stack in the parent's log
    signal.alarm(timeout + _ALARM_GRACE_S)
    _limit_memory(memory)
    try:
        _test_hook(memory)
        outcome: tuple = ("ok", _read(key))
    except LoadError as e:
        outcome = ("load", e.problems, e.total)
    except CrbcVizError as e:
        outcome = ("error", e) if _roundtrips(e) else ("failed", f"{type(e).__name__}: {e}", "")
    except MemoryError:
        outcome = ("memory", memory)
    except Exception as e:
        outcome = ("failed", f"{type(e).__name__}: {e}", traceback.format_exc())
    tmp = out.with_suffix(".part")
    try:
        data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        data = pickle.dumps(("memory", memory))
    except Exception as e:  # e.g. a value nested too deep to pickle
        data = pickle.dumps(("failed", f"{type(e).__name__}: {e}", traceback.format_exc()))
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    sys.exit(_child(sys.argv[1:]))
