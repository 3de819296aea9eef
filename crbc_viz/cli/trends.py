"""``crbc-viz trends --store DIR [--run R] [--train-step N] [--json]``: per-train_step trends."""

from __future__ import annotations

import json
import sys

from ..errors import StoreError
from ..safetext import term
from ._common import BACKEND_CHOICES, UsageError, add_store_arguments, open_store

HELP = "per-train_step trends of a log store"


def add_arguments(p) -> None:
    add_store_arguments(
        p,
        required=True,
        filters=("run", "train_step"),
        helps={"run": None, "train_step": "drill down: this step's groups"},
    )
    p.add_argument(
        "--estimators",
        default="crbc,shortest_path",
        help="the credit whose non-zero fraction is reported, and the one it is compared with",
    )
    p.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-cache", action="store_true", dest="no_cache")
    p.add_argument("--quiet", "-q", action="store_true")


def run(args) -> int:
    est = tuple(e.strip() for e in args.estimators.split(","))
    if len(est) != 2:
        raise UsageError(f"--estimators: expected two names separated by a comma, got {args.estimators!r}")
    from tqdm import tqdm

    from ..analysis.trends import store_trends

    st = open_store(args)
    n = len(st.train_steps(args.run))
    if n == 0:
        raise StoreError(_nothing_to_trend(st, args))
    bar = tqdm(total=n, desc="trends", unit="step", file=sys.stderr, disable=args.quiet)
    tr = store_trends(
        st,
        run=args.run,
        estimators=est,
        backend=args.backend,
        cache=not args.no_cache,
        progress=lambda r, t: bar.update(1),
    )
    bar.close()
    steps = tr.steps
    if args.train_step is not None:
        g = tr.groups_of(args.train_step, args.run)
        if g.empty:
            raise UsageError(f"no train_step {args.train_step} in {args.store}")
        if args.json:
            print(g.to_json(orient="records", indent=2))
        else:
            print(term(g.to_string(index=False, float_format=lambda x: f"{x:.3f}"), newlines=True))
        return 0
    if args.json:
        print(
            json.dumps(
                {"estimators": list(est), "steps": json.loads(steps.to_json(orient="records"))}, indent=2
            )
        )
        return 0
    print(term(f"disagreement = 1 - Spearman({est[0]}, {est[1]}) of step credit, mean over groups"))
    print(term(steps.to_string(index=False, float_format=lambda x: f"{x:.3f}"), newlines=True))
    return 0


def _nothing_to_trend(st, args) -> str:
    """Why the store has no training step to show: no such run, no source ingested yet, or
    only sources whose ingest was interrupted before their first part was committed."""
    from ..store import incomplete_sources

    store = term(args.store)
    if st.parts:
        runs = sorted({p.run_id for p in st.parts})
        shown = ", ".join(term(r) for r in runs[:20]) + (" ..." if len(runs) > 20 else "")
        return f"{store}: no run {term(args.run)!r} in the store (runs: {shown})"
    if not st.sources:
        return (
            f"{store}: the store holds no steps: no log has been ingested into it yet; add logs "
            f"with `crbc-viz ingest LOG... --store {store}`"
        )
    broken = len(incomplete_sources(st))
    return (
        f"{store}: the store holds no steps: {broken} source(s) whose ingest was interrupted "
        f"before its first part was committed (see the warning above) and no complete source; "
        f"resume them with `crbc-viz ingest LOG... --store {store}` or remove them with "
        f"`crbc-viz drop-incomplete --store {store}`"
    )
