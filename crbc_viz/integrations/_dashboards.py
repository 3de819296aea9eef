"""What the W&B and TensorBoard loggers share: a source's groups scored, as per-step rows, credit
statistics and the shared view's HTML.

A source is a log file (any format the importers read: `crbc_viz.views.share.read_log`) or a
`RolloutBatch` (what a trainer adapter scored). The numbers are `crbc_viz.api.score_each`'s on
the chosen groups' graph: per step, each estimator's ``credit`` and ``advantage`` as ``crbc-viz
score`` writes them for the same rows. This module sits above `crbc_viz.views` (it builds the
HTML of `crbc_viz.views.share`), so no trainer adapter imports it: an adapter calls whatever
logger it is given (`crbc_viz.integrations.cadence`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..data import RolloutBatch
from .cadence import DashboardInputError

__all__ = ["DashboardInputError", "Scored", "scored", "STATS", "MAX_TABLE_ROWS"]

#: The statistics logged per estimator and value (``credit``, ``advantage``), over the finite
#: per-step values of the logged groups: mean, population standard deviation, min, max, mean |x|.
STATS = ("mean", "std", "min", "max", "abs_mean")
#: Rows of the per-step table at most (the statistics cover every step).
MAX_TABLE_ROWS = 5000


@dataclass
class Scored:
    """The chosen groups of a source, scored."""

    batch: RolloutBatch
    graph: object
    group_index: list[int]
    results: dict
    refused: dict
    file_name: str
    read_as: str
    notes: tuple = ()
    columns: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    backend: str = "auto"

    def rows(self, max_rows: int = MAX_TABLE_ROWS) -> list[list]:
        """One row per step (up to ``max_rows``): group, traj_id, step_idx, action, reward, then
        ``credit[<est>]`` and ``advantage[<est>]`` for each estimator that ran (`columns`)."""
        b = self.graph.batch
        steps = b.steps
        labels = [self.batch.group_label(g) for g in self.group_index]
        traj_group = np.repeat(np.arange(b.num_groups), np.diff(b.group_traj_offsets))
        ids = steps["traj_id"].astype(str).to_numpy()
        idx = steps["step_idx"].to_numpy() if "step_idx" in steps else b.step_pos
        acts = steps["action"].fillna("").astype(str).to_numpy() if "action" in steps else None
        rewards = steps["reward"].to_numpy(dtype=np.float64)
        vals = []
        for r in self.results.values():
            vals += [np.asarray(r.credit, np.float64), np.asarray(r.advantage, np.float64)]
        out = []
        for s in range(min(b.num_steps, max_rows)):
            row = [labels[int(traj_group[int(b.step_traj[s])])], ids[s], int(idx[s])]
            row += ["" if acts is None else acts[s], float(rewards[s])]
            out.append(row + [float(v[s]) for v in vals])
        return out

    def stats(self) -> dict[str, float]:
        """``{"<est>/<credit|advantage>_<stat>": value}`` over every step's finite values, and
        ``steps`` / ``groups``: the counts they cover."""
        out: dict[str, float] = {
            "steps": float(self.graph.batch.num_steps),
            "groups": float(len(self.group_index)),
        }
        for name, r in self.results.items():
            for what in ("credit", "advantage"):
                v = np.asarray(getattr(r, what), np.float64)
                v = v[np.isfinite(v)]
                if not len(v):
                    continue
                got = (v.mean(), v.std(), v.min(), v.max(), np.abs(v).mean())
                out.update({f"{name}/{what}_{k}": float(x) for k, x in zip(STATS, got)})
        return out

    def html(self, group_pos: int = 0) -> str:
        """The shared view's page (`crbc_viz.views.share.Shared.page`) of one chosen group."""
        from ..views.share import share

        view = share(
            self.batch,
            self.batch.group_label(self.group_index[group_pos]),
            list(self.results) or list(self.refused),
            params=self.params,
            backend=self.backend,
            file_name=self.file_name,
            read_as=self.read_as,
            notes=self.notes,
        )
        return view.page()


def check_step(step) -> int:
    """``step`` as a non-negative int (a bool, a float or text is refused)."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or int(step) < 0:
        raise DashboardInputError(f"step must be a non-negative integer, got {step!r}")
    return int(step)


def scored(source, *, estimators=("crbc",), groups=None, fmt: str = "auto", backend: str = "auto", **params):
    """Read ``source`` (a log path in any format, or a `RolloutBatch`), choose ``groups``
    (references as ``crbc_viz.show`` takes them: ``run/train_step/group_id`` or a unique
    ``group_id``; None: every group) and score them with each of ``estimators``.

    Raises:
        LoadError, UnknownGroupError, UnknownEstimatorError, EstimatorInputError; the refusal
        when every estimator refuses the input; DashboardInputError for a source that is
        neither a path nor a batch.
    """
    from ..api import score_each
    from ..graph import build_graph
    from ..views.share import _param_sets, read_log, resolve_group

    names, pset = _param_sets(estimators, params)
    if isinstance(source, (str, os.PathLike)):
        batch, how, notes = read_log(source, fmt)
        file_name = os.path.basename(os.fspath(source))
    elif isinstance(source, RolloutBatch):
        batch, how, notes, file_name = source, "a RolloutBatch given in Python", (), "(a batch)"
    else:
        raise DashboardInputError(f"source must be a log path or a RolloutBatch, got {type(source).__name__}")
    if groups is None:
        if not batch.num_groups:
            raise DashboardInputError(f"{file_name}: the data has no group")
        index = list(range(batch.num_groups))
    else:
        refs = [groups] if isinstance(groups, str) else list(groups)
        index = list(dict.fromkeys(resolve_group(batch, g) for g in refs))
        if not index:
            raise DashboardInputError("groups names no group; give None for every group")
    graph = build_graph(batch.select_groups(index))
    results, refused = score_each(graph, names, pset, backend=backend)
    if not results:
        raise next(iter(refused.values())).with_traceback(None)
    cols = ["group", "traj_id", "step_idx", "action", "reward"]
    for n in results:
        cols += [f"credit[{n}]", f"advantage[{n}]"]
    return Scored(batch, graph, index, results, refused, file_name, how, tuple(notes), cols, pset, backend)


def markdown_table(sc: Scored, max_rows: int = MAX_TABLE_ROWS) -> str:
    """The per-step rows as a Markdown table (what TensorBoard's text plugin renders); every
    number as Python writes it (``repr``: exact), text with ``|`` and line breaks escaped."""

    def cell(v) -> str:
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else str(v)
        return str(v).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in sc.columns) + " |", "|" + "---|" * len(sc.columns)]
    rows = sc.rows(max_rows)
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    n = sc.graph.batch.num_steps
    if n > len(rows):
        lines.append(f"\n… {n - len(rows):,} more steps not listed")
    for name, err in sc.refused.items():
        lines.append(f"\n{cell(name)} refused the input: {cell(str(err))}")
    return "\n".join(lines)
