"""The torch backend: batched twins (`core`, `crbc`, `graph`) on a CPU or a CUDA device, and
the fused device path for training loops (`fused`). torch is imported lazily, only when a
torch path runs: importing this package registers the kernels and does not import torch."""

from __future__ import annotations

import sys

from ._device import available, cuda_available, resolve_device, torch_available

__all__ = [
    "resolve_device",
    "torch_available",
    "available",
    "cuda_available",
    "should_run",
    "TORCH_IMPORT_S",
    "FLOAT32_ATOL",
]

#: Importing torch on a CPU core (``python -m bench --write``).
TORCH_IMPORT_S = 1.0

#: The one absolute tolerance of a float32 credit against float64, wherever one is compared
#: (the tests, the README). Measured on an NVIDIA H200 (bench/gpu.sh, bench/RESULTS.md "GPU"):
#: the fused path in float32 (`fused.crbc_step_credit_torch(..., dtype=torch.float32)`) differs
#: from the float64 CPU engine by at most 4.8e-5 on 77k steps and 9.0e-5 on 4.8M steps; a trainer
#: adapter's float32 tensor is its float64 credit rounded once (|advantage| ~ 1: about 6e-8).
#: 2e-4 is the larger measurement with a factor of two to spare.
FLOAT32_ATOL = 2e-4


def should_run(spec, graph, device: str, params) -> bool | str:  # noqa: F811 (the graph, not the module)
    """``auto``: always on a usable CUDA device; on a CPU only for estimators the numba engine
    does not cover, when the numpy reference is expected to take more than twice the cost of
    importing torch (nothing once it is loaded) plus 50 ms."""
    if device == "cuda":
        return True if cuda_available() else "no CUDA device"
    from ...estimators.registry import kernel
    from .. import numba, numpy_seconds

    if kernel(spec.name, "numba") is not None and numba.available():
        return "the numba engine is this estimator's CPU engine"
    if not available():
        return "torch is not installed"
    cost = 0.0 if "torch" in sys.modules else TORCH_IMPORT_S
    seconds = numpy_seconds(spec, graph, params, worth_counting=numba.NUMBA_LOAD_S)
    if seconds > 2 * cost + 0.05:
        return True
    return f"numpy is expected to finish ({seconds:.2g} s) before torch is imported"


from . import core, crbc, fused, graph  # noqa: E402,F401  (register the torch rows of the kernel table)
