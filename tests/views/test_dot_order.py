"""Graphviz's ``dot`` as a second opinion on the order within the layout's columns
(`crbc_viz.views.dot_order`): the order drawn never crosses more edges than the layout's own, and
crosses fewer on a bundled group; a missing, failing or hanging ``dot`` leaves the layout's own
order (the hanging one killed within the bound); what ``dot`` reads holds integer ids only."""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from pathlib import Path

import pytest

from crbc_viz import build_graph, load_rollouts
from crbc_viz.views import dot_order, layout
from crbc_viz.views.layout import (
    FAILURE_ID,
    SUCCESS_ID,
    _centred,
    _summary_items,
    crossings,
    layout_box,
    order_layers,
    summarise,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = {
    "sokoban": REPO / "sample_rollouts" / "sokoban" / "sokoban.jsonl",
    "textworld": REPO / "sample_rollouts" / "textworld" / "textworld_cooking.jsonl.gz",
}
HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(
    not HAVE_DOT, reason="graphviz's dot is not installed (apt-get install graphviz)"
)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(dot_order, "DOT", "dot")
    dot_order.clear_cache()
    yield
    dot_order.clear_cache()


def _columns_input(graph, g: int) -> tuple[dict, list, int]:
    """What `layered_positions` hands `order_layers` for the whole group ``g``."""
    summary = summarise(graph, g, max_nodes=10**6, box=layout_box(620))
    layer, edges = _summary_items(graph, g, summary)
    cols = {c: i for i, c in enumerate(sorted(set(layer.values())))}
    full = {it: cols[c] for it, c in layer.items()}
    full[SUCCESS_ID] = full[FAILURE_ID] = len(cols)
    return full, edges, len(cols)


def _home_and_drawn(monkeypatch, layer: dict, edges, pinned) -> tuple[list, list]:
    """(the layout's own order, the order `order_layers` returns), from one run."""
    seen = []
    real = dot_order.prefer

    def spy(home, *args, **kw):
        seen.append([list(c) for c in home])
        return real(home, *args, **kw)

    monkeypatch.setattr(layout, "prefer", spy)
    drawn = order_layers(layer, edges, pinned=pinned)
    assert len(seen) == 1
    return seen[0], drawn


def _same_columns(a: list, b: list) -> bool:
    return [sorted(map(str, c)) for c in a] == [sorted(map(str, c)) for c in b]


@needs_dot
def test_bundled_groups_never_cross_more_and_one_crosses_fewer(monkeypatch, capsys):
    fewer = []
    for name, path in SAMPLES.items():
        graph = build_graph(load_rollouts(path))
        for g in range(len(graph.batch.group_traj_offsets) - 1):
            layer, edges, L = _columns_input(graph, g)
            home, drawn = _home_and_drawn(monkeypatch, layer, edges, L)
            assert _same_columns(home, drawn), (name, g)
            assert drawn[L] == home[L] == [SUCCESS_ID, FAILURE_ID]  # the boundaries keep their order
            before, after = crossings(_centred(home), edges), crossings(_centred(drawn), edges)
            with capsys.disabled():
                print(f"\n{name} group {g} ({len(layer) - 2} anchors): crossings {before} -> {after}", end="")
            assert after <= before, (name, g)
            if after < before:
                fewer.append((name, g, before, after))
    # TextWorld task-09 (104 anchors, the Graph page's test group): 9 crossings, dot's order 7.
    assert ("textworld", 9, 9, 7) in fewer


@needs_dot
@pytest.mark.parametrize("seed", range(12))
def test_random_layered_graphs_never_cross_more(monkeypatch, seed):
    rng = random.Random(seed)
    L = rng.randint(3, 7)
    layer = {f"v{i}": rng.randrange(L) for i in range(rng.randint(8, 30))}
    layer.update({c: c_i for c_i, c in enumerate([f"col{c}" for c in range(L)])})  # every column used
    names = list(layer)
    edges = [(rng.choice(names), rng.choice(names)) for _ in range(rng.randint(10, 60))]
    home, drawn = _home_and_drawn(monkeypatch, layer, edges, None)
    assert _same_columns(home, drawn)
    assert crossings(_centred(drawn), edges) <= crossings(_centred(home), edges)


def _fake_dot(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fake-dot"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.fixture(scope="module")
def tw9():
    graph = build_graph(load_rollouts(SAMPLES["textworld"]))
    return _columns_input(graph, 9)


@pytest.mark.parametrize("how", ["missing", "fails", "garbage"])
def test_no_usable_dot_keeps_the_layouts_order(monkeypatch, tmp_path, tw9, how, caplog):
    layer, edges, L = tw9
    monkeypatch.setattr(dot_order, "DOT", "crbc-viz-no-such-dot")
    home = order_layers(layer, edges, pinned=L)
    dot_order.clear_cache()
    fake = {
        "missing": "crbc-viz-no-such-dot",
        "fails": _fake_dot(tmp_path, "cat >/dev/null; echo boom >&2; exit 3"),
        "garbage": _fake_dot(
            tmp_path, "cat >/dev/null; echo 'node nX 1 2 3'; echo 'node n0 1 up 3'; printf '\\377\\376\\n'"
        ),
    }[how]
    monkeypatch.setattr(dot_order, "DOT", fake)
    with caplog.at_level("DEBUG", logger=dot_order.__name__):
        assert order_layers(layer, edges, pinned=L) == home
    assert any("own order is kept" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(os.name != "posix", reason="the fake dot is a shell script")
def test_a_hanging_dot_is_killed_within_the_bound(monkeypatch, tmp_path, tw9):
    layer, edges, L = tw9
    pid_file = tmp_path / "pid"
    # The shell does not exec sleep: a kill of the shell alone would leave sleep holding the pipe.
    monkeypatch.setattr(dot_order, "DOT", _fake_dot(tmp_path, f"echo $$ > {pid_file}; sleep 60; echo done"))
    monkeypatch.setattr(dot_order, "TIMEOUT_S", 0.5)
    columns = [[i for i, it in enumerate(layer) if layer[it] == c] for c in range(L + 1)]
    t0 = time.monotonic()
    assert dot_order.dot_columns(columns, [(0, 1)], pinned=L) is None
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5 + 10.0, elapsed  # the bound plus room for a busy machine: far below the 60 s sleep
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@needs_dot
def test_dot_runs_once_per_drawing(monkeypatch, tmp_path, tw9):
    layer, edges, L = tw9
    calls = tmp_path / "calls"
    monkeypatch.setattr(dot_order, "DOT", _fake_dot(tmp_path, f"echo x >> {calls}; exec dot \"$@\""))
    first = order_layers(layer, edges, pinned=L)
    assert order_layers(layer, edges, pinned=L) == first
    assert calls.read_text().count("x") == 1


def test_what_dot_reads_holds_integer_ids_only(monkeypatch):
    got = []
    monkeypatch.setattr(dot_order, "_run", lambda source, timeout: got.append(source))
    layer = {'a"; rm -rf /': 0, "b\n}": 1, "cluster:3": 1, SUCCESS_ID: 2, FAILURE_ID: 2}
    edges = [
        ('a"; rm -rf /', "b\n}"),
        ('a"; rm -rf /', "cluster:3"),
        ("b\n}", SUCCESS_ID),
        ("cluster:3", FAILURE_ID),
    ]
    order_layers(layer, edges, pinned=2)
    assert got
    for line in got[0].splitlines()[3:-1]:
        assert re.fullmatch(r"[{}rnk=a-z0-9; >\-\[\]]+", line), line
        assert not re.search(r"rm|cluster|SUCCESS", line)


#: The random layered graph (seed 9 above: 33 items in 6 columns, back edges and one edge within
#: a column) on which igraph 1.0.0's ``layout_sugiyama`` segfaulted the process on its second call.
_CRASHER = """
import random, sys
from crbc_viz.views.layout import order_layers
rng = random.Random(9)
L = rng.randint(3, 7)
layer = {f"v{i}": rng.randrange(L) for i in range(rng.randint(8, 30))}
layer.update({c: c_i for c_i, c in enumerate([f"col{c}" for c in range(L)])})
names = list(layer)
edges = [(rng.choice(names), rng.choice(names)) for _ in range(rng.randint(10, 60))]
for _ in range(5):
    cols = order_layers(layer, edges)
print(sorted(map(len, cols)))
"""


def test_the_graph_that_crashed_igraph_draws_again_and_again():
    """In a child process (a segfault must fail this test, not the test run): five layouts of
    the graph that crashed igraph 1.0.0 finish, whichever igraph is installed (1.0 is not
    called; 0.11 is)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "[5, 5, 5, 5, 6, 7]", (
        proc.stdout
    )  # the columns' sizes, counted from its layers


def test_an_unsafe_igraph_is_never_asked_for_a_sugiyama_layout(monkeypatch):
    """igraph from 1.0 on: the layout orders the columns without `layout_sugiyama` (the given
    order starts instead), every item in its column."""

    class Unsafe:
        __version__ = "1.0.0"

        class Graph:
            def __init__(self, *a, **k):
                raise AssertionError("layout_sugiyama of igraph 1.0 must not be called")

    assert not dot_order.sugiyama_safe(Unsafe) and dot_order.sugiyama_safe(
        type("Old", (), {"__version__": "0.11.9"})
    )
    monkeypatch.setattr(layout, "require", lambda name, why: Unsafe)
    layer = {"a": 0, "b": 1, "c": 1, "d": 2}
    cols = order_layers(layer, [("a", "b"), ("a", "c"), ("c", "d"), ("d", "a")])
    assert [sorted(c) for c in cols] == [["a"], ["b", "c"], ["d"]]
