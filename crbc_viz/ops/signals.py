"""Readers of the optional logged per-step signals (SCHEMA.md, optional fields) that the
signal-based estimators share: they raise `MissingSignalError` when a column is absent and an
`EstimatorInputError` (a `ValueError`) naming the field and the group / trajectory / step of a
bad value, shown cut (`shown`): a logged value may be a megabyte of text."""

from __future__ import annotations

import math
import reprlib

import numpy as np

from ..errors import EstimatorInputError, MissingSignalError
from ..graph import AnchorGraph

__all__ = ["is_missing", "step_location", "require_columns", "float_signal", "shown", "action_invalid"]
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 60, 6, 6, 2


def shown(v) -> str:
    """A logged value for a message: its repr, cut (long strings, big or deep lists)."""
    return _REPR.repr(v)


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def step_location(graph: AnchorGraph, s: int) -> str:
    """ "group 'run/step/gid', traj 'tid', step k" of step row ``s``."""
    b = graph.batch
    return (
        f"group '{b.group_label(int(b.traj_group[b.step_traj[s]]))}', traj "
        f"'{b.steps['traj_id'].iat[s]}', step {int(b.steps['step_idx'].iat[s])}"
    )


def require_columns(graph: AnchorGraph, estimator: str, fields) -> None:
    missing = [f for f in fields if f not in graph.batch.steps.columns]
    if missing:
        raise MissingSignalError(estimator, missing)


def float_signal(
    graph: AnchorGraph, estimator: str, field: str, *, low: float | None = None, high: float | None = None
) -> np.ndarray:
    """A required numeric per-step signal ``[S]``, checked finite and within [low, high]."""
    require_columns(graph, estimator, [field])
    col = graph.batch.steps[field].to_numpy(dtype=object)
    out = np.empty(len(col))
    for s, v in enumerate(col):
        if is_missing(v):
            raise EstimatorInputError(f"{estimator}: field '{field}' is missing at {step_location(graph, s)}")
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise EstimatorInputError(
                f"{estimator}: field '{field}' must be a number, got {shown(v)} at {step_location(graph, s)}"
            )
        x = float(v)
        bad = not math.isfinite(x) or (low is not None and x < low) or (high is not None and x > high)
        if bad:
            rng = f"in [{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
            raise EstimatorInputError(
                f"{estimator}: field '{field}' must be finite and {rng}, got {shown(v)} at "
                f"{step_location(graph, s)}"
            )
        out[s] = x
    return out


def action_invalid(graph: AnchorGraph, estimator: str) -> np.ndarray:
    """1.0 where the logged ``is_action_valid`` is false, else 0.0 ``[S]`` (verl-agent's
    ``1 - is_action_valid``). A batch without the column, or a row without a value, counts as
    valid: the invalid-action penalty then applies nowhere. A value that is not a boolean (or
    0 / 1) raises `EstimatorInputError` naming the step."""
    b = graph.batch
    out = np.zeros(b.num_steps)
    if not b.has_step_column("is_action_valid"):
        return out
    col = b.step_column("is_action_valid")
    if col.dtype == np.bool_:
        return (~col).astype(np.float64)
    for s, v in enumerate(col):
        if is_missing(v):
            continue
        number = isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1)
        if isinstance(v, (bool, np.bool_)) or number:
            out[s] = 0.0 if bool(v) else 1.0
            continue
        raise EstimatorInputError(
            f"{estimator}: field 'is_action_valid' must be true or false, got {shown(v)} at "
            f"{step_location(graph, s)}"
        )
    return out
