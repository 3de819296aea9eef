"""Trainer adapters that need no trainer installed (crbc_viz.integrations): the verl-agent
function on duplicated and shuffled batches, checked against `crbc-viz score` run as a separate
process on the same rollouts written as canonical rows; the import hygiene of the package.

Expected values come from the CLI (the file path: reader, loader, estimator), never from the
adapter's own steps; the adapter's batch is built here from the canonical rows the way
verl-agent builds its own (one row per env step, reward on the step's last response token,
``adjust_batch`` copies appended, rows shuffled).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from crbc_viz.backends.torch import FLOAT32_ATOL
from helpers import ROOT, write_jsonl

SOKOBAN = ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
CUDA = torch.cuda.is_available()


def cli_scores(path, estimators, tmp_path, *params) -> pd.DataFrame:
    out = tmp_path / f"cli_{path.stem}.parquet"
    cmd = [sys.executable, "-m", "crbc_viz", "score", str(path), "--out", str(out)]
    for e in estimators:
        cmd += ["-e", e]
    for p in params:
        cmd += ["--param", p]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, timeout=300)
    return pd.read_parquet(out)


def rows_of(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def verl_agent_batch(rows, *, copies=300, L=12, seed=0, reward=lambda r: r["reward"]):
    """verl-agent's shape: one row per step, reward on the last response token, random copies
    appended (adjust_batch mode="copy"), then shuffled (_balance_batch)."""
    rng = np.random.default_rng(seed)
    idx = np.r_[np.arange(len(rows)), rng.integers(0, len(rows), copies)]
    rng.shuffle(idx)
    n_tok = rng.integers(1, L + 1, len(idx))
    mask = (torch.arange(L)[None, :] < torch.as_tensor(n_tok)[:, None]).double()
    tlr = torch.zeros(len(idx), L, dtype=torch.float64)
    tlr[torch.arange(len(idx)), torch.as_tensor(n_tok - 1)] = torch.tensor(
        [reward(rows[i]) for i in idx], dtype=torch.float64
    )

    def col(f, dtype=object):
        return np.array([rows[i][f] for i in idx], dtype=dtype)

    return idx, tlr, mask, col


def expected(df, rows, idx, estimator="crbc"):
    d = df[df["estimator"] == estimator].set_index(["group_id", "traj_id", "step_idx"])["advantage"]
    return np.array([d[(rows[i]["group_id"], rows[i]["traj_id"], rows[i]["step_idx"])] for i in idx])


def per_row(adv, mask):
    """The one value each row carries on its response tokens (and zero off them)."""
    assert torch.all(adv[mask == 0] == 0)
    return (adv.sum(-1) / mask.sum(-1)).numpy()


def test_duplicated_shuffled_batch_equals_cli(tmp_path):
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc", "visit_local", "gigpo"], tmp_path)
    idx, tlr, mask, col = verl_agent_batch(rows)
    assert len(set(idx)) < len(idx)  # copies present
    for est in ("crbc", "visit_local", "gigpo"):
        adv, ret = compute_advantage(
            tlr,
            mask,
            col("anchor_obs"),
            col("group_id"),
            col("traj_id"),
            col("step_idx", np.int64),
            actions=col("action"),
            success=col("success", bool),
            estimator=est,
        )
        assert adv.shape == tlr.shape and adv.dtype == torch.float64 and ret is adv
        np.testing.assert_allclose(per_row(adv, mask), expected(df, rows, idx, est), atol=1e-9, rtol=0)
    # Every copy of a step carries its step's credit, and credit is not all zero.
    assert np.abs(expected(df, rows, idx)).max() > 1.0


def test_params_reach_the_estimator(tmp_path):
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc"], tmp_path, "crbc.beta=0.9", "crbc.w_step=2.0")
    idx, tlr, mask, col = verl_agent_batch(rows, seed=3)
    adv, _ = compute_advantage(
        tlr.float(),
        mask.float(),
        col("anchor_obs"),
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        actions=col("action"),
        beta=0.9,
        w_step=2.0,
    )
    assert adv.dtype == torch.float32
    np.testing.assert_allclose(
        per_row(adv.double(), mask), expected(df, rows, idx), atol=FLOAT32_ATOL, rtol=0
    )


def test_without_actions_keys_transitions(tmp_path):
    """actions=None: the CLI, given rows whose action is the next anchor (or the outcome after
    the last step), must agree — written here from the rows, not by the adapter."""
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    by_traj = {}
    for r in rows:
        by_traj.setdefault((r["group_id"], r["traj_id"]), {})[r["step_idx"]] = r
    canon = []
    for r in rows:
        nxt = by_traj[(r["group_id"], r["traj_id"])].get(r["step_idx"] + 1)
        act = ("next:" + nxt["anchor_obs"]) if nxt else ("end:" + str(r["success"]))
        canon.append(
            {k: r[k] for k in ("group_id", "traj_id", "step_idx", "reward", "anchor_obs", "success")}
            | {"action": act}
        )
    path = write_jsonl(tmp_path / "transitions.jsonl", canon)
    df = cli_scores(path, ["crbc"], tmp_path)
    idx, tlr, mask, col = verl_agent_batch(rows, seed=1)
    adv, _ = compute_advantage(
        tlr,
        mask,
        col("anchor_obs"),
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        success=col("success", bool),
    )
    np.testing.assert_allclose(per_row(adv, mask), expected(df, rows, idx), atol=1e-9, rtol=0)


def test_episode_rewards_on_every_row(tmp_path):
    """row_reward="episode": verl-agent's EpisodeRewardManager puts the episode return on every
    step; success then comes from it (> 0), as the CLI derives it from episode_return."""
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    canon = [
        {
            k: r[k]
            for k in ("group_id", "traj_id", "step_idx", "reward", "anchor_obs", "action", "episode_return")
        }
        for r in rows
    ]
    path = write_jsonl(tmp_path / "episode.jsonl", canon)
    df = cli_scores(path, ["crbc", "grpo"], tmp_path, "grpo.outcome=return")
    idx, tlr, mask, col = verl_agent_batch(rows, seed=2, reward=lambda r: r["episode_return"])
    for est, extra in (("crbc", {}), ("grpo", {"outcome": "return"})):
        adv, _ = compute_advantage(
            tlr,
            mask,
            col("anchor_obs"),
            col("group_id"),
            col("traj_id"),
            col("step_idx", np.int64),
            actions=col("action"),
            estimator=est,
            row_reward="episode",
            **extra,
        )
        np.testing.assert_allclose(per_row(adv, mask), expected(df, rows, idx, est), atol=1e-9, rtol=0)


def _toy_batch():
    rows = rows_of(ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl")
    idx, tlr, mask, col = verl_agent_batch(rows, copies=5, L=4)
    return rows, idx, tlr, mask, col


def test_refuses_missing_step_index_and_conflicting_copies():
    from crbc_viz.integrations._core import IntegrationInputError
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows, idx, tlr, mask, col = _toy_batch()
    with pytest.raises(IntegrationInputError, match="step_index is required"):
        compute_advantage(tlr, mask, col("anchor_obs"), col("group_id"), col("traj_id"), None)
    anchors = col("anchor_obs")
    dup = next(k for k in range(len(idx)) if (idx[:k] == idx[k]).any())
    anchors[dup] = "a different state"
    with pytest.raises(IntegrationInputError, match=rf"rows \d+ and {dup} .* differ in anchor_obs"):
        compute_advantage(tlr, mask, anchors, col("group_id"), col("traj_id"), col("step_idx", np.int64))
    steps = col("step_idx", np.int64)
    steps[steps == 2] = 5  # a gap: the loader names the row and the field
    with pytest.raises(ValueError, match="step_idx.*not contiguous"):
        compute_advantage(tlr, mask, col("anchor_obs"), col("group_id"), col("traj_id"), steps)
    succ = col("success", bool)
    first = int(np.flatnonzero(col("traj_id") == "t1")[0])
    succ[first] = not succ[first]
    with pytest.raises(IntegrationInputError, match="differ"):
        compute_advantage(
            tlr,
            mask,
            col("anchor_obs"),
            col("group_id"),
            col("traj_id"),
            col("step_idx", np.int64),
            success=succ,
        )
    with pytest.raises(ValueError, match="unknown parameter"):
        compute_advantage(
            tlr, mask, col("anchor_obs"), col("group_id"), col("traj_id"), col("step_idx", np.int64), bogus=1
        )


def test_toy_group_spec_values():
    """ESTIMATORS.md §14.1's toy group: the first step's CRBC advantage is 1.2155 (the package
    doctest's hand value), whatever copies and order the batch has."""
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows, idx, tlr, mask, col = _toy_batch()
    adv, _ = compute_advantage(
        tlr,
        mask,
        col("anchor_obs"),
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        actions=col("action"),
        success=col("success", bool),
    )
    first = [k for k in range(len(idx)) if rows[idx[k]]["traj_id"] == "t1" and rows[idx[k]]["step_idx"] == 0]
    assert np.round(per_row(adv, mask)[first], 4).tolist() == [1.2155] * len(first)


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine (CPU path tested above)")
def test_cuda_stays_on_device_and_matches_cpu():
    from crbc_viz.integrations.verl_agent import compute_advantage

    rows = rows_of(SOKOBAN)
    idx, tlr, mask, col = verl_agent_batch(rows, seed=4)
    args = (col("anchor_obs"), col("group_id"), col("traj_id"), col("step_idx", np.int64))
    cpu, _ = compute_advantage(tlr, mask, *args, actions=col("action"))
    for est in ("crbc", "gigpo"):
        gpu, _ = compute_advantage(tlr.cuda(), mask.cuda(), *args, actions=col("action"), estimator=est)
        assert gpu.is_cuda
        ref = (
            cpu
            if est == "crbc"
            else compute_advantage(tlr, mask, *args, actions=col("action"), estimator=est)[0]
        )
        np.testing.assert_allclose(gpu.cpu().numpy(), ref.numpy(), atol=1e-9, rtol=0)


def test_importing_integrations_imports_no_trainer():
    code = (
        "import sys, crbc_viz, crbc_viz.integrations, crbc_viz.integrations.verl_agent, "
        "crbc_viz.integrations._core, crbc_viz.integrations.verl, crbc_viz.integrations.trl, "
        "crbc_viz.integrations.roll, crbc_viz.integrations.rllm; "
        "bad = [m for m in ('trl', 'verl', 'transformers', 'accelerate', 'ray', 'rllm', 'roll') "
        "if m in sys.modules]; print(bad); assert not bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_roll_rows_with_copies_equal_cli(tmp_path):
    """ROLL's agentic batch: one row per step with traj_group_id, traj_id, step, state_hash,
    step_scores; batch_adjust_mode="copy" duplicates rows; the order is arbitrary."""
    from types import SimpleNamespace

    from crbc_viz.integrations.roll import response_level_advantages

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc"], tmp_path)
    idx, tlr, mask, col = verl_agent_batch(rows, seed=5)
    batch = SimpleNamespace(
        batch={"response_mask": mask},
        non_tensor_batch={
            "traj_group_id": col("group_id"),
            "traj_id": col("traj_id"),
            "step": col("step_idx", np.int64),
            "state_hash": col("anchor_obs"),
            "step_scores": col("reward", np.float64),
            "success": col("success", bool),
            "action": col("action"),
        },
    )
    got = response_level_advantages(batch)
    assert got.shape == (len(idx),) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected(df, rows, idx), atol=FLOAT32_ATOL, rtol=0)


def test_rllm_step_advantages_equal_cli(tmp_path):
    """rLLM's TrajectoryGroup / Trajectory / Step attribute names (rllm/types.py): every step
    gets its own advantage (rLLM's precomputed path), equal to the CLI's."""
    from types import SimpleNamespace

    from crbc_viz.integrations.rllm import assign_step_advantages

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc", "gigpo"], tmp_path)
    groups: dict = {}
    for r in rows:
        trajs = groups.setdefault(r["group_id"], {})
        trajs.setdefault(r["traj_id"], []).append(r)
    tg = []
    for gid, trajs in groups.items():
        tg.append(
            SimpleNamespace(
                group_id=f"{gid}:solver",
                trajectories=[
                    SimpleNamespace(
                        uid=tid,
                        reward=1.0 if steps[-1]["success"] else 0.0,
                        steps=[
                            SimpleNamespace(
                                observation=s["anchor_obs"],
                                input=None,
                                action=s["action"],
                                reward=s["reward"],
                                advantage=None,
                                key=(gid, tid, s["step_idx"]),
                            )
                            for s in sorted(steps, key=lambda s: s["step_idx"])
                        ],
                    )
                    for tid, steps in trajs.items()
                ],
            )
        )
    for est in ("crbc", "gigpo"):
        assign_step_advantages(tg, estimator=est)
        d = df[df["estimator"] == est].set_index(["group_id", "traj_id", "step_idx"])["advantage"]
        got = [(s.advantage, d[s.key]) for g in tg for t in g.trajectories for s in t.steps]
        np.testing.assert_allclose([a for a, _ in got], [b for _, b in got], atol=1e-9, rtol=0)


def test_integrations_bench_dry_run(tmp_path):
    """bench/integrations_bench.py runs (8k steps, one repeat) and writes its table: each
    adapter beside its floor with the ratio, its peak extra memory, and the verdict."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.integrations_bench", "--sizes", "8k", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "integrations_cpu.md").read_text()
    for name in ("verl-agent crbc", "ROLL crbc", "verl crbc", "TRL crbc", "rLLM crbc"):
        line = next(x for x in table.splitlines() if x.startswith(f"| {name} |"))
        assert line.count(" ms |") == 2 and line.rstrip().endswith("×** |")  # adapter, floor, ratio
        assert sum(x.startswith(f"| {name} |") for x in table.splitlines()) == 2  # and its memory row
    assert "8,170 steps" in table and "peak extra" in table
    assert "within 4× its floor at 8k" in table and "within 3× the input" in table
    # The recorded command is the one that ran (no --write here).
    assert "Command: `python -m bench.integrations_bench --sizes 8k --device cpu --repeats 1`" in table


def test_fused_device_path_on_cpu_equals_cli(tmp_path):
    """The path CUDA tensors take for crbc (the fused row of the kernel table,
    crbc_viz.backends.torch.fused, fed by the integration core) runs on the CPU too: same
    advantages as the CLI on the de-duplicated rows."""
    from crbc_viz.backends.torch.fused import crbc_fused
    from crbc_viz.graph import lazy_graph
    from crbc_viz.integrations._core import canonical_steps, resolve_params

    rows = rows_of(SOKOBAN)
    df = cli_scores(SOKOBAN, ["crbc"], tmp_path)
    idx, tlr, mask, col = verl_agent_batch(rows, seed=6)
    steps = canonical_steps(
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        col("anchor_obs"),
        col("reward", np.float64),
        actions=col("action"),
        success=col("success", bool),
    )
    assert steps.duplicates == len(idx) - len(set(idx))
    _, p = resolve_params("crbc", {})
    res = crbc_fused(lazy_graph(steps.batch), p, device="cpu")
    assert res.backend == "torch:cpu"
    np.testing.assert_allclose(res.advantage[steps.row_step], expected(df, rows, idx), atol=1e-9, rtol=0)


def test_verl_adapter_says_what_is_missing():
    from crbc_viz.integrations._core import IntegrationInputError
    from crbc_viz.integrations.verl import compute_advantage

    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 1, 1, 1]], dtype=torch.float32)  # 2 steps per row
    tlr = torch.zeros(2, 5)
    uid = np.array(["g", "g"], dtype=object)
    with pytest.raises(IntegrationInputError, match="verl-0.9.1.patch"):
        compute_advantage(tlr, mask, uid)
    with pytest.raises(IntegrationInputError, match="no 'crbc_anchors'"):
        compute_advantage(tlr, mask, uid, non_tensor_batch={"uid": uid})
    anchors = np.empty(2, dtype=object)
    anchors[:] = [["s0", "s1"], ["s0"]]
    with pytest.raises(IntegrationInputError, match="row 1: 1 crbc_anchors for 2 steps"):
        compute_advantage(tlr, mask, uid, non_tensor_batch={"uid": uid, "crbc_anchors": anchors})
    anchors[:] = [["s0", "s1"], ["s0", "s2"]]
    tlr[0, 3] = 1.0  # row 0 succeeds on its second step
    adv, _ = compute_advantage(tlr, mask, uid, non_tensor_batch={"uid": uid, "crbc_anchors": anchors})
    assert torch.all(adv[mask == 0] == 0)
    assert adv[0, 0] == adv[0, 1] and adv[1, 2] == adv[1, 4]  # one value per step
    assert adv[0, 3] > 0 > adv[1, 2]  # the success's last step beats the failure's
