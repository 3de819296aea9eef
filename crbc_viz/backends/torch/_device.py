"""Where torch runs: is it installed, is a CUDA device usable, which device a request means.
torch is imported only to answer when it must be."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

__all__ = ["torch_available", "available", "resolve_device", "cuda_available"]


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def available() -> bool:
    """torch can be imported (asked without importing it when it is not loaded yet)."""
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None


def resolve_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` when a CUDA device is present, else ``cpu``; ``cuda`` without one raises."""
    if device not in ("auto", "cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        from ...errors import BackendUnavailable

        raise BackendUnavailable(
            "device='cuda' was asked for but torch sees no CUDA device "
            f"(torch {torch.__version__}); use device='cpu' or 'auto'"
        )
    return str(device)


@functools.cache
def _nvidia_device_nodes() -> bool:
    """An NVIDIA device node exists (asked once per process: ``backend='auto'`` asks at every
    call, and two ``stat`` calls cost more than the rest of the choice)."""
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0"))


def cuda_available() -> bool:
    """A CUDA device is usable; torch is not imported just to ask when no NVIDIA device node
    exists and torch is not loaded yet (importing it costs about a second)."""
    if "torch" not in sys.modules and not _nvidia_device_nodes():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
