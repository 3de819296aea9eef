"""No SQL from data: a log's field names and values and the store's part paths
never become SQL text. A field named as a DuckDB script is data, not a statement, on every read
path (CLI and API), and a field named with a double quote reads back like any other field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crbc_viz.store import LogStore, find_trajectory, ingest, search_steps
from helpers import ROOT, write_jsonl


def evil_names(out: Path) -> list[str]:
    """Field names that, pasted into SQL, would write ``out`` or break quoting."""
    return [
        f'x" FROM (SELECT 1); COPY (SELECT 42 AS pwned) TO \'{out}\'; SELECT 1 AS "y',
        f"x'); COPY (SELECT 1) TO '{out}'; --",
        'a"b',
        "semi;colon",
    ]


def evil_log(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    out = tmp_path / "pwned.csv"
    names = evil_names(out)
    rows = []
    for t in range(3):
        for s in range(2):
            r = {
                "group_id": "g'; DROP TABLE x; --",
                "traj_id": f't"{t}',
                "step_idx": s,
                "reward": float(t == 0 and s == 1),
                "anchor_obs": f"s{s}",
                "action": "a",
                "done": s == 1,
            }
            r.update({n: f"v{t}{s}" for n in names})
            rows.append(r)
    return write_jsonl(tmp_path / "evil.jsonl", rows), out, names


def test_field_names_never_reach_sql(tmp_path):
    log, out, names = evil_log(tmp_path)
    store = tmp_path / "store"
    ingest(store, [log])
    s = LogStore(store)
    b = s.load_batch(group="g'; DROP TABLE x; --")
    for n in names:  # each odd field survives as an ordinary extra column with its values
        assert n in b.steps.columns
        assert sorted(b.steps[n]) == sorted(f"v{t}{k}" for t in range(3) for k in range(2))
    b2 = s.load_batch(group="g'; DROP TABLE x; --", anchor_obs=False, success="mixed")
    assert "anchor_obs" not in b2.steps.columns and b2.num_steps == 6
    assert len(search_steps(store, "s1")) == 3
    assert len(find_trajectory(store, 't"1')) == 2
    assert not out.exists()


@pytest.mark.parametrize(
    "cmd",
    [
        ["info", "--group", "g'; DROP TABLE x; --"],
        ["score", "-e", "crbc", "--out", "{tmp}/o.parquet"],
        ["trends"],
        ["export", "-e", "crbc", "--out", "{tmp}/e.parquet"],
    ],
)
def test_cli_reads_of_a_hostile_store_run_no_sql(tmp_path, cmd):
    log, out, _ = evil_log(tmp_path)
    store = tmp_path / "store"
    ingest(store, [log])
    args = [a.format(tmp=tmp_path) for a in cmd]
    r = subprocess.run(
        [sys.executable, "-m", "crbc_viz", args[0], "--store", str(store), *args[1:]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
