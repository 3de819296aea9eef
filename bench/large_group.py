"""One large group whose transitions are random: the work that grew faster than the group.

``python -m bench.large_group [--rollouts 16] [--length 4000] [--against REV] [--write]``

The group (`crbc_viz.synthetic.random_mdp_batch` with a successor drawn at random among all of
the task's states, so its anchor graph mixes well: ~13,000 anchors over ~61,000 steps; every
other rollout succeeds at its end; every optional signal logged, as the tests'
``with_signals`` writes them) is scored and viewed in one process, each call timed (median of
``--repeats`` for the fast ones, once for those that take seconds):

- CRBC, GRAFT and Gated-BEPO on the numpy reference: their closure solve (sparse LU before,
  where LU's fill-in on such a graph costs seconds and hundreds of MB; the bounded iteration
  now, `crbc_viz.ops.closure.iterated_groups`);
- IAPO and TRCA (each read a whole-batch array once per step or per rollout before);
- the step frame (`views.trajectories.step_frame`) and the shareable page's step table;
- ProxMO as a page view computes it (`crbc_viz.ui.pipeline._score`: refused past
  `PROXMO_MAX_PAIRS` text pairs now) and ProxMO itself (`score`), once.

``--against REV`` runs the same calls on a worktree of commit ``REV`` first (a child process
with that tree on ``PYTHONPATH``), so both trees are timed in one run on one machine.
``--write`` replaces the block between ``<!-- large-group:begin -->`` and
``<!-- large-group:end -->`` of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- large-group:begin -->", "<!-- large-group:end -->"
SECTION = "## One large group of random transitions"


def group_graph(rollouts: int, length: int):
    """The benchmark's one-group graph (module docstring)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from crbc_viz import build_graph
    from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
    from crbc_viz.teaching_rows import batch_from_rows
    from strategies import with_signals

    b = random_mdp_batch(
        1,
        rollouts,
        length,
        num_states=rollouts * length // 4,
        seed=1,
        p_fail=0.0,
        p_progress=0.05,
        p_back=0.3,
    )
    rows = with_signals(batch_to_rows(b))
    last = {}
    for i, r in enumerate(rows):
        last[r["traj_id"]] = i
    won = {t for k, t in enumerate(sorted(last)) if k % 2 == 0}
    for i, r in enumerate(rows):
        r["success"] = r["traj_id"] in won
        if r["success"] and last[r["traj_id"]] == i:
            r.update(reward=1.0, done=True)
    return build_graph(batch_from_rows(rows))


def _timed(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure(rollouts: int, length: int, repeats: int) -> dict:
    """Seconds of each call (None where this tree lacks it) and the group's size."""
    from crbc_viz import score
    from crbc_viz.views.share import step_table
    from crbc_viz.views.trajectories import step_frame

    graph = group_graph(rollouts, length)
    crbc = score(graph, "crbc", backend="numpy")
    res = {"steps": graph.batch.num_steps, "anchors": graph.num_nodes, "edges": int(graph.edge_next.shape[0])}
    calls = {
        "crbc": (lambda: score(graph, "crbc", backend="numpy"), repeats),
        "graft": (lambda: score(graph, "graft", backend="numpy"), 1),
        "gated_bepo": (lambda: score(graph, "gated_bepo", backend="numpy"), 1),
        "iapo": (lambda: score(graph, "iapo", backend="numpy"), 1),
        "trca": (lambda: score(graph, "trca", backend="numpy"), 1),
        "step_frame": (lambda: step_frame(graph, {"crbc": crbc}, group=0), repeats),
        "step_table": (lambda: step_table(graph, {"crbc": crbc}), repeats),
        "proxmo": (lambda: score(graph, "proxmo", backend="numpy"), 1),
    }
    for name, (fn, n) in calls.items():
        res[name] = _timed(fn, n)
    try:
        from crbc_viz.estimators.proxmo import similarity_pairs

        res["proxmo_pairs"] = similarity_pairs(graph)[0]
    except ImportError:
        res["proxmo_pairs"] = None
    try:
        import streamlit  # noqa: F401  (the pipeline's module needs it)

        from crbc_viz.ui import pipeline

        res["proxmo_page"] = _timed(lambda: pipeline._score(graph, "proxmo", (), "numpy"), 1)
        res["proxmo_page_refused"] = isinstance(pipeline._score(graph, "proxmo", (), "numpy"), str)
    except ImportError:
        res["proxmo_page"] = None
    import resource

    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return res


def _child(tree: Path, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--rollouts", str(args.rollouts)]
    cmd += ["--length", str(args.length), "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _git(*a) -> str:
    return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


ROWS = [
    ("crbc", "CRBC (numpy reference)"),
    ("graft", "GRAFT (numpy)"),
    ("gated_bepo", "Gated-BEPO (numpy)"),
    ("iapo", "IAPO"),
    ("trca", "TRCA"),
    ("step_frame", "step frame (`step_frame`)"),
    ("step_table", "shareable page's step table"),
    ("proxmo_page", "ProxMO in a page view (`pipeline._score`)"),
    ("proxmo", "ProxMO itself (`score`)"),
]


def report(new: dict, old: dict | None, rev: str | None, commit: str) -> str:
    from bench.__main__ import machine

    head = f"| call | {commit} s |" + (f" {rev} s | before ÷ now |" if old else "")
    lines = [
        f"`python -m bench.large_group{' --against ' + rev if old else ''}` on {machine()}, load average "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} after the run. One group: {new['steps']:,} steps, "
        f"{new['anchors']:,} anchors, {new['edges']:,} distinct edges; ProxMO compares "
        f"{new['proxmo_pairs']:,} text pairs (the page view's bound is 10⁸). Medians of the repeats for "
        "CRBC and the views, one run for the others.",
        "",
        head,
        "| --- | ---: |" + (" ---: | ---: |" if old else ""),
    ]
    for key, label in ROWS:
        n = new.get(key)
        cells = [label, "—" if n is None else f"{n:.3f}"]
        if key == "proxmo_page" and new.get("proxmo_page_refused"):
            cells[1] += " (refused)"
        if old:
            o = old.get(key)
            cells.append("—" if o is None else f"{o:.3f}")
            cells.append(f"{o / n:.0f}×" if o and n else "—")
        lines.append("| " + " | ".join(cells) + " |")
    peak = f"Peak RSS of the measuring process: {new['peak_rss_mb']} MB"
    lines += ["", peak + (f" (the {rev} tree's: {old['peak_rss_mb']} MB)." if old else ".")]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--length", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", help="a commit to time first, from a worktree of it")
    ap.add_argument("--write", action="store_true", help="replace the block in bench/RESULTS.md")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.rollouts, args.length, args.repeats)))
        return
    old = rev = None
    if args.against:
        rev = _git("rev-parse", "--short", args.against)
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            _git("worktree", "add", "--detach", str(tree), rev)
            try:
                old = _child(tree, args)
            finally:
                _git("worktree", "remove", "--force", str(tree))
    new = _child(ROOT, args)
    dirty = _git("status", "--porcelain")
    text = report(new, old, rev, _git("rev-parse", "--short", "HEAD") + ("+" if dirty else ""))
    print(text)
    if args.write:
        from bench.__main__ import write_block

        write_block(text, START, END, section=SECTION)


if __name__ == "__main__":
    main()
