"""experiments/sokoban_grpo: the group-RL trainer on the in-repo corridor (no gym-sokoban).

Checks the canonical logging (each train step's file loads with `load_rollouts`), the ingest
into a log store, the advantage hand-off (the logged advantage equals `crbc-viz score` on the
logged rows, and GRPO's equals the formula computed here by hand), resuming, and that the
policy learns the known right credit of the corridor (``right`` at every cell).
"""

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from crbc_viz import load_rollouts
from crbc_viz.store import LogStore, ingest
from experiments.sokoban_grpo.envs import ChainTask
from experiments.sokoban_grpo.trainer import Config, RunMismatch, TabularPolicy, train
from helpers import ROOT

STEPS = 6
CFG = Config(
    estimator="crbc",
    seed=0,
    steps=STEPS,
    env="chain",
    pool=4,
    groups=4,
    rollouts=8,
    lr=0.5,
    env_kwargs={"length": 3, "max_steps": 6},
)


def rows_of(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "crbc-s0"
    metrics = train(CFG, out, progress=False)
    return out, metrics


def test_chain_task_dynamics():
    t = ChainTask("c", length=2, max_steps=4)
    assert t.reset() == "@.G"
    assert t.step(1) == ("@.G", 0.0, False)  # left at 0 stays at 0
    assert t.step(0) == (".@G", 0.0, False)
    assert t.step(2) == (".@G", 0.0, False)
    assert t.step(0) == ("..@", 1.0, True)


def test_every_train_step_logs_canonical_rows(run):
    out, metrics = run
    files = sorted((out / "logs").glob("train_step_*.jsonl"))
    assert [f.name for f in files] == [f"train_step_{k:04d}.jsonl" for k in range(STEPS)]
    for k, f in enumerate(files):
        b = load_rollouts(f)
        assert b.num_groups == 4 and b.num_trajectories == 32
        assert set(b.groups["run_id"]) == {"crbc-s0"} and set(b.groups["train_step"]) == {k}
        rows = rows_of(f)
        assert {"advantage", "anchor_obs", "done", "success", "action"} <= set(rows[0])
        # done only on a solving step, which is the trajectory's last row
        for r, nxt in zip(rows, rows[1:] + [None]):
            last = nxt is None or nxt["traj_id"] != r["traj_id"] or nxt["group_id"] != r["group_id"]
            assert r["done"] == (last and r["success"])
            if not last:
                assert nxt["step_idx"] == r["step_idx"] + 1
        assert b.traj_success.mean() == pytest.approx(metrics[k]["success_rate"])


def test_ingest_into_a_store(run, tmp_path):
    out, metrics = run
    ingest(tmp_path / "store", [str(out / "logs")])
    st = LogStore(tmp_path / "store")
    info = st.summary()
    assert info["runs"] == ["crbc-s0"] and info["train_steps"] == STEPS
    assert info["steps"] == sum(m["steps"] for m in metrics)
    from crbc_viz.analysis.trends import store_trends

    tr = store_trends(st)
    assert tr.steps["success_rate"].tolist() == pytest.approx([m["success_rate"] for m in metrics])
    assert (tr.steps["trainer_adv_abs_mean"] > 0).any()


def test_logged_advantage_equals_crbc_viz_score(run, tmp_path):
    out, _ = run
    for k in (0, STEPS - 1):
        f = out / "logs" / f"train_step_{k:04d}.jsonl"
        dest = tmp_path / f"scored{k}.parquet"
        subprocess.run(
            [sys.executable, "-m", "crbc_viz", "score", str(f), "-e", "crbc", "--out", str(dest)],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
        scored = pd.read_parquet(dest)
        logged = pd.DataFrame(rows_of(f))
        m = logged.merge(scored, on=["group_id", "traj_id", "step_idx"], suffixes=("_log", ""))
        assert len(m) == len(logged) == len(scored)
        np.testing.assert_allclose(m["advantage_log"], m["advantage"], rtol=1e-12, atol=1e-12)


def test_grpo_advantage_is_the_group_formula(tmp_path):
    cfg = replace(CFG, estimator="grpo", steps=2)
    train(cfg, tmp_path / "grpo", progress=False)
    seen_nonzero = False
    for k in range(2):
        rows = pd.DataFrame(rows_of(tmp_path / "grpo" / "logs" / f"train_step_{k:04d}.jsonl"))
        for _, g in rows.groupby("group_id"):
            R = g.groupby("traj_id")["success"].first().astype(float)
            sd = R.std(ddof=1)  # GRPO: (R - mean) / (sample std + 1e-6); constant R -> 0
            want = ((R - R.mean()) / (sd + 1e-6)).to_dict()
            got = g["advantage"].to_numpy()
            np.testing.assert_allclose(got, [want[t] for t in g["traj_id"]], atol=1e-9)
            seen_nonzero |= bool(np.abs(got).max() > 0)
    assert seen_nonzero


def test_resume_continues_exactly(run, tmp_path):
    out, metrics = run
    part = tmp_path / "crbc-s0"
    train(CFG, part, progress=False, stop_after=2)  # "crash" after two steps
    assert json.loads((part / "checkpoint.json").read_text())["train_step"] == 1
    again = train(CFG, part, progress=False)
    assert [m["success_rate"] for m in again] == [m["success_rate"] for m in metrics]
    for k in range(STEPS):
        name = f"train_step_{k:04d}.jsonl"
        assert (part / "logs" / name).read_bytes() == (out / "logs" / name).read_bytes()
    with pytest.raises(RunMismatch, match="another configuration"):
        train(replace(CFG, lr=0.25), part, progress=False)


def test_policy_learns_the_known_credit(run):
    out, metrics = run
    succ = [m["success_rate"] for m in metrics]
    assert succ[0] < 0.25 and np.mean(succ[-2:]) > succ[0] + 0.4, succ
    # the credit handed over ranks the actions as the corridor does: right > stay, left
    first = pd.DataFrame(rows_of(out / "logs" / "train_step_0000.jsonl"))
    mixed = first.groupby("group_id")["success"].transform(lambda s: s.any() and not s.all())
    mean_adv = first[mixed].groupby("action")["advantage"].mean()
    assert mean_adv["right"] > mean_adv["stay"] and mean_adv["right"] > mean_adv["left"]
    ck = json.loads((out / "checkpoint.json").read_text())
    pol = TabularPolicy.load(out / ck["policy"], 3)
    for cell in ("@..G", ".@.G", "..@G"):
        p = pol.probs(pol.rows([cell]))[0]
        assert p[0] > max(p[1], p[2]) and p[0] > 1 / 3 + 0.1, (cell, p)
    assert math.isclose(sum(p), 1.0)


BUNDLE = ROOT / "sample_rollouts" / "training" / "store"


def test_bundled_store_holds_a_run_per_estimator():
    size = sum(f.stat().st_size for f in BUNDLE.rglob("*") if f.is_file())
    assert size <= 15 * 2**20
    st = LogStore(BUNDLE)
    runs = ["crbc-s0", "gigpo-s0", "grpo-s0", "shortest_path-s0", "visit_local-s0"]
    assert st.summary()["runs"] == runs
    ts = st.train_steps()
    assert all((ts["run_id"] == r).sum() >= 30 for r in runs)


def test_across_training_opens_the_bundled_store_without_a_path(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.delenv("CRBC_VIZ_STORE", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("crbc_viz/app/app_pages/training.py")
    at.run()
    assert not at.exception and not at.error
    assert at.text_input(key="training_store").value == "sample_rollouts/training/store"
    assert sorted(at.multiselect(key="training_runs").value) == [
        "crbc-s0",
        "gigpo-s0",
        "grpo-s0",
        "shortest_path-s0",
        "visit_local-s0",
    ]
    fig = at.get("plotly_chart")[0].proto.spec
    spec = json.loads(fig)
    names = {t["name"] for t in spec["data"]}
    assert names == {"crbc-s0", "gigpo-s0", "grpo-s0", "shortest_path-s0", "visit_local-s0"}
    metrics = {t["meta"]["metric"] for t in spec["data"]}
    assert {
        "success_rate",
        "shared_step_fraction",
        "nonzero_credit_fraction",
        "credit_abs_mean",
        "trainer_adv_abs_mean",
        "disagreement",
    } <= metrics
    assert any("train_step 39" in s.value for s in at.subheader)
