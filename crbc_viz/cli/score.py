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
    p.add_argument("--out", "-o", required=True, help="output .parquet, .csv or .jsonl")
    add_source_arguments(p)


def run(args) -> int:
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
