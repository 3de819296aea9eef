"""An estimator that refuses its input is one line, and never stops the others of the same call.

The log: one group of a success ``w`` and a failure ``l`` (3 steps each) carrying IAPO's
signals, where ``l``'s step 0 has a failed-use edge but ``is_error = false``: IAPO's rule
"d⁻ > 0 implies e = 1" (ESTIMATORS.md §12) refuses it. CRBC and GRPO need none of those fields.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from crbc_viz import load_rollouts, score
from crbc_viz.api import score_all, score_each
from crbc_viz.errors import EstimatorInputError, MissingSignalError
from helpers import ROOT, write_jsonl

ROW = "group 'bad/0/g', traj 'l', step 0"


def _rows(**change) -> list[dict]:
    rows = []
    for t, win in (("w", True), ("l", False)):
        for k in range(3):
            rows.append(
                dict(group_id="g", traj_id=t, step_idx=k, anchor_obs=f"s{k}", action="a",
                     reward=float(win and k == 2), done=k == 2, success=win, influence_edges=[],
                     is_error=False, num_tokens=10)
            )  # fmt: skip
    rows[3]["influence_edges"] = [{"to": 2, "type": "failed"}]
    rows[3].update(change)
    return rows


@pytest.fixture
def bad_log(tmp_path):
    return write_jsonl(tmp_path / "bad.jsonl", _rows())


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", "score", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_iapo_input_rule_names_the_row(bad_log):
    with pytest.raises(EstimatorInputError, match=rf"iapo: field 'is_error' must be true .* at {ROW}"):
        score(load_rollouts(bad_log), "iapo")


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_score_writes_the_others_and_says_why_one_was_refused(bad_log, tmp_path, ext):
    out = tmp_path / f"x.{ext}"
    proc = _cli(bad_log, "-e", "crbc", "-e", "iapo", "-e", "grpo", "--out", out)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    refusals = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(refusals) == 1, proc.stderr
    assert refusals[0].startswith("error: estimator 'iapo' refused the input: ") and ROW in refusals[0]
    df = pd.read_csv(out) if ext == "csv" else pd.read_parquet(out)
    assert list(dict.fromkeys(df["estimator"])) == ["crbc", "grpo"]
    b = load_rollouts(bad_log)
    for name in ("crbc", "grpo"):
        got = df[df["estimator"] == name]["advantage"].to_numpy()
        np.testing.assert_allclose(got, score(b, name, backend="numpy").advantage, atol=1e-12)
    # GRPO on one success and one failure: ±0.5 / sd(1, 0) = ±1/√2 (eps 1e-6 aside).
    grpo = df[df["estimator"] == "grpo"]["advantage"].to_numpy()
    np.testing.assert_allclose(grpo, [2**-0.5] * 3 + [-(2**-0.5)] * 3, atol=1e-5)
    assert "wrote 12 rows (6 steps x 2 estimator(s))" in proc.stdout


def test_every_estimator_refused_writes_nothing(bad_log, tmp_path):
    out = tmp_path / "x.csv"
    proc = _cli(bad_log, "-e", "iapo", "--out", out)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and ROW in proc.stderr
    assert not out.exists()


def test_a_missing_signal_is_a_refusal_too(tmp_path):
    """`trace` needs gold_logprob, which the log lacks: crbc is still written."""
    log = write_jsonl(tmp_path / "bad.jsonl", _rows())
    out = tmp_path / "x.jsonl"
    proc = _cli(log, "-e", "trace", "-e", "crbc", "--out", out)
    assert proc.returncode == 3, proc.stderr
    assert "error: estimator 'trace' refused the input: " in proc.stderr and "gold_logprob" in proc.stderr
    assert {json.loads(x)["estimator"] for x in out.read_text().splitlines()} == {"crbc"}


def test_a_bad_parameter_still_fails_the_whole_call_before_scoring(bad_log, tmp_path):
    out = tmp_path / "x.csv"
    proc = _cli(bad_log, "-e", "crbc", "-e", "grpo", "-p", "grpo.eps=-1", "--out", out)
    assert proc.returncode == 2 and "eps" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_score_each_keeps_the_others_and_score_all_still_raises(bad_log):
    b = load_rollouts(bad_log)
    results, refused = score_each(b, ["crbc", "iapo", "grpo"], {})
    assert list(results) == ["crbc", "grpo"] and list(refused) == ["iapo"]
    assert isinstance(refused["iapo"], EstimatorInputError) and ROW in str(refused["iapo"])
    with pytest.raises(EstimatorInputError, match=ROW):
        score_all(b, ["crbc", "iapo", "grpo"], {})


@pytest.mark.parametrize(
    "name, change, needle",
    [
        ("iapo", {"num_tokens": 0}, "iapo: field 'num_tokens' must be an integer >= 1, got 0"),
        ("iapo", {"is_error": "yes"}, "iapo: field 'is_error' must be true/false, got 'yes'"),
        (
            "iapo",
            {"influence_edges": [{"to": 9, "type": "support"}]},
            "iapo: field 'influence_edges' target 9",
        ),
        ("iapo", {"influence_edges": [{"to": 2, "type": "x" * 5000}]}, "must be 'support' or 'failed'"),
        ("trca", {"rubric": "not a list", "rubric_active": []}, "trca: field 'rubric' must be a list"),
        ("agentopsd", {"turn_evidence": None}, "agentopsd: field 'turn_evidence'"),
    ],
)
def test_malformed_logged_values_are_estimator_input_errors(tmp_path, name, change, needle):
    """Each names the field and the row, cut to a readable length (a 5,000-character value is
    not echoed whole)."""
    rows = _rows(**change)
    if name == "trca":
        rows = [
            dict(r, rubric=r.get("rubric", [{"id": "e", "category": "evidence"}]), rubric_active=[])
            for r in rows
        ]
    if name == "agentopsd":
        rows = [dict(r, turn_evidence=r.get("turn_evidence", 0.5)) for r in rows]
    b = load_rollouts(write_jsonl(tmp_path / "bad.jsonl", rows))
    with pytest.raises(EstimatorInputError) as e:
        score(b, name)
    assert needle in str(e.value) and ROW in str(e.value), str(e.value)
    assert len(str(e.value)) < 400
    assert not isinstance(e.value, MissingSignalError)
