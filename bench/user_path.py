"""The user-path target table in one run, each row beside its baseline and target:

    python -m bench.user_path [--quick] [--write] [--sweep-sizes 1000,10000,100000]
                              [--ingest-sizes-mb 100,800,3000] [--repeats 7]
                              [--only score|cli|sweep|ingest|gpu]

1. ``crbc_viz.score(batch, "crbc")`` on workload (b), engine loaded, one process: median of
   ``--repeats`` after a warm-up against `bench.baselines.crbc_dict_spsolve` on the same batch
   (both checked against the numpy reference to 1e-9; every row timed in turn in each round),
   beside the memory-bandwidth floor (32 bytes per step at the bandwidth a numpy copy measures
   in the same run) and the I/O floor (the engine's input and output bytes once, `io_floor_bytes`,
   at the same bandwidth), wall and CPU time; kernel alone, numpy reference and ``build_graph`` as context. The block's
   header names the commit it ran on.
2. ``python -m crbc_viz score FILE.jsonl -o OUT.parquet`` on the 80k-step JSONL, a fresh
   process each run, wall including interpreter start (median after one warm-up run).
3. One group of 1k/10k/100k anchors, every graph estimator, auto backend (`bench.sweep`).
4. Ingest of one JSONL file per size, fresh process, peak RSS = VmHWM (`bench.ingest_bench`);
   a size is skipped when less than 2.5× its size is free on disk.
5. The fused CRBC path on CUDA, workloads (b) and (c) (`bench.gpu_bench`), when there is one.

``--quick`` is a dry run (sweep 1000, ingest 5 MB, one repeat). ``--write`` replaces the block
between ``<!-- issue17:begin -->`` and ``<!-- issue17:end -->`` of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import baselines, ingest_bench, sweep
from bench.__main__ import (
    METHODS,
    _estimator,
    _graph_args,
    commit,
    machine,
    memory_bandwidth_gbs,
    write_block,
)
from bench.workloads import load

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- issue17:begin -->", "<!-- issue17:end -->"
SECTION = "## User path, group size, ingest"
SCORE_X, CLI_S = 60.0, 0.6
#: The memory-bandwidth floor of the score row: 32 bytes per step touched once, as `python -m bench`'s.
FLOOR_BYTES_PER_STEP = 32
#: The engine's own input and output, each byte moved once (`io_floor_bytes`): per step it reads
#: the anchor hash and the action id (8 + 8 bytes) and writes value, Q, credit and advantage
#: (4 × 8); per trajectory an offset and the outcome (8 + 1), per group an offset (8).
IO_READ_PER_STEP, IO_WRITE_PER_STEP, IO_PER_TRAJ, IO_PER_GROUP = 16, 32, 9, 8


def io_floor_bytes(batch) -> int:
    """Bytes ``score(batch, "crbc")`` must read and write at the least: its input arrays once
    and its four per-step outputs once (the merge tables and the solve's scratch are per group
    and stay in cache). The copy bandwidth counts a byte read plus a byte written as two bytes,
    so these are timed at the same rate."""
    steps = (IO_READ_PER_STEP + IO_WRITE_PER_STEP) * batch.num_steps
    return steps + IO_PER_TRAJ * batch.num_trajectories + IO_PER_GROUP * (batch.num_groups + 1)


#: The tree the CLI target was measured on (~1.9 s: the per-step JSONL reader, batches as
#: pandas frames; 2026-12-02 19:06). Its CLI is timed in the same run as ours, extracted with
#: ``git archive`` and run by the same interpreter, so the row has its baseline beside it on a
#: machine whose speed varies; ``1.9 / 0.6`` is the speed-up the target asks of it.
BASELINE_TREE, BASELINE_CLI_S = "59f727e4cddb678f9dbb73139fbe8c1f409a8504", 1.9
INGEST_MB, INGEST_S, INGEST_RSS_MB = 800, 30.0, 1.2e9 / 2**20  # 1.2 GB = 1.2·10⁹ bytes, in MiB
GPU_MS = {"b": 1.0, "c": 20.0}
LABELS = {
    "score": 'score(batch, "crbc") ≥ 60×',
    "cli": "CLI ≤ 0.6 s",
    "sweep": "group size ≤ 10 s, ≤ 2 GB",
    "ingest": "ingest 800 MB ≤ 30 s, ≤ 1.2 GB",
    "gpu": "H200 fused b ≤ 1 ms, c ≤ 20 ms",
}


def _yes(ok) -> str:
    return ok if isinstance(ok, str) else "yes" if ok else "no"


def _part(head: str, header: list[str], rows: list[list], align: str) -> str:
    """``head``, then a markdown table; ``align``: a letter per column, l(eft), r(ight), c(entre)."""
    rule = {"l": " --- |", "r": " ---: |", "c": " :---: |"}
    return "\n".join(
        [
            head,
            "",
            "| " + " | ".join(header) + " |",
            "|" + "".join(rule[a] for a in align),
            *("| " + " | ".join(map(str, r)) + " |" for r in rows),
        ]
    )


def interleaved(fns: dict, repeats: int, cpu: dict | None = None) -> dict:
    """Median seconds of each of ``fns`` (label: zero-argument call) over ``repeats`` rounds after
    one warm-up round; each round calls every function once, in turn, so all of them see the
    same machine load (a shared machine's load moves between runs of one function). ``cpu``,
    when given, receives each label's median process CPU seconds (all threads), which a loaded
    machine's waiting does not count."""
    for fn in fns.values():
        fn()
    times = {label: [] for label in fns}
    cpus = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t)
            cpus[label].append(time.process_time() - c)
    if cpu is not None:
        cpu.update({label: statistics.median(ts) for label, ts in cpus.items()})
    return {label: statistics.median(ts) for label, ts in times.items()}


def score_b(repeats: int) -> tuple[str, bool]:
    import crbc_viz
    import crbc_viz.backends.numba.crbc  # noqa: F401  the engine loaded, as in a training process

    batch = load("b")
    graph = crbc_viz.build_graph(batch)
    ref = crbc_viz.score(graph, "crbc", backend="numpy").advantage
    backend = crbc_viz.score(batch, "crbc").backend
    cases = {  # label: (function, its prepared arguments, whether it returns the step advantages)
        f'`score(batch, "crbc")`, auto → {backend}': (
            lambda b: crbc_viz.score(b, "crbc").advantage,
            (batch,),
            True,
        ),
        "engine kernel alone (prepared arrays)": (METHODS["crbc_numba"], _graph_args(batch), True),
        "numpy reference on a built graph": (_estimator("crbc", "numpy"), (graph,), True),
        "`build_graph(batch)`": (crbc_viz.build_graph, (batch,), False),
        "baseline `bench.baselines.crbc_dict_spsolve`": (
            baselines.crbc_dict_spsolve,
            (baselines.group_lists(batch),),
            True,
        ),
    }
    for label, (fn, args, checked) in cases.items():
        err = float(np.max(np.abs(fn(*args) - ref))) if checked else 0.0
        assert err < 1e-9, f"{label}: advantages differ from the numpy reference by {err}"
    cpu = {}
    times = interleaved(
        {label: (lambda f=fn, a=a: f(*a)) for label, (fn, a, _) in cases.items()}, repeats, cpu
    )
    gbs = memory_bandwidth_gbs()
    floor = FLOOR_BYTES_PER_STEP * batch.num_steps / (gbs * 1e9)
    io_floor = io_floor_bytes(batch) / (gbs * 1e9)
    first, *_, base = times.values()  # the user's call, ..., the baseline
    met = base / first >= SCORE_X
    (cpu_first, *_, cpu_base), labels = cpu.values(), list(cpu)
    rows = [
        [
            label,
            f"{t * 1e3:.2f}",
            f"{base / t:.1f}" if cases[label][2] else "",
            f"{t / floor:.1f}",
            f"{t / io_floor:.1f}",
            "" if i else "≥ 60×",
            "" if i else _yes(met),
        ]
        for i, (label, t) in enumerate(times.items())
    ]
    rows.insert(
        1,
        [
            f"memory-bandwidth floor ({FLOOR_BYTES_PER_STEP} bytes per step at {gbs:.1f} GB/s, numpy copy)",
            f"{floor * 1e3:.3f}",
            f"{base / floor:.0f}",
            "1.0",
            f"{floor / io_floor:.2f}",
            "",
            "",
        ],
    )
    rows.insert(
        2,
        [
            f"I/O floor (the engine's input and output once: {io_floor_bytes(batch):,} bytes, same bandwidth)",
            f"{io_floor * 1e3:.3f}",
            f"{base / io_floor:.0f}",
            f"{io_floor / floor:.2f}",
            "1.0",
            "",
            "",
        ],
    )
    cpu_line = (
        f"CPU time (process, all threads; median of the same rounds): `score` {cpu_first * 1e3:.2f} ms, "
        f"kernel alone {cpu[labels[1]] * 1e3:.2f} ms, baseline {cpu_base * 1e3:.1f} ms: "
        f"{cpu_base / cpu_first:.1f}× the baseline, {cpu_first / floor:.1f}× the floor, "
        f"{cpu_first / io_floor:.1f}× the I/O floor."
    )
    head = (
        f'**`score(batch, "crbc")`, workload (b)**, {commit()} ({batch.num_steps:,} steps; one '
        f"process, engine loaded; median of {repeats} rounds after a warm-up, each round running "
        "every row once in turn; the advantages of score, kernel and baseline agree with the numpy "
        "reference to 1e-9)"
    )
    header = ["what", "median ms", "× dict+spsolve", "× floor", "× I/O floor", "target", "met"]
    return _part(head, header, rows, "lrrrrlc") + "\n\n" + cpu_line, met


def _user_env() -> dict:
    """The environment a user's shell gives: Python's bytecode cache on (a sandbox or CI
    setting ``PYTHONDONTWRITEBYTECODE`` would recompile every crbc_viz module on every run,
    ~0.1 s; the warm-up run writes the cache, as a user's first run does)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(cmd: list[str], cwd: Path = ROOT) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=_user_env())
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t


def _check_cli_output(log: Path, out: Path) -> None:
    """The CLI's Parquet equals `CreditResult.to_frame` of the schema path's batch (1e-9)."""
    import pandas as pd

    from crbc_viz.api import score
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.readers import read_table

    want = score(build_batch(read_table(str(log))), "crbc", backend="numpy").to_frame()
    got = pd.read_parquet(out)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=0, atol=1e-9)


def _baseline_tree(workdir: Path) -> Path | str:
    """`BASELINE_TREE` extracted under ``workdir`` (its ``crbc_viz`` package), or why not."""
    dest = workdir / "baseline_tree"
    dest.mkdir()
    try:
        archive = subprocess.run(
            ["git", "archive", BASELINE_TREE, "crbc_viz"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        why = (getattr(exc, "stderr", b"") or b"").decode(errors="replace")[:200].strip() or exc
        return f"not run: commit {BASELINE_TREE[:7]} not readable here ({why})"
    return dest


def cli(workdir: Path, runs: int, baseline: bool = True) -> tuple[str, bool | str]:
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    batch = random_mdp_batch(256, 8, 50, num_states=40, p_fail=0.01, seed=1)
    log, out = workdir / "b80k.jsonl", workdir / "out.parquet"
    log.write_text("".join(json.dumps(r) + "\n" for r in batch_to_rows(batch)))
    size = log.stat().st_size
    cmds = {
        "`python -m crbc_viz score b80k.jsonl -o out.parquet`": [
            sys.executable,
            "-m",
            "crbc_viz",
            "score",
            str(log),
            "-o",
            str(out),
        ],
    }
    tree = _baseline_tree(workdir) if baseline else "not run (--quick)"
    base_label = (
        f"baseline: the same command on the tree the issue measured (commit {BASELINE_TREE[:7]}, "
        f"~{BASELINE_CLI_S} s then), same interpreter"
    )
    if isinstance(tree, Path):
        cmds[base_label] = cmds[next(iter(cmds))]  # run from the tree: `-m` finds its package first
    cmds |= {
        "`python -c pass` (interpreter start alone)": [sys.executable, "-c", "pass"],
        "`python -c 'import crbc_viz.cli, crbc_viz.io.columnar, crbc_viz.api, crbc_viz.estimators, "
        "pyarrow.parquet'` (the command's imports)": [
            sys.executable,
            "-c",
            "import crbc_viz.cli, crbc_viz.io.columnar, crbc_viz.api, crbc_viz.estimators, pyarrow.parquet",
        ],
        "`python -c 'import pandas'` (not on this path since the columnar lane; for scale)": [
            sys.executable,
            "-c",
            "import pandas",
        ],
    }
    # The timed command must take the columnar lane (no pandas) and write what the pandas path
    # writes: checked once, untimed, in a process that reports its modules.
    probe = (
        "import sys; from crbc_viz.cli import main; "
        f"rc = main(['score', {str(log)!r}, '-o', {str(out)!r}]); "
        "print('PANDAS' if 'pandas' in sys.modules else 'NO-PANDAS'); sys.exit(rc)"
    )
    probed = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, env=_user_env()
    )
    if probed.returncode or "NO-PANDAS" not in probed.stdout:
        raise SystemExit(f"the CLI run imported pandas or failed:\n{probed.stdout}{probed.stderr[-2000:]}")
    _check_cli_output(log, out)
    try:  # the first run of each warms the page cache and is not counted
        walls = {
            label: [_wall(cmd, tree if label == base_label else ROOT) for _ in range(runs + 1)][1:]
            for label, cmd in cmds.items()
        }
    finally:
        log.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
    ours = statistics.median(next(iter(walls.values())))
    want_x = BASELINE_CLI_S / CLI_S
    ratio = statistics.median(walls[base_label]) / ours if base_label in walls else None
    beside = "" if ratio is None else f"; {ratio:.1f}× {'≥' if ratio >= want_x else '<'} {want_x:.1f}×"
    met: bool | str = ours <= CLI_S
    if not met:
        met = f"no ({ours:.2f} s)"
        if ratio is not None:
            met = (
                f"no ({ours:.2f} s; {ratio:.1f}× the issue's tree in the same run, "
                f"where {BASELINE_CLI_S} → {CLI_S} s asks {want_x:.1f}×)"
            )
    rows = []
    for i, (label, w) in enumerate(walls.items()):
        x = "1.0" if i == 0 else f"{statistics.median(w) / ours:.1f}" if label == base_label else ""
        target = f"≤ {CLI_S} s (≥ {want_x:.1f}× the baseline)" if i == 0 else ""
        mark = ("yes" if ours <= CLI_S else "no") + beside if i == 0 else ""
        rows.append([label, f"{statistics.median(w):.3f}", f"{min(w):.3f}–{max(w):.3f}", x, target, mark])
    if isinstance(tree, str):
        rows.append([base_label, "", "", "", "", tree])
    head = (
        f"**CLI end to end** ({batch.num_steps:,} steps, {size / 1e6:.1f} MB JSONL from "
        "`random_mdp_batch(256, 8, 50, num_states=40, p_fail=0.01, seed=1)`, `batch_to_rows`, "
        f"`json.dumps` per row; a fresh process per run, median of {runs} after a warm-up run that "
        "writes Python's bytecode cache). "
        "The run takes the columnar lane: checked untimed that it imports no pandas and that its "
        "Parquet equals the schema path's `to_frame` to 1e-9"
    )
    header = ["what", "median wall s", "range s", "× ours", "target", "met"]
    return _part(head, header, rows, "lrrrlc"), met


def group_sizes(sizes: list[int]) -> tuple[str, bool]:
    rows = sweep.run(sizes, sweep.graph_estimators())
    head = (
        "**Group size** (`bench.sweep`: one group, every graph estimator, auto backend, a fresh "
        "process per cell, one cold call including any engine load; peak = VmHWM)"
    )
    return head + "\n\n" + sweep.render(rows), all(sweep.met(r) for r in rows)


def ingest(workdir: Path, sizes_mb: list[float]) -> tuple[str, bool | str]:
    rows, met = [], "not run (no 800 MB size)"
    for mb in sizes_mb:
        target = mb == INGEST_MB
        free = shutil.disk_usage(workdir).free
        if free < 2.5 * mb * 1e6:
            reason = f"skipped: {free / 1e9:.1f} GB free, needs {2.5 * mb / 1e3:.1f} GB (2.5 × the file)"
            print(f"ingest {mb:g} MB {reason}", file=sys.stderr)
            rows.append([f"{mb:g} (asked)", "", "", "", reason, ""])
            met = reason if target else met
            continue
        r = ingest_bench.run_one(workdir, mb)
        print(r, file=sys.stderr, flush=True)
        if target:
            met = r["wall_s"] <= INGEST_S and r["peak_rss_mb"] <= INGEST_RSS_MB
        rows.append(
            [
                f"{r['file_mb']:,.0f}",
                f"{r['steps']:,}",
                f"{r['wall_s']:.1f}",
                f"{r['peak_rss_mb']:,.0f}",
                "≤ 30 s, ≤ 1.2 GB" if target else "RSS vs size",
                _yes(met) if target else "",
            ]
        )
    head = (
        "**Ingest** (`bench.ingest_bench`: one canonical JSONL file per size, ~750 bytes a step, "
        "`crbc_viz.store.ingest` in a fresh process; peak = VmHWM in MiB; 1.2 GB "
        "is read as 1.2·10⁹ bytes = 1,144 MiB, as `bench.sweep` reads 2 GB as 1,907 MiB)"
    )
    return _part(head, ["file MB", "steps", "wall s", "peak RSS MiB", "target", "met"], rows, "rrrrlc"), met


def gpu(workloads: list[str], repeats: int) -> tuple[str, bool | str]:
    import torch

    head = "**CRBC fused on the GPU** (`bench.gpu_bench`: merge + solve + credit on the device, synchronized)"
    if not torch.cuda.is_available():
        return head + ": no GPU on this machine", "no GPU on this machine"
    from bench import gpu_bench

    rows = [r for r in gpu_bench.measure(workloads, "cuda", repeats) if r["dtype"] == "float64"]
    met = {r["workload"]: r["median_s"] * 1e3 <= GPU_MS[r["workload"]] for r in rows}
    cells = [
        [
            r["workload"],
            f"{r['steps']:,}",
            f"{r['median_s'] * 1e3:.3f}",
            f"{r['diff']:.1e}",
            f"≤ {GPU_MS[r['workload']]:g} ms",
            _yes(met[r["workload"]]),
        ]
        for r in rows
    ]
    head += f", {torch.cuda.get_device_name(0)}, float64, median of {repeats} after a warm-up"
    return (
        _part(
            head,
            ["workload", "steps", "median ms", "max abs diff vs CPU engine", "target", "met"],
            cells,
            "lrrrlc",
        ),
        all(met.values()) if met.keys() >= GPU_MS.keys() else "c not run",
    )


def _cpu_ticks() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``: user, nice, system, idle, iowait, irq,
    softirq, steal), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            return [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None


def _steal(a, b) -> str:
    """``; CPU time stolen by the hypervisor x %`` between two `_cpu_ticks` readings: on a
    shared VM the same code runs slower when its neighbours are busy."""
    if not a or not b or sum(b) <= sum(a):
        return ""
    return f"; CPU time stolen by the hypervisor {100 * (b[7] - a[7]) / (sum(b) - sum(a)):.1f} % over the run"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(prog="python -m bench.user_path")
    ap.add_argument("--quick", action="store_true", help="dry run: sweep 1000, ingest 5 MB, 1 repeat")
    ap.add_argument("--write", action="store_true", help="replace the issue-17 block of bench/RESULTS.md")
    ap.add_argument("--sweep-sizes", default="1000,10000,100000")
    ap.add_argument("--ingest-sizes-mb", default="100,800,3000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", choices=list(LABELS), help="run this block alone (no --write)")
    args = ap.parse_args(argv)
    command = " ".join(["python -m bench.user_path", *(argv if argv is not None else sys.argv[1:])])
    sizes = [1000] if args.quick else [int(s) for s in args.sweep_sizes.split(",")]
    ingest_mb = [5.0] if args.quick else [float(s) for s in args.ingest_sizes_mb.split(",")]
    repeats = 1 if args.quick else args.repeats
    load_start, started, cpu_start = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M"), _cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="crbc_user_path_") as tmp:
        blocks = {
            "score": lambda: score_b(repeats),
            "cli": lambda: cli(Path(tmp), repeats, baseline=not args.quick),
            "sweep": lambda: group_sizes(sizes),
            "ingest": lambda: ingest(Path(tmp), ingest_mb),
            "gpu": lambda: gpu(["b"] if args.quick else ["b", "c"], 1 if args.quick else max(repeats, 20)),
        }
        parts = {k: run() for k, run in blocks.items() if args.only in (None, k)}
    loads = [" / ".join(f"{x:.2f}" for x in la) for la in (load_start, os.getloadavg())]
    text = "\n\n".join(
        [
            f"Machine: {machine()}",
            f"Command: `{command}`, run {started}; load average (1, 5, 15 min) {loads[0]} at the start, "
            f"{loads[1]} at the end{_steal(cpu_start, _cpu_ticks())}.",
            *(part for part, _ in parts.values()),
            "Targets met: " + "; ".join(f"{LABELS[k]}: {_yes(ok)}" for k, (_, ok) in parts.items()) + ".",
        ]
    )
    print(text)
    if args.write and args.only is None:
        write_block(text, BEGIN, END, section=SECTION)
    return text


if __name__ == "__main__":
    main()
