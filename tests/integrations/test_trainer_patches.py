"""The trainer patches of tests/trainer_patches/ (ours), checked on every run.

- each patch is a well-formed unified diff touching only the files it names, every added line is
  ours (it mentions crbc), and the calls it adds match our functions' signatures;
- each patch applies (``git apply --check``, then applied to a copy that must compile and hold our
  call) to pristine copies of exactly the files it touches, at the commit or release its name
  carries: tests/fixtures/trainer_sources/, whose SOURCES.json gives each file's upstream git blob
  id or wheel RECORD hash — checked here, so a copy edited by hand fails. verl's patch is also
  applied to the installed wheel by tests/integrations/test_integrations_trainers.py.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import inspect
import json
import os
import py_compile
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT

PATCHES = ROOT / "tests" / "trainer_patches"
#: patch file -> (files it touches, our function it calls)
KNOWN = {
    "verl-agent-796ed31.patch": (
        {"verl/trainer/ppo/ray_trainer.py", "agent_system/multi_turn_rollout/rollout_loop.py"},
        "crbc_viz.integrations.verl_agent:compute_advantage",
    ),
    "roll-8eb27cc.patch": (
        {"roll/configs/base_config.py", "roll/pipeline/agentic/utils.py"},
        "crbc_viz.integrations.roll:response_level_advantages",
    ),
    "verl-0.9.1.patch": ({"verl/trainer/ppo/ray_trainer.py"}, None),
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
    assert set(files) == KNOWN[name][0]
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


@pytest.mark.parametrize("name", [n for n, (_, fn) in KNOWN.items() if fn])
def test_patched_calls_match_our_signatures(name):
    """The keyword arguments the patch passes exist in our function (a rename breaks this)."""
    import importlib

    mod, fn = KNOWN[name][1].split(":")
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


SOURCES = ROOT / "tests" / "fixtures" / "trainer_sources"


def _tree_of(name: str) -> Path:
    return SOURCES / name.removesuffix(".patch")


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_vendored_sources_are_pristine(name):
    """Each copy is byte for byte the upstream file SOURCES.json names, with its licence beside it."""
    spec = json.loads((SOURCES / "SOURCES.json").read_text())[_tree_of(name).name]
    assert set(spec["files"]) == KNOWN[name][0]
    assert "Apache License" in (_tree_of(name) / "LICENSE").read_text(encoding="utf-8")
    for f, ident in spec["files"].items():
        data = (_tree_of(name) / f).read_bytes()
        if "git_blob" in ident:
            assert _git_blob_id(data) == ident["git_blob"], f"{name}: {f} is not the file at {spec['commit']}"
        else:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == ident["wheel_record_sha256"], f"{name}: {f} is not the wheel's file"


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_patch_applies_to_pristine_source(name, tmp_path):
    files = KNOWN[name][0]
    tree = tmp_path / "src"
    for f in files:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_tree_of(name) / f, tree / f)
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    patch = PATCHES / name
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=tree, check=True, capture_output=True)
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)
    for f in files:
        before = (_tree_of(name) / f).read_text(encoding="utf-8")
        after = (tree / f).read_text(encoding="utf-8")
        assert after != before, f"{name} changed nothing in {f}"
        py_compile.compile(str(tree / f), doraise=True)
        added = set(after.splitlines()) - set(before.splitlines())
        assert any("crbc" in line.lower() or "needs_non_tensor_batch" in line for line in added), f
