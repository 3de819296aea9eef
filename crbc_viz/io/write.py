"""Atomic writers: every output goes to a temporary name in the target folder, then is
renamed over the target, so a crash never leaves a half-written file."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pandas as pd

__all__ = ["write_frame", "atomic_path", "OUTPUT_FORMATS"]

OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
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


def write_frame(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` as Parquet (zstd), CSV or JSONL by the file's extension, atomically."""
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise ValueError(f"output file {str(path)!r}: unknown extension {suffix!r}; "
                         f"expected one of {', '.join(OUTPUT_FORMATS)}")
    with atomic_path(path) as tmp:
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False, compression="zstd")
        elif suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_json(tmp, orient="records", lines=True, force_ascii=False)
