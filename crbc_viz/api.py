"""The Python API: `score` dispatches a registered estimator on a batch or graph."""
from __future__ import annotations

import os
import sys

from .data import RolloutBatch
from .graph import AnchorGraph, build_graph
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
            CUDA when a GPU is used, else numba, else torch, else numpy — the fastest exact
            implementation the estimator has on this machine; below `AUTO_SMALL_STEPS` steps
            on a CPU, numpy unless numba is already loaded (its load costs more than the job).
        **params: hyper-parameters of the estimator's params dataclass (strings are coerced).

    Raises:
        UnknownEstimatorError: unknown name (lists the valid ones).
        ValueError: unknown parameter, out-of-bounds value, unknown backend.
    """
    from .estimators import registry

    spec = registry.get(estimator)
    p = registry.make_params(spec, **params)
    graph = data if isinstance(data, AnchorGraph) else build_graph(data)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    kwargs = {f: getattr(p, f) for f in p.__dataclass_fields__}
    if backend == "auto":
        backend = _auto_backend(spec, device, graph.batch.num_steps)
    if backend == "torch":
        if spec.torch_fn is None:
            raise ValueError(f"estimator '{estimator}' has no torch backend; use backend='numpy'")
        return spec.torch_fn(graph, device=device, **kwargs)
    if device == "cuda":
        raise ValueError(f"device='cuda' needs the torch backend; estimator '{estimator}' was "
                         f"asked for with backend='{backend}'")
    if backend == "numba":
        if spec.numba_fn is None:
            raise ValueError(f"estimator '{estimator}' has no numba backend; use backend='numpy' "
                             f"or 'torch'")
        return spec.numba_fn(graph, **kwargs)
    return spec.fn(graph, **kwargs)


#: Below this many steps, ``auto`` on a CPU takes the numpy reference unless the compiled
#: engine is already loaded: loading numba (or importing torch) costs about a second, the
#: reference a few milliseconds at this size. Results agree to 1e-9 either way.
AUTO_SMALL_STEPS = 20_000


def _auto_backend(spec, device: str, num_steps: int) -> str:
    if spec.torch_fn is not None and device != "cpu" and _cuda_available():
        return "torch"
    small = num_steps < AUTO_SMALL_STEPS
    if spec.numba_fn is not None and device != "cuda" and (not small or _numba_loaded()):
        from .backend.numba_crbc import available
        if available():
            return "numba"
    if small or spec.torch_fn is None:
        return "numpy"
    return "torch"


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
        raise ValueError(f"unknown parameter(s) {', '.join(sorted(unused))} for {', '.join(names)}")
    results = {}
    for n in names:
        kw = {k: v for k, v in shared.items() if k in fields[n]}
        kw.update(params.get(n, {}))
        results[n] = score(graph, n, device=device, backend=backend, **kw)
    return pd.concat([r.to_frame() for r in results.values()], ignore_index=True), results
