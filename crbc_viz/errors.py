"""One error hierarchy: every error the package raises on purpose derives from `CrbcVizError`,
so a caller (the CLI, the app, a trainer integration) catches one class and shows one line.

Each subclass also keeps the built-in base it had before (``ValueError``, ``KeyError``,
``RuntimeError``), so ``except ValueError`` in existing callers still works.

    CrbcVizError
    ├── LoadError            (crbc_viz.io.errors: a file's problems, with file/line/field)
    ├── StoreError           (crbc_viz.store: not a store, nothing matches)
    ├── EstimatorInputError  (a parameter out of bounds or not a choice)
    ├── MissingSignalError   (crbc_viz.estimators.registry: an estimator needs logged fields)
    ├── UnknownEstimatorError(crbc_viz.estimators.registry)
    └── BackendUnavailable   (a requested backend or device is not installed / present)
"""
from __future__ import annotations

__all__ = ["CrbcVizError", "EstimatorInputError", "BackendUnavailable"]


class CrbcVizError(Exception):
    """Base of every error crbc-viz raises on purpose (the CLI maps it to exit status 2)."""


class EstimatorInputError(CrbcVizError, ValueError):
    """A hyper-parameter or estimator input that is out of bounds or not one of the choices."""


class BackendUnavailable(CrbcVizError, RuntimeError):
    """A backend or device that was asked for explicitly is not available on this machine."""
