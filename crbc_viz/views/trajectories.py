"""Every rollout of a group as a row of steps, each step coloured by its credit under several
estimators; and the alternatives taken from one step's anchor.

Pure: `trajectory_table` returns an HTML string with inline styles only (it is shown with
``st.html``, which sanitises); every piece of logged text is HTML-escaped.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..graph import FAILURE, SUCCESS, AnchorGraph
from .colors import credit_color, credit_limit, text_color_for
from .graph_page import esc
from .graph_values import pair_values

__all__ = [
    "failed_frame",
    "chip_labels",
    "trajectory_table",
    "step_alternatives",
    "anchor_panel_frame",
    "worst_steps",
    "step_frame",
    "outcome_label",
]


def outcome_label(graph: AnchorGraph, traj: int) -> str:
    b = graph.batch
    if b.traj_success[traj]:
        return "success"
    return "ran out of steps" if b.traj_truncated[traj] else "failure"


def _short(text, n: int) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def chip_labels(names: list[str]) -> dict[str, str]:
    """Short distinct chip labels: the shortest prefix (≥ 2 letters) that no other name has."""
    out = {}
    for n in names:
        k = 2
        while k < len(n) and any(m != n and m.startswith(n[:k]) for m in names):
            k += 1
        out[n] = n[:k]
    return out


def trajectory_table(
    graph: AnchorGraph,
    results: dict,
    *,
    group: int = 0,
    selected: tuple[int, int] | None = None,
    max_chars: int = 16,
    max_steps: int = 60,
    font_px: int = 12,
) -> str:
    """HTML table: one row per rollout of ``group``, one cell per step (action, reward) with one
    credit chip per estimator, coloured on the shared diverging scale.

    Args:
        graph: anchor graph.
        results: ``{estimator name: CreditResult}``, or a message string where the estimator
            could not run (e.g. a `MissingSignalError`); that estimator's chips are left out.
        group: group index in ``graph``.
        selected: (global trajectory index, step position) to outline.
        max_chars: action text is shortened to this many characters (full text on hover).
        max_steps: columns beyond this are summarised as "… n more".
        font_px: text size of the table and its legend (16 or more for a projector).

    Returns:
        HTML text. Each estimator's chips use its own symmetric limit max |credit| (printed in
        the legend), since credit scales differ between methods.
    """
    b = graph.batch
    t_lo, t_hi = int(b.group_traj_offsets[group]), int(b.group_traj_offsets[group + 1])
    step_sl = np.flatnonzero(b.step_group == group)
    ok = {k: r for k, r in results.items() if not isinstance(r, str)}
    limits = {k: credit_limit(r.credit[step_sl]) for k, r in ok.items()}
    abbrev = chip_labels(list(results))
    steps = b.steps
    actions = steps["action"].fillna("").astype(str).to_numpy() if "action" in steps else None
    rewards = steps["reward"].to_numpy(dtype=np.float64)
    traj_ids = steps["traj_id"].astype(str).to_numpy()
    width = int(min(b.traj_len[t_lo:t_hi].max(initial=0), max_steps))

    if not 6 <= font_px <= 72:
        raise ValueError(f"trajectory_table: font_px must be 6 … 72, got {font_px!r}")
    cell = (
        "border:1px solid #e3e3e3;padding:3px 4px;vertical-align:top;"
        f"min-width:{round(92 * font_px / 12)}px;font-size:{int(font_px)}px;"
    )
    out = ["<div style='overflow-x:auto;max-width:100%;font-family:sans-serif'>"]
    out.append(_chip_legend(results, limits, abbrev, font_px))
    out.append(
        "<table style='border-collapse:collapse'><tr>"
        f"<th style='{cell}'>rollout</th><th style='{cell}'>outcome</th>"
        + "".join(f"<th style='{cell}'>t{t}</th>" for t in range(width))
        + "</tr>"
    )
    for t in range(t_lo, t_hi):
        s_lo, s_hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
        outcome = outcome_label(graph, t)
        oc = {"success": "#1a9850", "failure": "#555", "ran out of steps": "#b35806"}[outcome]
        row = [
            f"<tr><td style='{cell}'><b>{esc(traj_ids[s_lo])}</b><br>{s_hi - s_lo} steps</td>"
            f"<td style='{cell}color:{oc}'><b>{outcome}</b><br>R = {b.traj_return[t]:.3g}</td>"
        ]
        for i, s in enumerate(range(s_lo, min(s_hi, s_lo + width))):
            act = actions[s] if actions is not None else ""
            sel = selected is not None and selected[0] == t and selected[1] == i
            style = cell + "cursor:pointer;" + ("outline:3px solid #000;outline-offset:-3px;" if sel else "")
            chips = []
            for k, r in ok.items():
                x = float(r.credit[s])
                bg = credit_color(x, limits[k])
                txt = "—" if not math.isfinite(x) else f"{x:+.2f}"
                chips.append(
                    f"<div title='{esc(k)}' style='background:{bg};color:"
                    f"{text_color_for(bg)};padding:0 3px;margin-top:1px;"
                    f"border-radius:2px'><span style='opacity:.7'>{esc(abbrev[k])}</span>"
                    f" {txt}</div>"
                )
            row.append(
                f"<td style='{style}' title='{esc(act)}' data-crbc-step='{t - t_lo}:{i}'><div><b>{esc(_short(act, max_chars))}"
                f"</b></div><div style='color:#666'>r = {rewards[s]:.3g}</div>" + "".join(chips) + "</td>"
            )
        if s_hi - s_lo > width:
            row.append(f"<td style='{cell}'>… {s_hi - s_lo - width} more</td>")
        row.append("</tr>")
        out.append("".join(row))
    out.append("</table></div>")
    return "".join(out)


def _chip_legend(results: dict, limits: dict, abbrev: dict, font_px: int) -> str:
    """The legend above `trajectory_table`: each estimator's chip label and its colour limit
    (``limits``, for those that ran), or the reason it could not run."""
    legend = []
    for k in results:
        if k in limits:
            legend.append(
                f"<span style='margin-right:14px'><b>{esc(abbrev[k])}</b> = {esc(k)} "
                f"(±{limits[k]:.3g})</span>"
            )
        else:
            legend.append(
                f"<span style='margin-right:14px;color:#a33'><b>{esc(k)}</b>: {esc(results[k])}</span>"
            )
    return (
        f"<div style='font-size:{int(font_px)}px;margin-bottom:4px'>chips, top to bottom: "
        + "".join(legend)
        + "</div>"
    )


def step_alternatives(graph: AnchorGraph, results: dict, step: int) -> pd.DataFrame:
    """The actions observed at step ``step``'s anchor (over all rollouts of its group): one row
    per (anchor, action) pair with its count, the rollouts that took it, where it led, and each
    estimator's Q and credit (``NaN`` where an estimator could not run)."""
    return anchor_panel_frame(graph, results, int(graph.step_node[step]), taken=int(graph.step_pair[step]))


def anchor_panel_frame(
    graph: AnchorGraph, results: dict, node: int, taken: int | None = None
) -> pd.DataFrame:
    """The actions observed at anchor ``node`` (global id): one row per (anchor, action) pair
    with its count, the rollouts that took it, how those rollouts ended, where it led, and each
    estimator's Q and credit (``NaN`` where an estimator could not run). ``taken``: the pair of
    the chosen step, flagged in a "taken here" column."""
    n = int(node)
    p_lo, p_hi = int(graph.node_pair_offsets[n]), int(graph.node_pair_offsets[n + 1])
    b = graph.batch
    traj_ids = b.steps["traj_id"].astype(str).to_numpy()
    lo = int(graph.group_node_offsets[graph.node_group[n]])
    rows = []
    vals = {k: pair_values(graph, r) for k, r in results.items() if not isinstance(r, str)}
    for p in range(p_lo, p_hi):
        occ = np.flatnonzero(graph.step_pair == p)
        nxt = graph.step_next[occ]
        cut = b.traj_truncated[b.step_traj[occ]] & (occ == b.traj_offsets[b.step_traj[occ] + 1] - 1)
        dests = sorted(
            {
                "SUCCESS"
                if x == SUCCESS
                else ("ran out of steps" if c else "FAILURE")
                if x == FAILURE
                else f"s{x - lo}"
                for x, c in zip(nxt.tolist(), cut.tolist())
            }
        )
        trajs = list(dict.fromkeys(b.step_traj[occ].tolist()))
        wins = int(sum(bool(b.traj_success[t]) for t in trajs))
        row = {"action": str(graph.action_names[graph.pair_action[p]])}
        if taken is not None:
            row["taken here"] = p == taken
        row.update(
            {
                "N(s,a)": int(graph.pair_count[p]),
                "rollouts": ", ".join(dict.fromkeys(traj_ids[occ].tolist())),
                "of them succeeded": f"{wins} of {len(trajs)}",
                "leads to": ", ".join(dests),
            }
        )
        for k in results:
            q, c = vals[k] if k in vals else (None, None)
            row[f"Q [{k}]"] = float(q[p]) if q is not None else np.nan
            row[f"credit [{k}]"] = float(c[p]) if c is not None else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def step_frame(
    graph: AnchorGraph, results: dict, *, group: int | None = None, column: str = "credit"
) -> pd.DataFrame:
    """One row per step (of ``group``, or all): ids, position, action, outcome, and
    ``column`` (``credit``, ``advantage``, ``value`` or ``q_value``) of each estimator."""
    b = graph.batch
    step_group = b.step_group
    idx = np.arange(b.num_steps) if group is None else np.flatnonzero(step_group == group)
    steps = b.steps
    df = pd.DataFrame(
        {
            "step": idx,
            "group": step_group[idx],
            "traj_id": steps["traj_id"].astype(str).to_numpy()[idx],
            "t": b.step_pos[idx],
            "action": (
                steps["action"].fillna("").astype(str).to_numpy()[idx]
                if "action" in steps
                else np.full(idx.size, "")
            ),
            "anchor": [
                f"s{k}" for k in (graph.step_node - graph.group_node_offsets[step_group])[idx].tolist()
            ],
            "success": b.traj_success[b.step_traj[idx]],
        }
    )
    for k, r in results.items():
        if not isinstance(r, str):
            df[k] = np.asarray(getattr(r, column), dtype=np.float64)[idx]
    return df


def worst_steps(graph: AnchorGraph, results: dict, traj: int, estimator: str, k: int = 5) -> pd.DataFrame:
    """Why did rollout ``traj`` fail: its ``k`` most negative-credit steps under ``estimator``.

    One row per step: position ``t``, action, anchor, each estimator's credit, what the other
    rollouts of the group did at that anchor ("others there": how many of them passed it and
    how many of those succeeded; "their actions": each action with its successes / visits),
    and whether the estimators in ``results`` disagree in sign there (ignoring zeros).
    Empty when ``estimator`` could not run.
    """
    r = results.get(estimator)
    if r is None or isinstance(r, str):
        return pd.DataFrame()
    b = graph.batch
    lo, hi = int(b.traj_offsets[traj]), int(b.traj_offsets[traj + 1])
    credit = np.asarray(r.credit, dtype=np.float64)[lo:hi]
    order = [i for i in np.argsort(credit, kind="stable").tolist() if np.isfinite(credit[i])][:k]
    acts = b.steps["action"].fillna("").astype(str).to_numpy() if "action" in b.steps else None
    g = int(b.step_group[lo])
    n_lo = int(graph.group_node_offsets[g])
    ok = {n: res for n, res in results.items() if not isinstance(res, str)}
    rows = []
    for i in order:
        s = lo + i
        node = int(graph.step_node[s])
        here = np.flatnonzero(graph.step_node == node)
        others = here[b.step_traj[here] != traj]
        o_trajs = list(dict.fromkeys(b.step_traj[others].tolist()))
        wins = sum(bool(b.traj_success[t]) for t in o_trajs)
        per_action: dict[str, list[int]] = {}
        for st_ in others.tolist():
            a = str(graph.action_names[graph.pair_action[graph.step_pair[st_]]])
            w = per_action.setdefault(a, [0, 0])
            w[0] += int(bool(b.traj_success[b.step_traj[st_]]))
            w[1] += 1
        row = {"t": i, "action": acts[s] if acts is not None else "", "anchor": f"s{node - n_lo}"}
        signs = set()
        for n, res in ok.items():
            x = float(np.asarray(res.credit, dtype=np.float64)[s])
            row[f"credit [{n}]"] = x
            if math.isfinite(x) and abs(x) > 1e-12:
                signs.add(x > 0)
        row["others there"] = f"{len(o_trajs)} rollouts, {wins} succeeded" if o_trajs else "no other rollout"
        row["their actions"] = (
            ", ".join(
                f"{a}: {w}/{v} succeeded"
                for a, (w, v) in sorted(per_action.items(), key=lambda kv: -kv[1][1])
            )
            or "—"
        )
        row["estimators disagree"] = "yes" if len(signs) > 1 else "no"
        rows.append(row)
    return pd.DataFrame(rows)


def failed_frame(graph: AnchorGraph, trajs: list[int], result, estimator: str) -> pd.DataFrame:
    """One row per rollout in ``trajs``: id, outcome, length, return and, when ``result`` is a
    `CreditResult`, its most negative step credit and the step where it falls."""
    b = graph.batch
    ids = b.steps["traj_id"].astype(str).to_numpy()
    rows = []
    for t in trajs:
        lo, hi = int(b.traj_offsets[t]), int(b.traj_offsets[t + 1])
        row = {
            "rollout": ids[lo],
            "outcome": outcome_label(graph, t),
            "steps": hi - lo,
            "return": float(b.traj_return[t]),
        }
        if result is not None and not isinstance(result, str):
            c = np.asarray(result.credit, dtype=np.float64)[lo:hi]
            fin = np.flatnonzero(np.isfinite(c))
            row[f"worst credit [{estimator}]"] = float(c[fin].min()) if fin.size else math.nan
            row["at step"] = f"t{int(fin[np.argmin(c[fin])])}" if fin.size else "—"
        rows.append(row)
    return pd.DataFrame(rows)
