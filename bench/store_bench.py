"""Log-store benchmark: ``python -m bench.store_bench [--steps 1000000] [--workdir DIR]``.

Generates a training run of about ``--steps`` environment steps (8 rollouts per group, about
30 steps per rollout, ``--train-steps`` training steps, one canonical JSONL dump per training
step, with realistic text: ~900-character observations, ~400-character responses, ~150-character
anchors) from `crbc_viz.synthetic.random_mdp_batch`, then times, each phase in a fresh process
(so every peak RSS is that phase's own):

1. ``ingest``: all dumps into a new store (importer detection, validation, anchor hashing,
   zstd Parquet parts, manifests);
2. ``open + show one group``: open the store, resolve one group, load it with its text;
3. ``score one train_step``: load every group of one training step (hot columns) and score
   them with CRBC (``backend=auto``), numba compile cache warm (one untimed warm-up on a
   small batch in the same process).

Prints a markdown table (targets: ingest <= 60 s, open + group <= 1 s, score a train_step
<= 5 s, peak RSS <= 3 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

_WORDS = (
    "you are in the middle of a room looking quickly around you see a cabinet drawer "
    "countertop shelf sinkbasin stoveburner fridge microwave toaster coffeemachine "
    "garbagecan dresser sidetable desk bed laundryhamper armchair safe your task is to "
    "put some clean mug on the find two pillow and them in heat apple then place it "
    "nothing happens on open close arrive at which contains keychain creditcard "
    "pencil book laptop cellphone alarmclock statue vase remote"
).split()


def _fragments(rng, n: int, lo: int, hi: int) -> np.ndarray:
    out = []
    for _ in range(n):
        k = int(rng.integers(lo, hi))
        words = rng.choice(_WORDS, size=k // 5 + 2)
        out.append(" ".join(words)[:k])
    return np.array(out, dtype=object)


def generate(workdir: Path, total_steps: int, train_steps: int, seed: int = 0) -> list[Path]:
    """Write ``train_steps`` canonical JSONL dumps of about ``total_steps`` steps in all."""
    from crbc_viz.synthetic import random_mdp_batch

    rng = np.random.default_rng(seed)
    obs_frag = _fragments(rng, 4096, 80, 240)
    resp_frag = _fragments(rng, 4096, 60, 200)
    verbs = np.array(
        ["go to", "open", "close", "take", "put", "examine", "use", "heat", "clean"], dtype=object
    )
    objs = np.array(
        [
            "cabinet",
            "drawer",
            "countertop",
            "shelf",
            "fridge",
            "microwave",
            "sinkbasin",
            "desk",
            "sidetable",
            "dresser",
        ],
        dtype=object,
    )
    per_group = 8 * 27.7  # mean rollout length of random_mdp_batch(max_steps=45)
    groups = max(1, int(round(total_steps / train_steps / per_group)))
    files = []
    for t in range(train_steps):
        b = random_mdp_batch(groups, 8, 45, seed=seed * 1000 + t, run_id="bench-run", text=True)
        s = b.steps
        S = len(s)
        state = s["anchor_obs"].str.slice(6).astype(int).to_numpy()
        gidx = b.step_group
        act = s["action"].str.slice(1).astype(int).to_numpy()
        # Anchors: a ~150-char description per (task, state); actions: a phrase per (task, id).
        anchor = [
            f"Task {g}: you are at location {st}. You see " + obs_frag[(g * 131 + st) % 4096][:120]
            for g, st in zip(gidx, state)
        ]
        action = [f"{verbs[(g + a) % 9]} {objs[(g * 7 + a) % 10]} {a + 1}" for g, a in zip(gidx, act)]
        k = rng.integers(0, 4096, size=(S, 6))
        obs = [" ".join(obs_frag[r]) for r in k]
        kr = rng.integers(0, 4096, size=(S, 3))
        resp = [f"<think>{' '.join(resp_frag[r])}</think><action>{a}</action>" for r, a in zip(kr, action)]
        df = pd.DataFrame(
            {
                "run_id": "bench-run",
                "train_step": t,
                "group_id": s["group_id"].to_numpy(),
                "traj_id": [f"{g}-{tr}" for g, tr in zip(s["group_id"], s["traj_id"])],
                "step_idx": s["step_idx"].to_numpy(),
                "reward": s["reward"].to_numpy(),
                "action": action,
                "anchor_obs": anchor,
                "done": s["done"].to_numpy(),
                "success": s["success"].to_numpy(),
                "observation": obs,
                "response": resp,
                "env_name": "alfworld-like",
                "is_action_valid": True,
            }
        )
        path = workdir / "dumps" / f"step_{t:04d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        df.to_json(path, orient="records", lines=True, force_ascii=False)
        files.append(path)
    return files


_PHASES = {
    "ingest": """
from crbc_viz.store import ingest
rep = ingest(STORE, [DUMPS])
out["rows"] = rep.rows
""",
    "group": """
from crbc_viz.store import LogStore
out["import_s"] = time.perf_counter() - t0
st = LogStore(STORE)
b = st.load_batch(group="bench-run/3/task-00007", text=True)
out["rows"] = b.num_steps
out["text_ok"] = bool(b.steps["observation"].notna().all())
""",
    "score": """
from crbc_viz.api import score
from crbc_viz.graph import build_graph
from crbc_viz.store import LogStore
from crbc_viz.synthetic import random_mdp_batch
score(random_mdp_batch(4, 8, 20), "crbc")  # warm-up: imports and the numba cache
t0 = time.perf_counter()
st = LogStore(STORE)
b = st.load_batch(run="bench-run", train_step=5, anchor_obs=False)
r = score(build_graph(b), "crbc")
out["elapsed"] = time.perf_counter() - t0
out["rows"] = b.num_steps
out["groups"] = b.num_groups
out["backend"] = r.backend
""",
}


def _run_phase(name: str, store: Path, dumps: Path) -> dict:
    code = (
        "import json, resource, sys, time\nout = {}\nt0 = time.perf_counter()\n"
        f"STORE = {str(store)!r}\nDUMPS = {str(dumps)!r}\n"
        + _PHASES[name]
        + "\nout.setdefault('elapsed', time.perf_counter() - t0)\n"
        # VmHWM, not ru_maxrss: the latter survives exec and would report the parent's peak.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "out['peak_rss_mb'] = int(hwm) / 1024\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--train-steps", type=int, default=16)
    ap.add_argument("--workdir", default=None, help="kept when given; default a temp folder")
    ap.add_argument("--reuse", action="store_true", help="reuse the dumps already in --workdir")
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="crbc-store-bench-"))
    store = work / "store"
    if store.exists():
        shutil.rmtree(store)
    t0 = time.perf_counter()
    files = sorted((work / "dumps").glob("step_*.jsonl")) if args.reuse else []
    if not files:
        files = generate(work, args.steps, args.train_steps)
    gen_s = time.perf_counter() - t0
    in_bytes = sum(f.stat().st_size for f in files)
    res = {name: _run_phase(name, store, work / "dumps") for name in ("ingest", "group", "score")}
    store_bytes = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    rows = res["ingest"]["rows"]
    print(
        f"\nLog store, {rows:,} steps in {len(files)} JSONL dumps ({in_bytes / 2**20:.0f} MiB; "
        f"generated in {gen_s:.0f} s) -> store {store_bytes / 2**20:.0f} MiB; "
        f"{os.cpu_count()} CPU cores\n"
    )
    print("| phase | wall time | target | peak RSS | target | detail |")
    print("| --- | --- | --- | --- | --- | --- |")
    det = {
        "ingest": f"{rows:,} steps ({rows / res['ingest']['elapsed']:,.0f} steps/s)",
        "group": f"{res['group']['rows']} steps with text; "
        f"{res['group']['elapsed'] - res['group']['import_s']:.2f} s after imports",
        "score": f"{res['score']['groups']} groups, {res['score']['rows']:,} steps, "
        f"backend {res['score']['backend']}",
    }
    tgt = {"ingest": 60.0, "group": 1.0, "score": 5.0}
    label = {
        "ingest": "ingest",
        "group": "open store + show one group",
        "score": "score one train_step (CRBC)",
    }
    for k in ("ingest", "group", "score"):
        r = res[k]
        ok = "✅" if r["elapsed"] <= tgt[k] else "❌"
        rok = "✅" if r["peak_rss_mb"] <= 3072 else "❌"
        print(
            f"| {label[k]} | {r['elapsed']:.2f} s {ok} | ≤ {tgt[k]:g} s | "
            f"{r['peak_rss_mb']:.0f} MiB {rok} | ≤ 3 GiB | {det[k]} |"
        )
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
