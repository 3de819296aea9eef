"""What the parse child of `crbc_viz.ui.sandbox` sends back to the server, as data only.

The child writes into a folder the server made for it:

- ``outcome.json`` (written last, by rename): what happened. ``{"kind": "ok", "batch": …}``
  with the batch's text fields, how it was read (`crbc_viz.ui.sandbox.ReadAs`) and how its
  rows are laid out; ``{"kind": "error", "class": …, "message": …, "problems": …, "total": …}``
  for an error of `ERRORS` (by class name: the server looks the class up in that table);
  ``memory``, ``failed`` (a message and a traceback for the server's log) or ``changed`` (the
  file was not the one checked);
- with a batch, three Arrow IPC (Feather v2) files: ``steps.arrow`` and ``groups.arrow`` (the
  step and group rows: an Arrow table as it is, or a pandas frame's columns: plain dtypes as
  Arrow columns, object columns as one JSON text per cell, `encode_cell`) and ``arrays.arrow``
  (the per-step, per-trajectory and per-group arrays, one list cell each, dtypes kept).

The server reads these as data: JSON and Arrow IPC, no pickle, nothing that names code to run.
Each file is opened without following links, must be a regular file, and all of them together
may not exceed the child's memory limit; Arrow tables are validated in full, every JSON value is
checked for its type, and the rows are checked against the arrays' lengths. Anything else is a
`_BadOutcome` (one line, for the server to refuse the file with).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import json
import os
import stat
from pathlib import Path

import numpy as np

from ..data import ArrowRows, Layout, RolloutBatch, batch_from_columns
from ..errors import BatchInvariantError, LoadError, ParseAbortedError, Problem, StoreError

__all__ = [
    "ERRORS",
    "READ_AS_KEY",
    "write_outcome",
    "read_outcome",
    "error_outcome",
    "encode_cell",
    "decode_cell",
]

OUTCOME, STEPS, GROUPS, ARRAYS = "outcome.json", "steps.arrow", "groups.arrow", "arrays.arrow"
_TAG = "$"
_ARRAY_KINDS = "biufcmMSU"  # fixed-width numpy dtypes: bytes in, the same values out
_BATCH_ARRAYS = tuple(
    f.name
    for f in dataclasses.fields(RolloutBatch)
    if f.name not in ("steps", "groups", "source", "warnings", "skipped")
)
#: Where a batch read from a file keeps how it was read (`crbc_viz.ui.sandbox.read_as`).
READ_AS_KEY = "_crbc_read_as"
#: What a batch's ``__dict__`` may hold besides its fields and `READ_AS_KEY`: the row slots,
#: and the group labels' cache (rebuilt on demand).
_ROW_SLOTS, _CACHES = ("_steps_rows", "_groups_rows"), ("_labels",)


class _BadOutcome(Exception):
    """The child's result is not what a child of this server writes (the message: why, one line)."""


class _Unsendable(Exception):
    """A value of the batch that this format cannot carry (the child reports it as a failure)."""


def _error_classes() -> dict[str, type]:
    from ..io.importers import Unclaimed

    return {c.__name__: c for c in (LoadError, ParseAbortedError, Unclaimed, StoreError)}


#: The errors that come back as themselves (by class name); any other is a failure's message.
ERRORS = tuple(_error_classes())


# ---------------------------------------------------------------- one cell of an object column


def encode_cell(v):
    """A cell's value as JSON-ready data: JSON's own types as they are, any other supported type
    as ``{"$": tag, …}`` (a dict with a ``"$"`` key, or with keys other than strings, too).

    Raises:
        _Unsendable: a type outside the list (naming it).
    """
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if t is list:
        return [encode_cell(x) for x in v]
    if t is dict:
        if _TAG not in v and all(type(k) is str for k in v):
            return {k: encode_cell(x) for k, x in v.items()}
        return {_TAG: "dict", "v": [[encode_cell(k), encode_cell(x)] for k, x in v.items()]}
    if t is tuple:
        return {_TAG: "tuple", "v": [encode_cell(x) for x in v]}
    if t is bytes:
        return {_TAG: "bytes", "v": base64.b64encode(v).decode("ascii")}
    if t is np.ndarray:
        return _encode_ndarray(v)
    if isinstance(v, np.generic) and _plain_dtype(v.dtype):
        return {_TAG: "scalar", "dtype": v.dtype.str, "v": base64.b64encode(v.tobytes()).decode("ascii")}
    return _encode_other(v, t)


def _encode_ndarray(v: np.ndarray):
    if _plain_dtype(v.dtype):
        raw = base64.b64encode(np.ascontiguousarray(v).tobytes()).decode("ascii")
        return {_TAG: "ndarray", "dtype": v.dtype.str, "shape": list(v.shape), "v": raw}
    if v.dtype == object:
        return {
            _TAG: "ndarray",
            "dtype": "|O",
            "shape": list(v.shape),
            "v": [encode_cell(x) for x in v.ravel()],
        }
    raise _Unsendable(f"an array of dtype {v.dtype}")


def _encode_other(v, t):
    import pandas as pd

    if t is decimal.Decimal:
        return {_TAG: "decimal", "v": str(v)}
    if t in (datetime.date, datetime.datetime, datetime.time) and getattr(v, "tzinfo", None) is None:
        return {_TAG: t.__name__, "v": v.isoformat()}
    if t is datetime.timedelta:
        return {_TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}
    if t is pd.Timestamp and v.tzinfo is None:
        return {_TAG: "Timestamp", "v": int(v.value), "unit": v.unit}
    if v is pd.NA:
        return {_TAG: "NA"}
    if v is pd.NaT:
        return {_TAG: "NaT"}
    raise _Unsendable(f"a value of type {t.__module__}.{t.__qualname__}")


def _plain_dtype(dt: np.dtype) -> bool:
    return dt.kind in _ARRAY_KINDS and dt.fields is None and dt.subdtype is None and not dt.hasobject


def decode_cell(x):
    """The value `encode_cell` encoded as ``x`` (parsed JSON).

    Raises:
        _BadOutcome: a tag or a field that `encode_cell` does not write.
    """
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        return [decode_cell(y) for y in x]
    if t is not dict:
        raise _BadOutcome(f"a cell holds a {t.__name__}")
    if _TAG not in x:
        return {k: decode_cell(y) for k, y in x.items()}
    tag, v = x[_TAG], x.get("v")
    if tag == "dict":
        return {decode_cell(k): decode_cell(y) for k, y in (_pair(p) for p in _list(v))}
    if tag == "tuple":
        return tuple(decode_cell(y) for y in _list(v))
    if tag == "bytes":
        return _b64(v)
    if tag == "ndarray":
        return _decode_ndarray(x)
    if tag == "scalar":
        dt = _dtype(x.get("dtype"))
        raw = _b64(v)
        if len(raw) != dt.itemsize:
            raise _BadOutcome("a scalar cell's bytes do not match its dtype")
        return np.frombuffer(raw, dtype=dt)[0]
    return _decode_other(tag, x, v)


def _decode_ndarray(x: dict) -> np.ndarray:
    shape = x.get("shape")
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape) or len(shape) > 32:
        raise _BadOutcome("an array cell's shape is not a list of sizes")
    size = int(np.prod(shape, dtype=object))
    if x.get("dtype") == "|O":
        items = [decode_cell(y) for y in _list(x.get("v"))]
        if len(items) != size:
            raise _BadOutcome("an array cell's values do not match its shape")
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            out[i] = item
        return out.reshape(shape)
    dt = _dtype(x.get("dtype"))
    raw = _b64(x.get("v"))
    if len(raw) != size * dt.itemsize:
        raise _BadOutcome("an array cell's bytes do not match its shape")
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


def _decode_other(tag, x: dict, v):
    import pandas as pd

    try:
        if tag == "decimal" and type(v) is str:
            return decimal.Decimal(v)
        if tag in ("date", "datetime", "time") and type(v) is str:
            return getattr(datetime, tag).fromisoformat(v)
        if tag == "timedelta" and type(v) is list and len(v) == 3 and all(type(n) is int for n in v):
            return datetime.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
        if tag == "Timestamp" and type(v) is int and x.get("unit") in ("s", "ms", "us", "ns"):
            return pd.Timestamp(v, unit="ns").as_unit(x["unit"])
    except (ValueError, OverflowError, ArithmeticError) as exc:
        raise _BadOutcome(f"a {str(tag)[:20]} cell cannot be read ({type(exc).__name__})") from None
    if tag == "NA":
        return pd.NA
    if tag == "NaT":
        return pd.NaT
    raise _BadOutcome(f"a cell is tagged {str(tag)[:40]!r}, not a type this server sends")


def _list(v) -> list:
    if type(v) is not list:
        raise _BadOutcome("a tagged cell's values are not a list")
    return v


def _pair(p) -> list:
    if type(p) is not list or len(p) != 2:
        raise _BadOutcome("a dict cell's item is not a [key, value] pair")
    return p


def _b64(v) -> bytes:
    if type(v) is not str:
        raise _BadOutcome("a cell's bytes are not base64 text")
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except ValueError:
        raise _BadOutcome("a cell's bytes are not base64 text") from None


def _dtype(s) -> np.dtype:
    try:
        dt = np.dtype(s) if type(s) is str and len(s) <= 32 else None
    except (TypeError, ValueError, SyntaxError):
        dt = None
    if dt is None or not _plain_dtype(dt):
        raise _BadOutcome(f"dtype {str(s)[:40]!r} is not one this server sends")
    return dt


def _dumps(v) -> str:
    # ASCII: a lone surrogate (an escape in the input's JSON) survives as an escape.
    return json.dumps(encode_cell(v), ensure_ascii=True, separators=(",", ":"))


def _loads(text: str):
    try:
        return decode_cell(json.loads(text))
    except (ValueError, RecursionError) as exc:
        raise _BadOutcome(f"a cell is not the JSON this server writes ({type(exc).__name__})") from None


# ---------------------------------------------------------------- rows (steps, groups)


def _encode_rows(rows) -> tuple[dict, object]:
    """(layout, Arrow table) of a batch's steps or groups."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(rows, ArrowRows) and rows.frame is None and _plain_arrow(rows.table):
        return {"lane": "arrow"}, rows.table
    df = rows.to_pandas() if isinstance(rows, ArrowRows) else rows
    idx = df.index
    if not (isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1):
        raise _Unsendable("rows indexed other than 0..n-1")
    cols, arrays, plain = [], {}, {}
    for i in range(df.shape[1]):
        s = df.iloc[:, i]
        cells = s.dtype == object
        cols.append({"name": encode_cell(df.columns[i]), "cells": bool(cells), "dtype": str(s.dtype)})
        if cells:
            arrays[f"c{i}"] = pa.array([_dumps(v) for v in s.to_numpy()], type=pa.large_string())
        else:
            plain[f"c{i}"] = s
    layout = {"lane": "frame", "rows": len(df), "columns": cols, "columns_dtype": str(df.columns.dtype)}
    if not plain:
        return layout, pa.table(arrays) if arrays else pa.table({})
    # plain dtypes through pandas' own conversion: its schema metadata restores each dtype
    table = pa.Table.from_pandas(pd.DataFrame(plain, index=idx), preserve_index=False)
    for name, arr in arrays.items():
        table = table.append_column(name, arr)
    return layout, table.select([f"c{i}" for i in range(len(cols))])


def _decode_rows(layout, table):
    import pandas as pd

    if type(layout) is not dict or layout.get("lane") not in ("arrow", "frame"):
        raise _BadOutcome("rows of an unknown layout")
    _check_types(table)
    if layout["lane"] == "arrow":
        if not _plain_arrow(table):
            raise _BadOutcome("an Arrow table of rows carries metadata or types the readers do not make")
        return ArrowRows(table)
    cols, n = layout.get("columns"), layout.get("rows")
    if type(cols) is not list or type(n) is not int or n < 0 or (cols and table.num_rows != n):
        raise _BadOutcome("the rows do not match their layout")
    if table.column_names != [f"c{i}" for i in range(len(cols))]:
        raise _BadOutcome("the row columns do not match their layout")
    plain = [f"c{i}" for i, c in enumerate(cols) if type(c) is dict and c.get("cells") is False]
    frame = table.select(plain).to_pandas() if plain else None
    data, names = {}, []
    for i, c in enumerate(cols):
        if type(c) is not dict or type(c.get("dtype")) is not str or type(c.get("cells")) is not bool:
            raise _BadOutcome("a row column's layout is malformed")
        names.append(decode_cell(c.get("name")))
        data[i] = _cell_column(table.column(i), n) if c["cells"] else frame[f"c{i}"]
        if str(data[i].dtype) != c["dtype"]:
            raise _BadOutcome(f"a row column reads as {data[i].dtype}, not {c['dtype'][:40]}")
    df = pd.DataFrame(data, index=pd.RangeIndex(n)) if data else pd.DataFrame(index=pd.RangeIndex(n))
    df.columns = _column_index(names, layout.get("columns_dtype"))
    return df


def _cell_column(col, n: int):
    import pandas as pd
    import pyarrow as pa

    if col.type != pa.large_string() or col.null_count:
        raise _BadOutcome("an object column is not JSON text")
    out = np.empty(n, dtype=object)
    for i, text in enumerate(col.to_pylist()):
        out[i] = _loads(text)
    return pd.Series(out, dtype=object, copy=False)


def _column_index(names: list, dtype):
    import pandas as pd

    if dtype == "str" and not all(type(n) is str for n in names):
        raise _BadOutcome("the column names do not match their layout")
    idx = pd.Index(names, dtype=dtype) if dtype in ("object", "str") else pd.Index(names)
    if str(idx.dtype) != dtype:
        raise _BadOutcome("the column names do not match their layout")
    return idx


def _plain_arrow(table) -> bool:
    """Whether ``table`` is sent as Arrow rows: no metadata, and only the types the columnar
    readers make (numbers, booleans, text, nulls, lists of those), which pandas converts
    (any other table is sent as its pandas frame)."""
    import pyarrow as pa

    t = pa.types

    def plain(typ) -> bool:
        if t.is_list(typ) or t.is_large_list(typ):
            return plain(typ.value_type)
        return (
            t.is_integer(typ)
            or t.is_floating(typ)
            or t.is_boolean(typ)
            or t.is_null(typ)
            or (t.is_string(typ) or t.is_large_string(typ))
        )

    return not table.schema.metadata and all(plain(f.type) for f in table.schema)


def _check_types(table) -> None:
    """Refuse extension types (named by the file, resolved by this process) anywhere."""
    import pyarrow as pa

    def walk(t) -> None:
        if isinstance(t, pa.BaseExtensionType):
            raise _BadOutcome(f"an Arrow column of extension type {str(t)[:60]}")
        for i in range(t.num_fields):
            walk(t.field(i).type)
        if pa.types.is_dictionary(t):
            walk(t.value_type)

    for f in table.schema:
        walk(f.type)


# ---------------------------------------------------------------- the batch


def _encode_batch(batch) -> tuple[dict, dict]:
    """(JSON of the batch, Arrow tables by file name)."""
    import pyarrow as pa

    extra = set(batch.__dict__) - set(_ROW_SLOTS) - {f.name for f in dataclasses.fields(batch)}
    extra -= {READ_AS_KEY, *_CACHES}
    if extra:
        raise _Unsendable(f"a batch attribute {sorted(extra)[0]!r}")
    steps, steps_table = _encode_rows(batch.__dict__["_steps_rows"])
    groups, groups_table = _encode_rows(batch.__dict__["_groups_rows"])
    arrays, dtypes = [], {}
    for name in _BATCH_ARRAYS:
        a = getattr(batch, name)
        if type(a) is not np.ndarray or a.ndim != 1 or a.dtype.kind not in "biuf":
            raise _Unsendable(f"the batch's {name}")
        dtypes[name] = a.dtype.str
        arrays.append(pa.LargeListArray.from_arrays(pa.array([0, len(a)], pa.int64()), pa.array(a)))
    how = batch.__dict__.get(READ_AS_KEY)
    meta = {
        "source": batch.source,
        "warnings": list(batch.warnings),
        "skipped": list(batch.skipped),
        "steps": steps,
        "groups": groups,
        "arrays": dtypes,
        "read_as": None
        if how is None
        else {
            "fmt": how.fmt,
            "detected": how.detected,
            "notes": list(how.notes),
            "counts": [[name, int(n)] for name, n in how.counts],
        },
    }
    tables = {STEPS: steps_table, GROUPS: groups_table, ARRAYS: pa.table(arrays, names=list(_BATCH_ARRAYS))}
    return meta, tables


def _decode_batch(meta, tables: dict) -> tuple:
    """(batch, how it was read: ``(format, detected, notes, counts)`` or None)."""
    if type(meta) is not dict:
        raise _BadOutcome("the batch is not a JSON object")
    text = {"source": _text(meta.get("source"))}
    for name in ("warnings", "skipped"):
        text[name] = tuple(_texts(meta.get(name)))
    arrays = _decode_arrays(meta.get("arrays"), tables[ARRAYS])
    try:
        layout = Layout(
            *(arrays.pop(k) for k in ("step_traj", "traj_offsets", "traj_group", "group_traj_offsets"))
        )
        batch = batch_from_columns(
            _decode_rows(meta.get("steps"), tables[STEPS]),
            layout=layout,
            groups=_decode_rows(meta.get("groups"), tables[GROUPS]),
            success_column=False,
            **arrays,
            **text,
        )
    except BatchInvariantError as e:  # the field and counts only, not the child's source text
        raise _BadOutcome(
            f"the batch's rows and arrays disagree in length or order ({e.field}: {e.what})"
        ) from None
    how = meta.get("read_as")
    if how is None:
        return batch, None
    if type(how) is not dict or type(how.get("detected")) is not bool:
        raise _BadOutcome("how the file was read is malformed")
    return batch, (_text(how.get("fmt")), how["detected"], tuple(_texts(how.get("notes"))), _counts(how))


def _counts(how: dict) -> tuple[tuple[str, int], ...]:
    """The importer's per-file counts: ``[[name, count], ...]`` of text and non-negative ints."""
    pairs = how.get("counts", [])
    if type(pairs) is not list or len(pairs) > 100:
        raise _BadOutcome("the importer's counts are malformed")
    out = []
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2 or type(pair[1]) is not int or pair[1] < 0:
            raise _BadOutcome("the importer's counts are malformed")
        out.append((_text(pair[0]), pair[1]))
    return tuple(out)


def _decode_arrays(dtypes, table) -> dict:
    import pyarrow as pa

    if (
        type(dtypes) is not dict
        or set(dtypes) != set(_BATCH_ARRAYS)
        or table.column_names != list(_BATCH_ARRAYS)
    ):
        raise _BadOutcome("the batch's arrays do not match their list")
    if table.num_rows != 1:
        raise _BadOutcome("the batch's arrays are not one row")
    out = {}
    for name in _BATCH_ARRAYS:
        dt = _dtype(dtypes[name])
        col = table.column(name).combine_chunks()
        if not pa.types.is_large_list(col.type) or col.null_count:
            raise _BadOutcome(f"the batch's {name} is not a list")
        values = col.flatten()
        if dt.kind not in "biuf" or values.type != pa.from_numpy_dtype(dt) or values.null_count:
            raise _BadOutcome(f"the batch's {name} is not of dtype {dt}")
        out[name] = np.array(values.to_numpy(zero_copy_only=False), dtype=dt)
    return out


def _text(v) -> str:
    if type(v) is not str:
        raise _BadOutcome("a text field is not text")
    return v


def _texts(v) -> list[str]:
    if type(v) is not list:
        raise _BadOutcome("a list of texts is not a list")
    return [_text(x) for x in v]


# ---------------------------------------------------------------- the folder


def write_outcome(folder: Path, outcome: dict, batch=None) -> None:
    """Write ``outcome`` (and ``batch``, for kind ``ok``) into ``folder``; ``outcome.json`` last.

    Raises:
        _Unsendable: a batch value this format cannot carry; MemoryError.
    """
    import pyarrow as pa

    if batch is not None:
        meta, tables = _encode_batch(batch)
        outcome = {**outcome, "batch": meta}
        for name, table in tables.items():
            with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
    tmp = folder / (OUTCOME + ".part")
    tmp.write_text(json.dumps(outcome, ensure_ascii=True), encoding="ascii")
    os.replace(tmp, folder / OUTCOME)


def read_outcome(folder: Path, limit: int) -> tuple:
    """The outcome in ``folder``: ``("ok", batch, (format, detected, notes) or None)``,
    ``("error", exception)``, ``("memory",)``, ``("failed", message, traceback)`` or
    ``("changed",)``. At most ``limit`` bytes are read.

    Raises:
        _BadOutcome: no outcome, or not one this module writes (one line: why).
    """
    try:
        return _read_outcome(folder, limit)
    except _BadOutcome:
        raise
    except Exception as exc:  # any other failure to rebuild it (pandas, pyarrow): still data only
        raise _BadOutcome(f"the batch cannot be rebuilt from it ({type(exc).__name__})") from None


def _read_outcome(folder: Path, limit: int) -> tuple:
    budget = [limit]
    out = _json(_read_bytes(folder / OUTCOME, budget))
    if type(out) is not dict:
        raise _BadOutcome(f"{OUTCOME} is not a JSON object")
    kind = out.get("kind")
    if kind == "ok":
        tables = {name: _arrow(name, _read_bytes(folder / name, budget)) for name in (STEPS, GROUPS, ARRAYS)}
        return ("ok", *_decode_batch(out.get("batch"), tables))
    if kind == "error":
        return ("error", _decode_error(out))
    if kind in ("memory", "changed"):
        return (kind,)
    if kind == "failed":
        return ("failed", _text(out.get("message")), _text(out.get("trace")))
    raise _BadOutcome(f"{OUTCOME} says kind {str(kind)[:40]!r}")


def error_outcome(e: BaseException) -> dict | None:
    """The outcome of an error of `ERRORS` (None for any other)."""
    if _error_classes().get(type(e).__name__) is not type(e):
        return None
    out = {"kind": "error", "class": type(e).__name__, "message": str(e)}
    if isinstance(e, LoadError):
        out["problems"] = [[p.path, p.line, p.field, p.message, p.where] for p in e.problems]
        out["total"] = e.total
    return out


def _decode_error(out: dict) -> Exception:
    cls = _error_classes().get(out.get("class")) if type(out.get("class")) is str else None
    if cls is None:
        raise _BadOutcome(f"an error of class {str(out.get('class'))[:60]!r}, not one this server sends")
    if not issubclass(cls, LoadError):
        return cls(_text(out.get("message")))
    problems, total = out.get("problems"), out.get("total")
    if type(problems) is not list or type(total) is not int or total < len(problems):
        raise _BadOutcome("an error's problems are malformed")
    return cls([_problem(p) for p in problems], total)


def _problem(p) -> Problem:
    if type(p) is not list or len(p) != 5:
        raise _BadOutcome("a problem is not [path, line, field, message, where]")
    path, line, field, message, where = p
    if line is not None and type(line) is not int or field is not None and type(field) is not str:
        raise _BadOutcome("a problem's line or field is malformed")
    return Problem(_text(path), line, field, _text(message), _text(where))


def _read_bytes(path: Path, budget: list[int]) -> bytes:
    """The bytes of ``path``: a regular file (not a link, not a pipe), within the budget left."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _BadOutcome(f"no {path.name} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _BadOutcome(f"{path.name} is not a regular file")
        if st.st_size > budget[0]:
            raise _BadOutcome(f"{path.name} is larger than the reader's memory limit")
        data = fh.read(budget[0] + 1)
    if len(data) > budget[0]:
        raise _BadOutcome(f"{path.name} is larger than the reader's memory limit")
    budget[0] -= len(data)
    return data


def _json(data: bytes):
    try:
        return json.loads(data.decode("ascii"))
    except (ValueError, RecursionError) as exc:
        raise _BadOutcome(f"{OUTCOME} is not the JSON this server writes ({type(exc).__name__})") from None


def _arrow(name: str, data: bytes):
    import pyarrow as pa

    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        table.validate(full=True)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise _BadOutcome(f"{name} is not a valid Arrow file ({type(exc).__name__})") from None
    return table
