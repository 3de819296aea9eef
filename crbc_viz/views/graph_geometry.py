"""Where a graph drawing puts things: which anchors are drawn one by one and which are summarised
(`crbc_viz.views.layout.summarise`), their positions in canvas pixels, the room a node label has,
and the sizes of stacked self-loops. No HTML here (`crbc_viz.views.graph_page` builds it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import AnchorGraph
from .graph_page import MIN_LABEL_PX, short_label
from .graph_values import trajectory_path, truncated_steps
from .layout import (
    FAILURE_ID,
    SUCCESS_ID,
    Summary,
    fit_box,
    group_depths,
    layout_box,
    neighbourhood,
    step_depths,
    summarise,
)
from .summary_space import (
    NARROWEST_SCALE,
    base_positions,
    chain_label,
    edge_label_rects,
    footprint,
    frame_positions,
)

__all__ = ["FONT", "LOOP_STEP", "LABEL_PX_PER_CHAR", "Placement", "place", "stack_loops"]

#: Label sizes (canvas px at scale 1): anchors, "+n anchors" clusters, the two boundaries, edges.
FONT = {"anchor": 16, "cluster": 15, "boundary": 18, "edge": 12}
#: Self-loops at one anchor grow by this much each (px); an edge label is about this wide per
#: character (12 px sans-serif, generous).
LOOP_STEP = 13.0
LABEL_PX_PER_CHAR = 7.2


@dataclass(frozen=True)
class Placement:
    """What is drawn (``summary``) and where: ``pos`` maps each drawn item (a node id, a
    cluster id, ``SUCCESS`` / ``FAILURE``) to its (x, y) in canvas px; ``item`` maps each node
    to the item that stands for it; ``label_chars`` is the longest anchor text a label shows;
    ``path_steps`` / ``path_nodes`` are the highlighted rollout's steps and anchors; ``box`` the
    (width, height) in canvas px that the positions fill."""

    summary: Summary
    pos: dict
    item: dict
    label_chars: int
    path_steps: np.ndarray
    path_nodes: frozenset
    box: tuple[float, float] = (0.0, 0.0)


def place(
    graph: AnchorGraph,
    *,
    group: int,
    height_px: int,
    highlight_traj: int | None = None,
    nodes=None,
    max_nodes: int,
    keep=(),
    opened: dict | None = None,
    selected_node: int | None = None,
    by_step: bool = False,
    min_label_px: float = MIN_LABEL_PX,
    fit_width: float | None = None,
) -> Placement:
    """Choose and place what `crbc_viz.views.graph_view.graph_drawing` draws (its arguments of
    the same names): exactly ``nodes`` when given, else the summary of the group keeping
    ``keep``, the highlighted path and the chosen anchor with its neighbours; columns by depth,
    or by the highlighted rollout's step with ``by_step``. Clusters and opened anchors keep
    clear of labels drawn at least ``min_label_px`` on screen down to `NARROWEST_SCALE`. With
    ``fit_width`` the positions fill a box that wide whose height is the drawing's own
    (`crbc_viz.views.layout.fit_box`, from the columns of the drawing before any cluster was
    opened, so that opening one keeps the box), for a canvas that takes the drawing's shape;
    else the box of a ``height_px`` canvas."""
    sl = graph.group_slice(group)
    path_steps = np.zeros(0, dtype=np.int64)
    if highlight_traj is not None:
        path_steps, _, _ = trajectory_path(graph, int(highlight_traj))
    path_nodes = frozenset(graph.step_node[path_steps].tolist())
    stepwise = by_step and highlight_traj is not None
    box = layout_box(height_px)
    if nodes is not None:
        shown = sorted({int(n) for n in nodes if sl.start <= int(n) < sl.stop})
        depth = step_depths(graph, int(highlight_traj), shown) if stepwise else group_depths(graph, group)
        summary = Summary(tuple(shown), (), (), sl.stop - sl.start, depth)
    else:
        want = {int(n) for n in keep} | path_nodes
        if selected_node is not None:
            want |= set(neighbourhood(graph, [int(selected_node)], group).tolist())
        depth = (
            step_depths(graph, int(highlight_traj), range(sl.start, sl.stop))
            if stepwise
            else group_depths(graph, group)
        )
        summary = summarise(
            graph, group, max_nodes=max_nodes, keep=want, opened=opened, depths=depth, box=box
        )
    if fit_width is not None:
        box = fit_box(_column_sizes(summary.base or summary), fit_width)
    pos = base_positions(graph, group, summary, box=box)
    # Room for a label: the usual distance between neighbouring columns (a 16 px label needs
    # about 9 px per character), measured on the drawing before any cluster was opened so that
    # opening one keeps every label as it was.
    xs = np.unique(np.round([pos[it][0] for it in pos if it not in (SUCCESS_ID, FAILURE_ID)], 1))
    gap = float(np.median(np.diff(xs))) if xs.size > 1 else 200.0
    label_chars = int(min(12, max(4, gap // 9)))
    if summary.clusters or summary.opened:
        label_px = float(min_label_px) * 1.02 / NARROWEST_SCALE  # as graph_page's script grows them
        edge_px = max(FONT["edge"], label_px)
        labelled = _labelled_edges(graph, group, summary)
        pos = frame_positions(
            pos,
            summary,
            _footprints(graph, group, summary, label_chars, label_px),
            edge_labels=lambda at: edge_label_rects(labelled, at, edge_px),
        )
    return Placement(
        summary=summary,
        pos=pos,
        item=summary.item_of(),
        label_chars=label_chars,
        path_steps=path_steps,
        path_nodes=path_nodes,
        box=(float(box[0]), float(box[1])),
    )


def _labelled_edges(graph: AnchorGraph, group: int, summary: Summary) -> list[tuple]:
    """``(src, dst, label)`` of the edges a summary labels whatever the page's options: each
    chain's "⋯ n steps" and each "time limit" edge to FAILURE (`crbc_viz.views.graph_view`
    draws both). Clusters and opened anchors are kept off their labels."""
    item = summary.item_of()
    cut = np.flatnonzero(truncated_steps(graph) & (graph.batch.step_group == group))
    ends = {item.get(int(n)) for n in graph.step_node[cut].tolist()}
    timed = [
        (a, FAILURE_ID, "time limit")
        for a in sorted(ends - {None}, key=str)
        if not str(a).startswith("chain:")
    ]
    return [(ch.src, ch.dst, chain_label(ch)) for ch in summary.chains] + timed


def _footprints(graph: AnchorGraph, group: int, summary: Summary, label_chars: int, label_px: float):
    """An item's footprint (`crbc_viz.views.summary_space.footprint`) as
    `crbc_viz.views.graph_view` draws it: anchors by visits with their short label, clusters at
    their size before any was opened, the boundaries as boxes (room for a two-line label);
    labels at least ``label_px`` (canvas px)."""
    lo = graph.group_slice(group).start
    drawn = list(summary.anchors)
    vmax = max(int(graph.node_visits[drawn].max()) if drawn else 1, 1)
    size = {c.id: len(c.members) for c in (summary.base or summary).clusters}

    def fp(it):
        if it in (SUCCESS_ID, FAILURE_ID):
            return footprint("box", 0.0, f"{it}\nd = 0", max(FONT["boundary"], label_px))
        if isinstance(it, str):
            n = size.get(it, 1)
            return footprint("dot", 10 + 4 * math.log10(n + 1), f"+{n:,}", max(FONT["cluster"], label_px))
        label = short_label(graph.node_anchor_obs[it], int(it) - lo, label_chars)
        return footprint(
            "dot", 8 + 12 * math.sqrt(graph.node_visits[it] / vmax), label, max(FONT["anchor"], label_px)
        )

    return fp


def _column_sizes(summary: Summary) -> list[int]:
    """Items per drawn column (anchors and clusters) of ``summary``."""
    cols = [summary.depths[n] for n in summary.anchors] + [c.depth for c in summary.clusters]
    return list(np.unique(np.asarray(cols, dtype=np.int64), return_counts=True)[1]) if cols else [1]


def stack_loops(loops: dict, pos: dict, sizes: dict) -> None:
    """Self-loops nest straight up, one `LOOP_STEP` larger each, so that their labels (drawn
    at the top of each loop) sit one above the other; an anchor whose labels would touch those
    of an anchor placed before it (left to right) starts its stack higher."""
    placed: list[tuple[float, float, float]] = []  # (x, label height, half width) of each label

    def clash(x: float, top: float, half: float) -> bool:
        return any(abs(x - px) < half + ph and abs(top - py) < LOOP_STEP for px, py, ph in placed)

    for n in sorted(loops, key=lambda it: (pos[it][0], pos[it][1])):
        x, y = pos[n][0], pos[n][1] - sizes.get(n, 0.0)  # a loop starts at the node's rim
        half = [LABEL_PX_PER_CHAR * len(str(e["label"])) / 2.0 + 4.0 if e["label"] else 0.0 for e in loops[n]]
        base = 0
        while base < 40 and any(h and clash(x, y - LOOP_STEP * (base + k), h) for k, h in enumerate(half)):
            base += 1
        for k, edge in enumerate(loops[n]):
            edge["selfReference"] = {"size": 14.0 + LOOP_STEP * (base + k), "angle": math.pi / 2}
            if half[k]:
                placed.append((x, y - LOOP_STEP * (base + k), half[k]))
