"""The numba backend: the compiled CPU engine (`crbc_viz.backends.numba.crbc`, merge + solve +
credit per group) and its peers' kernels (`...numba.graph`). Importing this package registers
the kernels (`...numba.kernels`) and does not import numba."""

from __future__ import annotations

import importlib.util
import sys

from .. import numpy_seconds
from . import kernels  # noqa: F401  (registers the numba rows of the kernel table)

__all__ = ["available", "load", "loaded", "should_run", "NUMBA_LOAD_S"]

#: Loading the compiled engine from its disk cache on a CPU core (``python -m bench --write``).
NUMBA_LOAD_S = 0.4


def available() -> bool:
    """numba can be imported (asked without importing it: that alone takes ~0.2 s)."""
    return "numba" in sys.modules or importlib.util.find_spec("numba") is not None


def loaded() -> bool:
    """The compiled kernels are already in this process (so using them costs nothing extra)."""
    return __name__ + ".crbc" in sys.modules and "numba" in sys.modules


def load() -> None:
    """Load the compiled engine into this process now (from numba's disk cache: about
    `NUMBA_LOAD_S`), so that ``auto`` runs it from the next call on: what a process that will
    score again and again (a trainer, the app server) asks for, explicitly
    (`crbc_viz.api.load_engine`). A call on a two-step group of the real dtypes brings the
    cached machine code in, which numba otherwise does on the first real call."""
    import numpy as np

    from . import crbc, graph  # noqa: F401

    crbc.crbc_step_credit(
        np.array([1, 2], dtype=np.uint64),
        np.zeros(2, dtype=np.int64),
        np.array([0, 1, 2], dtype=np.int64),
        np.array([0, 2], dtype=np.int64),
        np.array([True, False]),
    )


def should_run(spec, graph, device: str, params) -> bool | str:
    """``auto`` on a CPU: numba when it is loaded already (`load`: a process that scores again
    and again loads it once, explicitly), or when the numpy reference is expected to take longer
    than loading the engine. The choice depends on the input and on what the process loaded,
    never on how many calls came before: a one-shot call (the CLI) never pays the load."""
    if device == "cuda":
        return "the numba engine runs on the CPU only"
    if not available():
        return "numba is not installed"
    if loaded():
        return True
    seconds = numpy_seconds(spec, graph, params, worth_counting=NUMBA_LOAD_S)
    if seconds > NUMBA_LOAD_S:
        return True
    return f"numpy is expected to finish ({seconds:.2g} s) before numba loads ({NUMBA_LOAD_S} s)"
