"""Slots that a layer above fills and a layer below reads, so that the lower one never imports
the upper one (dependency injection): ``kernel_loader`` is set by the package facade
(``crbc_viz/__init__.py``, which runs before any submodule) to the function that imports the
backend packages (`crbc_viz.api.load_backends`); the estimator registry calls `load_kernels`
the first time its kernel table is read."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["kernel_loader", "load_kernels"]

kernel_loader: Callable[[], None] | None = None


def load_kernels() -> None:
    """Run the installed loader once (later calls do nothing)."""
    global kernel_loader
    load, kernel_loader = kernel_loader, None
    if load is not None:
        load()
