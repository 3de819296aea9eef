"""Trainer files through their importers: ``python -m bench.importer_path [--rows 100000]
[--repeats 5] [--workdir DIR]``.

Writes large files in three trainer formats by repeating a real fixture's rows (each copy a
new prompt / uid, so groups do not merge): verl's ``rollout_data_dir`` JSONL
(``tests/fixtures/verl_real``, session keys in ``uid``), TRL's completions Parquet
(``tests/fixtures/trl_real``) and verifiers' ``results.jsonl``
(``tests/fixtures/verifiers_0110``). Each is read file to batch (`crbc_viz.io.importers.read_file`:
reader, importer, validation, assembly), timed in this process, the median of ``--repeats``
after one warm-up. Prints a markdown table and the commit. Compare two commits by running the
same command in a checkout of each (``git worktree add``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _jsonl_copies(src: Path, out: Path, rows: int, vary) -> None:
    lines = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    with open(out, "w", encoding="utf-8") as fh:
        k, n = 0, 0
        while n < rows:
            for rec in lines:
                fh.write(json.dumps(vary(dict(rec), k)) + "\n")
                n += 1
            k += 1


def _verl(rec: dict, k: int) -> dict:
    rec["input"] = f"{rec['input']} (copy {k})"
    rec["uid"] = f"c{k}-{rec['uid']}"
    return rec


def _verifiers(rec: dict, k: int) -> dict:
    rec["example_id"] = int(rec.get("example_id", 0)) + 1000 * k
    return rec


def write_files(workdir: Path, rows: int) -> dict[str, Path]:
    """The three files (written once per ``--rows``; kept in ``workdir``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    workdir.mkdir(parents=True, exist_ok=True)
    paths = {
        "verl": workdir / f"verl_{rows}" / "1.jsonl",
        "trl": workdir / f"trl_{rows}" / "completions" / "completions_00001.parquet",
        "verifiers": workdir / f"verifiers_{rows}" / "results.jsonl",
    }
    for p in paths.values():
        p.parent.mkdir(parents=True, exist_ok=True)
    if not paths["verl"].exists():
        _jsonl_copies(FIXTURES / "verl_real" / "rollout_v1" / "1.jsonl", paths["verl"], rows, _verl)
    if not paths["verifiers"].exists():
        src = (
            FIXTURES
            / "verifiers_0110"
            / "outputs"
            / "evals"
            / "guess--scripted"
            / "0a1b2c3d"
            / "results.jsonl"
        )
        _jsonl_copies(src, paths["verifiers"], rows, _verifiers)
    if not paths["trl"].exists():
        t = pq.read_table(FIXTURES / "trl_real" / "trl_run" / "completions" / "completions_00001.parquet")
        copies, k = [], 0
        while sum(c.num_rows for c in copies) < rows:
            prompts = [f"{p} (copy {k})" for p in t.column("prompt").to_pylist()]
            copies.append(t.set_column(t.column_names.index("prompt"), "prompt", pa.array(prompts)))
            k += 1
        pq.write_table(pa.concat_tables(copies), paths["trl"])
    return paths


def time_read(path: Path, repeats: int) -> tuple[float, int, str]:
    """(median seconds of file to batch, steps, the importer detected)."""
    from crbc_viz.io.importers import read_file

    got = read_file(str(path))  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = read_file(str(path))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), got.batch.num_steps, got.fmt


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/crbc_bench_importers"))
    a = ap.parse_args(argv)
    paths = write_files(a.workdir, a.rows)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(f"commit {commit}, {a.rows} rows per file, median of {a.repeats}\n")
    print("| file | importer | steps | file to batch s |\n| --- | --- | ---: | ---: |")
    for name, p in paths.items():
        sec, steps, fmt = time_read(p, a.repeats)
        print(f"| {name} | {fmt} | {steps} | {sec:.3f} |")


if __name__ == "__main__":
    main()
