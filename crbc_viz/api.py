"""The Python API: `score` dispatches a registered estimator on a batch or graph."""
from __future__ import annotations

from .data import RolloutBatch
from .graph import AnchorGraph, build_graph
from .result import CreditResult

__all__ = ["score", "BACKENDS"]

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
            implementation the estimator has on this machine.
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
        backend = _auto_backend(spec, device)
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


def _auto_backend(spec, device: str) -> str:
    if spec.torch_fn is not None and device != "cpu" and _cuda_available():
        return "torch"
    if spec.numba_fn is not None and device != "cuda":
        from .backend.numba_crbc import available
        if available():
            return "numba"
    if spec.torch_fn is not None:
        return "torch"
    return "numpy"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
