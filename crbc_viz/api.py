"""The Python API: `score` dispatches a registered estimator on a batch or graph."""
from __future__ import annotations

from .data import RolloutBatch
from .graph import AnchorGraph, build_graph
from .result import CreditResult

__all__ = ["score", "BACKENDS"]

BACKENDS = ("auto", "numpy", "torch")


def score(data: RolloutBatch | AnchorGraph, estimator: str, *, device: str = "auto",
          backend: str = "auto", **params) -> CreditResult:
    """Run estimator ``estimator`` on ``data``.

    Args:
        data: a `RolloutBatch` (its graph is built here) or a prebuilt `AnchorGraph`.
        estimator: a registry name (``crbc_viz.estimators.names()``).
        device: ``auto`` | ``cpu`` | ``cuda`` for the torch backend.
        backend: ``auto`` (torch where the estimator has a batched twin, else numpy),
            ``numpy`` (the readable reference) or ``torch``.
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
    use_torch = backend == "torch" or (backend == "auto" and spec.torch_fn is not None)
    if use_torch:
        if spec.torch_fn is None:
            raise ValueError(f"estimator '{estimator}' has no torch backend; use backend='numpy'")
        return spec.torch_fn(graph, device=device, **kwargs)
    if device == "cuda":
        raise ValueError(f"device='cuda' needs the torch backend; estimator '{estimator}' was "
                         f"asked for with backend='{backend}'")
    return spec.fn(graph, **kwargs)
