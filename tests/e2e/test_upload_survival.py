"""Hostile uploads through the real file uploader of a real `streamlit run app.py`, driven by
Debian's headless Chromium (Playwright's Python package, never `playwright install`).

Each file is refused on the Data page with one line naming it (never a traceback, never the
server's copy's path); after each, the server process is still alive and still draws a bundled
sample's graph. The files: a JSONL line whose ``anchor_obs`` nests 100,000 arrays deep (it
crashes pyarrow's JSON reader: SIGSEGV in the child that reads uploads), an anchor of 10
million numbers (its child is stopped at ``$CRBC_VIZ_PARSE_TIMEOUT_S``, set low here) and a
Parquet file whose body is noise. Screenshots of each refusal go to ``test-output/``.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, start_server, stop_server

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
TOY = "sample_rollouts/toy/toy_group.jsonl"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


def hostile_line(anchor_json: str) -> str:
    """One valid step row of the toy group whose ``anchor_obs`` is the raw JSON text given."""
    row = json.loads((REPO / TOY).read_text().splitlines()[0])
    row.pop("anchor_obs")
    return json.dumps(row)[:-1] + ', "anchor_obs": ' + anchor_json + "}\n"


def hostile_files(folder: Path) -> list[Path]:
    deep = folder / "deep nesting.jsonl"
    deep.write_text(hostile_line("[" * 100_000 + "]" * 100_000))
    wide = folder / "ten_million.jsonl"
    wide.write_text(hostile_line("[" + ",".join(["1"] * 10_000_000) + "]"))
    noise = folder / "noise.parquet"
    noise.write_bytes(b"PAR1" + bytes(range(256)) * 64 + (16384).to_bytes(4, "little") + b"PAR1")
    return [deep, wide, noise]


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    proc, url = start_server(
        env={"CRBC_VIZ_PARSE_TIMEOUT_S": "6"}, log_path=OUT / "streamlit-upload-survival.log"
    )
    try:
        yield proc, url
    finally:
        stop_server(proc)


def _alive(proc, url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=5) as r:
            return proc.poll() is None and r.status == 200
    except OSError:
        return False


def _draws_a_sample_graph(browser, url: str) -> None:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1200})
    try:
        pg = ctx.new_page()
        pg.goto(f"{url}/graph?" + urllib.parse.urlencode({"file": TOY}))
        frame = pg.frame_locator("iframe").first
        frame.locator("canvas").first.wait_for(state="visible", timeout=WAIT_MS)
        frame.locator("body[data-crbc-ready='1']").wait_for(state="attached", timeout=WAIT_MS)
    finally:
        ctx.close()


def test_hostile_uploads_are_refused_and_the_server_survives(server, browser, tmp_path):
    proc, url = server
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        pg = ctx.new_page()
        for path in hostile_files(tmp_path):
            pg.goto(url)
            app_idle(pg)
            pg.locator("[data-testid='stRadio'] label", has_text="Upload").click()
            app_idle(pg)
            pg.locator(".st-key-upload input[type='file']").set_input_files(str(path))
            refusal = pg.locator("[data-testid='stAlert']", has_text=f"The upload {path.name} could not")
            refusal.first.wait_for(timeout=WAIT_MS)
            app_idle(pg)
            text = refusal.first.inner_text().strip()
            assert "\n" not in text, text  # one line
            assert "crbc-viz-uploads" not in text and "Traceback" not in text, text
            assert pg.locator("[data-testid='stException']").count() == 0
            pg.screenshot(path=str(OUT / f"upload_refused_{path.stem.replace(' ', '_')}.png"))
            assert _alive(proc, url), f"the server died on {path.name}"
            _draws_a_sample_graph(browser, url)
    finally:
        ctx.close()
    assert _alive(proc, url)
