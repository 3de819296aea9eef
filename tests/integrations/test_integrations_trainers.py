"""The adapters against the real trainer packages, in the separate environment `make test`
builds once (.venv-trainers: torch==2.13.0, verl 0.9.1 --no-deps plus what its core_algos and
ray_trainer import, TRL + transformers + accelerate + datasets; tests/trainer_requirements.txt).
``CRBC_VIZ_TRAINERS_PYTHON`` names its interpreter; without it these tests skip, saying so.

Each check runs as a script under that interpreter (tests/trainer_checks/) from a folder outside
the repository (so only the installed metadata, not a stale egg-info in the checkout, decides
which entry points exist) and its output is compared with ``crbc-viz score`` run by this
interpreter on the same rollouts as canonical rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crbc_viz.backends.torch import FLOAT32_ATOL
from helpers import ROOT

SOKOBAN = ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
CHECKS = ROOT / "tests" / "trainer_checks"
PATCHES = ROOT / "tests" / "trainer_patches"
PY = os.environ.get("CRBC_VIZ_TRAINERS_PYTHON")
needs_trainers = pytest.mark.skipif(
    not PY, reason="CRBC_VIZ_TRAINERS_PYTHON is not set (`make test` builds .venv-trainers and sets it)"
)


def run_check(script, *args, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    env["PYTHONPATH"] = ""
    p = subprocess.run(
        [PY, str(CHECKS / script), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def cli_advantages(tmp_path, *params):
    out = tmp_path / "cli.parquet"
    cmd = [sys.executable, "-m", "crbc_viz", "score", str(SOKOBAN), "-e", "crbc", "--out", str(out)]
    for p in params:
        cmd += ["--param", f"crbc.{p}"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, timeout=300)
    return pd.read_parquet(out).set_index(["group_id", "traj_id", "step_idx"])["advantage"]


def compare(steps, cli, atol):
    got = np.array([s[3] for s in steps])
    exp = np.array([cli[(g, t, k)] for g, t, k, _ in steps])
    assert len(steps) == len(cli)
    np.testing.assert_allclose(got, exp, atol=atol, rtol=0)
    assert np.abs(exp).max() > 1.0  # real credit, not all zeros


@needs_trainers
def test_verl_registry_has_crbc_without_external_modules(tmp_path):
    res = run_check("verl_check.py", SOKOBAN, cwd=tmp_path)
    assert res["verl"].startswith("0.9.")
    assert res["crbc_viz_estimator"] == "crbc"
    assert res["fn"].startswith("crbc_viz.integrations.verl.")
    assert {"crbc", "crbc_viz.crbc", "crbc_viz.gigpo", "crbc_viz.grpo", "crbc_viz.graft"} <= set(
        res["registered"]
    )
    compare(res["steps"], cli_advantages(tmp_path), atol=FLOAT32_ATOL)  # verl's float32 tensors


def _installed_verl(tmp_path) -> Path:
    p = subprocess.run(
        [PY, "-c", "import importlib.util as u; print(u.find_spec('verl').submodule_search_locations[0])"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=120,
    )
    return Path(p.stdout.strip())


@needs_trainers
def test_verl_patch_applies_and_real_compute_advantage_equals_cli(tmp_path):
    """The one-line patch applies to the installed verl 0.9.1, and verl's own
    ray_trainer.compute_advantage then hands non_tensor_batch to crbc (params from
    algorithm.crbc_params)."""
    patched = tmp_path / "patched"
    shutil.copytree(_installed_verl(tmp_path), patched / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    patch = PATCHES / "verl-0.9.1.patch"
    subprocess.run(
        ["patch", "-p1", "--dry-run", "-i", str(patch)], cwd=patched, check=True, capture_output=True
    )
    subprocess.run(["patch", "-p1", "-i", str(patch)], cwd=patched, check=True, capture_output=True)
    res = run_check(
        "verl_check.py",
        SOKOBAN,
        "--patched-verl",
        patched,
        "--param",
        "beta=0.9",
        "--param",
        "w_step=2.0",
        cwd=tmp_path,
    )
    compare(res["steps"], cli_advantages(tmp_path, "beta=0.9", "w_step=2.0"), atol=FLOAT32_ATOL)


def _trl_cli(tmp_path, rows_files):
    rows = tmp_path / "trl_rows.jsonl"
    rows.write_text("".join(f.read_text() for f in rows_files))
    out = tmp_path / "trl_cli.parquet"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "crbc_viz",
            "score",
            str(rows),
            "-e",
            "crbc",
            "--param",
            "crbc.beta=0.95",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    return pd.read_parquet(out).set_index(["group_id", "traj_id", "step_idx"])["advantage"]


@needs_trainers
def test_trl_one_real_grpo_step_with_crbc_advantages(tmp_path):
    """One GRPOTrainer optimisation step on a tiny random Llama: CreditGRPOTrainer's [B, T]
    advantages equal the CLI's on the rollouts the run saw, and the parameters moved."""
    run_check("trl_check.py", "--out", tmp_path, cwd=tmp_path)
    res = json.loads((tmp_path / "result_0.json").read_text())
    assert res["moved"] > 1e-4
    assert res["shape"][0] == res["completions"] == 16
    assert 0 < res["successes"] < 16
    compare(res["steps"], _trl_cli(tmp_path, [tmp_path / "rows_0.jsonl"]), atol=FLOAT32_ATOL)


@needs_trainers
def test_trl_two_processes_gather_group_statistics(tmp_path):
    """Two CPU processes (torchrun, gloo), 6 completions each, groups of 4: the middle group
    straddles the processes; every process's advantages still equal the CLI on all 12."""
    torchrun = Path(PY).with_name("torchrun")
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    env["PYTHONPATH"] = ""
    p = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node",
            "2",
            str(CHECKS / "trl_check.py"),
            "--out",
            str(tmp_path),
            "--per-device",
            "6",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    results = [json.loads((tmp_path / f"result_{r}.json").read_text()) for r in (0, 1)]
    assert all(r["processes"] == 2 and r["completions"] == 6 and r["moved"] > 1e-4 for r in results)
    cli = _trl_cli(tmp_path, [tmp_path / "rows_0.jsonl", tmp_path / "rows_1.jsonl"])
    compare(results[0]["steps"] + results[1]["steps"], cli, atol=FLOAT32_ATOL)
