"""The Graph page's anchor-rule panel, without Streamlit: the rule a panel's values name, the
content key of a batch keyed by it, and the before / after table of its preview (the numbers
``crbc-viz info --anchor-rule`` prints: one function, `crbc_viz.analysis.matching.rule_report`).
"""

from __future__ import annotations

import json

from ..analysis.matching import cross_task_sentence, rule_preview
from ..io.anchor_rules import DEFAULT_THRESHOLD, RULE_NAMES, AnchorRule, make_rule

__all__ = [
    "RULE_NAMES",
    "RULE_HELP",
    "DEFAULT_THRESHOLD",
    "spec_of",
    "rule_of",
    "ruled_digest",
    "split_digest",
    "preview",
    "preview_table",
    "change_sentence",
    "merged_sentence",
    "cross_task_sentence",
    "cli_options",
]

#: What each rule does, in one line (the panel's help).
RULE_HELP = {
    "exact": "anchors as logged: equal text, equal state",
    "fields": "object anchors keyed by the chosen fields only",
    "drop": "a pattern removed from text anchors (a session id, a clock)",
    "rtmc": "RTMC's state signature: the set of actions taken so far (content hashes dropped)",
    "similar": "GiGPO's similarity mode: difflib ratio at least the threshold",
    "tfidf": "ProxMO's TF-IDF cosine at least the threshold",
}
_SEP = "|anchor-rule:"


def spec_of(
    name: str,
    *,
    fields: str = "",
    drop: str = "",
    threshold: float | None = None,
    scope: str = "group",
    cluster: str = "greedy",
) -> dict | None:
    """`crbc_viz.io.anchor_rules.make_rule`'s keywords for a panel's values (None: exact)."""
    if name == "exact":
        return None
    spec: dict = {"name": name}
    if name == "fields":
        spec["fields"] = fields
    if name == "drop":
        spec["drop"] = [drop]
    if name in DEFAULT_THRESHOLD:
        spec.update(threshold=threshold, scope=scope, cluster=cluster)
    return spec


def rule_of(spec: dict | None) -> AnchorRule:
    """The rule of ``spec`` (raises `crbc_viz.io.anchor_rules.AnchorRuleError` when bad)."""
    if spec is None:
        return make_rule("exact")
    return make_rule(**spec)


def cli_options(spec: dict | None) -> str:
    """The command line's options for ``spec`` (what ``crbc-viz info`` takes)."""
    if spec is None:
        return ""
    out = [] if spec["name"] in ("fields", "drop") else [f"--anchor-rule {spec['name']}"]
    if "fields" in spec:
        out.append(f"--anchor-fields {spec['fields']}")
    for p in spec.get("drop", []):
        out.append(f"--anchor-drop '{p}'")
    if spec.get("threshold") is not None:
        out.append(f"--anchor-threshold {spec['threshold']:g}")
    if spec.get("scope", "group") != "group":
        out.append(f"--anchor-scope {spec['scope']}")
    if spec.get("cluster", "greedy") != "greedy":
        out.append(f"--anchor-cluster {spec['cluster']}")
    return " ".join(out)


def ruled_digest(digest: str, spec: dict | None) -> str:
    """The content key of the batch of ``digest`` keyed by ``spec`` (``digest`` itself: exact)."""
    if spec is None:
        return digest
    return digest + _SEP + json.dumps(spec, sort_keys=True)


def split_digest(digest: str) -> tuple[str, dict | None]:
    """(the source's digest, the rule's spec or None) of a `ruled_digest`."""
    base, sep, rest = digest.partition(_SEP)
    return (base, json.loads(rest)) if sep else (digest, None)


def preview(batch, spec: dict | None) -> dict:
    """`crbc_viz.analysis.matching.rule_preview` of ``spec`` on the (exactly keyed) batch."""
    return rule_preview(batch, rule_of(spec))


def preview_table(report: dict):
    """The before / after table: anchors, shared-step fraction, singleton rate."""
    import pandas as pd

    a, b = report["exact"], report["rule"]
    return pd.DataFrame(
        {
            "": ["anchors", "steps at shared anchors", "singleton rate"],
            "exact": [str(a["anchors"]), f"{a['shared_step_fraction']:.3f}", f"{a['singleton_rate']:.3f}"],
            "rule": [str(b["anchors"]), f"{b['shared_step_fraction']:.3f}", f"{b['singleton_rate']:.3f}"],
        }
    )


def merged_sentence(report: dict) -> str:
    """How many anchors the rule merged (or split: RTMC's signatures can split an anchor)."""
    m = report["anchors_merged"]
    a, b = report["exact"]["anchors"], report["rule"]["anchors"]
    what = f"{m} merged" if m >= 0 else f"{-m} split"
    return (
        f"{a} → {b} anchors ({what}); {report['steps_changed']} step(s) change {report['estimator']} credit"
    )


def change_sentence(report: dict) -> str | None:
    """The step whose credit changes most, as ``info`` says it; None when none changes."""
    c = report["largest_change"]
    if c is None:
        return None
    return (
        f"Largest credit change: group {c['group']} traj {c['traj_id']} step {c['step_idx']}: "
        f"{c['credit_exact']:.4g} → {c['credit_rule']:.4g} (Δ {c['delta']:+.4g})"
    )
