"""The Python API: `score` dispatches a registered estimator on a batch or graph."""

from __future__ import annotations

import logging
import sys

from ._extras import install_hint, installed
from .data import RolloutBatch
from .errors import BackendUnavailable, CrbcVizError, EstimatorInputError, MissingSignalError
from .graph import AnchorGraph, lazy_graph
from .result import CreditResult

__all__ = [
    "score",
    "score_frame",
    "score_all",
    "score_each",
    "REFUSALS",
    "BACKENDS",
    "AUTO_ORDER",
    "load_backends",
]

BACKENDS = ("auto", "numpy", "torch", "numba")

log = logging.getLogger(__name__)


def score(
    data: RolloutBatch | AnchorGraph, estimator: str, *, device: str = "auto", backend: str = "auto", **params
) -> CreditResult:
    """Run estimator ``estimator`` on ``data``.

    Args:
        data: a `RolloutBatch` (its graph is built here) or a prebuilt `AnchorGraph`.
        estimator: a registry name (``crbc_viz.estimators.names()``).
        device: ``auto`` | ``cpu`` | ``cuda`` for the torch backend.
        backend: ``numpy`` (the readable reference), ``torch`` (batched; CPU or CUDA),
            ``numba`` (compiled CPU engine, where an estimator has one) or ``auto``: the first
            backend of `AUTO_ORDER` that has a kernel for the estimator and whose package's
            ``should_run`` agrees — torch on CUDA when a GPU is used; on a CPU numba when it is
            loaded already, else whichever of numpy, numba and torch is expected to finish
            first counting the cost of loading numba or importing torch (by the anchors of
            each group, since the solve's cost grows with them, and by steps). Every backend
            solves any group size in bounded memory (sparse LU for large groups). Within the
            backend, the kernel table's row for the call runs (`registry.kernel_for`): ``crbc``
            at depth ∞ on a CUDA device runs fused there (`crbc_viz.backends.torch.fused`).
        **params: hyper-parameters of the estimator's params dataclass (strings are coerced).

    Raises:
        UnknownEstimatorError: unknown name (lists the valid ones).
        EstimatorInputError: unknown parameter, out-of-bounds value, unknown backend.
        BackendUnavailable: the requested backend has no kernel for the estimator, is not
            installed, or the requested device is absent.
    """
    from .estimators import registry

    spec = registry.get(estimator)
    p = spec.check(**params)
    if backend not in BACKENDS:
        raise EstimatorInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    # Built on first use: a kernel that merges the anchors itself never builds it.
    graph = lazy_graph(data)
    if backend == "auto":
        backend, run_on = _auto_backend(spec, device, graph, p), device
    else:
        run_on = _require(spec, backend, device)
    # The backend's row, or a guarded row of it whose should_run agrees (the fused CUDA path).
    return registry.kernel_for(spec.name, backend, graph, p, run_on)(graph, p, device=run_on)


#: ``auto`` asks these (backend, device) in turn; numpy always runs.
AUTO_ORDER = (("torch", "cuda"), ("numba", "cpu"), ("torch", "cpu"), ("numpy", "cpu"))


def load_engine() -> bool:
    """Load the compiled CPU engine (numba) into this process now, so that ``backend='auto'``
    runs it from the next call on. For a process that scores again and again (a trainer loop,
    the app server, a notebook that re-scores): the load (~0.4 s from numba's disk cache) is
    paid once, here, and every later choice depends only on the input. Returns False, and
    changes nothing, where numba is not installed (``pip install 'crbc-viz[numba]'``)."""
    pkg = _package("numba")
    if not pkg.available():
        return False
    pkg.load()
    return True


def load_backends() -> None:
    """Import the backend packages (each adds its kernels to the registry's table): the one
    place they are imported. Neither imports torch nor numba."""
    from .backends import numba, torch  # noqa: F401


def _package(backend: str):
    load_backends()
    return sys.modules[f"{__package__}.backends.{backend}"]


def _auto_backend(spec, device: str, graph: AnchorGraph, params=None) -> str:
    """The backend `score` runs for ``backend='auto'``."""
    from .estimators import registry

    params = params if params is not None else spec.check()
    passed = []  # (backend:device, why not) of each backend asked before the one chosen
    for backend, where in AUTO_ORDER:
        if device not in ("auto", where) or registry.kernel(spec.name, backend) is None:
            continue
        verdict = True if backend == "numpy" else _package(backend).should_run(spec, graph, where, params)
        if verdict is True:
            why = "; ".join(f"not {b}: {reason}" for b, reason in passed) or "the first backend asked"
            log.info("auto: %s runs on %s:%s (%s)", spec.name, backend, where, why)
            return backend
        passed.append((f"{backend}:{where}", verdict))
    needs = "torch and a CUDA device" if installed("torch") else f"torch ({install_hint('torch')})"
    raise BackendUnavailable(
        f"device='{device}': no backend of estimator '{spec.name}' runs there (CUDA needs {needs})"
    )


def _require(spec, backend: str, device: str) -> str:
    """Check that an explicitly requested backend can run; returns the device to pass on."""
    from .estimators import registry

    if registry.kernel(spec.name, backend) is None:
        have = ", ".join(registry.backends(spec))
        raise BackendUnavailable(f"estimator '{spec.name}' has no {backend} backend; it has: {have}")
    if backend == "numpy":
        if device == "cuda":
            raise BackendUnavailable(
                f"device='cuda' needs the torch backend; estimator '{spec.name}' "
                f"was asked for with backend='numpy'"
            )
        return "cpu"
    pkg = _package(backend)
    if not pkg.available():
        raise BackendUnavailable(
            f"backend='{backend}' was asked for but {backend} is not installed: "
            f"{install_hint(backend)} (or use backend='numpy' or 'auto')"
        )
    if backend == "numba" and device == "cuda":
        raise BackendUnavailable(
            f"device='cuda' needs the torch backend; estimator '{spec.name}' was "
            f"asked for with backend='numba'"
        )
    return device


def score_frame(
    graph: AnchorGraph,
    names: list[str],
    params: dict[str, dict],
    *,
    device: str = "auto",
    backend: str = "auto",
):
    """Several estimators on one graph as one long frame (`CreditResult.to_frame` rows).

    ``params["*"]`` applies to every estimator that has the parameter, ``params[name]`` to
    one; a ``"*"`` key no selected estimator has raises, naming it.

    Returns:
        ``(frame, results)``: the concatenated rows and each estimator's `CreditResult`.
    """
    import pandas as pd

    results = score_all(graph, names, params, device=device, backend=backend)
    return pd.concat([r.to_frame() for r in results.values()], ignore_index=True), results


def score_all(
    data: RolloutBatch | AnchorGraph,
    names: list[str],
    params: dict[str, dict],
    *,
    device: str = "auto",
    backend: str = "auto",
) -> dict[str, CreditResult]:
    """Each of ``names`` on ``data`` (`score`), with ``params`` shared as in `score_frame`:
    ``{name: CreditResult}``. The graph of a batch is built once, and only if a kernel needs it.
    The first estimator that refuses its input raises (`score_each` keeps the others)."""
    results, refused = score_each(data, names, params, device=device, backend=backend)
    if refused:
        raise next(iter(refused.values()))
    return results


#: What an estimator raises when it refuses the batch it was given (a missing logged signal, a
#: bad logged value): `score_each` records these per estimator and scores the others.
REFUSALS = (EstimatorInputError, MissingSignalError)


def score_each(
    data: RolloutBatch | AnchorGraph,
    names: list[str],
    params: dict[str, dict],
    *,
    device: str = "auto",
    backend: str = "auto",
) -> tuple[dict[str, CreditResult], dict[str, CrbcVizError]]:
    """Each of ``names`` on ``data``, one estimator's refusal never stopping the others.

    Parameters are checked for every estimator first (an unknown or out-of-bounds parameter
    raises, before anything is scored); then each estimator runs, and one that refuses its
    input (`REFUSALS`: a logged field missing or malformed, named in the message) is recorded.

    Returns:
        ``(results, refused)``: ``{name: CreditResult}`` of the estimators that ran and
        ``{name: error}`` of those that refused, each in the order of ``names``.
    """
    import dataclasses

    from .estimators import registry

    fields = {n: {f.name for f in dataclasses.fields(registry.get(n).params_cls)} for n in names}
    shared = params.get("*", {})
    unused = set(shared) - set().union(*fields.values())
    if unused:
        raise EstimatorInputError(f"unknown parameter(s) {', '.join(sorted(unused))} for {', '.join(names)}")
    kws = {}
    for n in names:
        kws[n] = {k: v for k, v in shared.items() if k in fields[n]}
        kws[n].update(params.get(n, {}))
        registry.get(n).check(**kws[n])  # every parameter, before any estimator runs
    graph = lazy_graph(data)
    results: dict[str, CreditResult] = {}
    refused: dict[str, CrbcVizError] = {}
    for n in names:
        try:
            results[n] = score(graph, n, device=device, backend=backend, **kws[n])
        except REFUSALS as e:
            log.info("%s refused its input: %s", n, e)
            refused[n] = e
    return results, refused
