"""Importers: each adapter is the only place that knows one trainer's field names and turns
its dumps into canonical step rows (SCHEMA.md), ready for ``build_batch``.

    canonical   the canonical schema (JSONL / JSON / Parquet / CSV)
    verl-agent  the crbc dump hook (docs/verl_agent_hook.md); its rollout_data_dir (no anchors)
    rllm        rLLM Episode JSON folders
    roll        ROLL step-wise dumps (traj_group_id, traj_id, step, state_hash, step_scores ...)
                and its agent-native dump (trajectory_data, messages)
    trl         TRL GRPOTrainer completions_<step>.parquet
    ms-swift    ms-swift GRPOTrainer completions.jsonl (one object of lists per logging step)
    verl        verl rollout_data_dir ({step}.jsonl with input / output / score)
    verifiers   verifiers / prime-rl results.jsonl (example_id, prompt, completion, reward ...)
    skyrl       SkyRL dumped_evals/global_step_<N>_evals/<data_source>.jsonl
    nemo-rl     NeMo-RL train_data_step<N>.jsonl (content, rewards, token_loss_mask ...)
    ragen       RAGEN val_rollouts_<timestamp>.jsonl (custom_id, messages, metadata)
    slime       slime debug rollout dump (.pt: rollout_id, samples), read weights-only
    areal       AReaL rollout/<version>/<task_id>.jsonl (task_id, sample_idx, prompt, completion)
    graphgpo    GraphGPO / verl-agent DataProto batch saved as .pth (uid, traj_uid, anchor_obs ...)
    fieldmap    any other log, through a field map (--map target=path, --map-file map.toml)

Each is a module that satisfies `Importer` (``NAME``, ``SIGNATURE``, ``sniff``, ``read``;
optionally ``sniff_file``, `SniffsFile`), listed once in `IMPORTERS`, in detection order:
`FORMATS` and `detect` both read it. `detect` picks one from a file's fields; `expand_sources`
turns command-line paths (files or folders) into sources (a folder walk reads the files whose
names end in one of `crbc_viz.io.readers.SUFFIXES`), each ingested as a unit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import LoadError, Problem
from .._guards import check_input_file
from ..readers import SUFFIXES
from . import (
    areal,
    art,
    canonical,
    fieldmap,
    graphgpo,
    ms_swift,
    nemo_rl,
    ragen,
    rllm,
    roll,
    skyrl,
    slime,
    tinker_cookbook,
    trl,
    verifiers,
    verl,
    verl_agent,
)
from ._common import Imported, peek_fields
from ._protocol import Importer, SniffsFile

__all__ = [
    "FORMATS",
    "IMPORTERS",
    "IMPORT_OPTIONS",
    "Imported",
    "TITLES",
    "Importer",
    "Source",
    "detect",
    "expand_sources",
    "import_source",
    "FileRead",
    "read_file",
]

#: Every importer, in detection order: the most specific signature first. A new importer is a
#: module satisfying `Importer` and one entry here.
IMPORTERS: tuple[Importer, ...] = (
    canonical,
    verl_agent,
    roll,
    rllm,
    ms_swift,
    verifiers,
    skyrl,
    nemo_rl,
    ragen,
    art,
    tinker_cookbook,
    areal,
    trl,
    verl,
    slime,
    graphgpo,
    fieldmap,  # never detected: chosen by giving a field map (--map, --map-file)
)


def _by_name(importers: tuple[Importer, ...]) -> dict[str, Importer]:
    """``NAME`` -> importer; two importers of one name raise naming both."""
    out: dict[str, Importer] = {}
    for m in importers:
        if m.NAME in out:
            raise ValueError(f"two importers are named {m.NAME!r}: {out[m.NAME].__name__} and {m.__name__}")
        out[m.NAME] = m
    return out


_BY_NAME = _by_name(IMPORTERS)
#: Format names accepted by ``--format`` (besides ``auto``), in detection order.
FORMATS = tuple(_BY_NAME)
#: Format name -> what the app calls it (each importer's ``TITLE``), in detection order.
TITLES = {m.NAME: m.TITLE for m in IMPORTERS}


@dataclass(frozen=True)
class Source:
    """One unit of ingest: a file, or a folder of rLLM episode files. ``notes``: what the
    folder walk left out (files no importer claims), shown with this source's import notes."""

    path: str
    fmt: str
    files: tuple[str, ...]
    notes: tuple[str, ...] = ()


class Unclaimed(LoadError):
    """`detect`: no importer claims the file's fields."""


def _expected() -> str:
    return "; ".join(f"{m.NAME} ({', '.join(m.SIGNATURE)})" for m in IMPORTERS)


def _claims(m: Importer, path: str, fields: set[str]) -> bool:
    """Whether importer ``m`` claims the file ``path`` whose first record has ``fields``."""
    return m.sniff(fields) or (isinstance(m, SniffsFile) and m.sniff_file(path, fields))


def detect(path: str) -> str:
    """The format of ``path`` from its first record's fields.

    Raises:
        LoadError: naming the file, the fields seen and what each format expects.
    """
    if os.path.isdir(path):
        files = rllm.episode_files(path)
        if files and rllm.sniff(peek_fields(files[0])):
            return rllm.NAME
        raise LoadError(
            [
                Problem(
                    path,
                    None,
                    None,
                    "a folder is read as rLLM episodes, but its first "
                    f"JSON file has no {', '.join(rllm.SIGNATURE)}",
                )
            ]
        )
    fields = peek_fields(path)
    for m in IMPORTERS:
        if _claims(m, path, fields):
            return m.NAME
    seen = ", ".join(sorted(fields)[:20]) or "nothing readable"
    raise Unclaimed(
        [
            Problem(
                path,
                None,
                None,
                f"cannot detect the log format: the first record has "
                f"fields [{seen}]; expected one of: {_expected()}",
            )
        ]
    )


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _claimed(path: str, fmt: str) -> str:
    """The format of ``path`` in a folder walk: the detected one, or ``fmt`` when it is named
    and its importer claims the file's fields.

    Raises:
        LoadError: no importer claims the file (as `detect`).
    """
    try:
        got = detect(path)
    except LoadError:
        m = _BY_NAME.get(fmt)
        if m is not None and (fmt == fieldmap.NAME or _claims(m, path, peek_fields(path))):
            return fmt
        raise
    return got if fmt == "auto" else fmt


def expand_sources(paths, fmt: str = "auto") -> list[Source]:
    """Files stay files; a folder becomes its log files (natural order), except rLLM episode
    folders, which become one source per folder holding episode files. In a folder, a file no
    importer claims (SkyRL's ``aggregated_results.jsonl`` beside its per-dataset files) is
    skipped, with a note naming it on the folder's first source; a folder where no file is
    claimed is an error naming each.

    Raises:
        LoadError: a path that does not exist, or whose format cannot be detected.
        ValueError: an unknown ``fmt``.
    """
    if fmt != "auto" and fmt not in _BY_NAME:
        raise ValueError(f"unknown format {fmt!r}; valid: auto, {', '.join(FORMATS)}")
    out: list[Source] = []
    problems: list[Problem] = []
    for p in paths:
        p = str(p)
        if not os.path.exists(p) and not os.path.islink(p):  # a link loop is named below
            problems.append(Problem(p, None, None, "no such file or folder"))
            continue
        if os.path.isdir(p):
            is_rllm = fmt == rllm.NAME
            if fmt == "auto":
                try:
                    is_rllm = detect(p) == rllm.NAME
                except LoadError:
                    is_rllm = False
            if is_rllm:
                by_dir: dict[str, list[str]] = {}
                for f in rllm.episode_files(p):
                    by_dir.setdefault(os.path.dirname(f), []).append(f)
                for d in sorted(by_dir, key=_natural):
                    out.append(Source(d, rllm.NAME, tuple(by_dir[d])))
                continue
            files = sorted(
                (
                    str(f)
                    for f in Path(p).rglob("*")
                    if f.is_file() and f.name.lower().endswith(SUFFIXES) and not f.name.startswith(".")
                ),
                key=_natural,
            )
            if not files:
                problems.append(Problem(p, None, None, f"folder holds no log files ({', '.join(SUFFIXES)})"))
            found, unclaimed = [], []
            for f in files:
                try:
                    found.append(Source(f, _claimed(f, fmt), (f,)))
                except LoadError as exc:
                    if isinstance(exc, Unclaimed):
                        unclaimed.append((f, exc.problems))
                    else:  # a limit passed or an unreadable file: named, never skipped
                        problems.extend(exc.problems)
            if found and unclaimed:
                names = ", ".join(os.path.relpath(f, p) for f, _ in unclaimed)
                note = f"skipped {len(unclaimed)} file(s) of {p} that no importer claims: {names}"
                found[0] = Source(found[0].path, found[0].fmt, found[0].files, (note,))
            elif unclaimed:
                problems.extend(q for _, qs in unclaimed for q in qs)
            out.extend(found)
            continue
        else:
            try:
                check_input_file(p)  # a FIFO or device is refused before the format sniff
            except LoadError as exc:
                problems.extend(exc.problems)
                continue
            paths_fmt = [(p, fmt)]
        for f, want in paths_fmt:
            try:
                got = detect(f) if want == "auto" else want
            except LoadError as exc:
                problems.extend(exc.problems)
                continue
            out.append(Source(f, got, (f,)))
    if problems:
        raise LoadError(problems)
    return out


#: Options an importer may take (``--reward-columns``, ``--success-column``, the field map of
#: ``--map`` / ``--map-file``); each importer gets the ones its ``read`` accepts.
IMPORT_OPTIONS = ("reward_columns", "success_column", "field_map")


def import_source(src: Source, **options) -> Imported:
    """Read one source with its importer (canonical names, trainer keys, notes). ``options``
    (see ``IMPORT_OPTIONS``) set to None are dropped; the others go to the importers that take
    them (TRL, ms-swift)."""
    import inspect

    read = _BY_NAME[src.fmt].read
    params = inspect.signature(read).parameters
    imp = read(src.path, **{k: v for k, v in options.items() if v is not None and k in params})
    if src.notes:
        imp.notes = (*src.notes, *imp.notes)
    return imp


@dataclass(frozen=True)
class FileRead:
    """One log file (or rLLM episodes folder) as `read_file` read it: the batch, the importer's
    name, whether it was detected from the file's fields (else chosen), the importer's notes
    and its per-file counts (`Imported.counts`) as ``(name, count)`` pairs."""

    batch: object  # RolloutBatch
    fmt: str
    detected: bool
    notes: tuple[str, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()


def takes(fmt: str) -> set[str]:
    """The import options (`IMPORT_OPTIONS`) importer ``fmt``'s ``read`` takes."""
    import inspect

    return set(IMPORT_OPTIONS) & set(inspect.signature(_BY_NAME[fmt].read).parameters)


def read_file(path, fmt: str = "auto", **options) -> FileRead:
    """Read one log file, or an rLLM episodes folder, in any format the importers read: the one
    reading the app's parse child, `crbc_viz.show`, ``crbc-viz html`` and the dashboards share.

    ``fmt="auto"`` detects the importer from the file's fields, and a file no importer claims is
    read by the canonical reader when it can be; ``options`` (`IMPORT_OPTIONS`; None = not set)
    go to an importer that takes them, and one it does not take is refused by name.

    Raises:
        LoadError: the file's problems, an unknown format, a folder of another format, or an
            option the file's importer does not take (a field map's values are named by their
            map entries).
    """
    from .. import load_rollouts
    from ..assemble import build_batch
    from .fieldmap import relabel

    path = str(path)
    if fmt not in ("auto", *FORMATS):
        raise LoadError(
            [Problem(path, None, None, f"unknown format {fmt!r}; valid: auto, {', '.join(FORMATS)}")]
        )
    detected, batch = fmt == "auto", None
    if os.path.isdir(path):
        got = detect(path) if detected else fmt
        if got != "rllm":
            why = f"a folder is read as rLLM episodes; {got} dumps are files: open one"
            raise LoadError([Problem(path, None, None, why)])
        src = Source(path, got, tuple(f for s in expand_sources([path], got) for f in s.files))
    elif detected:
        try:
            (src,) = expand_sources([path], "auto")
        except LoadError as undetected:
            try:
                batch = load_rollouts(path)
            except LoadError as unread:
                if all(p.field is not None and p.line is None for p in unread.problems):
                    raise undetected.with_traceback(None) from None  # readable, of other fields
                raise unread.with_traceback(None) from None
            src = Source(path, "canonical", (path,))  # the canonical reader reads it after all
    else:
        src = Source(path, fmt, (path,))
    unused = {k for k, v in options.items() if v is not None} - takes(src.fmt)
    if unused:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(unused))
        names = ", ".join(f for f in FORMATS if unused & takes(f))
        why = (
            f"{flags}: taken only by the {names} format(s); this one reads as {TITLES.get(src.fmt, src.fmt)}"
        )
        raise LoadError([Problem(path, None, None, why)])
    if src.fmt == "canonical":
        return FileRead(batch if batch is not None else load_rollouts(path), "canonical", detected)
    imp = import_source(src, **options)
    try:
        batch = build_batch(imp.raw)
    except LoadError as exc:  # a field map's values: named by their map entries
        raise relabel(exc, getattr(imp, "labels", None)) from None
    return FileRead(batch, src.fmt, detected, tuple(imp.notes), tuple(imp.counts.items()))
