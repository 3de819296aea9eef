#!/usr/bin/env python3
"""Quality check for sample rollout files (stdlib only).

Usage:  python sample_rollouts/check.py FILE [FILE ...]   (.jsonl or .jsonl.gz)
        python sample_rollouts/check.py                   (all *.jsonl[.gz] under sample_rollouts/, toy/ excluded)

Per file it prints: groups, rollouts per group, steps, success rate (per trajectory), the share
of steps whose ``anchor_obs`` (exact string / canonical JSON) is also visited by ANOTHER rollout
of the same group, plus truncation/loop counts, and checks the quality bar:
>= 8 groups with >= 8 rollouts, success rate in [0.2, 0.9], shared-anchor steps >= 50%.
Exit status 1 when a file misses the bar.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import sys
from collections import defaultdict


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)


def anchor_key(a):
    if isinstance(a, str):
        return a.rstrip()
    return json.dumps(a, sort_keys=True)


def check(path) -> bool:
    trajs = defaultdict(list)  # (run, train_step, group, traj) -> rows
    for row in read_rows(path):
        key = (row.get("run_id"), row.get("train_step", 0), row["group_id"], row["traj_id"])
        trajs[key].append(row)
    groups = defaultdict(dict)
    problems = []
    for (run, ts, g, t), rows in trajs.items():
        rows.sort(key=lambda r: r["step_idx"])
        if [r["step_idx"] for r in rows] != list(range(len(rows))):
            problems.append(f"{g}/{t}: step_idx not contiguous from 0")
        if any(r.get("done") for r in rows[:-1]):
            problems.append(f"{g}/{t}: done=true before the last row")
        groups[(run, ts, g)][t] = rows

    n_traj = n_succ = n_steps = n_shared = n_trunc = n_loop = 0
    per_group = []
    for gkey in sorted(groups):
        tr = groups[gkey]
        visitors = defaultdict(set)
        for t, rows in tr.items():
            for r in rows:
                visitors[anchor_key(r["anchor_obs"])].add(t)
        g_succ = g_steps = g_shared = 0
        for rows in tr.values():
            succ = bool(rows[-1].get("success"))
            g_succ += succ
            if not rows[-1].get("done"):
                n_trunc += 1
            keys = [anchor_key(r["anchor_obs"]) for r in rows]
            if len(set(keys)) < len(keys):
                n_loop += 1
            for k in keys:
                g_steps += 1
                g_shared += len(visitors[k]) > 1
        n_traj += len(tr)
        n_succ += g_succ
        n_steps += g_steps
        n_shared += g_shared
        per_group.append((gkey[2], len(tr), g_succ, g_steps, len(visitors), g_shared / max(g_steps, 1)))

    big = sum(1 for _, n, *_ in per_group if n >= 8)
    sr = n_succ / max(n_traj, 1)
    sh = n_shared / max(n_steps, 1)
    print(f"== {path}")
    print(f"   {'group':<26} {'rollouts':>8} {'success':>8} {'steps':>6} {'anchors':>8} {'shared':>7}")
    for g, n, s, st, na, f in per_group:
        print(f"   {g:<26} {n:>8} {s:>8} {st:>6} {na:>8} {f:>7.2f}")
    print(f"   groups={len(per_group)} (with >=8 rollouts: {big})  trajectories={n_traj}  steps={n_steps}")
    print(
        f"   success rate={sr:.3f}  shared-anchor steps={sh:.3f}  "
        f"truncated={n_trunc}  trajectories with a revisited state={n_loop}"
    )
    ok = big >= 8 and 0.2 <= sr <= 0.9 and sh >= 0.5 and not problems
    for p in problems[:20]:
        print("   PROBLEM:", p)
    print("   quality bar:", "PASS" if ok else "FAIL")
    return ok


def main(argv=None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    if not paths:
        here = os.path.dirname(os.path.abspath(__file__))
        paths = sorted(
            glob.glob(os.path.join(here, "**", "*.jsonl"), recursive=True)
            + glob.glob(os.path.join(here, "**", "*.jsonl.gz"), recursive=True)
        )
        # the hand-written toy example is deliberately tiny; the bar is for real-env samples
        paths = [p for p in paths if os.sep + "toy" + os.sep not in p]
    ok = True
    for p in paths:
        ok &= check(p)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
