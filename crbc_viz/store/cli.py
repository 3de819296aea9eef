"""Store commands for ``crbc-viz``: ``ingest``, ``trends``, ``export``, and ``--store`` reading
for ``info`` / ``score``.

    crbc-viz ingest LOG... --store DIR [--format auto|canonical|verl-agent|rllm|roll|ms-swift|trl|verl]
    crbc-viz info  --store DIR [--group ID] [--run R] [--train-step N] [--env E] [--success yes|no|mixed]
    crbc-viz score --store DIR [same filters] -e crbc --out FILE
    crbc-viz trends --store DIR [--run R] [--train-step N] [--json]
    crbc-viz export --store DIR --estimator crbc --out FILE.parquet

`add_store_commands(subparsers)` registers the three new commands and, when ``info`` / ``score``
are already registered, makes their ``log`` optional, adds the store flags and routes a call
with ``--store`` here (a call without it runs the original command unchanged).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from ..safetext import term

__all__ = ["add_store_commands", "add_store_options", "cmd_ingest", "cmd_trends", "cmd_export",
           "cmd_info_store", "cmd_score_store"]

log = logging.getLogger("crbc_viz")
_SUCCESS = ("yes", "no", "mixed")


def add_store_options(p: argparse.ArgumentParser, *, group: bool = True) -> None:
    """``--store`` and the filters (run, train_step, env, success[, group])."""
    p.add_argument("--store", metavar="DIR", help="read from a log store instead of a file")
    if group:
        p.add_argument("--group", metavar="ID", help="one group: its id, or run/train_step/group_id")
    p.add_argument("--run", help="only this run_id")
    p.add_argument("--train-step", type=int, dest="train_step", help="only this training step")
    p.add_argument("--env", help="only groups of this env_name")
    p.add_argument("--success", choices=_SUCCESS,
                   help="only groups with a success (yes), without one (no), or with both (mixed)")


def _store(args):
    from .store import LogStore
    return LogStore(args.store)


def _filters(args) -> dict:
    return {"run": args.run, "train_step": args.train_step, "env": args.env, "success": args.success,
            "group": getattr(args, "group", None)}


# -- ingest ------------------------------------------------------------------------------------
def cmd_ingest(args) -> int:
    import os

    from tqdm import tqdm

    from .store import ingest

    total = 0
    for p in args.log:
        if os.path.isdir(p):
            total += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
        elif os.path.exists(p):
            total += os.path.getsize(p)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="ingest", file=sys.stderr,
               disable=args.quiet)
    rows = [0]

    def progress(ev):
        if "part" in ev:
            rows[0] += ev["rows"]
            bar.set_postfix(steps=f"{rows[0]:,}")
        else:
            bar.update(ev["bytes"])

    try:
        report = ingest(args.store, args.log, fmt=args.format, lenient=args.lenient,
                        success_threshold=args.success_threshold, run_id=args.run_id,
                        part_rows=args.part_rows, progress=progress,
                        import_options={"reward_columns": args.reward_columns,
                                        "success_column": args.success_column})
    finally:
        bar.close()
    for s in report.sources:
        how = " (auto-detected)" if args.format == "auto" else ""
        print(f"{s['status']:>8}  {term(s['path'])}  [{s['format']}]{how}  {s['rows']:,} steps, {s['parts']} part(s)")
        for n in s.get("notes", []):
            print(f"    note: {term(n)}", file=sys.stderr)
        for w in s.get("warnings", []):
            print(f"    warning: {term(w)}", file=sys.stderr)
        if s.get("skipped"):
            print(f"    lenient: skipped {len(s['skipped'])} problem row(s)", file=sys.stderr)
    new = sum(1 for s in report.sources if s["status"] != "skipped")
    print(f"{new} source(s) ingested, {len(report.sources) - new} already in the store; "
          f"{report.rows:,} new steps in {args.store}")
    return 0


# -- info / score with --store -----------------------------------------------------------------
def cmd_info_store(args) -> int:
    from ..graph import build_graph
    from ..summary import batch_summary

    st = _store(args)
    _warn_incomplete(st, args.store)
    f = _filters(args)
    if not any(v is not None for v in f.values()):
        info = st.summary()
        info["groups"] = int(len(st.groups()))
        if args.json:
            print(json.dumps(info, indent=2))
            return 0
        for k, v in info.items():
            print(f"{k:<18}  {term(', '.join(map(str, v)) if isinstance(v, list) else v)}")
        return 0
    batch = st.load_batch(**f, anchor_obs=f["group"] is not None)
    info = batch_summary(build_graph(batch))
    if f["group"] is not None:
        tr = batch.trajectories
        info["trajectories_table"] = tr[["traj_id", "num_steps", "success", "truncated",
                                         "episode_return"]].to_dict(orient="records")
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    for k, v in info.items():
        if k == "trajectories_table":
            print("trajectories:")
            for row in v:
                print(f"  {term(row['traj_id'])}  steps={row['num_steps']}  success={row['success']}  "
                      f"truncated={row['truncated']}  return={row['episode_return']:.3g}")
        else:
            print(f"{k:<26}  {term(v)}")
    return 0


def _warn_incomplete(st, store_dir) -> None:
    from .store import incomplete_sources

    for m in incomplete_sources(st):
        done = sum(int(p["rows"]) for p in m.get("parts", []))
        print(f"warning: source {term(m.get('path', m['digest']))} is incomplete (its ingest was "
              f"interrupted: {done:,} of {int(m.get('rows', 0)):,} steps committed); resume it with "
              f"`crbc-viz ingest {term(m.get('path', 'LOG'))} --store {term(store_dir)}` or remove "
              f"it with `crbc-viz drop-incomplete --store {term(store_dir)}`", file=sys.stderr)


def cmd_drop_incomplete(args) -> int:
    from .store import drop_incomplete

    dropped = drop_incomplete(args.store)
    for p in dropped:
        print(f"dropped  {term(p)}")
    print(f"{len(dropped)} incomplete source(s) removed from {term(args.store)}")
    return 0


def cmd_score_store(args) -> int:
    from .. import estimators
    from ..cli import _parse_params, check_out, score_and_write

    names = args.estimator or ["crbc"]
    for n in names:
        estimators.get(n)
    params = _parse_params(args.param, names)
    check_out(args)
    batch = _store(args).load_batch(**_filters(args), anchor_obs=False)
    return score_and_write(batch, names, params, args)


# -- trends ------------------------------------------------------------------------------------
def cmd_trends(args) -> int:
    from tqdm import tqdm

    from .trends import store_trends

    st = _store(args)
    est = tuple(e.strip() for e in args.estimators.split(","))
    if len(est) != 2:
        raise ValueError(f"--estimators: expected two names separated by a comma, got {args.estimators!r}")
    n = len(st.train_steps(args.run))
    bar = tqdm(total=n, desc="trends", unit="step", file=sys.stderr, disable=args.quiet)
    tr = store_trends(st, run=args.run, estimators=est, backend=args.backend, cache=not args.no_cache,
                      progress=lambda r, t: bar.update(1))
    bar.close()
    steps = tr.steps
    if args.train_step is not None:
        g = tr.groups_of(args.train_step, args.run)
        if g.empty:
            raise ValueError(f"no train_step {args.train_step} in {args.store}")
        if args.json:
            print(g.to_json(orient="records", indent=2))
        else:
            print(term(g.to_string(index=False, float_format=lambda x: f"{x:.3f}"), newlines=True))
        return 0
    if args.json:
        print(json.dumps({"estimators": list(est), "steps": json.loads(steps.to_json(orient="records"))},
                         indent=2))
        return 0
    print(f"disagreement = 1 - Spearman({est[0]}, {est[1]}) of step credit, mean over groups")
    print(steps.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


# -- export ------------------------------------------------------------------------------------
def cmd_export(args) -> int:
    from ..cli import _parse_params, check_out
    from .export import export_scores

    params = _parse_params(args.param, [args.estimator])
    check_out(args)
    kw = {**params.get("*", {}), **params.get(args.estimator, {})}
    table = export_scores(_store(args), args.estimator, args.out, run=args.run,
                          train_step=args.train_step, backend=args.backend, params=kw)
    print(f"wrote {len(table):,} scored steps ({args.estimator}) to {term(args.out)}")
    return 0


# -- registration ------------------------------------------------------------------------------
def _route(original, store_fn):
    def run(args):
        if getattr(args, "store", None):
            return store_fn(args)
        if getattr(args, "log", None) is None:
            raise ValueError("give a log file, or --store DIR")
        return original(args)
    return run


def add_store_commands(sub) -> None:
    """Register ``ingest``, ``trends`` and ``export`` on ``sub`` (the ``add_subparsers``
    object) and extend already registered ``info`` / ``score`` with ``--store`` and filters."""
    from ..io.importers import FORMATS

    g = sub.add_parser("ingest", help="normalise rollout logs into a Parquet log store")
    g.add_argument("log", nargs="+", help="log files or folders (rLLM: episode folders)")
    g.add_argument("--store", required=True, metavar="DIR")
    g.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    g.add_argument("--run-id", dest="run_id", help="run_id of every ingested row (default: from the log or its folder)")
    g.add_argument("--lenient", action="store_true", help="skip bad rows and report them")
    g.add_argument("--success-threshold", type=float, default=0.0, dest="success_threshold")
    g.add_argument("--reward-columns", dest="reward_columns", metavar="A,B",
                   type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                   help="TRL / ms-swift: the reward-function columns (default: the numeric columns "
                        "that reproduce the logged advantage)")
    g.add_argument("--success-column", dest="success_column", metavar="COL",
                   help="TRL / ms-swift: the 0/1 column that is success (default: the one 0/1 "
                        "reward column, e.g. reward_won)")
    g.add_argument("--part-rows", type=int, default=500_000, dest="part_rows",
                   help="most steps per Parquet part")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    g.set_defaults(func=cmd_ingest)

    t = sub.add_parser("trends", help="per-train_step trends of a log store")
    t.add_argument("--store", required=True, metavar="DIR")
    t.add_argument("--run")
    t.add_argument("--train-step", type=int, dest="train_step", help="drill down: this step's groups")
    t.add_argument("--estimators", default="crbc,shortest_path",
                   help="the credit whose non-zero fraction is reported, and the one it is compared with")
    t.add_argument("--backend", default="auto", choices=("auto", "numpy", "torch", "numba"))
    t.add_argument("--json", action="store_true")
    t.add_argument("--no-cache", action="store_true", dest="no_cache")
    t.add_argument("--quiet", "-q", action="store_true")
    t.set_defaults(func=cmd_trends)

    d = sub.add_parser("drop-incomplete", help="remove sources whose ingest was interrupted")
    d.add_argument("--store", required=True, metavar="DIR")
    d.set_defaults(func=cmd_drop_incomplete)

    e = sub.add_parser("export", help="scored advantages per step, keyed as the trainer keys them")
    e.add_argument("--store", required=True, metavar="DIR")
    e.add_argument("--estimator", "-e", default="crbc")
    e.add_argument("--param", "-p", action="append", default=[])
    e.add_argument("--run")
    e.add_argument("--train-step", type=int, dest="train_step")
    e.add_argument("--backend", default="auto", choices=("auto", "numpy", "torch", "numba"))
    e.add_argument("--out", "-o", required=True, help="output .parquet, .csv or .jsonl")
    e.set_defaults(func=cmd_export)

    for name, fn in (("info", cmd_info_store), ("score", cmd_score_store)):
        p = sub.choices.get(name)
        if p is None:
            continue
        for a in p._actions:  # the positional log becomes optional when --store is given
            if a.dest == "log":
                a.nargs, a.required, a.default = "?", False, None
        add_store_options(p)
        p.set_defaults(func=_route(p.get_default("func"), fn))


def main(argv: list[str] | None = None) -> int:
    """``python -m crbc_viz.store.cli ...``: the full CLI with the store commands registered
    (usable before ``crbc_viz/cli.py`` calls `add_store_commands` itself)."""
    from .. import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "ingest" not in sub.choices:
        add_store_commands(sub)
    original = cli.build_parser
    cli.build_parser = lambda: parser
    try:
        return cli.main(argv)
    finally:
        cli.build_parser = original


if __name__ == "__main__":
    sys.exit(main())
