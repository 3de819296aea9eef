"""AReaL ``rollout/<version>/<task_id>.jsonl`` folders, written by AReaL's own
``_dump_trajectory`` (tests/fixtures/generators/areal_gen.py): counts per version folder equal
what the scripted rollouts did (truth.json); the step is the folder, not the file name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crbc_viz.errors import LoadError
from crbc_viz.io.importers import detect, expand_sources, import_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/areal"
FOLDER = FIX / "run/rollout"
TRUTH = json.loads((FIX / "truth.json").read_text())


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "crbc_viz", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("fmt", ["auto", "areal"])
def test_ingest_folder_then_info_per_version_equals_truth(tmp_path, fmt):
    store = tmp_path / "store"
    r = _cli("ingest", str(FOLDER), "--store", str(store), "--format", fmt)
    assert r.returncode == 0, r.stderr
    for step, want in TRUTH.items():
        r = _cli("info", "--store", str(store), "--train-step", step, "--json")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        for k in ("groups", "trajectories", "steps", "truncated"):
            assert info[k] == want[k], (step, k)
        assert info["matching"]["successes"] == want["successes"], step
        assert info["truncation_known"] is False


def test_every_file_is_detected_and_its_step_is_its_folder():
    files = sorted(FOLDER.rglob("*.jsonl"))
    assert {f.stem for f in files} == {"0", "1", "2", "3", "4"}  # task ids, not steps
    for f in files:
        assert detect(str(f)) == "areal"
        (src,) = expand_sources([str(f)])
        assert set(import_source(src).raw.records["train_step"]) == {int(f.parent.name)}


def _copy(tmp_path, name="2/3.jsonl", edit=None, twice=False):
    dest = tmp_path / "rollout" / name
    dest.parent.mkdir(parents=True)
    lines = [json.loads(s) for s in (FOLDER / name).read_text().splitlines()]
    if edit:
        edit(lines)
    text = "".join(json.dumps(x) + "\n" for x in lines)
    dest.write_text(text * (2 if twice else 1))
    return dest


def test_a_second_call_appending_to_a_task_file_is_a_second_group(tmp_path):
    p = _copy(tmp_path, twice=True)
    rows = import_source(expand_sources([str(p)])[0]).raw.records
    assert rows["group_id"].nunique() == 2
    n = len((FOLDER / "2/3.jsonl").read_text().splitlines())
    assert rows["traj_id"].nunique() == len(rows) == 2 * n


def test_task_id_that_is_not_an_integer_is_named(tmp_path):
    p = _copy(tmp_path, edit=lambda ls: ls[2].update(task_id="three"))
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(p)])[0])
    msg = str(e.value)
    assert "line 3: field 'task_id'" in msg


def test_reward_that_is_not_a_number_is_named(tmp_path):
    p = _copy(tmp_path, edit=lambda ls: ls[1].update(reward=[1]))
    assert detect(str(p)) == "areal"
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(p)])[0])
    assert "line 2: field 'reward'" in str(e.value)


def test_outside_a_version_folder_the_step_is_tail_version(tmp_path):
    dest = tmp_path / "3.jsonl"
    shutil.copy(FOLDER / "2/3.jsonl", dest)
    imp = import_source(expand_sources([str(dest)])[0])
    assert set(imp.raw.records["train_step"]) == {2}
    assert any("tail_version" in n for n in imp.notes)
