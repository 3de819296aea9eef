"""``crbc-viz score (LOG | --store DIR [filters]) -e NAME ... [--param k=v ...] --out FILE``."""

from __future__ import annotations

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
    parse_params,
)

HELP = "score a rollout log with one or more estimators"


def add_arguments(p) -> None:
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


def score_and_write(batch, names: list[str], params: dict, args) -> int:
    """Score ``batch`` with ``names``, log diagnostics, write ``args.out`` atomically.

    A Parquet output is written from Arrow tables (`CreditResult.to_arrow`): for a log the
    columnar lane read, the whole command runs without pandas."""
    from pathlib import Path

    from ..api import score_all

    results = score_all(batch, names, params, device=args.device, backend=args.backend)
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
    return 0
