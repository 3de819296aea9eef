"""``crbc-viz view PATH`` in headless Chromium: the command run outside the checkout with only the
package importable serves the app on a log file (the Graph page on it; the Data page's counts
equal ``crbc-viz info --json``), on a folder of trainer dumps (ingested into a temporary store,
the Across-training page on it) and on a log store (Across training). Each PATH is a copy in a
temporary folder outside the default data folders, so the page opens only because ``view``
allowed PATH's folder. A log of no trainer's layout read through ``--map`` opens the same way,
with the counts of ``crbc-viz info --map``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from streamlit_server import CHROMIUM, REPO, app_idle, free_port, wait_until

pytestmark = pytest.mark.browser

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)", allow_module_level=True)

OUT = REPO / "test-output"
TOY = REPO / "sample_rollouts/toy/toy_group.jsonl"
VERL = REPO / "tests/fixtures/verl_real/rollout"
STORE = REPO / "sample_rollouts/training/store"


def _cli(*args: str) -> dict:
    from crbc_viz.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(list(args)) == 0, args
    return json.loads(out.getvalue())


@contextlib.contextmanager
def served(path: Path, tmp: Path, *extra: str):
    """``python -m crbc_viz view PATH --port P [extra]`` from ``tmp/work`` with only the package on
    the path; yields the link it prints, once ``/_stcore/health`` answers."""
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    if not (site / "crbc_viz").exists():
        (site / "crbc_viz").symlink_to(REPO / "crbc_viz", target_is_directory=True)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    port = free_port()
    log = OUT / f"view-{path.name}.log"
    OUT.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site), "HOME": str(tmp)}
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "crbc_viz", "view", str(path), "--port", str(port), *extra],
            cwd=work,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.25)
        m = re.search(r"crbc-viz view: open (\S+)", log.read_text())
        assert m and m.group(1).startswith(base + "/"), log.read_text()
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def metrics(pg) -> dict[str, str]:
    return pg.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('[data-testid="stMetric"]')].map(m => [
            m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(),
            m.querySelector('[data-testid="stMetricValue"]').innerText.trim()]))"""
    )


def main_text(pg) -> str:
    return pg.locator("[data-testid='stMain']").inner_text()


def test_a_log_file_opens_on_its_graph_with_the_cli_counts(tmp_path, browser):
    data = tmp_path / "data"
    data.mkdir()
    log = data / "my_run.jsonl"
    shutil.copy(TOY, log)
    info = _cli("info", str(log), "--json")
    want = {
        "Groups": str(info["groups"]),
        "Rollouts": str(info["trajectories"]),
        "Steps": str(info["steps"]),
        "Anchors": str(info["anchors"]),
        "Success rate": f"{info['success_rate']:.1%}",
    }
    with served(log, tmp_path) as link:
        assert urllib.parse.urlsplit(link).path == "/graph"
        ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
        try:
            pg = ctx.new_page()
            pg.goto(link)
            app_idle(pg)
            wait_until(pg, lambda: pg.locator("iframe").count() > 0, "the graph drawn")
            text = main_text(pg)
            assert "my_run.jsonl" in pg.locator("[data-testid='stSidebar']").inner_text()
            assert (
                "Something went wrong" not in text and pg.locator("[data-testid='stException']").count() == 0
            )
            pg.screenshot(path=str(OUT / "view_graph_1440.png"), full_page=True)
            # The Data page of the same server, on the same file: the CLI's counts.
            base = link.split("/graph")[0]
            pg.goto(base + "/?" + urllib.parse.urlencode({"file": str(log)}))
            app_idle(pg)
            got = wait_until(
                pg,
                lambda: {k: v for k, v in metrics(pg).items() if k in want} or None,
                "the Data page's counts",
            )
            assert got == want
        finally:
            ctx.close()


def _training_page(browser, link: str, shot: str) -> str:
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    try:
        pg = ctx.new_page()
        pg.goto(link)
        app_idle(pg)

        def trends():
            text = main_text(pg)
            return text if "training steps" in text else None

        text = wait_until(pg, trends, "the store's trends")
        assert pg.locator("[data-testid='stException']").count() == 0
        pg.screenshot(path=str(OUT / shot), full_page=True)
        return text
    finally:
        ctx.close()


def test_a_folder_of_trainer_dumps_opens_across_training(tmp_path, browser):
    folder = tmp_path / "data" / "rollout"
    shutil.copytree(VERL, folder)
    store = tmp_path / "cli-store"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from crbc_viz.cli import main

        assert main(["ingest", str(folder), "--store", str(store), "-q"]) == 0
    info = _cli("info", "--store", str(store), "--json")
    with served(folder, tmp_path) as link:
        assert urllib.parse.urlsplit(link).path == "/training"
        text = _training_page(browser, link, "view_dumps_training_1440.png")
    assert len(info["runs"]) == 1
    assert f"1 run(s) × {info['train_steps']} training steps" in text, text[:2000]


def test_a_store_opens_across_training(tmp_path, browser):
    store = tmp_path / "data" / "store"
    shutil.copytree(STORE, store)
    info = _cli("info", "--store", str(store), "--json")
    with served(store, tmp_path) as link:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)
        assert urllib.parse.urlsplit(link).path == "/training" and q["store"] == [str(store)]
        text = _training_page(browser, link, "view_store_training_1440.png")
    per_run = info["train_steps"] // len(info["runs"])
    assert f"{len(info['runs'])} run(s) × {per_run} training steps" in text, text[:2000]


MAP = ["steps=turns", "group_id=^.task", "traj_id=^.ep", "step_idx=@order", "anchor_obs=o", "reward=r"]


def test_a_log_read_through_a_field_map_opens_with_the_cli_counts(tmp_path, browser):
    data = tmp_path / "data"
    data.mkdir()
    log = data / "custom.jsonl"
    recs = [
        {"task": "A", "ep": "e1", "turns": [{"o": "s0", "r": 0}, {"o": "s1", "r": 1}]},
        {"task": "A", "ep": "e2", "turns": [{"o": "s0", "r": 0}]},
        {"task": "B", "ep": "e3", "turns": [{"o": "b0", "r": 0}]},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    flags = [a for m in MAP for a in ("--map", m)]
    info = _cli("info", str(log), "--json", *flags)
    want = {"Groups": "2", "Rollouts": "3", "Steps": "4"}  # counted by hand from recs
    assert {
        "Groups": str(info["groups"]),
        "Rollouts": str(info["trajectories"]),
        "Steps": str(info["steps"]),
    } == want
    with served(log, tmp_path, *flags) as link:
        parts = urllib.parse.urlsplit(link)
        assert parts.path == "/graph"
        ref = urllib.parse.parse_qs(parts.query)["file"][0]
        assert ref.startswith("import:") and ref.endswith("::" + str(log))
        ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
        try:
            pg = ctx.new_page()
            pg.goto(link)
            app_idle(pg)
            wait_until(pg, lambda: pg.locator("iframe").count() > 0, "the graph drawn")
            assert pg.locator("[data-testid='stException']").count() == 0
            base = link.split("/graph")[0]
            pg.goto(base + "/?" + urllib.parse.urlencode({"file": ref}))  # the Data page, same link
            app_idle(pg)
            got = wait_until(
                pg,
                lambda: {k: v for k, v in metrics(pg).items() if k in want} or None,
                "the Data page's counts",
            )
            assert got == want
        finally:
            ctx.close()
