"""``crbc-viz html``: one group as a self-contained page, in a subprocess (exit status, stderr,
nothing written on error)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import ROOT, TOY

SOKOBAN = ROOT / "sample_rollouts/sokoban/sokoban.jsonl"


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", "html", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def _one_error_line(proc) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_writes_one_page_with_graphs_credit_and_provenance(tmp_path):
    out = tmp_path / "page.html"
    label = "sokoban-sample/0/sokoban-task-04"
    proc = _cli(SOKOBAN, "--group", label, "-e", "crbc", "-e", "grpo", "-p", "crbc.beta=0.9", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {out}: group {label}, 2 estimator(s) (crbc, grpo)"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert page.count("<iframe ") == 2 and "anchor graph, crbc" in page and "anchor graph, grpo" in page
    prov = dict(re.findall(r"<tr data-crbc-prov='[^']*'><td>(.*?)</td><td>(.*?)</td></tr>", page))
    assert prov["file"] == "sokoban.jsonl" and prov["read as"] == "canonical log (detected)"
    assert (prov["run"], prov["train step"]) == ("sokoban-sample", "0")
    assert prov["group"] == "sokoban-task-04 (5 of 16 in the file)"
    assert prov["params [crbc]"].startswith("beta=0.9,")
    assert "crbc-viz version" in prov
    # 8 rollouts, 208 steps: one credit cell per step and estimator.
    assert page.count("data-crbc-credit='crbc'") == page.count("data-crbc-credit='grpo'") == 208


@pytest.mark.parametrize(
    "args, message",
    [
        (("--group", "nope"), "error: no group 'nope' in the data (1 groups: toy/0/toy)"),
        (("-e", "nope"), "error: unknown estimator 'nope'"),
        (("-e", "trace"), "error: estimator 'trace' needs logged field(s) 'gold_logprob'"),
        (("-p", "nope=1"), "error: unknown parameter(s) nope for crbc"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "page.html"
    proc = _cli(TOY, *args, "-o", out)
    assert proc.returncode == 2
    assert _one_error_line(proc).startswith(message)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_missing_file_and_a_bad_output_are_refused(tmp_path):
    proc = _cli(TOY, "--format", "trl", "-o", tmp_path / "p.html")  # one line per problem of the file
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: 2 problems in input:") and "field 'prompt'" in proc.stderr
    proc = _cli(tmp_path / "missing.jsonl", "-o", tmp_path / "p.html")  # a load error: its problem list
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == "error: 1 problem in input:"
    assert proc.stderr.splitlines()[1].endswith("missing.jsonl: no such file")
    proc = _cli(TOY, "-o", tmp_path / "p.parquet")
    assert proc.returncode == 2 and "give a name ending in .html" in _one_error_line(proc)
    copy = tmp_path / "in.html"
    copy.write_bytes(TOY.read_bytes())
    proc = _cli(copy, "-o", copy)
    assert proc.returncode == 2 and copy.read_bytes() == TOY.read_bytes()
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_one_refusal_writes_the_others_and_exits_3(tmp_path):
    out = tmp_path / "page.html"
    proc = _cli(TOY, "-e", "trace", "-e", "crbc", "-o", out)
    assert proc.returncode == 3
    line = _one_error_line(proc)
    assert line.startswith("error: estimator 'trace' refused the input: ") and "gold_logprob" in line
    page = out.read_text(encoding="utf-8")
    assert "data-crbc-refused='trace'" in page and page.count("<iframe ") == 1


def test_logged_control_characters_reach_no_terminal(tmp_path):
    out = tmp_path / "page.html"
    proc = _cli(ROOT / "tests/bad_inputs/terminal_escapes.jsonl", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b]0;pwned\\x07g" in proc.stdout  # the group's label, its controls shown escaped
    assert out.exists()
