"""The order within the layout's columns that Graphviz's ``dot`` finds, where it crosses fewer edges.

`crbc_viz.views.layout.order_layers` orders each column with its own heuristics (igraph's
Sugiyama layout, barycentre sweeps, seeded restarts); `prefer` also asks ``dot`` (Debian's
``graphviz``; optional) for the order of the same columns and keeps whichever order crosses
fewer edges, the layout's own on a tie, so a drawing is never worse for it. Positions are still
placed in Python (`crbc_viz.views.layout.layered_positions`): only the order comes from ``dot``.

What ``dot`` reads is made here from integer indices only (``n0``, ``n1``, … and ``r0``, … for
the columns), never an anchor's text; the columns are pinned with ``rank=same`` subgraphs
hanging off an invisible chain ``r0 → r1 → …``, so rank ``c`` is column ``c``; a pinned column
(the boundaries) keeps its order through invisible edges between its items. ``dot`` runs as a
child process without a shell, with a time bound (`TIMEOUT_S`): past it the child is killed.
A ``dot`` that is missing, fails, prints what cannot be read or runs past the bound leaves the
layout's own order, with one debug line. Answers (failures included) are remembered per input,
so the app's redraws of one graph run ``dot`` once.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["DOT", "TIMEOUT_S", "dot_columns", "prefer", "clear_cache", "sugiyama_safe"]

log = logging.getLogger(__name__)

#: The Graphviz executable looked up on ``PATH`` (or a path); the environment variable
#: ``CRBC_VIZ_DOT`` names another, and an empty one turns ``dot`` off.
DOT = os.environ.get("CRBC_VIZ_DOT", "dot")
#: Seconds ``dot`` may run for one drawing before it is killed and the layout's own order kept.
TIMEOUT_S = 2.0
#: Drawings whose ``dot`` answer is remembered.
_CACHE_SIZE = 64
_CACHE: OrderedDict[tuple, list[list[int]] | None] = OrderedDict()
_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every remembered ``dot`` answer."""
    with _LOCK:
        _CACHE.clear()


def _source(columns: list[list[int]], edges: list[tuple[int, int]], pinned: int | None) -> str:
    """The dot program of ``columns`` (item indices) and ``edges`` (index pairs)."""
    col = {i: c for c, items in enumerate(columns) for i in items}
    out = [
        "digraph G {",
        "graph [rankdir=LR, splines=false, nodesep=0.1, ranksep=0.3];",
        "node [shape=point, width=0.05, label=\"\"];",
    ]
    for c, items in enumerate(columns):
        out.append(f"{{rank=same; r{c}; " + " ".join(f"n{i};" for i in items) + "}")
        if c:
            out.append(f"r{c - 1} -> r{c} [style=invis];")
    if pinned is not None and 0 <= pinned < len(columns):
        fixed = columns[pinned]
        out.extend(f"n{a} -> n{b} [style=invis];" for a, b in zip(fixed, fixed[1:]))
    for u, v in sorted(set(edges)):
        cu, cv = col[u], col[v]
        if cu < cv:
            out.append(f"n{u} -> n{v} [minlen={cv - cu}];")
        elif cv < cu:  # drawn the other way round: the rank constraint must still hold
            out.append(f"n{v} -> n{u} [minlen={cu - cv}];")
        # an edge within a column is left to the comparison (`prefer`): dot would pin its ends
    out.append("}")
    return "\n".join(out) + "\n"


def _run(source: str, timeout: float) -> str | None:
    """``dot -Tplain`` of ``source``, or None (a debug line says why)."""
    exe = shutil.which(DOT) if DOT else None
    if exe is None:
        log.debug("graphviz %r not found on PATH: the layout's own order is kept", DOT)
        return None
    try:
        proc = subprocess.Popen(
            [exe, "-Tplain"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",  # what it prints is parsed or refused, never decoded to a crash
            start_new_session=True,  # its own process group: a kill takes any child of it too
        )
    except OSError as exc:
        log.debug("graphviz %s could not start (%s): the layout's own order is kept", exe, exc)
        return None
    try:
        out, err = proc.communicate(source, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        log.debug("graphviz %s ran past %.1f s and was killed: the layout's own order is kept", exe, timeout)
        return None
    except OSError as exc:
        _kill(proc)
        log.debug("graphviz %s failed (%s): the layout's own order is kept", exe, exc)
        return None
    if proc.returncode != 0:
        log.debug(
            "graphviz %s exited %s (%s): the layout's own order is kept", exe, proc.returncode, err[:200]
        )
        return None
    return out


def _kill(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and its process group, and reap it without waiting on its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        try:
            pipe.close()
        except OSError:
            pass
    proc.wait()


def _parse(plain: str, columns: list[list[int]]) -> list[list[int]] | None:
    """Each column's items top to bottom from ``dot -Tplain`` output (y grows upwards)."""
    ys: dict[int, float] = {}
    for line in plain.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "node" and parts[1].startswith("n"):
            try:
                ys[int(parts[1][1:])] = float(parts[3])
            except ValueError:
                return None
    if any(i not in ys for items in columns for i in items):
        return None
    return [sorted(items, key=lambda i: (-ys[i], i)) for items in columns]


def dot_columns(
    columns: list[list[int]], edges, *, pinned: int | None = None, timeout: float | None = None
) -> list[list[int]] | None:
    """``dot``'s order of the items of each of ``columns`` (integer indices; any order in a
    column), keeping column ``pinned`` as given; None when ``dot`` gave no usable answer.
    Remembered per input."""
    source = _source(columns, [(int(u), int(v)) for u, v in edges], pinned)
    key = (source, DOT)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            got = _CACHE[key]
            return None if got is None else [list(c) for c in got]
    plain = _run(source, TIMEOUT_S if timeout is None else float(timeout))
    got = None if plain is None else _parse(plain, columns)
    if plain is not None and got is None:
        log.debug("graphviz output could not be read: the layout's own order is kept")
    if got is not None and pinned is not None and 0 <= pinned < len(columns):
        got[pinned] = list(columns[pinned])
    with _LOCK:
        _CACHE[key] = got
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return None if got is None else [list(c) for c in got]


def prefer(
    home: list[list], edges, score: Callable[[list[list]], int], *, pinned: int | None = None
) -> list[list]:
    """``home`` (each column's items top to bottom), or ``dot``'s order of the same columns
    when ``score`` (edge crossings) gives it strictly fewer.

    Args:
        home: the layout's own order.
        edges: ``(u, v)`` pairs between items.
        score: crossings of an order (fewer is better).
        pinned: a column whose order is kept.
    """
    items = [it for col in home for it in col]
    if len(items) < 3:
        return home
    idx = {it: i for i, it in enumerate(items)}
    got = dot_columns(
        [[idx[it] for it in col] for col in home],
        [(idx[u], idx[v]) for u, v in edges if u != v and u in idx and v in idx],
        pinned=pinned,
    )
    if got is None:
        return home
    theirs = [[items[i] for i in col] for col in got]
    return theirs if score(theirs) < score(home) else home


def sugiyama_safe(igraph) -> bool:
    """Whether the layout may call this igraph's ``layout_sugiyama`` (the other order it weighs
    against dot's): igraph 1.0.0's corrupts its heap on some layered graphs (a random 33-node
    graph with back edges segfaults the process on its second call; 0.11.9 draws it), so from
    1.0 on it is not called, until a release is shown safe (`tests/views/test_dot_order.py`
    runs such graphs; the test environment pins 0.11.9 in constraints.txt)."""
    try:
        return int(str(igraph.__version__).split(".")[0]) < 1
    except (AttributeError, ValueError):
        return False
