"""Group-size sweep: one group of ~1k, ~10k and ~100k distinct anchors, every graph
estimator through ``crbc_viz.score(batch, name)`` with the ``auto`` backend.

    python -m bench.sweep [--sizes 1000,10000,100000] [--json]

Each (size, estimator) runs in a fresh process (so peak RSS is its own): the process
generates the group (a random MDP walked by 16–512 rollouts, cycles and stochastic moves
included), warms nothing up, and times one `score` call — what a user running it once
pays, compile/load of the chosen backend included. Peak RSS is the process's ``VmHWM``.
Targets: ≤ 10 s and ≤ 2 GB each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_S, TARGET_MB = 10.0, 2e9 / 2**20  # 2 GB = 2·10⁹ bytes, in MiB (VmHWM)


def workload(n: int, seed: int = 7):
    """One group with about ``n`` distinct anchors: rollouts walk a random MDP over
    ``1.3 n`` states (3 actions; action 0 steps forward, the others jump to a random state,
    15% of moves are stochastic, 10% are self-loops), a step from a goal state (one in 997)
    by action 0 succeeds, any step fails with probability 0.001, and rollouts truncate at
    their step limit — cycles, merges, successes and failures all occur."""
    import numpy as np
    import pandas as pd

    from crbc_viz.data import RolloutBatch

    rng = np.random.default_rng(seed)
    R = {1000: 16, 10000: 64}.get(n, max(16, n // 200))
    L = max(100, 8 * n // R)
    n_s, A = int(1.3 * n), 3
    nxt = rng.integers(0, n_s, size=(n_s, A))
    nxt[:, 0] = (np.arange(n_s) + 1) % n_s
    nxt = np.where(rng.random((n_s, A)) < 0.1, np.arange(n_s)[:, None], nxt)
    state = rng.integers(0, n_s, R)
    alive = np.ones(R, bool)
    success = np.zeros(R, bool)
    done = np.zeros(R, bool)
    rec_s, rec_a = np.full((L, R), -1, np.int64), np.zeros((L, R), np.int64)
    for t in range(L):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        s = state[idx]
        a = np.where(rng.random(idx.size) < 0.5, 0, rng.integers(0, A, idx.size))
        rec_s[t, idx], rec_a[t, idx] = s, a
        won = (a == 0) & (s % 997 == 0)
        lost = ~won & (rng.random(idx.size) < 0.001)
        x = np.where(rng.random(idx.size) < 0.15, rng.integers(0, n_s, idx.size), nxt[s, a])
        success[idx[won]] = True
        done[idx[won | lost]] = True
        alive[idx[won | lost]] = False
        state[idx] = x
    lens = (rec_s >= 0).sum(axis=0)
    S = int(lens.sum())
    col = np.repeat(np.arange(R), lens)
    row = np.arange(S) - np.repeat(np.cumsum(lens) - lens, lens)
    step_state, step_action = rec_s[row, col], rec_a[row, col]
    traj_offsets = np.r_[0, np.cumsum(lens)].astype(np.int64)
    steps = pd.DataFrame(
        {
            "run_id": "sweep",
            "train_step": 0,
            "group_id": "g0",
            "traj_id": pd.Categorical.from_codes(col, categories=[f"r{i}" for i in range(R)]),
            "step_idx": row,
            "reward": 0.0,
            "action": pd.Categorical.from_codes(step_action, categories=["a0", "a1", "a2"]),
            "anchor_key": pd.Categorical.from_codes(
                step_state, categories=[f"{i + 1:016x}" for i in range(n_s)]
            ),
        }
    )
    steps.loc[traj_offsets[1:] - 1, "reward"] = success.astype(float)
    return RolloutBatch(
        steps=steps,
        step_traj=col,
        step_anchor_hash=(step_state + 1).astype(np.uint64),
        traj_offsets=traj_offsets,
        traj_group=np.zeros(R, np.int64),
        traj_success=success,
        traj_truncated=~done,
        traj_return=success.astype(float),
        group_traj_offsets=np.array([0, R]),
        groups=pd.DataFrame({"run_id": ["sweep"], "train_step": [0], "group_id": ["g0"]}),
        source="<sweep>",
    )


def graph_estimators() -> list[str]:
    from crbc_viz.estimators import specs

    return [s.name for s in specs() if not s.requires and s.name != "grpo"]


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one(n: int, name: str) -> dict:
    import crbc_viz

    batch = workload(n)
    before = _peak_mb()
    t = time.perf_counter()
    r = crbc_viz.score(batch, name)
    wall = time.perf_counter() - t
    import numpy as np

    return {
        "size": n,
        "estimator": name,
        "steps": batch.num_steps,
        "anchors": int(r.graph.num_nodes),
        "backend": r.backend,
        "seconds": wall,
        "peak_mb": _peak_mb(),
        "before_mb": before,
        "finite": bool(np.isfinite(r.advantage).all()),
    }


def run(sizes, names) -> list[dict]:
    rows = []
    for n in sizes:
        for name in names:
            proc = subprocess.run(
                [sys.executable, "-m", "bench.sweep", "--one", f"{n}:{name}"],
                capture_output=True,
                text=True,
                cwd=HERE.parent,
                timeout=600,
            )
            if proc.returncode != 0:
                rows.append({"size": n, "estimator": name, "error": proc.stderr.strip().splitlines()[-1:]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def met(r: dict) -> bool:
    """One cell met the targets: ≤ 10 s, ≤ 2 GB, finite advantages (an error never does)."""
    return "error" not in r and r["seconds"] <= TARGET_S and r["peak_mb"] <= TARGET_MB and r["finite"]


def render(rows) -> str:
    out = [
        "| anchors (target) | steps | estimator | backend (auto) | seconds | peak RSS MB | met (≤ 10 s, ≤ 2 GB) |",
        "| --- | ---: | --- | --- | ---: | ---: | :---: |",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['size']:,} | | {r['estimator']} | error: {r['error']} | | | no |")
            continue
        out.append(
            f"| {r['anchors']:,} ({r['size']:,}) | {r['steps']:,} | {r['estimator']} | {r['backend']} | "
            f"{r['seconds']:.2f} | {r['peak_mb']:.0f} | {'yes' if met(r) else 'no'} |"
        )
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.sweep")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--estimators", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        n, name = args.one.split(":")
        print(json.dumps(one(int(n), name)))
        return
    names = args.estimators.split(",") if args.estimators else graph_estimators()
    rows = run([int(s) for s in args.sizes.split(",")], names)
    print(json.dumps(rows) if args.json else render(rows))


if __name__ == "__main__":
    main()
