"""Small enough to read: in the package, the app and its pages, no module runs over
``MAX_MODULE_LINES`` lines, no function takes more than ``MAX_POSITIONAL`` positional parameters
(numba takes named tuples of arrays; the ingest its options object) or runs over ``MAX_LINES``
lines, and the engine's raw-array entry point takes its defaults from `CRBCParams` instead of
repeating them."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from helpers import ROOT

MAX_POSITIONAL = 8
MAX_LINES = 100
MAX_MODULE_LINES = 700
ENGINE = "crbc_viz/backends/numba/crbc.py"
MODULES = tuple(
    sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "crbc_viz").rglob("*.py"), ROOT / "app.py"])
)


def oversized_entries(source: str, where: str) -> list[tuple[str, str, str]]:
    """``(where, name, line)`` for each function of ``source`` over either limit, and
    ``(where, "", line)`` for the module itself when it runs over ``MAX_MODULE_LINES``."""
    out = []
    if (n := len(source.splitlines())) > MAX_MODULE_LINES:
        out.append((where, "", f"{where}: {n} lines"))
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [a.arg for a in node.args.posonlyargs + node.args.args]
            positional = len(args) - (args[:1] in (["self"], ["cls"]))
            lines = node.end_lineno - node.lineno + 1
            if positional > MAX_POSITIONAL or lines > MAX_LINES:
                out.append(
                    (
                        where,
                        node.name,
                        f"{where}:{node.lineno} {node.name}: {positional} positional, {lines} lines",
                    )
                )
    return out


def oversized(source: str, where: str) -> list[str]:
    """``where:line name: …`` for each function of ``source`` over either limit (and
    ``where: n lines`` for a module over ``MAX_MODULE_LINES``)."""
    return [text for _, _, text in oversized_entries(source, where)]


def test_oversized_finds_long_signatures_and_bodies():
    nine = "def f(" + ", ".join(f"a{i}" for i in range(9)) + "):\n    pass\n"
    eight_and_self = (
        "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(8)) + "):\n        pass\n"
    )
    long_body = "def h():\n" + "    x = 1\n" * 100
    just_fits = "def k():\n" + "    x = 1\n" * 99
    assert oversized(nine + eight_and_self + long_body + just_fits, "m.py") == [
        "m.py:1 f: 9 positional, 2 lines",
        "m.py:6 h: 0 positional, 101 lines",
    ]


def test_oversized_finds_long_modules():
    assert oversized("x = 1\n" * 700, "m.py") == []
    assert oversized("x = 1\n" * 701, "m.py") == ["m.py: 701 lines"]


def _found() -> list[tuple[str, str, str]]:
    return [e for m in MODULES for e in oversized_entries((ROOT / m).read_text(), m)]


def test_no_oversized_modules_or_functions():
    assert ENGINE in MODULES and "crbc_viz/app/app_pages/graph.py" in MODULES and len(MODULES) > 100
    found = [text for _, _, text in _found()]
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
