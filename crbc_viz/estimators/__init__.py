"""Estimators: one pure function per method, one registry (`registry`)."""
# Registration order = display order: not sorted.
# isort: off
from . import (grpo, crbc, shortest_path,  # noqa: F401  (registration order = display order)
               gigpo, rtmc, graft, gated_bepo, pgpo, trace, agentopsd, abc, trca, iapo)
from .registry import (EstimatorSpec, MissingSignalError, UnknownEstimatorError, get, make_params,
                       names, param_infos, specs)
# isort: on

__all__ = ["EstimatorSpec", "MissingSignalError", "UnknownEstimatorError", "get", "make_params",
           "names", "param_infos", "specs"]
