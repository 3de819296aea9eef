"""Batched backends. torch is imported lazily, only when a torch path runs."""
from __future__ import annotations

__all__ = ["resolve_device", "torch_available"]


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` when a CUDA device is present, else ``cpu``; ``cuda`` without one raises."""
    if device not in ("auto", "cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for but torch sees no CUDA device "
                           f"(torch {torch.__version__}); use device='cpu' or 'auto'")
    return str(device)
