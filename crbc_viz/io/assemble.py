"""Sorted step rows -> `RolloutBatch`: the one place batch offsets are assembled.

Loaders (`build_batch`), the store's read side (`crbc_viz.store.query`) and group selection
(`RolloutBatch.select_groups`) all arrive at the same point: a table of step rows, the
group and trajectory each row belongs to, and per-trajectory outcomes. The functions here turn
that into the batch's offset arrays without a per-step (or per-trajectory) Python loop:

- `build_batch(raw)`: a reader's or an importer's `RawTable` validated
  (`crbc_viz.io.schema.validate`), its step order checked, its rows sorted, outcomes
  (`crbc_viz.io.outcomes`) and anchor keys (`crbc_viz.io.anchor_keys`) computed, assembled;
  every problem of the file listed in one `LoadError`, or skipped with ``lenient``;
- `group_traj_codes(columns)`: the group and trajectory codes of the rows in first-occurrence
  order (Arrow's dictionary encoding, a missing value one code of its own);
- `sort_rows(group_codes, traj_codes, step_idx)`: the order group → trajectory → step and the
  `Layout` (offsets) of the rows in that order;
- `assemble(steps, layout, ...)`: the `RolloutBatch` of rows already in that order (built, as
  every batch is, by `crbc_viz.data.batch_from_columns`);
- `place_steps(group_codes, traj_codes, step_idx)`: rows in any order, each step possibly
  carried by several rows (a trainer's copies) -> the unique steps in batch order and the step
  each row carries, by counting (no sort, no frame: the trainer adapters' path);
- `assemble_arrow(columns, layout, ...)`: the `RolloutBatch` of step columns held as Arrow
  arrays (`dictionary` builds a text column from codes): the pandas frame is built only if
  someone reads ``batch.steps``;
- `ranges(starts, stops)`: the concatenated ``arange(start, stop)`` of many ranges, and
  `Layout` (offsets from trajectory lengths): defined beside `RolloutBatch` in
  `crbc_viz.data`, whose `select_groups` uses them too (data sits below io), re-exported here.

Axis vocabulary (STYLE.md): ``S`` steps, ``T`` trajectories, ``G`` groups.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..data import GROUP_KEY, Layout, RolloutBatch, batch_from_columns, ranges
from ..errors import MAX_LISTED, LoadError, Problem
from .fields import BAD_COLUMN as _BAD
from .fields import LINE_COLUMN as _LINE
from .fields import REQUIRED
from .readers import RawTable

if TYPE_CHECKING:  # `sort_rows` and `layout` run without pandas (the columnar lane uses them)
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "build_batch",
    "sort_rows",
    "Layout",
    "layout",
    "assemble",
    "ranges",
    "StepPlacement",
    "place_steps",
    "dictionary",
    "assemble_arrow",
    "group_traj_codes",
]


def layout(group_codes: np.ndarray, traj_codes: np.ndarray) -> Layout:
    """The `Layout` of rows already sorted so that each trajectory's rows are contiguous and
    each group's trajectories are contiguous, groups numbered 0..G-1 in order of appearance.
    ``traj_codes`` need only differ between neighbouring trajectories (any labels)."""
    g = np.asarray(group_codes, dtype=np.int64)
    t = np.asarray(traj_codes)
    n = len(t)
    if n == 0:
        return Layout.of_lengths(np.zeros(0, np.int64), np.zeros(0, np.int64))
    new_traj = np.empty(n, dtype=bool)
    new_traj[0] = True
    np.not_equal(t[1:], t[:-1], out=new_traj[1:])
    new_traj[1:] |= g[1:] != g[:-1]
    starts = np.flatnonzero(new_traj)
    return Layout.of_lengths(np.diff(np.r_[starts, n]), g[starts])


def sort_rows(
    group_codes: np.ndarray, traj_codes: np.ndarray, step_idx: np.ndarray
) -> tuple[np.ndarray, Layout]:
    """(order, layout): the stable order group → trajectory → ``step_idx`` of the rows, and
    the `Layout` of the rows taken in that order. Groups and trajectories are ordered by their
    codes (first occurrence when they come from `row_codes`)."""
    g = np.asarray(group_codes, dtype=np.int64)
    order = np.lexsort((np.asarray(step_idx, dtype=np.int64), np.asarray(traj_codes), g))
    return order, layout(g[order], np.asarray(traj_codes)[order])


def assemble(
    steps: pd.DataFrame,
    lay: Layout,
    *,
    step_anchor_hash: np.ndarray,
    traj_success: np.ndarray,
    traj_truncated: np.ndarray,
    traj_return: np.ndarray,
    source: str = "",
    warnings: Sequence[str] = (),
    skipped: Sequence[str] = (),
    groups: pd.DataFrame | None = None,
    step_success: bool = True,
) -> RolloutBatch:
    """The `RolloutBatch` of ``steps`` (rows in `Layout` order, index reset by the caller or
    not: it is reset here). ``groups`` defaults to the `GROUP_KEY` columns of each group's
    first row; with ``step_success`` the ``success`` column becomes the trajectory's outcome
    on every one of its rows (as the loaders promise)."""
    return batch_from_columns(
        steps,
        layout=lay,
        step_anchor_hash=step_anchor_hash,
        traj_success=np.asarray(traj_success, dtype=bool),
        traj_truncated=np.asarray(traj_truncated, dtype=bool),
        traj_return=np.asarray(traj_return, dtype=np.float64),
        groups=groups,
        success_column=step_success,
        source=source,
        warnings=warnings,
        skipped=skipped,
    )


class StepPlacement(NamedTuple):
    """Where the rows' steps go (`place_steps`). With ``gap`` set, the other fields are None.

    Attributes:
        first: ``[S]`` the first row (lowest index) carrying each step, steps in batch order.
        row_step: ``[B]`` the step (index into ``first``) each row carries.
        layout: the `Layout` of the ``S`` steps.
        gap: ``(row, expected, got)``: the first trajectory (in batch order) whose steps are not
            ``0..n-1``, the row carrying its first step out of place, the step index expected
            there and the one found; None when every trajectory's steps are contiguous.
    """

    first: np.ndarray | None
    row_step: np.ndarray | None
    layout: Layout | None
    gap: tuple[int, int, int] | None


def place_steps(group_codes, traj_codes, step_idx) -> StepPlacement:
    """Rows in any order, each (trajectory, step) carried by one row or several -> the unique
    steps in batch order (group by code, trajectory by code, step by index), by counting: a
    trajectory whose last step index is ``n - 1`` takes ``n`` consecutive slots and each row
    goes to slot ``start + step``, so no sort and no per-row Python work.

    Args:
        group_codes: ``[B]`` integer group of each row (>= 0); groups are ordered by code.
        traj_codes: ``[B]`` integer trajectory of each row (>= 0), one code per trajectory of
            the batch (all rows of a code in one group); ordered by code within a group. Codes
            need not be dense: unused codes make no trajectory (and no group).
        step_idx: ``[B]`` integer step index of each row (>= 0).

    Returns:
        a `StepPlacement`; ``gap`` names the first trajectory whose distinct step indices are
        not exactly ``0..n-1`` (memory stays O(B) whatever the indices: slots are allocated
        only once the indices are known to fit).

    Raises:
        ValueError: arrays of different lengths, a negative code or step index, or a
            trajectory code whose rows lie in two groups (a caller's bug, not an input's).
    """
    g = np.asarray(group_codes, dtype=np.int64).reshape(-1)
    t = np.asarray(traj_codes, dtype=np.int64).reshape(-1)
    s = np.asarray(step_idx, dtype=np.int64).reshape(-1)
    B = len(t)
    if len(g) != B or len(s) != B:
        raise ValueError(f"place_steps: {len(g)} group codes, {B} trajectory codes, {len(s)} step indices")
    if B == 0:
        empty = np.zeros(0, np.int64)
        return StepPlacement(empty, empty, Layout.of_lengths(empty, empty), None)
    if min(int(g.min()), int(t.min()), int(s.min())) < 0:
        raise ValueError("place_steps: codes and step indices must be >= 0")
    T = int(t.max()) + 1
    traj_group = np.full(T, -1, np.int64)
    traj_group[t] = g
    if (traj_group[t] != g).any():
        raise ValueError("place_steps: a trajectory code has rows in two groups")
    last = np.full(T, -1, np.int64)
    np.maximum.at(last, t, s)
    traj_len = last + 1
    if int(traj_len.sum()) > B:  # more slots than rows: some trajectory has a gap
        return StepPlacement(None, None, None, _first_gap(g, t, s))
    used = np.flatnonzero(traj_len > 0)
    order = used[np.argsort(traj_group[used], kind="stable")]  # by group, then trajectory code
    lens = traj_len[order]
    start = np.zeros(T, np.int64)
    start[order] = np.cumsum(lens) - lens
    pos = start[t] + s
    S = int(lens.sum())
    first = np.full(S, B, np.int64)
    np.minimum.at(first, pos, np.arange(B, dtype=np.int64))
    if (first == B).any():  # an empty slot: a step index missing below the trajectory's last
        return StepPlacement(None, None, None, _first_gap(g, t, s))
    _, group_dense = np.unique(traj_group[order], return_inverse=True)  # codes kept in order
    return StepPlacement(first, pos, Layout.of_lengths(lens, group_dense.reshape(-1)), None)


def _first_gap(g: np.ndarray, t: np.ndarray, s: np.ndarray) -> tuple[int, int, int]:
    """``(row, expected, got)`` of the first trajectory (by group, then trajectory code) whose
    distinct step indices are not ``0..n-1`` (the error path of `place_steps`: one sort)."""
    order = np.lexsort((np.arange(len(t)), s, t, g))  # stable: a step's first row comes first
    ts, ss = t[order], s[order]
    new = np.r_[True, (ts[1:] != ts[:-1]) | (ss[1:] != ss[:-1])]
    rows, tu, su = order[new], ts[new], ss[new]
    traj_start = np.r_[True, tu[1:] != tu[:-1]]
    k = np.arange(len(tu))
    expected = k - np.maximum.accumulate(np.where(traj_start, k, 0))
    bad = int(np.flatnonzero(su != expected)[0])
    return int(rows[bad]), int(expected[bad]), int(su[bad])


def dictionary(codes: np.ndarray, names: Sequence[str]) -> pa.DictionaryArray:
    """A text column as an Arrow dictionary array: ``names[codes[i]]`` at row ``i``, built from
    the codes and the distinct names only (no per-row string). ``codes`` are integers in
    ``0..len(names)-1``. A name that is not valid Unicode (a lone surrogate, ``"\\udc80"``) is
    stored with those code points escaped: Arrow holds UTF-8 only, and the codes, not the
    names, tell the rows apart."""
    import pyarrow as pa

    from .._arrow import array, texts

    names = list(names)
    try:
        "".join(names).encode("utf-8")
    except UnicodeEncodeError:
        names = [v.encode("utf-8", "backslashreplace").decode("utf-8") for v in names]
    return pa.DictionaryArray.from_arrays(array(np.asarray(codes, dtype=np.int32)), texts(names))


def assemble_arrow(
    columns: Mapping[str, pa.Array],
    lay: Layout,
    *,
    group_columns: Mapping[str, pa.Array],
    step_anchor_hash: np.ndarray,
    traj_success: np.ndarray,
    traj_truncated: np.ndarray,
    traj_return: np.ndarray,
    source: str = "",
) -> RolloutBatch:
    """The `RolloutBatch` of step columns already in `Layout` order, held as Arrow arrays
    (`crbc_viz.data.ArrowRows`: the pandas frame is built on the first read of
    ``batch.steps``; text columns made by `dictionary` arrive there as categoricals).
    ``group_columns`` hold the `GROUP_KEY` columns, one row per group; a ``success`` column
    with each trajectory's outcome on every one of its steps is added, as `assemble` does."""
    import pyarrow as pa

    missing = [k for k in GROUP_KEY if k not in group_columns]
    if missing:
        raise ValueError(f"assemble_arrow: group_columns lack {', '.join(missing)}")
    return batch_from_columns(
        pa.Table.from_arrays(list(columns.values()), names=list(columns)),
        layout=lay,
        step_anchor_hash=np.asarray(step_anchor_hash, dtype=np.uint64),
        traj_success=np.asarray(traj_success, dtype=bool),
        traj_truncated=np.asarray(traj_truncated, dtype=bool),
        traj_return=np.asarray(traj_return, dtype=np.float64),
        groups=pa.Table.from_arrays(list(group_columns.values()), names=list(group_columns)),
        source=source,
    )


def build_batch(raw: RawTable, *, lenient: bool = False, success_threshold: float = 0.0) -> RolloutBatch:
    """Validate ``raw`` (`crbc_viz.io.schema.validate`) and assemble a `RolloutBatch`, on the
    Arrow table validation returns (a pandas frame is made here only where a column holds
    Python objects Arrow has no type for, or nested values: `_rows_for_batch`).

    Raises:
        LoadError: listing every problem (with ``lenient``, only when no trajectory is left).
    """
    from .anchor_keys import step_anchor_hashes
    from .outcomes import trajectory_outcomes
    from .schema import validate

    table, _, problems = validate(raw, lenient=lenient)
    if table is None or any(p.line is None for p in problems if p.field in REQUIRED or p.field is None):
        if not lenient or table is None:
            raise LoadError(problems[:MAX_LISTED], total=len(problems))
    path = raw.path
    table = _with_defaults(table, Path(path).name.split(".")[0])

    # Group and trajectory indices in first-occurrence order.
    g_codes, t_codes = group_traj_codes(table)

    where = raw.where
    # Step order within each trajectory: sorted, must be exactly 0..n-1.
    traj_bad = _step_order_problems(table, t_codes, problems, path, where)
    if lenient and raw.broken_ids:
        # Lines that did not parse but name their trajectory: drop it rather than keep it with
        # a step missing (which could look like a shorter, truncated rollout).
        broken = {k for k in raw.broken_ids if k is not None}
        pairs = zip(_cells(table["group_id"]).tolist(), _cells(table["traj_id"]).tolist())
        hit = np.fromiter(((str(g), str(t)) in broken for g, t in pairs), bool, _n(table))
        traj_bad[t_codes[hit]] = True

    skipped: list[str] = []
    lenient_note = None
    if problems:
        if not lenient:
            raise LoadError(problems[:MAX_LISTED], total=len(problems))
        skipped = [str(p) for p in problems]
        keep_rows = ~traj_bad[t_codes]
        lenient_note = _lenient_summary(
            path,
            problems,
            int((~keep_rows).sum()),
            int(traj_bad.sum()),
            sum(k is None for k in raw.broken_ids),
        )
        if not keep_rows.any():
            raise LoadError(
                problems[:MAX_LISTED]
                + [Problem(path, None, None, "no valid trajectory left after skipping bad rows (--lenient)")],
                total=len(problems) + 1,
            )
        table = _take(table, np.flatnonzero(keep_rows))
        g_codes, t_codes = group_traj_codes(table)

    # Final order: group (first occurrence), trajectory (first occurrence within the file), step.
    step_idx = _ints(table["step_idx"], 0)
    order, lay = sort_rows(g_codes, t_codes, step_idx)
    table = _take(_set(table, "step_idx", step_idx), order)

    # Outcome (docs/schema.md, "Success and truncation").
    traj_success, traj_truncated, traj_return, outcome_notes = trajectory_outcomes(
        table, lay.traj_offsets, success_threshold, path
    )

    # Anchors: precomputed key, else the hash of the canonical anchor_obs, else one per step.
    warnings: list[str] = list(raw.notes)
    if lenient_note:
        warnings.append(lenient_note)
    warnings.extend(outcome_notes)
    table, step_hash = step_anchor_hashes(table, warnings, path, where)

    steps = _rows_for_batch({k: v for k, v in table.items() if k not in (_BAD, _LINE)})
    return assemble(
        steps,
        lay,
        step_anchor_hash=step_hash,
        traj_success=traj_success,
        traj_truncated=traj_truncated,
        traj_return=traj_return,
        source=path,
        warnings=warnings,
        skipped=skipped,
    )


def _rows_for_batch(cols: dict):
    """The rows a batch keeps: an Arrow table of the columns (its frame made when
    ``batch.steps`` is first read), or, where a column holds Python values Arrow has no type for
    or nested values, the frame made now (`crbc_viz.io.arrow_rows.frame_of`: what the reader's
    values make: lists as the Python lists a JSON reader gives, or the arrays a Parquet reader
    gives)."""
    import pyarrow as pa

    from .arrow_rows import ObjectColumn, arrow_table, frame_of

    table = arrow_table(cols, _n(cols))
    if any(isinstance(t, ObjectColumn) or pa.types.is_nested(t) for t in table.schema.types):
        return frame_of(table)  # while the table, which holds the Python values, lives
    return table


def _n(cols: dict) -> int:
    return len(cols[_LINE]) if _LINE in cols else len(next(iter(cols.values())))


def _cells(col) -> np.ndarray:
    """A column's Python values (an object array, None where missing)."""
    from .coerce import values_of

    return values_of(col)


def _ints(col, fill: int) -> np.ndarray:
    """An integer column (int64, or objects with None where a row's value did not validate) as
    int64, ``fill`` where missing."""
    from .._arrow import numbers

    if isinstance(col, np.ndarray) and col.dtype.kind in "iu":
        return col.astype(np.int64, copy=False)
    if not isinstance(col, np.ndarray) and str(col.type) == "int64" and col.null_count == 0:
        return numbers(col).astype(np.int64, copy=False)
    vals = _cells(col)
    return np.fromiter((fill if v is None else int(v) for v in vals.tolist()), np.int64, len(vals))


def _set(cols: dict, name: str, values) -> dict:
    """The columns with ``name`` set to ``values`` (replaced in place, or added last)."""
    return {**cols, name: values}


def _take(cols: dict, rows: np.ndarray) -> dict:
    """The columns' rows ``rows``, in that order."""
    from .._arrow import take

    if len(rows) == _n(cols) and np.array_equal(rows, np.arange(len(rows))):
        return cols
    idx = np.asarray(rows, dtype=np.int64)
    return {k: v[idx] if isinstance(v, np.ndarray) else take(v, idx) for k, v in cols.items()}


def _with_defaults(cols: dict, run_default: str) -> dict:
    """``run_id`` (default: the file's name up to its first dot) and ``train_step`` (default 0)
    on every row, ``train_step`` as int64."""
    n = _n(cols)
    run = cols.get("run_id")
    if run is None:
        cols = _set(cols, "run_id", np.full(n, run_default, dtype=object))
    elif isinstance(run, np.ndarray) or run.null_count:
        vals = _cells(run).copy()
        vals[np.array([v is None for v in vals.tolist()], dtype=bool)] = run_default
        cols = _set(cols, "run_id", vals)
    step = cols.get("train_step")
    return _set(cols, "train_step", np.zeros(n, np.int64) if step is None else _ints(step, 0))


def group_traj_codes(cols: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """(group codes, trajectory codes) ``[S]`` of the rows, in order of first occurrence:
    ``cols`` holds the `GROUP_KEY` columns and ``traj_id`` (Arrow or numpy columns; a missing
    value is a value of its own)."""
    codes = [_codes_of(cols[c]) for c in GROUP_KEY]
    g_codes = codes[0]
    for b in codes[1:]:
        g_codes = _pair_codes(g_codes, b)
    return g_codes, _pair_codes(g_codes, _codes_of(cols["traj_id"]))


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Codes of the pairs ``(a[i], b[i])`` of two code columns, in order of first occurrence."""
    if len(b) == 0:
        return b
    return _codes_of(a * (int(b.max()) + 1) + b)


def _codes_of(col) -> np.ndarray:
    """Codes ``[S]`` of one column's values in order of first occurrence, a missing value one
    code of its own: Arrow's dictionary encoding (integers, text), or a dictionary of the
    Python values (an object array)."""
    import pyarrow as pa
    from pyarrow._compute import DictionaryEncodeOptions

    from .._arrow import array, call, numbers

    if isinstance(col, np.ndarray):
        if col.dtype.kind in "iu":
            col = array(col.astype(np.int64, copy=False))
        else:
            seen: dict = {}
            return np.fromiter((seen.setdefault(v, len(seen)) for v in col.tolist()), np.int64, len(col))
    plain = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    enc = call("dictionary_encode", plain, options=DictionaryEncodeOptions("encode"))
    return numbers(enc.indices).astype(np.int64)


def _step_order_problems(table, t_codes: np.ndarray, problems: list, path: str, where: str) -> np.ndarray:
    """Per trajectory [T], whether it is bad: a row of it did not validate, two rows carry one
    ``step_idx``, or its steps are not exactly 0..n-1 (sorted). Each duplicate, and the first
    out-of-place row of each trajectory whose rows all validated, is appended to ``problems``."""
    from .coerce import short

    ok = ~np.asarray(table[_BAD], dtype=bool)
    sidx = np.where(ok, _ints(table["step_idx"], -1), -1)
    order = np.lexsort((sidx, t_codes))
    t_sorted = t_codes[order]
    s_sorted = sidx[order]
    starts = np.r_[True, t_sorted[1:] != t_sorted[:-1]]
    pos = np.arange(len(order)) - np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
    traj_bad = np.zeros(t_codes.max() + 1, dtype=bool)
    traj_bad[np.unique(t_codes[~ok])] = True
    lines = np.asarray(table[_LINE])
    traj_ids, group_ids = table["traj_id"], table["group_id"]
    dup = np.r_[False, (t_sorted[1:] == t_sorted[:-1]) & (s_sorted[1:] == s_sorted[:-1])]
    for k in np.flatnonzero(dup & (s_sorted >= 0)):
        r = order[k]
        problems.append(
            Problem(
                path,
                int(lines[r]),
                "step_idx",
                f"duplicate step_idx {s_sorted[k]} in trajectory "
                f"{short(_cell(traj_ids, r))} of group "
                f"{short(_cell(group_ids, r))}",
                where,
            )
        )
        traj_bad[t_sorted[k]] = True
    # Contiguity is checked only on trajectories whose rows all parsed; report the first
    # out-of-place row of each.
    parsed_bad = traj_bad.copy()
    gap = (s_sorted != pos) & ~dup & ~parsed_bad[t_sorted]
    seen = set()
    for k in np.flatnonzero(gap):
        t = t_sorted[k]
        if t in seen:
            continue
        seen.add(t)
        r = order[k]
        problems.append(
            Problem(
                path,
                int(lines[r]),
                "step_idx",
                f"not contiguous from 0: expected {pos[k]}, got {s_sorted[k]} "
                f"in trajectory {short(_cell(traj_ids, r))} of group "
                f"{short(_cell(group_ids, r))}",
                where,
            )
        )
        traj_bad[t] = True
    return traj_bad


def _cell(col, r: int):
    """Row ``r``'s Python value of a column (numpy, or Arrow)."""
    return col[r] if isinstance(col, np.ndarray) else col[r].as_py()


def _kind(p: Problem) -> str:
    """A problem's kind for the lenient summary: its field plus its message with the values
    (quoted text, numbers, parentheses) taken out."""
    msg = re.sub(r"\(.*\)|'[^']*'|\"[^\"]*\"", "", p.message)
    msg = re.split(r",| got |:", msg)[0]
    msg = re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", msg).strip()
    return f"{p.field}: {msg}" if p.field else msg


def _lenient_summary(path: str, problems: list[Problem], rows: int, trajs: int, unattributed: int = 0) -> str:
    """One line for the warnings: how much --lenient skipped, and of which kinds."""
    kinds: dict[str, int] = {}
    for p in problems:
        k = _kind(p)
        kinds[k] = kinds.get(k, 0) + 1
    listed = "; ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:12])
    return (
        f"{path}: lenient: skipped {len(problems)} problem(s): dropped {rows} row(s) in "
        f"{trajs} trajectorie(s) (lines that did not parse are not counted as rows); by kind: "
        f"{listed}"
        + (
            f". {unattributed} unparseable line(s) name no trajectory: a rollout "
            f"that lost its last step there now looks truncated"
            if unattributed
            else ""
        )
    )
