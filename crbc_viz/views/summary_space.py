"""Where a summary's clusters and opened anchors go: in free space, never on a drawn node or
its label, and without moving anything already drawn.

Pure: numpy only. Every drawn item has a footprint, the rectangle its shape and its label
cover in canvas px around its position (`footprint`: a vis-network dot's label hangs below the
dot, a box holds its label). A summary is placed in two steps (`frame_positions`):

1. The summary before any cluster was opened (`Summary.base`) is laid out in layers
   (`crbc_viz.views.layout.summary_positions`); a cluster whose footprint touches another
   item's is moved to the nearest free place, staying near its column (up and down first;
   where its column is full, above or below the drawing).
2. Each click on a cluster (`Summary.opened`, in click order) places the anchors it draws in
   the free space nearest to that cluster, inside the frame of the first drawing, so that the
   fitted view does not change and nothing drawn before moves.

Free space is found on a raster of 4 px cells (a summed-area table answers "is this rectangle
empty" for every cell at once); footprints are kept `GAP` px apart.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable

import numpy as np

from ..graph import AnchorGraph
from .layout import FAILURE_ID, SUCCESS_ID, Summary, summary_positions

__all__ = [
    "NARROWEST_SCALE",
    "GAP",
    "CELL",
    "text_width",
    "footprint",
    "overlaps",
    "FreeSpace",
    "frame_positions",
    "base_positions",
    "ROUNDNESS",
    "chain_label",
    "curve_label_at",
    "edge_label_rects",
]

#: Smallest distance between two footprints (canvas px).
GAP = 4.0
#: Raster cell (canvas px).
CELL = 4.0
#: A cluster's distance to where the layers put it weighs x (leaving its column) this many
#: times more than y; the frame grows by up to this many clusters' heights above and below.
CLUSTER_WEIGHT = (4.0, 1.0)
CLUSTER_ROOM = 1.0
#: Footprints take labels at least ``min label px / NARROWEST_SCALE`` (canvas px): below this
#: fitted scale the page's script draws labels larger in canvas units (`crbc_viz.views.graph_page`)
#: — for the 10 px minimum, 16 px labels grow below 0.64. Their generous glyph width and line
#: height cover the ~10 % growth of an 800 px window (scale 0.58) on a 1440 px layout.
NARROWEST_SCALE = 0.64
#: Edges are vis-network ``curvedCW`` curves of this roundness (`crbc_viz.views.graph_view`).
ROUNDNESS = 0.18
#: A label's line height per px of font, and its mean glyph width (Arial, generous).
_LINE = 1.2
_GLYPH = 0.62


def text_width(text: str, font_px: float) -> float:
    """A generous width (px) of the widest line of ``text`` at ``font_px``."""
    return max((len(line) for line in str(text).split("\n")), default=0) * _GLYPH * float(font_px)


def footprint(shape: str, size: float, label: str, font_px: float, margin: float = 8.0) -> tuple:
    """``(left, top, right, bottom)`` offsets from an item's position of what it covers: a
    ``"dot"`` of radius ``size`` with its label below (vis-network puts the label's top half a
    line plus 4 px below the dot, as measured in Chromium), or a ``"box"`` around its label."""
    f = float(font_px)
    w = text_width(label, f)
    lines = max(1, str(label).count("\n") + 1)
    if shape == "box":
        hw, hh = w / 2.0 + margin + 2.0, _LINE * f * lines / 2.0 + margin + 2.0
        return (-hw, -hh, hw, hh)
    hw = max(float(size), w / 2.0)
    return (-hw, -float(size), hw, float(size) + (4.0 + f / 2.0 + _LINE * f * lines if label else 0.0))


def overlaps(a: tuple, b: tuple, gap: float = 0.0) -> bool:
    """Whether two absolute rectangles ``(x0, y0, x1, y1)`` come closer than ``gap``."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _at(pos: tuple, fp: tuple) -> tuple:
    return (pos[0] + fp[0], pos[1] + fp[1], pos[0] + fp[2], pos[1] + fp[3])


class FreeSpace:
    """A raster of the frame ``(x0, y0, x1, y1)`` with the cells that footprints cover."""

    def __init__(self, frame: tuple, cell: float = CELL):
        self.x0, self.y0 = float(frame[0]), float(frame[1])
        self.cell = float(cell)
        self.w = max(1, int(math.ceil((frame[2] - self.x0) / cell)))
        self.h = max(1, int(math.ceil((frame[3] - self.y0) / cell)))
        self.busy = np.zeros((self.h, self.w), dtype=bool)

    def _cells(self, rect: tuple) -> tuple[int, int, int, int]:
        c = self.cell
        return (
            int(math.floor((rect[0] - self.x0) / c)),
            int(math.floor((rect[1] - self.y0) / c)),
            int(math.ceil((rect[2] - self.x0) / c)),
            int(math.ceil((rect[3] - self.y0) / c)),
        )

    def take(self, rect: tuple, gap: float = GAP) -> None:
        """Mark the cells ``rect`` (absolute, grown by ``gap`` / 2 on every side) covers."""
        i0, j0, i1, j1 = self._cells(
            (rect[0] - gap / 2, rect[1] - gap / 2, rect[2] + gap / 2, rect[3] + gap / 2)
        )
        self.busy[max(j0, 0) : max(j1, 0), max(i0, 0) : max(i1, 0)] = True

    def nearest(self, fp: tuple, want: tuple, weight: tuple = (1.0, 1.0), gap: float = GAP):
        """The position nearest ``want`` (distance with ``weight`` on x and y) at which the
        footprint ``fp`` lies inside the frame on free cells only; None when there is none."""
        c, g = self.cell, gap / 2.0
        # Cells a footprint centred in cell (j, i) covers: rows j + a … j + b, columns i + l … i + r.
        lo_i, lo_j = int(math.floor((fp[0] - g) / c)), int(math.floor((fp[1] - g) / c))
        hi_i, hi_j = int(math.ceil((fp[2] + g) / c)), int(math.ceil((fp[3] + g) / c))
        S = np.zeros((self.h + 1, self.w + 1), dtype=np.int64)
        S[1:, 1:] = self.busy.cumsum(0).cumsum(1)
        jj = np.arange(self.h)[:, None]
        ii = np.arange(self.w)[None, :]
        r0, r1, c0, c1 = jj + lo_j, jj + hi_j, ii + lo_i, ii + hi_i
        inside = (r0 >= 0) & (r1 <= self.h) & (c0 >= 0) & (c1 <= self.w)
        r0, r1 = np.clip(r0, 0, self.h), np.clip(r1, 0, self.h)
        c0, c1 = np.clip(c0, 0, self.w), np.clip(c1, 0, self.w)
        filled = S[r1, c1] - S[r0, c1] - S[r1, c0] + S[r0, c0]
        ok = inside & (filled == 0)
        if not ok.any():
            return None
        x = self.x0 + (ii + 0.5) * c
        y = self.y0 + (jj + 0.5) * c
        cost = ((x - want[0]) * weight[0]) ** 2 + ((y - want[1]) * weight[1]) ** 2
        cost = np.where(ok, cost, np.inf)
        j, i = np.unravel_index(int(np.argmin(cost)), cost.shape)
        return (float(self.x0 + (i + 0.5) * c), float(self.y0 + (j + 0.5) * c))


def chain_label(chain) -> str:
    """The label of a collapsed chain's edge (`crbc_viz.views.layout.Chain`)."""
    return f"⋯ {chain.steps} steps"


def curve_label_at(a: tuple, b: tuple, roundness: float = ROUNDNESS) -> tuple[float, float]:
    """Where vis-network (9.1) puts the label of a ``curvedCW`` edge from ``a`` to ``b``: the
    midpoint of its quadratic Bézier curve, whose control point it sets at
    ``(0.5·roundness + 0.5)·|b − a|`` from ``a``, turned from the chord by that fraction of π."""
    o, r = b[0] - a[0], a[1] - b[1]
    k = 0.5 * roundness + 0.5
    reach, turn = k * math.hypot(o, r), (math.atan2(r, o) + k * math.pi) % (2 * math.pi)
    via = (a[0] + reach * math.sin(turn), a[1] + reach * math.cos(turn))
    return (0.25 * (a[0] + b[0]) + 0.5 * via[0], 0.25 * (a[1] + b[1]) + 0.5 * via[1])


def edge_label_rects(labels, pos: dict, font_px: float) -> list[tuple]:
    """The rectangles (canvas px) that the ``(src, dst, text)`` edge labels cover, for the
    edges whose two ends have a place in ``pos`` (a self-loop has no label here)."""
    out = []
    for src, dst, text in labels:
        if src == dst or src not in pos or dst not in pos:
            continue
        x, y = curve_label_at(pos[src], pos[dst])
        w, h = text_width(text, font_px), font_px * _LINE
        out.append((x - w / 2, y - h / 2, x + w / 2, y + h / 2))
    return out


def _frame(pos: dict, fps: dict) -> tuple:
    rects = [_at(pos[it], fps[it]) for it in pos]
    return (
        min(r[0] for r in rects),
        min(r[1] for r in rects),
        max(r[2] for r in rects),
        max(r[3] for r in rects),
    )


def _place(space: FreeSpace, fp: tuple, want: tuple, weight: tuple) -> tuple[tuple, FreeSpace]:
    """(the free place nearest ``want``, the raster): when the frame is full, the raster grows
    step by step around it (the drawing then grows, its fitted view shrinks)."""
    got = space.nearest(fp, want, weight)
    while got is None and space.w * space.cell < 20000:
        g = 120.0
        wide = FreeSpace(
            (
                space.x0 - g,
                space.y0 - g,
                space.x0 + space.w * space.cell + g,
                space.y0 + space.h * space.cell + g,
            ),
            space.cell,
        )
        oi, oj = int(round((space.x0 - wide.x0) / space.cell)), int(round((space.y0 - wide.y0) / space.cell))
        wide.busy[oj : oj + space.h, oi : oi + space.w] = space.busy
        space = wide
        got = space.nearest(fp, want, weight)
    return (got if got is not None else (float(want[0]), float(want[1]))), space


def frame_positions(
    base_pos: dict,
    summary: Summary,
    fp_of: Callable[[object], tuple],
    *,
    inset: float = 6.0,
    edge_labels: Callable[[dict], list[tuple]] | None = None,
) -> dict:
    """Positions ``{item: (x, y)}`` of every drawn item of ``summary``.

    Args:
        base_pos: the layered positions of ``summary.base`` (or of ``summary`` when no cluster
            is opened): anchors, clusters and the boundaries.
        summary: what is drawn.
        fp_of: an item's footprint (`footprint`), for the items of the base drawing and the
            opened anchors; a cluster's is taken at its size in the base drawing.
        inset: opened anchors stay this far inside the frame of the base drawing.
        edge_labels: given positions, the rectangles of the edge labels drawn between them
            (`edge_label_rects`): no cluster or opened anchor is put on one.
    """
    base = summary.base or summary
    clusters = [c.id for c in base.clusters]
    fps = {it: fp_of(it) for it in base_pos}
    pos = dict(base_pos)
    frame = _frame(pos, fps)
    # 1. Clusters off every other footprint, the largest first, in their column: where the
    # column is full, above or below the drawing (the frame grows by up to one cluster).
    fixed = [it for it in pos if it not in set(clusters)]
    tall = max((fps[c][3] - fps[c][1] for c in clusters), default=0.0) * CLUSTER_ROOM
    space = FreeSpace((frame[0], frame[1] - tall, frame[2], frame[3] + tall))
    for it in fixed:
        space.take(_at(pos[it], fps[it]))
    for rect in edge_labels({it: pos[it] for it in fixed}) if edge_labels else ():
        space.take(rect)
    by_size = sorted(clusters, key=lambda cid: (fps[cid][0], cid))  # the widest footprint first
    for cid in by_size:
        pos[cid], space = _place(space, fps[cid], pos[cid], CLUSTER_WEIGHT)
        space.take(_at(pos[cid], fps[cid]))
    frame = _frame(pos, fps)
    # 2. Each click's anchors in the free space nearest its cluster, inside the first frame.
    inner = (frame[0] + inset, frame[1] + inset, frame[2] - inset, frame[3] - inset)
    room = FreeSpace(inner)
    for it in pos:
        room.take(_at(pos[it], fps[it]))
    taken: set = set()
    for lo, new in summary.opened:
        # the labels of the edges between what is placed so far, earlier clicks' anchors included
        for rect in set(edge_labels(pos) if edge_labels else ()) - taken:
            room.take(rect)
            taken.add(rect)
        near = pos.get(f"cluster:{int(lo)}")
        for n in new:
            fp = fp_of(n)
            want = near if near is not None else (0.0, 0.0)
            pos[n], room = _place(room, fp, want, (1.5, 1.0))
            room.take(_at(pos[n], fp))
    # A cluster that its clicks emptied is not drawn.
    drawn = set(summary.anchors) | {c.id for c in summary.clusters} | {SUCCESS_ID, FAILURE_ID}
    return {it: xy for it, xy in pos.items() if it in drawn}


#: The layered positions of a base summary per graph: reopening the same drawing (a click on
#: a cluster) reuses them instead of laying the group out again.
_BASE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def base_positions(graph: AnchorGraph, g: int, summary: Summary, *, box: tuple[float, float]) -> dict:
    """`summary_positions` of ``summary.base`` (or ``summary``), remembered per graph for the
    same drawn items and box (a few drawings per graph)."""
    base = summary.base or summary
    key = (
        int(g),
        base.anchors,
        tuple((c.id, c.depth, hash(c.members)) for c in base.clusters),
        tuple((ch.src, ch.dst) for ch in base.chains),
        tuple(float(b) for b in box),
        tuple(base.depths[n] for n in base.anchors),
    )
    with _LOCK:  # app sessions run in threads
        got = _BASE.setdefault(graph, {}).get(key)
    if got is None:
        got = summary_positions(graph, g, base, box=box)
        with _LOCK:
            memo = _BASE.setdefault(graph, {})
            while len(memo) >= 8:
                memo.pop(next(iter(memo)))
            memo[key] = got
    return dict(got)
