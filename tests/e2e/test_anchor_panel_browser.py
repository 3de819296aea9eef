"""The Graph page's anchor-rule panel in a real `streamlit run app.py` (Debian's headless
Chromium at 1280 px): opened from a link that names a similarity rule across the batch, the
panel's before / after numbers are those of ``crbc-viz info`` with the same options, the page
warns naming the two tasks the rule merges, and turning on "Draw the graph under this rule"
redraws the graph with the rule's anchors. Screenshots of the panel go to ``test-output/``."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from test_anchor_merge import rows  # noqa: E402

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
OPTS = [
    "--anchor-rule",
    "similar",
    "--anchor-threshold",
    "0.8",
    "--anchor-scope",
    "batch",
    "--anchor-cluster",
    "components",
]
LINK = {"arule": "similar", "athr": "0.8", "ascope": "batch", "aclust": "components"}

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)", allow_module_level=True)


def _info(path) -> dict:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "crbc_viz", "info", str(path), *OPTS, "--json"],
        check=True,
        capture_output=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    return json.loads(out)["anchor_rule"]


def _panel(pg):
    return pg.locator("[data-testid='stExpander']", has_text="Anchor rule: how states are matched").first


def test_anchor_panel_in_the_browser(browser, tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    info = _info(path)
    OUT.mkdir(exist_ok=True)
    q = urllib.parse.urlencode({"file": str(path), "group": "tasks/0/kitchen", **LINK})
    with streamlit_server(
        env={"CRBC_VIZ_DATA_ROOTS": str(tmp_path)}, log_path=OUT / "streamlit-anchor-panel.log"
    ) as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
        pg = ctx.new_page()
        try:
            pg.goto(f"{url}/graph?{q}")
            panel = _panel(pg)
            panel.wait_for(timeout=WAIT_MS)
            wait_until(pg, lambda: "Largest credit change" in panel.inner_text(), "the preview")
            text = panel.inner_text()
            a, b = info["exact"], info["rule"]
            assert f"{a['anchors']} → {b['anchors']} anchors ({info['anchors_merged']} merged)" in text
            c = info["largest_change"]
            assert f"{c['credit_exact']:.4g} → {c['credit_rule']:.4g}" in text
            assert "tasks/0/kitchen, tasks/0/garden" in text  # the warning names the tasks
            anchors_before = pg.get_by_text("anchors · estimator").first.inner_text()
            panel.screenshot(path=str(OUT / "anchor_panel_preview_1280.png"))
            pg.screenshot(path=str(OUT / "anchor_panel_page_1280.png"), full_page=True)

            panel.get_by_text("Draw the graph under this rule").click()
            wait_until(
                pg,
                lambda: pg.get_by_text("anchors · estimator").first.inner_text() != anchors_before,
                "the graph redrawn under the rule",
            )
            assert "aapply=True" in pg.url
            pg.frame_locator("iframe").first.locator("body[data-crbc-ready='1']").wait_for(
                state="attached", timeout=WAIT_MS
            )
            app_idle(pg)
            pg.screenshot(path=str(OUT / "anchor_panel_applied_1280.png"), full_page=True)
            pg.locator("iframe").first.scroll_into_view_if_needed()
            app_idle(pg)
            pg.screenshot(path=str(OUT / "anchor_panel_applied_graph_1280.png"))
        finally:
            ctx.close()
