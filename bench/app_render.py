"""Server-side render times of the app, measured with AppTest (no browser).

    .venv/bin/python bench/app_render.py [--runs 5]

Prints a markdown table (median, min, max over the runs):
- first full render of the default view (Data page, default sample) in a fresh process
  (page imports, file load, scoring every group: what the first visitor after a restart waits);
- the same view with warm caches (a new session on a running server);
- switching group on the Graph, Trajectories and Compare pages (each switch goes to a group
  not seen before, so its graph, scores, drawing and depth sweep are computed).
Targets on a 2-core machine: first render < 2 s, group switch < 0.3 s.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
logging.getLogger("streamlit").setLevel(logging.ERROR)

from streamlit.testing.v1 import AppTest  # noqa: E402

TIMEOUT = 120


def _new():
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _check(at):
    if at.exception:
        raise RuntimeError(at.exception[0].value)


def _one_cold() -> None:
    """In a fresh process (nothing imported by the app yet, empty caches): time one render."""
    at = _new()
    print(f"{_timed(at.run):.6f}")
    _check(at)


def bench_first_render(runs: int) -> tuple[list[float], list[float]]:
    import subprocess

    cold = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, __file__, "--one-cold"], capture_output=True,
                             text=True, check=True, cwd=REPO)
        cold.append(float(out.stdout.strip().splitlines()[-1]))
    _new().run()  # fill the caches once
    warm = []
    for _ in range(runs):
        at = _new()
        warm.append(_timed(at.run))
        _check(at)
    return cold, warm


def bench_switch(page: str, runs: int) -> list[float]:
    at = _new().run()
    at.switch_page(page).run()
    _check(at)
    labels = at.sidebar.selectbox(key="group_pick").options
    out = []
    for i in range(1, min(runs, len(labels) - 1) + 1):
        box = at.sidebar.selectbox(key="group_pick").select(labels[i])
        out.append(_timed(box.run))
        _check(at)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--one-cold", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_cold:
        return _one_cold()
    from crbc_viz.ui.files import default_sample

    rows = []
    cold, warm = bench_first_render(args.runs)
    rows.append(("first render, default view (Data), fresh process: imports + load + score", cold, 2.0))
    rows.append(("first render, default view (Data), warm caches", warm, 2.0))
    for page in ("app_pages/graph.py", "app_pages/trajectories.py", "app_pages/compare.py"):
        rows.append((f"switch group on {Path(page).stem} (uncached group)",
                     bench_switch(page, args.runs), 0.3))
    print(f"App render times (AppTest, server side; sample `{default_sample()}`; "
          f"{args.runs} runs each)\n")
    print("| what | median s | min s | max s | runs | target s | met |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | :---: |")
    for name, xs, target in rows:
        med = statistics.median(xs)
        print(f"| {name} | {med:.3f} | {min(xs):.3f} | {max(xs):.3f} | {len(xs)} | < {target:g} | "
              f"{'yes' if med < target else 'no'} |")


if __name__ == "__main__":
    main()
