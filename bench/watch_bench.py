"""Memory and cost of a long ``crbc-viz ingest --watch``: ``python -m bench.watch_bench [--files
1000] [--write]``.

One watcher process (the real command, ``--settle 0.2``) follows an empty folder while this
process writes ``--files`` small canonical JSONL logs into it, one train step each (4 groups x
4 rollouts x 4 steps = 64 steps, ~11 KB), each under a temporary name and renamed into place
as the bundled trainer does, at a steady pace (``--pace-ms`` apart). After each ingested file
(the watcher's output line) the watcher's resident memory is sampled (``VmRSS`` in
``/proc/<pid>/status``). Then the watcher sits idle for ``--idle-s`` seconds and its CPU time
over that span is read (``utime + stime`` of ``/proc/<pid>/stat``), once with change events
and once more with ``--poll``; then it is stopped with SIGTERM.

Reported: files and steps in the store (checked: every step of every file, none twice), wall
time, the RSS medians of the first and last quarter of the files, their ratio (flat: within
10 %), peak RSS (``VmHWM``), the idle CPU share, and what the Across training page pays on a
1,000-source store each look (`crbc_viz.store.watch.store_state`) and each rerun (opening the
store). ``--write`` replaces the watch block of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- watch-bench:begin -->", "<!-- watch-bench:end -->"


def log_text(train_step: int) -> str:
    rows = []
    for g in range(4):
        for r in range(4):
            ok = (g * 7 + r * 3 + train_step) % 3 == 0
            for i in range(4):
                rows.append(
                    {
                        "run_id": "bench-watch",
                        "train_step": train_step,
                        "group_id": f"g{g}",
                        "traj_id": f"t{train_step}-{g}-{r}",
                        "step_idx": i,
                        "action": ("left", "right", "up", "down")[(i + r) % 4],
                        "anchor_obs": f"room {g}: cell {i} " + "#" * (i + g),
                        "reward": float(ok and i == 3),
                        "done": i == 3,
                        "success": ok,
                    }
                )
    return "".join(json.dumps(x) + "\n" for x in rows)


def _proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watcher:
    def __init__(self, logs: Path, store: Path, *extra: str):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "crbc_viz", "ingest", "--watch", str(logs), "--store", str(store)]
            + ["--settle", "0.2", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = 120.0) -> str:
        return self.lines.get(timeout=timeout)

    def stop(self) -> int:
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(timeout=60)


def idle_cpu(w: Watcher, seconds: float) -> float:
    """The watcher's CPU share over ``seconds`` of nothing happening."""
    c0, t0 = _cpu_s(w.p.pid), time.monotonic()
    time.sleep(seconds)  # the idle span measured
    return (_cpu_s(w.p.pid) - c0) / (time.monotonic() - t0)


def run(files: int, pace_ms: float, idle_s: float, workdir: Path) -> dict:
    from crbc_viz.store import LogStore
    from crbc_viz.store.watch import read_status, store_state

    shutil.rmtree(workdir, ignore_errors=True)
    logs, store = workdir / "logs", workdir / "store"
    logs.mkdir(parents=True)
    w = Watcher(logs, store)
    assert "watching" in w.next_line()
    rss: list[int] = []
    at: list[float] = []
    done = 0
    t0 = time.monotonic()
    written = 0
    next_write = time.monotonic()
    while done < files:
        now = time.monotonic()
        if written < files and now >= next_write:
            tmp = logs / f"train_step_{written:05d}.jsonl.tmp"
            tmp.write_text(log_text(written))
            os.replace(tmp, logs / f"train_step_{written:05d}.jsonl")
            written += 1
            next_write = now + pace_ms / 1000
        try:
            line = w.lines.get(timeout=max(0.001, next_write - time.monotonic()) if written < files else 120)
        except queue.Empty:
            continue
        if line.lstrip().startswith("ingested"):
            done += 1
            rss.append(_proc_kb(w.p.pid, "VmRSS"))
            at.append(time.monotonic())
        elif line.lstrip().startswith(("failed", "changed")):
            raise RuntimeError(f"watcher: {line}")
    wall = time.monotonic() - t0
    hwm = _proc_kb(w.p.pid, "VmHWM")
    idle_events = idle_cpu(w, idle_s)
    assert w.stop() == 0
    w = Watcher(logs, store, "--poll")
    deadline = time.monotonic() + 120
    while True:  # its first scans find every log already in the store
        st = read_status(store)
        if st and st.get("alive") and st["pending"] == 0 and st.get("present", 0) == files:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the polling watcher did not catch up: {st}")
        time.sleep(0.2)
    idle_poll = idle_cpu(w, idle_s)
    assert w.stop() == 0
    with LogStore(store) as st:
        info = st.summary()
        distinct = len(
            st.load_batch()
            .steps[["train_step", "group_id", "traj_id", "step_idx"]]
            .astype(str)
            .drop_duplicates()
        )
    expected = sum(log_text(t).count("\n") for t in range(files))
    assert info["steps"] == distinct == expected and info["train_steps"] == files, (info, distinct, expected)
    looks = []
    for _ in range(20):
        t = time.perf_counter()
        store_state(store)
        looks.append(time.perf_counter() - t)
    opens = []
    for _ in range(5):
        t = time.perf_counter()
        LogStore(store).summary()
        opens.append(time.perf_counter() - t)
    q = max(1, len(rss) // 4)
    first, last = statistics.median(rss[:q]), statistics.median(rss[-q:])
    gaps = [b - a for a, b in zip(at, at[1:])]
    return {
        "files": files,
        "steps": info["steps"],
        "pace_ms": pace_ms,
        "wall_s": wall,
        "rss_first_mb": first / 1024,
        "rss_last_mb": last / 1024,
        "ratio": last / first,
        "gap_first_ms": statistics.median(gaps[: q - 1]) * 1000,
        "gap_last_ms": statistics.median(gaps[-q:]) * 1000,
        "hwm_mb": hwm / 1024,
        "idle_s": idle_s,
        "idle_cpu_events": idle_events,
        "idle_cpu_poll": idle_poll,
        "look_ms": statistics.median(looks) * 1000,
        "open_ms": statistics.median(opens) * 1000,
    }


def render(r: dict) -> str:
    flat = abs(r["ratio"] - 1) <= 0.10
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Following a run: `ingest --watch` over a long watch",
            "",
            f"Machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "",
            f"Command: `python -m bench.watch_bench --files {r['files']} --write`, run "
            f"{dt.datetime.now():%Y-%m-%d %H:%M}; load average at the end {load}.",
            "",
            f"One watcher process (`crbc-viz ingest --watch DIR --store S --settle 0.2`, change events) "
            f"followed an empty folder while {r['files']:,} logs of one train step each (64 steps, "
            f"~11 KB) were renamed into it {r['pace_ms']:g} ms apart. RSS (`VmRSS`) sampled after "
            f"each ingested log; quarters by log. The store held every step once at the end "
            f"({r['steps']:,} steps, {r['files']:,} train steps, checked).",
            "",
            "| what | value | target | met |",
            "| --- | ---: | --- | :---: |",
            f"| logs ingested | {r['files']:,} in {r['wall_s']:.1f} s |  |  |",
            f"| RSS median, first quarter of the logs | {r['rss_first_mb']:.1f} MiB |  |  |",
            f"| RSS median, last quarter of the logs | {r['rss_last_mb']:.1f} MiB |  |  |",
            f"| last / first | {r['ratio']:.3f} | within 10 % (flat) | {'yes' if flat else 'no'} |",
            f"| peak RSS (VmHWM) | {r['hwm_mb']:.1f} MiB |  |  |",
            f"| time between two ingested logs, median of the first / last quarter | "
            f"{r['gap_first_ms']:.0f} / {r['gap_last_ms']:.0f} ms |  |  |",
            f"| CPU while idle, change events ({r['idle_s']:g} s) | {100 * r['idle_cpu_events']:.2f} % "
            f"of a core | near zero | {'yes' if r['idle_cpu_events'] < 0.01 else 'no'} |",
            f"| CPU while idle, `--poll` every 2 s ({r['idle_s']:g} s, {r['files']:,} logs stat'ed "
            f"per scan) | {100 * r['idle_cpu_poll']:.2f} % of a core |  |  |",
            f"| the page's look at the store every 3 s (`store_state`: one listing, "
            f"{r['files']:,} manifests) | {r['look_ms']:.1f} ms |  |  |",
            f"| the page's rerun when it changed (open the store + summary) | {r['open_ms']:.0f} ms |  |  |",
        ]
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--pace-ms", type=float, default=25.0, dest="pace_ms")
    ap.add_argument("--idle-s", type=float, default=10.0, dest="idle_s")
    ap.add_argument("--workdir", default="/tmp/crbc_watch_bench")
    ap.add_argument("--write", action="store_true", help="replace the watch block of bench/RESULTS.md")
    a = ap.parse_args(argv)
    r = run(a.files, a.pace_ms, a.idle_s, Path(a.workdir))
    text = render(r)
    print(text)
    if a.write:
        from bench.__main__ import write_block

        write_block(text, START, END)
    shutil.rmtree(a.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
