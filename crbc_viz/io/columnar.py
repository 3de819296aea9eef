"""The columnar lane: a clean canonical JSONL or Parquet log to a `RolloutBatch` in Arrow and
numpy.

`crbc_viz.io.load_rollouts` tries this lane first, and so does `batch_of_import` with an
importer's rows (`crbc_viz.io.importers`: an Arrow table whose columns are all plain Arrow
ones). It takes only files it can prove clean and builds for them exactly the batch the schema
path (`crbc_viz.io.assemble.build_batch`) builds:
the same rows in the same order, the same columns and dtypes once ``batch.steps`` is read, the
same anchors, outcomes and offsets (``tests/io/test_columnar.py`` compares the two on generated
and bundled logs). For anything else it returns None and the schema path reads the file, so
every error message and every warning still comes from one place.

Clean means: pyarrow's JSON reader took the file (`crbc_viz.io.readers.jsonl_arrow.read_jsonl_arrow`: flat
fields or lists of strings, no ``NaN``/``Infinity``, within the input caps), or the Parquet
reader's checks passed (`read_parquet_arrow`; no list columns, no stored pandas index); every
required field is on every row;
ids (``group_id``, ``traj_id``, ``run_id``) and ``anchor_obs`` are strings on every row;
``step_idx`` and ``train_step`` integers in range; ``reward`` a finite number within
`MAX_ABS_REWARD`; ``done`` / ``success`` / ``is_action_valid`` booleans on every row; text
fields strings (or missing); each trajectory's steps exactly 0..n-1; no ``anchor_key``,
``state_hash``, ``episode_return`` or JSON-text signal columns; and nothing that the schema path
would warn about (a success flag that turns false, a truncated rollout logged as a success).

Nothing here imports pandas: a file scored from the command line never loads it (its import is
about half of a short run). The pandas frame is made from the Arrow table when ``batch.steps``
is first read (`crbc_viz.data.ArrowRows`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from .._arrow import array, call, numbers, take, texts
from ..data import GROUP_KEY, RolloutBatch, batch_from_columns
from . import _guards
from .anchor_rules import rule_hash64 as anchor_hash64  # the rule in force (exact by default)
from .assemble import layout
from .fields import (
    BAD_COLUMN,
    FIELD_KINDS,
    INT_LIMIT,
    LINE_COLUMN,
    MAX_ABS_REWARD,
    MAX_STEP_IDX,
    REQUIRED,
    SIGNAL_JSON,
)
from .readers import detect_format, max_line_bytes
from .readers.jsonl_arrow import read_jsonl_arrow
from .readers.parquet import read_parquet_arrow

__all__ = ["read_columnar", "batch_from_arrow", "batch_of_import"]

#: Columns that send a file to the schema path: precomputed keys (their mixing rules and notes
#: live there), JSON-text signals (decoded there), internal names.
_DECLINED = frozenset({"anchor_key", "state_hash", *SIGNAL_JSON, LINE_COLUMN, BAD_COLUMN})
_INT_RANGE = {"step_idx": (0, MAX_STEP_IDX), "train_step": (-INT_LIMIT, INT_LIMIT)}


def read_columnar(path: str, fmt: str | None = None) -> pa.Table | None:
    """The Arrow table of a JSONL log that pyarrow's reader takes (`read_jsonl_arrow`), or None
    (another format, or a file only the streaming reader may read). Raises what
    `crbc_viz.io.readers.read_table` raises for a file that cannot be read at all."""
    _guards.check_input_file(path)
    fmt = fmt or detect_format(path)
    if fmt == "parquet":
        return read_parquet_arrow(path)
    if fmt != "jsonl":
        return None
    return read_jsonl_arrow(path, max_line_bytes(), lists=True)


def has_lists(table: pa.Table) -> bool:
    """Whether ``table`` has list columns (which only the lane takes from `read_columnar`)."""
    return any(pa.types.is_list(t) for t in table.schema.types)


def batch_from_arrow(
    table: pa.Table, path: str, *, success_threshold: float = 0.0, lists: bool = True
) -> RolloutBatch | None:
    """The `RolloutBatch` of a clean canonical table (see the module's docstring), or None when
    the schema path must validate it. ``lists=False`` declines list columns (a Parquet source:
    its frame holds them as pyarrow converts them, which only the schema path reproduces)."""
    S = table.num_rows
    names = table.column_names
    if S == 0 or any(f not in names for f in REQUIRED) or "anchor_obs" not in names:
        return None
    if _DECLINED.intersection(names) or any(n.startswith("__index_level_") for n in names):
        return None
    if not all(_clean(n, table.column(n), lists) for n in names):
        return None
    table = table.combine_chunks()
    for name in ("reward", "episode_return"):  # the schema path reads integers as float64
        if name in names and pa.types.is_int64(table.schema.field(name).type):
            at = names.index(name)
            table = table.set_column(at, name, array(numbers(table.column(at)).astype(np.float64)))
    run_default = Path(path).name.split(".")[0]
    if "run_id" not in names:
        table = table.append_column("run_id", take(texts([run_default]), np.zeros(S, np.int64)))
    if "train_step" not in names:
        table = table.append_column("train_step", array(np.zeros(S, np.int64)))

    # Groups and trajectories numbered in order of first occurrence; rows sorted group ->
    # trajectory -> step, which must run exactly 0..n-1 in every trajectory.
    g = _codes(table.column("run_id"))
    for c in GROUP_KEY[1:]:
        g = _pair_codes(g, _codes(table.column(c)))
    t = _pair_codes(g, _codes(table.column("traj_id")))
    sidx = numbers(table.column("step_idx"))
    order = np.lexsort((sidx, t, g))
    t_sorted = t[order]
    rows = np.arange(S)
    starts = np.r_[True, t_sorted[1:] != t_sorted[:-1]]
    pos = rows - np.maximum.accumulate(np.where(starts, rows, 0))
    if not np.array_equal(sidx[order], pos):
        return None  # duplicate or missing steps: the schema path names them
    lay = layout(g[order], t_sorted)
    if not np.array_equal(order, rows):
        table = take(table, order)

    if _needs_note(table, lay):
        return None
    hashes = _anchor_hashes(table.column("anchor_obs"))
    if hashes is None:
        return None
    step_hash, keys = hashes
    return batch_from_columns(
        table.append_column("anchor_key", keys),
        layout=lay,
        step_anchor_hash=step_hash,
        success_threshold=success_threshold,
        source=path,
    )


def batch_of_import(raw, *, lenient: bool = False, success_threshold: float = 0.0) -> RolloutBatch:
    """The batch of an importer's rows (`crbc_viz.io.importers`): a clean Arrow table (every
    column a plain Arrow one, nothing the reader noted) through this lane, without a pandas
    frame; anything else through the schema path (`crbc_viz.io.assemble.build_batch`), which
    names every problem.

    Raises:
        LoadError: as `build_batch`.
    """
    from .arrow_rows import ObjectColumn
    from .assemble import build_batch

    table = raw.arrow
    if (
        table is not None
        and not (raw.problems or raw.nonfinite or raw.notes or raw.broken_ids or raw.from_text)
        and not any(isinstance(t, ObjectColumn) for t in table.schema.types)
    ):
        batch = batch_from_arrow(table, raw.path, success_threshold=success_threshold, lists=False)
        if batch is not None:
            return batch
    return build_batch(raw, lenient=lenient, success_threshold=success_threshold)


def _clean(name: str, col: pa.ChunkedArray, lists: bool = True) -> bool:
    """Whether column ``name`` is one the schema path would keep exactly as read (or, for
    ``reward``, as float64) without a message."""
    kind = FIELD_KINDS.get(name)
    typ = col.type
    if pa.types.is_list(typ):  # lists of strings on every row: another field's, kept as lists
        return lists and kind is None and col.null_count == 0 and pa.types.is_string(typ.value_type)
    if kind is None:
        return True  # another field: kept as read by both paths
    if kind in ("id", "anchor"):
        return _is_text(typ) and col.null_count == 0
    if kind == "text":
        return _is_text(typ)
    if kind == "bool":
        return pa.types.is_boolean(typ) and col.null_count == 0
    if col.null_count or not (pa.types.is_int64(typ) or (kind == "float" and pa.types.is_float64(typ))):
        return False
    if kind == "int":
        lo, hi = _INT_RANGE[name]
        mm = call("min_max", col)
        return lo <= mm["min"].as_py() and mm["max"].as_py() <= hi
    v = numbers(col).astype(np.float64, copy=False)
    return bool(np.isfinite(v).all() and (np.abs(v) <= MAX_ABS_REWARD).all())


def _is_text(typ) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def _codes(col) -> np.ndarray:
    """Codes ``[S]`` of a column's values, numbered in order of first occurrence."""
    enc = call("dictionary_encode", col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return numbers(enc.indices).astype(np.int64, copy=False)


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Codes of the pairs ``(a[i], b[i])`` in order of first occurrence."""
    return _codes(array(a * (int(b.max()) + 1) + b))


def _needs_note(table: pa.Table, lay) -> bool:
    """Whether the schema path would add an outcome note for this sorted clean table
    (`crbc_viz.io.outcomes.trajectory_outcomes`): a trajectory that logs ``success=true`` and
    later false, or a truncated rollout (last ``done`` false) logged as a success. Both are
    read by the one rule, `crbc_viz.outcome_rule`, that `crbc_viz.data.batch_from_columns`
    derives the outcomes with."""
    if "success" not in table.column_names:
        return False
    from ..outcome_rule import outcome_rule

    flag = numbers(table.column("success"))
    every = np.ones(len(flag), dtype=bool)
    done = (numbers(table.column("done")), every) if "done" in table.column_names else None
    got = outcome_rule(lay.traj_offsets, np.zeros(len(flag)), success=(flag, every), done=done)
    return bool(got.flips.any() or got.kept.any())


def _anchor_hashes(obs: pa.ChunkedArray):
    """(step hashes ``[S]`` uint64, anchor keys as an Arrow string array): one BLAKE2b hash
    per distinct observation string (`anchor_hash64`, as the schema path); None when one
    cannot be canonicalised or is JSON text past ``$CRBC_VIZ_MAX_DEPTH`` /
    ``$CRBC_VIZ_MAX_ITEMS`` (the schema path names its line)."""
    enc = call("dictionary_encode", obs.combine_chunks())
    uniq = enc.dictionary.to_pylist()
    depth, items = _guards.max_depth(), _guards.max_items()
    short = min(depth, items)
    for o in uniq:  # JSON text past the depth or value limits: never parsed here
        if len(o) > short and o.lstrip()[:1] in ("[", "{") and _guards.json_problem(o, depth, items):
            return None
    try:
        uh = np.array([anchor_hash64(o) for o in uniq], dtype=np.uint64)
    except (RecursionError, ValueError, TypeError, OverflowError):
        return None
    keys = take(texts([f"{x:016x}" for x in uh.tolist()]), enc.indices)
    return uh[numbers(enc.indices)], keys
