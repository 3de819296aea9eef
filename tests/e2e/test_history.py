"""Browser history on the bundled store in headless Chromium (Debian's, never ``playwright
install``): Across training → a group → "Open in the Graph page" → Back. One user action is
one history entry, the Graph page's URL names the store group, and Back restores the Across
training view with its group picker. Screenshots go to ``test-output/``."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from streamlit_server import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_MS,
    app_idle,
    draw_anyway,
    streamlit_server,
    track_browser,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-history.log") as url:
        yield url


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
        try:
            ctx = br.new_context(viewport={"width": 1440, "height": 1800})
            yield ctx.new_page()
        finally:
            br.close()


def query(pg) -> dict:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(pg.url).query).items()}


def history_length(pg) -> int:
    return pg.evaluate("() => window.history.length")


def picker_text(pg, key: str) -> str:
    return pg.locator(f".st-key-{key} input[role='combobox']").first.input_value().strip()


def wait_query(pg, **want) -> None:
    pg.wait_for_function(
        "(w) => { const q = new URLSearchParams(location.search); "
        "return Object.entries(w).every(([k, v]) => q.get(k) === v); }",
        arg=want,
        timeout=WAIT_MS,
    )
    app_idle(pg)


def test_training_to_graph_and_back_one_entry_per_action(server, page):
    page.goto(f"{server}/training")
    page.locator(".js-plotly-plot").first.wait_for(timeout=WAIT_MS)
    page.get_by_text("Groups of train_step").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    start = history_length(page)

    # One action: another group in the drill-down. One history entry, the group in the URL.
    first = picker_text(page, "training_group")
    box = page.locator(".st-key-training_group button[aria-haspopup='listbox']").first
    box.scroll_into_view_if_needed()
    box.click()
    page.get_by_role("option").first.wait_for(timeout=WAIT_MS)  # the list is open
    names = [o.strip() for o in page.get_by_role("option").all_inner_texts()]
    other = next(n for n in names if n != first)
    page.get_by_role("option", name=other, exact=True).click()
    wait_query(page, tgroup=other)
    assert history_length(page) == start + 1
    training_url = page.url
    training_q = query(page)
    page.screenshot(path=str(OUT / "history_1_training_group.png"), full_page=True)

    # One action: "Open in the Graph page". One entry, and it is the chosen group's graph.
    page.get_by_role("link", name="Open in the Graph page").click()
    page.wait_for_function("() => location.pathname.endsWith('/graph')", timeout=WAIT_MS)
    draw_anyway(page)  # a group whose credit is all 0 keeps its graph one click away
    page.frame_locator("iframe").first.locator("body[data-crbc-ready='1']").wait_for(
        state="attached", timeout=WAIT_MS
    )
    app_idle(page)
    q = query(page)
    run, tstep = training_q.get("run"), training_q.get("tstep")
    # The file is the store's group (its only group, so the URL needs no group= of its own).
    assert q["file"].startswith("store:") and q["file"].endswith(f"/{other}"), q
    assert q.get("tgroup") == other, q  # the Across training view travels along, for Back
    label = q["file"].rpartition("::")[2]
    if run is not None and tstep is not None:
        assert label == f"{run}/{tstep}/{other}", q
    page.get_by_text(label).first.wait_for(timeout=WAIT_MS)
    assert history_length(page) == start + 2, "the click left more than one history entry"
    page.screenshot(path=str(OUT / "history_2_graph.png"))

    # Back: the Across training view as it was, its group picker included.
    page.go_back()
    page.wait_for_function("() => location.pathname.endsWith('/training')", timeout=WAIT_MS)
    page.get_by_text("Groups of train_step").first.wait_for(timeout=WAIT_MS)
    app_idle(page)
    assert page.url == training_url, (page.url, training_url)
    assert picker_text(page, "training_group") == other
    page.screenshot(path=str(OUT / "history_3_back.png"), full_page=True)

    # Back once more: the view before the group was chosen.
    page.go_back()
    page.wait_for_function("(u) => location.href !== u", arg=training_url, timeout=WAIT_MS)
    app_idle(page)
    page.get_by_text("Groups of train_step").first.wait_for(timeout=WAIT_MS)
    assert "tgroup" not in query(page)
    page.wait_for_function(
        "(f) => { const e = document.querySelector(\".st-key-training_group input[role='combobox']\");"
        " return e && e.value.trim() === f; }",
        arg=first,
        timeout=WAIT_MS,
    )
