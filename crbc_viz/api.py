"""The Python API: `score` dispatches a registered estimator on a batch or graph."""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from .data import RolloutBatch
from .errors import BackendUnavailable, EstimatorInputError
from .graph import AnchorGraph, is_built, lazy_graph
from .result import CreditResult

__all__ = ["score", "score_frame", "BACKENDS"]

BACKENDS = ("auto", "numpy", "torch", "numba")


def score(data: RolloutBatch | AnchorGraph, estimator: str, *, device: str = "auto",
          backend: str = "auto", **params) -> CreditResult:
    """Run estimator ``estimator`` on ``data``.

    Args:
        data: a `RolloutBatch` (its graph is built here) or a prebuilt `AnchorGraph`.
        estimator: a registry name (``crbc_viz.estimators.names()``).
        device: ``auto`` | ``cpu`` | ``cuda`` for the torch backend.
        backend: ``numpy`` (the readable reference), ``torch`` (batched; CPU or CUDA),
            ``numba`` (compiled CPU engine, where an estimator has one) or ``auto``: torch on
            CUDA when a GPU is used; on a CPU numba when it is loaded already, else whichever
            of numpy, numba and torch is expected to finish first counting the cost of
            loading numba or importing torch (`_auto_backend`: by the anchors of each group,
            since the solve's cost grows with them, and by steps). Every backend solves any
            group size in bounded memory (sparse LU for large groups).
        **params: hyper-parameters of the estimator's params dataclass (strings are coerced).

    Raises:
        UnknownEstimatorError: unknown name (lists the valid ones).
        ValueError: unknown parameter, out-of-bounds value, unknown backend.
    """
    from .estimators import registry

    spec = registry.get(estimator)
    p = registry.make_params(spec, **params)
    # Built on first use: a kernel that merges the anchors itself never builds it.
    graph = lazy_graph(data)
    if backend not in BACKENDS:
        raise EstimatorInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    kwargs = {f: getattr(p, f) for f in p.__dataclass_fields__}
    if backend == "auto":
        backend = _auto_backend(spec, device, graph, kwargs)
    if backend == "torch":
        if spec.torch_fn is None:
            raise BackendUnavailable(f"estimator '{estimator}' has no torch backend; use backend='numpy'")
        return spec.torch_fn(graph, device=device, **kwargs)
    if device == "cuda":
        raise BackendUnavailable(f"device='cuda' needs the torch backend; estimator '{estimator}' was "
                                 f"asked for with backend='{backend}'")
    if backend == "numba":
        if spec.numba_fn is None:
            raise BackendUnavailable(f"estimator '{estimator}' has no numba backend; use backend='numpy' "
                                     f"or 'torch'")
        return spec.numba_fn(graph, **kwargs)
    return spec.fn(graph, **kwargs)


#: Known costs on a CPU core (measured by ``python -m bench --write``; order of magnitude is
#: what matters): loading the compiled engine from its disk cache, importing torch, and the
#: numpy reference per step and per padded dense-solve flop / per sparse-solved anchor.
NUMBA_LOAD_S = 0.4
TORCH_IMPORT_S = 1.0
NUMPY_S_PER_STEP = 1e-6
NUMPY_S_PER_FLOP = 1e-9
NUMPY_S_PER_SPARSE_ANCHOR = 5e-6
#: Estimators whose reference solves the closure (cost by anchors, not steps).
_SOLVES = ("crbc", "graft", "gated_bepo")


def _group_sizes(graph: AnchorGraph) -> tuple[np.ndarray, bool]:
    """Anchors per group when the graph exists, else steps per group (an upper bound)."""
    if is_built(graph):
        return np.diff(graph.group_node_offsets), True
    b = graph.batch
    return np.diff(b.traj_offsets[b.group_traj_offsets]), False


def _numpy_seconds(spec, graph: AnchorGraph, kwargs: dict) -> tuple[float, bool]:
    """Expected seconds of the numpy reference, and whether the estimate used anchors."""
    from .estimators.closure import DENSE_MAX, size_class

    seconds = NUMPY_S_PER_STEP * graph.batch.num_steps
    sizes, exact = _group_sizes(graph)
    if spec.name in _SOLVES and math.isinf(kwargs.get("depth", math.inf)):
        dense = sizes[sizes <= DENSE_MAX]
        seconds += NUMPY_S_PER_FLOP * float(np.sum(size_class(dense).astype(np.float64) ** 3)) / 3
        seconds += NUMPY_S_PER_SPARSE_ANCHOR * float(sizes[sizes > DENSE_MAX].sum())
    return seconds, exact


def _auto_backend(spec, device: str, graph: AnchorGraph, kwargs: dict | None = None) -> str:
    if spec.torch_fn is not None and device != "cpu" and _cuda_available():
        return "torch"
    kwargs = kwargs or {}
    numba_ok = spec.numba_fn is not None and device != "cuda" and _numba_installed()
    if numba_ok and _numba_loaded():
        return "numba"
    seconds, exact = _numpy_seconds(spec, graph, kwargs)
    if not exact and seconds > NUMBA_LOAD_S and NUMPY_S_PER_STEP * graph.batch.num_steps < NUMBA_LOAD_S:
        # Steps over-count anchors: count them (the reference needs the graph anyway).
        graph.step_node  # noqa: B018 (builds a lazy graph)
        seconds, exact = _numpy_seconds(spec, graph, kwargs)
    if numba_ok:
        return "numba" if seconds > NUMBA_LOAD_S else "numpy"
    torch_cost = 0.0 if "torch" in sys.modules else TORCH_IMPORT_S
    if spec.torch_fn is not None and device != "cuda" and seconds > 2 * torch_cost + 0.05:
        return "torch"
    return "numpy"


def _numba_installed() -> bool:
    """numba can be imported (asked without importing it: that alone takes ~0.2 s)."""
    if "numba" in sys.modules:
        return True
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def _numba_loaded() -> bool:
    """The compiled kernels are already in this process (so using them costs nothing extra)."""
    return "crbc_viz.backend.numba_crbc" in sys.modules and "numba" in sys.modules


def _cuda_available() -> bool:
    """A CUDA device is usable; torch is not imported just to ask when no NVIDIA device node
    exists and torch is not loaded yet (importing it costs about a second)."""
    if "torch" not in sys.modules and not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def score_frame(graph: AnchorGraph, names: list[str], params: dict[str, dict], *, device: str = "auto",
                backend: str = "auto"):
    """Several estimators on one graph as one long frame (`CreditResult.to_frame` rows).

    ``params["*"]`` applies to every estimator that has the parameter, ``params[name]`` to
    one; a ``"*"`` key no selected estimator has raises, naming it.

    Returns:
        ``(frame, results)``: the concatenated rows and each estimator's `CreditResult`.
    """
    import dataclasses

    import pandas as pd

    from .estimators import registry

    fields = {n: {f.name for f in dataclasses.fields(registry.get(n).params_cls)} for n in names}
    shared = params.get("*", {})
    unused = set(shared) - set().union(*fields.values())
    if unused:
        raise EstimatorInputError(f"unknown parameter(s) {', '.join(sorted(unused))} for {', '.join(names)}")
    results = {}
    for n in names:
        kw = {k: v for k, v in shared.items() if k in fields[n]}
        kw.update(params.get(n, {}))
        results[n] = score(graph, n, device=device, backend=backend, **kw)
    return pd.concat([r.to_frame() for r in results.values()], ignore_index=True), results
