"""How the read side reaches a store's parts: the DuckDB connection whose query errors become
a `StoreError`, and, for a store on S3, a pyarrow dataset of the part objects (DuckDB reads no
s3:// URL) whose columns are united by name as ``read_parquet(union_by_name=true)`` unites them."""

from __future__ import annotations

import threading
from pathlib import Path

from .layout import StoreError

#: The Arrow schema of each part object read (S3; a part is written once), by location.
_SCHEMAS: dict[str, object] = {}
SCHEMAS_MAX = 4096
_MEMO_LOCK = threading.Lock()


class _Connection:
    """A DuckDB connection whose query errors (a corrupt, truncated or unreadable part) become
    a one-line `StoreError` instead of a DuckDB traceback."""

    def __init__(self, con, root: Path):
        self._raw, self._root = con, root

    def execute(self, *a, **k):
        import duckdb

        try:
            return self._raw.execute(*a, **k)
        except duckdb.Error as exc:
            raise self._error(exc) from None

    def arrow(self, sql: str, params: list):
        """The rows of a query as an Arrow table (DuckDB's own, no copy through a cursor)."""
        import duckdb

        try:
            return self._raw.sql(sql, params=params).to_arrow_table()
        except duckdb.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc) -> StoreError:
        msg = " ".join(str(exc).split("\nLINE ")[0].split())[:400]  # not the SQL text
        return StoreError(
            f"{self._root}: cannot read the store's data ({type(exc).__name__}: "
            f"{msg}); a part file may be corrupt: re-ingest its source"
        )

    def __getattr__(self, name):
        return getattr(self._raw, name)


def _s3_dataset(root, rels: list[str]):
    """A pyarrow dataset of the part objects ``rels`` of the store at ``root`` (an `S3Path`),
    its schema every column of every part by name (`_united`)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    fs = root.filesystem
    locs = [(root / r).location for r in rels]
    schemas = []
    for loc in locs:
        sch = _SCHEMAS.get(loc)
        if sch is None:
            sch = pq.read_schema(loc, filesystem=fs)
            with _MEMO_LOCK:
                _SCHEMAS[loc] = sch
                while len(_SCHEMAS) > SCHEMAS_MAX:
                    _SCHEMAS.pop(next(iter(_SCHEMAS)))
        schemas.append(sch)
    return ds.dataset(locs, schema=_united(schemas), filesystem=fs, format="parquet")


def _united(schemas: list):
    """The columns of ``schemas`` by name, in order of first appearance, as DuckDB's
    ``union_by_name`` unites them: a column whose types differ between parts takes the type
    that holds both (int64 and double: double), else text."""
    import pyarrow as pa

    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError):
        pass
    types: dict[str, list] = {}
    for s in schemas:
        for f in s:
            types.setdefault(f.name, []).append(f.type)
    fields = []
    for name, ts in types.items():
        try:
            t = pa.unify_schemas([pa.schema([(name, t)]) for t in ts], promote_options="permissive")[0].type
        except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError):
            t = pa.string()
        fields.append(pa.field(name, t))
    return pa.schema(fields)
