"""Atomic writers: every output goes to a temporary name in the target folder, then is
renamed over the target, so a crash never leaves a half-written file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CrbcVizError

if TYPE_CHECKING:  # pandas is imported by the writers of frames only (`write_table` needs none)
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "write_frame",
    "write_table",
    "atomic_path",
    "OUTPUT_FORMATS",
    "OutputError",
    "OutputFormatError",
    "check_output",
    "csv_safe",
]

OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    import tempfile  # not at module level: it pulls in shutil, random, bz2, lzma (~8 ms)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class OutputError(CrbcVizError, OSError):
    """An output that must not or cannot be written (it is an input, lies in a log store, its
    folder is read-only or full); the message names the path and the reason."""


class OutputFormatError(CrbcVizError, ValueError):
    """An output name whose extension is not one of `OUTPUT_FORMATS` (still a ``ValueError``)."""


def _is_store(folder: Path) -> bool:
    marker = folder / "store.json"
    try:
        return marker.is_file() and "crbc-viz-store" in marker.read_text(errors="replace")[:4096]
    except OSError:
        return False


def check_output(path: str | os.PathLike, inputs=()) -> None:
    """Refuse an output that would destroy data: one of ``inputs`` (same file after symlinks,
    or inside an input folder), a file inside a crbc-viz log store, or an existing folder.

    Raises:
        OutputError: naming the output and what it would overwrite.
    """
    out = Path(path)
    if out.is_dir():
        raise OutputError(
            f"output {str(path)!r} is a folder; give a file name ending in {', '.join(OUTPUT_FORMATS)}"
        )
    real = out.resolve()
    for folder in real.parents:
        if _is_store(folder):
            raise OutputError(
                f"output {str(path)!r} lies inside the log store {str(folder)!r}; "
                f"writing there would corrupt the store; choose an output outside it"
            )
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        same = real == src
        if not same and out.exists() and Path(inp).exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, inp)
        if same:
            raise OutputError(
                f"output {str(path)!r} is the input {str(inp)!r}; writing it would "
                f"replace the input; choose another output file"
            )
        if src.is_dir() and src in real.parents:
            raise OutputError(
                f"output {str(path)!r} lies inside the input folder {str(inp)!r}; choose an output outside it"
            )


_FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(v):
    return "'" + v if isinstance(v, str) and v.startswith(_FORMULA_LEAD) else v


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell (and column name) that a spreadsheet would run as a formula
    (leading ``=``, ``+``, ``-``, ``@``, tab or CR) prefixed with ``'`` (OWASP CSV injection);
    numbers stay numbers. Returns a copy only when something changed."""
    import pandas as pd

    cols = [
        c
        for c in df.columns
        if df[c].dtype == object
        or isinstance(df[c].dtype, pd.StringDtype)
        or isinstance(df[c].dtype, pd.CategoricalDtype)
    ]
    out = df
    for c in cols:
        col = df[c].astype(object)
        hit = col.map(lambda v: isinstance(v, str) and v.startswith(_FORMULA_LEAD))
        if hit.any():
            if out is df:
                out = df.copy()
            out[c] = col.map(_csv_cell)
    names = [_csv_cell(str(c)) if isinstance(c, str) else c for c in df.columns]
    if names != list(df.columns):
        out = (out.copy() if out is df else out).set_axis(names, axis=1)
    return out


def write_frame(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` as Parquet (zstd), CSV or JSONL by the file's extension, atomically. CSV
    cells that a spreadsheet would run as formulas are escaped (`csv_safe`).

    Raises:
        OutputError: the output is a folder or cannot be written (read-only folder, parent is
            a file, disk full ...); the previous file, if any, is kept.
    """
    suffix = _target_suffix(path)

    def write(tmp: str) -> None:
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False, compression=PARQUET_COMPRESSION)
        elif suffix == ".csv":
            # CRLF rows (RFC 4180): pandas quotes a cell holding a bare CR only then, so
            # a CR in a value cannot start a new row in a spreadsheet.
            csv_safe(df).to_csv(tmp, index=False, lineterminator="\r\n")
        else:
            df.to_json(tmp, orient="records", lines=True, force_ascii=False)

    _write_atomic(path, write)


#: Parquet outputs' compression (both writers).
PARQUET_COMPRESSION = "zstd"


def write_table(table: pa.Table, path: str | os.PathLike) -> None:
    """Write an Arrow table as Parquet (zstd), atomically, with the checks of `write_frame`
    and without pandas (``crbc-viz score -o out.parquet`` on a log the columnar lane read).
    Reading it back with pandas gives the frame `write_frame` would have written.

    Raises:
        OutputFormatError: the name does not end in ``.parquet``.
        OutputError: as `write_frame`.
    """
    suffix = _target_suffix(path)
    if suffix != ".parquet":
        raise OutputFormatError(
            f"output file {str(path)!r}: write_table writes .parquet only, got {suffix!r}"
        )
    import pyarrow.parquet as pq

    _write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression=PARQUET_COMPRESSION))


def _target_suffix(path: str | os.PathLike) -> str:
    """The output's format suffix, after refusing a name no writer takes or a path that
    cannot be a file."""
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise OutputFormatError(
            f"output file {str(path)!r}: unknown extension {suffix!r}; "
            f"expected one of {', '.join(OUTPUT_FORMATS)}"
        )
    if Path(path).is_dir():
        raise OutputError(f"output {str(path)!r} is a folder; give a file name")
    for parent in Path(path).parents:
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"cannot write {str(path)!r}: {str(parent)!r} is a file, not a folder")
    return suffix


def _write_atomic(path: str | os.PathLike, write) -> None:
    """``write(tmp)`` to a temporary name beside ``path``, renamed over it on success; an OS
    error (read-only folder, disk full ...) becomes an `OutputError` naming the path."""
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except OutputError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise OutputError(f"cannot write {str(path)!r}: {reason}") from None
