"""``crbc-viz score (LOG | --store DIR [filters]) -e NAME ... [--param k=v ...] --out FILE``.

Exit status: 0 written; 2 an error (nothing written: bad input, a bad ``--param``, or every
estimator refused the input); 3 written, but some estimators refused the input (one line each
on stderr, `EXIT_REFUSED`)."""

from __future__ import annotations

import sys

from ..safetext import term
from ._common import (
    BACKEND_CHOICES,
    DEVICE_CHOICES,
    add_param_argument,
    add_source_arguments,
    check_estimators,
    check_out,
    load_batch,
    log,
    one_line,
    parse_params,
)

HELP = "score a rollout log with one or more estimators"


def add_arguments(p) -> None:
    p.epilog = (
        "exit status: 0 written; 2 error, nothing written; 3 written, but some estimators "
        "refused the input (one line each on stderr)"
    )
    p.add_argument("--estimator", "-e", action="append", help="registry name (repeatable; default crbc)")
    add_param_argument(p)
    p.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    p.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument(
        "--out", "-o", required=True, help="output .parquet, .csv or .jsonl (with --all: a new folder)"
    )
    add_source_arguments(p)
    g = p.add_argument_group("whole-store re-scoring (README: Past one machine)")
    g.add_argument(
        "--all",
        action="store_true",
        help="with --store: every group of every train step, one train step at a time, into the "
        "folder --out partitioned like the store (run_id=/train_step=/credit.parquet)",
    )
    g.add_argument(
        "--engine", choices=("local", "ray"), default="local", help="with --all: this process, or Ray Data"
    )
    g.add_argument(
        "--address", help="with --engine ray: the cluster (ray://HOST:10001, auto); default a local Ray"
    )
    g.add_argument("--workers", type=int, help="with --engine ray and no --address: the local Ray's CPUs")


def run(args) -> int:
    if args.all or args.engine != "local" or args.address or args.workers:
        return run_all(args)
    given = args.estimator or ["crbc"]
    names = list(dict.fromkeys(given))  # each estimator once, in the order first named
    check_estimators(names)  # unknown names, bad --param and --out fail before loading
    if len(names) < len(given):
        repeated = [n for n in names if given.count(n) > 1]
        log.warning("estimator(s) named more than once are scored once: %s", ", ".join(repeated))
    params = parse_params(args.param, names)
    check_out(args)
    batch = load_batch(args)
    return score_and_write(batch, names, params, args)


#: Exit status when some estimators were written and others refused their input (each refusal
#: is one line on stderr). Every estimator refused: 2, like any error, and nothing is written.
EXIT_REFUSED = 3


def score_and_write(batch, names: list[str], params: dict, args) -> int:
    """Score ``batch`` with ``names``, log diagnostics, write ``args.out`` atomically.

    An estimator that refuses the input (`crbc_viz.api.REFUSALS`: a logged field missing or
    malformed) is one line on stderr; the others are written, and the status is
    `EXIT_REFUSED`. When every estimator refuses, nothing is written and the status is 2.

    A Parquet output is written from Arrow tables (`CreditResult.to_arrow`): for a log the
    columnar lane read, the whole command runs without pandas."""
    from pathlib import Path

    from ..api import score_each

    results, refused = score_each(batch, names, params, device=args.device, backend=args.backend)
    for n, exc in refused.items():
        print(f"error: estimator '{n}' refused the input: {term(one_line(exc))}", file=sys.stderr)
    if not results:
        return 2
    for n, result in results.items():
        for k, v in result.diagnostics.items():
            log.info("%s: %s = %s", n, k, v)
    if Path(args.out).suffix.lower() == ".parquet":
        import pyarrow as pa

        from ..io.write import write_table

        out = pa.concat_tables([r.to_arrow() for r in results.values()])
        write_table(out, args.out)
        rows = out.num_rows
    else:
        import pandas as pd

        from ..io.write import write_frame

        out = pd.concat([r.to_frame() for r in results.values()], ignore_index=True)
        write_frame(out, args.out)
        rows = len(out)
    print(f"wrote {rows} rows ({batch.num_steps} steps x {len(results)} estimator(s)) to {term(args.out)}")
    if refused:
        print(f"not written: {', '.join(refused)} (refused the input; see above)", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def run_all(args) -> int:
    """``score --store S --all [--engine ray] -o OUT``: `crbc_viz.store.rescore.rescore`."""
    from ..store.rescore import rescore
    from ._common import UsageError, anchor_rule

    if not args.all:
        raise UsageError("--engine, --address and --workers go with --all (a whole store)")
    if not args.store or args.log:
        raise UsageError("--all re-scores a store: give --store DIR (and no LOG)")
    if args.group or args.train_step is not None or args.env or args.success:
        raise UsageError("--all scores every group of every train step: only --run narrows it")
    if args.engine != "ray" and (args.address or args.workers):
        raise UsageError("--address and --workers go with --engine ray")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: expected at least 1")
    given = args.estimator or ["crbc"]
    names = list(dict.fromkeys(given))
    check_estimators(names)
    params = parse_params(args.param, names)
    from pathlib import Path

    from ..io.write import check_output
    from ..store.rescore import OUTPUT_FILE

    check_output(Path(args.out) / OUTPUT_FILE, [args.store])  # never inside the store it reads
    report = rescore(
        args.store,
        names,
        params,
        args.out,
        engine=args.engine,
        address=args.address,
        run=args.run,
        rule=anchor_rule(args),
        backend=args.backend,
        num_cpus=args.workers,
    )
    for name, where in report.refused.items():
        print(
            f"error: estimator '{name}' refused the input of {len(where)} train step(s): {term(', '.join(where[:10]))}",
            file=sys.stderr,
        )
    print(
        f"wrote {report.rows} rows ({report.steps} steps x {len(names)} estimator(s), "
        f"{len(report.units)} train step(s)) to {term(args.out)} in {report.seconds:.1f} s ({args.engine}; "
        f"the units' own time {report.unit_seconds:.1f} s)"
    )
    return EXIT_REFUSED if report.refused else 0
