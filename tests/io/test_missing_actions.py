"""A step whose log names no action is identified by its transition (SCHEMA.md, Conventions,
revised 2026-12-05): the same rollouts get the same credit through every path (the file
loaders, the store, the trainer adapters), and the loader says how many steps were inferred.

The hand-built group: two rollouts through a shared start anchor S with different successors.

    a: S -> A -> SUCCESS          b: S -> B -> FAILURE        (no action logged anywhere)

Keyed by transition, S has two actions (to A, to B), each taken once: mu = 1/2 each. CRBC
(ESTIMATORS.md §3, beta = 0.98):

    V(A) = Q(A, ->SUCCESS) = beta * 1 = 0.98          V(B) = Q(B, ->FAILURE) = beta * 0 = 0
    Q(S, ->A) = beta * V(A) = beta^2 = 0.9604         Q(S, ->B) = beta * V(B) = 0
    V(S) = 1/2 * 0.9604 + 1/2 * 0 = 0.4802
    A^inf(S, ->A) = +0.4802, A^inf(S, ->B) = -0.4802
    sigma(S) = sqrt(1/2 * 0.4802^2 + 1/2 * 0.4802^2) = 0.4802  (>= sigma_min)
    credit(S, ->A) = +0.4802 / 0.4802 = +1, credit(S, ->B) = -1
    A and B have one action each: credit 0.

So the step credits are [+1, 0, -1, 0] (a's two steps, then b's). With every action missing
read as one action (the old reading), S has one action and every credit is 0.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crbc_viz.api import score
from crbc_viz.cli import main
from crbc_viz.io import load_rollouts

BETA = 0.98
EXPECTED_CREDIT = [1.0, 0.0, -1.0, 0.0]
EXPECTED_Q = [BETA**2, BETA, 0.0, 0.0]  # Q(S,->A), Q(A,->SUCCESS), Q(S,->B), Q(B,->FAILURE)

ROWS = [
    {
        "group_id": "g",
        "traj_id": "a",
        "step_idx": 0,
        "reward": 0.0,
        "anchor_obs": "S",
        "done": False,
        "success": True,
    },
    {
        "group_id": "g",
        "traj_id": "a",
        "step_idx": 1,
        "reward": 1.0,
        "anchor_obs": "A",
        "done": True,
        "success": True,
    },
    {
        "group_id": "g",
        "traj_id": "b",
        "step_idx": 0,
        "reward": 0.0,
        "anchor_obs": "S",
        "done": False,
        "success": False,
    },
    {
        "group_id": "g",
        "traj_id": "b",
        "step_idx": 1,
        "reward": 0.0,
        "anchor_obs": "B",
        "done": True,
        "success": False,
    },
]


def _write(tmp_path, rows=ROWS, name="four.jsonl"):
    path = tmp_path / name
    if name.endswith(".csv"):
        pd.DataFrame(rows).to_csv(path, index=False)
    elif name.endswith(".parquet"):
        pd.DataFrame(rows).to_parquet(path, index=False)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("name", ["four.jsonl", "four.csv", "four.parquet"])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_log_without_actions_gets_the_hand_computed_credit(tmp_path, name, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    batch = load_rollouts(_write(tmp_path, name=name))
    res = score(batch, "crbc", backend=backend, beta=BETA)
    np.testing.assert_allclose(res.credit, EXPECTED_CREDIT, atol=1e-9)
    np.testing.assert_allclose(res.q_value, EXPECTED_Q, atol=1e-9)
    assert res.diagnostics["gated_fraction"] < 1.0  # S is not gated: it has two actions


def test_the_columnar_lane_and_the_schema_path_agree(tmp_path):
    """The JSONL file is clean (the columnar lane reads it); the CSV goes through the schema
    path: both infer the same actions."""
    a = load_rollouts(_write(tmp_path))
    assert a.arrow_steps is not None  # the columnar lane
    b = load_rollouts(_write(tmp_path, name="four.csv"))
    np.testing.assert_allclose(score(a, "crbc").credit, score(b, "crbc").credit, atol=1e-12)


def test_loader_store_and_adapter_give_equal_credit(tmp_path):
    from crbc_viz.integrations._core import canonical_steps, score_steps
    from crbc_viz.store import ingest, open_store

    path = _write(tmp_path)
    res = score(load_rollouts(path), "crbc")
    np.testing.assert_allclose(res.credit, EXPECTED_CREDIT, atol=1e-9)
    loader = res.advantage  # w_G * A^G + w_S * credit: what an adapter hands the trainer

    ingest(tmp_path / "store", [path])
    out = tmp_path / "scored.csv"
    assert main(["score", "--store", str(tmp_path / "store"), "-o", str(out)]) == 0
    scored = pd.read_csv(out).sort_values(["traj_id", "step_idx"])
    np.testing.assert_allclose(scored["credit"], EXPECTED_CREDIT, atol=1e-9)
    stored = scored["advantage"].to_numpy()
    with open_store(tmp_path / "store") as st:
        from_store = score(st.load_batch(), "crbc").advantage

    steps = canonical_steps(
        [r["group_id"] for r in ROWS],
        [r["traj_id"] for r in ROWS],
        [r["step_idx"] for r in ROWS],
        [r["anchor_obs"] for r in ROWS],
        [r["reward"] for r in ROWS],
        success=[r["success"] for r in ROWS],
    )
    adapter = score_steps(steps).numpy()
    for got in (stored, from_store, adapter):
        np.testing.assert_allclose(got, loader, atol=1e-9)


def test_info_says_how_many_actions_were_inferred(tmp_path, capsys):
    rows = [dict(r) for r in ROWS]
    rows[0]["action"] = "push left"  # one logged, three inferred
    path = _write(tmp_path, rows)
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["actions_inferred"] == 3
    assert main(["info", str(path)]) == 0
    assert "3 of 4 steps" in capsys.readouterr().out


def test_only_missing_actions_are_inferred_and_names_never_collide(tmp_path):
    """Per step: a logged action stays and only the missing ones are inferred; a logged action
    whose text spells an inferred name is still another action. b's first step logs the very
    name a's inferred action at S has, so merging by text would make S one action."""
    from crbc_viz.graph import build_graph
    from crbc_viz.io.actions import SUCCESS_ACTION, inferred_name
    from crbc_viz.io.anchors import anchor_hash64

    rows = [dict(r) for r in ROWS]
    rows[2]["action"] = inferred_name(anchor_hash64("A"))  # b at S: the name a's inferred action has
    rows[3]["action"] = SUCCESS_ACTION  # b at B: a logged action that spells ->SUCCESS
    g = build_graph(load_rollouts(_write(tmp_path, rows)))
    # S: a's inferred "to A" and b's logged text are two actions; the credit is the hand one.
    assert g.node_num_actions.tolist() == [2, 1, 1]
    assert len(set(g.step_action.tolist())) == 4
    np.testing.assert_allclose(score(g, "crbc").credit, EXPECTED_CREDIT, atol=1e-9)


def test_an_empty_action_is_a_logged_action(tmp_path):
    """ "" is what the log says (one action for both rollouts at S): not inferred."""
    rows = [dict(r, action="") for r in ROWS]
    res = score(load_rollouts(_write(tmp_path, rows)), "crbc")
    np.testing.assert_allclose(res.credit, 0.0, atol=1e-12)


def test_a_roll_dump_without_actions_gets_the_adapters_credit():
    """ROLL's step-wise dump (written by ROLL's own code, tests/fixtures/roll_real) logs no
    action: the importer leaves it missing (not the response text), so the loader keys steps by
    their transition as ROLL's training-time adapter does, and both give the same advantage.
    Before, every anchor looked like one action there: gated_fraction 1, every credit 0."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from crbc_viz.integrations.roll import response_level_advantages
    from crbc_viz.io.actions import missing_actions
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.importers import expand_sources, import_source
    from helpers import ROOT

    (src,) = expand_sources([ROOT / "tests/fixtures/roll_real/rollout_dump/rollout_dump_data.step_1.jsonl"])
    b = build_batch(import_source(src).raw)
    assert missing_actions(b).all()
    res = score(b, "crbc")
    assert res.diagnostics["gated_fraction"] < 1.0 and np.abs(res.credit).max() > 0.5
    st = b.steps
    nt = {
        "traj_group_id": st["group_id"].to_numpy(object),
        "traj_id": st["traj_id"].to_numpy(object),
        "step": st["step_idx"].to_numpy(np.int64),
        "state_hash": st["anchor_key"].to_numpy(object),
        "step_scores": st["reward"].to_numpy(np.float64),
        "success": b.traj_success[b.step_traj],
    }
    got = response_level_advantages(SimpleNamespace(batch={}, non_tensor_batch=nt))
    np.testing.assert_allclose(got.numpy(), res.advantage, atol=1e-6, rtol=0)


def test_transition_codes_equal_a_step_by_step_reading():
    """`transition_codes` against the rule read step by step in plain Python: a step's action is
    its next step's anchor, or SUCCESS / FAILURE after its trajectory's last step; ids numbered
    in order of first occurrence (random batches, empty trajectories and repeated hashes too)."""
    from crbc_viz.io.actions import FAILURE_ACTION, SUCCESS_ACTION, inferred_name, transition_codes

    rng = np.random.default_rng(5)
    for _ in range(200):
        lens = rng.integers(0, 6, rng.integers(1, 12))
        off = np.r_[0, np.cumsum(lens)]
        pool = rng.integers(0, 2**64 - 1, rng.integers(1, 8), dtype=np.uint64)
        h = rng.choice(pool, int(off[-1]))
        ok = rng.random(len(lens)) < 0.5
        want_names, want_codes = [], []
        for t in range(len(lens)):
            for s in range(off[t], off[t + 1]):
                name = (
                    inferred_name(h[s + 1])
                    if s + 1 < off[t + 1]
                    else (SUCCESS_ACTION if ok[t] else FAILURE_ACTION)
                )
                if name not in want_names:
                    want_names.append(name)
                want_codes.append(want_names.index(name))
        codes, names = transition_codes(h, off, ok)
        assert codes.tolist() == want_codes and list(names) == want_names
