"""Estimators: one pure function per method, one registry (`registry`)."""

# Registration order = display order: not sorted.
# isort: off
from . import grpo, crbc, shortest_path, gigpo, rtmc, graft, gated_bepo, pgpo, trace, agentopsd  # noqa: F401
from . import abc, trca, iapo, g2po, proxmo  # noqa: F401
from .registry import (
    EstimatorSpec,
    MissingSignalError,
    UnknownEstimatorError,
    get,
    make_params,
    names,
    param_infos,
    specs,
)
# isort: on

__all__ = [
    "EstimatorSpec",
    "MissingSignalError",
    "UnknownEstimatorError",
    "get",
    "make_params",
    "names",
    "param_infos",
    "specs",
]
