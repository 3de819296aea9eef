"""NeMo-RL ``train_data_step<N>.jsonl``, written by NeMo-RL's own writer
(tests/fixtures/generators/nemo_rl_gen.py): counts and per-step anchors equal what the
scripted rollouts did (truth.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crbc_viz.io.importers import detect, expand_sources, import_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/nemo_rl"
FILE = FIX / "logs/exp_001/train_data_step2.jsonl"
TRUTH = json.loads((FIX / "truth.json").read_text())


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "crbc_viz", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("fmt", ["auto", "nemo-rl"])
def test_ingest_info_equals_truth(tmp_path, fmt):
    store = tmp_path / "store"
    r = _cli("ingest", str(FILE), "--store", str(store), "--format", fmt)
    assert r.returncode == 0, r.stderr
    r = _cli("info", "--store", str(store), "--train-step", str(TRUTH["train_step"]), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for k in ("groups", "trajectories", "steps", "truncated", "truncation_known"):
        assert info[k] == TRUTH[k], k
    assert info["matching"]["successes"] == TRUTH["successes"]


def test_detected():
    assert detect(str(FILE)) == "nemo-rl"


def test_per_step_anchors_equal_truth():
    (src,) = expand_sources([str(FILE)])
    rows = import_source(src).raw.records
    got = [
        list(t.sort_values("step_idx")["anchor_obs"])
        for _, t in sorted(rows.groupby("traj_id"), key=lambda kv: int(kv[1]["src_line"].iloc[0]))
    ]
    assert got == TRUTH["anchors"]
