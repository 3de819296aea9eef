"""Compiled CPU engine for CRBC: merge, solve and credit fused per group, parallel over groups.

Input is the batch's raw step arrays — anchor hashes, action ids, trajectory and group
offsets, success flags — so the whole estimator runs here: anchors are merged inside each
group (an open-addressing hash table, group-scoped), the closure (I − βM)V = b is solved by dense
Gaussian elimination in the group's own scratch (I − βM is a nonsingular M-matrix, so
elimination without pivoting is stable), then Q, the gated σ-normalised credit and the final
advantage are written per step. Groups larger than ``dense_max`` anchors are solved by
SciPy's sparse LU after the kernel (the numpy reference's path: no dense n² matrix).

The groups are cut into runs of consecutive groups, a few per thread (`all_groups`). At the
exact depth a run's groups of up to `SCRATCH_MAX_STEPS` steps take `scratch_group`: one
`Scratch` per run holds every table, so nothing is allocated or cleared per group, and one
hash probe per step finds the (anchor, action) pair; a group of up to `MASK_MAX` anchors
(workload b's: ~35 anchors, ~300 steps) is solved in the scratch too. Any other group takes
`group_kernel` (its own arrays; the band solve, or the finite-depth backups).

numba compiles this on first use (cached on disk). Without numba the module still imports and
`crbc_step_credit` raises ImportError, but `crbc_viz.api.score` never gets that far:
`crbc_viz.backends.numba.available` is false, so ``backend="auto"`` passes over this engine and
``backend="numba"`` raises `BackendUnavailable`.
"""

from __future__ import annotations

import math

import numpy as np

from ...estimators.crbc import CRBCParams
from ...ops.checks import check_step_arrays
from ...ops.segments import F64_EPS, SPREAD_ULPS
from ..checks import check_engine_params
from .group import MASK_MAX, KernelParams, Outputs, Steps, solve_band, solve_masked
from .jit import njit, numba, prange
from .scratch import group_run

__all__ = ["crbc_step_credit", "run_checked", "DENSE_MAX", "MASK_MAX", "Steps", "solve_band", "solve_masked"]

DENSE_MAX = 1024

#: Groups are cut into this many runs per thread (`all_groups`), each with its own `Scratch`.
RUNS_PER_THREAD = 4


@njit(cache=True, parallel=True, nogil=True)
def all_groups(steps, params, out, threads):
    """`group_run` over runs of consecutive groups, in parallel. The arguments are plain tuples
    in the field order of `Steps`, `KernelParams` and `Outputs` (numba types a plain tuple
    ~2 µs faster than a named one at each call; inside, they are named again at no cost).
    ``threads``: numba's thread count (read outside: inside, it would keep the function out
    of numba's disk cache)."""
    steps, params, out = Steps(*steps), KernelParams(*params), Outputs(*out)
    G = steps.group_traj_off.shape[0] - 1
    runs = min(G, RUNS_PER_THREAD * threads)
    for r in prange(runs):
        group_run(r * G // runs, (r + 1) * G // runs, steps, params, out)


def _compiled():
    if numba is None:
        raise ImportError("numba is not installed; use backend='torch' or 'numpy'")
    _launch_threads()
    return all_groups


def _launch_threads() -> None:
    """Start numba's thread pool (once) with OpenMP's passive wait policy unless the user chose
    one: a worker that has no group left sleeps instead of spinning. On a machine shared with
    other jobs (more runnable threads than cores) a spinning worker takes the core the thread
    still merging its groups needs, and each call ends with up to a few ms of spinning; the
    policy is read once, when the OpenMP runtime starts, so the variable is set only for that
    moment and this process's other OpenMP runtimes (torch's) keep their own."""
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return
    import os

    if "OMP_WAIT_POLICY" in os.environ:
        parallel._launch_threads()
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        parallel._launch_threads()
    finally:
        del os.environ["OMP_WAIT_POLICY"]


def crbc_step_credit(
    step_anchor_hash: np.ndarray,
    step_action: np.ndarray,
    traj_offsets: np.ndarray,
    group_traj_offsets: np.ndarray,
    traj_success: np.ndarray,
    *,
    beta: float = CRBCParams.beta,
    depth: float = CRBCParams.depth,
    sigma_min: float = CRBCParams.sigma_min,
    w_group: float = CRBCParams.w_group,
    w_step: float = CRBCParams.w_step,
    min_actions: int = CRBCParams.min_actions,
    dense_max: int = DENSE_MAX,
):
    """CRBC per step straight from raw step arrays (the training-loop entry point).

    Args:
        step_anchor_hash: ``[S]`` uint64 anchor hash (merged within each group only; any
            integer dtype, int64 read bit for bit).
        step_action: ``[S]`` integer action ids in ``[0, 2**32)`` (any consistent coding).
        traj_offsets: ``[T + 1]`` step offsets: 0, strictly increasing (no empty
            trajectory), S last. ``group_traj_offsets``: ``[G + 1]`` trajectory offsets: 0,
            non-decreasing, T last.
        traj_success: ``[T]`` bool outcome (or 0/1 numbers).
        beta, depth, sigma_min, w_group, w_step, min_actions: as `crbc_viz.estimators.crbc.crbc`
            (same defaults and bounds: `CRBCParams`'s). dense_max: integer >= 0.

    Returns:
        dict of ``value``, ``q_value``, ``credit``, ``advantage`` (each ``[S]`` float64) and
        ``closure_residual`` (max over groups; exact depth only), ``num_nodes`` (anchors
        merged) and ``gated_nodes`` (anchors with fewer than ``min_actions`` actions).

    Raises:
        EstimatorInputError: an array or parameter outside that contract (named in the
            message), checked before the kernel runs (`crbc_viz.ops.checks`).
    """
    _compiled()
    caller = "crbc_step_credit"
    p, dense_max = check_engine_params(
        caller,
        beta=beta,
        depth=depth,
        sigma_min=sigma_min,
        w_group=w_group,
        w_step=w_step,
        min_actions=min_actions,
        dense_max=dense_max,
    )
    steps = Steps(
        *check_step_arrays(
            step_anchor_hash, step_action, traj_offsets, group_traj_offsets, traj_success, caller=caller
        )
    )
    return run_checked(steps, p, p.depth, dense_max)


def run_checked(steps: Steps, p, depth: float, dense_max: int = DENSE_MAX) -> dict:
    """`crbc_step_credit` on arrays already checked (`check_step_arrays`) with parameters
    already checked (``p``: a `CRBCParams`-like object whose bounds were checked; ``depth``
    overrides its depth): what `crbc_viz.api.score` calls, which checked both before."""
    fn = _compiled()
    S, G = steps.hashes.shape[0], steps.group_traj_off.shape[0] - 1
    out = Outputs(
        *step_outputs(S),  # every step is written (large groups after the kernel)
        large=np.zeros(G, np.int8),
        residual=np.zeros(G),
        node_stats=np.zeros((G, 2), np.int64),
    )
    depth_inf = math.isinf(depth)
    params = KernelParams(
        beta=float(p.beta),
        depth_inf=depth_inf,
        depth=0 if depth_inf else int(depth),
        sigma_min=float(p.sigma_min),
        w_group=float(p.w_group),
        w_step=float(p.w_step),
        min_actions=int(p.min_actions),
        dense_max=int(dense_max),
        spread_rtol=SPREAD_ULPS * F64_EPS,
    )
    fn(tuple(steps), tuple(params), tuple(out), numba.get_num_threads())
    if out.large.any():
        _solve_large_groups(np.flatnonzero(out.large), steps, p, out)
    return {
        "value": out.value,
        "q_value": out.q_value,
        "credit": out.credit,
        "advantage": out.advantage,
        "closure_residual": float(out.residual.max()) if (depth_inf and G) else float("nan"),
        "num_nodes": int(out.node_stats[:, 0].sum()),
        "gated_nodes": int(out.node_stats[:, 1].sum()),
    }


#: Up to this many steps the four per-step outputs are rows of one block (`step_outputs`).
ONE_BLOCK_MAX_STEPS = 1 << 20


def step_outputs(S: int) -> tuple:
    """The four ``[S]`` float64 outputs, uninitialised. Up to `ONE_BLOCK_MAX_STEPS` steps they
    are the rows of one ``[4, S]`` block, which glibc's malloc keeps from one call to the next:
    freeing an mmap'ed block raises its mmap threshold to the block's size and its trim
    threshold to twice that. Four separate arrays of ~S·8 bytes are handed back to the system
    at every free (together they exceed the trim threshold that one of them set), and the next
    call's first writes fault every page in again: ~570 faults, ~0.8 ms of CPU per call on
    workload (b)'s 77k steps, 20 % of the call. Above it (32 MiB: glibc's largest dynamic
    mmap threshold, so a block would be mapped afresh at every call anyway) they are separate,
    so that keeping one does not keep the other three."""
    if S <= ONE_BLOCK_MAX_STEPS:
        return tuple(np.empty((4, S)))
    return tuple(np.empty(S) for _ in range(4))


def _solve_large_groups(groups, steps: Steps, p, out: Outputs) -> None:
    """Groups over ``dense_max`` anchors: the numpy reference, whose closure solve takes
    sparse LU for them (`crbc_viz.ops.closure`; no dense n² matrix, no torch). ``p``: the
    checked `CRBCParams` (exact depth)."""
    import pandas as pd

    from ...data import Layout, batch_from_columns
    from ...estimators.crbc import crbc
    from ...graph import build_graph

    traj_off, gto, success = steps.traj_off, steps.group_traj_off, steps.success
    for g in groups:
        t_lo, t_hi = gto[g], gto[g + 1]
        lo, hi = traj_off[t_lo], traj_off[t_hi]
        lens = np.diff(traj_off[t_lo : t_hi + 1])
        sub = batch_from_columns(
            pd.DataFrame({"action": pd.Categorical(steps.actions[lo:hi]), "anchor_key": ""}),
            layout=Layout.of_lengths(lens, np.zeros(t_hi - t_lo, np.int64), 1),
            step_anchor_hash=steps.hashes[lo:hi],
            traj_success=success[t_lo:t_hi],
            traj_truncated=np.zeros(t_hi - t_lo, bool),
            traj_return=success[t_lo:t_hi].astype(float),
            groups=pd.DataFrame({"g": [g]}),
            success_column=False,
        )
        r = crbc(
            build_graph(sub),
            beta=p.beta,
            sigma_min=p.sigma_min,
            w_group=p.w_group,
            w_step=p.w_step,
            min_actions=p.min_actions,
        )
        out.value[lo:hi], out.q_value[lo:hi] = r.value, r.q_value
        out.credit[lo:hi], out.advantage[lo:hi] = r.credit, r.advantage
        out.residual[g] = r.diagnostics["closure_residual"]
