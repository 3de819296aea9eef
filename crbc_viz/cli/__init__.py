"""Command line: ``python -m crbc_viz`` (also installed as ``crbc-viz``).

    crbc-viz score LOG --estimator crbc [--estimator NAME ...] [--param key=value ...]
                       [--device auto|cpu|cuda] [--backend auto|numpy|torch|numba] --out FILE
    crbc-viz info LOG [--json]
    crbc-viz estimators [--json]
    crbc-viz ingest LOG... --store DIR [--format auto|canonical|verl-agent|rllm|roll|ms-swift|trl|verl]
    crbc-viz info|score --store DIR [--group ID] [--run R] [--train-step N] [--env E] [--success ...]
    crbc-viz trends --store DIR [--json];  crbc-viz export --store DIR --estimator crbc --out F
    crbc-viz drop-incomplete --store DIR
    crbc-viz html LOG [--group G] [-e NAME ...] [--param key=value ...] -o page.html
    crbc-viz view PATH [--port P] [--host H] [--map T=P | --map-file F]  (the app on a log, a folder of dumps or a store)
    crbc-viz verify SOURCE [-e NAME] [--param key=value ...] [--json]   (docs/verify.md)

`COMMANDS` is the table of commands: each is a module with ``HELP`` (its one-line summary),
``add_arguments(parser)`` and ``run(args) -> int``; a new command adds a row here and a module
beside this one. Only the chosen command's arguments are built (and its heavy imports happen in
its ``run``), so ``--help`` and ``info`` start without loading what other commands need.

Bad input prints one clear message per problem and exits with status 2; no traceback
(`_common.run_guarded`). ``score`` with several estimators writes those that ran when some
refuse the input (one line each on stderr) and exits with status 3 (`score.EXIT_REFUSED`).
"""

from __future__ import annotations

import argparse
import importlib
import logging

__all__ = ["COMMANDS", "build_parser", "main", "console"]

#: command name -> module (``HELP``, ``add_arguments(parser)``, ``run(args) -> int``).
COMMANDS: dict[str, str] = {
    "score": "crbc_viz.cli.score",
    "info": "crbc_viz.cli.info",
    "estimators": "crbc_viz.cli.estimators",
    "ingest": "crbc_viz.cli.ingest",
    "trends": "crbc_viz.cli.trends",
    "drop-incomplete": "crbc_viz.cli.drop_incomplete",
    "export": "crbc_viz.cli.export",
    "html": "crbc_viz.cli.html",
    "view": "crbc_viz.cli.view",
    "verify": "crbc_viz.cli.verify",
}


def _chosen(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


class _Parser(argparse.ArgumentParser):
    """argparse, its error line terminal-safe (it names the arguments as given)."""

    def error(self, message: str):
        from ..safetext import term

        super().error(term(message))


class _TermFormatter(logging.Formatter):
    """Log lines terminal-safe: a logged path or id sends no control character, starts no line."""

    def format(self, record: logging.LogRecord) -> str:
        from ..safetext import term

        return term(super().format(record))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed. With ``argv``, only the arguments of the command it
    names are added (none for ``crbc-viz --help``); without, every command's (for documentation)."""
    p = _Parser(prog="crbc-viz", description="Step-level credit over merged rollout groups.")
    p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics (closure residual, ...)")
    sub = p.add_subparsers(dest="command", required=True)
    chosen = None if argv is None else _chosen(argv)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(module)
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP[:1].upper() + mod.HELP[1:] + ".")
        # -v after the command too (``crbc-viz score -v``); SUPPRESS keeps a -v given before it.
        sp.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        if argv is None or name == chosen:
            mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    import sys

    from ._common import run_guarded

    if argv is None:
        argv = sys.argv[1:]
    args = build_parser(argv).parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_TermFormatter("%(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    return run_guarded(args.func, args)


def console() -> None:
    """The program (``crbc-viz``, ``python -m crbc_viz``): `main`, then exit.

    The objects alive at the end are frozen first (``gc.freeze``), so the interpreter's final
    garbage collection does not walk numpy's and pyarrow's module state: 60-80 ms of a 0.6 s
    ``score`` run on 2 cores. Files are closed and renamed by then; atexit handlers still
    run. Only here, never in `main` (which tests and embedders call in process)."""
    import gc
    import sys

    rc = main()
    gc.freeze()
    sys.exit(rc)
