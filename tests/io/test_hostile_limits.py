"""Loaders never crash and never blow memory: nesting depth and value counts are bounded before
a native parser sees the bytes, and memory limits count what the parse will allocate.

Every hostile file is made here (small on disk: the big ones are gzip). Crashes and peak memory
are measured in child processes: the CLI (exit 2, one problem line naming the file, the line and
the setting), the app's upload loader (`crbc_viz.ui.sources.open_batch`) and the loader alone
(peak RSS of the child, which must stay under 1 GiB for a refused file).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crbc_viz.io import LoadError, _guards, load_rollouts
from crbc_viz.io.importers import expand_sources, import_source
from helpers import ROOT

GIB = 1 << 30
BASE = {"group_id": "g", "step_idx": 0, "reward": 1.0}


def _row(traj: str, anchor_json: str = '"s0"', **extra) -> str:
    """One JSONL row whose ``anchor_obs`` is the raw JSON text ``anchor_json``."""
    head = json.dumps({**BASE, "traj_id": traj, **extra})[:-1]
    return f'{head}, "anchor_obs": {anchor_json}}}\n'


def _run(args: list[str], env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _problem_lines(stderr: str) -> list[str]:
    """The problem lines of a CLI error (the lines under ``error: N problem(s) in input:``)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("  ")]


def _assert_one_line_error(proc, path: Path, line: int | None, setting: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    problems = _problem_lines(proc.stderr)
    assert len(problems) == 1, proc.stderr[-2000:]
    msg = problems[0]
    assert str(path) in msg and f"${setting}" in msg, msg
    if line is not None:
        assert f":line {line}:" in msg, msg
    assert len(msg) < 400, msg
    return msg


def _peak_mib(code: str, env: dict | None = None, timeout: float = 180) -> tuple[float, str]:
    """Run ``code`` in a fresh interpreter; (its peak RSS in MiB, its stdout). The peak is VmHWM of
    the child's own memory map: ``getrusage(RUSAGE_SELF).ru_maxrss`` also keeps the RSS the parent
    (pytest, ~1 GB late in a full run) had when it forked."""
    wrapper = code + (
        "\nimport re; print('RSS', re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))"
    )
    proc = _run(["-c", wrapper], env, timeout)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    return float(re.search(r"RSS (\d+)", proc.stdout).group(1)) / 1024, proc.stdout


def _refusal_in_child(path: Path, env: dict | None = None) -> tuple[float, str]:
    """(peak MiB, the LoadError's text) of `load_rollouts` on ``path`` in a child process."""
    code = (
        "from crbc_viz.io import LoadError, load_rollouts\n"
        "try:\n"
        f"    load_rollouts({str(path)!r})\n"
        "    print('LOADED')\n"
        "except LoadError as exc:\n"
        "    print('REFUSED', str(exc).replace(chr(10), ' | '))\n"
    )
    peak, out = _peak_mib(code, env)
    assert "REFUSED" in out, out
    return peak, out


# ---------------------------------------------------------------- the byte scanner
def _shape_oracle(text: bytes) -> tuple[int, int]:
    """(deepest nesting, structural commas + opening brackets + 1), one character at a time."""
    depth = deepest = values = 0
    in_str = esc = False
    for ch in text.decode("latin-1"):
        if esc:
            esc = False
            continue
        if ch == "\\":
            esc = True
            continue
        if ch == '"':
            in_str = not in_str
        elif in_str:
            continue
        elif ch in "[{":
            depth += 1
            values += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
        elif ch == ",":
            values += 1
    return deepest, values + 1


def test_json_shape_matches_a_character_loop_across_piece_boundaries(monkeypatch):
    """Strings, escaped quotes and backslash runs that straddle the scanner's pieces."""
    rng = random.Random(7)
    alphabet = ['"', "\\", "[", "]", "{", "}", ",", "a", ":", " ", "\\\\", '\\"']
    for piece in (1, 2, 3, 5, 64):
        monkeypatch.setattr(_guards, "_SCAN_CHUNK", piece)
        for _ in range(300):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))).encode()
            assert _guards.json_shape(text) == _shape_oracle(text), (piece, text)


def test_json_shape_on_valid_json_counts_values():
    doc = {"a": [1, 2, [3, {"b": "[[,,]]"}]], "c": "x\\\"[", "d": {}}
    text = json.dumps(doc).encode()
    # the object, a's list, 1, 2, [3, {...}], 3, {...}, "[[,,]]", "x\"[", {}: 10 values, and the
    # empty {} counts one more (no comma says it is empty); depth 4
    assert _guards.json_shape(text) == (4, 11)


# ---------------------------------------------------------------- crashes: the CLI
def test_cli_refuses_an_anchor_nested_100000_deep(tmp_path):
    """pyarrow's JSON reader died (SIGSEGV, exit 139) on this 200 KB line."""
    path = tmp_path / "deep.jsonl"
    path.write_text(_row("r0", "[" * 100_000 + "]" * 100_000))
    proc = _run(["-m", "crbc_viz", "score", str(path), "-o", str(tmp_path / "out.csv")])
    msg = _assert_one_line_error(proc, path, 1, "CRBC_VIZ_MAX_DEPTH")
    assert "deeper than 100 levels" in msg
    assert not (tmp_path / "out.csv").exists()


def test_cli_refuses_an_anchor_of_ten_million_numbers(tmp_path):
    """pyarrow's JSON reader died (SIGSEGV) on a list of 10M numbers followed by a string anchor."""
    path = tmp_path / "big.jsonl.gz"
    numbers = "[" + ",".join(["1"] * 10_000_000) + "]"
    path.write_bytes(gzip.compress((_row("r0", numbers) + _row("r1")).encode(), 1))
    assert path.stat().st_size < 200_000
    proc = _run(["-m", "crbc_viz", "score", str(path), "-o", str(tmp_path / "out.csv")])
    msg = _assert_one_line_error(proc, path, 1, "CRBC_VIZ_MAX_ITEMS")
    # the row, its five fields' values and the ten million numbers
    assert "10,000,006 values" in msg and "limit of 1,000,000" in msg


def test_info_and_lenient_keep_the_good_lines(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(_row("r0", "[" * 5000 + "]" * 5000) + _row("r1") + _row("r2", '"s1"'))
    proc = _run(["-m", "crbc_viz", "info", str(path)])
    _assert_one_line_error(proc, path, 1, "CRBC_VIZ_MAX_DEPTH")
    batch = load_rollouts(path, lenient=True)
    assert sorted(set(batch.steps["traj_id"])) == ["r1", "r2"]


def test_the_depth_limit_is_a_setting(tmp_path):
    path = tmp_path / "d150.jsonl"
    path.write_text(_row("r0", "[" * 150 + "]" * 150) + _row("r1"))
    with pytest.raises(LoadError, match=r"CRBC_VIZ_MAX_DEPTH"):
        load_rollouts(path)
    code = f"from crbc_viz.io import load_rollouts; print(load_rollouts({str(path)!r}).num_steps)"
    assert _run(["-c", code], {"CRBC_VIZ_MAX_DEPTH": "200"}).stdout.strip() == "2"
    bad = _run(["-c", code], {"CRBC_VIZ_MAX_DEPTH": "deep"})
    assert "CRBC_VIZ_MAX_DEPTH" in bad.stderr and "expected a number" in bad.stderr


def test_app_upload_loader_refuses_the_same_bytes(tmp_path):
    """`crbc_viz.ui.sources.open_batch` (what the app, and its reading child, call)."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text(_row("r0", "[" * 100_000 + "]" * 100_000))
    big = tmp_path / "big.jsonl.gz"
    big.write_bytes(
        gzip.compress((_row("r0", "[" + ",".join(["1"] * 10_000_000) + "]") + _row("r1")).encode(), 1)
    )
    code = (
        "import sys\n"
        "from crbc_viz.io import LoadError\n"
        "from crbc_viz.ui.sources import open_batch\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open_batch(p)\n"
        "        print('LOADED', p)\n"
        "    except LoadError as exc:\n"
        "        print('REFUSED', str(exc).replace(chr(10), ' | '))\n"
    )
    proc = _run(["-c", code, str(deep), str(big)])
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    refused = [ln for ln in proc.stdout.splitlines() if ln.startswith("REFUSED")]
    assert len(refused) == 2
    assert f"{deep}:line 1:" in refused[0] and "$CRBC_VIZ_MAX_DEPTH" in refused[0]
    assert f"{big}:line 1:" in refused[1] and "$CRBC_VIZ_MAX_ITEMS" in refused[1]


def test_json_document_too_deep_names_the_setting(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(
        "[" + json.dumps({**BASE, "traj_id": "r0"})[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}]"
    )
    proc = _run(["-m", "crbc_viz", "info", str(path)])
    _assert_one_line_error(proc, path, None, "CRBC_VIZ_MAX_DEPTH")


def test_json_text_cells_in_csv_are_bounded_before_parsing(tmp_path):
    """A CSV cell carries an anchor as JSON text; a deep or huge one is a problem on its row."""
    rows = [
        {**BASE, "traj_id": "r0", "anchor_obs": "[" * 150 + "]" * 150},
        {**BASE, "traj_id": "r1", "anchor_obs": json.dumps(list(range(20)))},
        {**BASE, "traj_id": "r2", "rubric": json.dumps([{"c": i} for i in range(30)])},
    ]
    path = tmp_path / "cells.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    proc = _run(["-m", "crbc_viz", "info", str(path)], {"CRBC_VIZ_MAX_ITEMS": "50"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = _problem_lines(proc.stderr)
    assert len(lines) == 2, proc.stderr
    assert "row 1" in lines[0] and "'anchor_obs'" in lines[0] and "$CRBC_VIZ_MAX_DEPTH" in lines[0]
    assert "row 3" in lines[1] and "'rubric'" in lines[1] and "$CRBC_VIZ_MAX_ITEMS" in lines[1]


def test_parquet_list_cell_over_the_value_limit(tmp_path):
    path = tmp_path / "lists.parquet"
    obs = pa.array([[list(range(10))] * 3, [list(range(400))] * 3], pa.list_(pa.list_(pa.int64())))
    table = pa.table(
        {
            "group_id": ["g", "g"],
            "traj_id": ["r0", "r1"],
            "step_idx": [0, 0],
            "reward": [1.0, 0.0],
            "anchor_obs": obs,
        }
    )
    pq.write_table(table, path)
    proc = _run(["-m", "crbc_viz", "info", str(path)], {"CRBC_VIZ_MAX_ITEMS": "1000"})
    msg = _assert_one_line_error(proc, path, None, "CRBC_VIZ_MAX_ITEMS")
    assert "row 1" in msg and "'anchor_obs'" in msg and "1,203 values" in msg  # 3 lists of 400, and 3


def test_importer_sniff_bounds_the_first_record(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("\n" + _row("r0", "[" * 100_000 + "]" * 100_000))
    with pytest.raises(LoadError) as ei:
        expand_sources([str(path)])
    text = str(ei.value)
    assert f"{path}:line 2:" in text and "$CRBC_VIZ_MAX_DEPTH" in text


def test_rllm_episodes_are_bounded(tmp_path):
    """The rLLM importer parses its episode files with ``json`` itself: a document and a JSONL
    line are both checked first."""
    doc, lines = tmp_path / "doc", tmp_path / "lines"
    doc.mkdir()
    lines.mkdir()
    deep = "[" * 200 + "]" * 200
    (doc / "episode_0.json").write_text('{"id": "t:0", "trajectories": [], "x": ' + deep + "}")
    (lines / "episodes.jsonl").write_text(
        '{"id": "t:0", "trajectories": []}\n{"id": "t:1", "x": ' + deep + "}\n"
    )
    for folder, line in ((doc, None), (lines, 2)):
        (src,) = expand_sources([str(folder)], fmt="rllm")
        with pytest.raises(LoadError) as ei:
            import_source(src)
        assert "$CRBC_VIZ_MAX_DEPTH" in str(ei.value)
        if line is not None:
            assert f":line {line}:" in str(ei.value)


# ---------------------------------------------------------------- one line, exit 2, no traceback
def test_parquet_with_two_columns_of_one_name(tmp_path):
    """Was ``AttributeError: 'DataFrame' object has no attribute 'dtype'``."""
    path = tmp_path / "dup.parquet"
    cols = [["g", "g"], ["r0", "r1"], [0, 0], [1.0, 0.0], [2.0, 3.0]]
    pq.write_table(pa.table(cols, names=["group_id", "traj_id", "step_idx", "reward", "reward"]), path)
    proc = _run(["-m", "crbc_viz", "info", str(path)])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = _problem_lines(proc.stderr)
    assert len(lines) == 1 and str(path) in lines[0], proc.stderr
    assert "'reward'" in lines[0] and "columns 4 and 5" in lines[0]


def test_a_megabyte_string_in_a_numeric_signal(tmp_path):
    """Was an uncaught ValueError repeating the whole value."""
    path = tmp_path / "signal.jsonl"
    path.write_text(
        "".join(
            json.dumps({**BASE, "traj_id": t, "anchor_obs": "s", "gold_logprob": v}) + "\n"
            for t, v in (("r0", "x" * 1_000_000), ("r1", -0.5))
        )
    )
    proc = _run(["-m", "crbc_viz", "score", str(path), "-o", str(tmp_path / "out.csv"), "-e", "trace"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and len(proc.stderr) < 500, proc.stderr[:2000]
    assert "gold_logprob" in proc.stderr and "traj 'r0'" in proc.stderr


def test_csv_header_naming_a_field_twice(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("group_id,traj_id,step_idx,reward,reward\ng,r0,0,1,2\n")
    with pytest.raises(LoadError, match=r"'reward'.*columns 4 and 5"):
        load_rollouts(path)


# ---------------------------------------------------------------- memory
def test_many_distinct_keys_refused_under_1_gib(tmp_path):
    """1.5 MB of rows with 1000 distinct keys: pyarrow built every key for every row (2.2 GB)."""
    path = tmp_path / "keys.jsonl"
    path.write_text("".join(f'{{"k{i % 1000}":1}}\n' for i in range(140_000)))
    assert path.stat().st_size < 1_600_000
    peak, out = _refusal_in_child(path)
    assert "CRBC_VIZ_MAX_MEMORY_MB" in out or "CRBC_VIZ_MAX_CELLS" in out, out
    assert peak < 1024, peak


def test_rows_each_with_their_own_key_refused_under_1_gib(tmp_path):
    """200k rows, each with a new key: dense, that is 40 billion cells."""
    path = tmp_path / "unique.jsonl.gz"
    path.write_bytes(gzip.compress("".join(f'{{"k{i}":1}}\n' for i in range(200_000)).encode(), 1))
    peak, out = _refusal_in_child(path)
    assert "CRBC_VIZ_MAX_FIELDS" in out, out
    assert peak < 1024, peak


def test_json_gz_of_tiny_objects_refused_under_1_gib(tmp_path):
    """The document cap counted characters: 400 MiB of ``{},`` was parsed to 3.7 GB first."""
    path = tmp_path / "tiny.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b"[")
        for _ in range(140):
            fh.write(b"{}," * 1_000_000)
        fh.write(b"{}]")
    peak, out = _refusal_in_child(path)
    assert "CRBC_VIZ_MAX_MEMORY_MB" in out, out
    assert peak < 1024, peak


def test_gzip_of_blank_lines_refused_under_1_gib(tmp_path):
    """200 MiB of newlines: one int64 position each was 1.6 GB ("out of memory")."""
    path = tmp_path / "blank.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(25):
            fh.write(b"\n" * (8 << 20))
    peak, out = _refusal_in_child(path)
    assert "blank lines" in out and "CRBC_VIZ_MAX_ROWS" in out, out
    assert peak < 1024, peak


def test_memory_limit_is_charged_before_parsing(tmp_path):
    """With a 64 MiB limit a 20k-row x 200-field log is refused early, and small."""
    path = tmp_path / "wide.jsonl"
    with path.open("w") as fh:
        for i in range(20_000):
            fh.write(json.dumps({**BASE, "traj_id": f"r{i}", **{f"f{j}": j for j in range(196)}}) + "\n")
    peak, out = _refusal_in_child(path, {"CRBC_VIZ_MAX_MEMORY_MB": "64"})
    assert "memory limit of 64 MiB" in out, out
    assert peak < 64 + _baseline_mib() + 64, peak


def _baseline_mib() -> float:
    """Peak RSS of a child that imports the loader and reads a tiny log."""
    small = ROOT / "tests" / "bad_inputs" / "ok.jsonl"
    peak, _ = _peak_mib(f"from crbc_viz.io import load_rollouts; load_rollouts({str(small)!r})")
    return peak


def _keys_log(path: Path, fields: int) -> Path:
    with path.open("w") as fh:
        for i in range(2400):
            fh.write(json.dumps({**BASE, "traj_id": f"r{i}", f"k{i % fields}": 1}) + "\n")
    return path


def _load_code(path: Path) -> str:
    return f"from crbc_viz.io import load_rollouts; print('STEPS', load_rollouts({str(path)!r}).num_steps)"


def test_a_valid_log_just_within_the_memory_limit_loads_within_it(tmp_path):
    """Many distinct keys, sized so its charge is just under a 96 MiB limit: it loads, and the
    load peaks within the limit (plus the interpreter and its imports)."""
    # 2,400 rows x 1,200 fields x 32 bytes = 88 MiB of cells, plus about 3 MiB of values. The
    # baseline is the same 2,400 rows with 6 fields: the interpreter, its imports and the rows.
    path = _keys_log(tmp_path / "keys.jsonl", 1196)
    env = {"CRBC_VIZ_MAX_MEMORY_MB": "96", "CRBC_VIZ_MAX_FIELDS": "2000"}
    code = _load_code(path)
    peak, out = _peak_mib(code, env)
    assert "STEPS 2400" in out
    baseline, _ = _peak_mib(_load_code(_keys_log(tmp_path / "few.jsonl", 2)), env)
    assert peak < baseline + 96, (peak, baseline)
    refused = _run(["-c", code], {**env, "CRBC_VIZ_MAX_MEMORY_MB": "80"})
    assert "memory limit of 80 MiB" in refused.stderr and "CRBC_VIZ_MAX_MEMORY_MB" in refused.stderr
