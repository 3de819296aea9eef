"""What the commands share: the data source (a ``LOG`` file, or ``--store DIR`` with filters),
declared once; ``--param`` parsing; the guarded ``--out``; the load report; and the one place
that turns an error into exit status 2 with one line on stderr.

Only the standard library is imported here at module level, so ``crbc-viz --help`` and every
command's start stay light; each helper imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import CrbcVizError
from ..safetext import term

log = logging.getLogger("crbc_viz")

SUCCESS_CHOICES = ("yes", "no", "mixed")
BACKEND_CHOICES = ("auto", "numpy", "torch", "numba")
DEVICE_CHOICES = ("auto", "cpu", "cuda")
LENIENT_HELP = "skip bad rows and report them"


class UsageError(CrbcVizError, ValueError):
    """A command line that cannot be run as given (a malformed ``--param``, a filter without
    ``--store``, neither a log nor a store): exit status 2 like every `CrbcVizError`."""


# -- the data source ----------------------------------------------------------------------------
def add_source_arguments(p: argparse.ArgumentParser, *, lenient: bool = True) -> None:
    """``LOG`` (optional) or ``--store DIR`` and its filters: a command that reads rollouts
    declares its source with this one call."""
    p.add_argument("log", nargs="?", default=None, help="a rollout log file (or give --store DIR)")
    if lenient:
        p.add_argument("--lenient", action="store_true", help=LENIENT_HELP)
    add_map_arguments(p)
    add_store_arguments(p)
    add_anchor_rule_arguments(p)


def add_anchor_rule_arguments(p: argparse.ArgumentParser) -> None:
    """``--anchor-rule``, ``--anchor-fields``, ``--anchor-drop``: which part of an anchor
    observation decides its identity (`crbc_viz.io.anchor_rules`; README: Anchor rules)."""
    g = p.add_argument_group("anchor rules: which part of an anchor decides its identity (README)")
    g.add_argument(
        "--anchor-rule",
        dest="anchor_rule",
        metavar="RULE",
        help="exact (as logged; the default), fields (--anchor-fields), drop (--anchor-drop), "
        "rtmc (the set of coarsened actions taken so far), similar (difflib ratio, GiGPO) or "
        "tfidf (TF-IDF cosine, ProxMO)",
    )
    g.add_argument(
        "--anchor-fields",
        dest="anchor_fields",
        metavar="A,B",
        help="key object anchors by these fields only (dotted paths reach into nested objects)",
    )
    g.add_argument(
        "--anchor-drop",
        dest="anchor_drop",
        action="append",
        default=None,
        metavar="REGEX",
        help="remove every match from text anchors before hashing (repeatable; at most 200 "
        "characters, no repetition nested in a repetition)",
    )
    g.add_argument(
        "--anchor-threshold",
        dest="anchor_threshold",
        type=float,
        metavar="T",
        help="similar / tfidf: the similarity two anchors need to merge (default 0.95 / 0.9)",
    )
    g.add_argument(
        "--anchor-cluster",
        dest="anchor_cluster",
        metavar="HOW",
        help="similar / tfidf: greedy (join the first similar representative; GiGPO's, the "
        "default) or components (chains of similar anchors merge)",
    )
    g.add_argument(
        "--anchor-scope",
        dest="anchor_scope",
        metavar="SCOPE",
        help="similar / tfidf: group (compare anchors within each group; the default) or batch "
        "(across groups; warns naming the tasks whose anchors share a key)",
    )


def anchor_rule(args):
    """The `AnchorRule` of the command line (`crbc_viz.io.anchor_rules.EXACT` when none is
    given); a bad rule raises `AnchorRuleError` (exit status 2)."""
    name, fields, drop = (getattr(args, k, None) for k in ("anchor_rule", "anchor_fields", "anchor_drop"))
    extra = {k: getattr(args, "anchor_" + k, None) for k in ("threshold", "scope", "cluster")}
    from ..io.anchor_rules import EXACT, make_rule

    if name is None and fields is None and not drop and all(v is None for v in extra.values()):
        return EXACT
    return make_rule(name, fields, drop, **extra)


def add_map_arguments(p: argparse.ArgumentParser) -> None:
    """``--map TARGET=PATH`` (repeatable) and ``--map-file FILE``: read a log of any layout
    through a field map (`crbc_viz.io.importers.fieldmap`)."""
    g = p.add_argument_group("reading any log through a field map (README: Field maps)")
    g.add_argument(
        "--map",
        action="append",
        default=None,
        metavar="TARGET=PATH",
        help="where a canonical field sits in each record: a dotted path (reward=info.r, "
        "traj_id=^.episode inside a steps=turns list, step_idx=@order); repeatable",
    )
    g.add_argument(
        "--map-file",
        dest="map_file",
        metavar="FILE",
        help="the same entries in a TOML file (--map entries override it)",
    )


def field_map(args, *, into_store: bool = False):
    """The `FieldMap` of ``--map`` / ``--map-file`` (None when neither is given); a map with
    ``--store`` as the source (``into_store``: the store is ``ingest``'s output) or with another
    ``--format`` is a usage error."""
    items, file = getattr(args, "map", None), getattr(args, "map_file", None)
    if not items and not file:
        return None  # before the import: a clean log's lane loads no pandas
    from ..io.importers.fieldmap import NAME, map_from_options

    if getattr(args, "store", None) and not into_store:
        raise UsageError(
            "--map / --map-file: read a log file through a field map; a store holds canonical rows"
        )
    fmt = getattr(args, "format", "auto")
    if fmt not in ("auto", NAME):
        raise UsageError(f"--map / --map-file read the log as {NAME}; not with --format {fmt}")
    return map_from_options(items, file)


_FILTERS = ("group", "run", "train_step", "env", "success")


def add_store_arguments(
    p: argparse.ArgumentParser,
    *,
    required: bool = False,
    filters: tuple[str, ...] = _FILTERS,
    helps: dict | None = None,
) -> None:
    """``--store DIR`` (required for store-only commands) and the store filters a command takes
    (``group``, ``run``, ``train_step``, ``env``, ``success``; ``helps`` rewords one)."""
    h = {
        "group": "one group: its id, or run/train_step/group_id",
        "run": "only this run_id",
        "train_step": "only this training step",
        "env": "only groups of this env_name",
        "success": "only groups with a success (yes), without one (no), or with both (mixed)",
        **(helps or {}),
    }
    p.add_argument(
        "--store",
        metavar="DIR",
        required=required,
        help=None if required else "read from a log store instead of a file",
    )
    if "group" in filters:
        p.add_argument("--group", metavar="ID", help=h["group"])
    if "run" in filters:
        p.add_argument("--run", help=h["run"])
    if "train_step" in filters:
        p.add_argument("--train-step", type=int, dest="train_step", help=h["train_step"])
    if "env" in filters:
        p.add_argument("--env", help=h["env"])
    if "success" in filters:
        p.add_argument("--success", choices=SUCCESS_CHOICES, help=h["success"])


def filters(args) -> dict:
    """The store filters given on the command line (None where not given)."""
    return {
        "run": args.run,
        "train_step": args.train_step,
        "env": args.env,
        "success": args.success,
        "group": getattr(args, "group", None),
    }


def check_source(args) -> None:
    """Exactly one source: a log, or a store (filters only with a store)."""
    if args.store:
        return
    if args.log is None:
        raise UsageError("give a log file, or --store DIR")
    given = [k for k, v in filters(args).items() if v is not None]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"{flags}: filter(s) of a log store; give --store DIR (a log file is read whole)")


def open_store(args):
    """The `LogStore` of ``--store``, warning about sources whose ingest was interrupted."""
    from ..store import LogStore, incomplete_sources

    field_map(args)  # a map reads a log file, not a store
    st = LogStore(args.store)
    for m in incomplete_sources(st):
        done = sum(int(p["rows"]) for p in m.get("parts", []))
        print(
            f"warning: source {term(m.get('path', m['digest']))} is incomplete (its ingest was "
            f"interrupted: {done:,} of {int(m.get('rows', 0)):,} steps committed); resume it with "
            f"`crbc-viz ingest {term(m.get('path', 'LOG'))} --store {term(args.store)}` or remove "
            f"it with `crbc-viz drop-incomplete --store {term(args.store)}`",
            file=sys.stderr,
        )
    return st


def load_batch(args, *, anchor_obs: bool = False, store=None, rule=None, quiet: bool = False):
    """The `RolloutBatch` the command line names: the log file, or the store's filtered groups,
    its anchors keyed by ``rule`` (default: the command line's ``--anchor-*`` rule)."""
    from ..io.anchor_rules import using

    rule = anchor_rule(args) if rule is None else rule
    with using(rule):
        batch = _load_batch(args, anchor_obs=anchor_obs, store=store, quiet=quiet)
    rule.check_found()
    if rule.merge is not None:
        from ..anchor_merge import merge_anchors

        batch = merge_anchors(batch, rule)
    return batch


def _load_batch(args, *, anchor_obs: bool = False, store=None, quiet: bool = False):
    check_source(args)
    fm = field_map(args)
    if args.store:
        st = store if store is not None else open_store(args)
        return st.load_batch(**filters(args), anchor_obs=anchor_obs)
    if fm is not None:
        batch = _load_mapped(args, fm)
    else:
        from ..io import load_rollouts

        batch = load_rollouts(args.log, lenient=args.lenient)
    if not quiet:
        report_load(batch)
    return batch


def _load_mapped(args, fm):
    """The batch of ``args.log`` read through the field map ``fm``."""
    from ..errors import LoadError
    from ..io.columnar import batch_of_import
    from ..io.importers import read_source
    from ..io.importers.fieldmap import NAME, relabel

    imp = read_source(args.log, NAME, field_map=fm)
    try:
        return batch_of_import(imp.raw, lenient=args.lenient)
    except LoadError as exc:
        raise relabel(exc, imp.labels) from None


def report_load(batch) -> None:
    """A file's warnings and (``--lenient``) skipped rows, on stderr."""
    for w in batch.warnings:
        print(f"warning: {term(w)}", file=sys.stderr)
    if batch.skipped:
        print(f"lenient: skipped {len(batch.skipped)} problem row(s):", file=sys.stderr)
        for s in batch.skipped[:50]:
            print(f"  {term(s)}", file=sys.stderr)


# -- estimators, parameters, output -------------------------------------------------------------
def add_param_argument(p: argparse.ArgumentParser, *, help: bool = True) -> None:
    p.add_argument(
        "--param",
        "-p",
        action="append",
        default=[],
        help="key=value for every estimator that has it, or estimator.key=value" if help else None,
    )


def parse_params(items: list[str], names: list[str]) -> dict[str, dict[str, str]]:
    """``key=value`` applies to every estimator; ``name.key=value`` to one of ``names``."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--param {item!r}: expected key=value or estimator.key=value")
        key, value = item.split("=", 1)
        est, _, name = key.rpartition(".")
        out.setdefault(est or "*", {})[name.strip()] = value
    unknown_targets = [k for k in out if k != "*" and k not in names]
    if unknown_targets:
        raise UsageError(f"--param for estimator(s) not selected: {', '.join(unknown_targets)}")
    return out


def check_estimators(names: list[str]) -> None:
    """Unknown names fail before anything is loaded."""
    from ..estimators import get

    for n in names:
        get(n)


def check_out(args) -> None:
    """Refuse ``--out`` when it is the input log, inside the input store or any log store
    (before anything is loaded or scored)."""
    from ..io.write import check_output

    check_output(args.out, [getattr(args, "log", None), getattr(args, "store", None)])


# -- errors -------------------------------------------------------------------------------------
def one_line(exc: BaseException) -> str:
    """An error as one bounded line (an OSError with its path, a long value cut)."""
    if isinstance(exc, RecursionError):
        return "input nested too deeply to process (maximum recursion depth exceeded)"
    if isinstance(exc, MemoryError):
        return "out of memory; lower the input size or raise the limits (CRBC_VIZ_MAX_*)"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, CrbcVizError) and exc.filename:
        text = f"{exc.filename}: {exc.strerror or text}"
    text = " ".join(text.split("\n"))
    return text if len(text) <= 2000 else text[:1000] + " … " + text[-500:]


def error_text(exc: BaseException) -> str:
    """An error as terminal-safe text (`crbc_viz.safetext.term`): a `LoadError` one line per
    problem, each escaped on its own (a newline in a file name starts no line of its own); any
    other error one line (`one_line`)."""
    from types import SimpleNamespace

    from ..errors import LoadError, Problem

    if not isinstance(exc, LoadError):
        return term(one_line(exc))
    safe = [
        Problem(
            term(p.path), p.line, None if p.field is None else term(p.field), term(p.message), term(p.where)
        )
        for p in exc.problems
    ]
    return type(exc).render(SimpleNamespace(problems=safe, total=exc.total))


def run_guarded(func, args) -> int:
    """Run ``func(args)``; every `CrbcVizError` (a load error with its problem list, a store, an
    estimator input, an unavailable backend ...), an OS error and input too large or deep to
    process become exit status 2 with the message on stderr (`error_text`); Ctrl-C is 130."""
    try:
        return func(args)
    except BrokenPipeError:
        return 0
    except (CrbcVizError, OSError, RecursionError, MemoryError) as exc:
        print(f"error: {error_text(exc)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 2
