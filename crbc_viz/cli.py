"""Command line: ``python -m crbc_viz`` (also installed as ``crbc-viz``).

    crbc-viz score LOG --estimator crbc [--estimator NAME ...] [--param key=value ...]
                       [--device auto|cpu|cuda] [--backend auto|numpy|torch] --out FILE
    crbc-viz info LOG [--json]
    crbc-viz estimators [--json]
    crbc-viz ingest LOG... --store DIR [--format auto|verl-agent|rllm|roll|trl|verl|canonical]
    crbc-viz info|score --store DIR [--group ID] [--run R] [--train-step N] [--env E] [--success ...]
    crbc-viz trends --store DIR [--json];  crbc-viz export --store DIR --estimator crbc --out F

Bad input prints one clear message per problem and exits with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys

from .errors import CrbcVizError
from .safetext import term

__all__ = ["main"]

log = logging.getLogger("crbc_viz")


def _parse_params(items: list[str], names: list[str]) -> dict[str, dict[str, str]]:
    """``key=value`` applies to every estimator; ``name.key=value`` to one of ``names``."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--param {item!r}: expected key=value or estimator.key=value")
        key, value = item.split("=", 1)
        est, _, name = key.rpartition(".")
        out.setdefault(est or "*", {})[name.strip()] = value
    unknown_targets = [k for k in out if k != "*" and k not in names]
    if unknown_targets:
        raise ValueError(f"--param for estimator(s) not selected: {', '.join(unknown_targets)}")
    return out


def _cmd_score(args) -> int:
    from . import estimators, load_rollouts

    names = args.estimator or ["crbc"]
    for n in names:
        estimators.get(n)  # unknown names fail before loading
    params = _parse_params(args.param, names)
    check_out(args)
    batch = load_rollouts(args.log, lenient=args.lenient)
    _report_load(batch)
    return score_and_write(batch, names, params, args)


def check_out(args) -> None:
    """Refuse ``--out`` when it is the input log, inside the input store or any log store
    (before anything is loaded or scored)."""
    from .io.write import check_output

    check_output(args.out, [getattr(args, "log", None), getattr(args, "store", None)])


def score_and_write(batch, names: list[str], params: dict, args) -> int:
    """Score ``batch`` with ``names``, log diagnostics, write ``args.out`` atomically."""
    from .api import score_frame
    from .graph import build_graph
    from .io.write import write_frame

    out, results = score_frame(build_graph(batch), names, params, device=args.device,
                               backend=args.backend)
    for n, result in results.items():
        for k, v in result.diagnostics.items():
            log.info("%s: %s = %s", n, k, v)
    write_frame(out, args.out)
    print(f"wrote {len(out)} rows ({batch.num_steps} steps x {len(names)} estimator(s)) to {args.out}")
    return 0


def _report_load(batch) -> None:
    for w in batch.warnings:
        print(f"warning: {term(w)}", file=sys.stderr)
    if batch.skipped:
        print(f"lenient: skipped {len(batch.skipped)} problem row(s):", file=sys.stderr)
        for s in batch.skipped[:50]:
            print(f"  {term(s)}", file=sys.stderr)


def _cmd_info(args) -> int:
    from . import load_rollouts
    from .graph import build_graph
    from .summary import batch_summary

    batch = load_rollouts(args.log, lenient=args.lenient)
    _report_load(batch)
    info = batch_summary(build_graph(batch))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    rpg = info["rollouts_per_group"]
    rows = [
        ("file", info["source"]),
        ("groups", info["groups"]),
        ("trajectories", info["trajectories"]),
        ("rollouts per group", f"{rpg.get('min')}–{rpg.get('max')} (median {rpg.get('median')})"),
        ("steps", info["steps"]),
        ("anchors", info["anchors"]),
        ("success rate", f"{info['success_rate']:.3f}"),
        ("truncated", truncated_text(info)),
        ("steps at shared anchors", f"{info['shared_step_fraction']:.3f}"),
        ("singleton anchors", f"{info['singleton_anchor_fraction']:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {term(v)}")
    return 0


def truncated_text(info: dict) -> str:
    """The "truncated" line of ``info``: count, share and explicit successes kept."""
    if not info.get("truncation_known", True):
        return "unknown (no done field logged: every trajectory is taken as ended)"
    out = f"{info['truncated']} of {info['trajectories']} ({info['truncated_rate']:.3f})"
    if info.get("truncated_success"):
        out += f", {info['truncated_success']} with a logged success=true kept as success"
    return out


def _fmt_default(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def _cmd_estimators(args) -> int:
    from .estimators import param_infos, specs

    items = []
    for s in specs():
        items.append({
            "name": s.name, "title": s.title, "paper": s.paper, "equation": s.equation,
            "section": s.section, "requires": list(s.requires), "torch": s.torch_fn is not None,
            "parameters": [{"name": p.name, "type": p.type.__name__, "default": _fmt_default(p.default),
                            "help": p.help, "low": p.low, "high": p.high,
                            "choices": list(p.choices) if p.choices else None}
                           for p in param_infos(s.params_cls)],
        })
    if args.json:
        print(json.dumps(items, indent=2, ensure_ascii=False))
        return 0
    for it in items:
        params = ", ".join(f"{p['name']}={p['default']}" for p in it["parameters"])
        print(f"{it['name']:<14} {it['title']}  [{it['section']}]")
        print(f"{'':<14} {params}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crbc-viz", description="Step-level credit over merged rollout groups.")
    p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics (closure residual, ...)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="score a rollout log with one or more estimators")
    s.add_argument("log")
    s.add_argument("--estimator", "-e", action="append", help="registry name (repeatable; default crbc)")
    s.add_argument("--param", "-p", action="append", default=[],
                   help="key=value for every estimator that has it, or estimator.key=value")
    s.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    s.add_argument("--backend", default="auto", choices=("auto", "numpy", "torch", "numba"))
    s.add_argument("--out", "-o", required=True, help="output .parquet, .csv or .jsonl")
    s.add_argument("--lenient", action="store_true", help="skip bad rows and report them")
    s.set_defaults(func=_cmd_score)
    i = sub.add_parser("info", help="summarise a rollout log")
    i.add_argument("log")
    i.add_argument("--json", action="store_true")
    i.add_argument("--lenient", action="store_true", help="skip bad rows and report them")
    i.set_defaults(func=_cmd_info)
    e = sub.add_parser("estimators", help="list the registered estimators")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_cmd_estimators)
    from .store.cli import add_store_commands
    add_store_commands(sub)  # ingest / trends / export; --store and filters on info and score
    return p


def _one_line(exc: BaseException) -> str:
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


def main(argv: list[str] | None = None) -> int:
    from .estimators import MissingSignalError, UnknownEstimatorError
    from .io import LoadError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except LoadError as exc:
        print(f"error: {term(exc, newlines=True)}", file=sys.stderr)
    except (CrbcVizError, UnknownEstimatorError, MissingSignalError, ValueError, RuntimeError,
            OSError, RecursionError, MemoryError) as exc:
        print(f"error: {term(_one_line(exc))}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 2
