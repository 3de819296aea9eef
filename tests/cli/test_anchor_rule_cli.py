"""``--anchor-rule`` / ``--anchor-fields`` / ``--anchor-drop`` on the command line: the same
rule through ``score`` of a file and ``ingest`` + ``score --store``; ``info`` before and after
(hand-counted); a bad rule is one line and exit status 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crbc_viz.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from test_anchor_rules import object_rows, session_rows, write  # noqa: E402

DROP = ["--anchor-drop", r"\s*session=\w+"]


def _credit(path):
    df = pd.read_csv(path)
    return df.sort_values(["group_id", "traj_id", "step_idx"])["credit"].to_numpy()


def test_score_file_and_store_agree_with_hand_rewritten_log(tmp_path):
    log = write(tmp_path / "s.jsonl", session_rows())
    hand = write(tmp_path / "hand.jsonl", session_rows(rewrite=lambda w: w))
    assert main(["score", log, *DROP, "--backend", "numpy", "-o", str(tmp_path / "f.csv")]) == 0
    assert main(["score", hand, "--backend", "numpy", "-o", str(tmp_path / "h.csv")]) == 0
    store = str(tmp_path / "store")
    assert main(["ingest", log, "--store", store]) == 0
    assert main(["score", "--store", store, *DROP, "--backend", "numpy", "-o", str(tmp_path / "st.csv")]) == 0
    assert main(["score", "--store", store, "--backend", "numpy", "-o", str(tmp_path / "ex.csv")]) == 0
    want = _credit(tmp_path / "h.csv")
    np.testing.assert_allclose(_credit(tmp_path / "f.csv"), want, atol=1e-12)
    np.testing.assert_allclose(_credit(tmp_path / "st.csv"), want, atol=1e-12)
    assert not np.allclose(_credit(tmp_path / "ex.csv"), want)  # the store itself keeps exact keys


@pytest.mark.parametrize("store", [False, True])
def test_info_before_and_after(tmp_path, capsys, store):
    log = write(tmp_path / "o.jsonl", object_rows())
    src = [log]
    if store:
        assert main(["ingest", log, "--store", str(tmp_path / "st")]) == 0
        src = ["--store", str(tmp_path / "st"), "--group", "g"]
    capsys.readouterr()
    assert main(["info", *src, "--anchor-fields", "board", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["anchor_rule"]
    # hand count: 3 rollouts x 2 steps, every exact anchor distinct (the clock); board -> 2 anchors
    assert (r["exact"]["anchors"], r["rule"]["anchors"], r["anchors_merged"]) == (6, 2, 4)
    assert (r["exact"]["shared_step_fraction"], r["rule"]["shared_step_fraction"]) == (0.0, 1.0)
    assert (r["exact"]["singleton_rate"], r["rule"]["singleton_rate"]) == (1.0, 0.0)
    c = r["largest_change"]
    assert c["traj_id"] in ("a", "b", "c") and c["step_idx"] in (0, 1)
    assert abs(c["delta"]) == pytest.approx(abs(c["credit_rule"] - c["credit_exact"])) and c["delta"] != 0
    assert main(["info", *src, "--anchor-fields", "board"]) == 0
    out = capsys.readouterr().out
    assert "6 → 2 (4 merged)" in out and "largest credit change" in out


@pytest.mark.parametrize(
    "opts",
    [
        ["--anchor-drop", "("],
        ["--anchor-drop", "(a+)+$"],
        ["--anchor-fields", ","],
        ["--anchor-fields", "nope"],
        ["--anchor-rule", "fields"],
        ["--anchor-rule", "kmeans"],
        ["--anchor-threshold", "0.5"],
        ["--anchor-rule", "similar", "--anchor-threshold", "1.5"],
        ["--anchor-rule", "tfidf", "--anchor-scope", "world"],
    ],
)
@pytest.mark.parametrize("cmd", ["score", "info", "html", "verify"])
def test_bad_rule_is_one_line_exit_2(tmp_path, capsys, opts, cmd):
    log = write(tmp_path / "o.jsonl", object_rows())
    out = {"score": ["-o", str(tmp_path / "x.csv")], "html": ["-o", str(tmp_path / "x.html")]}.get(cmd, [])
    assert main([cmd, log, *opts, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --anchor-"), err
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.html").exists()


def test_ingest_names_where_a_rule_goes(tmp_path, capsys):
    log = write(tmp_path / "s.jsonl", session_rows())
    assert main(["ingest", log, "--store", str(tmp_path / "st"), *DROP]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give the rule when reading it" in err[0]
    assert not (tmp_path / "st").exists()
