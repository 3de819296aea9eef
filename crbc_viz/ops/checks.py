"""Checks of the raw step arrays that the compiled and fused CRBC entry points take.

A training loop hands these arrays straight to a kernel that indexes by them, so a length
that disagrees or an offset past the end would read and write outside the arrays. Every
check here is vectorised and O(S) at most (the offsets are O(T), the action range two
reductions), and every failure raises `EstimatorInputError` naming the caller and the
argument, what was expected and what was received.

The contract (`check_step_arrays`):

- ``step_anchor_hash`` ``[S]``: any integer dtype (uint64 hashes; int64 is read bit for bit);
- ``step_action`` ``[S]``: integer ids in ``[0, 2**32)`` (the engines pack an anchor and an
  action into one 64-bit key, so a negative or wider id would alias another pair);
- ``traj_offsets`` ``[T + 1]``: integer, starts at 0, strictly increasing (a trajectory has at
  least one step), ends at S;
- ``group_traj_offsets`` ``[G + 1]``: integer, starts at 0, non-decreasing (a group without
  trajectories has no steps and contributes nothing), ends at T;
- ``traj_success`` ``[T]``: bool, or numbers that are all 0 or 1 (NaN is refused).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import EstimatorInputError

__all__ = [
    "StepArrays",
    "check_step_arrays",
    "as_vector",
    "check_ids",
    "check_offsets",
    "as_flags",
    "ACTION_ID_LIMIT",
]

#: Action ids must be below this (the engines pack anchor and action into one 64-bit key).
ACTION_ID_LIMIT = 1 << 32


class StepArrays(NamedTuple):
    """The checked arrays, contiguous and in the dtypes the engines index with."""

    step_anchor_hash: np.ndarray  # [S] uint64
    step_action: np.ndarray  # [S] int64 in [0, 2**32)
    traj_offsets: np.ndarray  # [T + 1] int64
    group_traj_offsets: np.ndarray  # [G + 1] int64
    traj_success: np.ndarray  # [T] bool


def _error(caller: str, name: str, what: str) -> EstimatorInputError:
    return EstimatorInputError(f"{caller}: argument '{name}' {what}")


_KINDS = {"iu": "an integer", "biuf": "a bool, integer or float"}


def as_vector(
    x, name: str, *, caller: str, kinds: str = "iu", length: int | None = None, length_name: str = "S"
) -> np.ndarray:
    """``x`` as a 1-D numpy array whose dtype kind is one of ``kinds`` (``"iu"``: integer;
    ``"biuf"``: bool, integer or float), of ``length`` (called ``length_name``) when given."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, RuntimeError) as e:
        raise _error(caller, name, f"is not an array ({type(x).__name__}: {e})") from None
    if a.ndim != 1:
        raise _error(caller, name, f"must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in kinds:
        raise _error(caller, name, f"must have {_KINDS[kinds]} dtype, got {a.dtype}")
    if length is not None and a.shape[0] != length:
        raise _error(caller, name, f"must have length {length_name} = {length}, got {a.shape[0]}")
    return a


def check_ids(
    x,
    name: str,
    *,
    caller: str,
    length: int | None = None,
    length_name: str = "S",
    limit: int = ACTION_ID_LIMIT,
    count: int | None = None,
) -> np.ndarray:
    """Integer ids ``[length]`` in ``[0, limit)``, as contiguous int64. ``count``: the ids are
    codes of a factorisation, known to lie in ``[0, count)`` (the batch's `action_ids`), so the
    O(S) range scan is skipped when ``count <= limit``."""
    a = as_vector(x, name, caller=caller, length=length, length_name=length_name)
    if a.shape[0] and (count is None or count > limit):
        lo, hi = a.min(), a.max()
        if lo < 0 or hi >= limit:
            bad = lo if lo < 0 else hi
            k = int(np.flatnonzero(a == bad)[0])
            raise _error(caller, name, f"must hold ids in [0, {limit}), got {bad} at index {k}")
    return np.ascontiguousarray(a, dtype=np.int64)


def check_offsets(x, name: str, total: int, *, caller: str, total_name: str, allow_empty: bool) -> np.ndarray:
    """CSR offsets ``[K + 1]``: integer, start at 0, end at ``total`` and never decrease
    (strictly increase unless ``allow_empty``); as contiguous int64. ``total_name`` says
    where ``total`` comes from, for the message."""
    a = as_vector(x, name, caller=caller)
    if a.shape[0] == 0:
        raise _error(caller, name, "must have at least one entry (offsets [K + 1] start at 0)")
    a = np.ascontiguousarray(a, dtype=np.int64)  # a uint64 above 2**63 wraps negative: refused below
    if a[0] != 0:
        raise _error(caller, name, f"must start at 0, got {a[0]}")
    step = np.diff(a)
    bad = np.flatnonzero(step < (0 if allow_empty else 1))
    if bad.size:
        k = int(bad[0])
        what = "decreases" if step[k] < 0 else "repeats (an empty segment)"
        raise _error(caller, name, f"{what} at index {k + 1}: {a[k]} then {a[k + 1]}")
    if a[-1] != total:
        raise _error(caller, name, f"must end at {total} ({total_name}), got {a[-1]}")
    return a


def as_flags(x, name: str, *, caller: str, length: int, length_name: str = "T") -> np.ndarray:
    """Booleans ``[length]``: a bool array, or numbers that are all 0 or 1 (no NaN)."""
    a = as_vector(x, name, caller=caller, kinds="biuf", length=length, length_name=length_name)
    if a.dtype.kind == "b":
        return np.ascontiguousarray(a)
    bad = np.flatnonzero((a != 0) & (a != 1))
    if bad.size:
        k = int(bad[0])
        raise _error(caller, name, f"must be bool or 0/1, got {a[k]} at index {k}")
    return a != 0


def check_step_arrays(
    step_anchor_hash,
    step_action,
    traj_offsets,
    group_traj_offsets,
    traj_success,
    *,
    caller: str,
    action_count: int | None = None,
) -> StepArrays:
    """Check the five step arrays against each other (module docstring) and return them
    contiguous in the engines' dtypes; raise `EstimatorInputError` naming ``caller`` and the
    argument at the first problem. ``action_count``: `check_ids`'s ``count`` for the actions."""
    h = as_vector(step_anchor_hash, "step_anchor_hash", caller=caller)
    S = h.shape[0]
    if h.dtype == np.int64:
        h = np.ascontiguousarray(h).view(np.uint64)  # same bits, no copy
    else:
        h = np.ascontiguousarray(h, dtype=np.uint64)
    a = check_ids(
        step_action,
        "step_action",
        caller=caller,
        length=S,
        length_name="S (of 'step_anchor_hash')",
        count=action_count,
    )
    to = check_offsets(
        traj_offsets,
        "traj_offsets",
        S,
        caller=caller,
        total_name="S, the length of 'step_anchor_hash'",
        allow_empty=False,
    )
    T = to.shape[0] - 1
    gto = check_offsets(
        group_traj_offsets,
        "group_traj_offsets",
        T,
        caller=caller,
        total_name="T, len(traj_offsets) - 1",
        allow_empty=True,
    )
    s = as_flags(traj_success, "traj_success", caller=caller, length=T, length_name="T (of 'traj_offsets')")
    return StepArrays(h, a, to, gto, s)
