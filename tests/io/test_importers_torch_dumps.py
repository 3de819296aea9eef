"""slime debug rollout dumps (``.pt``) and GraphGPO saved batches (``.pth``), written by the
trainers' own writers (tests/fixtures/generators/slime_gen.py, graphgpo_gen.py): counts equal
what the scripted rollouts did (truth.json); the files are read weights-only, and a pickle that
would run code is refused by name and runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from crbc_viz.errors import LoadError  # noqa: E402
from crbc_viz.io.importers import detect, expand_sources, import_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SLIME = ROOT / "tests/fixtures/slime"
GRAPHGPO = ROOT / "tests/fixtures/graphgpo"
CASES = [(SLIME / name, "slime", t) for name, t in json.loads((SLIME / "truth.json").read_text()).items()] + [
    (GRAPHGPO / name, "graphgpo", t) for name, t in json.loads((GRAPHGPO / "truth.json").read_text()).items()
]


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "crbc_viz", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("path,fmt,truth", CASES, ids=lambda c: c.name if isinstance(c, Path) else None)
@pytest.mark.parametrize("how", ["auto", "named"])
def test_ingest_info_equals_truth(tmp_path, path, fmt, truth, how):
    store = tmp_path / "store"
    r = _cli("ingest", str(path), "--store", str(store), "--format", "auto" if how == "auto" else fmt)
    assert r.returncode == 0, r.stderr
    r = _cli("info", "--store", str(store), "--train-step", str(truth["train_step"]), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for k in ("groups", "trajectories", "steps", "truncated"):
        assert info[k] == truth[k], k
    assert info["matching"]["successes"] == truth["successes"]
    assert info["truncation_known"] is (fmt == "slime")  # GraphGPO's batch has no dones


@pytest.mark.parametrize("path,fmt,truth", CASES, ids=lambda c: c.name if isinstance(c, Path) else None)
def test_detected(path, fmt, truth):
    assert detect(str(path)) == fmt


def test_graphgpo_padding_copies_are_dropped_and_counted():
    for name, t in json.loads((GRAPHGPO / "truth.json").read_text()).items():
        imp = import_source(expand_sources([str(GRAPHGPO / name)])[0])
        assert imp.counts["copies_dropped"] == t.get("copies_dropped", 0)
        assert len(imp.raw.records) == t["steps"]


class Evil:
    """Unpickling this would run ``touch <marker>``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _slime_dump(path: Path, samples: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": 1, "samples": samples}, path)
    return path


def _sample(**kw):
    s = {"group_index": 0, "index": 0, "rollout_id": None, "prompt": "p", "response": "r", "reward": 1.0}
    return {**s, "status": "completed", **kw}


@pytest.mark.parametrize("fmt", ["auto", "slime", "graphgpo"])
def test_a_pickle_that_runs_code_is_refused_by_name_and_runs_nothing(tmp_path, fmt):
    marker = tmp_path / "pwned"
    if fmt == "graphgpo":
        path = tmp_path / "batch.pth"
        ntb = {
            k: np.array(["a"], dtype=object)
            for k in ("uid", "traj_uid", "anchor_obs", "next_obs", "text_actions")
        }
        ntb["episode_rewards"] = np.array([Evil(marker)], dtype=object)
        torch.save({"batch": None, "non_tensor_batch": ntb, "meta_info": {}}, path)
    else:
        path = _slime_dump(tmp_path / "rollout_1.pt", [_sample(metadata={"x": Evil(marker)})])
    r = _cli("ingest", str(path), "--store", str(tmp_path / "st"), "--format", fmt)
    assert r.returncode == 2, r.stderr
    assert not marker.exists()
    assert "system" in r.stderr and "refused, never unpickled" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").rglob("*.parquet"))


def test_slime_dict_reward_is_refused_naming_the_sample_and_field(tmp_path):
    path = _slime_dump(
        tmp_path / "rollout_1.pt", [_sample(), _sample(index=1, reward={"acc": 1.0, "fmt": 0.5})]
    )
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(path)])[0])
    msg = str(e.value)
    assert "sample 1" in msg and "'reward'" in msg and "--reward-key" in msg


def test_slime_bad_status_and_reward_are_named(tmp_path):
    path = _slime_dump(tmp_path / "rollout_1.pt", [_sample(status="weird"), _sample(index=1, reward="lots")])
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(path)])[0])
    msg = str(e.value)
    assert "sample 0: field 'status'" in msg and "sample 1: field 'reward'" in msg


def test_slime_compact_rollout_counts_its_reward_once():
    imp = import_source(expand_sources([str(SLIME / "compact/rollout_5.pt")])[0])
    df = imp.raw.records
    per_traj = df.groupby("traj_id")["reward"].sum()
    assert set(per_traj.tolist()) <= {0.0, 1.0}  # every sibling carries 1.0; counted on the last only
    assert (df.groupby("traj_id")["step_idx"].max() + 1).sum() == len(df)


def test_not_a_torch_file_is_one_line(tmp_path):
    path = tmp_path / "rollout_1.pt"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    r = _cli("ingest", str(path), "--store", str(tmp_path / "st"), "--format", "slime")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(path) in r.stderr


def test_graphgpo_rows_out_of_step_order_are_refused_naming_the_trajectory(tmp_path):
    from crbc_viz.io.importers import _torch_file

    data = _torch_file.load(str(GRAPHGPO / "batch_step4.pth"), "t", numpy=True, tensordict=True)
    ntb = data["non_tensor_batch"]
    order = np.arange(len(ntb["uid"]))
    order[[3, 4]] = order[[4, 3]]  # two steps of the second trajectory swapped
    ntb = {k: v[order] for k, v in ntb.items()}
    path = tmp_path / "batch_step4.pth"
    torch.save({"batch": None, "non_tensor_batch": ntb, "meta_info": {}}, path)
    with pytest.raises(LoadError) as e:
        import_source(expand_sources([str(path)], "graphgpo")[0])
    assert str(ntb["traj_uid"][3]) in str(e.value) and "step order" in str(e.value)


def test_a_batch_without_next_obs_or_text_actions_reads_in_row_order_with_a_note(tmp_path):
    """Stock verl-agent / G2PO batches carry neither: steps in row order, said in a note."""
    from crbc_viz.io.importers import _torch_file

    data = _torch_file.load(str(GRAPHGPO / "batch_step4.pth"), "t", numpy=True, tensordict=True)
    ntb = {k: v for k, v in data["non_tensor_batch"].items() if k not in ("next_obs", "text_actions")}
    path = tmp_path / "batch_step4.pth"
    torch.save({"batch": None, "non_tensor_batch": ntb, "meta_info": {}}, path)
    assert detect(str(path)) == "graphgpo"
    imp = import_source(expand_sources([str(path)])[0])
    assert (
        len(imp.raw.records) == json.loads((GRAPHGPO / "truth.json").read_text())["batch_step4.pth"]["steps"]
    )
    assert any("unchecked" in n for n in imp.notes)


def test_slime_eval_dump_groups_by_prompt_and_is_val(tmp_path):
    """``save_debug_rollout_data(..., evaluation=True)``: ``eval_<id>`` in the name, samples
    without ``group_index`` (eval samples come from the dataset, not the data source)."""
    samples = [_sample(group_index=None, index=i, prompt=f"q{i // 2}") for i in range(4)]
    path = _slime_dump(tmp_path / "rollout_eval_1.pt", samples)
    rows = import_source(expand_sources([str(path)])[0]).raw.records
    assert rows["group_id"].nunique() == 2 and rows["traj_id"].nunique() == 4
    assert set(rows["split"]) == {"val"}
