"""Estimator benchmarks: ``python -m bench [--quick] [--write] [--workloads a,b,c]``.

Every method runs in the same process on the same workload; each figure is the median of
``--repeats`` runs (default 5) after one warm-up run. Inputs are prepared outside the timed
region for every method alike: our engines get the batch's step arrays (anchor hashes and
action ids are computed once at load, as the loaders do), the baselines get per-group Python
lists. `--write` replaces the generated block of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import baselines
from bench.workloads import SAMPLES, SYNTHETIC, load

HERE = Path(__file__).resolve().parent


def _graph_args(batch):
    from crbc_viz.graph import _factorize_actions

    actions, _ = _factorize_actions(batch)  # as the loader's ids
    return (batch.step_anchor_hash, actions, batch.traj_offsets, batch.group_traj_offsets, batch.traj_success)


def _crbc_numba(h, a, to, gto, s):
    from crbc_viz.backends.numba.crbc import crbc_step_credit

    return crbc_step_credit(h, a, to, gto, s)["advantage"]


def _crbc_torch(batch):
    import crbc_viz

    return crbc_viz.score(crbc_viz.build_graph(batch), "crbc", backend="torch", device="cpu").advantage


def _crbc_numpy(batch):
    import crbc_viz

    return crbc_viz.score(crbc_viz.build_graph(batch), "crbc", backend="numpy").advantage


def _estimator(name, backend):
    def run(graph):
        import crbc_viz

        return crbc_viz.score(graph, name, backend=backend, device="cpu").advantage

    return run


METHODS = {
    "crbc_numba": _crbc_numba,
    "crbc_torch_cpu": _crbc_torch,
    "crbc_numpy_ref": _crbc_numpy,
    "baseline_crbc_dict_spsolve": baselines.crbc_dict_spsolve,
    "baseline_gigpo_verl_loops": baselines.gigpo_loops,
    "baseline_crbc_networkx_vi": baselines.crbc_networkx_vi,
}


def prepare(method, batch):
    if method == "crbc_numba":
        return _graph_args(batch)
    if method.startswith("baseline_"):
        return (baselines.group_lists(batch),)
    return (batch,)


def timeit(fn, args, repeats):
    fn(*args)  # warm-up (JIT compile, caches)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def memory_bandwidth_gbs() -> float:
    """Streaming read+write bandwidth of this machine (numpy copy of 256 MB), GB/s."""
    src = np.ones(32 * 1024 * 1024)
    dst = np.empty_like(src)
    best = min(_copy_time(src, dst) for _ in range(5))
    return 2 * src.nbytes / best / 1e9


def _copy_time(src, dst):
    t = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t


def machine() -> str:
    import torch

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba

    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
        f"torch {torch.__version__}, numba {numba.__version__}, "
        f"CUDA {'yes: ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no'}"
    )


def run(workloads, repeats, quick):
    rows = []
    import crbc_viz
    from crbc_viz.estimators import specs

    for w in workloads:
        batch = load(w)
        S = batch.num_steps
        graph = crbc_viz.build_graph(batch)
        ref = crbc_viz.score(graph, "crbc", backend="numpy").advantage
        results = {}
        methods = [
            "crbc_numba",
            "crbc_torch_cpu",
            "crbc_numpy_ref",
            "baseline_crbc_dict_spsolve",
            "baseline_gigpo_verl_loops",
        ]
        if w != "c":
            methods.append("baseline_crbc_networkx_vi")
        for m in methods:
            reps = 1 if (quick or (w == "c" and m.startswith("baseline_"))) and repeats > 1 else repeats
            if w == "c" and m.startswith("baseline_") and not quick:
                reps = max(5, repeats)
            args = prepare(m, batch)
            t = timeit(METHODS[m], args, reps)
            if m in ("crbc_numba", "crbc_torch_cpu", "baseline_crbc_dict_spsolve"):
                err = float(np.max(np.abs(METHODS[m](*args) - ref)))
                assert err < 1e-8, (w, m, err)
            results[m] = t
        base = results["baseline_crbc_dict_spsolve"]
        for m, t in results.items():
            rows.append(
                {
                    "workload": w,
                    "steps": S,
                    "method": m,
                    "median_ms": t * 1e3,
                    "steps_per_s": S / t,
                    "x_vs_dict_spsolve": base / t,
                }
            )
        if w == "b":
            for spec in specs():
                if spec.requires or spec.name in ("crbc",):
                    continue
                backends = (
                    ["numpy"] + (["torch"] if spec.torch_fn else []) + (["numba"] if spec.numba_fn else [])
                )
                for backend in backends:
                    t = timeit(_estimator(spec.name, backend), (graph,), repeats)
                    rows.append(
                        {
                            "workload": w,
                            "steps": S,
                            "method": f"{spec.name}[{backend}]",
                            "median_ms": t * 1e3,
                            "steps_per_s": S / t,
                            "x_vs_dict_spsolve": base / t,
                        }
                    )
    return rows


def rss(workload, method):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.rss", workload, method],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def commit() -> str:
    """The checkout's commit (short hash; ``+ uncommitted changes`` when the tree differs from
    it), or ``unknown commit`` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {head}" + (" + uncommitted changes" if dirty else "")


def render(rows, extra) -> str:
    out = [
        f"Machine: {extra['machine']}",
        "",
        f"Command: `{extra['command']}` on {commit()} — medians over {extra['repeats']} runs after a warm-up.",
        "",
        "| workload | steps | method | median ms | steps/s | × dict+spsolve |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        out.append(
            f"| {r['workload']} | {r['steps']:,} | {r['method']} | {r['median_ms']:.2f} | "
            f"{r['steps_per_s']:,.0f} | {r['x_vs_dict_spsolve']:.1f} |"
        )
    if extra.get("rss"):
        out += [
            "",
            "| workload | method | peak RSS MB (whole process) | before the call MB |",
            "| --- | --- | ---: | ---: |",
        ]
        for (w, m), v in extra["rss"].items():
            out.append(f"| {w} | {m} | {v['peak_rss_mb']:.0f} | {v['baseline_rss_mb']:.0f} |")
    if extra.get("bandwidth"):
        bw = extra["bandwidth"]
        out += [
            "",
            f"Memory bandwidth (numpy copy, read+write): {bw:.1f} GB/s. Floor at 32 bytes per "
            f"step touched once:",
        ]
        for r in rows:
            if r["method"] == "crbc_numba":
                floor = 32 * r["steps"] / (bw * 1e9)
                out.append(
                    f"- {r['workload']}: floor {floor * 1e3:.3f} ms, measured {r['median_ms']:.2f} ms "
                    f"({r['median_ms'] / (floor * 1e3):.0f}× the floor)"
                )
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--workloads", default="a,b,c,sokoban,textworld")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a, b and the samples, 1 baseline run (a dry run)")
    ap.add_argument("--write", action="store_true", help="update the generated block of bench/RESULTS.md")
    args = ap.parse_args(argv)
    workloads = args.workloads.split(",")
    if args.quick:
        workloads = [w for w in workloads if w != "c"]
    for w in workloads:
        if w not in SYNTHETIC and w not in SAMPLES:
            ap.error(f"unknown workload {w!r}; valid: {', '.join([*SYNTHETIC, *SAMPLES])}")
    rows = run(workloads, args.repeats, args.quick)
    extra = {
        "machine": machine(),
        "repeats": args.repeats,
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "bandwidth": memory_bandwidth_gbs(),
        "rss": {},
    }
    if "c" in workloads:
        extra["rss"][("c", "crbc_numba")] = rss("c", "crbc_numba")
    text = render(rows, extra)
    print(text)
    if args.write:
        write_block(text, "<!-- estimators:begin -->", "<!-- estimators:end -->")


def write_block(
    text: str, start: str, end: str, section: str | None = None, path: Path = HERE / "RESULTS.md"
):
    """Replace ``start``…``end`` of ``path`` by ``text``, atomically; when the markers are absent,
    add them at the end of the ``section`` heading's section (or of the file)."""
    from crbc_viz.io.write import atomic_path

    doc = path.read_text() if path.exists() else "# Benchmark results\n"
    block = f"{start}\n{text}\n{end}"
    if start in doc:
        doc = doc[: doc.index(start)] + block + doc[doc.index(end) + len(end) :]
    else:
        at = len(doc)
        if section and section in doc:
            nxt = doc.find("\n## ", doc.index(section) + len(section))
            at = nxt + 1 if nxt >= 0 else at
        doc = doc[:at].rstrip() + "\n\n" + block + "\n" + ("\n" + doc[at:] if doc[at:] else "")
    with atomic_path(path) as tmp:
        Path(tmp).write_text(doc)


if __name__ == "__main__":
    main()
