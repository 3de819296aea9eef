"""Estimator robustness: documented edge-case values (ESTIMATORS.md §1, §2.3, §3.9),
finite results on every generated input, and invariance to row order, trajectory order and
id renaming, for every registered estimator."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crbc_viz
from crbc_viz import estimators
from crbc_viz.estimators import MissingSignalError
from crbc_viz.io import load_rollouts
from strategies import rollout, step_tables, with_signals  # noqa: F401

KEY = ["group_id", "traj_id", "step_idx"]
COLS = ["value", "q_value", "credit", "advantage"]
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(tmp_path: Path, rows: list[dict], name: str = "x.jsonl"):
    return load_rollouts(write(tmp_path / name, rows))


def score_all(batch, **params) -> dict:
    """Every registered estimator's result (numpy reference); signal-less ones must run."""
    graph = crbc_viz.build_graph(batch)
    out = {}
    for spec in estimators.specs():
        kw = {k: v for k, v in params.get(spec.name, {}).items()}
        try:
            out[spec.name] = crbc_viz.score(graph, spec.name, backend="numpy", **kw)
        except MissingSignalError:
            assert spec.requires, f"{spec.name} has no required signal but raised MissingSignalError"
    return out


def assert_finite(results: dict, where: str = "") -> None:
    for name, r in results.items():
        for col in ("credit", "advantage"):
            arr = np.asarray(getattr(r, col), dtype=float)
            assert np.isfinite(arr).all(), f"{where} {name}.{col} not finite: {arr}"
        for col in ("value", "q_value"):
            arr = np.asarray(getattr(r, col), dtype=float)
            assert not np.isinf(arr).any(), f"{where} {name}.{col} infinite"
        res = r.diagnostics.get("closure_residual")
        if res is not None:
            assert np.isfinite(res) and res < 1e-6, f"{where} {name} closure residual {res}"


# ---------------------------------------------------------------- documented edge cases
def test_single_rollout_group(tmp_path):
    rows = rollout("g", "only", ["s0", "s1"], ["a", "b"], True)
    res = score_all(load(tmp_path, with_signals(rows)))
    assert len(res) == len(estimators.names())
    assert_finite(res, "single rollout")
    # §1: a group of size 1 gets mean 0 and std 1, so A^G = R (no centering).
    np.testing.assert_allclose(res["grpo"].advantage, 1.0 / (1.0 + 1e-6))
    # §2.3 / §3.9: singleton anchors and single-action anchors give no step term.
    for name in ("crbc", "visit_local", "gigpo"):
        assert np.all(res[name].credit == 0), (name, res[name].credit)


@pytest.mark.parametrize("ok", [True, False])
def test_all_success_and_all_failure_groups(tmp_path, ok):
    rows = (
        rollout("g", "r0", ["s0", "s1"], ["a", "b"], ok)
        + rollout("g", "r1", ["s0", "s2", "s3"], ["c", "d", "e"], ok)
        + rollout("g", "r2", ["s0", "s1"], ["a", "b"], ok)
    )
    res = score_all(load(tmp_path, with_signals(rows)))
    assert_finite(res, f"all {'success' if ok else 'failure'}")
    np.testing.assert_allclose(res["grpo"].advantage, 0.0, atol=1e-12)  # §1: std = 0 → A = 0
    if not ok:
        # §3.9: all-failure group: V ≡ 0, A^S ≡ 0, A^G = 0 → no signal at all.
        for name in ("crbc", "visit_local"):
            np.testing.assert_allclose(res[name].node_value, 0.0, atol=1e-12)
            np.testing.assert_allclose(res[name].advantage, 0.0, atol=1e-12)
    else:
        # §3.9: all-success with beta < 1: A^G = 0 but the shorter route is preferred.
        a = res["crbc"].pair_credit
        g = res["crbc"].graph
        acts = {str(g.action_names[g.pair_action[p]]): a[p] for p in range(len(a))}
        assert acts["a"] > acts["c"]


def test_single_step_and_self_loops(tmp_path):
    single = rollout("g", "r0", ["s"], ["a"], True) + rollout("g", "r1", ["s"], ["b"], False)
    assert_finite(score_all(load(tmp_path, with_signals(single), "one.jsonl")), "single step")
    loops = rollout("g", "r0", ["s"] * 4, ["stay", "stay", "stay", "go"], True) + rollout(
        "g", "r1", ["s"] * 3, ["stay", "stay", "stay"], False
    )
    res = score_all(load(tmp_path, with_signals(loops), "loops.jsonl"))
    assert_finite(res, "self loops")
    assert crbc_viz.build_graph(load(tmp_path, loops, "l2.jsonl")).num_nodes == 1


@pytest.mark.parametrize("beta", [0.98, 1.0])
def test_cycle_whose_only_exit_is_truncation(tmp_path, beta):
    rows = (
        rollout("g", "r0", ["s0", "s1", "s0", "s1"], ["a", "b", "a", "b"], False, done=False)
        + rollout("g", "r1", ["s0", "s1", "s0"], ["a", "b", "a"], False, done=False)
        + rollout("g", "r2", ["s0", "s2"], ["c", "d"], True)
    )
    b = load(tmp_path, with_signals(rows))
    assert b.traj_truncated.tolist() == [True, True, False]
    res = score_all(b, crbc={"beta": beta}, visit_local={"beta": beta})
    assert_finite(res, f"cycle beta={beta}")
    assert "closure_residual" in res["crbc"].diagnostics
    only_loops = rows[:7]  # every rollout loops and is truncated: all-failure
    res = score_all(
        load(tmp_path, with_signals(only_loops), "loops.jsonl"),
        crbc={"beta": beta},
        visit_local={"beta": beta},
    )
    assert_finite(res, "loops only")
    np.testing.assert_allclose(res["crbc"].advantage, 0.0, atol=1e-12)


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_beta_one_on_the_toy_group(backend):
    """β = 1 is inside every twin's bounds (ESTIMATORS.md §3.9): a twin whose library is
    installed must score it, and equal the numpy reference; only a missing library skips."""
    pytest.importorskip(backend)
    b = load_rollouts(Path(__file__).resolve().parents[2] / "sample_rollouts/toy/toy_group.jsonl")
    r = crbc_viz.score(b, "crbc", backend="numpy", beta=1.0)
    assert np.isfinite(r.advantage).all() and r.diagnostics["closure_residual"] < 1e-9
    o = crbc_viz.score(b, "crbc", backend=backend, device="cpu", beta=1.0)
    np.testing.assert_allclose(o.advantage, r.advantage, rtol=0, atol=1e-9)


def test_huge_group(tmp_path):
    rng = random.Random(1)
    rows = []
    for t in range(1500):
        n = rng.randint(1, 6)
        path = [f"s{rng.randint(0, 8)}" for _ in range(n)]
        rows += rollout(
            "big",
            f"r{t}",
            path,
            [rng.choice("abc") for _ in range(n)],
            rng.random() < 0.4,
            done=rng.random() < 0.9,
        )
    res = score_all(load(tmp_path, with_signals(rows)))
    assert_finite(res, "huge group")


# ---------------------------------------------------------------- hypothesis
def frame_of(results: dict) -> pd.DataFrame:
    frames = [r.to_frame() for r in results.values()]
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["estimator", *KEY], kind="stable").reset_index(drop=True)


def assert_same(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    assert a[["estimator", *KEY]].equals(b[["estimator", *KEY]]), what
    for col in COLS:
        np.testing.assert_allclose(
            a[col].to_numpy(float),
            b[col].to_numpy(float),
            atol=1e-9,
            rtol=1e-9,
            equal_nan=True,
            err_msg=f"{what}: column {col}",
        )


@SETTINGS
@given(rows=step_tables(), seed=st.integers(0, 2**16))
def test_permuting_rows_and_trajectories_changes_nothing(tmp_path, rows, seed):
    ref = score_all(load(tmp_path, rows, "a.jsonl"))
    assert_finite(ref, "generated")
    rng = random.Random(seed)
    shuffled = rows[:]
    rng.shuffle(shuffled)
    assert_same(frame_of(ref), frame_of(score_all(load(tmp_path, shuffled, "b.jsonl"))), "row shuffle")
    # Whole trajectories (and groups) in another order, rows kept contiguous.
    trajs: dict = {}
    for r in rows:
        trajs.setdefault((r["group_id"], r["traj_id"]), []).append(r)
    keys = list(trajs)
    rng.shuffle(keys)
    reordered = [r for k in keys for r in trajs[k]]
    assert_same(frame_of(ref), frame_of(score_all(load(tmp_path, reordered, "c.jsonl"))), "trajectory order")


@SETTINGS
@given(rows=step_tables(), seed=st.integers(0, 2**16))
def test_renaming_ids_changes_nothing(tmp_path, rows, seed):
    rng = random.Random(seed)
    gids = sorted({r["group_id"] for r in rows})
    tids = sorted({r["traj_id"] for r in rows})
    new_g = dict(zip(gids, rng.sample([f"G{i}-<x>" for i in range(100)], len(gids))))
    new_t = dict(zip(tids, rng.sample([f"\u202e{i}" for i in range(100)], len(tids))))
    renamed = [dict(r, group_id=new_g[r["group_id"]], traj_id=new_t[r["traj_id"]]) for r in rows]
    a = frame_of(score_all(load(tmp_path, rows, "a.jsonl")))
    b = frame_of(score_all(load(tmp_path, renamed, "b.jsonl")))
    inv_g = {v: k for k, v in new_g.items()}
    inv_t = {v: k for k, v in new_t.items()}
    b["group_id"] = b["group_id"].map(inv_g)
    b["traj_id"] = b["traj_id"].map(inv_t)
    b = b.sort_values(["estimator", *KEY], kind="stable").reset_index(drop=True)
    assert_same(a, b, "renamed ids")


@SETTINGS
@given(rows=step_tables(max_groups=2, max_trajs=6, max_len=7), beta=st.sampled_from([0.5, 0.98, 1.0]))
def test_group_relative_credits_stay_finite(tmp_path, rows, beta):
    res = score_all(load(tmp_path, rows), crbc={"beta": beta}, visit_local={"beta": beta})
    assert len(res) == len(estimators.names())
    assert_finite(res, f"beta={beta}")
