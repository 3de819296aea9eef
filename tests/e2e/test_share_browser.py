"""The shared view in a browser with the network blocked: a real notebook calling
``crbc_viz.show`` executed by nbclient on an ipykernel, its HTML output opened in Debian's
headless Chromium; and the page ``crbc-viz html`` writes, opened from ``file://``. Each must
draw its graphs (a canvas with pixels on it in every graph frame), show a rollout's per-step
credit equal to ``crbc-viz score`` on the same data, and ask for nothing outside the file:
every request is recorded and any that is not ``file:``/``data:``/``about:``/``blob:`` is
aborted and fails the test. Screenshots go to ``test-output/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamlit_server import CHROMIUM

pytestmark = pytest.mark.browser

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
SOKOBAN = "sample_rollouts/sokoban/sokoban.jsonl"
GROUP = "sokoban-sample/0/sokoban-task-04"
ESTIMATORS = ("crbc", "grpo")
LOCAL = ("file", "data", "about", "blob")


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> pd.DataFrame:
    """``crbc-viz score`` on the same log, the group's rows."""
    out = tmp_path_factory.mktemp("score") / "scores.parquet"
    est = [a for e in ESTIMATORS for a in ("-e", e)]
    proc = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "score", SOKOBAN, *est, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out)
    run, step, gid = GROUP.split("/")
    df = df[(df["run_id"] == run) & (df["train_step"] == int(step)) & (df["group_id"] == gid)]
    assert len(df) == 208 * len(ESTIMATORS)
    return df


def _notebook_output() -> str:
    """Execute a two-cell notebook (nbclient, the python3 ipykernel, in the repository) and
    return the ``text/html`` of its last cell's result; the executed notebook is kept in
    test-output/."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat is in requirements-dev.txt")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is in requirements-dev.txt")
    pytest.importorskip("ipykernel", reason="ipykernel is in requirements-dev.txt")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import crbc_viz\nprint(crbc_viz.__file__)"),
        nbformat.v4.new_code_cell(
            f"view = crbc_viz.show({SOKOBAN!r}, group={GROUP!r}, estimators={ESTIMATORS!r})\nview"
        ),
    ]
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env_before) if p)
    try:
        nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
        ).execute()
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    OUT.mkdir(exist_ok=True)
    nbformat.write(nb, str(OUT / "share_notebook.ipynb"))
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert printed.strip() == str(REPO / "crbc_viz" / "__init__.py"), "the kernel imported another copy"
    (result,) = [o for o in nb.cells[1].outputs if o["output_type"] == "execute_result"]
    return result["data"]["text/html"]


def _open_offline(browser, path: Path, shot: Path) -> tuple[list[dict], list[str]]:
    """Open ``path`` from file:// with every non-local request aborted; wait until each graph
    frame has drawn; return (every credit cell: rollout, step_idx, estimator, value, text) and
    the requests that were attempted. A full-page screenshot goes to ``shot``."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    attempted, blocked = [], []

    def route(r):
        url = r.request.url
        if url.split(":", 1)[0] in LOCAL:
            r.continue_()
        else:
            blocked.append(url)
            r.abort()

    ctx.route("**/*", route)
    ctx.on("request", lambda req: attempted.append(req.url))
    try:
        pg = ctx.new_page()
        pg.goto(path.as_uri())
        frames = [f for f in pg.frames if f != pg.main_frame]
        assert len(frames) == len(ESTIMATORS), [f.url for f in pg.frames]
        for f in frames:
            f.wait_for_function(
                "document.body && document.body.getAttribute('data-crbc-ready') === '1'", timeout=60_000
            )
            inked = f.evaluate(
                """() => { const c = document.querySelector('#mynetwork canvas');
                if (!c) { return -1; }
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 0; i < d.length; i += 4) {
                  if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240)) { n++; }
                }
                return n; }"""
            )
            assert inked > 2000, f"graph frame drew {inked} coloured pixels"
        cells = pg.evaluate(
            """() => Array.from(document.querySelectorAll('tr[data-crbc-traj] td[data-crbc-credit]'))
              .map(td => ({traj: td.parentElement.getAttribute('data-crbc-traj'),
                           step: Number(td.parentElement.getAttribute('data-crbc-step-idx')),
                           est: td.getAttribute('data-crbc-credit'),
                           value: Number(td.getAttribute('data-value')), text: td.innerText}))"""
        )
        first = pg.locator("tr[data-crbc-traj] td[data-crbc-credit]").first
        first.scroll_into_view_if_needed()
        assert first.is_visible()
        pg.evaluate("window.scrollTo(0, 0)")
        OUT.mkdir(exist_ok=True)
        pg.screenshot(path=str(shot), full_page=True)
    finally:
        ctx.close()
    assert not blocked, f"requests to the network: {blocked}"
    return cells, [u for u in attempted if u.split(":", 1)[0] not in LOCAL]


def _check_credit(cells: list[dict], scored: pd.DataFrame) -> None:
    assert len(cells) == len(scored)
    want = scored.set_index(["traj_id", "step_idx", "estimator"])["credit"]
    got = pd.DataFrame(cells).set_index(["traj", "step", "est"])
    for est in ESTIMATORS:
        w = want.xs(est, level="estimator").sort_index()
        g = got.xs(est, level="est").sort_index()
        assert list(g.index) == list(w.index)
        np.testing.assert_allclose(g["value"].to_numpy(), w.to_numpy(), rtol=1e-9, atol=1e-12)
        assert list(g["text"]) == [f"{x:+.4f}" for x in w.to_numpy()]


def test_notebook_output_draws_offline_and_shows_the_scored_credit(browser, scored, tmp_path):
    html = _notebook_output()
    page = OUT / "share_notebook_output.html"
    OUT.mkdir(exist_ok=True)
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>notebook output</title></head>"
        f"<body><div class='jp-OutputArea-output'>{html}</div></body></html>",
        encoding="utf-8",
    )
    cells, attempted = _open_offline(browser, page, OUT / "share_notebook.png")
    assert not attempted, attempted
    _check_credit(cells, scored)


def _write_page(page: Path) -> Path:
    """``page``: what ``crbc-viz html`` writes for the group under the estimators."""
    est = [a for e in ESTIMATORS for a in ("-e", e)]
    proc = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "html", SOKOBAN, "--group", GROUP, *est, "-o", str(page)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return page


def test_static_page_opens_offline_and_shows_the_scored_credit(browser, scored):
    OUT.mkdir(exist_ok=True)
    page = _write_page(OUT / "share_page.html")
    cells, attempted = _open_offline(browser, page, OUT / "share_page.png")
    assert not attempted, attempted
    _check_credit(cells, scored)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """The page ``crbc-viz html`` writes for the group under two estimators."""
    return _write_page(tmp_path_factory.mktemp("share") / "share_page.html")


@pytest.mark.parametrize("width", (800, 1280, 1440))
def test_written_page_frames_take_their_drawings_shape(browser, written, width):
    """Each graph frame of the written page is as tall as its drawing needs at the frame's
    width (CSS only: the page has no script of its own), so the drawing fills its canvas: it
    spans ≥ 70 % of the canvas's width and ≥ 65 % of its height (the Graph page's canvas,
    which its script sizes, is held to 70 %: a frame sized without a script keeps room for a
    legend row of two lines; at a fixed 520 px these frames spanned 49–59 %), its labels are
    ≥ 10 px on screen and ≤ 5 % of them overlap, no node shapes overlap and nothing lies under
    the navigation buttons (`test_graph_canvas.check`)."""
    from test_graph_canvas import MEASURE, check, problems

    ctx = browser.new_context(viewport={"width": width, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto(written.as_uri())
        frames = [f for f in pg.frames if f != pg.main_frame]
        assert len(frames) == len(ESTIMATORS)
        bad = []
        for name, f in zip(ESTIMATORS, frames):
            f.wait_for_function(
                "document.body && document.body.getAttribute('data-crbc-ready') === '1'", timeout=60_000
            )
            ratio = float(f.frame_element().get_attribute("data-crbc-ratio"))
            got = check(f.evaluate(MEASURE), f"{name} at {width} px", 10.0)
            w, h = got["canvas"]
            want = min(max(w * ratio, 320), 1100)
            # the canvas is the frame less the legend row: its shape's height and at most the
            # row's allowance more (the legend wraps to two lines on a narrow frame)
            assert want - 2 <= h <= want + 70, (name, width, got["canvas"], ratio)
            sw, sh = got["span"]
            if sw < 0.7 or sh < 0.65:
                bad.append(f"{name} at {width} px: the drawing spans {sw:.0%} × {sh:.0%} of {got['canvas']}")
            got["span"] = (1.0, 1.0)  # checked just above
            bad += problems(got, f"{name} at {width} px")
        OUT.mkdir(exist_ok=True)
        pg.screenshot(path=str(OUT / f"share_page_{width}.png"), full_page=True)
    finally:
        ctx.close()
    assert not bad, bad
