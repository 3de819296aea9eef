"""Anchor rules: which part of an anchor observation decides its identity (README, "Anchor rules").

Every graph estimator is only as good as its anchors: two observations of one environment state
that differ in an irrelevant detail (a session id in the text, a timestamp field in a JSON
object) never merge under the exact rule, and the credit of their steps is that of a step group
of one. A rule rewrites the observation before it is canonicalised and hashed
(`crbc_viz.io.anchors`); the raw observation stays in the batch for display.

- ``exact``: the observation as logged (the default; `crbc_viz.io.anchors`).
- fields (``--anchor-fields board,inventory``): of an object anchor (a dict, or a string that
  is JSON object text) keep only these keys; a dotted path (``state.board``) reaches into
  nested objects. A field an anchor lacks is left out (absent is not ``null``). Anchors that are
  not objects are unchanged.
- drop (``--anchor-drop REGEX``, repeatable): every match of each pattern, in the order given,
  is removed from a text anchor (a string) before it is canonicalised. Other anchors are
  unchanged.

Both may be given; the fields apply first. A rule only changes keys computed from an
observation: a precomputed ``anchor_key`` / ``state_hash`` is kept as logged. Keys are scoped
to a group by the graph layer, so no rule merges anchors of two groups.

Cost of a pattern: Python's ``re`` has no timeout. A pattern is refused when it is longer than
`MAX_PATTERN` characters or nests one unbounded repetition inside another (``(a+)+``,
``(\\w*)*``), the shape of catastrophic backtracking; other slow shapes (overlapping
alternatives under a repetition, ``(a|a)*``) are not detected, and their cost is bounded only
by the anchor's length (the loader's limits on a line). Each distinct anchor string is
rewritten once.

The rule in force is a context variable (`using`), set by the command line around loading, so
every path that keys anchors (the schema loader, the columnar lane, the importers, the store's
ingest and its re-keying at read time, the integrations) calls the one function `rule_hash64`.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from dataclasses import dataclass, field

from ..errors import CrbcVizError
from .anchors import anchor_hash64, anchor_key, parse_json_text

__all__ = [
    "AnchorRule",
    "AnchorRuleError",
    "EXACT",
    "MAX_PATTERN",
    "RULE_NAMES",
    "active",
    "make_rule",
    "rule_hash64",
    "using",
]

#: The longest ``--anchor-drop`` pattern accepted, in characters.
MAX_PATTERN = 200
RULE_NAMES = ("exact", "fields", "drop")


class AnchorRuleError(CrbcVizError, ValueError):
    """An anchor rule that cannot be applied (a bad pattern, an empty field list, a field no
    anchor has): exit status 2 with one line."""


_MISSING = object()


@dataclass(eq=False)
class AnchorRule:
    """An anchor rule: ``fields`` (dotted paths kept of an object anchor; empty: all) and
    ``drop`` (compiled patterns removed from text anchors). ``found`` counts, per field, the
    object anchors that had it (for the "missing in every anchor" check)."""

    fields: tuple[str, ...] = ()
    drop: tuple[re.Pattern, ...] = ()
    found: dict = field(default_factory=dict)
    objects: int = 0

    @property
    def exact(self) -> bool:
        return not self.fields and not self.drop

    def describe(self) -> str:
        if self.exact:
            return "exact"
        parts = []
        if self.fields:
            parts.append("fields " + ",".join(self.fields))
        for p in self.drop:
            parts.append(f"drop /{p.pattern}/")
        return "; ".join(parts)

    def apply(self, value):
        """The observation the rule keys ``value`` by."""
        if self.fields:
            obj = value
            if isinstance(value, str):
                obj = parse_json_text(value)
            if isinstance(obj, dict):
                return self._select(obj)
        if self.drop and isinstance(value, str):
            for p in self.drop:
                value = p.sub("", value)
        return value

    def _select(self, obj: dict) -> dict:
        self.objects += 1
        out = {}
        for path in self.fields:
            v = obj
            for part in path.split("."):
                v = v.get(part, _MISSING) if isinstance(v, dict) else _MISSING
                if v is _MISSING:
                    break
            if v is not _MISSING:
                out[path] = v
                self.found[path] = self.found.get(path, 0) + 1
        return out

    def check_found(self, where: str = "") -> None:
        """Raise when a field is missing in every object anchor seen (a typo would otherwise
        merge every anchor into one)."""
        if not self.fields:
            return
        missing = [f for f in self.fields if not self.found.get(f)]
        if missing:
            seen = f"{self.objects} object anchor(s)" if self.objects else "no object anchor"
            raise AnchorRuleError(
                f"{where}--anchor-fields: {', '.join(missing)} missing in every anchor ({seen} read)"
            )


EXACT = AnchorRule()

_current: contextvars.ContextVar[AnchorRule] = contextvars.ContextVar("crbc_viz_anchor_rule", default=EXACT)


def active() -> AnchorRule:
    """The anchor rule in force (`EXACT` unless inside `using`)."""
    return _current.get()


@contextlib.contextmanager
def using(rule: AnchorRule | None):
    """Key anchors by ``rule`` inside the block (None: exact)."""
    token = _current.set(rule or EXACT)
    try:
        yield rule or EXACT
    finally:
        _current.reset(token)


def rule_hash64(value) -> int:
    """The 64-bit anchor hash of an observation under the rule in force."""
    rule = _current.get()
    return anchor_hash64(value if rule.exact else rule.apply(value))


def exact_key(value) -> str:
    """The exact rule's key of an observation (`crbc_viz.io.anchors.anchor_key`)."""
    return anchor_key(value)


def _nested_repeat(pattern: str) -> bool:
    """Whether the pattern nests an unbounded repetition inside another one."""
    import re._parser as sre  # the stdlib's own parser of the pattern it compiles

    def walk(items, inside: bool) -> bool:
        for op, av in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                lo, hi, sub = av
                unbounded = hi is sre.MAXREPEAT or hi > 1000
                if unbounded and inside:
                    return True
                if walk(sub, inside or unbounded):
                    return True
            elif name == "SUBPATTERN":
                if walk(av[-1], inside):
                    return True
            elif name == "BRANCH":
                if any(walk(b, inside) for b in av[1]):
                    return True
            elif name in ("ASSERT", "ASSERT_NOT"):
                if walk(av[1], inside):
                    return True
        return False

    return walk(sre.parse(pattern), False)


def _compile(pattern: str) -> re.Pattern:
    if not pattern:
        raise AnchorRuleError("--anchor-drop: an empty pattern")
    if len(pattern) > MAX_PATTERN:
        raise AnchorRuleError(
            f"--anchor-drop: pattern of {len(pattern)} characters; at most {MAX_PATTERN} are accepted"
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise AnchorRuleError(f"--anchor-drop {pattern!r}: not a valid regular expression ({exc})") from None
    if _nested_repeat(pattern):
        raise AnchorRuleError(
            f"--anchor-drop {pattern!r}: a repetition inside a repetition can take exponential "
            f"time; rewrite it without nesting (e.g. (ab)+ rather than (a+b*)+)"
        )
    if compiled.fullmatch(""):
        raise AnchorRuleError(f"--anchor-drop {pattern!r}: matches the empty text; it would remove nothing")
    return compiled


def make_rule(
    name: str | None = None, fields: str | None = None, drop: list[str] | None = None
) -> AnchorRule:
    """The rule of the command-line options: ``name`` (one of `RULE_NAMES`, or None: implied by
    the other options), ``fields`` (comma-separated dotted paths), ``drop`` (patterns)."""
    if name is not None and name not in RULE_NAMES:
        raise AnchorRuleError(f"--anchor-rule {name!r}: expected one of {', '.join(RULE_NAMES)}")
    paths: tuple[str, ...] = ()
    if fields is not None:
        paths = tuple(dict.fromkeys(f.strip() for f in fields.split(",") if f.strip()))
        if not paths:
            raise AnchorRuleError("--anchor-fields: an empty field list")
        bad = [p for p in paths if any(not part for part in p.split("."))]
        if bad:
            raise AnchorRuleError(f"--anchor-fields: {bad[0]!r} is not a dotted path (an empty part)")
    patterns = tuple(_compile(p) for p in drop or [])
    if name == "exact" and (paths or patterns):
        raise AnchorRuleError("--anchor-rule exact: not with --anchor-fields or --anchor-drop")
    if name == "fields" and not paths:
        raise AnchorRuleError("--anchor-rule fields: give the fields with --anchor-fields a,b")
    if name == "drop" and not patterns:
        raise AnchorRuleError("--anchor-rule drop: give a pattern with --anchor-drop REGEX")
    return AnchorRule(fields=paths, drop=patterns)


def rekey(obs, keys, hashes):
    """(hashes, keys) of steps already keyed under the exact rule, re-keyed under the rule in
    force: a step whose key is the exact key of its observation ``obs`` gets the rule's key;
    a precomputed key (one that is not its observation's exact key) and a step without an
    observation keep theirs. ``obs``, ``keys``: object arrays; ``hashes``: uint64 (copied)."""
    import numpy as np
    import pandas as pd

    rule = _current.get()
    hashes = np.array(hashes, dtype=np.uint64, copy=True)
    keys = np.array(keys, dtype=object, copy=True)
    if rule.exact:
        return hashes, keys
    cache: dict = {}
    for i, o in enumerate(obs):
        if o is None or o is pd.NA or (isinstance(o, float) and o != o):
            continue
        ck = o if isinstance(o, str) else None
        got = cache.get(ck) if ck is not None else None
        if got is None:
            got = (anchor_key(o), rule_hash64(o))
            if ck is not None:
                cache[ck] = got
        if keys[i] == got[0]:
            hashes[i] = got[1]
            keys[i] = f"{got[1]:016x}"
    return hashes, keys
