"""Backend packages: ``torch`` (batched twins, CPU or CUDA) and ``numba`` (the compiled CPU
engine). Each one, imported, adds its rows to the kernel table of
`crbc_viz.estimators.registry` (``@implements(name, backend)``) without importing torch or
numba, and says ``available()`` and ``should_run(spec, graph, device, params)`` (True, or a
reason string) for ``auto``. `crbc_viz.api` imports them, lazily, in one place.

This module holds what both need to weigh themselves against the numpy reference: its
expected run time (`numpy_seconds`), from costs measured by ``python -m bench --write``.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import AnchorGraph, is_built

__all__ = ["numpy_seconds", "NUMPY_S_PER_STEP", "NUMPY_S_PER_FLOP", "NUMPY_S_PER_SPARSE_ANCHOR"]

#: The numpy reference on a CPU core per step, per padded dense-solve flop and per
#: sparse-solved anchor (order of magnitude is what matters).
NUMPY_S_PER_STEP = 1e-6
NUMPY_S_PER_FLOP = 1e-9
NUMPY_S_PER_SPARSE_ANCHOR = 5e-6


def _group_sizes(graph: AnchorGraph) -> tuple[np.ndarray, bool]:
    """Anchors per group when the graph exists, else steps per group (an upper bound)."""
    if is_built(graph):
        return np.diff(graph.group_node_offsets), True
    b = graph.batch
    return np.diff(b.traj_offsets[b.group_traj_offsets]), False


def _estimate(spec, graph: AnchorGraph, params) -> tuple[float, bool]:
    from ..ops.closure import DENSE_MAX, size_class

    seconds = NUMPY_S_PER_STEP * graph.batch.num_steps
    sizes, exact = _group_sizes(graph)
    if spec.solves and math.isinf(getattr(params, "depth", math.inf)):
        dense = sizes[sizes <= DENSE_MAX]
        seconds += NUMPY_S_PER_FLOP * float(np.sum(size_class(dense).astype(np.float64) ** 3)) / 3
        seconds += NUMPY_S_PER_SPARSE_ANCHOR * float(sizes[sizes > DENSE_MAX].sum())
    return seconds, exact


def numpy_seconds(spec, graph: AnchorGraph, params, *, worth_counting: float = math.inf) -> float:
    """Expected seconds of the numpy reference for ``spec`` on ``graph``: by the anchors of each
    group when the graph is built (the solve's cost grows with them), else by steps. When the
    step-based estimate passes ``worth_counting`` but steps alone stay under it, the lazy graph
    is built and the anchors are counted (the reference needs the graph anyway)."""
    seconds, exact = _estimate(spec, graph, params)
    if not exact and seconds > worth_counting and NUMPY_S_PER_STEP * graph.batch.num_steps < worth_counting:
        graph.step_node  # noqa: B018 (builds a lazy graph)
        seconds, _ = _estimate(spec, graph, params)
    return seconds
