"""The hyper-parameter check shared by the engines' raw-array entry points
(`crbc_viz.backends.numba.crbc.crbc_step_credit`, `crbc_viz.backends.torch.fused.crbc_step_credit_torch`):
the bounds are `CRBCParams`'s, so the engines accept exactly what ``score(..., "crbc")`` does.
The arrays themselves are checked by `crbc_viz.ops.checks`."""

from __future__ import annotations

import operator

from ..errors import EstimatorInputError

__all__ = ["check_engine_params"]


def _count(caller: str, name: str, value, low: int) -> int:
    """A Python int ``>= low`` (an integral numpy scalar is fine; a float or a bool is not)."""
    if isinstance(value, bool):
        raise EstimatorInputError(f"{caller}: parameter '{name}' must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise EstimatorInputError(f"{caller}: parameter '{name}' must be an integer, got {value!r}") from None
    if n < low:
        raise EstimatorInputError(f"{caller}: parameter '{name}' must be >= {low}, got {n}")
    return n


def check_engine_params(caller: str, *, dense_max, **params):
    """The checked `CRBCParams` of an engine call, and ``dense_max`` as an int: ``(params,
    dense_max)``. ``params`` are `CRBCParams` fields; the ones not given take its defaults.
    Raises `EstimatorInputError` naming ``caller`` and the parameter."""
    from ..estimators.registry import get

    if "min_actions" in params:
        _count(caller, "min_actions", params["min_actions"], 1)
    dense_max = _count(caller, "dense_max", dense_max, 0)
    try:
        checked = get("crbc").check(**params)
    except EstimatorInputError as e:
        raise EstimatorInputError(f"{caller}: {e}") from None
    return checked, dense_max
