"""What a person waits for: the app's interactions timed in Chromium, end to end.

    .venv/bin/python -m bench.browser_bench [--load N] [--runs 5] [--write]
    .venv/bin/python -m bench.browser_bench --against REV [--runs 5] [--write]

A real ``streamlit run app.py`` (wrapped by `bench.timed_streamlit`, which logs every script
run's time on the server) driven by Debian's headless Chromium with the browser tests' flags,
on the bundled samples (the default Sokoban sample, the bundled training store, the Learn
page's toy group). Each interaction is timed from the click until the page is settled and
drawn: a script run that finished after the click has been reported on the websocket
(`tests/streamlit_server.RunTracker`), Streamlit's script state is "notRunning" with no status
widget, skeleton or stale element, and, where the action redraws the graph, a new graph
iframe whose network has drawn (``data-crbc-ready``). Beside each: the server's time for the
same click (the script runs that started in that window: wall and script-thread CPU).

- open Graph: the sidebar's page link, from the Data page;
- switch group: the sidebar's Group box on the Graph page, each time a group not seen before;
- change estimator: the sidebar's Estimator box on the Graph page (crbc ↔ another);
- open Compare: the sidebar's page link, from the Graph page;
- drill down (Across training): the drill-down's Group box, another group each time;
- Play (Learn, lesson 4, toy group): the interval between two drawn steps of K.

``--load N`` runs N CPU-bound processes beside the server for the whole measurement. The load
average is read at the start and end of each row. ``--write`` puts the table in
bench/RESULTS.md (between ``<!-- browser-bench:begin -->`` and ``<!-- browser-bench:end -->``);
several ``--load`` values in one call (``--load 0,2``) give one table each.
``--against REV`` serves this tree and git revision REV (a temporary worktree) side by side
and alternates their rounds of the four graph interactions (this, REV, REV, this, …), so that
a machine whose speed drifts weighs on both alike; it reports each one's medians and the
paired differences (block ``<!-- browser-ab:begin -->`` with ``--write``).
Targets: each interaction ≤ 0.5 s median on a quiet 2-core machine, ≤ 1 s with two CPU-bound
processes beside the server; Play steps once a second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from streamlit_server import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    IDLE_JS,
    WAIT_MS,
    app_idle,
    streamlit_server,
    track_browser,
)

BEGIN, END = "<!-- browser-bench:begin -->", "<!-- browser-bench:end -->"
AB_BEGIN, AB_END = "<!-- browser-ab:begin -->", "<!-- browser-ab:end -->"
SECTION = "## What a person waits for: the app in Chromium"
TARGET_S = {0: 0.5, 2: 1.0}
PLAY_S = 1.0
#: Every graph iframe of the page has drawn its network, and none is one marked before the action.
DRAWN_JS = """() => {
  const fs = Array.from(document.querySelectorAll('iframe'));
  const docs = fs.map(f => { try { return f.contentDocument; } catch (e) { return null; } });
  const graphs = docs.filter(d => d && d.querySelector('#mynetwork, canvas, body[data-crbc-ready]'));
  return graphs.length > 0 && graphs.every(d => d.body && d.body.getAttribute('data-crbc-ready') === '1'
    && !d.defaultView.__crbcBenchOld);
}"""
MARK_JS = """() => { for (const f of document.querySelectorAll('iframe')) {
  try { f.contentWindow.__crbcBenchOld = true; } catch (e) {} } }"""
#: Every plotly chart on the page has drawn.
PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).every(
  p => p.querySelector('.main-svg'))"""


def _burn() -> None:  # pragma: no cover - a load process
    while True:
        pass


def _load(n: int) -> list:
    procs = [mp.Process(target=_burn, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


def _loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class Runs:
    """The server's run log (`bench.timed_streamlit`): the runs that started in a window."""

    def __init__(self, path: Path):
        self.path = path

    def within(self, t0: float, t1: float) -> list[dict]:
        if not self.path.exists():
            return []
        rows = [json.loads(x) for x in self.path.read_text().splitlines() if x.strip()]
        return [r for r in rows if t0 <= r["start"] <= t1]


#: In the page (every document the page loads, main frame only): the time of the last trusted
#: click, and of each end of a script run (Streamlit's ``data-test-script-state`` leaving
#: "running"), on the page's own clock.
INSTR_JS = """(() => {
  if (window.top !== window) { return; }
  const T = window.__crbcT = {click: null, ends: [], done: null};
  document.addEventListener('click', (e) => { if (e.isTrusted) { T.click = performance.now(); } }, true);
  const watch = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app) { requestAnimationFrame(watch); return; }
    let prev = app.getAttribute('data-test-script-state');
    new MutationObserver(() => {
      const s = app.getAttribute('data-test-script-state');
      if (prev === 'running' && s !== 'running') { T.ends.push(performance.now()); }
      prev = s;
    }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  };
  watch();
})()"""
#: After an action: look every frame for the first one where a run has ended since the click
#: (or the harness says so, ``__crbcPyDone``) and the page is settled; keep that frame's time.
DONE_JS = (
    """([graph, plots]) => {
  const T = window.__crbcT;
  const idle = (IDLE);
  const drawn = (DRAWN);
  const charts = (PLOTS);
  const look = () => {
    const ran = T.ends.some((t) => t > T.click) || window.__crbcPyDone;
    if (ran && idle() && (!graph || drawn()) && (!plots || charts())) { T.done = performance.now(); return; }
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
}""".replace("IDLE", IDLE_JS)
    .replace("DRAWN", DRAWN_JS)
    .replace("PLOTS", PLOTS_JS)
)


def settled(pg, before: int, graph: bool, plots: bool = False) -> None:
    """Wait until a run finished after ``before`` (the tracker's count: Streamlit's messages on
    the websocket), then until the page's own look (`DONE_JS`) has found it settled and drawn:
    idle, (``graph``) a new graph iframe drawn, (``plots``) every plotly chart drawn."""
    tr = pg._crbc_runs
    deadline = time.monotonic() + WAIT_MS / 1000
    while not tr.idle(before):
        if time.monotonic() > deadline:
            raise AssertionError(f"no run finished after the action ({vars(tr)})")
        pg.wait_for_timeout(5)
    pg.evaluate("() => { window.__crbcPyDone = true; }")
    pg.wait_for_function("() => window.__crbcT.done !== null", timeout=WAIT_MS)


def timed(pg, runs: Runs, action, graph: bool, plots: bool = False) -> tuple[float, ...]:
    """Of one action, from its last click on the page's clock: (s until the page was settled
    and drawn, the server's run wall s and CPU s, s until the click's request reached the
    server, s it waited there before its run started, s until the page's script state left
    "running" after the click)."""
    app_idle(pg)
    pg.evaluate(MARK_JS)
    pg.evaluate(
        "() => { window.__crbcPyDone = false; window.__crbcT.done = null; window.__crbcT.click = null; }"
    )
    before = pg._crbc_runs.finished
    w0 = time.time()
    action()
    pg.evaluate(DONE_JS, [graph, plots])
    settled(pg, before, graph, plots)
    origin, click, done, ends = pg.evaluate(
        "() => [performance.timeOrigin, window.__crbcT.click, window.__crbcT.done, window.__crbcT.ends]"
    )
    clicked = (origin + click) / 1000  # the click, on the wall clock
    rows = runs.within(w0, time.time())
    asked = [r["asked"] - clicked for r in rows if r.get("asked")]
    waited = sum(r["start"] - r["asked"] for r in rows if r.get("asked"))
    ended = [t for t in ends if t > click]
    return (
        (done - click) / 1000,
        sum(r["wall"] for r in rows),
        sum(r["cpu"] for r in rows),
        (ended[-1] - click) / 1000 if ended else float("nan"),
        min(asked) if asked else float("nan"),
        waited,
    )


def _open(pg, key: str):
    """Open the selectbox ``key``'s list (again, if a rerun closed it) and return its options."""
    opts = pg.get_by_role("option")
    for _ in range(10):
        pg.locator(f".st-key-{key} input").first.click()
        try:
            opts.first.wait_for(timeout=5000)
            return opts
        except Exception:  # closed by a rerun as it opened: open it again
            app_idle(pg)
    raise AssertionError(f"the list of {key} did not open")


def _choose(pg, key: str, option) -> None:
    """Open the selectbox ``key`` and click ``option`` (a regex or an index into its list)."""
    opts = _open(pg, key)
    if isinstance(option, int):
        opts.nth(option).click()
    else:
        pg.get_by_role("option", name=option).first.click()


def _link(pg, name: str) -> None:
    pg.locator("[data-testid='stSidebar'] [data-testid='stPageLink-NavLink']", has_text=name).first.click()


def _option_count(pg, key: str) -> int:
    n = _open(pg, key).count()
    pg.keyboard.press("Escape")
    return n


def interactions(
    pg, url: str, runs: Runs, n: int, first: int = 0
) -> dict[str, list[tuple[float, float, float]]]:
    """``n`` rounds of the four interactions (rounds ``first`` … ``first + n - 1``: round i
    switches to group 1 + i mod (groups − 1) and alternates the estimator it changes to)."""
    out: dict[str, list] = {k: [] for k in ("open Graph", "switch group", "change estimator", "open Compare")}
    groups = None
    for i in range(first, first + n):
        pg.goto(url)
        app_idle(pg)
        out["open Graph"].append(timed(pg, runs, lambda: _link(pg, "Graph"), graph=True))
        groups = groups or _option_count(pg, "group_pick")
        nxt = 1 + i % max(1, groups - 1)
        out["switch group"].append(timed(pg, runs, lambda: _choose(pg, "group_pick", nxt), graph=True))
        est = re.compile(r"^visit_local") if i % 2 == 0 else re.compile(r"^shortest_path")
        out["change estimator"].append(
            timed(pg, runs, lambda: _choose(pg, "estimator_pick", est), graph=True)
        )
        out["open Compare"].append(timed(pg, runs, lambda: _link(pg, "Compare"), graph=False, plots=True))
    return out


def drill_down(pg, url: str, runs: Runs, n: int) -> list[tuple[float, float, float]]:
    pg.goto(url + "/training")
    app_idle(pg)
    groups = _option_count(pg, "training_group")
    out = []
    for i in range(n):
        nxt = (i + 1) % groups
        out.append(timed(pg, runs, lambda: _choose(pg, "training_group", nxt), graph=False, plots=True))
    return out


PLAY_JS = """() => {
  window.__crbcSteps = [];
  window.__crbcDraws = [];
  window.__crbcFrames = [];
  let last = null;
  const look = () => {
    const t = document.querySelector('.st-key-learn_k [data-testid="stSliderThumbValue"]');
    const k = t ? t.textContent : null;
    if (k !== null && k !== last) { window.__crbcSteps.push([performance.now(), k]); last = k; }
    for (const f of document.querySelectorAll('iframe')) {
      const d = f.contentDocument;
      if (d && d.body && d.body.getAttribute('data-crbc-ready') === '1' && !d.body.hasAttribute('data-crbc-blank')
          && !f.contentWindow.__crbcSeen) {
        f.contentWindow.__crbcSeen = true;
        window.__crbcDraws.push(performance.now());
      }
    }
    // Whether a drawn graph is in view in this frame: the top-most graph frame that is not
    // see-through (no document yet, hidden until drawn, the empty layer) must have drawn.
    const fs = Array.from(document.querySelectorAll('iframe')).filter(f => f.getBoundingClientRect().height > 100);
    const z = f => { for (let e = f; e && e !== document.body; e = e.parentElement) {
      const v = getComputedStyle(e).zIndex; if (v !== 'auto') { return +v; } } return 0; };
    fs.sort((a, b) => z(b) - z(a));
    let shown = false;
    for (const f of fs) {
      const d = f.contentDocument, b = d && d.body;
      if (!b || b.hasAttribute('data-crbc-blank') || d.defaultView.getComputedStyle(b).visibility === 'hidden') { continue; }
      shown = b.getAttribute('data-crbc-ready') === '1';
      break;
    }
    window.__crbcFrames.push(shown ? 1 : 0);
    requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
}"""


def play(
    pg, url: str, runs: Runs, steps: int
) -> tuple[list[float], list[float], list[float], list[float], float]:
    """Lesson 4's Play from K = 0: the intervals between two steps of K shown on the page (s),
    between two new graph drawings (s), the server runs' wall and CPU per step, and the share
    of the page's animation frames (%) with no drawn graph in view (a blank or half-loaded one)."""
    pg.goto(url + "/learn?lesson=4&lk=0")
    app_idle(pg)
    pg.wait_for_function(DRAWN_JS.replace("&& !d.defaultView.__crbcBenchOld", ""), timeout=WAIT_MS)
    pg.evaluate(PLAY_JS)
    w0 = time.time()
    pg.locator(".st-key-learn_play label").first.click()
    pg.wait_for_function(f"() => window.__crbcSteps.length >= {steps + 2}", timeout=WAIT_MS * 2)
    w1 = time.time()
    seen, draws, frames = pg.evaluate("() => [window.__crbcSteps, window.__crbcDraws, window.__crbcFrames]")
    pg.locator(".st-key-learn_play label").first.click()  # stop
    app_idle(pg)
    rows = runs.within(w0, w1)
    times = [t for t, _ in seen[1:]]  # the first entry is K = 0 as it was before Play
    gaps = [(b - a) / 1000 for a, b in zip(times, times[1:])]
    drawn = [(b - a) / 1000 for a, b in zip(draws[1:], draws[2:])]
    blank = 100.0 * frames.count(0) / max(len(frames), 1)
    return gaps, drawn, [r["wall"] for r in rows], [r["cpu"] for r in rows], blank


def measure(load: int, n: int) -> tuple[list[list], str]:
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="crbc-browser-bench-"))
    runs = Runs(tmp / "runs.jsonl")
    env = {"CRBC_BENCH_RUNLOG": str(runs.path)}
    rows: list[list] = []
    burners = _load(load)
    la0 = _loadavg()
    try:
        with (
            streamlit_server(env=env, log_path=tmp / "server.log", module="bench.timed_streamlit") as url,
            sync_playwright() as p,
        ):
            br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
            pg = br.new_page(viewport={"width": 1500, "height": 1000})
            pg.add_init_script(INSTR_JS)
            pg.goto(url)  # the server's first render (imports, sample load): not timed
            app_idle(pg)

            def row(name, xs, la):
                b, w, c, e, a, q = zip(*xs)
                rows.append([name, b, w, c, e, a, q, la])

            for name, xs in interactions(pg, url, runs, n).items():
                row(name, xs, _loadavg())
            row("drill down (Across training)", drill_down(pg, url, runs, n), _loadavg())
            gaps, drawn, walls, cpus, blank = play(pg, url, runs, max(4, n))
            la = _loadavg()
            rows.append(["Play: K shown, interval (Learn, lesson 4)", gaps, walls, cpus, (), (), (), la])
            rows.append(["Play: graph redrawn, interval", drawn or [float("nan")], (), (), (), (), (), la])
            rows.append(
                ["Play: frames with no drawn graph in view, % (not s)", [blank], (), (), (), (), (), la]
            )
            br.close()
    finally:
        for b in burners:
            b.terminate()
    return rows, la0


def against(rev: str, n: int) -> str:
    """This tree and ``rev`` (a git worktree of it) served side by side, one browser, their
    rounds of `interactions` alternating (ABBA…), so that a machine whose speed drifts over
    minutes weighs on both alike: a table of each one's medians and of the paired differences."""
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="crbc-browser-ab-"))
    tree = tmp / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=REPO, check=True)
    res: dict[str, dict[str, list[float]]] = {"this": {}, "rev": {}}
    la0 = _loadavg()
    try:
        with (
            streamlit_server(
                env={"CRBC_BENCH_RUNLOG": str(tmp / "this.jsonl")},
                log_path=tmp / "this.log",
                module="bench.timed_streamlit",
            ) as url_this,
            streamlit_server(
                env={"CRBC_BENCH_RUNLOG": str(tmp / "rev.jsonl")},
                log_path=tmp / "rev.log",
                module="bench.timed_streamlit",
                cwd=tree,
            ) as url_rev,
            sync_playwright() as p,
        ):
            br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
            sides = {}
            for side, url, log in (("this", url_this, "this"), ("rev", url_rev, "rev")):
                pg = br.new_page(viewport={"width": 1500, "height": 1000})
                pg.add_init_script(INSTR_JS)
                pg.goto(url)  # the server's first render (imports, sample load): not timed
                app_idle(pg)
                sides[side] = (pg, url, Runs(tmp / f"{log}.jsonl"))
            for i in range(n):
                for side in ("this", "rev") if i % 2 == 0 else ("rev", "this"):
                    pg, url, runs = sides[side]
                    pg.bring_to_front()
                    for name, xs in interactions(pg, url, runs, 1, first=i).items():
                        res[side].setdefault(name, []).extend(x[0] for x in xs)
            br.close()
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    short = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"**This tree against {short}**, served side by side, rounds alternating ({n} rounds; "
        f"load average 1/5/15 min at the start {la0}, at the end {_loadavg()})\n",
        f"| interaction | this tree, median s | {short}, median s | paired difference (this − {short}), "
        "median s | differences, range s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, xs in res["this"].items():
        ys = res["rev"][name]
        d = [a - b for a, b in zip(xs, ys)]
        lines.append(
            f"| {name} | {statistics.median(xs):.2f} | {statistics.median(ys):.2f} | "
            f"{statistics.median(d):+.3f} | {min(d):+.2f} … {max(d):+.2f} |"
        )
    return "\n".join(lines)


def _fmt(xs) -> str:
    xs = [x for x in xs if x == x]  # no NaN
    return f"{statistics.median(xs):.2f}" if xs else "–"


def table(rows: list[list], load: int, la0: str, n: int) -> str:
    target = TARGET_S.get(load)
    head = (
        f"**{load} CPU-bound process(es) beside the server** ({n} runs of each; load average "
        f"1/5/15 min at the start {la0})\n\n"
        "| interaction | click → settled and drawn, median s | range s | click → request at "
        "the server s | request → run start s | server run wall s | server run CPU s | click → "
        "the page's script state leaves running s | target | met | load avg after |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | :---: | --- |"
    )
    lines = [head]
    for name, b, w, c, e, a, q, la in rows:
        med = statistics.median(b)
        if name.startswith("Play: frames"):
            tgt, met = "0 %", "yes" if med == 0 else "no"
        elif name.startswith("Play: graph"):
            tgt, met = "", ""
        elif name.startswith("Play"):
            tgt, met = f"{PLAY_S:g} s apart", "yes" if abs(med - PLAY_S) <= 0.15 else "no"
        elif target is None:
            tgt, met = "", ""
        else:
            tgt, met = f"≤ {target:g} s", "yes" if med <= target else "no"
        lines.append(
            f"| {name} | {med:.2f} | {min(b):.2f}–{max(b):.2f} | {_fmt(a)} | {_fmt(q)} | "
            f"{_fmt(w)} | {_fmt(c)} | {_fmt(e)} | {tgt} | {met} | {la} |"
        )
    return "\n".join(lines)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", default="0,2", help="CPU-bound processes beside the server: N or N,M,… (0,2)")
    ap.add_argument("--runs", type=int, default=5, help="times each interaction is timed (5)")
    ap.add_argument("--write", action="store_true", help="write the tables into bench/RESULTS.md")
    ap.add_argument(
        "--against",
        metavar="REV",
        help="instead: this tree and git revision REV side by side, rounds alternating (quiet machine only)",
    )
    args = ap.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is absent (make browser-deps)")
    from bench.__main__ import machine, write_block

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = _commit()  # the tree measured (read before, in case it changes while this runs)
    if args.against:
        table_ab = against(args.against, args.runs)
        print(table_ab, flush=True)
        text = (
            f"Machine: {machine()}; {os.cpu_count()} CPUs seen. Commit {commit}, run {started}. "
            f"Command: `python -m bench.browser_bench --against {args.against} --runs {args.runs}"
            f"{' --write' if args.write else ''}`.\n\n{table_ab}"
        )
        if args.write:
            write_block(text, AB_BEGIN, AB_END, section=SECTION)
        return text
    parts = []
    for load in (int(x) for x in args.load.split(",")):
        rows, la0 = measure(load, args.runs)
        parts.append(table(rows, load, la0, args.runs))
        print(parts[-1], flush=True)
    text = "\n\n".join(
        [
            f"Machine: {machine()}; {os.cpu_count()} CPUs seen. Commit {commit}, run {started}. "
            f"Command: `python -m bench.browser_bench --load {args.load} --runs {args.runs}"
            f"{' --write' if args.write else ''}`.",
            *parts,
        ]
    )
    if args.write:
        write_block(text, BEGIN, END, section=SECTION)
    return text


if __name__ == "__main__":
    main()
