"""What every browser test shares: one headless Debian Chromium per test module (never
`playwright install`; the flags are `streamlit_server.CHROMIUM_ARGS`), whose pages follow their
script runs from the start (`streamlit_server.track_browser`: what `app_idle` waits on)."""

from __future__ import annotations

import pytest

from streamlit_server import CHROMIUM, CHROMIUM_ARGS, track_browser


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield track_browser(br)
        finally:
            br.close()
