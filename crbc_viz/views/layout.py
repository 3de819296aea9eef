"""Where the anchor graph's nodes go, and what a large group draws in their place.

Pure: numpy and igraph (its Sugiyama layout, C core); no HTML (`graph_view` draws).

Columns: BFS depth from the group's start anchors, left to right, with SUCCESS and FAILURE in
a last column at the right. Order within a column: igraph's ``Graph.layout_sugiyama``
(barycentre crossing reduction), then median sweeps that keep whichever order crosses fewer
edges. Placement fills a box of the canvas's aspect (`layout_box`): a column taller than the
box holds at a readable spacing splits into staggered sub-columns, and a run of columns wider
than it wraps into bands stacked top to bottom.

Summary (`summarise`): a group with more anchors than ``max_nodes``, or whose drawing would
crowd a column, draws its start anchors, the anchors the caller keeps (a highlighted rollout,
the chosen anchor and its neighbours), its most visited anchors as far as each column has room,
and both boundaries; a linear chain of other anchors between two drawn ones becomes one edge
that carries its length; the rest gather per depth in "+n anchors" clusters, and ``opened``
draws `OPEN_STEP` more of a cluster's most visited anchors per click.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from .._extras import require
from ..graph import FAILURE, SUCCESS, AnchorGraph
from .dot_order import prefer, sugiyama_safe

__all__ = [
    "SUCCESS_ID",
    "FAILURE_ID",
    "OPEN_STEP",
    "MAX_CLUSTERS",
    "MIN_GAP",
    "Cluster",
    "Chain",
    "Summary",
    "group_edges",
    "group_depths",
    "step_depths",
    "start_anchors",
    "neighbourhood",
    "order_layers",
    "crossings",
    "layered_positions",
    "layout_box",
    "fit_box",
    "layered_layout",
    "summarise",
    "summary_positions",
    "cluster_id",
]

#: Boundary node ids in the drawn graph.
SUCCESS_ID, FAILURE_ID = "SUCCESS", "FAILURE"
#: A "+n anchors" cluster draws this many more of its most visited anchors per click.
OPEN_STEP = 12
#: At most this many clusters: a group with more depths gathers runs of depths in one.
MAX_CLUSTERS = 24
#: Smallest centre-to-centre distances of the layout, in canvas pixels at scale 1: between two
#: nodes of one sub-column (a dot and its label below it), and between neighbouring columns or
#: sub-columns (a label like ``s1234`` at 16 px).
MIN_GAP = {"dy": 44.0, "dx": 46.0}
#: Centre-to-centre distance (canvas px) from the last column to the SUCCESS / FAILURE boxes
#: (half a box with its 18 px label, a dot and a gap).
_BOUNDARY_GAP = 80.0
_MAX_BANDS = 6
_MAX_SUBCOLUMNS = 4
_SWEEPS = 8
#: Above this many drawn edges the median sweeps are skipped (their crossing count is O(E²)).
_SWEEP_MAX_EDGES = 2500
#: Shuffled starting orders tried besides igraph's and the left-to-right pass, up to this many edges.
_RESTARTS = 6
_RESTART_MAX_EDGES = 400


# ---------------------------------------------------------------- the group's structure
def group_edges(graph: AnchorGraph, g: int) -> np.ndarray:
    """Edge ids ``[E_g]`` of group ``g``."""
    sl = graph.group_slice(g)
    p_lo, p_hi = graph.node_pair_offsets[sl.start], graph.node_pair_offsets[sl.stop]
    return np.flatnonzero((graph.edge_pair >= p_lo) & (graph.edge_pair < p_hi))


def start_anchors(graph: AnchorGraph, g: int) -> set[int]:
    """The anchors group ``g``'s rollouts start at (global ids)."""
    b = graph.batch
    t_lo, t_hi = int(b.group_traj_offsets[g]), int(b.group_traj_offsets[g + 1])
    return set(graph.step_node[b.traj_offsets[t_lo:t_hi]].tolist())


def _successors(graph: AnchorGraph, g: int) -> tuple[dict, dict]:
    """Distinct successors and predecessors per anchor of group ``g``, self-loops left out;
    a boundary successor is ``SUCCESS_ID`` / ``FAILURE_ID``."""
    edges = group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]].tolist()
    dst = graph.edge_next[edges].tolist()
    succ: dict[int, set] = {}
    pred: dict[int, set] = {}
    for s, x in zip(src, dst):
        if s == x:
            continue
        to = SUCCESS_ID if x == SUCCESS else FAILURE_ID if x == FAILURE else x
        succ.setdefault(s, set()).add(to)
        if x >= 0:
            pred.setdefault(x, set()).add(s)
    return succ, pred


def group_depths(graph: AnchorGraph, g: int) -> dict[int, int]:
    """BFS hops from the group's start anchors (the first step of each trajectory)."""
    sl = graph.group_slice(g)
    succ, _ = _successors(graph, g)
    depth = {int(s): 0 for s in sorted(start_anchors(graph, g))}
    queue = deque(depth)
    while queue:
        u = queue.popleft()
        for v in sorted(x for x in succ.get(u, ()) if isinstance(x, int)):
            if v not in depth:
                depth[v] = depth[u] + 1
                queue.append(v)
    far = max(depth.values(), default=-1) + 1
    for n in range(sl.start, sl.stop):  # not reachable from a start (cannot happen for valid logs)
        depth.setdefault(n, far)
    return depth


def step_depths(graph: AnchorGraph, traj: int, nodes) -> dict[int, int]:
    """Columns by step: the rollout ``traj``'s anchors at the step it first reaches them, every
    other node of ``nodes`` one column after the earliest of its neighbours on that path."""
    lo, hi = int(graph.batch.traj_offsets[traj]), int(graph.batch.traj_offsets[traj + 1])
    path = graph.step_node[lo:hi]
    depth: dict[int, int] = {}
    for i, n in enumerate(path.tolist()):
        depth.setdefault(int(n), i)
    g = int(graph.node_group[int(path[0])]) if path.size else 0
    edges = group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]].tolist()
    dst = graph.edge_next[edges].tolist()
    for s_, d_ in zip(src, dst):
        if d_ < 0:
            continue
        for a, b in ((s_, d_), (d_, s_)):
            if a in depth and b not in depth:
                depth[b] = min(depth.get(b, 10**9), depth[a] + 1)
    far = max(depth.values(), default=-1) + 1
    return {int(n): depth.get(int(n), far) for n in nodes}


def neighbourhood(graph: AnchorGraph, nodes, g: int = 0) -> np.ndarray:
    """``nodes`` plus every anchor one transition before or after one of them (group ``g``)."""
    want = {int(n) for n in nodes}
    edges = group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]]
    dst = graph.edge_next[edges]
    near = set(want)
    for s_, d_ in zip(src.tolist(), dst.tolist()):
        if d_ >= 0 and (s_ in want or d_ in want):
            near.update((s_, d_))
    return np.asarray(sorted(near), dtype=np.int64)


# ---------------------------------------------------------------- order within the columns
def crossings(points: dict, edges) -> int:
    """Pairs of straight edges that cross (edges sharing an endpoint never count).

    Args:
        points: ``{item: (x, y)}``.
        edges: ``(u, v)`` pairs; self-loops, repeats and edges to unplaced items are ignored.
    """
    segs = sorted({(u, v) if str(u) <= str(v) else (v, u) for u, v in edges if u != v}, key=str)
    segs = [(u, v) for u, v in segs if u in points and v in points]
    if len(segs) < 2:
        return 0
    key = {it: i for i, it in enumerate(points)}
    ends = np.array([(key[u], key[v]) for u, v in segs], dtype=np.int64)
    xy = np.array([points[it] for it in points], dtype=np.float64)
    a, b = xy[ends[:, 0]], xy[ends[:, 1]]

    def orient(p, q, r):
        return np.sign(
            (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1])
            - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])
        )

    total = 0
    for lo in range(0, len(segs), 400):  # row blocks bound the memory to 400 × E
        a1, b1, e1 = a[lo : lo + 400, None], b[lo : lo + 400, None], ends[lo : lo + 400, None]
        a2, b2, e2 = a[None], b[None], ends[None]
        hit = (orient(a1, b1, a2) * orient(a1, b1, b2) < 0) & (orient(a2, b2, a1) * orient(a2, b2, b1) < 0)
        shared = (e1[..., 0] == e2[..., 0]) | (e1[..., 0] == e2[..., 1])
        shared |= (e1[..., 1] == e2[..., 0]) | (e1[..., 1] == e2[..., 1])
        total += int((hit & ~shared).sum())
    return total // 2


def _centred(columns: list[list]) -> dict:
    return {
        it: (float(c), r - (len(col) - 1) / 2.0) for c, col in enumerate(columns) for r, it in enumerate(col)
    }


def order_layers(layer: dict, edges, *, pinned: int | None = None) -> list[list]:
    """The items of each column, top to bottom, with few edge crossings.

    Starting orders: igraph's Sugiyama layout (barycentre heuristic with its dummy vertices
    on long edges), one left-to-right pass that sorts each column by the mean rank of its
    predecessors, and on small drawings a few seeded shuffles. Each is refined by barycentre
    sweeps, down then up, and the order with the fewest crossings (`crossings` on column ×
    centred rank) is kept — on real groups no start wins everywhere (a Sokoban group:
    igraph; a random MDP: the pass), and sweeps alone stop in local minima. Graphviz's ``dot``
    order replaces it where ``dot`` is installed and crosses fewer (`crbc_viz.views.dot_order`).

    Args:
        layer: ``{item: column}``, columns 0 … L − 1 (each one used); ties keep this order.
        edges: ``(u, v)`` pairs between items.
        pinned: a column whose given order (the dict's order) is kept, e.g. the boundaries.

    Returns:
        ``L`` lists of items.
    """
    igraph = require("igraph", "the graph layout")

    items = list(layer)
    if not items:
        return []
    idx = {it: i for i, it in enumerate(items)}
    pairs = sorted({(idx[u], idx[v]) for u, v in edges if u != v and u in idx and v in idx})
    L = max(layer.values()) + 1
    xs = list(range(len(items)))  # the given order, where igraph's Sugiyama is not safe to call
    if sugiyama_safe(igraph):
        ig, lays = igraph.Graph(n=len(items), edges=pairs, directed=True), [int(layer[it]) for it in items]
        xs = [x for x, _ in ig.layout_sugiyama(layers=lays, maxiter=200).coords[: len(items)]]
    start: list[list] = [[] for _ in range(L)]
    for it in items:
        start[layer[it]].append(it)
    sugiyama = [
        col if c == pinned else sorted(col, key=lambda it: (xs[idx[it]], idx[it]))
        for c, col in enumerate(start)
    ]
    seg = [(items[u], items[v]) for u, v in pairs]
    before: dict = {it: [] for it in items}
    after: dict = {it: [] for it in items}
    for u, v in seg:
        if layer[u] < layer[v]:
            after[u].append(v)
            before[v].append(u)
        elif layer[v] < layer[u]:
            after[v].append(u)
            before[u].append(v)
    preds: dict = {it: [] for it in items}
    for u, v in seg:
        if layer[u] < layer[v]:
            preds[v].append(u)
    passed = [list(col) for col in start]
    rank: dict = {}
    for c in range(L):
        if c != pinned:

            def by_preds(it):
                ys = [rank[n] for n in preds[it]]
                return (sum(ys) / len(ys) if ys else -1e9, idx[it])

            passed[c].sort(key=by_preds)
        rank.update({it: r - (len(passed[c]) - 1) / 2.0 for r, it in enumerate(passed[c])})
    if len(pairs) > _SWEEP_MAX_EDGES:
        return prefer(sugiyama, seg, lambda cols: crossings(_centred(cols), seg), pinned=pinned)
    starts = [sugiyama, passed]
    if len(pairs) <= _RESTART_MAX_EDGES:
        # Barycentre sweeps stop in local minima; a few shuffled starts (seeded: the drawing
        # is the same on every run) find the fewest crossings far more often.
        rng = np.random.default_rng(0)
        for _ in range(_RESTARTS):
            starts.append(
                [
                    col if c == pinned else [col[i] for i in rng.permutation(len(col))]
                    for c, col in enumerate(start)
                ]
            )
    best: tuple[int, list] | None = None
    for columns in starts:
        got = _refine(columns, seg, before, after, pinned)
        if best is None or got[0] < best[0]:
            best = got
    return prefer(best[1], seg, lambda cols: crossings(_centred(cols), seg), pinned=pinned)


def _refine(columns: list[list], seg, before: dict, after: dict, pinned) -> tuple[int, list]:
    """Barycentre sweeps over ``columns`` (down, up, …): (fewest crossings seen, that order)."""
    columns = [list(col) for col in columns]
    L = len(columns)
    best = (crossings(_centred(columns), seg), [list(c) for c in columns])
    for sweep in range(_SWEEPS):
        down = sweep % 2 == 0
        for c in range(1, L) if down else range(L - 2, -1, -1):
            if c == pinned:
                continue
            at = _centred(columns)
            side = before if down else after

            def key(it, at=at, side=side):
                ys = [at[n][1] for n in side[it]]
                return (sum(ys) / len(ys) if ys else at[it][1], at[it][1])

            columns[c].sort(key=key)
        score = crossings(_centred(columns), seg)
        if score < best[0]:
            best = (score, [list(col) for col in columns])
    return best


# ---------------------------------------------------------------- placement in the box
def layout_box(height_px: int) -> tuple[float, float]:
    """(width, height) in canvas pixels that a drawing for a ``height_px`` canvas fills: the
    canvas's height less room for labels and the fit margin, at the aspect of a wide screen's
    canvas (the graph fills the width of a 1440 px window at scale 1)."""
    h = 0.72 * float(height_px)
    return 1180.0 * h / (0.72 * 620.0), h


#: A fitted box's height, as a share of its width, at least and at most.
FIT_ASPECT = (0.45, 1.1)


def fit_box(sizes, width: float) -> tuple[float, float]:
    """(width, height) in canvas pixels of a box that holds columns of ``sizes`` items (the
    boundaries' column not counted) at ``width`` without squeezing them: its height gives the
    tallest column of every band at most two staggered sub-columns at the minimum spacing
    (`MIN_GAP`), within `FIT_ASPECT` of ``width`` — the shape of what is drawn, for a canvas
    whose height follows its drawing."""
    sizes = [int(n) for n in sizes if int(n) > 0] or [1]
    grid = _grid(len(sizes), max(sizes), float(width), float(width))
    tallest = max(
        max(sizes[b * grid.per_band : (b + 1) * grid.per_band], default=1) for b in range(grid.bands)
    )
    band_h = (tallest - 1) * MIN_GAP["dy"] / 2.0 + MIN_GAP["dy"]
    need = band_h * grid.bands / (0.8 if grid.bands > 1 else 1.0)
    lo, hi = FIT_ASPECT
    return float(width), float(min(max(need, lo * width), hi * width))


@dataclass(frozen=True)
class _Grid:
    bands: int
    per_band: int
    dx: float
    band_h: float
    sub: int

    def capacity(self) -> int:
        """Items one column holds at the minimum spacing."""
        return int(self.sub * (self.band_h / MIN_GAP["dy"]) + 1)


def _grid(columns: int, tallest: int, width: float, height: float) -> _Grid:
    """Bands and sub-columns for ``columns`` anchor columns (plus the boundaries' column) of
    at most ``tallest`` items in a ``width`` × ``height`` box."""
    columns = max(columns, 1)
    bands = 1
    while bands < _MAX_BANDS and width / (math.ceil(columns / bands) + 1) < MIN_GAP["dx"]:
        bands += 1
    per_band = math.ceil(columns / bands)
    dx = width / (per_band + (1 if per_band > 1 else 2))
    band_h = height / bands * (0.8 if bands > 1 else 1.0)
    sub = 1
    while sub < _MAX_SUBCOLUMNS and (tallest - 1) * MIN_GAP["dy"] > sub * band_h:
        if 0.9 * dx / (sub + 1) < MIN_GAP["dx"] * 0.9:
            break
        sub += 1
    return _Grid(bands, per_band, dx, band_h, sub)


def layered_positions(
    layer: dict, edges, *, width: float, height: float, boundaries=(SUCCESS_ID, FAILURE_ID)
) -> dict:
    """Fixed positions ``{item: (x, y)}`` filling a ``width`` × ``height`` box.

    Args:
        layer: ``{item: column}`` for every item but the boundaries (any integers: empty
            columns are closed up).
        edges: ``(u, v)`` pairs between items, boundaries included.
        width, height: the box, in canvas pixels.
        boundaries: items drawn in a last column at the right, in this order top to bottom.
    """
    cols = sorted(set(layer.values()))
    rank = {c: i for i, c in enumerate(cols)}
    L = len(cols)
    full = {it: rank[c] for it, c in layer.items()}
    for b in boundaries:
        full[b] = L
    columns = order_layers(full, edges, pinned=L)
    body = columns[:L]
    grid = _grid(L, max((len(c) for c in body), default=1), width, height)
    pos: dict = {}
    x0, y0 = -width / 2.0, -height / 2.0
    for band in range(grid.bands):
        cols_here = list(range(band * grid.per_band, min((band + 1) * grid.per_band, L)))
        if not cols_here:
            continue
        # A column too tall for the band splits into staggered sub-columns and is given that
        # many widths; the boundaries' column closes every band at the right.
        sub = [
            int(min(_MAX_SUBCOLUMNS, max(1, math.ceil((len(body[c]) - 1) * MIN_GAP["dy"] / grid.band_h))))
            for c in cols_here
        ]
        # The boundaries' column is as wide as their boxes need: at least `_BOUNDARY_GAP`
        # from the last column's centre to theirs.
        rest = sum(sub) - sub[0] / 2.0
        wide = (
            (2.0 * _BOUNDARY_GAP * rest - sub[-1] * width) / (width - _BOUNDARY_GAP)
            if width > _BOUNDARY_GAP
            else 1.0
        )
        units = np.asarray([*sub, max(1.0, wide)], dtype=np.float64)
        centres = np.cumsum(units) - units / 2.0
        unit_px = width / (centres[-1] - centres[0])  # > 0: at least one column and the boundaries
        xs = x0 + (centres - centres[0]) * unit_px
        cy = y0 + (band + 0.5) * height / grid.bands
        for i, c in enumerate(cols_here):
            col, n_sub = body[c], sub[i]
            m = len(col)
            step = min(grid.band_h / max(m - 1, 1), grid.band_h / 2.0 if m > 1 else 0.0)
            sub_dx = 0.9 * unit_px
            for r, it in enumerate(col):
                off = (r % n_sub - (n_sub - 1) / 2.0) * sub_dx
                pos[it] = (xs[i] + off, cy + (r - (m - 1) / 2.0) * step)
    right = x0 + width
    nb = len(boundaries)
    for i, b in enumerate(columns[L] if len(columns) > L else boundaries):
        pos[b] = (right, (i - (nb - 1) / 2.0) * height / 3.0)
    return pos


def layered_layout(
    graph: AnchorGraph,
    g: int = 0,
    *,
    nodes=None,
    x_gap: float = 180.0,
    y_gap: float = 90.0,
    depths: dict | None = None,
) -> dict:
    """Positions ``{node id: (x, y)}`` on a plain grid: x = depth × ``x_gap``, y = the centred
    rank in the column (`order_layers`) × ``y_gap``; ``"SUCCESS"`` above ``"FAILURE"`` one
    column right of the deepest. ``nodes``: the (global) ids to place (default the group's
    anchors); depths are computed on the whole group so a filtered drawing keeps its columns."""
    depth = group_depths(graph, g) if depths is None else depths
    keep = sorted(depth) if nodes is None else sorted(int(n) for n in nodes)
    cols = sorted({depth[n] for n in keep})
    rank = {c: i for i, c in enumerate(cols)}
    visits = graph.node_visits
    layer = {n: rank[depth[n]] for n in sorted(keep, key=lambda n: (-int(visits[n]), n))}
    L = len(cols)
    layer.update({SUCCESS_ID: L, FAILURE_ID: L})
    keep_set = set(keep)
    succ, _ = _successors(graph, g)
    edges = [(s, x) for s in keep for x in succ.get(s, ()) if x in keep_set or isinstance(x, str)]
    columns = order_layers(layer, edges, pinned=L)
    pos: dict = {}
    for c, col in enumerate(columns[:L]):
        for r, n in enumerate(col):
            pos[n] = (cols[c] * x_gap, (r - (len(col) - 1) / 2.0) * y_gap)
    right = (max(cols, default=-1) + 1) * x_gap
    pos[SUCCESS_ID] = (right, -y_gap)
    pos[FAILURE_ID] = (right, y_gap)
    return pos


# ---------------------------------------------------------------- the summary of a large group
def cluster_id(lo: int) -> str:
    """The drawn id of the "+n anchors" cluster whose depths start at ``lo``."""
    return f"cluster:{int(lo)}"


@dataclass(frozen=True)
class Cluster:
    """Anchors of a run of depths that the summary does not draw.

    Attributes:
        lo, hi: the depths it gathers, ``lo`` … ``hi`` (one depth unless the group has more
            than `MAX_CLUSTERS` of them).
        depth: its column, the median depth of its members.
        members: global node ids, most visited first.
    """

    lo: int
    hi: int
    depth: int
    members: tuple[int, ...]

    @property
    def id(self) -> str:
        return cluster_id(self.lo)


@dataclass(frozen=True)
class Chain:
    """A linear run of undrawn anchors (each with one predecessor and one successor) between
    two drawn items, drawn as one edge.

    Attributes:
        src, dst: the drawn anchor (global id) or boundary id at either end.
        interior: the run's anchors in path order.
    """

    src: int | str
    dst: int | str
    interior: tuple[int, ...]

    @property
    def steps(self) -> int:
        """Transitions from ``src`` to ``dst`` along the chain."""
        return len(self.interior) + 1

    @property
    def id(self) -> str:
        return f"chain:{self.interior[0]}"


@dataclass(frozen=True)
class Summary:
    """What one group draws.

    Attributes:
        anchors: drawn anchors (global ids, ascending).
        clusters: "+n anchors" clusters, by depth.
        chains: collapsed linear chains.
        total: anchors in the group.
        depths: ``{node: column}`` of every anchor of the group.
        base: the summary before any cluster was opened (None when none was): its drawing is
            the frame that opened anchors are placed into (`crbc_viz.views.summary_space`).
        opened: one ``(cluster's first depth, anchors it drew)`` per click, in click order.
    """

    anchors: tuple[int, ...]
    clusters: tuple[Cluster, ...]
    chains: tuple[Chain, ...]
    total: int
    depths: dict
    base: Summary | None = None
    opened: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def summarised(self) -> bool:
        return len(self.anchors) < self.total

    def item_of(self) -> dict:
        """``{node: drawn item}``: the anchor itself, its cluster's id, or its chain's id."""
        out: dict = {n: n for n in self.anchors}
        for c in self.clusters:
            out.update(dict.fromkeys(c.members, c.id))
        for ch in self.chains:
            out.update(dict.fromkeys(ch.interior, ch.id))
        return out


def _clicks(opened) -> list[int]:
    """The clicks of ``opened`` in order: ``{lo: clicks}`` (by depth) or a sequence of ``lo``."""
    if opened is None:
        return []
    if isinstance(opened, dict):
        return [int(lo) for lo, k in sorted(opened.items()) for _ in range(max(int(k), 0))]
    return [int(lo) for lo in opened]


def summarise(
    graph: AnchorGraph,
    g: int = 0,
    *,
    max_nodes: int,
    keep=(),
    opened=None,
    depths: dict | None = None,
    box: tuple[float, float] = (1180.0, 446.0),
) -> Summary:
    """The drawing of group ``g``: every anchor when they fit, else a summary (module doc).

    Args:
        graph: the anchor graph.
        g: group index.
        max_nodes: a group with more anchors is summarised; the summary draws half as many
            one by one (clusters and chains take the rest of the room), plus the kept ones.
        keep: global node ids always drawn.
        opened: the clicks on "+n anchors" clusters, each drawing `OPEN_STEP` more of that
            cluster's most visited members: a sequence of the clicked clusters' first depths
            in click order, or ``{lo: clicks}`` (taken by depth).
        depths: columns (default `group_depths`).
        box: the layout box (`layout_box`) whose columns' room bounds what is drawn.

    Raises:
        ValueError: ``max_nodes`` below 1.
    """
    if int(max_nodes) < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes!r}")
    sl = graph.group_slice(g)
    depth = group_depths(graph, g) if depths is None else depths
    ids = list(range(sl.start, sl.stop))
    per_depth: dict[int, int] = {}
    for n in ids:
        per_depth[depth[n]] = per_depth.get(depth[n], 0) + 1
    grid = _grid(len(per_depth), max(per_depth.values(), default=1), *box)
    cap = grid.capacity()
    if len(ids) <= max_nodes and max(per_depth.values(), default=0) <= cap:
        return Summary(tuple(ids), (), (), len(ids), depth)
    visits = graph.node_visits
    by_visits = sorted(ids, key=lambda n: (-int(visits[n]), n))
    shown = {int(n) for n in keep if sl.start <= int(n) < sl.stop} | start_anchors(graph, g)
    used: dict[int, int] = {}
    for n in shown:
        used[depth[n]] = used.get(depth[n], 0) + 1
    room = cap - 1  # one place per column for its cluster
    budget = max(int(max_nodes) // 2, 1)  # clusters and chains take the other half of the room
    for n in by_visits:
        if len(shown) >= budget:
            break
        if n not in shown and used.get(depth[n], 0) < room:
            shown.add(n)
            used[depth[n]] = used.get(depth[n], 0) + 1
    width = max(1, math.ceil((max(per_depth) + 1) / MAX_CLUSTERS))
    succ, pred = _successors(graph, g)

    def fold(drawn: set) -> Summary:
        chains = _chains(ids, drawn, succ, pred)
        in_chain = {n for ch in chains for n in ch.interior}
        rest: dict[int, list[int]] = {}
        for n in by_visits:
            if n not in drawn and n not in in_chain:
                rest.setdefault(depth[n] // width * width, []).append(n)
        clusters = tuple(
            Cluster(lo, lo + width - 1, int(np.median([depth[n] for n in m])), tuple(m))
            for lo, m in sorted(rest.items())
        )
        return Summary(tuple(sorted(drawn)), clusters, tuple(chains), len(ids), depth)

    base = fold(shown)
    clicks = _clicks(opened)
    if not clicks:
        return base
    # A click draws the next most visited members of the cluster as the base summary has it:
    # the base's drawing stays the frame, and each click adds to it (`summary_space`).
    left = {c.lo: list(c.members) for c in base.clusters}
    got: list[tuple[int, tuple[int, ...]]] = []
    for lo in clicks:
        new, left[lo] = left.get(lo, [])[:OPEN_STEP], left.get(lo, [])[OPEN_STEP:]
        got.append((lo, tuple(new)))
        shown.update(new)
    full = fold(shown)
    return Summary(full.anchors, full.clusters, full.chains, full.total, depth, base=base, opened=tuple(got))


def _chains(ids: list[int], shown: set, succ: dict, pred: dict) -> list[Chain]:
    """Linear runs of undrawn anchors (one way in, one way out) between two drawn items."""
    hidden = [n for n in ids if n not in shown]
    linear = {n for n in hidden if len(pred.get(n, ())) == 1 and len(succ.get(n, ())) == 1}
    chains: list[Chain] = []
    for n in hidden:
        if n not in linear or next(iter(pred[n])) in linear:
            continue
        run = [n]
        while True:
            nxt = next(iter(succ[run[-1]]))
            if nxt not in linear or nxt in run:
                break
            run.append(nxt)
        src, dst = next(iter(pred[n])), next(iter(succ[run[-1]]))
        if src in shown and (dst in shown or isinstance(dst, str)):
            chains.append(Chain(src, dst, tuple(run)))
    return chains


def _summary_items(graph: AnchorGraph, g: int, summary: Summary) -> tuple[dict, list]:
    """``({item: column}, [(u, v)])`` of the drawn graph (boundaries in edges, not columns)."""
    item = summary.item_of()
    busiest = sorted(summary.anchors, key=lambda n: (-int(graph.node_visits[n]), n))
    layer: dict = {n: summary.depths[n] for n in busiest}  # ties in the order: most visited first
    layer.update({c.id: c.depth for c in summary.clusters})
    edges = group_edges(graph, g)
    src = graph.pair_node[graph.edge_pair[edges]].tolist()
    dst = graph.edge_next[edges].tolist()
    pairs = set()
    for s, x in zip(src, dst):
        a = item.get(s)
        b = SUCCESS_ID if x == SUCCESS else FAILURE_ID if x == FAILURE else item.get(x)
        if a is None or b is None:  # a filtered drawing leaves the other anchors out
            continue
        if a != b and not str(a).startswith("chain:") and not str(b).startswith("chain:"):
            pairs.add((a, b))
    pairs.update((ch.src, ch.dst) for ch in summary.chains if ch.src != ch.dst)
    return layer, sorted(pairs, key=str)


def summary_positions(graph: AnchorGraph, g: int, summary: Summary, *, box: tuple[float, float]) -> dict:
    """Positions ``{item: (x, y)}`` of every drawn item of ``summary`` (anchors, clusters, the
    two boundaries) filling ``box``."""
    layer, edges = _summary_items(graph, g, summary)
    return layered_positions(layer, edges, width=box[0], height=box[1])
