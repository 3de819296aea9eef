"""Ingest memory vs file size: ``python -m bench.ingest_bench [--sizes-mb 100,800,3000]
[--format jsonl|parquet]`` (parquet: the same rows as that many MB of JSONL, in one Parquet file).

For each size, one canonical JSONL file of about that many MB is generated under
``--workdir`` (default /tmp/crbc_ingest_bench; steps ~750 bytes: ids, action, a ~150-char
anchor, observation and response text), ingested into a fresh store in a fresh process
(``crbc_viz.store.ingest``), and deleted. Reported: steps, wall time and peak RSS
(``VmHWM``) of the ingest process. Files over 1 GiB need ``CRBC_VIZ_MAX_INPUT_MB`` raised
(the decompressed-input guard); the bench sets it for its own files.
Targets: 800 MB / 1.06M steps ≤ 30 s and ≤ 1.2 GB; RSS independent of size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(path: Path, target_mb: float, seed: int = 0, fmt: str = "jsonl") -> int:
    """Write about ``target_mb`` MB of step rows (as JSONL; a Parquet file holds the same
    rows, one row group per block), group after group; returns the steps."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    rng = np.random.default_rng(seed)
    words = np.array(
        "you see a cabinet drawer countertop shelf fridge microwave sink desk lamp "
        "keychain pencil book laptop cellphone statue vase remote open close take put "
        "go to examine heat clean arrive nothing happens".split(),
        dtype=object,
    )
    steps, block, written, writer = 0, 0, 0, None
    with open(path, "w") if fmt == "jsonl" else contextlib.nullcontext() as fh:
        while written < target_mb * 1e6:
            b = random_mdp_batch(200, 8, 45, seed=seed * 100_000 + block, run_id="bench-run")
            rows = []
            for r in batch_to_rows(b):
                r["group_id"] = f"{block}-{r['group_id']}"
                r["anchor_obs"] = f"{r['group_id']}: you are at {r['anchor_obs']}. " + " ".join(
                    words[(hash(r["anchor_obs"]) + np.arange(18)) % len(words)]
                )
                k = rng.integers(0, len(words), 60)
                r["observation"] = " ".join(words[k[:35]])
                r["response"] = (
                    "<think>" + " ".join(words[k[35:]]) + "</think><action>" + r["action"] + "</action>"
                )
                line = json.dumps(r) + "\n"
                written += len(line)
                if fmt == "jsonl":
                    fh.write(line)
                else:
                    rows.append(r)
                steps += 1
            if fmt == "parquet":
                table = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
            block += 1
    if writer is not None:
        writer.close()
    return steps


_CODE = """
import json, time
from crbc_viz.store import ingest
t = time.perf_counter()
rep = ingest({store!r}, [{log!r}])
wall = time.perf_counter() - t
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(json.dumps({{"rows": rep.rows, "wall_s": wall, "peak_rss_mb": int(hwm) / 1024}}))
"""


def run_one(workdir: Path, mb: float, fmt: str = "jsonl") -> dict:
    """Ingest one generated file of ``mb`` MB of JSONL rows (``fmt='parquet'``: the same rows
    as one Parquet file) in a fresh process."""
    workdir.mkdir(parents=True, exist_ok=True)
    log, store = workdir / f"log_{int(mb)}mb.{fmt}", workdir / f"store_{int(mb)}mb"
    shutil.rmtree(store, ignore_errors=True)
    steps = generate(log, mb, fmt=fmt)
    size = log.stat().st_size
    env = dict(
        os.environ,
        CRBC_VIZ_MAX_INPUT_MB=str(max(1024, int(size / 2**20) + 64)),
        CRBC_VIZ_MAX_ROWS=str(max(2_000_000, steps + 1)),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CODE.format(store=str(store), log=str(log))],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode != 0:
            raise SystemExit(f"ingest of {log} failed:\n{proc.stderr[-2000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        log.unlink(missing_ok=True)
        shutil.rmtree(store, ignore_errors=True)
    return {"target_mb": mb, "format": fmt, "file_mb": size / 1e6, "steps": steps, **out}


def render(rows) -> str:
    out = ["| file MB | steps | ingest wall s | peak RSS MB |", "| ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['file_mb']:,.0f} | {r['steps']:,} | {r['wall_s']:.1f} | {r['peak_rss_mb']:,.0f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.ingest_bench")
    ap.add_argument("--sizes-mb", default="100,800,3000")
    ap.add_argument("--workdir", default="/tmp/crbc_ingest_bench")
    ap.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for mb in (float(x) for x in args.sizes_mb.split(",")):
        rows.append(run_one(Path(args.workdir), mb, args.format))
        print(rows[-1], file=sys.stderr, flush=True)
    print(json.dumps(rows) if args.json else render(rows))


if __name__ == "__main__":
    main()
