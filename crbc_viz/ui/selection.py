"""The one selection shared by the Graph, Trajectories and Compare pages: a rollout of the
group, a step of it, and an anchor. Each is a URL field (`crbc_viz.ui.view`), so it stays
chosen across pages and in links; clicks elsewhere (graph nodes, table rows, ← / →) write
the same session keys."""

from __future__ import annotations

import streamlit as st

from ..views.trajectories import outcome_label
from . import view

__all__ = [
    "step_by",
    "step_from_points",
    "selection_row",
    "rollout_ids",
    "pick_rollout",
    "pick_step",
    "pick_anchor",
    "chosen_rollout",
    "chosen_step",
    "chosen_anchor",
    "set_rollout",
    "set_step",
    "step_buttons",
    "row_table",
    "URL_FIELDS",
]

#: The shared selection's URL fields (Graph, Trajectories, Compare): name -> session-state key of
#: its control, declared to `crbc_viz.ui.view.FIELDS`.
URL_FIELDS = {"rollout": "rollout_pick", "step": "step_pick", "anchor": "anchor_pick"}
view.declare("ui.selection", URL_FIELDS)


def rollout_ids(graph) -> list[str]:
    b = graph.batch
    return b.steps["traj_id"].astype(str).to_numpy()[b.traj_offsets[:-1]].tolist()


def _index_of(graph, rid):
    ids = rollout_ids(graph)
    return ids.index(rid) if rid in ids else None


def chosen_rollout(graph) -> int | None:
    """Global index of the chosen rollout in ``graph`` (None when none is chosen)."""
    return _index_of(graph, st.session_state.get(URL_FIELDS["rollout"]))


def chosen_step(graph) -> int | None:
    """Position of the chosen step in the chosen rollout."""
    t = chosen_rollout(graph)
    s = st.session_state.get(URL_FIELDS["step"])
    if t is None or s is None:
        return None
    return int(s) if 0 <= int(s) < int(graph.batch.traj_len[t]) else None


def chosen_anchor(graph) -> int | None:
    """Local id of the chosen anchor: the chosen step's anchor, else the one picked directly."""
    a = st.session_state.get(URL_FIELDS["anchor"])
    if isinstance(a, str) and a[1:].isdigit() and int(a[1:]) < graph.num_nodes:
        return int(a[1:])
    t, i = chosen_rollout(graph), chosen_step(graph)
    if t is not None and i is not None:
        return int(graph.step_node[int(graph.batch.traj_offsets[t]) + i])
    return None


#: The rollout the current step was chosen with (a step chosen together with its rollout, by a
#: click, survives the rollout picker's change callback that Streamlit fires for code changes).
STEP_OWNER = "_step_owner"


def set_rollout(rid: str | None, step: int | None = None) -> None:
    """Callback-safe: choose a rollout (and a step of it)."""
    st.session_state[URL_FIELDS["rollout"]] = rid
    st.session_state[URL_FIELDS["step"]] = step
    st.session_state[STEP_OWNER] = rid
    view.clear("anchor")


def set_step(step: int) -> None:
    st.session_state[URL_FIELDS["step"]] = int(step)
    view.clear("anchor")


def _on_rollout_change() -> None:
    if st.session_state.pop(STEP_OWNER, None) == st.session_state.get(URL_FIELDS["rollout"]):
        return
    st.session_state[URL_FIELDS["step"]] = None
    view.clear("anchor")


def pick_rollout(container, graph, *, label: str = "Rollout", problems=None) -> int | None:
    """The rollout selectbox (``(none)`` allowed); returns the global trajectory index."""
    b = graph.batch
    ids = rollout_ids(graph)
    opts = [None] + ids
    names = {
        rid: f"{rid} ({outcome_label(graph, t)}, {int(b.traj_len[t])} steps)" for t, rid in enumerate(ids)
    }
    st.session_state["_rollout_ids"] = ids
    key = view.field("rollout", None, options=opts, problems=problems)
    container.selectbox(
        label,
        opts,
        key=key,
        on_change=_on_rollout_change,
        placeholder="(none)",
        format_func=lambda r: "(none)" if r is None else names.get(r, r),
        help="shared by the Graph, Trajectories and Compare pages; ← / → step through it",
    )
    view.record("rollout")
    t = chosen_rollout(graph)
    if t is not None:
        lo = int(b.traj_offsets[t])
        n = int(b.traj_len[t])
        st.session_state["_rollout_len"] = n
        first = {}
        for i, node in enumerate(graph.step_node[lo : lo + n].tolist()):
            first.setdefault(str(int(node)), i)
        st.session_state["_rollout_anchors"] = first
    else:
        st.session_state["_rollout_len"] = None
        st.session_state["_rollout_anchors"] = {}
    return t


def pick_step(container, graph, t: int | None, *, problems=None) -> int | None:
    """The step selectbox of rollout ``t``; returns the step position (None: none chosen)."""
    if t is None:
        view.clear("step")
        return None
    b = graph.batch
    lo, n = int(b.traj_offsets[t]), int(b.traj_len[t])
    acts = b.steps["action"].fillna("").astype(str).to_numpy() if "action" in b.steps else None
    opts = [None] + list(range(n))
    key = view.field("step", None, options=opts, decode=int, problems=problems)
    container.selectbox(
        "Step",
        opts,
        key=key,
        on_change=lambda: view.clear("anchor"),
        placeholder="(none: click a cell or a row)",
        format_func=lambda k: (
            "(none)" if k is None else f"t{k}: {acts[lo + k] if acts is not None else ''}"[:80]
        ),
    )
    view.record("step")
    return chosen_step(graph)


def step_by(delta: int) -> None:
    """Move the chosen step by ``delta`` within the chosen rollout (clamped)."""
    key = URL_FIELDS["step"]
    cur = st.session_state.get(key)
    n = st.session_state.get("_rollout_len")
    if cur is None or n is None:
        return
    # the clamp uses the rollout length the page recorded on its last draw
    st.session_state[key] = max(0, min(int(n) - 1, int(cur) + int(delta)))


def step_buttons(container, graph, t: int | None) -> None:
    """◀ / ▶ beside the step picker (the ← / → keys do the same)."""
    if t is None:
        return
    c1, c2 = container.columns(2)
    c1.button("◀ step", key="step_prev", on_click=step_by, args=(-1,), help="previous step (←)")
    c2.button("step ▶", key="step_next", on_click=step_by, args=(1,), help="next step (→)")


def pick_anchor(container, graph, *, problems=None) -> int | None:
    """The anchor search box (type to find an anchor by id or text)."""
    n = graph.num_nodes
    opts = [None] + [f"s{i}" for i in range(n)]
    text = [" ".join(str(a).split())[:60] for a in graph.node_anchor_obs]
    key = view.field("anchor", None, options=opts, problems=problems)
    container.selectbox(
        "Anchor (type to search)",
        opts,
        key=key,
        placeholder="(none)",
        format_func=lambda a: "(none)" if a is None else f"{a} · {text[int(a[1:])]}",
        help="click a node in the graph, or type part of an anchor's id or text",
    )
    view.record("anchor")
    return chosen_anchor(graph)


def step_index(graph, t: int | None, i: int | None) -> int | None:
    """Global step index of position ``i`` in rollout ``t``."""
    if t is None or i is None:
        return None
    return int(graph.batch.traj_offsets[t]) + int(i)


def selection_row(graph, problems: list) -> tuple[int | None, int | None]:
    """Rollout picker, step picker and ◀ / ▶ in one row, then the link's refused values;
    returns (global rollout index, step position)."""
    c1, c2, c3 = st.columns([3, 2, 1.2])
    t = pick_rollout(c1, graph, problems=problems)
    i = pick_step(c2, graph, t, problems=problems)
    with c3:
        step_buttons(st, graph, t)
    from .text import md

    for p in problems:
        st.warning(md(p))
    return t, i


def step_from_points(points: list, traces: list[list[int]]) -> int | None:
    """The step a plotly click selected: from the point's ``customdata`` (its last entry is
    the step id, see `scatter_figure`) or, without it, from (curve, point index) into
    ``traces`` (the step ids of each trace, in trace order)."""
    for p in points or []:
        cd = p.get("customdata")
        if cd is not None and len(cd) >= 5:
            return int(cd[4])
        c, i = p.get("curve_number"), p.get("point_index", p.get("point_number"))
        if c is not None and i is not None and c < len(traces) and i < len(traces[c]):
            return int(traces[c][i])
    return None


def row_table(frame, *, key: str, on_select, column_config=None):
    """``frame`` as a full-width table without its index (text cells made spreadsheet-safe,
    `crbc_viz.ui.text.cells`) whose rows are picked one at a time: a click calls ``on_select``."""
    from .text import cells

    return st.dataframe(
        cells(frame),
        hide_index=True,
        width="stretch",
        key=key,
        selection_mode="single-row",
        on_select=on_select,
        column_config=column_config,
    )
