"""Compatibility alias of `crbc_viz.ops.closure` (moved there in issue 12): the closure solve is
shared math, not an estimator."""

from ..ops.closure import *  # noqa: F403
from ..ops.closure import __all__  # noqa: F401
