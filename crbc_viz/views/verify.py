"""The Data page's "Logged vs recomputed" view: the trainer's own advantage beside the one its
estimator gives on the same rollouts (`crbc_viz.analysis.verify`), disagreeing groups first."""

from __future__ import annotations

import pandas as pd

__all__ = ["verify_headline", "verify_table"]


def verify_headline(v, what: str) -> str:
    """One sentence: what was recomputed, the rule, and how many groups disagree.

    >>> import pandas as pd
    >>> from crbc_viz.analysis.verify import Verification
    >>> g = pd.DataFrame({"ok": [True, False], "label": ["r/1/a", "r/1/b"], "max_abs": [0.0, 0.5]})
    >>> verify_headline(Verification(g, "grpo", {"eps": 1e-4}), "TRL")
    '1 of 2 groups disagree with grpo (eps=0.0001; reproduces TRL) beyond |Δ| ≤ 0.0002 + 1e-05·|A|.'
    """
    params = ", ".join(f"{k}={val}" for k, val in v.params.items())
    how = f"{v.estimator} ({params + '; ' if params else ''}reproduces {what})"
    rule = f"|Δ| ≤ {v.atol:g} + {v.rtol:g}·|A|"
    bad = int((~v.groups["ok"]).sum())
    if not bad:
        return f"All {len(v.groups)} groups agree with {how} within {rule}."
    return f"{bad} of {len(v.groups)} groups disagree with {how} beyond {rule}."


def verify_table(v) -> pd.DataFrame:
    """One row per group, disagreeing first (worst first), then the others in order: ``status``,
    ``group``, ``steps``, ``max |Δ|``, ``mean |Δ|``, ``worst step`` (trajectory, step, logged →
    recomputed).

    >>> import pandas as pd
    >>> from crbc_viz.analysis.verify import Verification
    >>> w = [{"traj_id": "t", "step_idx": 0, "logged": 1.0, "recomputed": 0.5, "abs_diff": 0.5}]
    >>> g = pd.DataFrame({"ok": [True, False], "label": ["r/1/a", "r/1/b"], "steps": [2, 2],
    ...                   "max_abs": [0.0, 0.5], "mean_abs": [0.0, 0.25], "worst": [w, w]})
    >>> verify_table(Verification(g, "grpo", {}))["group"].tolist()
    ['r/1/b', 'r/1/a']
    """
    g = v.groups
    bad = g[~g["ok"]].sort_values("max_abs", ascending=False, kind="stable")
    ordered = pd.concat([bad, g[g["ok"]]])
    return pd.DataFrame(
        {
            "status": ["agrees" if ok else "DISAGREES" for ok in ordered["ok"]],
            "group": ordered["label"].tolist(),
            "steps": ordered["steps"].tolist(),
            "max |Δ|": ordered["max_abs"].tolist(),
            "mean |Δ|": ordered["mean_abs"].tolist(),
            "worst step": [_worst(w) for w in ordered["worst"]],
        }
    )


def _worst(worst: list) -> str:
    if not worst:
        return ""
    w = worst[0]
    return f"{w['traj_id']} step {w['step_idx']}: {w['logged']:.6g} → {w['recomputed']:.6g}"
