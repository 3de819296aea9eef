"""``crbc-viz score --store S --all [--engine ray]``: a whole store re-scored one train step at a
time, in this process or on a local Ray (Ray Data), into a folder partitioned like the store.

Oracles: every unit's credit equals the numpy reference (`api.score(..., backend="numpy")`) run
group by group on the store's own groups; the two engines' folders are equal byte for byte."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from crbc_viz.api import score
from crbc_viz.cli import main
from crbc_viz.store import LogStore, ingest
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from helpers import write_jsonl

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'crbc-viz[ray]')")


def _dump(folder: Path, run: str, train_step: int, groups: int, seed: int) -> Path:
    b = random_mdp_batch(groups, 4, 10, seed=seed)
    rows = batch_to_rows(b)
    for r in rows:
        r["run_id"] = run
        r["train_step"] = train_step
        r["traj_id"] = f"{r['group_id']}-{r['traj_id']}"
    folder.mkdir(parents=True, exist_ok=True)
    return write_jsonl(folder / f"{run.replace('/', '_')}-{train_step}.jsonl", rows)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Two runs of three and two train steps; one run id needs percent-encoding in a path."""
    work = tmp_path_factory.mktemp("rescore")
    files = [_dump(work / "dumps", "run-a", t, 5, seed=t) for t in range(3)]
    files += [_dump(work / "dumps", "run b/ü", t, 3, seed=10 + t) for t in (4, 9)]
    ingest(work / "store", files)
    return work / "store"


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (starting one takes seconds); shut down after."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _run(*argv) -> int:
    return main(["score", *map(str, argv)])


def test_local_engine_equals_the_numpy_reference_group_by_group(store, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run("--store", store, "--all", "-e", "crbc", "-e", "grpo", "-o", out) == 0
    assert "5 train step(s)" in capsys.readouterr().out
    meta = json.loads((out / "rescore.json").read_text())
    assert [(u["run_id"], u["train_step"]) for u in meta["units"]] == [
        ("run b/ü", 4),
        ("run b/ü", 9),
        ("run-a", 0),
        ("run-a", 1),
        ("run-a", 2),
    ]
    st = LogStore(store)
    checked = 0
    for u in meta["units"]:
        got = pq.read_table(out / u["file"]).to_pandas()
        assert len(got) == 2 * u["steps"] and u["rows"] == len(got)
        assert set(got["run_id"]) == {u["run_id"]} and set(got["train_step"]) == {u["train_step"]}
        groups = st.groups(run=u["run_id"], train_step=u["train_step"])["group_id"]
        for gid in groups:
            b = st.load_batch(group=(u["run_id"], u["train_step"], gid), anchor_obs=False)
            for est in ("crbc", "grpo"):
                ref = score(b, est, backend="numpy")
                mine = got[(got["estimator"] == est) & (got["group_id"] == gid)]
                mine = mine.set_index(["traj_id", "step_idx"]).sort_index()
                want = ref.to_frame().set_index(["traj_id", "step_idx"]).sort_index()
                np.testing.assert_allclose(mine["credit"], want["credit"], atol=1e-9, rtol=0)
                checked += 1
    assert checked == 2 * (3 * 5 + 2 * 3)


def test_ray_engine_writes_the_same_bytes_as_the_local_engine(store, tmp_path, local_ray, capsys):
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    argv = ["--store", store, "--all", "-e", "crbc", "-e", "gigpo", "--param", "gamma=0.9"]
    assert _run(*argv, "-o", local) == 0
    assert _run(*argv, "--engine", "ray", "-o", on_ray) == 0
    assert "(ray;" in capsys.readouterr().out
    a, b = _files(local), _files(on_ray)
    assert len(a) == 6 and a == b  # five partitions and rescore.json


def test_only_run_narrows_a_whole_store_scoring(store, tmp_path):
    assert _run("--store", store, "--all", "--run", "run-a", "-o", tmp_path / "o") == 0
    meta = json.loads((tmp_path / "o" / "rescore.json").read_text())
    assert {u["run_id"] for u in meta["units"]} == {"run-a"} and meta["steps"] == sum(
        u["steps"] for u in meta["units"]
    )


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--engine", "ray"], "--engine, --address and --workers go with --all"),
        (["--all", "--train-step", "1"], "only --run narrows it"),
        (["--all", "--address", "ray://x:1"], "go with --engine ray"),
        (["--all", "--engine", "ray", "--workers", "0"], "expected at least 1"),
        (["--all", "--param", "nope=1"], "unknown parameter(s) nope"),
    ],
)
def test_bad_whole_store_arguments_are_one_line_and_write_nothing(store, tmp_path, capsys, extra, says):
    out = tmp_path / "o"
    assert _run("--store", store, "-o", out, *extra) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_used_output_folder_or_one_inside_the_store_is_refused(store, tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    assert _run("--store", store, "--all", "-o", used) == 2
    assert "new or empty folder" in capsys.readouterr().err
    assert (used / "keep.txt").read_text() == "mine" and len(list(used.iterdir())) == 1
    assert _run("--store", store, "--all", "-o", store / "rescored") == 2
    assert not (store / "rescored").exists()


def test_a_log_file_is_refused_with_all(tmp_path, capsys):
    f = _dump(tmp_path, "r", 0, 2, seed=1)
    assert _run(f, "--all", "-o", tmp_path / "o") == 2
    assert "give --store DIR" in capsys.readouterr().err


def test_ray_missing_is_one_line_naming_the_extra(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert _run("--store", store, "--all", "--engine", "ray", "-o", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "pip install 'crbc-viz[ray]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "rescore.json").exists()
