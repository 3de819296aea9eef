"""GPU benchmark of the fused CRBC path (merge + solve + credit on the device).

    python -m bench.gpu_bench [--device cuda|cpu] [--workloads b,c] [--repeats 20]

Inputs are placed on the device once; each timed run covers the sort-based merge, the
bucketed batched LU (sparse fallback for large groups) and the credit readout, bracketed by
``torch.cuda.synchronize()``. Prints a markdown table (median ms, steps/s, float32 gap, peak
device memory) and, when ``$OUT`` is set, writes it to ``$OUT/gpu_results.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def measure(workloads, device: str = "cuda", repeats: int = 20) -> list[dict]:
    """Per workload and dtype (float64, float32): median seconds, gap to the CPU engine, peak MB."""
    import torch

    from bench.workloads import load
    from crbc_viz.backends.numba import available
    from crbc_viz.backends.numba.crbc import crbc_step_credit
    from crbc_viz.backends.torch.fused import crbc_step_credit_torch, to_device
    from crbc_viz.graph import _factorize_actions

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    for w in workloads:
        batch = load(w)
        actions, _ = _factorize_actions(batch)
        host = (
            batch.step_anchor_hash,
            actions,
            batch.traj_offsets,
            batch.group_traj_offsets,
            batch.traj_success,
        )
        ref = crbc_step_credit(*host)["advantage"] if available() else None
        dev_args = to_device(*host, device=str(dev))
        for dtype in (torch.float64, torch.float32):
            crbc_step_credit_torch(*dev_args, dtype=dtype)  # warm-up
            sync()
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(repeats):
                sync()
                t = time.perf_counter()
                out = crbc_step_credit_torch(*dev_args, dtype=dtype)
                sync()
                times.append(time.perf_counter() - t)
            diff = (
                float(np.max(np.abs(out["advantage"].double().cpu().numpy() - ref)))
                if ref is not None
                else float("nan")
            )
            peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else float("nan")
            rows.append(
                {
                    "workload": w,
                    "steps": batch.num_steps,
                    "dtype": str(dtype).split(".")[-1],
                    "median_s": statistics.median(times),
                    "diff": diff,
                    "peak_mb": peak,
                }
            )
            if dtype == torch.float64 and ref is not None:
                assert diff < 1e-9, f"{w}: device result differs from the CPU engine by {diff}"
    return rows


def render(rows, device_name: str) -> str:
    import torch

    lines = [
        f"Device: {device_name}; torch {torch.__version__}",
        "",
        "| workload | steps | dtype | median ms | steps/s | max abs diff vs CPU engine | peak device MB |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['workload']} | {r['steps']:,} | {r['dtype']} | {r['median_s'] * 1e3:.3f} | "
        f"{r['steps'] / r['median_s']:,.0f} | {r['diff']:.2e} | {r['peak_mb']:.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv=None):
    import torch

    ap = argparse.ArgumentParser(prog="python -m bench.gpu_bench")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workloads", default="b,c")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    name = torch.cuda.get_device_name(0) if torch.device(args.device).type == "cuda" else "CPU (dry run)"
    text = render(measure(args.workloads.split(","), args.device, args.repeats), name)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_results.md"), "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
