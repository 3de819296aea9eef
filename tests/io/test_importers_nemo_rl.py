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


def _copy(tmp_path, edit):
    lines = [json.loads(s) for s in FILE.read_text().splitlines()]
    edit(lines)
    p = tmp_path / "train_data_step2.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_bad_reward_is_named(tmp_path):
    from crbc_viz.errors import LoadError

    p = _copy(tmp_path, lambda ls: ls[3].update(rewards=["lots"]))
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(p)])[0])
    assert "line 4" in str(e.value) and "rewards" in str(e.value)


def test_mask_that_does_not_reconcile_is_one_step_noted(tmp_path):
    """A mask with no model tokens: the line is one step on its last prompt message, noted."""

    def edit(ls):
        ls[0]["token_loss_mask"] = [[0] * len(ls[0]["token_loss_mask"][0])]

    imp = import_source(expand_sources([str(_copy(tmp_path, edit))])[0])
    rows = imp.raw.records
    assert (rows["src_line"] == 1).sum() == 1
    assert any("do not match their token_loss_mask" in n for n in imp.notes)
