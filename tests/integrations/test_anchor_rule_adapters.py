"""One anchor rule, three ways in: ``crbc-viz score`` / ``info`` with ``--anchor-rule``, a trainer
adapter's ``anchor_rule=`` keyword (verl-agent's batch shape: copies appended, rows shuffled) and
the app's preview (`crbc_viz.analysis.matching.rule_preview`, what the Graph page's anchor panel
shows) give the same credit and the same before/after numbers for every rule."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from crbc_viz.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from test_anchor_merge import rows  # noqa: E402

#: (command-line options, the adapter's ``anchor_rule=``)
RULES = {
    "drop": (["--anchor-drop", r"\s*session=\w+"], {"drop": [r"\s*session=\w+"]}),
    "rtmc": (["--anchor-rule", "rtmc"], "rtmc"),
    "similar": (
        ["--anchor-rule", "similar", "--anchor-threshold", "0.85"],
        {"name": "similar", "threshold": 0.85},
    ),
    "tfidf": (["--anchor-rule", "tfidf", "--anchor-threshold", "0.5"], {"name": "tfidf", "threshold": 0.5}),
    "similar-batch": (
        [
            "--anchor-rule",
            "similar",
            "--anchor-threshold",
            "0.8",
            "--anchor-scope",
            "batch",
            "--anchor-cluster",
            "components",
        ],
        {"name": "similar", "threshold": 0.8, "scope": "batch", "cluster": "components"},
    ),
}


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return p


def _cli_advantage(log, opts, out) -> pd.Series:
    assert main(["score", str(log), *opts, "--backend", "numpy", "-o", str(out)]) == 0
    return pd.read_csv(out).set_index(["group_id", "traj_id", "step_idx"])["advantage"]


def _adapter_advantage(rs, rule, seed=0) -> tuple[np.ndarray, list]:
    from crbc_viz.integrations.verl_agent import compute_advantage

    rng = np.random.default_rng(seed)
    idx = np.r_[np.arange(len(rs)), rng.integers(0, len(rs), 7)]
    rng.shuffle(idx)
    tlr = torch.tensor([[rs[i]["reward"]] for i in idx], dtype=torch.float64)
    mask = torch.ones_like(tlr)

    def col(f, dtype=object):
        return np.array([rs[i][f] for i in idx], dtype=dtype)

    adv, _ = compute_advantage(
        tlr,
        mask,
        col("anchor_obs"),
        col("group_id"),
        col("traj_id"),
        col("step_idx", np.int64),
        actions=col("action"),
        success=np.array([bool(rs[i].get("success", _ok(rs, rs[i]))) for i in idx]),
        anchor_rule=rule,
    )
    return adv[:, 0].numpy(), [(rs[i]["group_id"], rs[i]["traj_id"], rs[i]["step_idx"]) for i in idx]


def _ok(rs, r) -> bool:
    return any(x.get("success") for x in rs if (x["group_id"], x["traj_id"]) == (r["group_id"], r["traj_id"]))


@pytest.mark.parametrize("name", list(RULES))
def test_cli_adapter_and_app_agree(log, tmp_path, capsys, name):
    from crbc_viz.analysis.matching import rule_preview
    from crbc_viz.io import load_rollouts
    from crbc_viz.io.anchor_rules import make_rule

    opts, spec = RULES[name]
    rs = rows()
    cli = _cli_advantage(log, opts, tmp_path / "rule.csv")
    exact = _cli_advantage(log, [], tmp_path / "exact.csv")
    assert not np.allclose(cli.to_numpy(), exact.to_numpy())  # the rule changes the credit
    adv, keys = _adapter_advantage(rs, spec)
    np.testing.assert_allclose(adv, [cli[k] for k in keys], atol=1e-12, rtol=0)

    capsys.readouterr()
    assert main(["info", str(log), *opts, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["anchor_rule"]
    rule = make_rule(**spec) if isinstance(spec, dict) else make_rule(spec)
    app = rule_preview(load_rollouts(str(log)), rule)
    assert app == info
    assert info["anchors_merged"] != 0 and info["steps_changed"] > 0


def test_adapter_rule_does_not_leak(log):
    """After an adapter call with a rule, the next call without one keys exactly."""
    from crbc_viz.io.anchor_rules import active

    rs = rows()
    a0, _ = _adapter_advantage(rs, None)
    _adapter_advantage(rs, "rtmc")
    assert active().exact
    a1, _ = _adapter_advantage(rs, None)
    np.testing.assert_array_equal(a0, a1)


def _rllm_groups(rs):
    from types import SimpleNamespace

    out = []
    for g in dict.fromkeys(r["group_id"] for r in rs):
        trajs = []
        for t in dict.fromkeys(r["traj_id"] for r in rs if r["group_id"] == g):
            mine = sorted(
                (r for r in rs if (r["group_id"], r["traj_id"]) == (g, t)), key=lambda r: r["step_idx"]
            )
            steps = [
                SimpleNamespace(
                    observation=r["anchor_obs"], input=None, action=r["action"], reward=r["reward"]
                )
                for r in mine
            ]
            trajs.append(SimpleNamespace(uid=t, reward=float(_ok(rs, mine[0])), steps=steps, keys=mine))
        out.append(SimpleNamespace(group_id=g, trajectories=trajs))
    return out


@pytest.mark.parametrize("name", ["rtmc", "similar", "tfidf", "similar-batch"])
def test_rllm_adapter_agrees_with_the_cli(log, tmp_path, name):
    """rLLM's adapter assembles its steps on another path (one row per step object)."""
    from crbc_viz.integrations.rllm import assign_step_advantages

    opts, spec = RULES[name]
    cli = _cli_advantage(log, opts, tmp_path / "rule.csv")
    groups = _rllm_groups(rows())
    assign_step_advantages(groups, anchor_rule=spec)
    got = [s.advantage for g in groups for t in g.trajectories for s in t.steps]
    want = [
        cli[(r["group_id"], r["traj_id"], r["step_idx"])]
        for g in groups
        for t in g.trajectories
        for r in t.keys
    ]
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["drop", "rtmc", "similar", "tfidf", "similar-batch"])
def test_verl_adapter_agrees_with_the_cli(log, tmp_path, name):
    """verl's rows are whole trajectories (the path TRL's adapter shares): each step is one run
    of the response mask, here tokens 0 and 2 of a row."""
    from crbc_viz.integrations.verl import compute_advantage

    opts, spec = RULES[name]
    cli = _cli_advantage(log, opts, tmp_path / "rule.csv")
    rs = rows()
    trajs = list(dict.fromkeys((r["group_id"], r["traj_id"]) for r in rs))
    by = {
        k: sorted((r for r in rs if (r["group_id"], r["traj_id"]) == k), key=lambda r: r["step_idx"])
        for k in trajs
    }
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * len(trajs), dtype=torch.float64)
    tlr = torch.zeros_like(mask)
    for i, k in enumerate(trajs):
        tlr[i, 0], tlr[i, 2] = by[k][0]["reward"], by[k][1]["reward"]
    nt = {
        "uid": np.array([g for g, _ in trajs], dtype=object),
        "crbc_anchors": np.array([[r["anchor_obs"] for r in by[k]] for k in trajs], dtype=object),
        "crbc_actions": np.array([[r["action"] for r in by[k]] for k in trajs], dtype=object),
        "crbc_success": np.array([_ok(rs, by[k][0]) for k in trajs]),
    }
    adv, _ = compute_advantage(tlr, mask, non_tensor_batch=nt, anchor_rule=spec)
    got = adv[:, [0, 2]].numpy().ravel()
    want = [cli[(g, t, s)] for g, t in trajs for s in (0, 1)]
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
