"""No module of ``crbc_viz.io.importers`` imports pandas: the importers build their rows as Arrow
(`crbc_viz.io.arrow_rows`; ``tests/io/test_arrow_rows.py`` checks the frame made from them)."""

from __future__ import annotations

import ast

from helpers import ROOT

IMPORTERS = ROOT / "crbc_viz" / "io" / "importers"


def _pandas_imports(path) -> list[str]:
    """``line: statement`` of each import of pandas in the module at ``path`` (function-level and
    ``TYPE_CHECKING`` ones included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(n == "pandas" or n.startswith("pandas.") for n in names):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_importer_module_imports_pandas():
    modules = sorted(IMPORTERS.rglob("*.py"))
    assert len(modules) > 20  # the package is where it is: the scan reads something
    found = [hit for m in modules for hit in _pandas_imports(m)]
    assert found == []


def test_the_scan_sees_every_form_of_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import os\nimport pandas as pd\nfrom pandas import DataFrame\nimport pandas.api.types\n"
        "def f():\n    import pandas\n",
        encoding="utf-8",
    )
    assert [h.split(":")[1] for h in _pandas_imports(src)] == ["2", "3", "4", "6"]


#: The schema path's readers, validation and assembly (`crbc_viz.io.assemble.build_batch`): they
#: read and build Arrow; pandas is left to where a frame is shown (``batch.steps``).
SCHEMA_PATH = (
    "schema.py",
    "coerce.py",
    "outcomes.py",
    "anchor_keys.py",
    "readers/_json.py",
    "readers/jsonl.py",
    "readers/json_document.py",
    "readers/jsonl_arrow.py",
    "readers/csv_table.py",
)


def test_no_reader_or_validation_module_imports_pandas():
    io = ROOT / "crbc_viz" / "io"
    found = [hit for name in SCHEMA_PATH for hit in _pandas_imports(io / name)]
    assert found == []


def _pandas_owners(path) -> list[str]:
    """The functions of the module at ``path`` that import pandas."""
    owners = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) and any(a.name == "pandas" for a in node.names):
                    owners.append(fn.name)
    return sorted(owners)


def _imported_on_load(path) -> list[str]:
    """The imports of pandas that run when the module at ``path`` is imported (at its top level,
    not under ``if TYPE_CHECKING``)."""
    top = ast.parse(path.read_text(encoding="utf-8")).body
    return [
        ast.unparse(n)
        for n in top
        if isinstance(n, ast.Import | ast.ImportFrom)
        and any(a.name == "pandas" for a in n.names) | (getattr(n, "module", None) or "").startswith("pandas")
    ]


def test_assembly_imports_no_pandas():
    """`build_batch`, the store's assembly and their helpers build Arrow and numpy only."""
    path = ROOT / "crbc_viz" / "io" / "assemble.py"
    assert _imported_on_load(path) == [] and _pandas_owners(path) == []


def test_the_stores_read_side_imports_pandas_only_where_it_makes_a_frame():
    """`LogStore.load_batch` works on DuckDB's Arrow rows; pandas only in what returns a frame
    a page shows (listings, search, a trajectory's rows, text) and in the conversion a batch's
    rows make when ``batch.steps`` is first read (`StoreFrame`)."""
    store = ROOT / "crbc_viz" / "store"
    for name in ("query.py", "rows.py", "scan.py", "layout.py", "ingest.py", "identity.py"):
        assert _imported_on_load(store / name) == [], name
    assert _pandas_owners(store / "query.py") == [
        "find_trajectory",
        "groups",
        "search_steps",
        "text_for",
        "train_steps",
    ]
    assert _pandas_owners(store / "rows.py") == ["_nullable", "arrow_column"]  # and the write side's rule


def test_no_importer_reads_a_readers_rows_as_a_frame(monkeypatch):
    """Every source the tests and samples ship, read by its importer (detected), with the frame of
    a reader's rows (`RawTable.records`) refused: importers read them by column
    (`RawTable.columns`), so none asks for it."""
    from crbc_viz.errors import LoadError
    from crbc_viz.io.importers import expand_sources, read_source
    from crbc_viz.io.readers import _base

    asked = []

    def refuse(self, obj, objtype=None):
        rows = obj.__dict__[self.slot]
        if not hasattr(rows, "iloc"):
            asked.append(obj.path)
            raise AssertionError(f"a frame of {obj.path}'s rows was asked for")
        return rows

    monkeypatch.setattr(_base._Records, "__get__", refuse)
    read = set()
    for root in (ROOT / "tests" / "fixtures", ROOT / "sample_rollouts"):
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            try:
                sources = expand_sources([str(d)])
            except LoadError:
                continue
            for src in sources:
                try:
                    imp = read_source(src)
                except LoadError:
                    continue
                read.add(imp.fmt)
    assert asked == []
    assert len(read) >= 15  # nearly every importer read something
