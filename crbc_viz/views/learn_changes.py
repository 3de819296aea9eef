"""What an edit of the Learn page changed: every estimator's step credit before (the group as
logged, each estimator's default discount) and after (the edits, the chosen β and γ), and the
step whose credit moved most, named by its rollout and step (`crbc_viz.views.learn` re-exports
it).

Pure: numbers and strings; nothing imports streamlit.

>>> largest_change({("t1", 0): 0.5, ("t2", 3): 0.21}, {("t1", 0): 0.5, ("t2", 3): 0.05})
(('t2', 3), 0.21, 0.05)
"""

from __future__ import annotations

import numpy as np

from ..estimators import registry
from ..graph import AnchorGraph

__all__ = [
    "discount_param",
    "discount_params",
    "discount_text",
    "credit_by_step",
    "largest_change",
    "step_name",
    "change_line",
    "estimator_label",
]


def discount_param(name: str) -> str | None:
    """``"beta"`` or ``"gamma"``: the estimator's discount parameter (its help says
    "discount"); None when it has none (GRPO, shortest path: they ignore β and γ)."""
    for info in registry.param_infos(registry.get(name).params_cls):
        if info.name in ("beta", "gamma") and "discount" in info.help:
            return info.name
    return None


def discount_params(name: str, beta: float, gamma: float | None) -> tuple:
    """The score parameters that set ``name``'s discount: β for the CRBC family, γ for the
    others (``gamma`` None: each one's own default), nothing for an estimator without one."""
    p = discount_param(name)
    if p == "beta":
        return (("beta", float(beta)),)
    if p == "gamma" and gamma is not None:
        return (("gamma", float(gamma)),)
    return ()


def discount_text(name: str, beta: float, gamma: float | None) -> str:
    """What discount the estimator uses here, in words (``β = 0.98``, ``ignores β and γ``)."""
    p = discount_param(name)
    if p == "beta":
        return f"β = {beta:g}"
    if p == "gamma":
        if gamma is None:
            default = registry.get(name).params_cls.gamma
            return f"γ = {default:g} (its default)"
        return f"γ = {gamma:g}"
    return "ignores β and γ"


def credit_by_step(graph: AnchorGraph, result) -> dict[tuple[str, int], float]:
    """{(rollout id, step index as logged): step credit} — keyed by the log's own names, so that
    two graphs of the same group (before / after an edit) line up step by step."""
    steps = graph.batch.steps
    ids = steps["traj_id"].astype(str).to_numpy()
    idx = steps["step_idx"].to_numpy() if "step_idx" in steps else graph.batch.step_pos
    credit = np.asarray(result.credit, dtype=np.float64)
    return {(str(t), int(i)): float(c) for t, i, c in zip(ids, idx, credit)}


def largest_change(before: dict, after: dict) -> tuple[tuple, float, float] | None:
    """The step present in both maps whose credit moved most, with its credit before and after;
    None when no step moved by more than 1e-9 (ties: the first in ``after``'s order)."""
    best, size = None, 1e-9
    for k, v in after.items():
        if k in before and abs(v - before[k]) > size:
            best, size = k, abs(v - before[k])
    return None if best is None else (best, before[best], after[best])


def step_name(step: tuple) -> str:
    """``step 3 of rollout t2``."""
    return f"step {step[1]} of rollout {step[0]}"


def change_line(changes: dict) -> str:
    """The one line that names the largest change over every estimator (``changes``: {label:
    `largest_change` or None}): "The largest change: step 3 of rollout t2 under CRBC, +0.21 →
    +0.05"."""
    moved = {k: v for k, v in changes.items() if v is not None}
    if not moved:
        return "No step's credit changed under any estimator."
    label, (step, b, a) = max(moved.items(), key=lambda kv: abs(kv[1][2] - kv[1][1]))
    return f"The largest change: {step_name(step)} under {label}, {b:+.2f} → {a:+.2f}"


#: Short names of the estimators whose title has no "—" before its description.
_SHORT = {"grpo": "GRPO", "visit_local": "visit-local", "shortest_path": "shortest path (GraphGPO)"}


def estimator_label(name: str) -> str:
    """``CRBC``, ``GiGPO``, ``visit-local``: the estimator's short name as the page says it."""
    return _SHORT.get(name) or registry.get(name).title.split(" — ")[0]
