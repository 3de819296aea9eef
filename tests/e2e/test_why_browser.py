""" "Why this number" in the real app (`streamlit run app.py`, Debian's headless Chromium, 1280 px):
a click on an edge of the Graph page's graph (its on-screen position from vis-network's own
positions inside the iframe) opens the panel, which stays open through the rerun the click
causes, and a click on a step of the Trajectories page (a cell of the rollouts table, and a row
of the blamed-steps st.dataframe) shows the same panel. Every number of the panel's per-visit
table, and its V / Q / credit / advantage lines, equal ``crbc-viz score``'s output for those
steps. Screenshots go to ``test-output/``."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
TOY = "sample_rollouts/toy/toy_group.jsonl"
COLS = ("value", "q_value", "credit", "advantage")

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> dict:
    """``crbc-viz score`` of the toy group: ``{(estimator, traj_id, step_idx): row}``."""
    out = tmp_path_factory.mktemp("cli") / "scores.csv"
    names = ("crbc", "visit_local", "shortest_path")
    cmd = [
        sys.executable,
        "-m",
        "crbc_viz",
        "score",
        TOY,
        *(a for n in names for a in ("-e", n)),
        "-o",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    with out.open() as f:
        return {(r["estimator"], r["traj_id"], int(r["step_idx"])): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def url():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-why.log") as u:
        yield u


#: Each estimator's section of a panel: its lines ``{key: [exact, shown]}`` and the rows of its
#: per-visit table ``{column: [exact or null, shown]}``.
PANEL = """(root) => [...root.querySelectorAll('section[data-estimator]')].map((sec) => {
  const tables = sec.querySelectorAll('table'), visits = tables[tables.length - 1];
  const cell = (td) => [td.getAttribute('data-col'), [td.getAttribute('data-val'), td.textContent]];
  return {
    est: sec.getAttribute('data-estimator'),
    lines: Object.fromEntries([...sec.querySelectorAll('.why-ln')].map((l) =>
      [l.getAttribute('data-why'), [l.getAttribute('data-val'), l.querySelector('b').textContent]])),
    visits: [...visits.querySelectorAll('tr')].slice(1).map((tr) =>
      Object.fromEntries([...tr.querySelectorAll('td')].map(cell))),
  };
})"""


def _shown(text: str) -> float:
    return float(text.replace("−", "-"))


def _check_panel(sections: list[dict], cli: dict, estimators: set, first: tuple | None = None) -> int:
    """The panel's numbers are the CLI's: every per-visit cell exactly (and as shown, to 4
    decimals); V, Q, credit and advantage lines those of the first visit. Returns the cells checked."""
    assert {s["est"] for s in sections} == estimators, [s["est"] for s in sections]
    checked = 0
    for sec in sections:
        assert sec["visits"], sec
        for k, row in enumerate(sec["visits"]):
            key = (sec["est"], row["traj_id"][1], int(row["step_idx"][1]))
            if k == 0 and first is not None:
                assert key[1:] == first, (key, first)
            want = cli[key]
            for col in COLS:
                exact, shown = row[col]
                assert abs(float(exact) - float(want[col])) <= 1e-9, (key, col, exact, want[col])
                assert abs(_shown(shown) - float(want[col])) <= 5.01e-5, (key, col, shown, want[col])
                checked += 1
        row0 = cli[(sec["est"], sec["visits"][0]["traj_id"][1], int(sec["visits"][0]["step_idx"][1]))]
        lines = sec["lines"]
        for key, col in (("V", "value"), ("Q", "q_value"), ("credit", "credit"), ("advantage", "advantage")):
            if key in lines:
                assert abs(float(lines[key][0]) - float(row0[col])) <= 1e-9, (sec["est"], key)
                assert abs(_shown(lines[key][1]) - float(row0[col])) <= 5.01e-5, (sec["est"], key)
    return checked


#: Whether both anchors of edge ``%(edge)s`` lie inside the canvas and outside the open panel.
_ENDS_CLEAR = """(() => {
  const e = network.body.edges[%(edge)s], s = network.getScale();
  const c = document.querySelector('#mynetwork canvas').getBoundingClientRect();
  const p = document.getElementById('crbc-why').getBoundingClientRect();
  return [e.from, e.to].every((n) => {
    const d = network.canvasToDOM({x: n.x, y: n.y}), x = c.left + d.x, r = n.options.size * s;
    return x - r >= c.left && x + r <= c.right && (x + r < p.left || x - r > p.right);
  });
})()"""


def _graph_frame(pg, pred: str = "true"):
    """A frame of the page showing a ready graph for which the JS condition ``pred`` holds."""
    for f in pg.frames:
        try:
            ok = f.evaluate(
                "() => typeof network !== 'undefined' && !!network && "
                f"document.body.getAttribute('data-crbc-ready') === '1' && ({pred})"
            )
            if ok:
                return f
        except Exception:  # a frame being replaced by the rerun
            pass
    return None


def test_an_edge_click_explains_its_credit_as_the_cli_scores_it(browser, url, cli):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = ctx.new_page()
    try:
        pg.goto(f"{url}/graph?" + urllib.parse.urlencode({"file": TOY}))
        frame = wait_until(pg, lambda: _graph_frame(pg), "the graph is drawn")
        pg.wait_for_function("() => !!window.__crbcSet", timeout=WAIT_MS)  # the click bridge is up
        # The edge s1 -b-> s2: its middle on screen, from vis-network's positions in the iframe.
        edge = frame.evaluate("() => edges.get().find((e) => e.from === 1 && e.to === 2).id")
        canvas = pg.frame_locator("iframe").first.locator("#mynetwork canvas")
        canvas.scroll_into_view_if_needed()
        at = frame.evaluate(
            "(id) => network.canvasToDOM(network.body.edges[id].edgeType.getPoint(0.5))", edge
        )
        box = canvas.bounding_box()
        pg.mouse.click(box["x"] + at["x"], box["y"] + at["y"])
        # The click reruns the app (it chooses the anchor s1); the redrawn graph opens the panel.
        opened = (
            f"document.body.getAttribute('data-crbc-why-open') === {edge!r} && "
            f"getComputedStyle(document.getElementById('crbc-why')).display === 'block' && "
            f"document.getElementById('crbc-why').getAttribute('data-edge') === {edge!r}"
        )
        frame = wait_until(pg, lambda: _graph_frame(pg, opened), "the panel of the clicked edge is open")
        assert "anchor=s1" in pg.url
        # The panel hides neither end of the edge it explains: both anchors are drawn inside the
        # canvas and outside the panel (it moves to the other side, the view pans).
        clear = opened + f" && {_ENDS_CLEAR % {'edge': repr(edge)}}"
        frame = wait_until(pg, lambda: _graph_frame(pg, clear), "both ends of the edge clear of the panel")
        sections = frame.evaluate(PANEL, frame.query_selector("#crbc-why"))
        # s1 -b-> s2 is taken by t1 (step 1), t3 (step 2) and t4 (step 3).
        assert {(r["traj_id"][1], int(r["step_idx"][1])) for r in sections[0]["visits"]} == {
            ("t1", 1),
            ("t3", 2),
            ("t4", 3),
        }
        assert _check_panel(sections, cli, {"crbc"}) == 12
        # ESTIMATORS.md §14.4: Q(s1, b) = 0.6403, V(s1) = 0.4802, σ(s1) = 0.2772, A^S = +0.5774.
        lines = sections[0]["lines"]
        assert [lines[k][1] for k in ("Q", "V", "sigma", "credit")] == [
            "0.6403",
            "0.4802",
            "0.2772",
            "+0.5774",
        ]
        pg.locator("iframe").first.scroll_into_view_if_needed()
        pg.screenshot(path=str(OUT / "why_graph_panel_1280.png"))
        # The close button closes it, and it stays closed through the rerun that follows.
        inner = pg.frame_locator("iframe").first
        inner.locator("#crbc-why-close").click()
        closed = "getComputedStyle(document.getElementById('crbc-why')).display === 'none' && "
        closed += "!document.body.getAttribute('data-crbc-why-open')"
        wait_until(pg, lambda: _graph_frame(pg, closed), "the panel closed")
    finally:
        ctx.close()


def _grid_row_click(pg, key: str, row: int) -> None:
    """Select row ``row`` of the st.dataframe with ``key`` (its row-marker column)."""
    grid = pg.locator(f".st-key-{key} [data-testid='stDataFrame']").first
    grid.wait_for(timeout=WAIT_MS)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    pg.mouse.click(box["x"] + 12, box["y"] + 35 * (row + 1) + 17)


def _panel_of(pg, first: tuple):
    """The Trajectories page's panel once it explains step ``first`` = (rollout, step_idx)."""
    panel = pg.locator(".crbc-why").first
    if not panel.count():
        return None
    sections = panel.evaluate(PANEL)
    ok = sections and all(
        s["visits"] and (s["visits"][0]["traj_id"][1], int(s["visits"][0]["step_idx"][1])) == first
        for s in sections
    )
    return sections if ok else None


def test_a_step_click_on_the_trajectories_page_opens_the_same_panel(browser, url, cli):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1400})
    pg = ctx.new_page()
    trio = {"crbc", "visit_local", "shortest_path"}
    try:
        pg.goto(f"{url}/trajectories?" + urllib.parse.urlencode({"file": TOY}))
        pg.get_by_text("Why did this fail").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        # A cell of the rollouts table: t3's step 3 (s2 -h-> FAILURE).
        cell = pg.locator("[data-crbc-step='2:3']").first
        cell.scroll_into_view_if_needed()
        cell.click()
        sections = wait_until(pg, lambda: _panel_of(pg, ("t3", 3)), "the panel of t3's step 3")
        assert _check_panel(sections, cli, trio, first=("t3", 3)) == 3 * 4
        pg.locator(".crbc-why").first.scroll_into_view_if_needed()
        pg.screenshot(path=str(OUT / "why_trajectories_panel_1280.png"))
        # A row of the blamed-steps st.dataframe (on_select): t2's most negative crbc step,
        # s1 -d-> s3 at step 1 (credit −9.5263, ESTIMATORS.md §14.4).
        _grid_row_click(pg, "failed_table", 0)
        wait_until(
            pg, lambda: "rollout=t2" in pg.url and pg.get_by_text("credit in t2").count(), "t2's blamed steps"
        )
        _grid_row_click(pg, "worst_table", 0)
        sections = wait_until(pg, lambda: _panel_of(pg, ("t2", 1)), "the panel of t2's step 1")
        assert _check_panel(sections, cli, trio, first=("t2", 1)) == 3 * 4
        crbc = next(s for s in sections if s["est"] == "crbc")
        assert crbc["lines"]["advantage"][1] == "−9.5263"
    finally:
        ctx.close()


def test_the_html_export_explains_an_edge_too(browser, cli, tmp_path):
    """The offline page of `crbc_viz.views.share` (each estimator's graph in an ``<iframe
    srcdoc>``, no server): a click on an edge of its crbc graph opens the same panel, numbers
    those of ``crbc-viz score``."""
    from crbc_viz import load_rollouts
    from crbc_viz.views.share import share

    path = tmp_path / "export.html"
    path.write_text(share(load_rollouts(REPO / TOY), estimators=("crbc", "shortest_path")).page())
    pg = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        pg.goto(path.as_uri())

        def crbc_frame():
            for f in pg.frames:
                try:
                    if f.evaluate(
                        "() => document.body.getAttribute('data-crbc-ready') === '1' && "
                        "document.body.getAttribute('data-crbc-name') === 'graph_crbc'"
                    ):
                        return f
                except Exception:  # the main page, or a frame still loading
                    pass
            return None

        pg.wait_for_function("() => document.querySelectorAll('iframe').length === 2", timeout=WAIT_MS)
        frame = None
        for _ in range(WAIT_MS // 100):
            frame = crbc_frame()
            if frame:
                break
            pg.wait_for_timeout(100)  # polling the frames until the crbc graph is ready
        assert frame is not None, "the crbc graph of the export is not ready"
        frame.frame_element().scroll_into_view_if_needed()
        edge = frame.evaluate("() => edges.get().find((e) => e.from === 0 && e.to === 1).id")
        at = frame.evaluate(
            "(id) => network.canvasToDOM(network.body.edges[id].edgeType.getPoint(0.5))", edge
        )
        box = frame.locator("#mynetwork canvas").bounding_box()
        pg.mouse.click(box["x"] + at["x"], box["y"] + at["y"])
        frame.wait_for_selector(f"#crbc-why[data-edge='{edge}']", timeout=WAIT_MS)
        sections = frame.evaluate(PANEL, frame.query_selector("#crbc-why"))
        # s0 -a-> s1 is taken by t1 and t2 at step 0; §14.4: σ(s0) = 0.0070 < σ_min, A^S = +0.0699.
        assert _check_panel(sections, cli, {"crbc"}) == 2 * 4
        assert sections[0]["lines"]["credit"][1] == "+0.0699"
        pg.screenshot(path=str(OUT / "why_share_export_1280.png"))
    finally:
        pg.close()


def test_a_logged_action_stays_text_in_the_panel(browser, tmp_path):
    """Actions and anchors that are markup or script: the opened panel shows them as text and
    runs nothing (``window.__xss`` stays undefined)."""
    import json

    from crbc_viz import build_graph, load_rollouts, score
    from crbc_viz.views.graph_view import graph_html

    evil = "<img src=x onerror=window.__xss=1>"
    rows = []
    for traj, ok, acts in (
        ("r0", True, [evil, "go"]),
        ("r1", False, ["</script><script>window.__xss=2</script>", "go"]),
    ):
        for i, act in enumerate(acts):
            anchor = "<b onmouseover=window.__xss=3>start</b>" if i == 0 else "mid"
            rows.append(
                {"group_id": "g", "traj_id": traj, "step_idx": i, "action": act, "anchor_obs": anchor}
            )
            rows[-1] |= {"reward": float(ok and i == 1), "done": i == 1, "success": ok}
    log = tmp_path / "xss.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    graph = build_graph(load_rollouts(log))
    page = tmp_path / "xss.html"
    page.write_text(graph_html(graph, score(graph, "crbc", backend="numpy")))
    pg = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        pg.goto(page.as_uri())
        pg.wait_for_selector("body[data-crbc-ready='1']", state="attached", timeout=WAIT_MS)
        edge = pg.evaluate(
            "() => edges.get().find((e) => e.from === 0 && e.to === 1 && e.id.indexOf('#0') > 0).id"
        )
        pg.evaluate("(id) => crbcWhy(id)", edge)
        pg.wait_for_selector("#crbc-why[data-edge]", timeout=WAIT_MS)
        assert pg.evaluate("() => document.querySelector('#crbc-why .why-head b + b').textContent") == evil
        assert pg.evaluate("() => document.querySelectorAll('#crbc-why img, #crbc-why script').length") == 0
        assert pg.evaluate("() => typeof window.__xss") == "undefined"
    finally:
        pg.close()
