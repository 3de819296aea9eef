"""RAGEN ``val_rollouts_<timestamp>.jsonl``, written by RAGEN's own writer
(tests/fixtures/generators/ragen_gen.py): counts and per-step anchors equal what the scripted
rollouts did (truth.json); success is ``metadata["<tag>/success"]``, never the writer's
``metadata.success`` (always False)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crbc_viz.errors import LoadError
from crbc_viz.io.importers import detect, expand_sources, import_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/ragen"
FILE = FIX / "results/eval/val_rollouts_20261205_031500.jsonl"
TRUTH = json.loads((FIX / "truth.json").read_text())


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "crbc_viz", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("fmt", ["auto", "ragen"])
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
    assert detect(str(FILE)) == "ragen"


def _rows(path):
    (src,) = expand_sources([str(path)])
    return import_source(src).raw.records


def test_per_step_anchors_equal_truth():
    rows = _rows(FILE)
    got = [
        list(t.sort_values("step_idx")["anchor_obs"])
        for _, t in sorted(rows.groupby("traj_id"), key=lambda kv: int(kv[1]["src_line"].iloc[0]))
    ]
    assert got == TRUTH["anchors"]


def test_success_is_the_tag_metric_not_the_reward(tmp_path):
    """A line whose <tag>/success is 0 fails however high its total_reward; 1 succeeds however
    low."""
    lines = [json.loads(s) for s in FILE.read_text().splitlines()]
    lines[0]["metadata"].update({"LineWalk/success": 0.0, "total_reward": 5.0})
    lines[1]["metadata"].update({"LineWalk/success": 1.0, "total_reward": -5.0})
    p = tmp_path / "val_rollouts_1.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = _rows(p)
    by_traj = rows.groupby("traj_id")["success"].first()
    assert not by_traj["val_rollouts_1/e0"] and by_traj["val_rollouts_1/e1"]


def test_bad_success_flag_is_named(tmp_path):
    lines = [json.loads(s) for s in FILE.read_text().splitlines()]
    lines[2]["metadata"]["LineWalk/success"] = "maybe"
    p = tmp_path / "val_rollouts_2.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(LoadError) as e:
        _rows(p)
    assert "line 3" in str(e.value) and "LineWalk/success" in str(e.value)


def test_two_evaluations_in_one_folder_do_not_merge(tmp_path):
    """Each evaluation numbers its environments (and groups) from 0: two files in one folder
    stay apart."""
    d = tmp_path / "results/eval"
    d.mkdir(parents=True)
    lines = FILE.read_text().splitlines()
    (d / "val_rollouts_20261205_031500.jsonl").write_text("\n".join(lines) + "\n")
    (d / "val_rollouts_20261205_041500.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    store = tmp_path / "store"
    r = _cli("ingest", str(d), "--store", str(store))
    assert r.returncode == 0, r.stderr
    info = json.loads(_cli("info", "--store", str(store), "--train-step", "0", "--json").stdout)
    assert (info["groups"], info["trajectories"]) == (2 * TRUTH["groups"], 2 * TRUTH["trajectories"])
