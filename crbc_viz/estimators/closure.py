"""Compatibility alias of `crbc_viz.ops.closure` (moved there in issue 12): the closure solve is
shared math, not an estimator."""

from ..ops.closure import (
    CHUNK_BYTES,
    DENSE_MAX,
    ITER_TOL,
    SPARSE_LU_MAX,
    graph_entries,
    mean_backup_values,
    solve_closure,
    sparse_solve,
    successor_values,
)

__all__ = [
    "solve_closure",
    "graph_entries",
    "sparse_solve",
    "mean_backup_values",
    "successor_values",
    "DENSE_MAX",
    "CHUNK_BYTES",
    "SPARSE_LU_MAX",
    "ITER_TOL",
]
