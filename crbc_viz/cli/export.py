"""``crbc-viz export --store DIR -e NAME [--param k=v] --out FILE``: scored advantages per step,
keyed as the trainer keys them."""

from __future__ import annotations

from ..safetext import term
from ._common import BACKEND_CHOICES, add_param_argument, add_store_arguments, check_out, parse_params

HELP = "scored advantages per step, keyed as the trainer keys them"


def add_arguments(p) -> None:
    add_store_arguments(
        p, required=True, filters=("run", "train_step"), helps={"run": None, "train_step": None}
    )
    p.add_argument("--estimator", "-e", default="crbc")
    add_param_argument(p, help=False)
    p.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument("--out", "-o", required=True, help="output .parquet, .csv or .jsonl")


def run(args) -> int:
    from ..analysis.export import export_scores
    from ..store import LogStore

    params = parse_params(args.param, [args.estimator])
    check_out(args)
    kw = {**params.get("*", {}), **params.get(args.estimator, {})}
    table = export_scores(
        LogStore(args.store),
        args.estimator,
        args.out,
        run=args.run,
        train_step=args.train_step,
        backend=args.backend,
        params=kw,
    )
    print(f"wrote {len(table):,} scored steps ({term(args.estimator)}) to {term(args.out)}")
    return 0
