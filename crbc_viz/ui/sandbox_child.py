"""The parse child of `crbc_viz.ui.sandbox`: ``python -m crbc_viz.ui.sandbox_child JOB`` reads
one key under the limits the server set, and writes the outcome as data
(`crbc_viz.ui.outcome`). It does not import `crbc_viz.ui.files` (whose import makes an upload
folder)."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

from ..errors import CrbcVizError
from .outcome import error_outcome, write_outcome
from .sandbox import _ALARM_GRACE_S, ENV_TEST_HOOK, _Changed, _ReadFailed, read

log = logging.getLogger(__name__)


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


def _child(argv: list[str]) -> int:
    """``python -m crbc_viz.ui.sandbox_child JOB``: JOB is the JSON of `open_batch`'s job (``key``,
    ``memory`` bytes, ``timeout`` s, ``name`` of an upload, ``ident`` of a server path, ``out``
    folder). Read the key under the limits, write the outcome into ``out``
    (`crbc_viz.ui.outcome.write_outcome`: data, no pickle)."""
    job = json.loads(argv[0])
    out, memory, timeout = Path(job["out"]), int(job["memory"]), int(job["timeout"])
    faulthandler.enable()  # a crash leaves the Python stack in the parent's log
    signal.alarm(timeout + _ALARM_GRACE_S)
    _limit_memory(memory)
    batch = None
    try:
        _test_hook(memory)
        batch = read(job["key"], job.get("name"), job.get("ident"))
        outcome = {"kind": "ok"}
    except _Changed:
        outcome = {"kind": "changed"}
    except CrbcVizError as e:
        outcome = error_outcome(e) or _failed(f"{type(e).__name__}: {e}", "")
    except MemoryError:
        outcome = {"kind": "memory"}
    except _ReadFailed as e:
        outcome = _failed(str(e), traceback.format_exc())
    except Exception as e:
        outcome = _failed(f"{type(e).__name__}: {e}", traceback.format_exc())
    try:
        write_outcome(out, outcome, batch)
    except MemoryError:
        write_outcome(out, {"kind": "memory"})
    except Exception as e:  # a value the outcome cannot carry, or nested too deep
        write_outcome(out, _failed(f"{type(e).__name__}: {e}", traceback.format_exc()))
    return 0


def _failed(message: str, trace: str) -> dict:
    return {"kind": "failed", "message": message, "trace": trace}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    sys.exit(_child(sys.argv[1:]))
