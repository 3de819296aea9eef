"""The Data page of a real `streamlit run app.py`, in Debian's headless Chromium, opens the files
trainers write: each is uploaded through the real file uploader (an rLLM episodes folder and a
log store are given as server paths) and shows the counts ``crbc-viz info`` gives for it after
``crbc-viz ingest`` (run here as the oracle), and says which format it was read as. A file no
importer reads is refused once, by its name, with the ``crbc-viz ingest`` command to try.

Screenshots of the Data page at 1440 and 800 px go to ``test-output/``. (Its name differs from
tests/ui/test_open_trainer_files.py: pytest imports test modules by their base name.)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, WAIT_MS, app_idle, start_server, stop_server, wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = REPO / "test-output"

#: Files uploaded, with the format the page must say it read them as.
UPLOADS = [
    (FIX / "trl_real/trl_run/completions/completions_00002.parquet", "TRL completions parquet"),
    (FIX / "verl_real/rollout/1.jsonl", "verl rollout_data_dir file"),
    (FIX / "verl_agent_real/crbc_dump/crbc_step_000001.jsonl", "verl-agent dump"),
    (FIX / "roll_real/rollout_dump/rollout_dump_data.step_1.jsonl", "ROLL dump"),
    (FIX / "swift_real/output/completions.jsonl", "ms-swift completions.jsonl"),
]
EPISODES = FIX / "rllm_real/train_logs/episodes"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


def _cli(*args: str) -> str:
    from crbc_viz.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(list(args)) == 0, args
    return out.getvalue()


def cli_counts(path: Path, store: Path) -> dict[str, str]:
    """The Data page's metrics as the CLI gives them: ingest, then info on the store's run."""
    _cli("ingest", str(path), "--store", str(store), "-q")
    (run,) = json.loads(_cli("info", "--store", str(store), "--json"))["runs"]
    info = json.loads(_cli("info", "--store", str(store), "--run", run, "--json"))
    return {
        "Groups": str(info["groups"]),
        "Rollouts": str(info["trajectories"]),
        "Steps": str(info["steps"]),
        "Anchors": str(info["anchors"]),
        "Success rate": f"{info['success_rate']:.1%}",
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trainer-files")
    want = {p: cli_counts(p, tmp / f"store{i}") for i, (p, _) in enumerate(UPLOADS)}
    want[EPISODES] = cli_counts(EPISODES, tmp / "store_rllm")
    OUT.mkdir(exist_ok=True)
    proc, url = start_server(
        env={"CRBC_VIZ_DATA_ROOTS": os.pathsep.join([str(FIX), str(tmp)])},
        log_path=OUT / "streamlit-open-trainer-files.log",
    )
    try:
        yield url, tmp, want
    finally:
        stop_server(proc)


def metrics(pg) -> dict[str, str]:
    return pg.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('[data-testid="stMetric"]')].map(m => [
            m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(),
            m.querySelector('[data-testid="stMetricValue"]').innerText.trim()]))"""
    )


def counts(pg) -> dict[str, str]:
    keep = ("Groups", "Rollouts", "Steps", "Anchors", "Success rate")
    return {k: v for k, v in metrics(pg).items() if k in keep}


def main_text(pg) -> str:
    return pg.locator("[data-testid='stMain']").inner_text()


def test_each_trainer_file_opens_on_the_data_page_with_the_cli_counts(setup, browser):
    url, tmp, want = setup
    ctx = browser.new_context(viewport={"width": 1440, "height": 1100})
    try:
        pg = ctx.new_page()
        pg.goto(url)
        app_idle(pg)
        pg.locator("[data-testid='stMetric']").first.wait_for(timeout=WAIT_MS)  # the default sample
        pg.locator("[data-testid='stRadio'] label", has_text="Upload").click()
        # Nothing chosen yet: an empty state, not the previous file's tables.
        pg.get_by_text("Choose a file to upload").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        assert pg.locator("[data-testid='stMetric']").count() == 0
        for path, title in UPLOADS:
            pg.locator(".st-key-upload input[type='file']").set_input_files(str(path))
            opened = pg.locator("[data-testid='stAlert']", has_text=f"Opened the upload {path.name}")
            opened.first.wait_for(timeout=WAIT_MS)
            wait_until(
                pg,
                lambda: f"Read as: {title} (detected from its fields)" in main_text(pg),
                f"{path.name} said to be read as {title}",
            )
            assert f"read as {title}" in opened.first.inner_text()
            wait_until(
                pg, lambda: counts(pg) == want[path], f"{path.name} shows the CLI's counts {want[path]}"
            )
            assert pg.locator("[data-testid='stException']").count() == 0
            if path.suffix == ".parquet":
                pg.screenshot(path=str(OUT / "data_page_trl_1440.png"), full_page=True)
                pg.set_viewport_size({"width": 800, "height": 1100})
                app_idle(pg)
                pg.screenshot(path=str(OUT / "data_page_trl_800.png"), full_page=True)
                pg.set_viewport_size({"width": 1440, "height": 1100})

        # A file no importer reads: said once, by its name, with the command to try.
        bad = tmp / "training metrics.csv"
        bad.write_text("epoch,loss\n1,0.5\n")
        pg.locator(".st-key-upload input[type='file']").set_input_files(str(bad))
        refusal = pg.locator("[data-testid='stAlert']", has_text="could not be opened")
        refusal.first.wait_for(timeout=WAIT_MS)
        app_idle(pg)
        assert (
            refusal.count() == 1
            and pg.locator("[data-testid='stSidebar'] [data-testid='stAlert']").count() == 0
        )
        text = refusal.first.inner_text()
        assert text.startswith(f"The upload {bad.name} could not be opened: {bad.name}: cannot detect"), text
        assert "crbc-viz-uploads" not in text and "\n" not in text.strip(), text
        assert pg.locator("[data-testid='stCode']").first.inner_text().strip() == (
            f"crbc-viz ingest '{bad.name}' --store crbc-store"
        )
        pg.screenshot(path=str(OUT / "data_page_refusal_1440.png"), full_page=True)

        # An rLLM episodes folder, as a server path.
        pg.locator("[data-testid='stRadio'] label", has_text="Server path").click()
        box = pg.get_by_role("textbox", name="Path on the server")
        box.wait_for(timeout=WAIT_MS)
        app_idle(pg)
        box.fill(str(EPISODES))
        box.press("Enter")
        pg.locator("[data-testid='stAlert']", has_text=f"Opened {EPISODES}").first.wait_for(timeout=WAIT_MS)
        wait_until(
            pg,
            lambda: "Read as: rLLM episodes (detected from its fields)" in main_text(pg),
            "the episodes folder said to be read as rLLM episodes",
        )
        wait_until(pg, lambda: counts(pg) == want[EPISODES], f"the episodes folder shows {want[EPISODES]}")

        # A log store, as a server path: a link to the Across training page, which opens it.
        store = tmp / "store0"
        box.fill(str(store))
        box.press("Enter")
        link = pg.get_by_role("link", name="Open this store on Across training")
        link.wait_for(timeout=WAIT_MS)
        link.click()
        pg.get_by_role("heading", name="Across training").wait_for(timeout=WAIT_MS)
        app_idle(pg)
        assert pg.get_by_role("textbox", name="Log store folder").input_value() == str(store)
        assert "store=" in pg.url
        assert pg.locator("[data-testid='stException']").count() == 0
    finally:
        ctx.close()
