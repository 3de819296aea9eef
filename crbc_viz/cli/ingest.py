"""``crbc-viz ingest LOG... --store DIR [--format F]``: normalise logs into a Parquet log store.

``crbc-viz ingest --watch DIR --store S [--settle 5] [--poll]`` follows a trainer's dump folder
until it is stopped (Ctrl-C, SIGTERM), ingesting each log once it is complete and again when it
grows (`crbc_viz.store.watch`): one line per ingested log, a heartbeat line while idle with -v.
"""

from __future__ import annotations

import sys

from ..safetext import term
from ._common import (
    LENIENT_HELP,
    UsageError,
    add_anchor_rule_arguments,
    add_map_arguments,
    add_store_arguments,
    anchor_rule,
    field_map,
)

HELP = "normalise rollout logs into a Parquet log store (--watch: follow a run)"

_WATCH_ONLY = ("settle", "poll", "poll_interval", "heartbeat")


def add_arguments(p) -> None:
    from ..io.importers import FORMATS
    from ..store.watch import HEARTBEAT_S, POLL_S, SETTLE_S

    p.add_argument("log", nargs="*", help="log files or folders (rLLM: episode folders)")
    add_store_arguments(p, required=True, filters=())
    add_anchor_rule_arguments(p)
    w = p.add_argument_group("following a run while it trains")
    w.add_argument(
        "--watch",
        metavar="DIR",
        help="follow the trainer's dump folder DIR until stopped (Ctrl-C, SIGTERM): each log "
        "is ingested once complete, and again (as a new version) when it grows",
    )
    w.add_argument(
        "--settle",
        type=float,
        default=None,
        metavar="S",
        help=f"a log is complete once unchanged for S seconds (default {SETTLE_S:g}) and, for "
        "JSONL/CSV, ending with a newline; a Parquet file once its footer reads",
    )
    w.add_argument(
        "--poll",
        action="store_true",
        default=None,
        help="scan the folder every --poll-interval seconds instead of waiting for file change "
        "events (network file systems, where events do not arrive)",
    )
    w.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        dest="poll_interval",
        metavar="S",
        help=f"seconds between two scans with --poll (default {POLL_S:g})",
    )
    w.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="S",
        help=f"with -v, a line every S seconds while idle (default {HEARTBEAT_S:g})",
    )
    p.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    add_map_arguments(p)
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
        "reward column, e.g. reward_won); ART / tinker-cookbook: the metrics key that is "
        "success (default: ART's one 0/1 metric named win / success / correct ..., "
        "tinker-cookbook's correct)",
    )
    p.add_argument(
        "--part-rows", type=int, default=500_000, dest="part_rows", help="most steps per Parquet part"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def _format(args) -> str:
    """``--format``, or ``fieldmap`` when a field map is given."""
    from ..io.importers.fieldmap import NAME

    return NAME if field_map(args, into_store=True) is not None else args.format


def _import_options(args) -> dict:
    return {
        "reward_columns": args.reward_columns,
        "success_column": args.success_column,
        "field_map": field_map(args, into_store=True),
    }


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
    field_map(args, into_store=True)  # a bad map fails before a folder is made or a log read
    if not anchor_rule(args).exact:  # a bad rule is named first; a good one belongs to the reader
        raise UsageError(
            "--anchor-*: a store keeps the exact anchor keys; give the rule when reading it "
            "(score / info / verify --store DIR --anchor-...)"
        )
    if args.watch is not None:
        if args.log:
            raise UsageError("give log files to ingest, or --watch DIR to follow a folder, not both")
        return _watch(args)
    given = [k for k in _WATCH_ONLY if getattr(args, k) is not None]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"{flags}: option(s) of --watch DIR")
    if not args.log:
        raise UsageError("give the log files or folders to ingest, or --watch DIR to follow a training run")
    return _ingest(args)


def _ingest(args) -> int:
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
            fmt=_format(args),
            lenient=args.lenient,
            success_threshold=args.success_threshold,
            run_id=args.run_id,
            part_rows=args.part_rows,
            progress=progress,
            import_options=_import_options(args),
        )
    finally:
        bar.close()
    for s in report.sources:
        how = " (auto-detected)" if _format(args) == "auto" else ""
        said = (
            f"{s['rows']:,} steps {s['why']}"
            if s.get("why")
            else f"{s['rows']:,} steps, {s['parts']} part(s)"
        )
        print(f"{s['status']:>8}  {term(s['path'])}  [{s['format']}]{how}  {term(said)}")
        for n in s.get("notes", []):
            print(f"    note: {term(n)}", file=sys.stderr)
        for w in s.get("warnings", []):
            print(f"    warning: {term(w)}", file=sys.stderr)
        if s.get("skipped"):
            print(f"    lenient: skipped {len(s['skipped'])} problem row(s)", file=sys.stderr)
    new = sum(1 for s in report.sources if s["status"] != "skipped")
    print(
        f"{new} source(s) ingested, {len(report.sources) - new} already in the store; "
        f"{report.rows:,} new steps in {term(args.store)}"
    )
    return 0


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _watch(args) -> int:
    """Follow ``--watch DIR`` until SIGINT / SIGTERM; each stops it after the log being
    ingested (a second one interrupts that too: the source is then resumed on the next start)."""
    import signal

    from ..errors import CrbcVizError
    from ..store.watch import HEARTBEAT_S, POLL_S, SETTLE_S, Watcher
    from ._common import error_text

    verbose = bool(getattr(args, "verbose", False))

    def show(ev) -> None:
        name = term(ev.path)
        if ev.kind in ("ingested", "replaced", "resumed"):
            what = {"replaced": " (new version: it changed since it was ingested)", "resumed": " (resumed)"}
            print(
                f"{ev.kind:>8}  {name}  [{ev.fmt}]  {_plural(ev.steps, 'step')}, "
                f"{_plural(ev.train_steps, 'train step')}{what.get(ev.kind, '')}",
                flush=True,
            )
        elif ev.kind == "present":
            if verbose:
                said = term(ev.message or "already in the store")
                print(f"{'present':>8}  {name}  [{ev.fmt}]  {_plural(ev.steps, 'step')} {said}", flush=True)
        elif ev.kind == "failed":
            err = ev.error
            unexpected = "" if isinstance(err, (CrbcVizError, OSError)) else f"{type(err).__name__}: "
            print(f"{'failed':>8}  {name}: {unexpected}{error_text(err)}", file=sys.stderr, flush=True)
        elif ev.kind in ("waiting", "changed"):
            print(f"{ev.kind:>8}  {name}: {term(ev.message)}", file=sys.stderr, flush=True)
        elif ev.kind == "heartbeat":
            if verbose:
                print(f"heartbeat: {term(ev.message)}", file=sys.stderr, flush=True)
        else:
            print(f"note: {term(ev.message)}", file=sys.stderr, flush=True)

    import math
    import os

    # Settings first: a bad one must not leave a folder behind.
    for flag, v in (
        ("--settle", args.settle),
        ("--poll-interval", args.poll_interval),
        ("--heartbeat", args.heartbeat),
    ):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{flag} {v!r}: expected a finite number of seconds >= 0")
    if not os.path.lexists(args.watch):
        # Started beside the trainer, before its first log: the folder it will write.
        os.makedirs(args.watch)
        print(
            f"note: {term(args.watch)} did not exist: created it (empty); its logs are read as they appear",
            file=sys.stderr,
            flush=True,
        )
    watcher = Watcher(
        args.watch,
        args.store,
        fmt=_format(args),
        settle=SETTLE_S if args.settle is None else args.settle,
        poll=bool(args.poll),
        poll_interval=POLL_S if args.poll_interval is None else args.poll_interval,
        heartbeat=HEARTBEAT_S if args.heartbeat is None else args.heartbeat,
        on_event=show,
        lenient=args.lenient,
        success_threshold=args.success_threshold,
        run_id=args.run_id,
        part_rows=args.part_rows,
        import_options=_import_options(args),
    )
    stops = [0]

    def on_signal(signum, frame):
        stops[0] += 1
        if stops[0] > 1:
            raise KeyboardInterrupt
        watcher.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with watcher:
            how = "polling every " + f"{watcher.poll_interval:g} s" if watcher.poll else "file change events"
            print(
                f"watching {term(args.watch)} into {term(args.store)} ({how}; a log is read once "
                f"unchanged for {watcher.settle:g} s); Ctrl-C stops",
                file=sys.stderr,
                flush=True,
            )
            watcher.run()
            c = watcher.counts
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    print(
        f"stopped: {_plural(c['ingested'], 'log')} ingested, {_plural(c['replaced'], 'new version')}, "
        f"{c['present']:,} already in the store, {c['failed']:,} failed",
        flush=True,
    )
    return 0
