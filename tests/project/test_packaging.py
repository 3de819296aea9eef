"""Packaging: ``pip install crbc-viz`` is the core (load_rollouts, score, the CLI, the store, the
trainer adapters) and replaces nothing of a trainer's; the app, torch, numba, watchdog and
networkx are extras, and a missing one is one line naming the extra (`crbc_viz._extras`).

The declared dependencies are checked against an AST scan of every import of the package; the
missing-extra paths in process (imports blocked through ``sys.modules``); and the built wheel in
a fresh venv (``test_wheel_in_fresh_venvs``: pip, about 1-2 min, skipped with one line when pip
reaches no package index). Expected credit: docs/spec_vectors.md §14.4 (the toy group's CRBC
values, by hand), not a run of the package.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from crbc_viz._extras import EXTRA_OF, MissingExtra, ensure, require
from crbc_viz.errors import CrbcVizError
from helpers import ROOT, TOY

#: docs/spec_vectors.md §14.4: CRBC's final ``1·A^G + 5·A^S`` on the toy group (β = 0.98).
SPEC = {
    "t1": [1.2155, 3.7528, 4.4016],
    "t2": [-0.5166, -9.5263, -0.8660],
    "t3": [-1.2155, -0.6331, 2.0207, -7.9371],
    "t4": [0.5166, 0.4001, 1.0990, 3.7528, 4.4016],
}
CORE = {"numpy", "scipy", "pandas", "pyarrow", "duckdb", "tqdm", "array_api_compat"}
#: The core's distribution names (pyproject.toml), where one differs from its module's.
CORE_DISTS = (CORE - {"array_api_compat"}) | {"array-api-compat"}
#: Trainer packages: imported only by their adapter (the trainer brings them).
TRAINERS = {"verl", "trl", "accelerate", "rllm"}
#: Where an optional package may be imported directly (elsewhere: `crbc_viz._extras.require`):
#: streamlit in the app layer (its package checks with `ensure` first) and in the app's router and
#: page scripts (run only by Streamlit; `crbc-viz view` checks with `ensure` before it starts it),
#: torch and numba in the backends (`crbc_viz.api` refuses a backend that is not installed,
#: naming its extra).
DIRECT_OK = {
    "streamlit": ("crbc_viz/ui/", "crbc_viz/app/"),
    "torch": ("crbc_viz/backends/torch/",),
    "numba": ("crbc_viz/backends/numba/",),
}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    for stop in "<>=!~[; ":
        req = req.split(stop)[0]
    return req.strip().lower()


# -- what pyproject.toml declares ---------------------------------------------------------------
def test_dependencies_are_static_lower_bounds():
    proj = _project()
    assert "dependencies" not in proj.get("dynamic", []), "dependencies must be static"
    extras = proj["optional-dependencies"]
    every = proj["dependencies"] + [r for reqs in extras.values() for r in reqs]
    pinned = [r for r in every if "==" in r or "<" in r or "~=" in r]
    assert not pinned, f"pins or upper bounds would replace a trainer's packages: {pinned}"
    assert {_name(r) for r in proj["dependencies"]} == CORE_DISTS
    assert {_name(r) for r in extras["torch"]} == {"torch"}
    assert {"streamlit", "pyvis", "plotly", "igraph"} <= {_name(r) for r in extras["app"]}
    (everything,) = extras["all"]
    assert everything.startswith("crbc-viz[") and everything.endswith("]")
    assert set(everything[len("crbc-viz[") : -1].split(",")) == set(extras) - {"all"}


def test_every_optional_package_has_its_extra():
    extras = _project()["optional-dependencies"]
    for pkg, extra in EXTRA_OF.items():
        assert pkg in {_name(r) for r in extras[extra]}, f"{pkg}: not in extra [{extra}]"


def test_readme_says_how_to_install_each_part():
    text = (ROOT / "README.md").read_text()
    for line in (
        "pip install crbc-viz ",
        "pip install 'crbc-viz[app]'",
        "pip install 'crbc-viz[torch]'",
        "pip install 'crbc-viz[all]'",
    ):
        assert line in text, line
    for extra in _project()["optional-dependencies"]:
        assert f"[{extra}]" in text, extra


def _imports() -> list[tuple[str, str, int]]:
    """(top-level module, file relative to the root, line) of every absolute import in crbc_viz."""
    out = []
    for f in sorted((ROOT / "crbc_viz").rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(f.read_text(), rel)):
            if isinstance(node, ast.Import):
                out += [(a.name.split(".")[0], rel, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((node.module.split(".")[0], rel, node.lineno))
    return out


def test_every_import_is_declared_and_optional_ones_go_through_the_helper():
    bad = []
    for mod, rel, line in _imports():
        if mod in sys.stdlib_module_names or mod in ("crbc_viz", "__future__") or mod in CORE:
            continue
        if mod in TRAINERS:
            ok = rel.startswith("crbc_viz/integrations/")
        else:
            ok = rel.startswith(DIRECT_OK.get(mod, ("-",)))
        if not ok:
            how = "not a declared dependency" if mod not in EXTRA_OF else "import it with _extras.require"
            bad.append(f"{rel}:{line}: {mod} ({how})")
    assert not bad, "\n".join(bad)


# -- a missing extra is one line naming it ------------------------------------------------------
class _Hide:
    """A meta-path finder that answers for the packages ``roots`` as Python does for a package
    that is not installed (``import plotly.graph_objects`` → ModuleNotFoundError naming
    ``plotly``). Its source also runs in the child processes below."""

    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, name, path=None, target=None):
        root = name.split(".")[0]
        if root in self.roots:
            raise ModuleNotFoundError(f"No module named {root!r}", name=root)
        return None


def _block(monkeypatch, *roots: str) -> None:
    """Make the packages ``roots`` (and their modules) unimportable, as if not installed."""
    for m in list(sys.modules):
        if m.split(".")[0] in roots:
            monkeypatch.delitem(sys.modules, m)
    monkeypatch.setattr(sys, "meta_path", [_Hide(roots), *sys.meta_path])


@pytest.mark.parametrize("pkg", sorted(EXTRA_OF))
def test_require_names_the_extra(monkeypatch, pkg):
    _block(monkeypatch, pkg)
    with pytest.raises(MissingExtra) as e:
        require(pkg, "this feature")
    assert (
        str(e.value)
        == f"this feature needs {pkg}, which is not installed: pip install 'crbc-viz[{EXTRA_OF[pkg]}]'"
    )
    assert isinstance(e.value, ImportError) and isinstance(e.value, CrbcVizError)
    with pytest.raises(MissingExtra, match=rf"\[{EXTRA_OF[pkg]}\]"):
        ensure(pkg)


def test_a_broken_install_is_not_called_missing():
    """An installed package whose own part is missing keeps its own error (not "install the extra")."""
    with pytest.raises(ModuleNotFoundError) as e:
        require("plotly.no_such_module_here")
    assert not isinstance(e.value, MissingExtra)


def _toy_graph():
    import crbc_viz

    return crbc_viz.build_graph(crbc_viz.load_rollouts(TOY))


def test_graph_html_without_pyvis(monkeypatch):
    from crbc_viz.views.graph_view import graph_html

    graph = _toy_graph()
    _block(monkeypatch, "pyvis")
    with pytest.raises(
        MissingExtra, match=r"^the graph drawing needs pyvis, .*pip install 'crbc-viz\[app\]'$"
    ):
        graph_html(graph)


def test_layout_without_igraph(monkeypatch):
    from crbc_viz.views.layout import layered_layout

    graph = _toy_graph()
    _block(monkeypatch, "igraph")
    with pytest.raises(MissingExtra, match=r"needs igraph, .*\[app\]'$"):
        layered_layout(graph, 0)


def test_to_networkx_without_networkx(monkeypatch):
    graph = _toy_graph()
    _block(monkeypatch, "networkx")
    with pytest.raises(MissingExtra, match=r"^AnchorGraph.to_networkx needs networkx, .*\[networkx\]'$"):
        graph.to_networkx(0)


def test_watcher_polls_and_names_the_extra_without_watchdog(monkeypatch):
    from crbc_viz.store.watch import Watcher

    _block(monkeypatch, "watchdog")
    events = []
    assert Watcher._observe(SimpleNamespace(poll_interval=2.0), events.append) is None
    assert [e.message for e in events] == [
        "watchdog is not installed: polling every 2 s (for change events: pip install 'crbc-viz[watch]')"
    ]


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_cli_backend_without_its_package(monkeypatch, capsys, tmp_path, backend):
    from crbc_viz.api import _package
    from crbc_viz.cli import main

    monkeypatch.setattr(_package(backend), "available", lambda: False)
    rc = main(["score", str(TOY), "-e", "crbc", "--backend", backend, "--out", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{backend} is not installed: pip install 'crbc-viz[{backend}]'" in err
    assert not (tmp_path / "s.csv").exists()


def test_cli_cuda_without_torch(monkeypatch, capsys, tmp_path):
    import crbc_viz.api as api
    from crbc_viz.cli import main

    torch_pkg = api._package("torch")
    monkeypatch.setattr(torch_pkg, "available", lambda: False)
    monkeypatch.setattr(torch_pkg, "cuda_available", lambda: False)
    monkeypatch.setattr(api, "installed", lambda name: name != "torch")
    rc = main(["score", str(TOY), "-e", "crbc", "--device", "cuda", "--out", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "pip install 'crbc-viz[torch]'" in err, err


@pytest.mark.parametrize(
    "module, blocked, line",
    [
        ("crbc_viz.ui", "streamlit", "the app (crbc_viz.ui) needs streamlit"),
        ("crbc_viz.views.compare", "plotly", "crbc_viz.views.compare needs plotly"),
        ("crbc_viz.views.learn", "plotly", "crbc_viz.views.projector needs plotly"),
    ],
)
def test_app_modules_without_the_app_extra(module, blocked, line):
    """Importing the app's layers without its packages (a fresh process: nothing cached)."""
    code = (
        f"import sys\n{inspect.getsource(_Hide)}\nsys.meta_path.insert(0, _Hide([{blocked!r}]))\n"
        f"try:\n    import {module}\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=_env()
    )
    assert out.stdout == f"MissingExtra {line}, which is not installed: pip install 'crbc-viz[app]'\n", out


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# -- the built wheel in fresh venvs -------------------------------------------------------------
#: pip's words when it cannot reach an index (the one case the venv test is skipped for).
OFFLINE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ProxyError",
)


def _run(cmd: list, *, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def _pip_install(py: Path, *args) -> None:
    out = _run([py, "-m", "pip", "install", "-q", *args])
    if out.returncode != 0:
        text = out.stdout + out.stderr
        if any(s in text for s in OFFLINE):
            pytest.skip(f"pip reaches no package index: {text.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {' '.join(map(str, args))} failed:\n{text[-3000:]}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built once from a copy (nothing is written into the checkout)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "crbc_viz", src / "crbc_viz", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    out = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, src]
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (whl,) = dist.glob("crbc_viz-*.whl")
    return whl


CHECK_CORE = """
import importlib.util, json, sys
import crbc_viz
r = crbc_viz.score(crbc_viz.load_rollouts(sys.argv[1]), "crbc")
print(json.dumps({
    "advantage": [round(float(v), 4) for v in r.advantage],
    "absent": sorted(p for p in sys.argv[2].split(",") if importlib.util.find_spec(p) is None),
}))
"""

CHECK_ADAPTER = """
import json, sys
import numpy as np, torch
from crbc_viz.integrations.verl_agent import compute_advantage
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
col = lambda f, dt=object: np.array([r[f] for r in rows], dtype=dt)
tlr = torch.tensor([[r["reward"]] for r in rows], dtype=torch.float64)
adv, _ = compute_advantage(tlr, torch.ones_like(tlr), col("anchor_obs"), col("group_id"), col("traj_id"),
                           col("step_idx", np.int64), actions=col("action"), success=col("success", bool))
print(json.dumps({"torch": torch.__version__, "type": type(adv).__name__,
                  "advantage": [round(float(v), 4) for v in adv[:, 0]]}))
"""


def _by_traj(rows: list[dict], values: list[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r, v in sorted(zip(rows, values), key=lambda rv: (rv[0]["traj_id"], rv[0]["step_idx"])):
        out.setdefault(r["traj_id"], []).append(v)
    return out


@pytest.mark.install
@pytest.mark.timeout(900)
def test_wheel_in_fresh_venvs(wheel, tmp_path):
    """``pip install <wheel>`` (the core) into a fresh venv: the library and ``crbc-viz score`` give
    the hand values, no optional package came with it, and a missing extra is one line. Then the
    same venv gets a torch (as a trainer's has), and ``pip install '<wheel>[torch]'`` keeps that
    torch while an adapter runs on its tensors."""
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", venv], timeout=300)
    if made.returncode != 0:
        pytest.skip(
            f"python -m venv is unavailable here: {(made.stderr or made.stdout).strip().splitlines()[-1]}"
        )
    py, cli = venv / "bin" / "python", venv / "bin" / "crbc-viz"
    rows = [json.loads(line) for line in TOY.read_text().splitlines() if line.strip()]
    _pip_install(py, wheel)

    # The core: library and CLI, nothing optional installed.
    out = _run([py, "-c", CHECK_CORE, TOY, ",".join(sorted(EXTRA_OF))], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["absent"] == sorted(EXTRA_OF), f"the core install brought {set(EXTRA_OF) - set(got['absent'])}"
    assert _by_traj(rows, got["advantage"]) == SPEC
    scores = tmp_path / "s.jsonl"
    out = _run([cli, "score", TOY, "-e", "crbc", "--out", scores], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = [json.loads(line) for line in scores.read_text().splitlines()]
    assert _by_traj(written, [round(w["advantage"], 4) for w in written]) == SPEC

    # A missing extra: one line, exit status 2, no traceback.
    out = _run(
        [cli, "score", TOY, "-e", "crbc", "--backend", "torch", "--out", tmp_path / "t.jsonl"], cwd=tmp_path
    )
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr == (
        "error: backend='torch' was asked for but torch is not installed: "
        "pip install 'crbc-viz[torch]' (or use backend='numpy' or 'auto')\n"
    )
    code = "from crbc_viz.views.graph_view import graph_html\ntry:\n    graph_html(None)\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    out = _run([py, "-c", code], cwd=tmp_path)
    assert (
        out.stdout
        == "MissingExtra the graph drawing needs pyvis, which is not installed: pip install 'crbc-viz[app]'\n"
    ), out

    # A trainer's environment: a torch first, then the [torch] extra; that torch stays.
    try:
        have = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no torch in the test environment to stand for a trainer's (the core part passed)")
    _pip_install(py, f"torch=={have.split('+')[0]}")
    before = _run([py, "-c", "import torch; print(torch.__version__)"]).stdout
    _pip_install(py, f"{wheel}[torch]")
    out = _run([py, "-c", CHECK_ADAPTER, TOY], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["torch"] == before.strip(), "installing crbc-viz[torch] replaced the environment's torch"
    assert got["type"] == "Tensor" and _by_traj(rows, got["advantage"]) == SPEC
    out = _run(
        [cli, "score", TOY, "-e", "crbc", "--backend", "torch", "--out", tmp_path / "t.jsonl"], cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr


def test_wheel_ships_the_app(wheel):
    """``crbc-viz view`` from an installed package: the wheel holds the router, the script
    Streamlit runs, every page script and the server settings (no checkout needed)."""
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    pages = sorted(p.name for p in (ROOT / "crbc_viz/app/app_pages").glob("*.py"))
    assert len(pages) >= 7
    want = {"crbc_viz/app/__init__.py", "crbc_viz/app/main.py", "crbc_viz/app/router.py"}
    want |= {"crbc_viz/app/streamlit.toml", "crbc_viz/cli/view.py"}
    want |= {f"crbc_viz/app/app_pages/{p}" for p in pages}
    assert want <= names, sorted(want - names)
    assert not any(n.startswith(("app_pages/", "app.py", ".streamlit/")) for n in names)
