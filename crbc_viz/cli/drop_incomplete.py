"""``crbc-viz drop-incomplete --store DIR``: remove sources whose ingest was interrupted."""

from __future__ import annotations

from ..safetext import term
from ._common import add_store_arguments

HELP = "remove sources whose ingest was interrupted"


def add_arguments(p) -> None:
    add_store_arguments(p, required=True, filters=())


def run(args) -> int:
    from ..store import drop_incomplete

    dropped = drop_incomplete(args.store)
    for p in dropped:
        print(f"dropped  {term(p)}")
    print(f"{len(dropped)} incomplete source(s) removed from {term(args.store)}")
    return 0
