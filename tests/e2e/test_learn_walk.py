"""A lecturer's walk through the Learn page in a real `streamlit run app.py` driven by Debian's
headless Chromium: every lesson at 1280 px in projector mode and at 800 px. In each lesson the
prediction is answered (its revealed answer is the one `crbc_viz.teaching` computes), the
lesson's manipulation is used and its effect read back; lesson 4 steps a backup and shows its
equation; the numbers on screen are compared with the CLI (`crbc-viz score`) on the same data.
Screenshots of every lesson in projector mode at 1280 px go to ``test-output/``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from crbc_viz import build_graph, score
from crbc_viz import teaching as T
from streamlit_server import CHROMIUM, WAIT_MS, app_idle, streamlit_server, wait_until
from streamlit_server import CHROMIUM_ARGS as ARGS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
WAIT = 3 * WAIT_MS  # a busy machine: generous waits, always on a condition

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is absent (apt-get install chromium); the browser test needs Debian's chromium",
        allow_module_level=True,
    )


def cli_scores(tmp: Path, *args: str, log: Path = T.TOY_PATH) -> list[dict]:
    """`crbc-viz score` on the toy group, or ``log`` (a subprocess, this checkout first on the path)."""
    out = tmp / f"score{len(list(tmp.iterdir()))}.csv"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run(
        [sys.executable, "-m", "crbc_viz", "score", str(log), *args, "-o", str(out)],
        check=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    with open(out, newline="") as f:
        return list(csv.DictReader(f))


#: The estimators that run on the toy group (the others need logged fields it lacks), and the
#: parameter each discounts with (β: CRBC's family; γ: the others; none: GRPO, shortest path).
TOY_ESTIMATORS = {
    "grpo": None,
    "crbc": "beta",
    "visit_local": "beta",
    "shortest_path": None,
    "gigpo": "gamma",
    "rtmc": "gamma",
    "graft": "gamma",
    "gated_bepo": "gamma",
    "pgpo": "gamma",
    "g2po": "gamma",
    "proxmo": "gamma",
}


def cli_largest_change(tmp: Path, edited: list[dict], beta: float, gamma: float) -> tuple[str, float, float]:
    """Independently of the page: `crbc-viz score` on the toy file (defaults) and on the edited
    rows (written here) at β / γ; the step whose credit moved most over every estimator."""
    path = tmp / "edited.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in edited), encoding="utf-8")
    est = [a for name in TOY_ESTIMATORS for a in ("-e", name)]
    disc = {"beta": beta, "gamma": gamma}
    params = [a for name, p in TOY_ESTIMATORS.items() if p for a in ("-p", f"{name}.{p}={disc[p]}")]
    before = {
        (r["estimator"], r["traj_id"], int(r["step_idx"])): float(r["credit"]) for r in cli_scores(tmp, *est)
    }
    after = cli_scores(tmp, *est, *params, log=path)
    best = max(
        (r for r in after if (r["estimator"], r["traj_id"], int(r["step_idx"])) in before),
        key=lambda r: abs(float(r["credit"]) - before[(r["estimator"], r["traj_id"], int(r["step_idx"]))]),
    )
    b = before[(best["estimator"], best["traj_id"], int(best["step_idx"]))]
    return f"step {best['step_idx']} of rollout {best['traj_id']}", b, float(best["credit"])


def cli_pair_adv(rows: list[dict], estimator: str) -> dict[str, float]:
    """{"s4 · g": Q − V} from the CLI's per-step value and q_value (anchors named by the log)."""
    anchor = {(r["traj_id"], r["step_idx"]): r["anchor_obs"] for r in T.read_rows(T.TOY_PATH)}
    out = {}
    for r in rows:
        if r["estimator"] == estimator:
            s = anchor[(r["traj_id"], int(r["step_idx"]))]
            out[f"{s} · {r['action']}"] = float(r["q_value"]) - float(r["value"])
    return out


@pytest.fixture(scope="module")
def server():
    OUT.mkdir(exist_ok=True)
    with streamlit_server(log_path=OUT / "streamlit-learn-walk-server.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield br
        finally:
            br.close()


def query(pg) -> dict:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(pg.url).query).items()}


def open_lesson(pg, server: str, n: int, projector: bool) -> None:
    pg.goto(f"{server}/learn?lesson={n}" + ("&projector=1" if projector else ""))
    pg.get_by_role("heading", name=f"{n}. ").first.wait_for(timeout=WAIT)
    pg.locator(".js-plotly-plot .main-svg, iframe").first.wait_for(timeout=WAIT)
    app_idle(pg, WAIT)


def answer(pg, pred: T.Prediction, nth: int = 0) -> None:
    """Answer the nth prediction on screen with its first option; the reveal names the answer."""
    box = pg.locator("[data-testid='stRadio']").filter(has_text="Predict first.").nth(nth)
    box.get_by_text(pred.options[0], exact=True).click()
    right = pred.options[0] == pred.answer
    want = f"Right: {pred.answer}." if right else f"The answer is {pred.answer}."
    wait_until(pg, lambda: pg.get_by_text(want).count() > 0, f"the reveal {want!r}", WAIT)


def pick(pg, label: str, option: str) -> None:
    """Choose ``option`` in the multiselect labelled ``label``."""
    box = pg.locator("[data-testid='stMultiSelect']").filter(has_text=label).first
    box.scroll_into_view_if_needed()
    box.locator("input").click()
    box.locator("input").fill(option.split()[0])  # typing narrows the list to the one rollout
    pg.get_by_role("option", name=option).click(timeout=WAIT)
    pg.keyboard.press("Escape")


def metric(pg, label: str) -> str:
    m = pg.locator("[data-testid='stMetric']").filter(has_text=label).first
    return m.locator("[data-testid='stMetricValue']").inner_text().strip()


def table_rows(pg, nth: int = 0) -> list[list[str]]:
    t = pg.locator("[data-testid='stTable'] table").nth(nth)
    return [
        [c.strip() for c in r]
        for r in t.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText))")
    ]


def shot(pg, name: str) -> None:
    """The whole lesson: the window made tall for the shot (Streamlit scrolls inside its own
    container, so full_page alone would not), every graph drawn, then the window restored."""
    size = pg.viewport_size
    pg.set_viewport_size({"width": size["width"], "height": 4200})
    try:
        app_idle(pg, WAIT)
        for i in range(pg.locator("iframe").count()):
            frame = pg.frame_locator("iframe").nth(i)
            if pg.locator("iframe").nth(i).is_visible():
                frame.locator("body[data-crbc-ready='1']").wait_for(state="attached", timeout=WAIT)
        pg.wait_for_timeout(500)  # the graph's canvas paints its first frame after ready
        pg.screenshot(path=str(OUT / name), full_page=True)
    finally:
        pg.set_viewport_size(size)


def toy_graph(flip=(), drop=()):
    return build_graph(T.batch_from_rows(T.apply_edits(T.read_rows(T.TOY_PATH), flip=flip, drop=drop)))


@pytest.mark.parametrize("width,height,projector", [(1280, 800, True), (800, 1000, False)])
def test_walk_every_lesson(server, browser, tmp_path, width, height, projector):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    pg = ctx.new_page()
    tag = f"{width}{'_projector' if projector else ''}"
    try:
        _lesson1(pg, server, projector, tag)
        _lesson2(pg, server, projector, tag, tmp_path)
        _lesson3(pg, server, projector, tag, tmp_path)
        _lesson4(pg, server, projector, tag, tmp_path)
        _lesson5(pg, server, projector, tag)
        _lesson6(pg, server, projector, tag, tmp_path)
    finally:
        ctx.close()


def _lesson1(pg, server, projector, tag):
    open_lesson(pg, server, 1, projector)
    answer(pg, T.lesson_prediction(1, toy_graph()))
    assert metric(pg, "successes") == "2"
    pick(pg, "Flip the outcome of", "t3 (failure → success)")
    wait_until(pg, lambda: metric(pg, "successes") == "3", "lesson 1: t3 flipped to a success", WAIT)
    assert query(pg)["flip"] == "t3"
    # The drop chips say the outcome after the flip, and "select all" keeps one rollout.
    pg.locator("[data-testid='stMultiSelect']").filter(has_text="Drop rollouts").first.click()
    assert pg.get_by_role("option", name="t3 (success)").count() == 1
    pg.keyboard.press("Escape")
    shot(pg, f"learn_walk_{tag}_lesson1.png")


def step_slider(pg, label: str, key: str, presses: str, want: str | tuple[str, ...]) -> None:
    """Move the slider labelled ``label`` by keyboard until the link says ``key=want`` (or one
    of ``want``).
    Each key is pressed on the idle app and counted only once the thumb has moved and the link
    has taken the new value: on a busy machine a rerun that redraws the slider can take the
    focus, and with it a key press, or redraw it at the value it had before the press (the
    thumb moved, the link never changed: the walk once waited 270 s for ``rr_lucky=4`` with
    ``rr_lucky=2`` in the link); such a press is pressed again."""
    thumb = pg.locator("[data-testid='stSlider']").filter(has_text=label).first.locator("input[type='range']")
    for k in presses.split():
        for _ in range(4):
            app_idle(pg, WAIT)
            before, linked = thumb.input_value(), query(pg).get(key)
            thumb.scroll_into_view_if_needed()
            thumb.focus()
            pg.keyboard.press(k)
            try:
                pg.wait_for_function(
                    "([el, v]) => el.value !== v",
                    arg=[thumb.element_handle(), before],
                    timeout=10_000,  # the thumb moves in the page, before the rerun
                )
                wait_until(pg, lambda: query(pg).get(key) != linked, f"{label}: {k} in the link", 20_000)
                break
            except (PlaywrightTimeout, AssertionError):
                continue  # the press was lost or undone: press again
        else:
            raise AssertionError(f"{label}: {k} did not move the slider")
    wants = (want,) if isinstance(want, str) else want
    wait_until(pg, lambda: query(pg).get(key) in wants, f"{label}: {want}", WAIT)


def _lesson2(pg, server, projector, tag, tmp):
    open_lesson(pg, server, 2, projector)
    answer(pg, T.lesson_prediction(2, toy_graph()))
    if not projector:
        pick(pg, "Drop rollouts", "t4 (success)")
        wait_until(pg, lambda: metric(pg, "steps") == "10", "lesson 2: t4 dropped", WAIT)
        shot(pg, f"learn_walk_{tag}_lesson2.png")
        return
    # Add a rollout through s4 (as t3 reaches it, its step 1) ending in SUCCESS, then β and γ.
    box = pg.locator("[data-testid='stSelectbox']").filter(has_text="Add a rollout through anchor").first
    box.scroll_into_view_if_needed()
    box.click()
    pg.get_by_role("option", name="s4 · via t3, step 1").click(timeout=WAIT)
    pg.get_by_role("button", name="Add", exact=True).click()
    wait_until(pg, lambda: query(pg).get("add") == "t3@1:S", "lesson 2: a rollout added", WAIT)
    wait_until(pg, lambda: metric(pg, "steps") == "17", "lesson 2: 15 + 2 steps", WAIT)
    step_slider(pg, "CRBC, visit-local", "beta", "ArrowLeft ArrowLeft", "0.9")
    step_slider(pg, "GiGPO, RTMC", "gamma", "ArrowRight ArrowRight", "0.9")
    # The same modified group, written by hand: t3's first two steps under a new id, a success.
    rows = T.read_rows(T.TOY_PATH)
    new = [dict(r, traj_id="new1", success=True) for r in rows if r["traj_id"] == "t3"][:2]
    new[-1].update(reward=1.0, done=True)
    where, b, a = cli_largest_change(tmp, rows + new, 0.9, 0.9)
    want = f"The largest change: {where} under "
    line = pg.get_by_text("The largest change:")
    wait_until(pg, lambda: line.count() == 1 and want in line.inner_text(), f"lesson 2: {want}", WAIT)
    assert f"{b:+.2f} → {a:+.2f}" in line.inner_text()
    shot(pg, f"learn_walk_{tag}_lesson2.png")


def _lesson3(pg, server, projector, tag, tmp):
    open_lesson(pg, server, 3, projector)
    g = toy_graph()
    s4 = [str(a) for a in g.node_anchor_obs].index("s4")
    answer(pg, T.lesson_prediction(3, g, node=s4))
    if projector:  # the numbers on screen against the CLI's visit-local Q − V
        cli = cli_pair_adv(cli_scores(tmp, "-e", "visit_local"), "visit_local")
        rows = table_rows(pg)
        head = rows[0]
        for r in rows[1:]:
            shown = float(r[head.index("A⁰ = Q⁰ − V⁰")])
            assert shown == pytest.approx(cli[f"s4 · {r[0]}"], abs=6e-4)
    pick(pg, "Flip the outcome of", "t3 (failure → success)")
    wait_until(pg, lambda: query(pg).get("flip") == "t3", "lesson 3: t3 flipped", WAIT)
    shot(pg, f"learn_walk_{tag}_lesson3.png")


def _lesson4(pg, server, projector, tag, tmp):
    open_lesson(pg, server, 4, projector)
    g = toy_graph()
    answer(pg, T.lesson_prediction(4, g, node=T.teaching_anchor(g)))
    for k in (1, 2, 3):  # one Bellman backup per click
        pg.get_by_role("button", name="K ▶").click()
        wait_until(pg, lambda k=k: query(pg).get("lk") == str(k), f"lesson 4: K = {k}", WAIT)
    eq = pg.locator(".katex").filter(has_text="V(3)")
    wait_until(pg, lambda: eq.count() > 0, "lesson 4: the backup at K = 3 written out", WAIT)
    # Slider and graph on one screen: both inside the viewport once the slider is scrolled to.
    slider = pg.locator("[data-testid='stSlider']").filter(has_text="Backup depth K").first
    slider.scroll_into_view_if_needed()
    frame = pg.locator("iframe").first
    sb, fb = slider.bounding_box(), frame.bounding_box()
    vh = pg.viewport_size["height"]
    if projector:
        assert sb["y"] >= 0 and fb["y"] < vh and fb["y"] - (sb["y"] + sb["height"]) < 120
        cli = cli_pair_adv(cli_scores(tmp, "-e", "crbc", "-p", "crbc.depth=3"), "crbc")
        rows = table_rows(pg)
        head = rows[0]
        assert "A⁽³⁾" in head
        for r in rows[1:]:
            assert float(r[head.index("A⁽³⁾")]) == pytest.approx(cli[r[0]], abs=6e-4), r
    shot(pg, f"learn_walk_{tag}_lesson4.png")
    pick(pg, "Flip the outcome of", "t2 (failure → success)")
    wait_until(pg, lambda: query(pg).get("flip") == "t2", "lesson 4: t2 flipped", WAIT)


def _lesson5(pg, server, projector, tag):
    open_lesson(pg, server, 5, projector)
    g = build_graph(T.batch_from_rows(T.rare_route_rows()))
    credits = {}
    for name, label in (
        ("shortest_path", "shortest path (GraphGPO)"),
        ("visit_local", "visit-local (K = 0)"),
        ("crbc", "CRBC closure (K = ∞)"),
    ):
        r = score(g, name)
        credits[label] = tuple(
            float(r.credit[g.step_pair == T.pair_index(g, T.TRAP_ANCHOR, a)].mean())
            for a in (T.TRAP_ACTION, T.SAFE_ACTION)
        )
    answer(pg, T.lesson_prediction(5, g, credits=credits))
    step_slider(pg, "of which land", "rr_lucky", "ArrowRight ArrowRight ArrowRight", "4")
    title = pg.locator(".js-plotly-plot .gtitle").first
    wait_until(
        pg, lambda: "praises" in title.text_content(), "lesson 5: every estimator praises the jump", WAIT
    )
    shot(pg, f"learn_walk_{tag}_lesson5.png")


def _lesson6(pg, server, projector, tag, tmp):
    open_lesson(pg, server, 6, projector)
    answer(pg, T.lesson_prediction(6, toy_graph()))
    for i, q in enumerate(T.QUIZ):
        answer(pg, q, nth=1 + i)
    if projector:
        cli = cli_scores(tmp, "-e", "crbc")
        credit = {}
        anchor = {(r["traj_id"], r["step_idx"]): r["anchor_obs"] for r in T.read_rows(T.TOY_PATH)}
        for r in cli:
            credit[f"{anchor[(r['traj_id'], int(r['step_idx']))]} · {r['action']}"] = float(r["credit"])
        rows = table_rows(pg)
        head = rows[0]
        # n = 2 silences nothing: s3 (one action) has Q = V, its Aˢ is 0 with or without the gate.
        free = {r[0]: r[head.index("Aˢ without the gate")] for r in rows[1:]}
        assert free == {r[0]: r[head.index("Aˢ")] for r in rows[1:]} and float(free["s3 · e"]) == 0
        for r in rows[1:]:
            assert float(r[head.index("Aˢ")]) == pytest.approx(credit[r[0]], abs=6e-4), r
    step_slider(pg, "step weight", "ws", "Home", ("0", "0.0"))
    shot(pg, f"learn_walk_{tag}_lesson6.png")
