"""Values that are not what the field says, in trainers' files, through the real command
(``crbc-viz ingest``, then ``info`` / ``score --store``): exit 0 with the value read by the one
rule, or exit 2 with one message naming the file, line and field; never a traceback, nothing
half-written.

- verl ``score`` ``'False'`` / ``[]`` / ``{}`` / an integer past the float range: a problem
  naming the line and ``score`` (in a file keyed by verl 0.9's ``uid`` it was numpy's
  ValueError / TypeError);
- a lone surrogate (``"\\ud800"``) in an rLLM action or observation, or in a ROLL agent-native
  message: replaced by U+FFFD, visibly (a note counts them), as the readers do with a file's
  own strings (it was pyarrow's UnicodeEncodeError);
- an rLLM trajectory ``name`` that is a list: a problem naming it (it was ``unhashable type``);
- an ms-swift ``step`` past int64: a problem naming the line (it was cast to a wrong number).

Each input is a trainer's own fixture file (tests/fixtures/*) with one value changed here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"


def run_cli(*args: str):
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def refused(path, fmt, store, *needles):
    """``ingest`` exits 2 with one problem line holding every needle; the store holds no source."""
    proc = run_cli("ingest", str(path), "--store", str(store), "--format", fmt, "--quiet")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    err = proc.stderr[proc.stderr.index("error:") :].strip().splitlines()
    assert err[0] == "error: 1 problem in input:" and len(err) == 2, err
    for n in needles:
        assert n in err[1], (n, err[1])
    assert not list((store / "manifest").glob("*.json")) if (store / "manifest").exists() else True


def accepted(path, fmt, store) -> str:
    """``ingest``, ``info --store`` and ``score --store`` exit 0; returns ingest's stderr."""
    proc = run_cli("ingest", str(path), "--store", str(store), "--format", fmt)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for argv in (
        ("info", "--store", str(store)),
        ("score", "--store", str(store), "-o", str(store.parent / "o.csv")),
    ):
        p = run_cli(*argv)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (argv, p.stderr[-3000:])
    return proc.stderr


def _verl_keyed(tmp_path, score):
    """verl's rollout_data_dir lines (tests/fixtures/verl_run) with verl 0.9's TransferQueue
    ``uid`` (``{uid}_{session}_{index}``), line 2's score replaced."""
    rows = [json.loads(x) for x in (FIX / "verl_run" / "rollout" / "7.jsonl").read_text().splitlines()]
    rows = [dict(r, uid=f"p{k // 2}_{k % 2}_0") for k, r in enumerate(rows)]
    rows[1]["score"] = score
    p = tmp_path / "run" / "rollout" / "7.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize(
    "score,shown",
    [
        ("False", "expected a number, got str 'False'"),
        ([], "expected a number, got list []"),
        ({"acc": 1}, "expected a number, got dict"),
        pytest.param(10**400, "expected a finite number, got an integer too large", id="int-past-float"),
    ],
)
def test_verl_score_that_is_not_a_number_is_one_line(tmp_path, score, shown):
    refused(_verl_keyed(tmp_path, score), "verl", tmp_path / "store", "7.jsonl:line 2: field 'score'", shown)


def test_verl_score_written_as_the_text_of_a_number_is_the_number(tmp_path):
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.importers import expand_sources, import_source

    p = _verl_keyed(tmp_path, "0.5")
    accepted(p, "verl", tmp_path / "store")
    (src,) = expand_sources([p], "verl")
    b = build_batch(import_source(src).raw)
    assert 0.5 in set(b.traj_return.tolist())


def _rllm(tmp_path, change):
    """rLLM episodes (tests/fixtures/rllm_run, rLLM's Episode JSON) with ``change(episode)``
    applied to the first."""
    d = tmp_path / "run" / "step_2"
    shutil.copytree(FIX / "rllm_run" / "step_2", d)
    ep = json.loads((d / "task-9_0.json").read_text())
    change(ep)
    (d / "task-9_0.json").write_text(json.dumps(ep))  # "\ud800" is written as its JSON escape
    return d.parent


@pytest.mark.parametrize("field", ["action", "observation", "model_response"])
def test_rllm_lone_surrogate_is_replaced_visibly(tmp_path, field):
    def change(ep):
        ep["trajectories"][0]["steps"][0][field] = "go\ud800left"

    root = _rllm(tmp_path, change)
    err = accepted(root, "rllm", tmp_path / "store")
    assert "1 lone UTF-16 surrogate(s)" in err and "replaced by U+FFFD" in err, err[-2000:]
    from crbc_viz.store import LogStore

    with LogStore(tmp_path / "store") as st:
        b = st.load_batch(text=True)
    col = {"model_response": "response"}.get(field, field)
    assert "go\ufffdleft" in set(b.steps[col].dropna()), set(b.steps[col].dropna())


def test_rllm_trajectory_name_that_is_a_list_is_one_line(tmp_path):
    def change(ep):
        ep["trajectories"][0]["name"] = ["solver"]

    refused(
        _rllm(tmp_path, change),
        "rllm",
        tmp_path / "store",
        "task-9_0.json:item 0: field 'trajectories[0].name': expected a string, got list",
    )


def test_roll_native_lone_surrogate_in_a_message_is_replaced_visibly(tmp_path):
    src = FIX / "roll_native" / "rollout_dump" / "rollout_dump_data.step_1.jsonl"
    obj = json.loads(src.read_text().splitlines()[0])
    msgs = json.loads(obj["messages"][0])
    msgs[-1][1]["content"] = "P\ud800FF"  # the first observation: an anchor and an observation
    obj["messages"][0] = json.dumps(msgs)
    p = tmp_path / "rollout_dump" / src.name
    p.parent.mkdir()
    p.write_text(json.dumps(obj) + "\n")
    err = accepted(p, "roll", tmp_path / "store")
    assert "1 lone UTF-16 surrogate(s)" in err, err[-2000:]
    from crbc_viz.store import LogStore

    with LogStore(tmp_path / "store") as st:
        b = st.load_batch(text=True)
    assert "P\ufffdFF" in set(b.steps["observation"].dropna())


def test_ms_swift_step_past_int64_is_one_line(tmp_path):
    src = FIX / "swift3_real" / "output" / "completions.jsonl"
    lines = [json.loads(x) for x in src.read_text().splitlines()]
    lines[1]["step"][0] = str(2**64)
    p = tmp_path / "output" / "completions.jsonl"
    p.parent.mkdir()
    p.write_text("".join(json.dumps(o) + "\n" for o in lines))
    refused(p, "ms-swift", tmp_path / "store", "completions.jsonl:line 2: field 'step': not a step number")
