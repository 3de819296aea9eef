"""The schema path on its own: ``python -m bench.schema_path [--steps 200000] [--repeats 5]
[--workdir DIR]``.

Writes three logs of ``--steps`` canonical steps (groups of 10 rollouts of 10 steps) that the
columnar lane declines, so `crbc_viz.io.load_rollouts` reads them through the readers,
validation and assembly of the schema path (`crbc_viz.io.assemble.build_batch`):

- ``jsonl``: a precomputed ``anchor_key`` on half the rows (the lane leaves keys to the schema);
- ``csv``: the same rows as text (every cell coerced from text);
- ``parquet``: without the keys, with a list column (the lane declines Parquet lists).

Each load (file to batch, then ``batch.steps`` read: the frame a page shows) is timed in this
process, the median of ``--repeats`` after one warm-up. Prints a markdown table and the commit.
Compare two commits by running the same command in a checkout of each (``git worktree add``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_logs(workdir: Path, steps: int) -> dict[str, Path]:
    """The three logs (written once per ``--steps``; kept in ``workdir``)."""
    import pandas as pd

    workdir.mkdir(parents=True, exist_ok=True)
    paths = {fmt: workdir / f"schema_{steps}.{fmt}" for fmt in ("jsonl", "csv", "parquet")}
    if all(p.exists() for p in paths.values()):
        return paths
    rng = random.Random(0)
    rows = []
    for g in range(max(1, steps // 100)):
        for t in range(10):
            for s in range(10):
                rows.append(
                    {
                        "group_id": f"g{g}",
                        "traj_id": f"t{t}",
                        "step_idx": s,
                        "reward": float(s == 9 and rng.random() < 0.5),
                        "anchor_obs": f"s{rng.randrange(30)}",
                        "action": rng.choice("lrud"),
                        "done": s == 9,
                        "anchor_key": None if rng.random() < 0.5 else f"k{rng.randrange(30)}",
                    }
                )
    with open(paths["jsonl"], "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    df = pd.DataFrame(rows)
    df.to_csv(paths["csv"], index=False)
    df.drop(columns=["anchor_key"]).assign(menu=[["l", "r"]] * len(df)).to_parquet(paths["parquet"])
    return paths


def time_load(path: Path, repeats: int) -> tuple[float, int]:
    """(median seconds of a load with ``batch.steps`` read, steps)."""
    from crbc_viz.io import load_rollouts

    n = len(load_rollouts(str(path)).steps)  # warm-up (imports, numba)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        batch = load_rollouts(str(path))
        _ = batch.steps
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.schema_path")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/crbc_schema_path_bench")
    args = ap.parse_args(argv)
    paths = write_logs(Path(args.workdir), args.steps)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    print(f"commit {head.stdout.strip() or '?'}, {args.repeats} repeats (median)")
    print("| log | steps | load + frame s |\n| --- | ---: | ---: |")
    for fmt, path in paths.items():
        sec, n = time_load(path, args.repeats)
        print(f"| {fmt} | {n:,} | {sec:.3f} |")


if __name__ == "__main__":
    main()
