"""``auto`` in a long-running process: a process that scores again and again loads the compiled
engine once, explicitly (`crbc_viz.load_engine`: the app server does), and runs at engine
speed from then on; without it ``auto`` decides by the input alone — the same call gets the same
backend however many calls came before — and a one-shot call (the CLI) never pays the engine's
load. Run in fresh processes: which modules a process has loaded is the state under test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import ROOT

pytest.importorskip("numba")

CODE = """
import json, sys
import crbc_viz
from crbc_viz.synthetic import random_mdp_batch
batch = random_mdp_batch(seed=1, num_groups=64, rollouts=8, max_steps=50, num_states=40, p_fail=0.01)
out = []
for name in sys.argv[1:]:
    if name == "load":
        out.append(["loaded", crbc_viz.load_engine()])
        continue
    r = crbc_viz.score(batch, name)
    out.append([r.backend, "numba" in sys.modules])
print(json.dumps(out))
"""


def _run(*names: str) -> list:
    proc = subprocess.run(
        [sys.executable, "-c", CODE, *names], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_auto_runs_the_engine_once_the_process_loaded_it():
    got = _run("crbc", "load", "crbc", "crbc")
    assert got[0] == ["numpy", False]  # before the load: the reference, numba never imported
    assert got[1] == ["loaded", True]
    assert got[2:] == [["numba", True], ["numba", True]]


def test_auto_depends_on_the_input_not_on_how_many_calls_came_before():
    """No hidden call counter: a fourth identical call chooses as the first did."""
    assert _run("crbc", "crbc", "crbc", "crbc") == [["numpy", False]] * 4


def test_a_single_call_never_imports_numba():
    assert _run("crbc") == [["numpy", False]]


def test_several_estimators_once_each_stay_on_the_reference():
    """A CLI run of several estimators scores each once: no load for the one-shot job."""
    assert _run("crbc", "graft", "rtmc") == [["numpy", False]] * 3


def test_cli_score_never_loads_the_engine_for_one_small_log(tmp_path):
    out = tmp_path / "o.csv"
    code = (
        "import sys, runpy; sys.argv = ['crbc_viz', 'score', 'sample_rollouts/toy/toy_group.jsonl', "
        f"'-e', 'crbc', '-o', {str(out)!r}];\n"
        "try:\n    runpy.run_module('crbc_viz', run_name='__main__')\nexcept SystemExit as e:\n"
        "    assert not e.code, e.code\nprint('numba' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_score_v_says_why_auto_chose_its_backend(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "score", "-v", "sample_rollouts/toy/toy_group.jsonl"]
        + ["-e", "crbc", "-o", str(tmp_path / "o.csv")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("INFO auto: crbc"))
    assert line.startswith("INFO auto: crbc runs on numpy:cpu (")
    assert "not numba:cpu: numpy is expected to finish" in line  # the reason the engine was passed over
