"""One dispatch: the fused CUDA path of ``crbc`` is a guarded row of the kernel table, chosen by
its own ``should_run``, and the trainer adapters reach it only through `crbc_viz.api.score`.
No CUDA device is needed: the device's availability is faked and the table's kernels are
replaced by recorders, so what is checked is which row the dispatch picks, not what it computes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import crbc_viz.integrations as integrations
from crbc_viz import api
from crbc_viz.estimators import registry
from crbc_viz.synthetic import random_mdp_batch

torch = pytest.importorskip("torch")


@pytest.fixture
def recorded(monkeypatch):
    """The fused row (read from the table) and crbc's torch twin replaced by recorders, and a
    CUDA device that seems present; returns the list of (row, device) each call ran."""
    from crbc_viz import backends  # noqa: F401

    rows = [r for r in registry.guarded_rows() if r[:2] == ("crbc", "torch")]
    assert len(rows) == 1, rows
    _, _, check, fn = rows[0]
    assert fn.__module__ == "crbc_viz.backends.torch.fused" and fn.__name__ == "crbc_fused"
    ran: list = []

    def recorder(which):
        def kernel(graph, params, *, device):
            ran.append((which, device))
            return SimpleNamespace(advantage=np.zeros(graph.batch.num_steps))

        return kernel

    monkeypatch.setitem(registry.GUARDED, ("crbc", "torch"), [(check, recorder("fused"))])
    monkeypatch.setitem(registry.KERNELS, ("crbc", "torch"), recorder("twin"))
    monkeypatch.setattr("crbc_viz.backends.torch.cuda_available", lambda: True)
    return ran


def test_a_cuda_call_of_exact_crbc_runs_the_fused_row(recorded):
    batch = random_mdp_batch(seed=3, num_groups=2, rollouts=3, max_steps=4, num_states=4)
    api.score(batch, "crbc", device="cuda")  # auto: torch on the (faked) CUDA device
    api.score(batch, "crbc", backend="torch", device="cuda:0")
    api.score(batch, "crbc", device="cuda", depth=2)  # finite depth: the twin
    api.score(batch, "crbc", backend="torch", device="cpu")  # on the CPU: the twin
    assert recorded == [("fused", "cuda"), ("fused", "cuda:0"), ("twin", "cuda"), ("twin", "cpu")]


def test_the_adapters_reach_the_fused_row_through_score(recorded, monkeypatch):
    """The adapters' device branch on CPU tensors (their branch test and the fused row's device
    test replaced): crbc at depth ∞ runs the fused row, at depth 2 the twin."""
    from crbc_viz.backends.torch import fused
    from crbc_viz.integrations import _core, _scoring

    monkeypatch.setattr(_scoring, "_on_device", lambda dev: True)
    monkeypatch.setattr(fused, "on_cuda", lambda device: True)
    steps = _core.canonical_steps(
        np.array(["g"] * 4, dtype=object),
        np.array(["a", "a", "b", "b"], dtype=object),
        np.array([0, 1, 0, 1]),
        np.array(["s0", "s1", "s0", "s2"], dtype=object),
        np.array([0.0, 1.0, 0.0, 0.0]),
    )
    _core.score_steps(steps, "crbc", device="cpu")
    _core.score_steps(steps, "crbc", device="cpu", depth=2)
    assert recorded == [("fused", "cpu"), ("twin", "cpu")]


def _names_in_code(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        elif isinstance(node, ast.alias):
            out.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            out.append(node.module or "")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name)
    return out


def test_no_adapter_module_names_the_fused_path_or_tests_an_estimator_by_name():
    """A kernel is added as a row of the table: no adapter imports or names the fused path, and
    none compares an estimator's name to pick a path of its own."""
    names = set(registry.names())
    found = []
    for path in sorted(Path(integrations.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{path.name}: {n}" for n in _names_in_code(tree) if "fused" in re.split(r"[._]", n.lower())
        ]
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                found += [f"{path.name}:{node.lineno}: compares with {c!r}" for c in consts if c in names]
    assert not found, found
