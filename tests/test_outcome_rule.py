"""The success / truncation rule (SCHEMA.md, "Success of a trajectory"; docs/schema.md, "Success and
truncation") is one rule on every path: `crbc_viz.outcome_rule` itself, a file read by the schema
path (`load_rollouts`, which writes the notes), and `batch_from_columns` deriving outcomes from
rows (the columnar lane, the generator, a library caller). Each is checked against a plain-Python
reading of the spec, trajectory by trajectory, on random logs: some rows logging ``success``,
``done`` or ``episode_return`` and others not, or a column absent.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from crbc_viz import load_rollouts
from crbc_viz.data import batch_from_columns
from crbc_viz.outcome_rule import outcome_rule

THRESHOLD = 0.5


def oracle(rows: list[dict]) -> tuple[bool, bool, float]:
    """(success, truncated, return) of one trajectory's rows (in step order), read from the spec:
    return = the last logged episode_return, else the sum of rewards; success = the last logged
    success, else return > threshold; truncated = the last row logs done = false; a truncated
    trajectory fails unless its rows' last logged success is true."""
    ret = sum(r["reward"] for r in rows)
    for r in rows:
        if r.get("episode_return") is not None:
            ret = r["episode_return"]
    logged = [r["success"] for r in rows if r.get("success") is not None]
    success = logged[-1] if logged else ret > THRESHOLD
    truncated = rows[-1].get("done") is False
    if truncated and not (logged and logged[-1]):
        success = False
    return success, truncated, ret


def random_log(rng: random.Random, full: bool) -> list[list[dict]]:
    """Trajectories of 1-4 rows; each optional column present or not for the whole log and, unless
    ``full``, missing (None) on some rows."""
    cols = {c: rng.random() < 0.7 for c in ("success", "done", "episode_return")}
    trajs = []
    for _ in range(rng.randint(1, 8)):
        rows = []
        for _ in range(rng.randint(1, 4)):
            r = {"reward": rng.choice([0.0, 0.25, 1.0, -1.0])}
            for c, on in cols.items():
                if not on:
                    continue
                gone = not full and rng.random() < 0.35
                value = (
                    rng.choice([True, False]) if c != "episode_return" else rng.choice([0.0, 0.4, 0.9, -2.0])
                )
                r[c] = None if gone else value
            rows.append(r)
        trajs.append(rows)
    return trajs


def _flat(trajs, name):
    values = [r.get(name) for rows in trajs for r in rows]
    logged = np.array([v is not None for v in values], dtype=bool)
    fill = 0.0 if name in ("episode_return", "reward") else False
    return np.array([fill if v is None else v for v in values]), logged


def _expected(trajs):
    got = [oracle(rows) for rows in trajs]
    return [g[0] for g in got], [g[1] for g in got], [g[2] for g in got]


@pytest.mark.parametrize("seed", range(300))
def test_the_rule_is_the_spec(seed):
    trajs = random_log(random.Random(seed), full=False)
    offsets = np.cumsum([0] + [len(rows) for rows in trajs])
    present = {c for rows in trajs for r in rows for c in r}
    got = outcome_rule(
        offsets,
        _flat(trajs, "reward")[0],
        threshold=THRESHOLD,
        **{c: _flat(trajs, c) for c in ("success", "done", "episode_return") if c in present},
    )
    success, truncated, ret = _expected(trajs)
    assert got.success().tolist() == success
    assert got.truncated.tolist() == truncated
    assert got.ret.tolist() == ret


def _rows(trajs) -> list[dict]:
    out = []
    for t, rows in enumerate(trajs):
        for k, r in enumerate(rows):
            row = {"run_id": "r", "train_step": 0, "group_id": "g", "traj_id": f"t{t}", "step_idx": k}
            row.update(anchor_obs=f"s{k}", action="a")
            row.update({c: v for c, v in r.items() if v is not None})
            out.append(row)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_a_file_read_by_the_schema_path_follows_the_spec(seed, tmp_path):
    trajs = random_log(random.Random(1000 + seed), full=False)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(trajs)))
    b = load_rollouts(str(path), success_threshold=THRESHOLD)
    success, truncated, ret = _expected(trajs)
    # One group; its trajectories in the order they first appear (t0, t1, ...).
    assert b.traj_success.tolist() == success
    assert b.traj_truncated.tolist() == truncated
    assert b.traj_return.tolist() == ret


@pytest.mark.parametrize("seed", range(80))
@pytest.mark.parametrize("kind", ["arrow", "frame"])
def test_rows_built_into_a_batch_follow_the_spec(seed, kind):
    trajs = random_log(random.Random(2000 + seed), full=True)
    rows = _rows(trajs)
    cols = {c: [r.get(c) for r in rows] for c in dict.fromkeys(k for r in rows for k in r)}
    if kind == "arrow":
        steps = pa.table(cols)
    else:
        import pandas as pd

        steps = pd.DataFrame(cols)
    b = batch_from_columns(
        steps, step_anchor_hash=np.arange(1, len(rows) + 1, dtype=np.uint64), success_threshold=THRESHOLD
    )
    success, truncated, ret = _expected(trajs)
    assert b.traj_success.tolist() == success
    assert b.traj_truncated.tolist() == truncated
    assert b.traj_return.tolist() == ret
