"""Shared helpers of the importers: peeking at a file's fields, stable ids, renaming."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import MAX_LISTED, LoadError, Problem
from .. import _guards
from ..readers import RawTable, detect_format, max_json_bytes, max_line_bytes
from ..readers.json_document import check_document, read_charged

__all__ = [
    "Imported",
    "COUNTS",
    "peek_fields",
    "first_json_line",
    "json_document",
    "text_id",
    "to_text",
    "run_from_dir",
    "step_from_path",
    "rename",
    "cumcount",
]


@dataclass
class Imported:
    """One source converted to canonical field names, ready for ``build_batch``.

    Attributes:
        raw: the rows under canonical names (SCHEMA.md), with the file's line of each row.
        fmt: the importer that produced it.
        source_keys: how the trainer keys a step: trainer field name -> the column of the
            canonical table that holds it (a canonical column, or an ``src_*`` column added
            at import). ``crbc-viz export`` writes them back under the trainer's names.
        notes: what the importer could not recover (e.g. no anchors), shown after ingest.
        counts: per-file counts the importer reports, by name (`COUNTS`): shown by the app's
            Data and Graph pages and by ``crbc-viz info`` beside the matching diagnostics
            (`crbc_viz.analysis.matching`); a name absent means "not reported", not 0.
    """

    raw: RawTable
    fmt: str
    source_keys: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)


#: The per-file counts an importer may report in `Imported.counts`: ``copies_dropped``, rows
#: dropped as a trainer's padding copies (exact copies of another step); ``copies_suspected``,
#: lines kept that may be padding copies (the file cannot tell them apart).
COUNTS = {
    "copies_dropped": "padding copies dropped",
    "copies_suspected": "lines that may be padding copies (kept)",
}


def first_json_line(path: str) -> dict | None:
    """The first JSON line of ``path`` as a dict (None when it is not one), guarded by the
    line, depth and item limits."""
    at, line = _guards.first_line_numbered(path, max_line_bytes())  # bounded: never a whole 10 GB line
    if line is None:
        return None
    why = _guards.json_problem(line)  # depth and values before json sees it
    if why is not None:
        what = "nested too deeply" if why.startswith("JSON nesting") else "too large"
        raise LoadError([Problem(path, at, None, f"the first record is {what} to read: {why}")])
    try:
        obj = json.loads(line.decode("utf-8", errors="replace"))
    except RecursionError:
        raise LoadError(
            [Problem(path, None, None, "invalid JSON: the first record is nested too deeply to read")]
        ) from None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def peek_fields(path: str) -> set[str]:
    """Field names of the first record of ``path`` (for a trajectory row with ``steps``, the
    union of its own fields and its first step's). Empty when nothing can be read."""
    try:
        fmt = detect_format(path)
    except LoadError:
        return set()
    keys: set[str] = set()
    try:
        if fmt == "jsonl":
            obj = first_json_line(path)
            if obj:
                keys = set(obj)
                if isinstance(obj.get("steps"), list) and obj["steps"] and isinstance(obj["steps"][0], dict):
                    keys |= set(obj["steps"][0])
        elif fmt == "json":
            doc = json_document(path)
            first = doc[0] if isinstance(doc, list) and doc else doc
            if isinstance(first, dict):
                keys = set(first)
                if (
                    isinstance(first.get("steps"), list)
                    and first["steps"]
                    and isinstance(first["steps"][0], dict)
                ):
                    keys |= set(first["steps"][0])
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            keys = set(pq.read_schema(path).names)
        elif fmt == "csv":
            head = _guards.first_line(path, max_line_bytes()) or b""
            keys = {k.strip() for k in head.decode("utf-8", errors="replace").strip().split(",")}
    except LoadError:
        raise  # a limit, a FIFO or unreadable nesting: named, not "format not detected"
    except (OSError, ValueError, UnicodeDecodeError, RecursionError, EOFError):
        return set()
    return keys


def json_document(path: str):
    """The JSON document in file ``path``, parsed by ``json`` only after its size
    (``$CRBC_VIZ_MAX_JSON_MB``, bytes after gzip), what parsing it takes
    (``$CRBC_VIZ_MAX_MEMORY_MB``, charged as it is read) and its nesting
    (``$CRBC_VIZ_MAX_DEPTH`` below the document's two own levels) passed.

    Raises:
        LoadError: a limit passed (one line naming it), or not UTF-8.
        ValueError: not JSON (`json.JSONDecodeError`).
    """
    budget = _guards.Budget(path, "item")
    with _guards.open_input(path, max_json_bytes(), env="CRBC_VIZ_MAX_JSON_MB") as fh:
        data = read_charged(fh, max_json_bytes() + 1, budget)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    check_document(data, path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(
            [Problem(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    del data
    return json.loads(text)


def text_id(value, prefix: str = "p") -> str:
    """A short deterministic id of a value (a prompt): ``prefix`` + 12 hex digits of BLAKE2b."""
    s = (
        value
        if isinstance(value, str)
        else json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    )
    return prefix + hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def to_text(value):
    """Strings stay; lists/dicts/arrays become compact JSON; missing stays None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return json.dumps(value, ensure_ascii=False, default=str)


_RUN_SKIP = {
    "completions",
    "rollout",
    "rollouts",
    "rollout_data",
    "rollout_data_dir",
    "generations",
    "dumps",
    "episodes",
    "crbc_dump",
}


def run_from_dir(path: str) -> str:
    """A run name from a trainer's output layout: the nearest parent folder that is not a
    generic dump folder (``completions``, ``rollouts``, ``step_12`` ...)."""
    for parent in Path(path).resolve().parents:
        name = parent.name
        if not name:
            break
        if name.lower() in _RUN_SKIP or re.fullmatch(
            r"(global_|train_|val_)?step[_-]?\d+(_epoch_\d+)?|\d+", name.lower()
        ):
            continue
        return name
    return Path(path).stem


def step_from_path(path: str) -> int | None:
    """The training step written in a dump's file or folder name (``12.jsonl``,
    ``completions_00012.parquet``, ``step_12/``, ``global_step_12``), else None."""
    p = Path(path)
    for name in (p.name, p.parent.name):
        stem = name.split(".")[0]
        m = re.fullmatch(r"(?:.*?(?:global_)?step[_-]?|completions_|crbc_step_)?(\d+)", stem, re.I)
        if m:
            return int(m.group(1))
    return None


def rename(df: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """Rename trainer fields to canonical ones; a canonical name already present is kept and
    the trainer's copy is kept under ``src_<name>``."""
    out = {}
    for col in df.columns:
        if col in mapping:
            continue
        out[col] = df[col]
    for src, dst in mapping.items():
        if src in df.columns:
            if dst in out and dst not in mapping:
                out[f"src_{dst}"] = out.pop(dst)
            out[dst] = df[src]
    return pd.DataFrame(out)


def cumcount(keys: np.ndarray) -> np.ndarray:
    """0, 1, 2 ... within each distinct key, in row order."""
    return (
        pd.Series(np.arange(len(keys))).groupby(pd.Series(keys, dtype=object)).cumcount().to_numpy(np.int64)
    )


def require(raw: RawTable, fields: tuple[str, ...], fmt: str, hint: str) -> None:
    """Raise naming the file when a field every row of this format must have is absent."""
    if raw.records.empty:
        return
    missing = [f for f in fields if f not in raw.records.columns]
    if missing:
        raise LoadError(
            [
                Problem(
                    raw.path, None, f, f"missing in every row; a {fmt} file has {', '.join(fields)} ({hint})"
                )
                for f in missing
            ]
        )


def _cell(v) -> str:
    if isinstance(v, float) and np.isnan(v):
        return "null"
    t = to_text(v)
    return t if isinstance(t, str) else json.dumps(t, default=str)


def drop_exact_duplicates(
    df: pd.DataFrame,
    line: np.ndarray,
    keys: tuple[str, ...],
    path: str,
    where: str = "line",
    why: str = "",
    ignore: tuple[str, ...] = (),
) -> tuple[pd.DataFrame, np.ndarray, str | None]:
    """Rows that share ``keys`` (a trajectory and its step): exact copies (every field equal)
    are dropped, keeping the first, with a counted note; copies that differ are an error naming
    both lines and the fields that differ.

    Returns:
        (rows kept, their lines, the note or None).

    Raises:
        LoadError: one problem per conflicting row.
    """
    if df.empty or not set(keys) <= set(df.columns):
        return df, line, None
    kdf = df[list(keys)].map(_cell)
    dup = kdf.duplicated(keep=False).to_numpy()
    if not dup.any():
        return df, line, None
    cols = [c for c in df.columns if c not in ignore]
    first: dict[tuple, int] = {}
    drop = np.zeros(len(df), dtype=bool)
    problems: list[Problem] = []
    for i in np.flatnonzero(dup):
        k = tuple(kdf.iloc[i])
        j = first.setdefault(k, i)
        if j == i:
            continue
        diff = [c for c in cols if _cell(df[c].iat[i]) != _cell(df[c].iat[j])]
        if diff:
            shown = ", ".join(
                f"{c}={_cell(df[c].iat[j])[:40]} vs {_cell(df[c].iat[i])[:40]}" for c in diff[:3]
            )
            here = "".join(f" ({c} {df[c].iat[j]} and {df[c].iat[i]})" for c in ignore if c in df.columns)
            problems.append(
                Problem(
                    path,
                    int(line[i]),
                    diff[0],
                    f"same {' / '.join(f'{c}={v}' for c, v in zip(keys, k))} as "
                    f"{where} {int(line[j])}{here} but different: {shown}",
                    where,
                )
            )
        else:
            drop[i] = True
    if problems:
        raise LoadError(problems[:MAX_LISTED], total=len(problems))
    n = int(drop.sum())
    note = f"dropped {n} exact duplicate row(s) (same {', '.join(keys)} and content)" + (
        f": {why}" if why else ""
    )
    keep = ~drop
    return df[keep].reset_index(drop=True), line[keep], note
