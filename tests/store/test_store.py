"""The log store: ingest round-trips to the same batch as loading the file directly, is
idempotent and resumable after a crash, rejects duplicate trajectories, and its queries,
trends, export and CLI commands give the values the inputs imply."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crbc_viz import load_rollouts
from crbc_viz.analysis.agreement import group_spearman
from crbc_viz.analysis.trends import step_trends, store_trends
from crbc_viz.cli import main as store_cli
from crbc_viz.io import LoadError
from crbc_viz.store import CRASH_ENV, LogStore, StoreError, find_trajectory, ingest, search_steps
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from helpers import ROOT, write_jsonl

FIX = ROOT / "tests" / "fixtures"


def dump(tmp_path: Path, train_step: int, groups: int = 6, seed: int = 0, name=None) -> Path:
    b = random_mdp_batch(groups, 4, 12, seed=seed + train_step)
    rows = batch_to_rows(b)
    for i, r in enumerate(rows):
        r["train_step"] = train_step
        r["traj_id"] = f"{r['group_id']}-{r['traj_id']}"
        r["observation"] = f"obs {train_step}-{i} " + "x" * (i % 50)
        r["response"] = f"<action>{r['action']}</action>"
        r["env_name"] = "even" if int(r["group_id"][-1]) % 2 == 0 else "odd"
    return write_jsonl(tmp_path / (name or f"step_{train_step}.jsonl"), rows)


def rows_key(df: pd.DataFrame) -> list:
    return sorted(zip(df["run_id"], df["train_step"], df["group_id"], df["traj_id"], df["step_idx"]))


def test_roundtrip_equals_direct_load(tmp_path):
    f = dump(tmp_path, 0)
    rep = ingest(tmp_path / "s", [f])
    assert [s["status"] for s in rep.sources] == ["ingested"]
    direct = load_rollouts(f)
    st = LogStore(tmp_path / "s")
    b = st.load_batch()
    assert b.num_steps == direct.num_steps and b.num_groups == direct.num_groups
    np.testing.assert_array_equal(b.step_anchor_hash, direct.step_anchor_hash)
    np.testing.assert_array_equal(b.traj_offsets, direct.traj_offsets)
    np.testing.assert_array_equal(b.traj_success, direct.traj_success)
    np.testing.assert_array_equal(b.traj_truncated, direct.traj_truncated)
    assert b.steps["action"].tolist() == direct.steps["action"].tolist()
    # heavy text is not in the hot table but joins on demand
    assert "observation" not in b.steps
    bt = st.load_batch(text=True)
    assert bt.steps["observation"].tolist() == direct.steps["observation"].tolist()
    parts = list((tmp_path / "s" / "steps").rglob("*.parquet"))
    assert len(parts) == 1 and "run_id=synthetic/train_step=0" in parts[0].as_posix()
    import pyarrow.parquet as pq

    assert "observation" not in pq.read_schema(parts[0]).names
    assert pq.ParquetFile(parts[0]).metadata.row_group(0).column(0).compression == "ZSTD"


def test_reingest_is_noop(tmp_path):
    f = dump(tmp_path, 0)
    ingest(tmp_path / "s", [f])
    before = sorted(p.name for p in (tmp_path / "s").rglob("*.parquet"))
    rep = ingest(tmp_path / "s", [f])
    assert [s["status"] for s in rep.sources] == ["skipped"] and rep.rows == 0
    assert sorted(p.name for p in (tmp_path / "s").rglob("*.parquet")) == before
    assert LogStore(tmp_path / "s").num_steps == load_rollouts(f).num_steps


def _ingest_subprocess(store, files, crash_after=None, part_rows=60):
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash_after is not None:
        env[CRASH_ENV] = str(crash_after)
    code = (
        "import sys; from crbc_viz.store import ingest; "
        f"ingest({str(store)!r}, {[str(f) for f in files]!r}, part_rows={part_rows})"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)


def test_crash_mid_ingest_leaves_readable_store_and_resumes(tmp_path):
    files = [dump(tmp_path, 0), dump(tmp_path, 1)]
    total = sum(load_rollouts(f).num_steps for f in files)
    store = tmp_path / "s"
    proc = _ingest_subprocess(store, files, crash_after=2)
    assert proc.returncode == 17, proc.stderr
    st = LogStore(store)
    # exactly the two committed parts are visible, the store reads, nothing is complete
    assert len(st.parts) == 2
    assert 0 < st.num_steps < total
    assert not any(m["complete"] for m in st.sources.values())
    b = st.load_batch()
    assert b.num_steps == st.num_steps
    # a stray file that no manifest lists (a torn write) is never read
    stray = next((store / "steps").rglob("*.parquet")).with_name("zz-stray.parquet")
    stray.write_bytes(b"PAR1 garbage")
    assert LogStore(store).load_batch().num_steps == st.num_steps
    proc = _ingest_subprocess(store, files)
    assert proc.returncode == 0, proc.stderr
    st = LogStore(store)
    assert st.num_steps == total
    assert all(m["complete"] for m in st.sources.values())
    df = st.con.execute(
        f"SELECT run_id, train_step, group_id, traj_id, step_idx FROM {st._FROM}", [st._files(st.parts)]
    ).df()
    assert len(df) == total and not df.duplicated().any()
    expected = pd.concat([load_rollouts(f).steps for f in files])
    assert rows_key(df) == rows_key(expected)
    # and re-running once more changes nothing
    proc = _ingest_subprocess(store, files)
    assert proc.returncode == 0 and LogStore(store).num_steps == total


def test_duplicate_trajectories_from_another_file_are_rejected(tmp_path):
    f = dump(tmp_path, 0)
    ingest(tmp_path / "s", [f])
    copy = tmp_path / "copy" / f.name
    copy.parent.mkdir()
    copy.write_text(f.read_text() + "\n")  # other bytes, same rows
    with pytest.raises(LoadError, match="already in the store"):
        ingest(tmp_path / "s", [copy])
    assert LogStore(tmp_path / "s").num_steps == load_rollouts(f).num_steps


def test_not_a_store(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(StoreError, match="not a crbc-viz store"):
        LogStore(tmp_path)
    with pytest.raises(StoreError, match="not empty"):
        ingest(tmp_path, [dump(tmp_path / "..", 0, name="elsewhere.jsonl")])


def test_group_lookup_filters_and_text(tmp_path):
    files = [dump(tmp_path, 0), dump(tmp_path, 1)]
    for f in files:
        ingest(tmp_path / "s", [f], run_id=None)
    st = LogStore(tmp_path / "s")
    assert st.train_steps()["train_step"].tolist() == [0, 1]
    # group ids repeat across training steps -> a bare id is ambiguous
    with pytest.raises(StoreError, match="ambiguous"):
        st.resolve_group("task-00002")
    assert st.resolve_group("synthetic/1/task-00002") == ("synthetic", 1, "task-00002")
    g = st.load_batch(group="task-00002", train_step=1, text=True)
    direct = load_rollouts(files[1])
    want = direct.steps[direct.steps["group_id"] == "task-00002"]
    assert g.num_groups == 1 and g.num_steps == len(want)
    assert g.steps["observation"].tolist() == want["observation"].tolist()
    with pytest.raises(StoreError, match="no group 'nope'"):
        st.load_batch(group="nope")
    # success filter keeps whole groups
    groups = st.groups(train_step=0)
    mixed = groups[(groups["success_rate"] > 0) & (groups["success_rate"] < 1)]["group_id"].tolist()
    got = st.groups(train_step=0, success="mixed")["group_id"].tolist()
    assert got == sorted(mixed)
    b = st.load_batch(train_step=0, success="mixed")
    assert sorted(b.groups["group_id"]) == sorted(mixed)
    nos = groups[groups["success_rate"] == 0]["group_id"].tolist()
    assert st.groups(train_step=0, success="no")["group_id"].tolist() == sorted(nos)
    # env filter
    assert set(st.load_batch(env="even").groups["group_id"].str[-1].astype(int) % 2) == {0}


def test_search_and_find_trajectory(tmp_path):
    f = dump(tmp_path, 0)
    ingest(tmp_path / "s", [f])
    hits = search_steps(tmp_path / "s", "STATE 3", limit=5)
    assert 0 < len(hits) <= 5 and all("state 3" in a for a in hits["anchor_obs"])
    direct = load_rollouts(f).steps
    tid = direct["traj_id"].iloc[0]
    t = find_trajectory(tmp_path / "s", tid)
    want = direct[direct["traj_id"] == tid]
    assert t["step_idx"].tolist() == list(range(len(want)))
    assert t["response"].tolist() == want["response"].tolist()
    assert find_trajectory(tmp_path / "s", "no-such-traj").empty


def test_group_spearman_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    group = np.repeat([0, 1, 2], [7, 5, 6])
    a = rng.integers(0, 4, size=18).astype(float)
    b = a * 0.5 + rng.normal(size=18)
    b[12:] = 3.0  # constant in group 2 -> undefined
    rho = group_spearman(group, a, b, 3)
    for g, (lo, hi) in enumerate([(0, 7), (7, 12)]):
        assert rho[g] == pytest.approx(spearmanr(a[lo:hi], b[lo:hi]).statistic)
    assert np.isnan(rho[2])


def test_step_trends_on_hand_checked_group(tmp_path):
    # Group g1: two rollouts share the start anchor S; one succeeds (S -a-> X, done),
    # one fails (S -b-> Y -c-> end). Group g2: one rollout, one step, success.
    rows = [
        dict(group_id="g1", traj_id="t1", step_idx=0, reward=0.0, anchor_obs="S", action="a"),
        dict(group_id="g1", traj_id="t1", step_idx=1, reward=1.0, anchor_obs="X", action="a", success=True),
        dict(group_id="g1", traj_id="t2", step_idx=0, reward=0.0, anchor_obs="S", action="b"),
        dict(group_id="g1", traj_id="t2", step_idx=1, reward=0.0, anchor_obs="Y", action="c", success=False),
        dict(group_id="g2", traj_id="t3", step_idx=0, reward=1.0, anchor_obs="S", action="a", success=True),
    ]
    b = load_rollouts(write_jsonl(tmp_path / "h.jsonl", rows))
    row, groups = step_trends(b)
    assert row["success_rate"] == pytest.approx(2 / 3)
    assert row["shared_step_fraction"] == pytest.approx(2 / 5)  # the two S steps of g1
    assert groups["shared_step_fraction"].tolist() == [0.5, 0.0]
    assert groups["success_rate"].tolist() == [0.5, 1.0]
    # CRBC credit at S is +-(Q - V) != 0 in g1; g2 has one action everywhere
    g1 = groups.iloc[0]
    assert 0 < g1["nonzero_credit_fraction"] <= 1
    assert groups.iloc[1]["nonzero_credit_fraction"] == 0.0
    same, _ = step_trends(b, estimators=("crbc", "crbc"))
    assert same["disagreement"] == pytest.approx(0.0) or np.isnan(same["disagreement"])


def test_store_trends_cached_and_drill_down(tmp_path):
    files = [dump(tmp_path, 0), dump(tmp_path, 1)]
    ingest(tmp_path / "s", files, run_id="r")
    st = LogStore(tmp_path / "s")
    tr = store_trends(st)
    assert tr.steps["train_step"].tolist() == [0, 1]
    for f, t in zip(files, (0, 1)):
        direct = load_rollouts(f)
        assert tr.steps.loc[tr.steps["train_step"] == t, "success_rate"].item() == pytest.approx(
            direct.traj_success.mean()
        )
        assert len(tr.groups_of(t)) == direct.num_groups
    assert list((tmp_path / "s" / "cache").glob("trends-*.steps.parquet"))
    again = store_trends(LogStore(tmp_path / "s"))
    pd.testing.assert_frame_equal(again.steps, tr.steps)
    from crbc_viz.views.training import trends_figure

    fig = trends_figure(tr.steps, ["success_rate", "disagreement"], highlight=1)
    assert [t.name for t in fig.data] == ["success rate", "disagreement (1 − Spearman)"]
    assert list(fig.data[0].x) == [0, 1]


def test_export_keeps_trainer_keys_and_advantage(tmp_path):
    src = FIX / "verl_agent" / "crbc_step_000003.jsonl"
    ingest(tmp_path / "s", [src])
    out = tmp_path / "adv.parquet"
    assert (
        store_cli(["export", "--store", str(tmp_path / "s"), "--estimator", "crbc", "--out", str(out)]) == 0
    )
    df = pd.read_parquet(out)
    raw = [json.loads(x) for x in src.read_text().splitlines()]
    active = [r for r in raw if r["active_masks"]]
    assert len(df) == len(active)
    got = sorted(zip(df["uid"], df["traj_uid"], df["step"], df["trainer_advantage"]))
    want = sorted((r["uid"], r["traj_uid"], r["step"], r["advantage"]) for r in active)
    assert got == want
    assert set(df["estimator"]) == {"crbc"} and np.isfinite(df["advantage"]).all()


def test_cli_ingest_info_score_trends(tmp_path, capsys):
    s = str(tmp_path / "s")
    assert (
        store_cli(
            ["ingest", str(FIX / "roll_run" / "roll_steps.jsonl"), str(FIX / "trl_run"), "--store", s, "-q"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ingested" in out and "[roll]" in out and "[trl]" in out
    assert store_cli(["ingest", str(FIX / "trl_run"), "--store", s, "-q"]) == 0
    assert "skipped" in capsys.readouterr().out
    assert store_cli(["info", "--store", s, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["steps"] == 5 + 6 and info["groups"] == 1 + 2 and info["formats"] == ["roll", "trl"]
    assert store_cli(["info", "--store", s, "--group", "SimpleSokoban_0_12_777", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert g["trajectories"] == 2 and g["steps"] == 5
    out = tmp_path / "sc.csv"
    assert store_cli(["score", "--store", s, "--train-step", "10", "-e", "grpo", "--out", str(out)]) == 0
    assert len(pd.read_csv(out)) == 6
    capsys.readouterr()
    assert store_cli(["trends", "--store", s, "--json", "-q"]) == 0
    tr = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["train_step"]) for r in tr["steps"]] == [("roll_run", 12), ("trl_run", 10)]
    assert store_cli(["trends", "--store", s, "--train-step", "12", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["group_id"] == "SimpleSokoban_0_12_777"
    # a file still works without --store
    assert store_cli(["info", str(ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl")]) == 0
    capsys.readouterr()
    assert store_cli(["info", "--store", str(tmp_path / "nothing")]) == 2
    assert "not a crbc-viz store" in capsys.readouterr().err
