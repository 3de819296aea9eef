"""Old import path of the backends (before issue 12), kept as an alias so code written
against it keeps working: ``crbc_viz.backend.numba_crbc`` is `crbc_viz.backends.numba.crbc`,
``numba_graph`` is ``backends.numba.graph``, ``torch_core`` / ``torch_crbc`` / ``torch_graph`` /
``torch_fused`` are ``backends.torch.core`` / ``.crbc`` / ``.graph`` / ``.fused``. New code
imports `crbc_viz.backends`. Importing this alias loads the compiled engine's module (numba)."""

from __future__ import annotations

import sys

from ..backends.numba import crbc as numba_crbc
from ..backends.numba import graph as numba_graph
from ..backends.torch import core as torch_core
from ..backends.torch import crbc as torch_crbc
from ..backends.torch import fused as torch_fused
from ..backends.torch import graph as torch_graph
from ..backends.torch import resolve_device, torch_available

__all__ = [
    "resolve_device",
    "torch_available",
    "numba_crbc",
    "numba_graph",
    "torch_core",
    "torch_crbc",
    "torch_fused",
    "torch_graph",
]

for _name in ("numba_crbc", "numba_graph", "torch_core", "torch_crbc", "torch_fused", "torch_graph"):
    sys.modules[f"{__name__}.{_name}"] = globals()[_name]
