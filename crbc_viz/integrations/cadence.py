"""Credit on a dashboard while a trainer runs: every N advantage computations, each trainer
adapter (verl, verl-agent, TRL, ROLL, rLLM: all score through
`crbc_viz.integrations._core.score_steps`) hands the batch it just scored to a logger.

    >>> seen = []
    >>> log_every(2, lambda batch, *, step: seen.append(step))
    >>> for _ in range(5):
    ...     _after_scoring("a batch")
    >>> seen
    [2, 4]
    >>> log_every(0)  # off

The logger is any callable ``logger(batch, *, step)``: ``batch`` the `RolloutBatch` of the
unique steps just scored, ``step`` the count of adapter calls since `log_every` (N, 2N, ...).
`crbc_viz.integrations.wandb.log_groups` and `crbc_viz.integrations.tensorboard.log_groups`
with their run or writer bound (``functools.partial(log_groups, run)``) are such loggers; to
log at the trainer's own step, wrap one (``lambda b, step: log_groups(run, b,
step=trainer.state.global_step)``). A logger that raises is logged as a warning and training
goes on (a dashboard is never the reason a run stops).
"""

from __future__ import annotations

import logging

from ..errors import CrbcVizError

__all__ = ["log_every", "DashboardInputError"]

log = logging.getLogger(__name__)

_STATE: dict = {"every": 0, "logger": None, "calls": 0}


class DashboardInputError(CrbcVizError, ValueError):
    """An argument of a dashboard logger that cannot be used (a cadence or step that is not a
    non-negative integer, a logger that is not callable, a run or writer without the methods
    logging needs, no group)."""


def log_every(n: int, logger=None) -> None:
    """From now on, call ``logger(batch, step=k)`` on every ``n``-th adapter call (k = n, 2n,
    ...). ``n = 0`` (or no logger) turns it off.

    Raises:
        DashboardInputError: ``n`` not a non-negative integer, or ``n > 0`` with a logger that is not
            callable.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise DashboardInputError(f"log_every: n must be a non-negative integer, got {n!r}")
    if n and not callable(logger):
        raise DashboardInputError(
            f"log_every: the logger must be callable as logger(batch, step=k), got {logger!r}"
        )
    _STATE.update(every=n if logger is not None else 0, logger=logger if n else None, calls=0)


def _after_scoring(batch) -> None:
    """Count one adapter call; on every N-th, hand ``batch`` to the logger."""
    every = _STATE["every"]
    if not every:
        return
    _STATE["calls"] += 1
    k = _STATE["calls"]
    if k % every:
        return
    try:
        _STATE["logger"](batch, step=k)
    except Exception as e:  # noqa: BLE001 - a dashboard never stops a training run
        log.warning("crbc-viz: logging the credit at adapter call %d failed: %s: %s", k, type(e).__name__, e)
