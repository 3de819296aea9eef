"""Every exception class the package defines for callers is a `CrbcVizError` (so the CLI, the app
and the integrations catch one class), and `crbc_viz/errors.py` names each one in its tree."""

from __future__ import annotations

import ast
import importlib

import crbc_viz.errors as errors
from helpers import ROOT


def defined_exceptions() -> list[tuple[str, str]]:
    """(module, class) for every public class in crbc_viz whose bases name an exception."""
    found = []
    for f in sorted((ROOT / "crbc_viz").rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Unavailable", "Unclaimed")) for b in bases):
                found.append((".".join(parts), node.name))
    return found


def test_scan_finds_the_known_ones():
    names = {c for _, c in defined_exceptions()}
    assert {"LoadError", "StoreError", "OutputError", "IntegrationInputError", "HookError"} <= names


def test_every_package_exception_is_a_crbc_viz_error():
    outside = []
    for mod, cls in defined_exceptions():
        obj = getattr(importlib.import_module(mod), cls)
        if not issubclass(obj, errors.CrbcVizError):
            outside.append(f"{mod}.{cls}")
    assert not outside, f"not CrbcVizError subclasses: {outside}"


def test_errors_module_names_every_one():
    doc = errors.__doc__
    missing = [f"{m}.{c}" for m, c in defined_exceptions() if c != "CrbcVizError" and c not in doc]
    assert not missing, f"crbc_viz/errors.py's tree does not name: {missing}"
