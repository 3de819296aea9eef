"""TensorBoard: a source's credit logged to an event file, beside the training curves.

`log_groups` writes, at one ``step``, a Markdown table of every chosen step's ``credit`` and
``advantage`` under each estimator (``add_text``, tag ``<prefix>/steps``; numbers written in
full, as Python's ``repr``) and the credit statistics as scalars (``add_scalar``, tags
``<prefix>/<estimator>/<credit|advantage>_<mean|std|min|max|abs_mean>`` and the counts
``<prefix>/count/steps``, ``<prefix>/count/groups``). The values are those ``crbc-viz score``
writes for the same rows.

``writer`` is any writer with ``add_text(tag, text, global_step=)`` and ``add_scalar(tag,
value, global_step=)``: ``torch.utils.tensorboard.SummaryWriter`` (which needs the
``tensorboard`` package: ``pip install 'crbc-viz[tensorboard]'``) or tensorboardX's. Nothing
is imported here. During training, a trainer adapter calls it every N advantage computations:
``crbc_viz.integrations.log_every(N, functools.partial(log_groups, writer))``.
"""

from __future__ import annotations

import logging

from ._dashboards import DashboardInputError, check_step, markdown_table, scored

__all__ = ["log_groups"]

log = logging.getLogger(__name__)


def log_groups(
    writer,
    source,
    *,
    step,
    estimators=("crbc",),
    groups=None,
    prefix: str = "crbc",
    fmt: str = "auto",
    backend: str = "auto",
    **params,
) -> dict:
    """Log the credit of ``source``'s groups to the TensorBoard ``writer`` at ``step``.

    Args:
        writer: a ``SummaryWriter`` (anything with ``add_text`` and ``add_scalar``).
        source: a log file (any format the importers read; ``fmt``) or a `RolloutBatch`.
        step: the global step (a non-negative int).
        estimators: registry names; one that refuses the input is left out (named under the
            table and logged as a warning), the others logged.
        groups: references (``run/train_step/group_id`` or a unique ``group_id``); None: every
            group.
        **params: estimator parameters, as ``crbc_viz.show`` takes them.

    Returns:
        the scalars written (``{tag: value}``).

    Raises:
        CrbcVizError (one line): a source that cannot be read, an unknown group or estimator,
        a bad parameter, every estimator refusing, a bad ``step`` or ``writer``
        (`DashboardInputError`).
    """
    step = check_step(step)
    if not all(callable(getattr(writer, m, None)) for m in ("add_text", "add_scalar")):
        raise DashboardInputError(
            f"writer must be a TensorBoard SummaryWriter (with add_text and add_scalar), got {type(writer).__name__}"
        )
    sc = scored(source, estimators=estimators, groups=groups, fmt=fmt, backend=backend, **params)
    for name, err in sc.refused.items():
        log.warning("%s refused the input, not logged: %s", name, err)
    scalars = {}
    for k, v in sc.stats().items():
        scalars[f"{prefix}/count/{k}" if k in ("steps", "groups") else f"{prefix}/{k}"] = v
    writer.add_text(f"{prefix}/steps", markdown_table(sc), global_step=step)
    for tag, v in scalars.items():
        writer.add_scalar(tag, v, global_step=step)
    return scalars
