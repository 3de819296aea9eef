"""A field map: any per-step (or per-trajectory) log read by naming where each canonical field
(SCHEMA.md) sits in its records, so that a trainer we have no importer for needs no converter.

    crbc-viz ingest LOG --map group_id=meta.task --map traj_id=episode --map step_idx=t \\
        --map anchor_obs=obs.text --map action=act --map reward=r --map success=info.won

A *path* is a dotted walk into one record (a JSON object of a JSONL line, an item of a JSON
array, a Parquet row with its struct columns): ``obs.text`` is key ``text`` of the object under
``obs``; a segment that is an integer indexes a list (``obs.frames.0``, ``-1`` the last item);
a key that itself holds dots (``info.won`` as one flat key, a CSV header) is found too. Special
sources: ``@order`` (``step_idx`` only): 0, 1, 2 ... in record order within the trajectory
(the records of a trajectory must then be in order); ``@line``: the record's line (row) number.

Nested per-trajectory records (one record holding a list of steps): ``steps=turns`` names the
list; every other path is then read inside each step, and a path that starts with ``^.``
reads the trajectory record instead (``traj_id=^.episode``, ``success=^.info.won``).

The map is the whole truth: a canonical field it does not name is absent (``done`` not mapped:
no truncation is known; ``action`` not mapped: the loader's missing-action rule applies), even
when the record has a field of that name, which is then kept as ``src_<name>``. Every other
top-level field of the record (and, nested, of the step and of its trajectory record) that no
path reads whole is kept as an extra, as the canonical reader keeps extras. A required field
(``group_id``, ``traj_id``, ``step_idx``, ``reward``) whose path is missing in a record is an
error naming the file, the record and the map entry; an optional one missing in some records
is absent there (``success`` on the last step only), and missing in every record an error (a
misspelt path). Values are then coerced exactly as a canonical file's (`build_batch`).

A map file (``--map-file map.toml``, also loaded by the app's Import options) holds the same
entries as TOML strings, at the top level or under a ``[map]`` table::

    [map]
    group_id = "meta.task"
    step_idx = "@order"
    steps = "turns"
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ...errors import LoadError, Problem
from .. import _guards
from ..fields import FIELD_KINDS, REQUIRED, SIGNAL_JSON
from ..readers import RawTable, detect_format, max_line_bytes
from ..readers._json import NonFinite
from ._common import Imported, arrow_table, held, record_columns

__all__ = [
    "NAME",
    "TITLE",
    "SIGNATURE",
    "TARGETS",
    "FieldMap",
    "parse_map",
    "load_map_file",
    "map_from_options",
    "map_from_text",
    "coerce_map",
    "relabel",
    "sniff",
    "read",
]

NAME = "fieldmap"
#: What the app calls this format.
TITLE = "any log, through a field map"
SIGNATURE = ("--map",)
FOLDER = False
OPTIONS = ("field_map",)

#: Optional per-estimator signals a map may name (SCHEMA.md) beside the canonical fields.
_SIGNALS = (
    "gold_logprob",
    "turn_evidence",
    "teacher_logprob_sum",
    "student_logprob_sum",
    "judge_score",
    "advantage",
    "num_tokens",
    "direct_inputs",
    "is_error",
    "rubric",
    *SIGNAL_JSON,
)
#: The list of steps inside a per-trajectory record.
STEPS = "steps"
#: Every target a map may name, in this order in messages.
TARGETS: tuple[str, ...] = (*FIELD_KINDS, *dict.fromkeys(s for s in _SIGNALS if s not in FIELD_KINDS), STEPS)
ORDER, LINE = "@order", "@line"
#: The prefix of a path into the trajectory record from inside a step.
TRAJ = "^."
_MAX_PATH_CHARS = 1000
_MAX_SEGMENTS = 64
_INDEX = re.compile(r"-?\d{1,9}")


def sniff(fields: set[str]) -> bool:
    """Never detected: a field map is chosen by giving one (``--map`` / ``--map-file``)."""
    return False


def _map_error(where: str, message: str) -> LoadError:
    return LoadError([Problem(where, None, None, message)])


@dataclass(frozen=True)
class FieldMap:
    """Target -> path, in the order given. ``str()`` is a stable text of it (``t=p; ...``),
    what a store's source identity records."""

    entries: tuple[tuple[str, str], ...]

    def get(self, target: str) -> str | None:
        return dict(self.entries).get(target)

    def label(self, target: str) -> str:
        return f"--map {target}={self.get(target)}"

    def __str__(self) -> str:
        return "; ".join(f"{t}={p}" for t, p in self.entries)

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)


def _check_entry(target: str, path: str, where: str) -> None:
    if target not in TARGETS:
        raise _map_error(where, f"unknown target {target[:60]!r}; valid: {', '.join(TARGETS)}")
    if not isinstance(path, str) or not path.strip():
        raise _map_error(where, f"{target}=: expected a path (e.g. {target}=info.{target})")
    if len(path) > _MAX_PATH_CHARS:
        raise _map_error(where, f"{target}=...: the path is longer than {_MAX_PATH_CHARS} characters")
    if ";" in path or not path.isprintable():
        raise _map_error(where, f"{target}={path[:60]!r}: a path holds no ';' and no control character")
    if path.startswith("@"):
        if path not in (ORDER, LINE) or (path == ORDER and target != "step_idx"):
            raise _map_error(
                where,
                f"{target}={path}: {ORDER} is for step_idx only, {LINE} for any field; nothing else starts with @",
            )
        return
    inner = path[len(TRAJ) :] if path.startswith(TRAJ) else path
    segs = inner.split(".")
    if len(segs) > _MAX_SEGMENTS or any(not s for s in segs):
        raise _map_error(
            where, f"{target}={path}: a path is keys joined by single dots (at most {_MAX_SEGMENTS})"
        )
    if target == STEPS and path.startswith(TRAJ):
        raise _map_error(where, f"steps={path}: the steps list is read from the record itself (no {TRAJ})")


def _build(pairs: list[tuple[str, str]], where: str) -> FieldMap:
    out: dict[str, str] = {}
    for target, path in pairs:
        _check_entry(target, path, where)
        out[target] = path.strip()
    fm = FieldMap(tuple(out.items()))
    nested = STEPS in out
    for t, p in out.items():
        if p.startswith(TRAJ) and not nested:
            raise _map_error(
                where, f"{t}={p}: {TRAJ} reads the trajectory record of a nested log; give steps=<list>"
            )
    missing = [t for t in REQUIRED if t not in out]
    if missing:
        raise _map_error(where, f"the map names no {', '.join(missing)} (required: {', '.join(REQUIRED)})")
    return fm


def parse_map(items, base: FieldMap | None = None) -> FieldMap:
    """A `FieldMap` from ``target=path`` items (``--map``), over the entries of ``base`` (a
    ``--map-file``; an item overrides its entry).

    Raises:
        LoadError: an item that is not target=path, an unknown target (listing the valid
            ones), a malformed path, or a required field left unmapped.
    """
    pairs = list(base.entries) if base is not None else []
    for item in items or []:
        if "=" not in item:
            raise _map_error("--map", f"{item!r}: expected target=path (e.g. reward=info.r)")
        t, p = item.split("=", 1)
        pairs.append((t.strip(), p.strip()))
    return _build(pairs, "--map")


def load_map_file(path: str) -> FieldMap:
    """The `FieldMap` of a TOML file (string entries at the top level or under ``[map]``).

    Raises:
        LoadError: naming the file: unreadable, too large, not TOML, a value that is not a
            string, an unknown target.
    """
    _guards.check_input_file(path)
    with _guards.open_input(path, 1 << 20, env="CRBC_VIZ_MAX_INPUT_MB") as fh:
        data = fh.read((1 << 20) + 1)
    if len(data) > 1 << 20:
        raise _map_error(path, "a map file is at most 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _map_error(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return _from_toml(text, path)


def _from_toml(text: str, path: str) -> FieldMap:
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _map_error(path, f"invalid TOML: {exc}") from None
    table = doc.get("map", doc) if isinstance(doc.get("map"), dict) else doc
    pairs = []
    for t, p in table.items():
        if not isinstance(p, str):
            raise _map_error(path, f"{t}: expected a string path, got {type(p).__name__}")
        pairs.append((t, p))
    return _build(pairs, path)


def map_from_options(items=None, map_file: str | None = None) -> FieldMap | None:
    """The map of ``--map`` items over ``--map-file`` (None when neither is given)."""
    if not items and not map_file:
        return None
    base = load_map_file(map_file) if map_file else None
    return parse_map(items or [], base) if items else _build(list(base.entries), map_file)


def map_from_text(text: str) -> FieldMap:
    """The map typed in the app: ``target=path`` entries, one a line (or ``;``-separated, as
    ``str(FieldMap)`` writes them), or the TOML of a map file (any line holding a quote or a
    ``[map]`` header).

    Raises:
        LoadError: as `parse_map` / `load_map_file`.
    """
    if len(text) > 1 << 20:
        raise _map_error("field map", "a field map is at most 1 MiB")
    if '"' in text or "'" in text or re.search(r"^\s*\[", text, re.M):
        return _from_toml(text, "field map")
    items = [s for s in (x.strip() for x in re.split(r"[;\n]", text)) if s and not s.startswith("#")]
    return parse_map(items)


def coerce_map(field_map) -> FieldMap:
    """A `FieldMap` from what an import option may carry: a `FieldMap`, a dict, or its text."""
    if isinstance(field_map, FieldMap):
        return field_map
    if isinstance(field_map, dict):
        return _build([(str(k), v) for k, v in field_map.items()], "--map")
    if isinstance(field_map, str):
        return map_from_text(field_map)
    raise TypeError(f"field_map: expected a FieldMap, dict or text, got {type(field_map).__name__}")


# -- reading paths ---------------------------------------------------------------------------
_MISSING = object()


def _walk(obj, segs: list[str]):
    """(value, None) at ``segs`` inside ``obj``, or (_MISSING, why)."""
    i = 0
    while i < len(segs):
        s = segs[i]
        if isinstance(obj, dict):
            if s in obj:
                obj, i = obj[s], i + 1
                continue
            for j in range(len(segs), i + 1, -1):  # a key that holds dots
                k = ".".join(segs[i:j])
                if k in obj:
                    obj, i = obj[k], j
                    break
            else:
                return _MISSING, f"no key {s!r}" + (f" under {'.'.join(segs[:i])!r}" if i else "")
            continue
        if isinstance(obj, list) and _INDEX.fullmatch(s):
            k = int(s)
            if not -len(obj) <= k < len(obj):
                return _MISSING, f"index {k} outside a list of {len(obj)}"
            obj, i = obj[k], i + 1
            continue
        where = ".".join(segs[:i]) or "the record"
        return _MISSING, f"{where!r} is {_kind(obj)}, not an object" + (
            " or list" if _INDEX.fullmatch(s) else ""
        )
    return obj, None


def _kind(v) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


@dataclass(frozen=True)
class _Path:
    target: str
    text: str
    traj: bool  # read from the trajectory record (^.)
    segs: tuple[str, ...]
    special: str | None


def _compile(fm: FieldMap) -> list[_Path]:
    out = []
    for t, p in fm.entries:
        if t == STEPS:
            continue
        special = p if p.startswith("@") else None
        traj = p.startswith(TRAJ)
        inner = p[len(TRAJ) :] if traj else p
        out.append(_Path(t, p, traj, tuple(inner.split(".")) if special is None else (), special))
    return out


def _consumed(paths: list[_Path], traj: bool) -> set[str]:
    """Top-level keys a path reads whole (not kept again as extras)."""
    return {p.segs[0] for p in paths if p.special is None and p.traj == traj and len(p.segs) == 1}


# -- the records of a file ---------------------------------------------------------------------
def _records(path: str):
    """(records, their lines, where, from_text): every record of the file as parsed
    Python values, behind the same guards as the canonical readers."""
    fmt = detect_format(path)
    if fmt == "jsonl":
        from ._records import jsonl_records

        return (*jsonl_records(path, max_line_bytes()), "line", False)
    if fmt == "json":
        from ._common import json_document

        try:
            doc = json_document(path)
        except ValueError as exc:
            if isinstance(exc, LoadError):
                raise
            raise _map_error(path, f"invalid JSON: {str(exc)[:200]}") from None
        recs = doc if isinstance(doc, list) else [doc]
        return recs, list(range(len(recs))), "item", False
    if fmt == "parquet":
        from ..readers._base import charge_frame
        from ..readers.parquet import read_parquet_arrow

        table = read_parquet_arrow(path)
        charge_frame(path, table, "row")  # the table and its row table
        budget = _guards.Budget(path, "row")
        budget.spend(5 * table.nbytes)  # and the Python objects of every cell, charged first
        return table.to_pylist(), list(range(table.num_rows)), "row", False
    from ..readers import read_table

    raw = read_table(path, "csv")
    if raw.problems:
        raise LoadError(raw.problems)
    names = list(raw.columns)
    recs = [
        {k: v for k, v in zip(names, values) if not (isinstance(v, float) and v != v)}
        for values in raw.columns.tuples()
    ]
    return recs, [int(x) for x in raw.line], "line", True


def _step_lists(fm: FieldMap, recs, lines, path: str, where: str, problems: list):
    """(trajectory record or None, step, line, position in its list) per step row."""
    steps_path = fm.get(STEPS)
    if steps_path is None:
        for rec, line in zip(recs, lines):
            if not isinstance(rec, dict):
                problems.append(Problem(path, line, None, f"expected an object, got {_kind(rec)}", where))
                continue
            yield None, rec, line, None
        return
    segs = steps_path.split(".")
    for rec, line in zip(recs, lines):
        if not isinstance(rec, dict):
            problems.append(Problem(path, line, None, f"expected an object, got {_kind(rec)}", where))
            continue
        steps, why = _walk(rec, segs)
        if steps is _MISSING or not isinstance(steps, list):
            why = why or f"{_kind(steps)}, not a list of steps"
            problems.append(
                Problem(path, line, None, f"{fm.label(STEPS)}: path {steps_path!r} {_why(why)}", where)
            )
            continue
        for j, step in enumerate(steps):
            if not isinstance(step, dict):
                problems.append(
                    Problem(
                        path,
                        line,
                        None,
                        f"{fm.label(STEPS)}: item {j} is {_kind(step)}, not a step object",
                        where,
                    )
                )
                continue
            yield rec, step, line, j


def _why(why: str) -> str:
    return "missing" if why.startswith("no key") and " under " not in why else f"missing ({why})"


def _extras(into: dict, src: dict, skip: set[str]) -> None:
    """``src``'s fields but ``skip`` into ``into``; a target's name (and a ``src_<target>``,
    which that would collide with) gains a ``src_`` prefix: only the map sets a target."""
    for k, v in src.items():
        if k in skip:
            continue
        into[f"src_{k}" if k in TARGETS or (k.startswith("src_") and k[4:] in TARGETS) else k] = v


def _rows(fm: FieldMap, recs, lines, path: str, where: str):
    """The canonical rows, their lines and the problems of mapping them."""
    paths = _compile(fm)
    mapped = {p.target for p in paths}
    problems: list[Problem] = []
    rows: list[dict] = []
    out_lines: list[int] = []
    found = dict.fromkeys(mapped, False)
    first_miss: dict[str, Problem] = {}
    skip_step, skip_traj = _consumed(paths, False), _consumed(paths, True)
    steps_key = fm.get(STEPS)
    if steps_key is not None:
        skip_traj = skip_traj | {steps_key.split(".")[0]}
    budget = _guards.Budget(path, where)
    for traj, step, line, pos in _step_lists(fm, recs, lines, path, where, problems):
        row: dict = {}
        if traj is not None:
            _extras(row, traj, skip_traj)
        _extras(row, step, skip_step)
        for p in paths:
            if p.special == LINE:
                row[p.target] = line
                found[p.target] = True
                continue
            if p.special == ORDER:
                row[p.target] = pos  # None in a flat log: numbered below
                found[p.target] = True
                continue
            v, why = _walk(traj if p.traj else step, list(p.segs))
            if v is _MISSING:
                miss = Problem(path, line, None, f"{fm.label(p.target)}: path {p.text!r} {_why(why)}", where)
                if p.target in REQUIRED:
                    problems.append(miss)
                else:
                    first_miss.setdefault(p.target, miss)
                continue
            found[p.target] = True
            row[p.target] = v
        rows.append(row)
        out_lines.append(line)
        budget.rows(len(rows), line)
        budget.fields(row, line)
        budget.problems(problems, line)
    if rows:
        for t, miss in first_miss.items():
            if not found[t]:
                problems.append(
                    Problem(
                        path,
                        None,
                        None,
                        f"{fm.label(t)}: path {fm.get(t)!r} missing in every record "
                        f"(first at {where} {miss.line})",
                    )
                )
    return rows, out_lines, problems


def _number_in_order(rows: list[dict]) -> None:
    """``step_idx=@order`` in a flat log: 0, 1, 2 ... per (group_id, traj_id) in record order."""
    seen: dict = {}
    for r in rows:
        key = (json.dumps(r.get("group_id"), default=str), json.dumps(r.get("traj_id"), default=str))
        r["step_idx"] = seen.get(key, 0)
        seen[key] = r["step_idx"] + 1


def read(path: str, *, field_map=None) -> Imported:
    """The canonical rows of ``path`` read through ``field_map`` (a `FieldMap`, a dict of
    target -> path, or ``t=p; ...`` text).

    Raises:
        LoadError: no map given; a record that is not an object; a required path missing in a
            record, an optional one in every record, a steps path that is not a list: each
            names the file, the record's line (row) and the map entry.
    """
    if field_map is None:
        raise _map_error(
            path, "the fieldmap format needs a map: give --map target=path ... or --map-file FILE"
        )
    fm = coerce_map(field_map)
    recs, lines, where, from_text = _records(path)
    rows, out_lines, problems = _rows(fm, recs, lines, path, where)
    del recs
    if problems:
        raise LoadError(problems[:50], total=len(problems))
    if fm.get("step_idx") == ORDER and fm.get(STEPS) is None:
        _number_in_order(rows)
    nonfinite = {
        (i, k): v.token for i, r in enumerate(rows) for k, v in r.items() if isinstance(v, NonFinite)
    }
    raw = RawTable(path, _table(rows), np.asarray(out_lines, dtype=np.int64), where, from_text, [], nonfinite)
    imp = Imported(raw, NAME, {})  # no source keys: a path is no column an export could write back
    imp.labels = {t: fm.label(t) for t, _ in fm.entries}
    return imp


def _table(rows: list[dict]):
    """The rows as an Arrow table (`arrow_table`), as the readers' frame holds them: an id
    column with missing values keeps its exact values (not numbers made float)."""
    from ..readers._json import ID_FIELDS

    cols = record_columns(rows)
    for c in ID_FIELDS:
        if c in cols and held(cols[c]).dtype.kind == "f":
            ids = np.empty(len(rows), dtype=object)
            ids[:] = [r.get(c) for r in rows]
            cols[c] = ids
    return arrow_table(cols, len(rows))


def relabel(exc: LoadError, labels: dict[str, str] | None) -> LoadError:
    """``exc`` with each problem on a mapped field named by its map entry (``--map reward=r``)
    instead of the canonical field; ``exc`` itself when there is nothing to rename."""
    if not labels or not any(p.field in labels for p in exc.problems):
        return exc
    fixed = [
        Problem(p.path, p.line, None, f"{labels[p.field]}: {p.message}", p.where) if p.field in labels else p
        for p in exc.problems
    ]
    out = type(exc)(fixed, total=exc.total)
    return out
