"""``crbc-viz verify SOURCE [-e NAME] [--param k=v ...] [--json]``: recompute the advantage the
trainer says it used from the same rollouts and compare with the one it logged (docs/verify.md).

Exit status: 0 every group agrees within the float32 rule; 1 some groups disagree (each named);
2 bad input (among it: a file that carries no logged advantage, one line)."""

from __future__ import annotations

from ..safetext import term
from ._common import (
    LENIENT_HELP,
    UsageError,
    add_anchor_rule_arguments,
    add_param_argument,
    add_store_arguments,
    anchor_rule,
    open_store,
    parse_params,
)

HELP = "recompute the trainer's own advantage and compare it with the logged one"

#: Exit status when some groups disagree.
EXIT_DISAGREE = 1


def add_arguments(p) -> None:
    from ..io.importers import FORMATS

    p.epilog = (
        "exit status: 0 all groups agree within |logged - recomputed| <= atol + rtol*|recomputed| "
        "(float32: atol 2e-4, rtol 1e-5); 1 some groups disagree (named); 2 bad input, or no "
        "logged advantage"
    )
    p.add_argument(
        "source", nargs="?", default=None, help="a trainer's dump: a file, or a folder of one run's files"
    )
    p.add_argument(
        "--estimator",
        "-e",
        help="recompute with this estimator instead of the trainer's own (default: from the format)",
    )
    add_param_argument(p)
    p.add_argument("--format", default="auto", choices=("auto",) + FORMATS)
    p.add_argument(
        "--reward-columns",
        dest="reward_columns",
        metavar="A,B",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        help="TRL / ms-swift: the reward-function columns (default: inferred by the importer)",
    )
    p.add_argument("--success-column", dest="success_column", metavar="COL")
    p.add_argument("--lenient", action="store_true", help=LENIENT_HELP)
    p.add_argument("--json", action="store_true", help="the comparison as JSON on stdout")
    add_store_arguments(p, filters=("run", "train_step"))
    add_anchor_rule_arguments(p)
    p.add_argument(
        "--rows",
        type=int,
        default=20,
        metavar="N",
        help="train steps and groups listed in the text output, disagreeing first (--json: all)",
    )


def _read(args):
    """[(source path, format, batch)] of ``args.source``, or of each run of ``--store``, the
    anchors keyed by the ``--anchor-*`` rule."""
    from ..anchor_merge import merge_anchors
    from ..io.anchor_rules import using

    rule = anchor_rule(args)
    with using(rule):
        out = _read_sources(args)
    rule.check_found()
    return [(src, fmt, merge_anchors(batch, rule)) for src, fmt, batch in out]


def _read_sources(args):
    from ..io import load_rollouts
    from ..io.columnar import batch_of_import
    from ..io.importers import expand_sources, import_source

    if (args.source is None) == (args.store is None):
        raise UsageError("verify: give a dump (SOURCE) or --store DIR, not both")
    if args.store is None and (args.run is not None or args.train_step is not None):
        raise UsageError("--run / --train-step select from a store; give --store DIR")
    out = []
    if args.store is not None:
        st = open_store(args)
        runs = st.train_steps(args.run)["run_id"].drop_duplicates().tolist()
        for run in runs:
            batch = st.load_batch(run=run, train_step=args.train_step)
            out.append((f"{args.store} (run {run})", "canonical", batch))
        if not out:
            raise UsageError(f"--store {args.store}: no run matches the filters")
        return out
    for src in expand_sources([args.source], args.format):
        if src.fmt == "canonical":
            batch = load_rollouts(src.path, lenient=args.lenient)
        else:
            imp = import_source(src, reward_columns=args.reward_columns, success_column=args.success_column)
            batch = batch_of_import(imp.raw, lenient=args.lenient)
        out.append((src.path, src.fmt, batch))
    return out


def _plan(fmt: str, batch, args) -> tuple[str, dict, str]:
    """(estimator, params, what it reproduces) for a source of format ``fmt``: ``-e`` (with the
    trainer's parameters when it names the trainer's own estimator), else `default_plan`; then
    ``--param``."""
    from ..analysis.verify import convention, default_plan

    if args.estimator:
        name, params, what = args.estimator, {}, f"-e {args.estimator}"
        if args.estimator in _conventions_by_estimator(fmt):
            params = dict(convention(fmt).params)
            what = convention(fmt).trainer
    else:
        name, params, what = default_plan(fmt, batch)
    given = parse_params(args.param, [name])
    params.update(given.get("*", {}))
    params.update(given.get(name, {}))
    return name, params, what


def _conventions_by_estimator(fmt: str) -> set[str]:
    from ..analysis.verify import CONVENTIONS

    c = CONVENTIONS.get(fmt)
    return {c.estimator} if c else set()


def run(args) -> int:
    import pandas as pd

    from ..analysis.verify import CONVENTIONS, NoAdvantageError, Verification, compare, logged_advantage
    from ..estimators import get

    if args.estimator:
        get(args.estimator)  # an unknown name fails before loading
    if args.rows < 0:
        raise UsageError("--rows: expected a count >= 0")
    results, without = [], []
    for path, fmt, batch in _read(args):
        try:
            logged_advantage(batch)  # none logged: said before asking for an estimator
        except NoAdvantageError:
            without.append(path)
            continue
        est, params, what = _plan(fmt, batch, args)
        v = compare(batch, est, params)
        c = CONVENTIONS.get(fmt)
        if c is not None and c.caveat and est == c.estimator:
            v.notes.append(f"{fmt}: {c.caveat}")
        results.append((path, fmt, what, v))
    if not results:
        raise NoAdvantageError(
            f"{args.source or args.store}: carries no trainer-written advantage (nothing to verify)"
        )
    groups = pd.concat([v.groups for *_, v in results], ignore_index=True)
    first = results[0][3]
    names = list(dict.fromkeys(v.estimator for *_, v in results))
    notes = list(dict.fromkeys(n for *_, v in results for n in v.notes))
    notes += [f"{p}: carries no logged advantage; not compared" for p in without]
    merged = Verification(
        groups,
        ", ".join(names),
        first.params if len(names) == 1 else {},
        first.atol,
        first.rtol,
        sum(v.skipped_steps for *_, v in results),
        notes,
    )
    if args.json:
        import json

        doc = merged.to_dict()
        doc["source"] = args.source or args.store
        doc["read"] = [
            {"path": p, "format": f, "estimator": r.estimator, "params": r.params, "reproduces": w}
            for p, f, w, r in results
        ]
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        _print_text(merged, results, args)
    return 0 if merged.ok else EXIT_DISAGREE


def _recomputed(v) -> str:
    return f"{v.estimator} " + " ".join(f"{k}={val}" for k, val in v.params.items())


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _print_text(v, results, args) -> None:
    fmts = ", ".join(dict.fromkeys(f for _, f, _, _ in results))
    print(f"verify {term(args.source or args.store)}: read as {fmts} ({len(results)} source(s))")
    for line in dict.fromkeys(_recomputed(r) for *_, r in results).keys():
        print(f"  recomputed {term(line)}")
    for what in dict.fromkeys(w for _, _, w, _ in results):
        print(f"  reproduces: {term(what)}")
    print(f"  agreement rule: |logged - recomputed| <= {v.atol:g} + {v.rtol:g}*|recomputed|")
    print("per train step:")
    print(f"  {'run_id':<20} {'step':>5} {'groups':>6} {'disagree':>8} {'max|d|':>9} {'mean|d|':>9}")
    steps = v.by_train_step()
    steps = steps.sort_values("disagreeing_groups", ascending=False, kind="stable").head(args.rows)
    if len(steps) < len(v.by_train_step()):
        print(f"  ({len(steps)} of {len(v.by_train_step())} train steps, disagreeing first)")
    for r in steps.itertuples():
        print(
            f"  {term(str(r.run_id))[:20]:<20} {r.train_step:>5} {r.groups:>6} {r.disagreeing_groups:>8} "
            f"{_fmt(r.max_abs):>9} {_fmt(r.mean_abs):>9}"
        )
    shown = pd_concat_bad_first(v.groups).head(args.rows)
    print(f"per group (disagreeing first; {len(shown)} of {len(v.groups)}):")
    for r in shown.itertuples():
        mark = "ok  " if r.ok else "DIFF"
        print(
            f"  {mark} {term(r.label)}  steps {r.steps}  max|d| {_fmt(r.max_abs)}  mean|d| {_fmt(r.mean_abs)}"
        )
        if not r.ok:
            for w in r.worst:
                print(
                    f"       {term(w['traj_id'])} step {w['step_idx']}: logged {w['logged']:.6g}, "
                    f"recomputed {w['recomputed']:.6g} (|d| {_fmt(w['abs_diff'])})"
                )
    for n in v.notes:
        print(f"note: {term(n)}")
    if v.skipped_steps:
        print(f"note: {v.skipped_steps} step(s) carry no logged advantage; not compared")
    bad = v.bad
    if len(bad):
        names = ", ".join(term(x) for x in bad["label"])
        print(f"{len(bad)} of {len(v.groups)} group(s) disagree: {names}")
    else:
        print(f"all {len(v.groups)} group(s) agree")


def pd_concat_bad_first(groups):
    """Disagreeing groups first (worst first), then the others in their order."""
    import pandas as pd

    bad = groups[~groups["ok"]].sort_values("max_abs", ascending=False, kind="stable")
    return pd.concat([bad, groups[groups["ok"]]])
