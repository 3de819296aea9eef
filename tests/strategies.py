"""Shared test data builders: canonical rollout rows, the optional per-estimator signals, and
the hypothesis strategy of valid step tables (used by the estimator properties and the fuzzer)."""

from __future__ import annotations

import random

from hypothesis import strategies as st


def with_signals(rows: list[dict], seed: int = 0) -> list[dict]:
    """Add every optional per-estimator field (SCHEMA.md) so that all estimators can run."""
    rng = random.Random(seed)
    lens: dict = {}
    for r in rows:
        k = (r["group_id"], r["traj_id"])
        lens[k] = max(lens.get(k, 0), r["step_idx"] + 1)
    out = []
    for r in rows:
        n = lens[(r["group_id"], r["traj_id"])]
        later = list(range(r["step_idx"] + 1, n))
        edges = [{"to": t, "type": rng.choice(["support", "failed"])} for t in later[:2]]
        out.append(
            dict(
                r,
                gold_logprob=-rng.uniform(0.1, 5.0),
                turn_evidence=rng.uniform(-1, 1),
                judge_score=rng.choice([0.0, 1.0, 2.0]),
                rubric_active=rng.sample(["E1", "X1", "I1"], rng.randint(0, 2)),
                rubric=[
                    {"id": "E1", "category": "evidence"},
                    {"id": "X1", "category": "execution"},
                    {"id": "I1", "category": "invalidity"},
                ],
                influence_edges=edges,  # a failed-use edge implies is_error (IAPO, SCHEMA.md)
                is_error=any(e["type"] == "failed" for e in edges) or rng.random() < 0.3,
                direct_inputs=rng.randint(0, 2),
                num_tokens=rng.randint(1, 50),
            )
        )
    return out


def rollout(group, traj, anchors, actions, success, *, done=True, reward_last=None):
    n = len(anchors)
    rew = float(success) if reward_last is None else reward_last
    return [
        {
            "group_id": group,
            "traj_id": traj,
            "step_idx": i,
            "anchor_obs": anchors[i],
            "action": actions[i],
            "reward": rew if i == n - 1 else 0.0,
            "done": bool(done and i == n - 1),
            "success": bool(success),
        }
        for i in range(n)
    ]


@st.composite
def step_tables(draw, max_groups=3, max_trajs=4, max_len=5, signals=True):
    """Valid step tables: groups of rollouts over a small anchor alphabet (so anchors merge,
    with revisits and self-loops), random success / truncation and optional rewards."""
    rows = []
    n_groups = draw(st.integers(1, max_groups))
    for g in range(n_groups):
        n_trajs = draw(st.integers(1, max_trajs))
        for t in range(n_trajs):
            n = draw(st.integers(1, max_len))
            anchors = draw(st.lists(st.sampled_from(["A", "B", "C", "D"]), min_size=n, max_size=n))
            actions = draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=n, max_size=n))
            ok = draw(st.booleans())
            done = ok or draw(st.booleans())
            rew = draw(st.sampled_from([None, 0.0, 1.0, -0.5, 3.0]))
            rows += rollout(f"g{g}", f"t{t}", anchors, actions, ok, done=done, reward_last=rew)
    if signals:
        rows = with_signals(rows, seed=draw(st.integers(0, 3)))
    return rows
