"""The trainer patches of tests/trainer_patches/ (ours; the trainers' code is not committed).

Without the network a test cannot fetch verl-agent or ROLL, so:
- always: each patch is a well-formed unified diff touching only the files it names, every
  added line is ours (it mentions crbc), and the calls it adds match our functions' signatures;
- when a checkout (or a bare git mirror) of the trainer is named by an environment variable —
  ``CRBC_VIZ_SRC_VERL_AGENT``, ``CRBC_VIZ_SRC_ROLL`` — the patch is applied to the files of the
  commit its name carries (``git apply --check``, then applied to a copy, which must compile);
  without one that test skips, saying so. verl's patch is applied to the installed wheel by
  tests/integrations/test_integrations_trainers.py.
"""

from __future__ import annotations

import ast
import inspect
import os
import py_compile
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT

PATCHES = ROOT / "tests" / "trainer_patches"
#: patch file -> (env var naming a checkout or git dir, files it touches, our function it calls)
KNOWN = {
    "verl-agent-796ed31.patch": (
        "CRBC_VIZ_SRC_VERL_AGENT",
        {"verl/trainer/ppo/ray_trainer.py", "agent_system/multi_turn_rollout/rollout_loop.py"},
        "crbc_viz.integrations.verl_agent:compute_advantage",
    ),
    "roll-8eb27cc.patch": (
        "CRBC_VIZ_SRC_ROLL",
        {"roll/configs/base_config.py", "roll/pipeline/agentic/utils.py"},
        "crbc_viz.integrations.roll:response_level_advantages",
    ),
    "verl-0.9.1.patch": (None, {"verl/trainer/ppo/ray_trainer.py"}, None),
}


def hunks(text: str):
    """(file, added lines, removed lines) per file of a unified diff."""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith("+++ b/"):
            cur = line[6:].split("\t")[0]
            out[cur] = ([], [])
        elif cur and line.startswith("+") and not line.startswith("+++"):
            out[cur][0].append(line[1:])
        elif cur and line.startswith("-") and not line.startswith("---"):
            out[cur][1].append(line[1:])
    return out


def test_every_patch_is_known():
    assert {p.name for p in PATCHES.glob("*.patch")} == set(KNOWN)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_patch_structure(name):
    text = (PATCHES / name).read_text(encoding="utf-8")
    files = hunks(text)
    assert set(files) == KNOWN[name][1]
    for f, (added, removed) in files.items():
        assert added, f
        assert len(added) <= 12 and len(removed) <= 3, f"{name}: {f} is not a minimal change"
        text_added = "\n".join(added).lower()
        assert "crbc" in text_added or "needs_non_tensor_batch" in text_added, (
            f"{name}: {f} adds nothing of ours"
        )
        # A removed line is only ever modified (most of it kept), never dropped.
        for line in removed:
            keep = max(len(os.path.commonprefix([line, a])) for a in added)
            assert keep >= 0.6 * len(line), f"{name} drops {line!r}"
    for line in text.splitlines():  # hunk headers are well formed
        if line.startswith("@@"):
            assert re.match(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@", line), line


@pytest.mark.parametrize("name", [n for n, (_, _, fn) in KNOWN.items() if fn])
def test_patched_calls_match_our_signatures(name):
    """The keyword arguments the patch passes exist in our function (a rename breaks this)."""
    import importlib

    mod, fn = KNOWN[name][2].split(":")
    sig = inspect.signature(getattr(importlib.import_module(mod), fn))
    added = "\n".join(a for f, (adds, _) in hunks((PATCHES / name).read_text()).items() for a in adds)
    call = re.search(r"(crbc_advantage|response_level_advantages)\((.*?)\)\n", added + "\n", re.S)
    assert call, added
    src = f"f({call.group(2)})"
    node = ast.parse(src.replace("\n", " "), mode="eval").body
    params = sig.parameters
    for kw in node.keywords:
        if kw.arg is not None:
            assert kw.arg in params, f"{name} passes {kw.arg}= but {fn} has no such parameter"
    positional = [p for p in params.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert len(node.args) <= len(positional)


def _source_tree(var: str, commit: str, files, dest: Path) -> Path:
    """The patch's files at ``commit`` from a checkout or a bare git mirror, copied into dest."""
    src = Path(os.environ[var])
    git_dir = src if (src / "objects").is_dir() else src / ".git"
    for f in files:
        blob = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{commit}:{f}"], check=True, capture_output=True
        ).stdout
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        (dest / f).write_bytes(blob)
    return dest


@pytest.mark.parametrize("name", [n for n, (var, _, _) in KNOWN.items() if var])
def test_patch_applies_to_fetched_source(name, tmp_path):
    var, files, _ = KNOWN[name]
    if not os.environ.get(var):
        pytest.skip(f"{var} is not set (a checkout or git mirror of the trainer; no network here)")
    commit = re.search(r"-([0-9a-f]{7,40})\.patch$", name).group(1)
    tree = _source_tree(var, commit, files, tmp_path / "src")
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    patch = PATCHES / name
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=tree, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    for f in files:
        py_compile.compile(str(tree / f), doraise=True)
        assert "crbc" in (tree / f).read_text(encoding="utf-8")
