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

Three rules look at more than one observation; they re-key a loaded batch
(`crbc_viz.anchor_merge`, after the fields / drop rewriting):

- ``rtmc`` (RTMC's state signature, ESTIMATORS.md §7.1): the anchor of step t is the set of
  the trajectory's actions before t, coarsened (every hex run of 4+ characters holding a digit,
  a content hash, is removed) — cumulative and order-invariant.
- ``similar`` (``--anchor-threshold T``, default 0.95): GiGPO's similarity mode,
  ``difflib.SequenceMatcher(None, obs, rep).ratio() >= T`` (`crbc_viz.estimators.gigpo.similar`,
  under its work limit).
- ``tfidf`` (``--anchor-threshold T``, default 0.9): ProxMO's TF-IDF vectors of the anchor
  texts (`crbc_viz.estimators.proxmo.tfidf_vectors`, fitted on the group's steps), cosine >= T.

The similarity rules cluster the anchors (``--anchor-cluster``): ``greedy`` (the default, GiGPO's
own): in the order of their texts (sorted, so the merge does not depend on the order rows
arrive in) an anchor joins the first cluster whose representative (its first member) it is
similar to, else opens one; ``components``: the connected components of
"similar in either direction" (chains merge). Every step of a cluster takes its
representative's key. ``--anchor-scope group`` (the default) clusters each group's anchors on
their own; ``batch`` clusters all anchors of the batch together (an anchor can then join a
cluster through another group's anchors; the graph still keeps a node per group and key).

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
    "CLUSTERS",
    "DEFAULT_THRESHOLD",
    "MAX_PATTERN",
    "MERGE_RULES",
    "RULE_NAMES",
    "SCOPES",
    "active",
    "make_rule",
    "rule_hash64",
    "using",
]

#: The longest ``--anchor-drop`` pattern accepted, in characters.
MAX_PATTERN = 200
RULE_NAMES = ("exact", "fields", "drop", "rtmc", "similar", "tfidf")
#: The rules that re-key a loaded batch (`crbc_viz.anchor_merge`) rather than one observation.
MERGE_RULES = ("rtmc", "similar", "tfidf")
#: The default ``--anchor-threshold`` of each similarity rule (GiGPO's 0.95 for difflib).
DEFAULT_THRESHOLD = {"similar": 0.95, "tfidf": 0.9}
SCOPES = ("group", "batch")
CLUSTERS = ("greedy", "components")


class AnchorRuleError(CrbcVizError, ValueError):
    """An anchor rule that cannot be applied (a bad pattern, an empty field list, a field no
    anchor has): exit status 2 with one line."""


_MISSING = object()


@dataclass(eq=False)
class AnchorRule:
    """An anchor rule: ``fields`` (dotted paths kept of an object anchor; empty: all) and
    ``drop`` (compiled patterns removed from text anchors); ``merge`` (None, or one of
    `MERGE_RULES`: a rule that re-keys the loaded batch, `crbc_viz.anchor_merge`) with its
    ``threshold``, ``scope`` and ``cluster``. ``found`` counts, per field, the object anchors
    that had it (for the "missing in every anchor" check)."""

    fields: tuple[str, ...] = ()
    drop: tuple[re.Pattern, ...] = ()
    found: dict = field(default_factory=dict)
    objects: int = 0
    merge: str | None = None
    threshold: float | None = None
    scope: str = "group"
    cluster: str = "greedy"

    @property
    def exact(self) -> bool:
        return not self.fields and not self.drop and self.merge is None

    @property
    def rewrites(self) -> bool:
        """Whether the rule rewrites each observation before it is hashed (fields, drop)."""
        return bool(self.fields or self.drop)

    @property
    def needs_text(self) -> bool:
        """Whether the rule compares anchor texts (the similarity rules)."""
        return self.merge in ("similar", "tfidf")

    def describe(self) -> str:
        if self.exact:
            return "exact"
        parts = []
        if self.fields:
            parts.append("fields " + ",".join(self.fields))
        for p in self.drop:
            parts.append(f"drop /{p.pattern}/")
        if self.merge == "rtmc":
            parts.append("rtmc signatures")
        elif self.merge is not None:
            parts.append(f"{self.merge} >= {self.threshold:g} ({self.cluster}, scope {self.scope})")
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
    return anchor_hash64(rule.apply(value) if rule.rewrites else value)


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
    name: str | None = None,
    fields: str | None = None,
    drop: list[str] | None = None,
    *,
    threshold: float | None = None,
    scope: str | None = None,
    cluster: str | None = None,
) -> AnchorRule:
    """The rule of the command-line options: ``name`` (one of `RULE_NAMES`, or None: implied by
    the other options), ``fields`` (comma-separated dotted paths), ``drop`` (patterns);
    ``threshold``, ``scope``, ``cluster``: the similarity rules' options (`SCOPES`,
    `CLUSTERS`)."""
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
    merge = name if name in MERGE_RULES else None
    similar = merge in DEFAULT_THRESHOLD
    for opt, v in (
        ("--anchor-threshold", threshold),
        ("--anchor-scope", scope),
        ("--anchor-cluster", cluster),
    ):
        if v is not None and not similar:
            raise AnchorRuleError(f"{opt}: an option of --anchor-rule similar or tfidf")
    if not similar:
        return AnchorRule(fields=paths, drop=patterns, merge=merge)
    return AnchorRule(
        fields=paths,
        drop=patterns,
        merge=merge,
        threshold=_threshold(merge, threshold),
        scope=_choice("--anchor-scope", scope or "group", SCOPES),
        cluster=_choice("--anchor-cluster", cluster or "greedy", CLUSTERS),
    )


def _choice(opt: str, v: str, allowed: tuple[str, ...]) -> str:
    if v not in allowed:
        raise AnchorRuleError(f"{opt} {v!r}: expected one of {', '.join(allowed)}")
    return v


def _threshold(merge: str, t) -> float:
    """The threshold of similarity rule ``merge``: difflib's strictly inside (0, 1) (GiGPO's
    bound), the cosine's in (0, 1]."""
    import math

    if t is None:
        return DEFAULT_THRESHOLD[merge]
    try:
        v = float(t)
    except (TypeError, ValueError):
        v = math.nan
    hi_ok = v < 1.0 if merge == "similar" else v <= 1.0
    if not (v > 0.0 and hi_ok):
        bound = "strictly between 0 and 1" if merge == "similar" else "in (0, 1]"
        raise AnchorRuleError(f"--anchor-threshold {t!r}: the {merge} rule takes a number {bound}")
    return v


def rekey(obs, keys, hashes):
    """(hashes, keys) of steps already keyed under the exact rule, re-keyed under the rule in
    force: a step whose key is the exact key of its observation ``obs`` gets the rule's key;
    a precomputed key (one that is not its observation's exact key) and a step without an
    observation keep theirs. ``obs``, ``keys``: object arrays; ``hashes``: uint64 (copied)."""
    import numpy as np

    from .coerce import is_missing

    rule = _current.get()
    hashes = np.array(hashes, dtype=np.uint64, copy=True)
    keys = np.array(keys, dtype=object, copy=True)
    if not rule.rewrites:
        return hashes, keys
    cache: dict = {}
    for i, o in enumerate(obs):
        if is_missing(o):
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
