"""Weights & Biases: a source's credit logged to a run, beside the training curves.

`log_groups` logs, at one ``step`` of a ``wandb`` run: ``<prefix>/graph`` — the first chosen
group's shared view (`crbc_viz.views.share`: its anchor graph with credit under each
estimator, its rollouts, the per-step credit and provenance) as a ``wandb.Html`` (a
self-contained page: nothing to fetch, no stylesheet injected); ``<prefix>/steps`` — every
step of the chosen groups with each estimator's ``credit`` and ``advantage`` as a
``wandb.Table``; and the credit statistics as scalars ``<prefix>/<estimator>/<credit|advantage>_
<mean|std|min|max|abs_mean>`` (and the counts they cover, ``<prefix>/count/steps`` and
``<prefix>/count/groups``). The values are those ``crbc-viz score`` writes for the same rows.

During training, a trainer adapter calls it every N advantage computations:
``crbc_viz.integrations.log_every(N, functools.partial(log_groups, run))`` (the step it
passes is its call count; `crbc_viz.integrations.cadence`). wandb is imported when
`log_groups` is first called (``pip install 'crbc-viz[wandb]'``); the graph drawing needs the
``[app]`` extra's pyvis.
"""

from __future__ import annotations

import logging

from .._extras import require
from ._dashboards import DashboardInputError, check_step, scored

__all__ = ["log_groups"]

log = logging.getLogger(__name__)


def log_groups(
    run,
    source,
    *,
    step,
    estimators=("crbc",),
    groups=None,
    prefix: str = "crbc",
    html: bool = True,
    fmt: str = "auto",
    backend: str = "auto",
    **params,
) -> dict:
    """Log the credit of ``source``'s groups to the wandb ``run`` at ``step``.

    Args:
        run: a ``wandb`` run (``wandb.init(...)``; anything with its ``log(data, step=)``).
        source: a log file (any format the importers read; ``fmt``) or a `RolloutBatch`.
        step: the run's step (a non-negative int; wandb drops a step below one it has logged).
        estimators: registry names; one that refuses the input is left out (logged as a
            warning and named in the HTML), the others logged.
        groups: references (``run/train_step/group_id`` or a unique ``group_id``); None: every
            group. The HTML shows the first.
        html: False leaves the graph out (the table and scalars only).
        **params: estimator parameters, as ``crbc_viz.show`` takes them.

    Returns:
        the scalars logged (``{key: value}``).

    Raises:
        CrbcVizError (one line): a source that cannot be read, an unknown group or estimator,
        a bad parameter, every estimator refusing, a bad ``step`` or ``run``
        (`DashboardInputError`); MissingExtra when wandb is not installed.
    """
    step = check_step(step)
    if not callable(getattr(run, "log", None)):
        raise DashboardInputError(f"run must be a wandb run (with .log), got {type(run).__name__}")
    wandb = require("wandb", "crbc_viz.integrations.wandb")
    sc = scored(source, estimators=estimators, groups=groups, fmt=fmt, backend=backend, **params)
    for name, err in sc.refused.items():
        log.warning("%s refused the input, not logged: %s", name, err)
    scalars = {}
    for k, v in sc.stats().items():
        key = f"{prefix}/count/{k}" if k in ("steps", "groups") else f"{prefix}/{k}"
        scalars[key] = v
    data = dict(scalars)
    data[f"{prefix}/steps"] = wandb.Table(columns=sc.columns, data=sc.rows())
    if html:
        data[f"{prefix}/graph"] = wandb.Html(sc.html(), inject=False)
    run.log(data, step=step)
    return scalars
