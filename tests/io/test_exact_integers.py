"""Whole numbers past 2**53 keep their exact value through validation, whatever the reader, when
the field is missing on some rows: a column of numbers with gaps held as float64 (what a pandas
frame makes of it) rounds 2**53 + 1 to 2**53, which silently merged two training steps into one
group. The expected values are the literals written into each file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.io import LoadError, load_rollouts

BIG = 2**53  # 2**53 + 1 is the first integer float64 cannot hold

ROWS = [
    {"group_id": "g", "traj_id": "a", "step_idx": 0, "reward": 1.0, "train_step": BIG + 1},
    {"group_id": "g", "traj_id": "b", "step_idx": 0, "reward": 0.0, "train_step": BIG},
    {"group_id": "g", "traj_id": "c", "step_idx": 0, "reward": 0.0},  # train_step missing: 0
]


def _write(tmp_path, fmt: str, rows) -> str:
    path = tmp_path / f"log.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        names = list(dict.fromkeys(k for r in rows for k in r))
        pq.write_table(pa.table({n: [r.get(n) for r in rows] for n in names}), path)
    return str(path)


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_train_steps_past_2_53_with_a_gap_stay_exact_and_apart(fmt, tmp_path):
    batch = load_rollouts(_write(tmp_path, fmt, ROWS))
    by_traj = dict(zip(batch.steps["traj_id"], batch.steps["train_step"]))
    assert by_traj == {"a": BIG + 1, "b": BIG, "c": 0}
    assert sorted(batch.groups["train_step"].tolist()) == [0, BIG, BIG + 1]  # three groups, not two


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_a_bad_value_past_2_53_is_named_as_logged(fmt, tmp_path):
    rows = [dict(ROWS[0], done=BIG + 1), dict(ROWS[1])]
    with pytest.raises(LoadError) as err:
        load_rollouts(_write(tmp_path, fmt, rows))
    assert f"expected true/false, got int {BIG + 1}" in str(err.value)
