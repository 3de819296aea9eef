"""``crbc-viz info (LOG | --store DIR [filters]) [--json]``: what a log or a store holds."""

from __future__ import annotations

import json

from ..safetext import term
from ._common import add_source_arguments, anchor_rule, filters, load_batch, open_store

HELP = "summarise a rollout log"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true")
    add_source_arguments(p)


def run(args) -> int:
    if args.store:
        return _store_info(args)
    from ..analysis.summary import batch_summary
    from ..graph import build_graph

    graph = build_graph(load_batch(args))
    info = batch_summary(graph)
    info.update(_matching(graph))
    info.update(_rule_comparison(args, graph))
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
        *matching_rows(info),
        *rule_rows(info),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {term(v)}")
    return 0


def _matching(graph) -> dict:
    """``actions_inferred`` and the ``matching`` diagnostics of a graph
    (`crbc_viz.analysis.matching.matching_summary`) for ``info``'s output."""
    from ..analysis.matching import matching_summary

    m = matching_summary(graph)
    return {"actions_inferred": m["actions_inferred"], "matching": m}


def _rule_comparison(args, graph, store=None) -> dict:
    """``anchor_rule``: with a rule other than exact, the matching before (exact) and after
    (``graph``, loaded under the rule) and the step whose CRBC credit changes most
    (`crbc_viz.analysis.matching.rule_comparison`); nothing under the exact rule."""
    rule = anchor_rule(args)
    if rule.exact:
        return {}
    from ..analysis.matching import rule_report
    from ..graph import build_graph
    from ..io.anchor_rules import EXACT

    exact = build_graph(load_batch(args, store=store, rule=EXACT, quiet=True))
    return {"anchor_rule": rule_report(exact, graph, rule)}


def rule_rows(info: dict) -> list[tuple[str, str]]:
    """``info``'s text lines of the anchor rule's before/after (none under the exact rule)."""
    r = info.get("anchor_rule")
    if not r:
        return []
    from ..analysis.matching import cross_task_sentence

    a, b = r["exact"], r["rule"]
    m = r["anchors_merged"]
    rows = [
        ("anchor rule", r["name"]),
        (
            "anchors (exact → rule)",
            f"{a['anchors']} → {b['anchors']} ({m} merged)"
            if m >= 0
            else f"{a['anchors']} → {b['anchors']} ({-m} split)",
        ),
        ("shared steps (exact → rule)", f"{a['shared_step_fraction']:.3f} → {b['shared_step_fraction']:.3f}"),
        ("singleton rate (exact → rule)", f"{a['singleton_rate']:.3f} → {b['singleton_rate']:.3f}"),
        (f"{r['estimator']} steps changed", str(r["steps_changed"])),
    ]
    c = r["largest_change"]
    if c is not None:
        rows.append(
            (
                "largest credit change",
                f"group {c['group']} traj {c['traj_id']} step {c['step_idx']}: "
                f"{c['credit_exact']:.4g} → {c['credit_rule']:.4g} (Δ {c['delta']:+.4g})",
            )
        )
    note = cross_task_sentence(r)
    if note:
        rows.append(("warning" if r.get("scope") == "batch" else "note", note))
    return rows


def matching_rows(info: dict) -> list[tuple[str, str]]:
    """``info``'s text lines of the matching diagnostics (counts, then the degenerate groups)."""
    m = info["matching"]
    S = m["steps"]
    rows = [
        ("steps at shared anchors (n)", f"{m['shared_steps']} of {S}"),
        ("singleton anchors (n)", f"{m['singleton_anchors']} of {m['anchors']} (step groups of one: 0)"),
        ("actions inferred", f"{m['actions_inferred']} of {S} steps (no action logged: keyed by transition)"),
    ]
    for k, what in (
        ("copies_dropped", "padding copies dropped"),
        ("copies_suspected", "padding copies suspected"),
    ):
        if k in m:
            rows.append((what, str(m[k])))
    bad = {r: n for r, n in m["degenerate_groups"].items() if n}
    text = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in bad.items()) if bad else "none"
    rows.append(("degenerate groups", text))
    return rows


def truncated_text(info: dict) -> str:
    """The "truncated" line of ``info``: count, share and explicit successes kept."""
    if not info.get("truncation_known", True):
        return "unknown (no done field logged: every trajectory is taken as ended)"
    out = f"{info['truncated']} of {info['trajectories']} ({info['truncated_rate']:.3f})"
    if info.get("truncated_success"):
        out += f", {info['truncated_success']} with a logged success=true kept as success"
    return out


def _store_info(args) -> int:
    """The store's summary without filters; with them, the matching groups' batch summary (and,
    for one ``--group``, its trajectories)."""
    st = open_store(args)
    f = filters(args)
    if all(v is None for v in f.values()):
        info = st.summary()
        info["groups"] = int(len(st.groups()))
        if args.json:
            print(json.dumps(info, indent=2))
            return 0
        for k, v in info.items():
            print(f"{k:<18}  {term(', '.join(map(str, v)) if isinstance(v, list) else v)}")
        return 0
    from ..analysis.summary import batch_summary
    from ..graph import build_graph

    batch = load_batch(args, anchor_obs=f["group"] is not None, store=st)
    graph = build_graph(batch)
    info = batch_summary(graph)
    info.update(_matching(graph))
    info.update(_rule_comparison(args, graph, store=st))
    if f["group"] is not None:
        tr = batch.trajectories
        info["trajectories_table"] = tr[
            ["traj_id", "num_steps", "success", "truncated", "episode_return"]
        ].to_dict(orient="records")
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    for k, v in info.items():
        if k == "anchor_rule":
            for name, text in rule_rows(info):
                print(f"{name:<29}  {term(text)}")
        elif k == "trajectories_table":
            print("trajectories:")
            for row in v:
                print(
                    f"  {term(row['traj_id'])}  steps={row['num_steps']}  success={row['success']}  "
                    f"truncated={row['truncated']}  return={row['episode_return']:.3g}"
                )
        else:
            print(f"{k:<26}  {term(v)}")
    return 0
