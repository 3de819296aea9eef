"""The torch row of an estimator written once against the array API: `array_kernel` runs the
numpy reference's own function on the graph's arrays as tensors on the device and brings the
result back to numpy. Nothing of an estimator's math is restated here."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...result import CreditResult
from ._device import resolve_device

__all__ = ["array_kernel", "DeviceArrays", "to_numpy_result"]

_ARRAY_FIELDS = ("value", "q_value", "credit", "advantage", "node_value", "pair_q", "pair_credit")


class DeviceArrays:
    """The converter ``to`` of an estimator written once: a graph's numpy array → a tensor on
    ``device`` (its dtype kept: float64 stays float64, index arrays stay integers)."""

    def __init__(self, device):
        self.device = device

    def __call__(self, x):
        import torch

        return torch.as_tensor(np.ascontiguousarray(x), device=self.device)


def _numpy(x):
    return x.detach().to("cpu").numpy() if hasattr(x, "detach") else x


def to_numpy_result(r: CreditResult, backend: str) -> CreditResult:
    """``r`` with its tensors as numpy arrays and ``backend`` named."""
    return dataclasses.replace(r, backend=backend, **{k: _numpy(getattr(r, k)) for k in _ARRAY_FIELDS})


def array_kernel(fn, reference=None):
    """``kernel(graph, params, *, device)`` running ``fn(graph, params, to=DeviceArrays(dev))``
    — the estimator's one copy, written against ``xp`` — and returning its result in numpy.
    ``reference``: the estimator function ``fn`` calls, when ``fn`` only passes it the
    device's solvers (named in the kernel's name and docstring)."""
    ref = fn if reference is None else reference

    def kernel(graph, params, *, device: str = "auto") -> CreditResult:
        import torch

        dev = torch.device(resolve_device(device))
        return to_numpy_result(fn(graph, params, to=DeviceArrays(dev)), f"torch:{dev.type}")

    kernel.__name__ = kernel.__qualname__ = f"{ref.__name__.lstrip('_')}_torch"
    kernel.__doc__ = (
        f"The torch row of `{ref.__module__}.{ref.__qualname__}`: that one function on the graph's "
        "arrays as tensors on ``device`` (``backends.torch.arrays.array_kernel``)."
    )
    return kernel
