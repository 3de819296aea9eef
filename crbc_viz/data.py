"""The data model: a validated batch of rollout groups, as columns.

Axis vocabulary (STYLE.md): ``S`` steps, ``T`` trajectories, ``G`` groups. Steps are
stored group by group, trajectory by trajectory, in ``step_idx`` order; groups and
trajectories keep their first-occurrence order in the input, so ids are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .errors import BatchInvariantError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["RolloutBatch", "GROUP_KEY", "Layout", "ranges", "ArrowRows", "check_batch", "batch_from_columns"]

#: A group's identity (SCHEMA.md conventions).
GROUP_KEY = ("run_id", "train_step", "group_id")


class ArrowRows:
    """Rows held as an Arrow table until someone asks for the pandas frame: the columnar lane
    (`crbc_viz.io.columnar`) and the log store give a `RolloutBatch` its ``steps`` and
    ``groups`` this way, so scoring (which reads a few columns as arrays) never imports
    pandas; the first read of ``batch.steps`` converts the table once and keeps the frame."""

    __slots__ = ("table", "frame")

    def __init__(self, table: pa.Table, frame=None):
        #: ``frame``: how the frame is made from the table, where the rows' source converts its
        #: own way (the log store's `crbc_viz.store.rows.StoreFrame`); None: `to_pandas`'s.
        self.table, self.frame = table, frame

    def __len__(self) -> int:
        return self.table.num_rows

    def to_pandas(self) -> pd.DataFrame:
        """The frame the schema path builds: lists (``available_actions``) as Python lists in
        object columns, as `json.loads` gives them, not the numpy arrays pyarrow would (or the
        one ``frame`` makes)."""
        import pandas as pd
        import pyarrow as pa

        if self.frame is not None:
            return self.frame(self.table)
        df = self.table.to_pandas()
        for name, typ in zip(self.table.column_names, self.table.schema.types):
            if pa.types.is_list(typ):
                df[name] = pd.Series(self.table.column(name).to_pylist(), index=df.index, dtype=object)
        return df


class _FrameField:
    """A `RolloutBatch` field that holds a pandas frame or `ArrowRows` (turned into the frame
    on first read). A data descriptor, so the frozen dataclass's ``__init__`` stores through it
    and the field keeps no default."""

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.slot = name, f"_{name}_rows"

    def __get__(self, obj, objtype=None):
        if obj is None:
            raise AttributeError(self.name)  # dataclasses: no default value
        rows = obj.__dict__[self.slot]
        if isinstance(rows, ArrowRows):
            rows = obj.__dict__[self.slot] = rows.to_pandas()
        return rows

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    """Validated rollout groups. Every way of building one (``dataclasses.replace`` included)
    checks that its arrays agree (`check_batch`) and raises `BatchInvariantError` if not.

    Attributes:
        steps: one row per step ``[S]`` with the canonical columns (``run_id``,
            ``train_step``, ``group_id``, ``traj_id``, ``step_idx``, ``reward``, ``action``,
            ``anchor_key``, ``anchor_obs``, ``done``, ``success`` ...) and any extra fields.
        step_traj: trajectory index of each step ``[S]``.
        step_anchor_hash: 64-bit anchor hash of each step ``[S]`` (uint64).
        traj_offsets: ``[T + 1]`` step offsets of each trajectory.
        traj_group: group index of each trajectory ``[T]``.
        traj_success: success indicator ``[T]`` (truncation is failure unless the log says
            ``success=true``; docs/schema.md, "Success and truncation").
        traj_truncated: the last step says ``done=false`` ``[T]`` (False where not logged).
        traj_return: logged ``episode_return`` or the sum of rewards ``[T]``.
        group_traj_offsets: ``[G + 1]`` trajectory offsets of each group.
        groups: one row per group ``[G]``: ``run_id``, ``train_step``, ``group_id``.
        source: the file(s) the batch came from.
        warnings: non-fatal notes from loading (e.g. no anchors in the file).
    """

    steps: pd.DataFrame = _FrameField()  # noqa: RUF009 (a descriptor field, no default)
    step_traj: np.ndarray
    step_anchor_hash: np.ndarray
    traj_offsets: np.ndarray
    traj_group: np.ndarray
    traj_success: np.ndarray
    traj_truncated: np.ndarray
    traj_return: np.ndarray
    group_traj_offsets: np.ndarray
    groups: pd.DataFrame = _FrameField()  # noqa: RUF009 (a descriptor field, no default)
    source: str = ""
    warnings: tuple[str, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        check_batch(self)

    @property
    def num_steps(self) -> int:
        return int(self.step_traj.shape[0])

    @property
    def num_trajectories(self) -> int:
        return int(self.traj_group.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_traj_offsets.shape[0] - 1)

    @property
    def arrow_steps(self) -> pa.Table | None:
        """The step rows as the Arrow table they were loaded as, while no pandas frame has been
        asked for (None once ``steps`` was read, when the batch was built from a frame, or when
        its rows convert their own way, ``ArrowRows.frame``: the log store's, read through the
        frame)."""
        rows = self.__dict__["_steps_rows"]  # as stored by `_FrameField`: not converted here
        return rows.table if isinstance(rows, ArrowRows) and rows.frame is None else None

    def has_step_column(self, name: str) -> bool:
        """Whether the step rows have column ``name`` (without building the pandas frame)."""
        rows = self.__dict__["_steps_rows"]
        return name in (rows.table.column_names if isinstance(rows, ArrowRows) else rows.columns)

    def plain_column(self, name: str) -> pa.ChunkedArray | None:
        """Step column ``name`` as the rows' Arrow column while they are Arrow and it holds numbers,
        flags, text or nulls (the same values in any frame made of it); else None (read ``steps``)."""
        rows = self.__dict__["_steps_rows"]
        if not isinstance(rows, ArrowRows) or name not in rows.table.column_names:
            return None
        from ._arrow import plain_type

        col = rows.table.column(name)
        return col if plain_type(col.type, text_dictionary=True) and col.type.num_fields == 0 else None

    def step_column(self, name: str, dtype=None) -> np.ndarray:
        """Step column ``name`` as a numpy array ``[S]`` (without building the pandas frame
        when the rows are still Arrow). For numeric and boolean columns; text columns come back
        as object arrays."""
        from ._arrow import NUMERIC_TYPES, numbers

        col = self.plain_column(name)
        if col is None or col.null_count or str(col.type) not in NUMERIC_TYPES:
            return self.steps[name].to_numpy(dtype=dtype)  # nulls or text: the frame's rules
        out = numbers(col)
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def traj_len(self) -> np.ndarray:
        """Steps per trajectory ``[T]``."""
        return np.diff(self.traj_offsets)

    @property
    def step_group(self) -> np.ndarray:
        """Group index of each step ``[S]``."""
        return self.traj_group[self.step_traj]

    @property
    def step_pos(self) -> np.ndarray:
        """0-based position of each step within its trajectory ``[S]``."""
        return np.arange(self.num_steps) - np.repeat(self.traj_offsets[:-1], self.traj_len)

    @property
    def trajectories(self) -> pd.DataFrame:
        """One row per trajectory ``[T]``: ids, length, success, truncation, return."""
        import pandas as pd

        first = self.steps.iloc[self.traj_offsets[:-1]]
        return pd.DataFrame(
            {
                **{c: first[c].to_numpy() for c in ("run_id", "train_step", "group_id", "traj_id")},
                "group_index": self.traj_group,
                "num_steps": self.traj_len,
                "success": self.traj_success,
                "truncated": self.traj_truncated,
                "episode_return": self.traj_return,
            }
        )

    def group_label(self, g: int) -> str:
        """Group ``g``'s label (`group_labels`)."""
        return self.group_labels()[int(g)]

    def group_labels(self) -> list[str]:
        """Every group's label ``run_id/train_step/group_id``, unique within the batch and
        computed once (vectorised: cheap for 200k groups). Ids may contain ``/``, so two groups
        can spell the same label (run ``a/0`` step 1 group ``x`` and run ``a`` step 0 group
        ``1/x``); the second and later of such groups get `` #2``, `` #3`` ... appended, so
        every group stays reachable by its label."""
        cached = self.__dict__.get("_labels")
        if cached is not None:
            return cached
        g = self.groups
        base = (
            (
                g["run_id"].astype(str) + "/" + g["train_step"].astype(str) + "/" + g["group_id"].astype(str)
            ).tolist()
            if len(g)
            else []
        )
        labels = base
        if len(set(base)) != len(base):
            used, labels = set(base), []
            seen: set[str] = set()
            for lab in base:
                if lab in seen:
                    k = 2
                    while f"{lab} #{k}" in used:
                        k += 1
                    lab = f"{lab} #{k}"
                    used.add(lab)
                seen.add(lab)
                labels.append(lab)
        object.__setattr__(self, "_labels", labels)
        return labels

    def select_groups(self, group_indices) -> RolloutBatch:
        """A new batch with only the given groups (in the given order; a group given twice
        appears twice). Vectorised: the rows are gathered by `ranges`, the offsets rebuilt by
        `Layout.of_lengths`, the batch built by `batch_from_columns`."""
        g = np.asarray(group_indices, dtype=np.int64).reshape(-1)
        gto = self.group_traj_offsets
        trajs = ranges(gto[g], gto[g + 1])
        rows = ranges(self.traj_offsets[trajs], self.traj_offsets[trajs + 1])
        lay = Layout.of_lengths(
            self.traj_len[trajs], np.repeat(np.arange(len(g), dtype=np.int64), gto[g + 1] - gto[g]), len(g)
        )
        return batch_from_columns(
            self.steps.iloc[rows],
            layout=lay,
            step_anchor_hash=self.step_anchor_hash[rows],
            traj_success=self.traj_success[trajs],
            traj_truncated=self.traj_truncated[trajs],
            traj_return=self.traj_return[trajs],
            groups=self.groups.iloc[g],
            success_column=False,
            source=self.source,
            warnings=self.warnings,
            skipped=self.skipped,
        )


#: The array fields of a `RolloutBatch`: the dtype kinds each may have (numpy ``dtype.kind``:
#: ``i``/``u`` integers, ``b`` bool, ``f`` float) and what it has one value per.
_ARRAYS = {
    "step_traj": ("iu", "step"),
    "step_anchor_hash": ("u", "step"),
    "traj_offsets": ("iu", None),
    "traj_group": ("iu", "trajectory"),
    "traj_success": ("b", "trajectory"),
    "traj_truncated": ("b", "trajectory"),
    "traj_return": ("f", "trajectory"),
    "group_traj_offsets": ("iu", None),
}


def _fail(b, name: str, what: str):
    raise BatchInvariantError(name, what, b.source)


def _offsets(b, name: str, arr: np.ndarray, end: int, of: str) -> None:
    """``arr`` runs from 0 to ``end`` and never decreases."""
    if len(arr) == 0:
        _fail(b, name, f"expected offsets from 0 to {end} (the number of {of}), got none")
    drop = np.flatnonzero(arr[1:] < arr[:-1])
    if arr[0] != 0 or arr[-1] != end or len(drop):
        what = (
            f"decreases at index {int(drop[0]) + 1} ({int(arr[drop[0]])} -> {int(arr[drop[0] + 1])})"
            if len(drop)
            else f"starts at {int(arr[0])}"
            if arr[0] != 0
            else f"ends at {int(arr[-1])}"
        )
        _fail(b, name, f"expected non-decreasing offsets from 0 to {end} (the number of {of}), {what}")


def _owners(b, name: str, arr: np.ndarray, offsets: np.ndarray, owner: str) -> None:
    """``arr[i]`` is the ``owner`` whose ``offsets`` range holds ``i`` (in range, in order)."""
    want = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    if not np.array_equal(arr, want):
        i = int(np.flatnonzero(arr != want)[0])
        _fail(b, name, f"index {i} is {int(arr[i])}, but the offsets put it in {owner} {int(want[i])}")


def check_batch(b: RolloutBatch) -> None:
    """That ``b``'s arrays agree: every array field a 1-D numpy array of its kind
    (``step_anchor_hash`` uint64, ``traj_success``/``traj_truncated`` bool, ``traj_return``
    float, the rest integers); ``traj_offsets`` ``[T + 1]`` and ``group_traj_offsets``
    ``[G + 1]`` non-decreasing from 0 to the number of steps and of trajectories; one value per
    step / trajectory / group in every per-step / per-trajectory / per-group field; ``step_traj``
    and ``traj_group`` the trajectory / group whose offsets hold each index (so in range and in
    storage order). The counts are the ``steps`` rows (S), ``traj_group`` (T) and the ``groups``
    rows (G). Vectorised, O(S + T): `RolloutBatch` runs it whenever one is built,
    `dataclasses.replace` included.

    Raises:
        BatchInvariantError: naming the field and what is wrong with it.
    """
    arrays = {}
    for name, (kinds, _) in _ARRAYS.items():
        arr = b.__dict__[name]
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype.kind not in kinds:
            got = f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray) else type(arr).__name__
            _fail(b, name, f"expected a 1-D numpy array of dtype kind {kinds!r}, got {got}")
        arrays[name] = arr
    if arrays["step_anchor_hash"].dtype != np.uint64:
        _fail(b, "step_anchor_hash", f"expected uint64, got {arrays['step_anchor_hash'].dtype}")
    S, T, G = len(b.__dict__["_steps_rows"]), len(arrays["traj_group"]), len(b.__dict__["_groups_rows"])
    for name, end, of, n, per in (
        ("traj_offsets", S, "steps", T, "trajectories in traj_group"),
        ("group_traj_offsets", T, "trajectories", G, "rows of groups"),
    ):
        _offsets(b, name, arrays[name], end, of)
        if len(arrays[name]) != n + 1:
            _fail(b, name, f"expected {n + 1} offsets ({n} {per}, then the end), got {len(arrays[name])}")
    counts = {"step": S, "trajectory": T}
    for name, (_, per) in _ARRAYS.items():
        if per is not None and len(arrays[name]) != counts[per]:
            _fail(b, name, f"expected one value per {per} ({counts[per]}), got {len(arrays[name])}")
    _owners(b, "step_traj", arrays["step_traj"], arrays["traj_offsets"], "trajectory")
    _owners(b, "traj_group", arrays["traj_group"], arrays["group_traj_offsets"], "group")


def ranges(starts, stops) -> np.ndarray:
    """``concatenate([arange(a, b) for a, b in zip(starts, stops)])``, vectorised."""
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lens = np.asarray(stops, dtype=np.int64).reshape(-1) - starts
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    step = np.ones(total, dtype=np.int64)
    step[0] = starts[0]
    # At each range's first position, jump from the previous range's last value to its start.
    step[np.cumsum(lens)[:-1]] = starts[1:] - (starts[:-1] + lens[:-1] - 1)
    return np.cumsum(step)


@dataclass(frozen=True)
class Layout:
    """The offsets of step rows stored group by group, trajectory by trajectory (the
    `RolloutBatch` order). Built by `Layout.of_lengths`, or from sorted rows by
    `crbc_viz.io.assemble.sort_rows` / `crbc_viz.io.assemble.layout`.

    Attributes:
        step_traj: trajectory of each row ``[S]``, 0..T-1 in row order.
        traj_offsets: ``[T + 1]`` row offsets of each trajectory.
        traj_group: group of each trajectory ``[T]`` (int64, non-decreasing).
        group_traj_offsets: ``[G + 1]`` trajectory offsets of each group.
    """

    step_traj: np.ndarray
    traj_offsets: np.ndarray
    traj_group: np.ndarray
    group_traj_offsets: np.ndarray

    @classmethod
    def of_lengths(cls, traj_len, traj_group, num_groups: int | None = None) -> Layout:
        """From the length ``[T]`` and group ``[T]`` of each trajectory, in storage order."""
        traj_len = np.asarray(traj_len, dtype=np.int64).reshape(-1)
        traj_group = np.asarray(traj_group, dtype=np.int64).reshape(-1)
        traj_offsets = np.zeros(len(traj_len) + 1, dtype=np.int64)
        np.cumsum(traj_len, out=traj_offsets[1:])
        counts = (
            np.bincount(traj_group, minlength=num_groups or 0)
            if len(traj_group)
            else np.zeros(num_groups or 0, np.int64)
        )
        group_traj_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=group_traj_offsets[1:])
        return cls(
            np.repeat(np.arange(len(traj_len), dtype=np.int64), traj_len),
            traj_offsets,
            traj_group,
            group_traj_offsets,
        )

    @property
    def traj_len(self) -> np.ndarray:
        return np.diff(self.traj_offsets)

    @property
    def step_pos(self) -> np.ndarray:
        """0-based position of each row within its trajectory ``[S]``."""
        return np.arange(len(self.step_traj), dtype=np.int64) - self.traj_offsets[self.step_traj]

    @property
    def group_first(self) -> np.ndarray:
        """The first row of each group ``[G]``."""
        return self.traj_offsets[self.group_traj_offsets[:-1]]


def batch_from_columns(
    steps,
    *,
    step_anchor_hash: np.ndarray,
    layout: Layout | None = None,
    traj_success: np.ndarray | None = None,
    traj_truncated: np.ndarray | None = None,
    traj_return: np.ndarray | None = None,
    groups=None,
    success_threshold: float = 0.0,
    success_column: bool = True,
    source: str = "",
    warnings: tuple[str, ...] | list[str] = (),
    skipped: tuple[str, ...] | list[str] = (),
) -> RolloutBatch:
    """The `RolloutBatch` of step rows in storage order: the one place a batch is built (every
    loader, the store, the trainer adapters, `RolloutBatch.select_groups`, the generator, a
    batch sent back by a worker process). Each array the caller does not give is derived here
    from the rows' columns, one way for every path.

    Args:
        steps: the step rows, group by group, trajectory by trajectory, in ``step_idx`` order:
            an Arrow table (or `ArrowRows`: the pandas frame is built on the first read of
            ``batch.steps``) or a pandas frame (its index reset).
        step_anchor_hash: ``[S]`` uint64 anchor hash of each step.
        layout: the trajectory and group boundaries. None derives them from the rows: a new
            group wherever a `GROUP_KEY` column (those present; ``group_id`` required) changes,
            a new trajectory wherever the group or ``traj_id`` changes; each group's and each
            trajectory's rows must be contiguous (`BatchInvariantError` naming ``group_id`` /
            ``traj_id`` and the row that starts one again).
        traj_success, traj_truncated, traj_return: ``[T]`` outcomes, or None to derive them
            from the rows (docs/schema.md, "Success and truncation", on rows that need no
            note): truncated where the last step's ``done`` is false (never without ``done``);
            the return is the last step's ``episode_return``, else the sum of ``reward``;
            success is the last step's ``success``, else return > ``success_threshold``, and
            a truncated trajectory is a failure unless it logs ``success`` = true: the one
            rule of every path, `crbc_viz.outcome_rule`.
        groups: one row per group (Arrow table, `ArrowRows` or frame); None takes the
            `GROUP_KEY` columns of each group's first row.
        success_column: write each trajectory's success on every one of its steps (the
            ``success`` column, as the loaders promise).
        source, warnings, skipped: as `RolloutBatch`.

    Raises:
        BatchInvariantError: rows not contiguous by trajectory or group (derived layout); a
            ``step_idx`` column (integers) that does not run 0..n-1 in each trajectory; a column
            an outcome is derived from that is missing or has nulls; any `check_batch` failure.
    """
    rows = _Columns(steps, source)
    lay = layout if layout is not None else _derive_layout(rows)
    if traj_success is None or traj_truncated is None or traj_return is None:
        derived = _derive_outcomes(rows, lay, success_threshold)
        traj_truncated = derived.truncated if traj_truncated is None else traj_truncated
        traj_return = derived.ret if traj_return is None else traj_return
        traj_success = derived.success(traj_truncated) if traj_success is None else traj_success
    if success_column:
        rows.set_success(np.repeat(traj_success, lay.traj_len))
    if groups is None:
        groups = rows.group_rows(lay.group_first)
    batch = RolloutBatch(
        steps=rows.stored(),
        step_traj=lay.step_traj,
        step_anchor_hash=step_anchor_hash,
        traj_offsets=lay.traj_offsets,
        traj_group=lay.traj_group,
        traj_success=traj_success,
        traj_truncated=traj_truncated,
        traj_return=traj_return,
        group_traj_offsets=lay.group_traj_offsets,
        groups=_rows_of(groups),
        source=source,
        warnings=tuple(warnings),
        skipped=tuple(skipped),
    )
    _check_step_idx(rows, batch)
    return batch


def _rows_of(rows):
    """Rows as a batch holds them: `ArrowRows` for an Arrow table, a frame with its index reset."""
    if isinstance(rows, ArrowRows):
        return rows
    if type(rows).__module__.startswith("pyarrow"):
        return ArrowRows(rows)
    return rows.reset_index(drop=True)


class _Columns:
    """The step rows of `batch_from_columns`: an Arrow table or a pandas frame, read column by
    column as numpy (no pandas import for an Arrow table)."""

    def __init__(self, steps, source: str):
        self.frame = steps.frame if isinstance(steps, ArrowRows) else None
        steps = steps.table if isinstance(steps, ArrowRows) else steps
        self.arrow = type(steps).__module__.startswith("pyarrow")
        self.rows = steps if self.arrow else steps.reset_index(drop=True)
        self.source = source

    def __len__(self) -> int:
        return self.rows.num_rows if self.arrow else len(self.rows)

    def _column(self, name: str):
        """The one column called ``name``, or None (absent, or the name is not unique)."""
        if self.arrow:
            at = self.rows.schema.get_all_field_indices(name)
            return self.rows.column(at[0]) if len(at) == 1 else None
        if name not in self.rows.columns or not self.rows.columns.is_unique:
            return None
        return self.rows[name]

    def has(self, name: str) -> bool:
        return self._column(name) is not None

    def numbers(self, name: str, kinds: str = "iub") -> np.ndarray | None:
        """Column ``name`` as numpy where it is numeric or boolean (of a dtype kind in ``kinds``)
        with no missing value, else None."""
        col = self._column(name)
        if col is None:
            return None
        if self.arrow:
            from ._arrow import NUMERIC_TYPES, numbers

            if col.null_count or str(col.type) not in NUMERIC_TYPES:
                return None
            out = numbers(col)
        else:
            if not isinstance(col.dtype, np.dtype) or col.dtype.kind not in "iubf":
                return None
            out = col.to_numpy()
        return out if out.dtype.kind in kinds else None

    def codes(self, name: str) -> np.ndarray:
        """``[S]`` integer codes of column ``name``: equal values, equal codes."""
        col = self._column(name)
        if col is None:
            raise BatchInvariantError(
                name, "the rows have no such column (one), and no layout was given", self.source
            )
        if self.arrow:
            import pyarrow as pa

            from ._arrow import call, cast, numbers

            col = col.combine_chunks()
            missing = col.null_count
            if not missing:
                if str(col.type) in ("int64", "int32", "uint64"):
                    return numbers(col)
                if pa.types.is_dictionary(col.type):
                    col = cast(col, col.type.value_type)
                codes = numbers(call("dictionary_encode", col).indices)
        else:
            import pandas as pd

            missing = int(col.isna().sum())
            if not missing:
                if isinstance(col.dtype, pd.CategoricalDtype):
                    return col.cat.codes.to_numpy()
                codes = pd.factorize(col.to_numpy())[0]
        if missing:
            raise BatchInvariantError(name, f"{missing} row(s) have no value", self.source)
        return codes.astype(np.int64, copy=False)

    def value(self, name: str, row: int) -> str:
        v = self.rows.column(name)[row].as_py() if self.arrow else self.rows[name].iat[row]
        text = repr(v)
        return text if len(text) <= 80 else text[:77] + "..."

    def set_success(self, success: np.ndarray) -> None:
        if not self.arrow:
            self.rows["success"] = success
            return
        from ._arrow import array

        names = self.rows.column_names
        if "success" in names:
            self.rows = self.rows.set_column(names.index("success"), "success", array(success))
        else:
            self.rows = self.rows.append_column("success", array(success))

    def group_rows(self, first: np.ndarray):
        """The `GROUP_KEY` columns of the rows ``first``."""
        for name in GROUP_KEY:
            if not self.has(name):
                raise BatchInvariantError(
                    name, "the rows have no such column (one), and no groups table was given", self.source
                )
        if self.arrow:
            from ._arrow import take

            return ArrowRows(take(self.rows.select(list(GROUP_KEY)), first), self.frame)
        return self.rows.iloc[first][list(GROUP_KEY)]

    def stored(self):
        return ArrowRows(self.rows, self.frame) if self.arrow else self.rows


def _derive_layout(rows: _Columns) -> Layout:
    """The `Layout` of rows stored group by group, trajectory by trajectory (see
    `batch_from_columns`), checking that no group and no trajectory is split."""
    S = len(rows)
    keys = [rows.codes(k) for k in GROUP_KEY if k == "group_id" or rows.has(k)]
    traj = rows.codes("traj_id")
    if S == 0:
        return Layout.of_lengths(np.zeros(0, np.int64), np.zeros(0, np.int64))
    new_group = np.zeros(S, dtype=bool)
    new_group[0] = True
    for c in keys:
        new_group[1:] |= c[1:] != c[:-1]
    new_traj = new_group.copy()
    new_traj[1:] |= traj[1:] != traj[:-1]
    group_starts, traj_starts = np.flatnonzero(new_group), np.flatnonzero(new_traj)
    _contiguous(rows, "group_id", [c[group_starts] for c in keys], group_starts, "group")
    traj_group = np.cumsum(new_group)[traj_starts] - 1
    _contiguous(rows, "traj_id", [traj_group, traj[traj_starts]], traj_starts, "trajectory")
    return Layout.of_lengths(np.diff(np.r_[traj_starts, S]), traj_group, len(group_starts))


def _contiguous(rows: _Columns, name: str, keys: list, starts: np.ndarray, what: str) -> None:
    """That the runs of rows starting at ``starts`` have distinct ``keys`` (code arrays, one
    value per run): a key seen twice is a group or trajectory whose rows are split."""
    code = np.zeros(len(starts), np.int64)
    for k in keys:
        _, k = np.unique(k, return_inverse=True)
        _, code = np.unique(code * (int(k.max()) + 1) + k.reshape(-1), return_inverse=True)
    _, first = np.unique(code, return_index=True)
    if len(first) == len(starts):
        return
    again = np.ones(len(starts), dtype=bool)
    again[first] = False
    row = int(starts[np.flatnonzero(again)[0]])
    raise BatchInvariantError(
        name,
        f"the rows of each {what} must be contiguous: row {row} starts {what} "
        f"{rows.value(name, row)} again after rows of another",
        rows.source,
    )


def _derive_outcomes(rows: _Columns, lay: Layout, threshold: float):
    """The `crbc_viz.outcome_rule.Outcomes` of the rows' ``done``, ``episode_return`` /
    ``reward`` and ``success`` columns (see `batch_from_columns`): each logged on every row."""
    from .outcome_rule import outcome_rule

    lens = lay.traj_len
    if (lens == 0).any():
        t = int(np.flatnonzero(lens == 0)[0])
        raise BatchInvariantError("traj_offsets", f"trajectory {t} has no steps: no outcome", rows.source)
    logged = {}
    for name, kinds, what in (
        ("episode_return", "iuf", "a number"),
        ("success", "b", "true/false"),
        ("done", "b", "true/false"),
    ):
        if rows.has(name):
            values = rows.numbers(name, kinds)
            if values is None:
                raise BatchInvariantError(
                    name, f"expected {what} on every row to derive the outcomes", rows.source
                )
            logged[name] = (values, np.ones(len(values), dtype=bool))
    reward = rows.numbers("reward", "iuf")
    if reward is None:
        if "episode_return" not in logged:
            why = "a number on every row to derive returns (no episode_return column)"
            raise BatchInvariantError("reward", f"expected {why}", rows.source)
        reward = np.zeros(len(rows))
    return outcome_rule(
        lay.traj_offsets, reward.astype(np.float64, copy=False), threshold=threshold, **logged
    )


def _check_step_idx(rows: _Columns, batch: RolloutBatch) -> None:
    """That an integer ``step_idx`` column runs 0..n-1 in each trajectory, in storage order."""
    sidx = rows.numbers("step_idx", "iu")
    if sidx is None:
        return
    pos = batch.step_pos
    bad = np.flatnonzero(sidx != pos)
    if len(bad):
        r = int(bad[0])
        raise BatchInvariantError(
            "step_idx",
            f"row {r} has step_idx {int(sidx[r])}, expected {int(pos[r])} (each trajectory's "
            f"steps run 0..n-1 in storage order)",
            batch.source,
        )
