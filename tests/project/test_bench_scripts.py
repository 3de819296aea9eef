"""The prepared benchmark scripts run (dry runs on tiny inputs; figures live in bench/RESULTS.md)."""

import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT


def test_gpu_bench_cpu_dry_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu_bench", "--device", "cpu", "--workloads", "a", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "gpu_results.md").read_text()
    assert "| a | 368 | float64 |" in table and "| a | 368 | float32 |" in table


def test_gpu_script_is_one_prepared_command():
    text = (ROOT / "bench" / "gpu.sh").read_text()
    assert "tests/backends/test_parity.py" in text and "bench.gpu_bench --device cuda" in text
    assert "--dry-run" in text
    for path in re.findall(r"tests/[\w/]+\.py", text):  # survives a move of the tests
        assert (ROOT / path).is_file(), f"bench/gpu.sh names {path}, which does not exist"


def test_gpu_script_dry_run_runs_on_the_cpu(tmp_path):
    """``bench/gpu.sh --dry-run``: the same steps as on the H200 (parity tests, the fused-path
    benchmark, the trainer-adapter benchmark), small and on the CPU, as one command."""
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu.sh"), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)},
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert " passed" in proc.stdout and (tmp_path / "gpu_results.md").is_file()


def test_user_path_quick_renders_every_target_row():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.user_path", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    block = proc.stdout
    for label in (
        '`score(batch, "crbc")`, auto →',
        "baseline `bench.baselines.crbc_dict_spsolve`",
        "`python -m crbc_viz score b80k.jsonl -o out.parquet`",
        "**Group size**",
        "**Ingest**",
        "**CRBC fused on the GPU**",
        "Machine:",
        "load average",
        "Targets met:",
        "memory-bandwidth floor (32 bytes per step at",  # beside the score row, with its ratio
        "| × floor |",
        "| × I/O floor |",
        "CPU time (process, all threads",
    ):
        assert label in block, label
    score_head = next(line for line in block.splitlines() if line.startswith('**`score(batch, "crbc")`'))
    assert re.search(r"commit [0-9a-f]{7,}", score_head), score_head  # the figures name their commit
    gpu = "no GPU on this machine" not in block  # with a GPU its row gets a table too
    assert block.count("| met |") == 3 + gpu and "met (≤ 10 s, ≤ 2 GB)" in block  # + the sweep's


def test_user_path_cli_baseline_is_the_tree_the_issue_measured(tmp_path, monkeypatch):
    """The CLI row's baseline runs the commit the target was measured on (before the columnar lane),
    extracted from git; a checkout without that commit says so instead of timing nothing."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import user_path

    tree = user_path._baseline_tree(tmp_path)
    if isinstance(tree, str):
        pytest.skip(tree)  # a shallow clone or no git: the block's row says the same
    assert (tree / "crbc_viz" / "cli.py").is_file()  # one module then, a package now
    assert not (tree / "crbc_viz" / "io" / "columnar.py").exists()
    proc = subprocess.run(
        [sys.executable, "-c", "import crbc_viz, sys; print(crbc_viz.__file__)"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == str(tree / "crbc_viz" / "__init__.py")  # `-m` from there runs it


def test_browser_bench_server_timer_logs_each_script_run(tmp_path, monkeypatch):
    """`bench.timed_streamlit` (the browser benchmark's server side) writes one line per script
    run, its wall and CPU time from Streamlit's own start and stop events: checked on an AppTest
    run of the app's Data page, whose time the same test measures around it."""
    import json
    import time

    from streamlit.runtime.app_session import AppSession
    from streamlit.runtime.scriptrunner import script_runner
    from streamlit.testing.v1 import AppTest

    from bench import timed_streamlit

    monkeypatch.setattr(script_runner.ScriptRunner, "__init__", script_runner.ScriptRunner.__init__)
    monkeypatch.setattr(AppSession, "handle_backmsg", AppSession.handle_backmsg)  # restored after
    log = tmp_path / "runs.jsonl"
    timed_streamlit._install(str(log))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    t0, w0 = time.perf_counter(), time.time()
    at.run()
    outside = time.perf_counter() - t0
    assert not at.exception
    (row,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert row["end"] == "SCRIPT_STOPPED_WITH_SUCCESS"
    assert w0 <= row["start"] <= w0 + outside
    assert 0 < row["wall"] <= outside and 0 < row["cpu"] <= row["wall"] + 0.05


def test_browser_bench_is_one_command_with_load_and_targets():
    """``python -m bench.browser_bench``: every interaction the issue names, ``--load N`` CPU-bound
    processes, ``--write`` into its own block of bench/RESULTS.md, and the targets."""
    from bench import browser_bench as bb

    text = (ROOT / "bench" / "browser_bench.py").read_text()
    for what in ("open Graph", "switch group", "change estimator", "open Compare", "drill down", "Play"):
        assert what in text, what
    assert bb.TARGET_S == {0: 0.5, 2: 1.0} and bb.PLAY_S == 1.0
    rows = [["open Graph", [0.4, 0.6, 0.45], [0.1], [0.05], [0.3], [0.02], [0.0], "1.0/1.0/1.0"]]
    table = bb.table(rows, 2, "1.0/1.0/1.0", 3)
    assert "| open Graph | 0.45 | 0.40–0.60 |" in table and "| ≤ 1 s | yes |" in table
    assert "browser-bench:begin" in (ROOT / "bench" / "RESULTS.md").read_text()


def test_io_floor_counts_the_engines_input_and_output_once():
    from bench.user_path import io_floor_bytes
    from crbc_viz.synthetic import random_mdp_batch

    b = random_mdp_batch(seed=0, num_groups=3, rollouts=4, max_steps=10, num_states=8, p_fail=0.1)
    S, T, G = b.num_steps, b.num_trajectories, b.num_groups
    # per step: hash and action read (8 + 8), value, Q, credit, advantage written (4 × 8);
    # per trajectory an offset and a success flag (8 + 1); G + 1 group offsets (8 each)
    assert io_floor_bytes(b) == 48 * S + 9 * T + 8 * (G + 1)


def _dry_run(module: str, *args: str) -> str:
    """``python -m <module> <args>`` from the checkout; its standard output (it must exit 0)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_schema_path_bench_dry_run(tmp_path):
    """``python -m bench.schema_path`` on 300 steps: its three logs are read (the table lists
    each with its steps)."""
    out = _dry_run("bench.schema_path", "--steps", "300", "--repeats", "1", "--workdir", str(tmp_path))
    for fmt in ("jsonl", "csv", "parquet"):
        assert re.search(rf"\| {fmt} \| 300 \| \d+\.\d{{3}} \|", out), out


def test_importer_path_bench_dry_run(tmp_path):
    """``python -m bench.importer_path`` on 300 rows: each of its three trainer files is read by
    its own importer (the table names the importer detected)."""
    out = _dry_run("bench.importer_path", "--rows", "300", "--repeats", "1", "--workdir", str(tmp_path))
    for name in ("verl", "trl", "verifiers"):
        assert re.search(rf"\| {name} \| {name} \| \d+ \| \d+\.\d{{3}} \|", out), out
