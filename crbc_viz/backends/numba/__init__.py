"""The numba backend: the compiled CPU engine (`crbc_viz.backends.numba.crbc`, merge + solve +
credit per group) and its peers' kernels (`...numba.graph`). Importing this package registers
the kernels (`...numba.kernels`) and does not import numba."""

from __future__ import annotations

import importlib.util
import sys

from .. import numpy_seconds
from . import kernels  # noqa: F401  (registers the numba rows of the kernel table)

__all__ = ["available", "loaded", "should_run", "NUMBA_LOAD_S", "REPEAT_MIN_S", "LOAD_ON_CALL"]

#: Loading the compiled engine from its disk cache on a CPU core (``python -m bench --write``).
NUMBA_LOAD_S = 0.4


def available() -> bool:
    """numba can be imported (asked without importing it: that alone takes ~0.2 s)."""
    return "numba" in sys.modules or importlib.util.find_spec("numba") is not None


def loaded() -> bool:
    """The compiled kernels are already in this process (so using them costs nothing extra)."""
    return __name__ + ".crbc" in sys.modules and "numba" in sys.modules


#: A process's ``auto`` calls of one estimator that would run numpy for longer than
#: ``REPEAT_MIN_S`` load the engine from the ``LOAD_ON_CALL``-th such call on (a trainer or
#: the app server scores again; a CLI run scores each estimator once).
REPEAT_MIN_S = 0.002
LOAD_ON_CALL = 2
_numpy_chosen: dict[str, int] = {}


def should_run(spec, graph, device: str, params) -> bool | str:
    """``auto`` on a CPU: numba when it is loaded already; when the numpy reference is expected
    to take longer than loading the engine; or from the second call in a process that scores
    the same estimator again (a trainer, the app server): a process that calls twice will call
    again, and the engine's one load is repaid within a few calls. A one-shot call, or a CLI run
    of several estimators once each, never pays the load."""
    if device == "cuda":
        return "the numba engine runs on the CPU only"
    if not available():
        return "numba is not installed"
    if loaded():
        return True
    seconds = numpy_seconds(spec, graph, params, worth_counting=NUMBA_LOAD_S)
    if seconds > NUMBA_LOAD_S:
        return True
    if seconds >= REPEAT_MIN_S:
        _numpy_chosen[spec.name] = _numpy_chosen.get(spec.name, 0) + 1
        if _numpy_chosen[spec.name] >= LOAD_ON_CALL:
            return True
    return f"numpy is expected to finish ({seconds:.2g} s) before numba loads ({NUMBA_LOAD_S} s)"
