"""Small enough to read: in the package, the app and its pages, no function takes more than
``MAX_POSITIONAL`` positional parameters (numba takes named tuples of arrays; the ingest its
options object) or runs over ``MAX_LINES`` lines, and the engine's raw-array entry point takes its
defaults from `CRBCParams` instead of repeating them."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from helpers import ROOT

MAX_POSITIONAL = 10
MAX_LINES = 150
ENGINE = "crbc_viz/backends/numba/crbc.py"
MODULES = tuple(
    sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "crbc_viz").rglob("*.py"), ROOT / "app.py"])
)


def oversized(source: str, where: str) -> list[str]:
    """``where:line name: …`` for each function of ``source`` over either limit."""
    out = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [a.arg for a in node.args.posonlyargs + node.args.args]
            positional = len(args) - (args[:1] in (["self"], ["cls"]))
            lines = node.end_lineno - node.lineno + 1
            if positional > MAX_POSITIONAL or lines > MAX_LINES:
                out.append(f"{where}:{node.lineno} {node.name}: {positional} positional, {lines} lines")
    return out


def test_oversized_finds_long_signatures_and_bodies():
    eleven = "def f(" + ", ".join(f"a{i}" for i in range(11)) + "):\n    pass\n"
    ten_and_self = "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(10)) + "):\n        pass\n"
    long_body = "def h():\n" + "    x = 1\n" * 150
    assert oversized(eleven + ten_and_self + long_body, "m.py") == [
        "m.py:1 f: 11 positional, 2 lines",
        "m.py:6 h: 0 positional, 151 lines",
    ]


def test_no_oversized_functions():
    assert ENGINE in MODULES and "crbc_viz/app/app_pages/graph.py" in MODULES and len(MODULES) > 100
    found = [s for m in MODULES for s in oversized((ROOT / m).read_text(), m)]
    assert not found, "split these:\n" + "\n".join(found)


def test_engine_defaults_come_from_the_params_dataclass():
    from crbc_viz.backends.numba.crbc import crbc_step_credit
    from crbc_viz.estimators.crbc import CRBCParams

    sig = inspect.signature(crbc_step_credit).parameters
    fields = dataclasses.fields(CRBCParams)
    assert {f.name: sig[f.name].default for f in fields} == {f.name: f.default for f in fields}
    # Derived, not copied: each default is written as the dataclass's attribute.
    fn = next(
        n
        for n in ast.parse((ROOT / ENGINE).read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == "crbc_step_credit"
    )
    written = dict(
        zip([a.arg for a in fn.args.kwonlyargs], map(ast.unparse, fn.args.kw_defaults), strict=True)
    )
    assert {f.name: written[f.name] for f in fields} == {f.name: f"CRBCParams.{f.name}" for f in fields}
