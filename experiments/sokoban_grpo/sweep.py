"""Every estimator x every seed, then the bundled store and the results table.

    .venv-experiments/bin/python -m experiments.sokoban_grpo.sweep          # the full sweep
    .venv-experiments/bin/python -m experiments.sokoban_grpo.sweep --seeds 2 --steps 5 --out /tmp/s

1. trains each (estimator, seed) in its own process (``--jobs`` at a time), each resumable:
   a finished run is skipped, an interrupted one continues from its last checkpoint;
2. ingests the seed-0 run of every estimator into a fresh log store (``--bundle``, built in a
   temporary folder and swapped in) and computes its trends, so the app's Across training page
   opens on it with the trends already cached;
3. writes ``<out>/results.json`` and ``<out>/results.md``: success rate per train step and
   estimator, mean and 95% t-interval over the seeds, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .envs import REPO_ROOT

ESTIMATORS = ("grpo", "gigpo", "visit_local", "shortest_path", "crbc")
DEFAULT_OUT = REPO_ROOT / "experiments" / "out"
DEFAULT_BUNDLE = REPO_ROOT / "sample_rollouts" / "training" / "store"
#: train steps shown as columns of the results table
TABLE_STEPS = (0, 5, 10, 15, 20, 25, 30, 35, 39)


def _finished(run: Path, est: str, seed: int, steps: int) -> dict | None:
    """The checkpoint of a run that already finished with these settings (else None)."""
    try:
        state = json.loads((run / "checkpoint.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    c = state["config"]
    same = (c["estimator"], c["seed"], c["steps"]) == (est, seed, steps)
    return state if same and state["train_step"] == steps - 1 else None


def _train_one(est: str, seed: int, steps: int, out: Path, extra: list[str]) -> dict:
    run = out / "runs" / f"{est}-s{seed}"
    cmd = [
        sys.executable,
        "-m",
        "experiments.sokoban_grpo.trainer",
        "-q",
        "-e",
        est,
        "--seed",
        str(seed),
        "--steps",
        str(steps),
        "--out",
        str(run),
        *extra,
    ]
    t0 = time.perf_counter()
    state = None if extra else _finished(run, est, seed, steps)
    trained = state is None
    if trained:  # new or interrupted (the trainer resumes it), or other options
        res = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
        state = json.loads((run / "checkpoint.json").read_text(encoding="utf-8"))
    return {
        "estimator": est,
        "seed": seed,
        "wall_s": time.perf_counter() - t0,
        "trained": trained,
        "success": [m["success_rate"] for m in state["metrics"]],
        "seconds": sum(m["seconds"] for m in state["metrics"]),
    }


def build_store(runs: list[Path], dest: Path) -> dict:
    """A fresh store at ``dest`` holding the logs of ``runs``, trends cached."""
    from crbc_viz.analysis.trends import store_trends
    from crbc_viz.store import LogStore, ingest

    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    ingest(tmp, [str(r / "logs") for r in runs])
    tr = store_trends(LogStore(tmp))
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)
    return {"steps": tr.steps}


def t_interval(x: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval over axis 0."""
    from scipy.stats import t

    n = x.shape[0]
    m = x.mean(axis=0)
    if n < 2:
        return m, np.full_like(m, np.nan)
    return m, t.ppf(0.975, n - 1) * x.std(axis=0, ddof=1) / math.sqrt(n)


def results_table(results: list[dict], steps: int) -> tuple[dict, str]:
    by = {
        e: np.array([r["success"] for r in results if r["estimator"] == e])
        for e in ESTIMATORS
        if any(r["estimator"] == e for r in results)
    }
    cols = [s for s in TABLE_STEPS if s < steps]
    last = min(10, steps)
    summary, lines = {}, []
    head = ["estimator", "seeds"] + [f"step {s}" for s in cols] + [f"last {last} steps", "all steps"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + " --- |" * len(head))
    for e, a in by.items():
        m, h = t_interval(a)
        lm, lh = t_interval(a[:, -last:].mean(axis=1, keepdims=True))
        am, ah = t_interval(a.mean(axis=1, keepdims=True))
        summary[e] = {
            "seeds": int(a.shape[0]),
            "mean": m.tolist(),
            "ci95": h.tolist(),
            "last_mean": float(lm[0]),
            "last_ci95": float(lh[0]),
            "auc_mean": float(am[0]),
            "auc_ci95": float(ah[0]),
        }
        cells = (
            [e, str(a.shape[0])]
            + [f"{m[s]:.2f} ± {h[s]:.2f}" for s in cols]
            + [f"**{lm[0]:.3f} ± {lh[0]:.3f}**", f"{am[0]:.3f} ± {ah[0]:.3f}"]
        )
        lines.append("| " + " | ".join(cells) + " |")
    if "crbc" in by:
        lines += [
            "",
            "Paired over seeds (same rooms and the same first batch per seed): CRBC minus "
            "each baseline, mean ± 95% t-interval, and the seeds where CRBC is ahead.",
            "",
            f"| baseline | Δ last {last} steps | Δ all steps | CRBC ahead (all steps) |",
            "| --- | --- | --- | --- |",
        ]
        seeds = {e: [r["seed"] for r in results if r["estimator"] == e] for e in by}
        for e, a in by.items():
            if e == "crbc" or seeds[e] != seeds["crbc"]:
                continue
            c = by["crbc"]
            dl = c[:, -last:].mean(axis=1) - a[:, -last:].mean(axis=1)
            da = c.mean(axis=1) - a.mean(axis=1)
            (ml, hl), (ma, ha) = (t_interval(dl[:, None]), t_interval(da[:, None]))
            summary[e]["crbc_minus"] = {
                "last": float(ml[0]),
                "last_ci95": float(hl[0]),
                "all": float(ma[0]),
                "all_ci95": float(ha[0]),
            }
            lines.append(
                f"| {e} | {ml[0]:+.3f} ± {hl[0]:.3f} | {ma[0]:+.3f} ± {ha[0]:.3f} | "
                f"{int((da > 0).sum())}/{len(da)} |"
            )
    return summary, "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 per estimator")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="run folders and results")
    ap.add_argument(
        "--bundle", default=str(DEFAULT_BUNDLE), help="the store of every estimator's seed-0 run ('' to skip)"
    )
    a, extra = ap.parse_known_args(argv)  # other options go to every trainer
    ests = [e.strip() for e in a.estimators.split(",") if e.strip()]
    out = Path(a.out)
    t0 = time.perf_counter()
    jobs = [(e, s) for s in range(a.seeds) for e in ests]
    from tqdm import tqdm

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = [pool.submit(_train_one, e, s, a.steps, out, extra) for e, s in jobs]
        results = [f.result() for f in tqdm(futs, desc="runs", unit="run")]
    train_wall = time.perf_counter() - t0
    if a.bundle:
        t1 = time.perf_counter()
        build_store([out / "runs" / f"{e}-s0" for e in ests], Path(a.bundle))
        store_wall = time.perf_counter() - t1
    else:
        store_wall = 0.0
    summary, table = results_table(results, a.steps)
    wall = time.perf_counter() - t0
    cmd = "nice -n 10 .venv-experiments/bin/python -m experiments.sokoban_grpo.sweep " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    meta = {
        "command": cmd.strip(),
        "wall_s": round(wall, 1),
        "train_wall_s": round(train_wall, 1),
        "store_wall_s": round(store_wall, 1),
        "jobs": a.jobs,
        "steps": a.steps,
        "seeds": a.seeds,
        "run_wall_s_median": round(float(np.median([r["wall_s"] for r in results])), 1),
    }
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": results}, indent=1), encoding="utf-8"
    )
    fresh = sum(r["trained"] for r in results)
    timing = (
        f"{wall / 60:.1f} min wall ({fresh} runs trained, {a.jobs} at a time; median run "
        f"{meta['run_wall_s_median']} s)"
        if fresh
        else f"every run reused from {out} (no training in this call)"
    )
    md = (
        f"{table}\n\nSuccess rate of the train step's own rollouts (8 tasks x 8 rollouts), mean ± "
        f"95% t-interval over seeds. `{meta['command']}`: {timing}.\n"
    )
    (out / "results.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
