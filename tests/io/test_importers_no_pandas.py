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
