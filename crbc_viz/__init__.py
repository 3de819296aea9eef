"""crbc-viz: step-level credit assignment over merged rollout groups.

>>> from crbc_viz import load_rollouts, score
>>> r = score(load_rollouts("sample_rollouts/toy/toy_group.jsonl"), "crbc", backend="numpy")
>>> round(float(r.advantage[0]), 4)
1.2155

The names below are loaded on first use (PEP 562), so ``import crbc_viz`` and the CLI's
``--help`` do not pay for numpy/pandas; ``from crbc_viz import score`` works as before.
"""

from __future__ import annotations

import importlib

from . import _hooks

__all__ = [
    "load_rollouts",
    "score",
    "load_engine",
    "build_graph",
    "RolloutBatch",
    "AnchorGraph",
    "CreditResult",
    "LoadError",
    "show",
]
__version__ = "0.1.0"

_EXPORTS = {
    "score": "api",
    "load_engine": "api",
    "RolloutBatch": "data",
    "AnchorGraph": "graph",
    "build_graph": "graph",
    "LoadError": "io",
    "load_rollouts": "io",
    "CreditResult": "result",
    "show": "views.share",
}


def _load_backends() -> None:
    from .api import load_backends

    load_backends()


_hooks.kernel_loader = _load_backends


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    try:  # ``import crbc_viz; crbc_viz.graph`` keeps working for submodules
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
