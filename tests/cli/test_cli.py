"""The command line: score / info / estimators, and clean errors for bad input."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from crbc_viz.cli import main
from crbc_viz.result import OUTPUT_COLUMNS
from helpers import ROOT, TOY


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_score_writes_one_row_per_step_and_estimator(tmp_path, ext, capsys):
    out = tmp_path / f"scores.{ext}"
    rc = main(
        [
            "score",
            str(TOY),
            "-e",
            "crbc",
            "-e",
            "visit_local",
            "-e",
            "shortest_path",
            "-e",
            "grpo",
            "--param",
            "crbc.beta=0.98",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    df = {"parquet": pd.read_parquet, "csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True)}[
        ext
    ](out)
    assert list(df.columns) == list(OUTPUT_COLUMNS)
    assert len(df) == 60
    crbc = df[df.estimator == "crbc"]
    assert crbc["advantage"].iloc[0] == pytest.approx(1.2155, abs=1e-4)
    grpo = df[df.estimator == "grpo"]
    assert grpo["value"].isna().all() and (grpo["credit"] == grpo["advantage"]).all()
    sp = df[df.estimator == "shortest_path"]
    assert sp["value"].iloc[0] == 3
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_score_params_reach_the_estimator(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    main(["score", str(TOY), "--out", str(a)])
    main(["score", str(TOY), "--param", "depth=0", "--out", str(b)])
    assert not pd.read_csv(a)["credit"].equals(pd.read_csv(b)["credit"])


def test_info_json(capsys):
    assert main(["info", str(TOY), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["groups"] == 1 and info["trajectories"] == 4 and info["steps"] == 15
    assert info["anchors"] == 5 and info["success_rate"] == 0.5
    assert info["shared_step_fraction"] == pytest.approx(14 / 15)  # only s3 is unshared
    assert info["singleton_anchor_fraction"] == pytest.approx(1 / 5)


def test_estimators_json(capsys):
    assert main(["estimators", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    names = [i["name"] for i in items]
    assert {"grpo", "crbc", "visit_local", "shortest_path"} <= set(names)
    crbc = items[names.index("crbc")]
    assert {p["name"]: p["default"] for p in crbc["parameters"]}["depth"] == "inf"
    assert all(p["help"] for it in items for p in it["parameters"])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["score", "NOFILE.jsonl", "--out", "x.csv"], "no such file"),
        (["score", str(TOY), "-e", "nope", "--out", "x.csv"], "unknown estimator 'nope'; valid:"),
        (["score", str(TOY), "--param", "beta=2", "--out", "x.csv"], "must be <= 1.0"),
        (["score", str(TOY), "--param", "bogus=1", "--out", "x.csv"], "unknown parameter"),
        (["score", str(TOY), "--out", "x.xlsx"], "unknown extension"),
        (["score", str(TOY), "--device", "cuda", "--out", "x.csv"], "cuda"),
    ],
)
def test_errors_are_one_clear_message(tmp_path, monkeypatch, capsys, argv, needle):
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_bad_log_via_subprocess_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"group_id": "g", "traj_id": "t", "step_idx": 0}\n{oops\n'
        '{"group_id": "g", "traj_id": "t", "step_idx": 1, "reward": 1}\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "info", str(bad)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2
    assert "bad.jsonl:line 1: field 'reward': missing required field" in proc.stderr
    assert "bad.jsonl:line 2: invalid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr
