"""The layering of docs/architecture.md, checked by an AST scan of every import — function-level
imports included, since those are how a cycle hides today.

    errors, data → io → graph, result → ops → estimators → backends → anchor_merge → api → analysis, store, teaching
      → views → ui → app (router, pages)            cli → api, analysis, store, io, views    integrations → api
                                          integrations.{wandb,tensorboard,_dashboards} → api, views

Rules: no import cycle among the project's modules; no module imports a layer above its own; only
``crbc_viz.ui``, ``crbc_viz.app`` (the router and its pages) and ``app.py`` import streamlit;
torch and numba only in the backends
and the trainer integrations; an estimator module imports no peer estimator (only the registry:
shared math is in ``ops``); pages import only streamlit, pandas, ``crbc_viz.ui`` and
``crbc_viz.views``. ``ALLOWED`` is empty and must stay so: a new violation is fixed, not
listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PKG = "crbc_viz"

#: Layer rank by module-name prefix (longest prefix wins). Same rank may import each other (no cycles).
RANKS = {
    "crbc_viz.errors": 0,
    "crbc_viz.data": 0,
    "crbc_viz.outcome_rule": 0,  # the one success / truncation rule (data and io derive outcomes with it)
    "crbc_viz.safetext": 0,
    "crbc_viz._hooks": 0,
    "crbc_viz._arrow": 0,  # numpy <-> Arrow without pandas (data and io use it)
    "crbc_viz._extras": 0,  # optional packages: `require` names the extra that installs one
    "crbc_viz.io": 1,
    "crbc_viz.graph": 2,
    "crbc_viz.result": 2,  # a result is an output on a graph
    "crbc_viz.ops": 3,
    "crbc_viz.estimators": 4,
    "crbc_viz.backends": 5,
    "crbc_viz.anchor_merge": 5.5,  # the anchor rules that re-key a batch use GiGPO's and ProxMO's similarity
    "crbc_viz.api": 6,
    "crbc_viz.integrations": 6.5,
    # the W&B / TensorBoard loggers build the shared view's HTML; adapters only call a logger given
    "crbc_viz.integrations._dashboards": 8.5,
    "crbc_viz.integrations.wandb": 8.5,
    "crbc_viz.integrations.tensorboard": 8.5,
    "crbc_viz.analysis": 7,
    "crbc_viz.store": 7,
    "crbc_viz.teaching": 7,
    "crbc_viz.teaching_rows": 7,  # the Learn page's data as rows (teaching re-exports it)
    "crbc_viz.synthetic": 7,
    "crbc_viz.cli": 8.5,  # above views: ``html`` writes the shared page they build
    "crbc_viz.__main__": 8.5,
    "crbc_viz.views": 8,
    "crbc_viz.ui": 9,
    "crbc_viz.app": 8.4,  # the package's paths only (no streamlit): `crbc-viz view` reads them
    "crbc_viz.app.router": 10,
    "crbc_viz.app.main": 10,
    "crbc_viz.app.app_pages": 10,  # the page scripts
    "app": 10,
    "crbc_viz": 11,  # the package facade (crbc_viz/__init__.py): re-exports, imported by users only
}
STREAMLIT_OK = ("crbc_viz.ui", "crbc_viz.app", "app")
HEAVY_OK = ("crbc_viz.backends", "crbc_viz.integrations")
PAGE_IMPORTS_OK = ("streamlit", "pandas", "crbc_viz.ui", "crbc_viz.views")

#: (rule, importer, imported) triples tolerated as debts. Empty, and must stay so.
ALLOWED: set[tuple[str, str, str]] = set()


def module_files() -> dict[str, Path]:
    out = {}
    for f in sorted((ROOT / PKG).rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    out["app"] = ROOT / "app.py"
    return out


def imports_of(name: str, path: Path, known: set[str] | None = None) -> set[str]:
    """Absolute names this module imports anywhere in its body (``from a import b`` → ``a`` and,
    when ``a.b`` is a module of ``known`` (or ``known`` is None), ``a.b``)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = {f"{mod}.{a.name}" for a in node.names}
            subs = subs if known is None else subs & known
            # ``from pkg import submodule`` names the submodule, not the package's own body.
            if mod != "__future__" and (known is None or len(subs) < len(node.names)):
                found.add(mod)
            found.update(subs)
    return found


def rank(name: str) -> float | None:
    best = None
    for prefix, r in RANKS.items():
        if name == prefix or name.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, r)
    return None if best is None else best[1]


def project_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    files = module_files()
    internal, external = {}, {}
    for name, path in files.items():
        imps = imports_of(name, path, set(files))
        internal[name] = {m for m in imps if m in files and m != name}
        external[name] = {m for m in imps if m not in files}
    return internal, external


def violations() -> set[tuple[str, str, str]]:
    internal, external = project_graph()
    out = set()
    for mod, deps in internal.items():
        r = rank(mod)
        for d in deps:
            if d == PKG and mod.startswith(PKG + "."):
                out.add(("facade", mod, d))
            elif r is not None and rank(d) is not None and rank(d) > r:
                out.add(("layer", mod, d))
        is_page = mod.startswith("crbc_viz.app.app_pages")
        for d in deps | external[mod]:
            top = d.split(".")[0]
            if top == "streamlit" and not mod.startswith(STREAMLIT_OK):
                out.add(("streamlit", mod, "streamlit"))
            if top in ("torch", "numba") and not mod.startswith(HEAVY_OK):
                out.add(("heavy", mod, top))
            if is_page and not (d.startswith(PAGE_IMPORTS_OK) or d in ("__future__", "crbc_viz")):
                if d.split(".")[0] in ("streamlit", "pandas"):
                    continue
                out.add(("page-import", mod, d))
        if mod.startswith("crbc_viz.estimators") and any(d.startswith("crbc_viz.backends") for d in deps):
            out.add(("estimator-imports-backend", mod, "crbc_viz.backends"))
        if mod.startswith("crbc_viz.estimators.") and mod != "crbc_viz.estimators.registry":
            for d in deps:  # shared math lives in ops/, not in a peer estimator
                if d.startswith("crbc_viz.estimators") and d != "crbc_viz.estimators.registry":
                    out.add(("estimator-imports-peer", mod, d))
        if mod.startswith("crbc_viz.store") and any(d.startswith("crbc_viz.cli") for d in deps):
            out.add(("store-imports-cli", mod, "crbc_viz.cli"))
    for cyc in cycles(internal):
        out.add(("cycle", " -> ".join(cyc), ""))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module, as its sorted member list
    (Tarjan, iterative). The package facade is left out: importing a submodule runs it, but no
    module below it may import it (the "facade" rule)."""
    graph = {k: {d for d in v if d != PKG} for k, v in graph.items() if k != PKG}
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
                continue
            if nxt not in graph:
                continue
            if nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[v] = min(low[v], index[nxt])
    return comps


def test_scanner_sees_function_level_and_relative_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "from . import sib\nfrom ..io import readers\ndef g():\n    import torch\n    from .x import y\n"
    )
    got = imports_of("crbc_viz.estimators.m", f)
    assert {"crbc_viz.estimators.sib", "crbc_viz.io.readers", "torch", "crbc_viz.estimators.x.y"} <= got


def test_cycle_finder_finds_a_ring_and_nothing_in_a_stack():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_layers_hold_with_an_empty_allow_list():
    assert not ALLOWED, "no listed debts: fix a violation instead of listing it"


def test_layers_hold_except_the_listed_debts():
    found = violations()
    new = sorted(found - ALLOWED)
    gone = sorted(ALLOWED - found)
    assert not new, "new layering violations (see docs/architecture.md):\n" + "\n".join(map(str, new))
    assert not gone, "fixed violations still in ALLOWED (remove their lines):\n" + "\n".join(map(str, gone))
