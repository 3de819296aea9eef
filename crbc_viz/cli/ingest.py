"""``crbc-viz ingest LOG... --store DIR [--format F]``: normalise logs into a Parquet log store."""

from __future__ import annotations

import sys

from ..safetext import term
from ._common import LENIENT_HELP, add_store_arguments

HELP = "normalise rollout logs into a Parquet log store"


def add_arguments(p) -> None:
    from ..io.importers import FORMATS

    p.add_argument("log", nargs="+", help="log files or folders (rLLM: episode folders)")
    add_store_arguments(p, required=True, filters=())
    p.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    p.add_argument(
        "--run-id", dest="run_id", help="run_id of every ingested row (default: from the log or its folder)"
    )
    p.add_argument("--lenient", action="store_true", help=LENIENT_HELP)
    p.add_argument("--success-threshold", type=float, default=0.0, dest="success_threshold")
    p.add_argument(
        "--reward-columns",
        dest="reward_columns",
        metavar="A,B",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        help="TRL / ms-swift: the reward-function columns (default: the numeric columns "
        "that reproduce the logged advantage)",
    )
    p.add_argument(
        "--success-column",
        dest="success_column",
        metavar="COL",
        help="TRL / ms-swift: the 0/1 column that is success (default: the one 0/1 "
        "reward column, e.g. reward_won)",
    )
    p.add_argument(
        "--part-rows", type=int, default=500_000, dest="part_rows", help="most steps per Parquet part"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def _total_bytes(paths: list[str]) -> int:
    import os

    total = 0
    for p in paths:
        if os.path.isdir(p):
            total += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
        elif os.path.exists(p):
            total += os.path.getsize(p)
    return total


def run(args) -> int:
    from tqdm import tqdm

    from ..store import ingest

    bar = tqdm(
        total=_total_bytes(args.log),
        unit="B",
        unit_scale=True,
        desc="ingest",
        file=sys.stderr,
        disable=args.quiet,
    )
    rows = [0]

    def progress(ev):
        if "part" in ev:
            rows[0] += ev["rows"]
            bar.set_postfix(steps=f"{rows[0]:,}")
        else:
            bar.update(ev["bytes"])

    try:
        report = ingest(
            args.store,
            args.log,
            fmt=args.format,
            lenient=args.lenient,
            success_threshold=args.success_threshold,
            run_id=args.run_id,
            part_rows=args.part_rows,
            progress=progress,
            import_options={"reward_columns": args.reward_columns, "success_column": args.success_column},
        )
    finally:
        bar.close()
    for s in report.sources:
        how = " (auto-detected)" if args.format == "auto" else ""
        print(
            f"{s['status']:>8}  {term(s['path'])}  [{s['format']}]{how}  {s['rows']:,} steps, {s['parts']} part(s)"
        )
        for n in s.get("notes", []):
            print(f"    note: {term(n)}", file=sys.stderr)
        for w in s.get("warnings", []):
            print(f"    warning: {term(w)}", file=sys.stderr)
        if s.get("skipped"):
            print(f"    lenient: skipped {len(s['skipped'])} problem row(s)", file=sys.stderr)
    new = sum(1 for s in report.sources if s["status"] != "skipped")
    print(
        f"{new} source(s) ingested, {len(report.sources) - new} already in the store; "
        f"{report.rows:,} new steps in {args.store}"
    )
    return 0
