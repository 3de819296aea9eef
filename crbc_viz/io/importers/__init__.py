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

Each is a module that satisfies `Importer` (``NAME``, ``TITLE``, ``SIGNATURE``, ``FOLDER``,
``OPTIONS``, ``sniff``, ``read``; optionally ``sniff_file``, `SniffsFile`; a ``FOLDER`` format's
``is_folder_file`` / ``folder_files``, `ReadsFolder`; ``FILE_SUFFIXES``, `OwnSuffixes`), listed
once in `IMPORTERS`, in detection order. Everything else is derived from that table
(`Registry`): `FORMATS`, `TITLES`, `FOLDER_FORMATS`, `IMPORT_OPTIONS`, the file endings of the
folder walk (`WALK_SUFFIXES`: `crbc_viz.io.readers.SUFFIXES` and the importers' own). `detect`
picks one from a file's fields (or a folder's first file of a ``FOLDER`` format);
`expand_sources` turns command-line paths (files or folders) into sources, each ingested as a
unit; `read_source` reads one source (detecting a path's format once), and is the one read that
ingest, the watcher, the app's parse child and ``share`` go through (`read_file` builds its
batch).
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
from ._protocol import Importer, OwnSuffixes, ReadsFolder, SniffsFile

__all__ = [
    "FOLDER_FORMATS",
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
    "read_source",
    "Registry",
    "WALK_SUFFIXES",
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


def _check(m: Importer) -> None:
    """Refuse (ValueError, naming the module) an importer whose members disagree: a ``FOLDER``
    format without `ReadsFolder`'s members, an option its ``read`` does not take by keyword."""
    if m.FOLDER and not isinstance(m, ReadsFolder):
        raise ValueError(f"{m.__name__}: a FOLDER importer needs is_folder_file and folder_files")
    import inspect

    params = inspect.signature(m.read).parameters
    bad = [o for o in m.OPTIONS if o not in params or params[o].kind is not params[o].KEYWORD_ONLY]
    if bad:
        raise ValueError(f"{m.__name__}: OPTIONS {bad} are not keyword-only parameters of its read")


class Registry:
    """What the importers' table (in detection order) gives: each importer by name, the
    ``FOLDER`` ones, the option names and the endings of the folder walk. Built once from
    `IMPORTERS`; a test may build one with an importer more (nothing else changes).

    Raises:
        ValueError: two importers of one name, or one whose members disagree (`_check`).
    """

    def __init__(self, importers: tuple[Importer, ...]):
        self.importers = tuple(importers)
        self.by_name = _by_name(self.importers)
        for m in self.importers:
            _check(m)
        self.folders = tuple(m for m in self.importers if m.FOLDER)
        self.options = tuple(dict.fromkeys(o for m in self.importers for o in m.OPTIONS))
        own = (s for m in self.importers if isinstance(m, OwnSuffixes) for s in m.FILE_SUFFIXES)
        self.suffixes = tuple(dict.fromkeys((*SUFFIXES, *own)))


_REG = Registry(IMPORTERS)
_BY_NAME = _REG.by_name
#: Format names accepted by ``--format`` (besides ``auto``), in detection order.
FORMATS = tuple(_BY_NAME)
#: Format name -> what the app calls it (each importer's ``TITLE``), in detection order.
TITLES = {m.NAME: m.TITLE for m in IMPORTERS}
#: The formats that read a folder as one source (``FOLDER``: rLLM episodes).
FOLDER_FORMATS = tuple(m.NAME for m in _REG.folders)
#: The file endings the folder walk reads: the table readers' and the importers' own (``.pt``).
WALK_SUFFIXES = _REG.suffixes


@dataclass(frozen=True)
class Source:
    """One unit of ingest: a file, or a folder of a ``FOLDER`` format's files (rLLM episodes).
    ``notes``: what the folder walk left out (files no importer claims), shown with this
    source's import notes."""

    path: str
    fmt: str
    files: tuple[str, ...]
    notes: tuple[str, ...] = ()


class Unclaimed(LoadError):
    """`detect`: no importer claims the file's fields."""


def _expected() -> str:
    return "; ".join(f"{m.NAME} ({', '.join(m.SIGNATURE)})" for m in _REG.importers)


def _claims(m: Importer, path: str, fields: set[str]) -> bool:
    """Whether importer ``m`` claims the file ``path`` whose first record has ``fields``."""
    return m.sniff(fields) or (isinstance(m, SniffsFile) and m.sniff_file(path, fields))


def _folder_claim(path: str, peeked: dict | None = None) -> tuple[Importer, list[str]]:
    """The ``FOLDER`` importer (in detection order) whose first file under the folder ``path``
    it claims by that file's first record, and its files there. ``peeked``: filled with the
    fields read (path -> fields), so the folder walk does not read them again.

    Raises:
        LoadError: no ``FOLDER`` importer claims the folder.
    """
    for m in _REG.folders:
        files = m.folder_files(path)
        if files:
            fields = peek_fields(files[0])
            if peeked is not None:
                peeked[os.path.normpath(files[0])] = fields
            if m.sniff(fields):
                return m, files
    titles = " or ".join(m.TITLE for m in _REG.folders) or "no format"
    has = "; ".join(f"its first {m.NAME} file has no {', '.join(m.SIGNATURE)}" for m in _REG.folders)
    raise LoadError([Problem(path, None, None, f"a folder is read as {titles}, but {has}")])


def detect(path: str, fields: set[str] | None = None) -> str:
    """The format of ``path`` from its first record's fields (``fields``: those already read),
    or of a folder from its first file of a ``FOLDER`` format.

    Raises:
        LoadError: naming the file, the fields seen and what each format expects.
    """
    if os.path.isdir(path):
        return _folder_claim(path)[0].NAME
    fields = peek_fields(path) if fields is None else fields
    for m in _REG.importers:
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


def _claimed(path: str, fmt: str, fields: set[str] | None = None) -> str:
    """The format of ``path`` in a folder walk: the detected one, or ``fmt`` when it is named
    and its importer claims the file's fields (``fields``: those already read; the file's
    first record is read once).

    Raises:
        LoadError: no importer claims the file (as `detect`).
    """
    fields = peek_fields(path) if fields is None else fields
    try:
        got = detect(path, fields)
    except LoadError:
        m = _REG.by_name.get(fmt)
        if m is not None and (fmt == fieldmap.NAME or _claims(m, path, fields)):
            return fmt
        raise
    return got if fmt == "auto" else fmt


def _folder_of(path: str, fmt: str, peeked: dict) -> tuple[Importer | None, list[str]]:
    """The ``FOLDER`` importer reading the folder ``path`` (``fmt``, or detected) and its files;
    (None, []) when the folder is walked file by file."""
    if fmt != "auto":
        m = _REG.by_name[fmt]
        return (m, m.folder_files(path)) if m.FOLDER else (None, [])
    try:
        return _folder_claim(path, peeked)
    except LoadError:
        return None, []


def _folder_sources(m: Importer, files: list[str]) -> list[Source]:
    """One source per folder holding ``files`` of ``m``'s format (natural order)."""
    by_dir: dict[str, list[str]] = {}
    for f in files:
        by_dir.setdefault(os.path.dirname(f), []).append(f)
    return [Source(d, m.NAME, tuple(by_dir[d])) for d in sorted(by_dir, key=_natural)]


def expand_sources(paths, fmt: str = "auto") -> list[Source]:
    """Files stay files; a folder becomes its log files (natural order, those ending in one of
    `WALK_SUFFIXES`), except a folder of a ``FOLDER`` format (rLLM episodes, given as ``fmt`` or
    detected), which becomes one source per folder holding its files. Each file's first record
    is read once. In a folder, a file no
    importer claims (SkyRL's ``aggregated_results.jsonl`` beside its per-dataset files) is
    skipped, with a note naming it on the folder's first source; a folder where no file is
    claimed is an error naming each.

    Raises:
        LoadError: a path that does not exist, or whose format cannot be detected.
        ValueError: an unknown ``fmt``.
    """
    if fmt != "auto" and fmt not in _REG.by_name:
        raise ValueError(f"unknown format {fmt!r}; valid: auto, {', '.join(FORMATS)}")
    out: list[Source] = []
    problems: list[Problem] = []
    for p in paths:
        if isinstance(p, Source):  # already a source (the watcher builds its own): taken as it is
            out.append(p)
            continue
        p = str(p)
        if not os.path.exists(p) and not os.path.islink(p):  # a link loop is named below
            problems.append(Problem(p, None, None, "no such file or folder"))
            continue
        if os.path.isdir(p):
            peeked: dict[str, set[str]] = {}
            folder, members = _folder_of(p, fmt, peeked)
            if folder is not None:
                out.extend(_folder_sources(folder, members))
                continue
            walk = _REG.suffixes
            files = sorted(
                (
                    str(f)
                    for f in Path(p).rglob("*")
                    if f.is_file() and f.name.lower().endswith(walk) and not f.name.startswith(".")
                ),
                key=_natural,
            )
            if not files:
                problems.append(Problem(p, None, None, f"folder holds no log files ({', '.join(walk)})"))
            found, unclaimed = [], []
            for f in files:
                try:
                    found.append(Source(f, _claimed(f, fmt, peeked.get(os.path.normpath(f))), (f,)))
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
#: ``--map`` / ``--map-file``): the importers' ``OPTIONS``; each importer gets the ones it takes.
IMPORT_OPTIONS = _REG.options


def _one_source(path: str, fmt: str = "auto") -> Source:
    """``path`` as one source: a file of ``fmt`` (``auto``: detected), or a folder of a
    ``FOLDER`` format (every file of it under the folder).

    Raises:
        LoadError: a path that does not exist, a format that cannot be detected, a folder of
            a format whose dumps are files.
    """
    if fmt != "auto" and fmt not in _REG.by_name:
        raise LoadError(
            [Problem(path, None, None, f"unknown format {fmt!r}; valid: auto, {', '.join(FORMATS)}")]
        )
    if not os.path.isdir(path):
        (src,) = expand_sources([path], fmt)
        return src
    m, files = _folder_claim(path) if fmt == "auto" else (_REG.by_name[fmt], None)
    if not m.FOLDER:
        titles = " or ".join(f.TITLE for f in _REG.folders) or "no format"
        raise LoadError(
            [Problem(path, None, None, f"a folder is read as {titles}; {fmt} dumps are files: open one")]
        )
    files = m.folder_files(path) if files is None else files
    return Source(path, m.NAME, tuple(f for s in _folder_sources(m, files) for f in s.files))


def read_source(source, fmt: str = "auto", **options) -> Imported:
    """Read one source with its importer (canonical names, trainer keys, notes): the one read
    of a source, which ingest (and the watcher through it), the app's parse child and
    ``share`` (through `read_file`) go through.

    ``source``: a `Source` (its format known: read as it is), or a path, whose format is
    detected here, once (``fmt="auto"``; else ``fmt``): a log file, or a folder of a ``FOLDER``
    format read as one source. ``options`` (see ``IMPORT_OPTIONS``) set to None are dropped;
    the others go to the importers that take them (their ``OPTIONS``: TRL, ms-swift ...).

    Raises:
        LoadError: the source's problems (or, for a path, those of `_one_source`).
    """
    src = source if isinstance(source, Source) else _one_source(str(source), fmt)
    m = _REG.by_name[src.fmt]
    imp = m.read(src.path, **{k: v for k, v in options.items() if v is not None and k in m.OPTIONS})
    if src.notes:
        imp.notes = (*src.notes, *imp.notes)
    return imp


#: `read_source` of a `Source` (its earlier name).
import_source = read_source


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
    """The import options (`IMPORT_OPTIONS`) importer ``fmt`` takes (its ``OPTIONS``)."""
    return set(_REG.by_name[fmt].OPTIONS)


def read_file(path, fmt: str = "auto", **options) -> FileRead:
    """Read one log file, or a folder of a ``FOLDER`` format (rLLM episodes), in any format the
    importers read, into a batch: the one reading the app's parse child, `crbc_viz.show`,
    ``crbc-viz html`` and the dashboards share (the source is read by `read_source`).

    ``fmt="auto"`` detects the importer from the file's fields, and a file no importer claims is
    read by the canonical reader when it can be; ``options`` (`IMPORT_OPTIONS`; None = not set)
    go to an importer that takes them, and one it does not take is refused by name.

    Raises:
        LoadError: the file's problems, an unknown format, a folder of another format, or an
            option the file's importer does not take (a field map's values are named by their
            map entries).
    """
    from .. import load_rollouts
    from ..columnar import batch_of_import
    from .fieldmap import relabel

    path = str(path)
    detected, batch = fmt == "auto", None
    if detected and not os.path.isdir(path):
        try:
            src = _one_source(path)
        except LoadError as undetected:
            try:
                batch = load_rollouts(path)
            except LoadError as unread:
                if all(p.field is not None and p.line is None for p in unread.problems):
                    raise undetected.with_traceback(None) from None  # readable, of other fields
                raise unread.with_traceback(None) from None
            src = Source(path, "canonical", (path,))  # the canonical reader reads it after all
    elif os.path.isdir(path) or fmt not in _REG.by_name:
        src = _one_source(path, fmt)
    else:
        src = Source(path, fmt, (path,))
    unused = {k for k, v in options.items() if v is not None} - takes(src.fmt)
    if unused:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(unused))
        names = ", ".join(f for f in _REG.by_name if unused & takes(f))
        why = f"{flags}: taken only by the {names} format(s); this one reads as {_REG.by_name[src.fmt].TITLE}"
        raise LoadError([Problem(path, None, None, why)])
    if src.fmt == "canonical":
        return FileRead(batch if batch is not None else load_rollouts(path), "canonical", detected)
    imp = read_source(src, **options)
    try:
        batch = batch_of_import(imp.raw)
    except LoadError as exc:  # a field map's values: named by their map entries
        raise relabel(exc, getattr(imp, "labels", None)) from None
    return FileRead(batch, src.fmt, detected, tuple(imp.notes), tuple(imp.counts.items()))
