"""``crbc-viz html SOURCE [--group G] [-e NAME ...] [--param k=v ...] -o page.html``: one group
as one self-contained HTML page to share (`crbc_viz.views.share`): its graph under each
estimator side by side, its rollouts with per-step credit, and the data's provenance. It opens
offline from ``file://``: nothing in it asks the network for anything.

Exit status: 0 written; 2 an error (nothing written: bad input, an unknown group or estimator,
a bad ``--param``, or every estimator refused the input); 3 written, but some estimators
refused the input (one line each on stderr; the page names them too)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..safetext import term
from ._common import (
    BACKEND_CHOICES,
    UsageError,
    add_anchor_rule_arguments,
    add_param_argument,
    anchor_rule,
    check_estimators,
    one_line,
    parse_params,
)

HELP = "one group as a self-contained HTML page to share"

#: Written, but some estimators refused the input (as ``score``'s `EXIT_REFUSED`).
EXIT_REFUSED = 3


def add_arguments(p) -> None:
    from ..io.importers import FORMATS

    p.epilog = (
        "exit status: 0 written; 2 error, nothing written; 3 written, but some estimators "
        "refused the input (one line each on stderr)"
    )
    p.add_argument("source", metavar="SOURCE", help="a rollout log file (any format the importers read)")
    p.add_argument("--group", metavar="G", help="run/train_step/group_id, or a group_id (default: the first)")
    p.add_argument("--estimator", "-e", action="append", help="registry name (repeatable; default crbc)")
    add_param_argument(p)
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS), help="how to read SOURCE")
    p.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument("--out", "-o", required=True, help="the page to write (.html)")
    add_anchor_rule_arguments(p)


def run(args) -> int:
    from ..io.write import check_output
    from ..views.share import show

    names = list(dict.fromkeys(args.estimator or ["crbc"]))
    check_estimators(names)
    params = parse_params(args.param, names)
    if Path(args.out).suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {args.out!r}: the page is HTML; give a name ending in .html")
    check_output(args.out, [args.source])
    kw = {**params.get("*", {}), **{n: v for n, v in params.items() if n != "*"}}
    from ..io.anchor_rules import using

    rule = anchor_rule(args)
    with using(rule):
        view = show(args.source, args.group, names, fmt=args.format, backend=args.backend, **kw)
    rule.check_found()
    view.save(args.out)
    for n, exc in view.refused.items():
        print(f"error: estimator '{n}' refused the input: {term(one_line(exc))}", file=sys.stderr)
    print(
        f"wrote {term(args.out)}: group {term(view.group_label)}, "
        f"{len(view.results)} estimator(s) ({', '.join(view.results)})"
    )
    return EXIT_REFUSED if view.refused else 0
