"""Server-side render times of the app, measured with AppTest (no browser).

    .venv/bin/python bench/app_render.py [--runs 5]

Prints a markdown table (median, min, max over the runs):
- first full render of the default view (Data page, default sample) in a fresh process
  (page imports, file load, scoring every group: what the first visitor after a restart waits);
- the same view with warm caches (a new session on a running server);
- switching group on the Graph, Trajectories and Compare pages (each switch goes to a group
  not seen before, so its graph, scores, drawing and depth sweep are computed).
- the Compare page on a generated ~800-anchor group (one group, random MDP with 2000 states,
  32 rollouts × 60 steps), in a fresh process: the file opened on the Data page, then Compare
  ready with its default sections, then the depth family and the all-estimators section each
  computed when opened.
Targets on a 2-core machine: first render < 2 s, group switch < 0.3 s, Compare < 2 s.

    .venv/bin/python bench/app_render.py --getting-around [--runs 3]

times the Across training → Graph → Compare interactions on the bundled samples (target 1 s
each) on a running server with cold data caches, and the same first steps on a fresh server
process (its imports included), into bench/RESULTS.md.
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
        out = subprocess.run(
            [sys.executable, __file__, "--one-cold"], capture_output=True, text=True, check=True, cwd=REPO
        )
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


def _big_group_file(folder: Path) -> Path:
    """A one-group JSONL with ~800 anchors (random MDP; seed 1)."""
    import json

    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch

    batch = random_mdp_batch(
        num_groups=1, rollouts=32, max_steps=60, num_states=2000, p_fail=0.01, seed=1, text=True
    )
    path = folder / "big_group.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for row in batch_to_rows(batch):
            f.write(json.dumps(row, default=str) + "\n")
    return path


def _one_compare(path: str) -> None:
    """Fresh process: time the Compare page on ``path`` (default view, then each section)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["file"] = path
    opened = _timed(at.run)
    _check(at)
    at.switch_page("crbc_viz/app/app_pages/compare.py")
    ready = _timed(at.run)
    _check(at)
    depth = _timed(at.toggle(key="cmp_depth_open").set_value(True).run)
    _check(at)
    every = _timed(at.toggle(key="cmp_all_open").set_value(True).run)
    _check(at)
    print(f"{opened:.6f} {ready:.6f} {depth:.6f} {every:.6f}")


def bench_compare(runs: int):
    import os
    import subprocess
    import tempfile

    from crbc_viz import build_graph, load_rollouts

    folder = Path(tempfile.mkdtemp(prefix="crbc-bench-"))
    path = _big_group_file(folder)
    anchors = build_graph(load_rollouts(path)).num_nodes
    env = {**os.environ, "CRBC_VIZ_DATA_ROOTS": str(folder)}
    opened, ready, depth, every = [], [], [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "--one-compare", str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        o, r, d, e = map(float, out.stdout.strip().splitlines()[-1].split())
        opened.append(o)
        ready.append(r)
        depth.append(d)
        every.append(e)
    return opened, ready, depth, every, anchors


def _store_walk(at) -> tuple[float, float, float, float]:
    """On ``at`` (any page): Across training opened from the menu, the last group of the
    drill-down chosen, the middle train_step chosen, then the Graph page opened on that group
    by its page link's URL (s each); ``at`` is left on the Graph page."""
    from urllib.parse import unquote_plus

    at.switch_page("crbc_viz/app/app_pages/training.py")
    t_open = _timed(at.run)
    _check(at)
    gids = at.selectbox(key="training_group").options
    t_group = _timed(at.selectbox(key="training_group").select(gids[-1]).run)
    _check(at)
    steps = at.selectbox(key="training_step").options
    t_step = _timed(at.selectbox(key="training_step").select(steps[len(steps) // 2]).run)
    _check(at)
    link = next(e for e in at.get("page_link") if e.proto.label == "Open in the Graph page")
    query = (
        dict(x.split("=", 1) for x in link.proto.query_string.split("&")) if link.proto.query_string else {}
    )
    at.query_params.clear()
    at.query_params.update({k: unquote_plus(v) for k, v in query.items()})
    at.switch_page("crbc_viz/app/app_pages/graph.py")
    t_graph = _timed(at.run)
    _check(at)
    return t_open, t_group, t_step, t_graph


def _one_getting_around() -> None:
    """Fresh process, a running server with cold data caches: one visitor has opened the Data,
    Graph and Compare pages on the default sample's first group (the code of those pages is
    imported, its templates compiled); then a new visitor's interactions, each timed once (s):
    Across training opened from the menu (the store not yet read by this server: manifests,
    trends, figure), a group chosen in its drill-down, another train_step, the Graph page on
    that store group (its page link's URL: the group read from the store, its graph built,
    scored and drawn), then Compare on it, and Compare on a group of the default sample not
    seen before."""
    warm = _new().run()
    for page in ("crbc_viz/app/app_pages/graph.py", "crbc_viz/app/app_pages/compare.py"):
        warm.switch_page(page).run()
        _check(warm)
    at = _new().run()
    _check(at)
    t_open, t_group, t_step, t_graph = _store_walk(at)
    at.switch_page("crbc_viz/app/app_pages/compare.py")
    t_cmp_store = _timed(at.run)
    _check(at)
    at2 = _new().run()
    labels = at2.sidebar.selectbox(key="group_pick").options
    at2.switch_page("crbc_viz/app/app_pages/compare.py").run()
    _check(at2)
    t_cmp_new = _timed(at2.sidebar.selectbox(key="group_pick").select(labels[-1]).run)
    _check(at2)
    print(f"{t_open:.6f} {t_group:.6f} {t_step:.6f} {t_graph:.6f} {t_cmp_store:.6f} {t_cmp_new:.6f}")


def _one_fresh_server() -> None:
    """Fresh process, nothing imported by the app yet: Across training as the first page the
    server renders (the app's imports included), then the same walk to the Graph page, whose
    time includes the drawing code's imports (pyvis, networkx, igraph) and template compile."""
    t_open, _, _, t_graph = _store_walk(_new())
    print(f"{t_open:.6f} {t_graph:.6f}")


#: The interactions, on a running server with cold data caches (`_one_getting_around`).
GETTING_AROUND = (
    "Across training: open from the menu (bundled store, not yet read by the server)",
    "Across training: choose a group in the drill-down",
    "Across training: another train_step",
    "Graph page on that store group (its link)",
    "Compare on that store group (first open)",
    "Compare: another group of the default sample (first open)",
)
#: The same first steps on a fresh server process (`_one_fresh_server`), with their targets:
#: the first page a server renders has the first render's.
FRESH_SERVER = (
    ("Fresh server: Across training as its first page (the app's imports included)", 2.0),
    ("Fresh server: Graph page on that store group, its first graph (drawing code's imports included)", 1.0),
)


def bench_getting_around(runs: int) -> list[tuple[str, list[float], float]]:
    import subprocess

    def one(flag: str) -> list[float]:
        out = subprocess.run(
            [sys.executable, __file__, flag], capture_output=True, text=True, check=True, cwd=REPO
        )
        return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]

    cols: list[list[float]] = [[] for _ in GETTING_AROUND]
    fresh: list[list[float]] = [[] for _ in FRESH_SERVER]
    for _ in range(runs):
        for c, v in zip(cols, one("--one-getting-around")):
            c.append(v)
        for c, v in zip(fresh, one("--one-fresh-server")):
            c.append(v)
    return [(name, xs, 1.0) for name, xs in zip(GETTING_AROUND, cols)] + [
        (name, xs, target) for (name, target), xs in zip(FRESH_SERVER, fresh)
    ]


def _table(rows) -> str:
    lines = [
        "| what | median s | min s | max s | runs | target s | met |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for name, xs, target in rows:
        med = statistics.median(xs)
        lines.append(
            f"| {name} | {med:.3f} | {min(xs):.3f} | {max(xs):.3f} | {len(xs)} | < {target:g} | "
            f"{'yes' if med < target else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--one-cold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-compare", help=argparse.SUPPRESS)
    ap.add_argument("--only-compare", action="store_true", help="only the ~800-anchor Compare rows")
    ap.add_argument("--one-getting-around", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-fresh-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--getting-around",
        action="store_true",
        help="only the Across training / Graph / Compare interactions on the bundled samples "
        "(server side, fresh process per run); the table goes into bench/RESULTS.md",
    )
    args = ap.parse_args()
    if args.one_cold:
        return _one_cold()
    if args.one_getting_around:
        return _one_getting_around()
    if args.one_fresh_server:
        return _one_fresh_server()
    if args.getting_around:
        from bench.__main__ import write_block

        text = (
            f"Getting around (AppTest, server side, {args.runs} runs each, a fresh process per run; "
            f"`.venv/bin/python bench/app_render.py --getting-around --runs {args.runs}`): the "
            "script's run time on the server, not what a person waits for in a browser "
            "(`python -m bench.browser_bench`). "
            "The first six rows: a running server with cold data caches (one visitor has opened "
            "the Data, Graph and Compare pages on the default sample's first group, so those "
            "pages' code is imported; the store, its trends and every group timed are not yet "
            "in any cache), then a new visitor's clicks. The last two: a fresh server process "
            "(the app's imports, and the graph drawing's, inside the time).\n\n"
            + _table(bench_getting_around(args.runs))
        )
        print(text)
        write_block(text, "<!-- getting-around:begin -->", "<!-- getting-around:end -->")
        return None
    if args.one_compare:
        return _one_compare(args.one_compare)
    from crbc_viz.ui.files import default_sample

    rows = []
    if not args.only_compare:
        cold, warm = bench_first_render(args.runs)
        rows.append(("first render, default view (Data), fresh process: imports + load + score", cold, 2.0))
        rows.append(("first render, default view (Data), warm caches", warm, 2.0))
        for page in (
            "crbc_viz/app/app_pages/graph.py",
            "crbc_viz/app/app_pages/trajectories.py",
            "crbc_viz/app/app_pages/compare.py",
        ):
            rows.append(
                (f"switch group on {Path(page).stem} (uncached group)", bench_switch(page, args.runs), 0.3)
            )
    opened, ready, depth, every, anchors = bench_compare(args.runs)
    rows.append(
        (
            f"open a generated {anchors}-anchor group, fresh process (Data page: imports, "
            f"load, crbc + shortest_path scores)",
            opened,
            2.0,
        )
    )
    rows.append((f"Compare on a generated {anchors}-anchor group: page ready (default sections)", ready, 2.0))
    rows.append(
        (f"Compare, {anchors} anchors: open the depth family (closure + K = 0…30 + bound)", depth, 2.0)
    )
    rows.append((f"Compare, {anchors} anchors: open all estimators (every one on the group)", every, 2.0))
    print(f"App render times (AppTest, server side; sample `{default_sample()}`; {args.runs} runs each)\n")
    print("| what | median s | min s | max s | runs | target s | met |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | :---: |")
    for name, xs, target in rows:
        med = statistics.median(xs)
        print(
            f"| {name} | {med:.3f} | {min(xs):.3f} | {max(xs):.3f} | {len(xs)} | < {target:g} | "
            f"{'yes' if med < target else 'no'} |"
        )


if __name__ == "__main__":
    main()
