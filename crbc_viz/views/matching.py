"""The matching diagnostics as text for the app's Data and Graph pages (pure: the counts come
from `crbc_viz.analysis.matching`)."""

from __future__ import annotations

__all__ = ["matching_line", "degenerate_line", "all_grey", "COUNT_TITLES"]

#: The importer's per-file counts (`crbc_viz.io.importers._common.COUNTS`) as the pages say them.
COUNT_TITLES = {
    "copies_dropped": "padding copies dropped from the file",
    "copies_suspected": "lines of the file that may be padding copies (kept)",
}


def matching_line(c: dict) -> str:
    """One line of counts (a group's row or a file's sums of `crbc_viz.analysis.matching`):
    steps at shared anchors, singleton anchors, steps whose action was inferred, truncated
    rollouts, and the padding-copy counts when the importer reported them."""
    S, N = int(c["steps"]), int(c["anchors"])
    parts = [
        f"{int(c['shared_steps'])} of {S} steps at shared anchors",
        f"{int(c['singleton_anchors'])} of {N} anchors visited once (step groups of one: credit 0)",
        f"{int(c['actions_inferred'])} of {S} steps' actions inferred (no action logged: the transition)",
        f"{int(c['truncated'])} of {int(c['rollouts'])} rollouts truncated",
    ]
    for k, title in COUNT_TITLES.items():
        if k in c and c[k] is not None:
            parts.append(f"{int(c[k])} {title}")
    return " · ".join(parts)


def degenerate_line(by_reason: dict) -> str | None:
    """How many groups have degenerate credit, by reason (None when none has)."""
    what = {
        "no_success": "no success",
        "no_shared_anchor": "no shared anchor",
        "one_action_everywhere": "one action at every anchor",
        "no_failure": "no failure",
    }
    hit = [(what.get(r, r), int(n)) for r, n in by_reason.items() if n]
    if not hit:
        return None
    total = sum(n for _, n in hit)
    return f"{total} group(s) with degenerate credit: " + ", ".join(f"{n} {w}" for w, n in hit)


def all_grey(result) -> bool:
    """True when ``result`` (a `CreditResult`; a refusal's text is not) gives every step a
    credit of exactly 0: the graph it would colour is all grey. The data's reason (a group's
    ``sentence`` in `crbc_viz.analysis.matching`) is then said instead; an estimator with credit
    of its own on such a group (GRPO with one action at every anchor, ABC's judge) is drawn."""
    import numpy as np

    credit = getattr(result, "credit", None)
    return credit is not None and len(credit) > 0 and not np.any(np.asarray(credit))
