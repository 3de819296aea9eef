"""Hostile and broken input (ISSUE 8): every bad log gets a clear error, nothing renders as
code, nothing is lost.

The corpus ``tests/bad_inputs/`` (written by ``tests/make_bad_inputs.py``; ``MANIFEST.json``
maps each file to the substring its error must contain, or ``"accept"``) is run through the
real CLI, one subprocess per file. Big cases are generated here, at test time.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crbc_viz
from crbc_viz.io import LoadError, load_rollouts
from helpers import ROOT, write_jsonl

BAD = Path(__file__).resolve().parent / "bad_inputs"
MANIFEST = json.loads((BAD / "MANIFEST.json").read_text())
CLI_TIMEOUT = 60
PAYLOADS = ("<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>")


def run_cli(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT):
    return subprocess.run([sys.executable, "-m", "crbc_viz", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def cli_results():
    """``crbc-viz info FILE`` on every corpus file, two at a time (each its own process)."""
    names = sorted(MANIFEST)
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = pool.map(lambda n: run_cli("info", str(BAD / n)), names)
        return dict(zip(names, procs))


def test_corpus_is_big_enough_and_matches_the_generator():
    import make_bad_inputs

    assert len(MANIFEST) >= 30
    assert sum(v != "accept" for v in MANIFEST.values()) >= 30
    assert set(make_bad_inputs.cases()) == set(MANIFEST), "rerun tests/make_bad_inputs.py"
    for name in MANIFEST:
        assert (BAD / name).stat().st_size < 64 * 1024, f"{name}: keep committed inputs small"


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_cli_on_corpus(cli_results, name):
    expect = MANIFEST[name]
    proc = cli_results[name]
    assert "Traceback" not in proc.stderr, proc.stderr
    if expect == "accept":
        assert proc.returncode == 0, proc.stderr
        assert "trajectories" in proc.stdout
    else:
        assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
        assert expect in proc.stderr, proc.stderr
        assert name in proc.stderr  # the message names the file
        assert len(proc.stderr) < 20_000  # capped, with bounded reprs of hostile values


def _line_of(problems) -> set:
    return {p.line for p in problems}


@pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if e != "accept"))
def test_lenient_covers_every_problem_type(name):
    """--lenient either loads what is left (listing what it skipped, with counts) or fails with
    the same clear message when nothing usable is left."""
    try:
        b = load_rollouts(BAD / name, lenient=True)
    except LoadError as exc:
        assert MANIFEST[name] in str(exc)
        return
    assert b.skipped, name
    assert any("lenient: skipped" in w for w in b.warnings), b.warnings
    assert b.num_steps > 0
    assert np.isfinite(crbc_viz.score(b, "crbc", backend="numpy").advantage).all()


def test_lenient_reports_counts_in_the_cli(tmp_path):
    rows = [json.loads(x) for x in (BAD / "ok.jsonl").read_text().splitlines()]
    rows[0]["reward"] = "bad"
    text = "".join(json.dumps(r) + "\n" for r in rows) + "{broken\n[1]\n"
    (tmp_path / "mixed.jsonl").write_text(text)
    strict = run_cli("info", str(tmp_path / "mixed.jsonl"))
    assert strict.returncode == 2 and "3 problems" in strict.stderr
    proc = run_cli("info", "--lenient", str(tmp_path / "mixed.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "lenient: skipped 3 problem(s): dropped 2 row(s) in 1 trajectorie(s)" in proc.stderr
    assert "invalid JSON x1" in proc.stderr and "reward: expected a number x1" in proc.stderr
    assert re.search(r"^trajectories\s+1$", proc.stdout, re.M), proc.stdout


def test_lenient_drops_a_trajectory_whose_line_did_not_parse(tmp_path):
    rows = [json.loads(x) for x in (BAD / "ok.jsonl").read_text().splitlines()]
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1][:-1]  # r0's last step: its ids are still readable
    (tmp_path / "cut.jsonl").write_text("\n".join(lines) + "\n")
    b = load_rollouts(tmp_path / "cut.jsonl", lenient=True)
    assert set(b.steps["traj_id"]) == {"r1"}  # not a shortened, "truncated" r0


# ---------------------------------------------------------------- big inputs, made here
def _peak_rss_mb(code: str, env: dict | None = None, timeout: float = 120) -> tuple[float, str]:
    """Run ``code`` in a fresh interpreter; its peak RSS (MiB) and its stdout."""
    wrapper = code + "\nimport resource; print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    proc = subprocess.run([sys.executable, "-c", wrapper], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rss = float(re.search(r"RSS (\d+)", proc.stdout).group(1)) / 1024
    return rss, proc.stdout


def test_a_50mb_line_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "big_line.jsonl"
    ok = (BAD / "ok.jsonl").read_bytes()
    with open(path, "wb") as fh:
        fh.write(ok)
        fh.write(b'{"group_id": "g", "traj_id": "big", "step_idx": 0, "reward": 1, "observation": "')
        chunk = b"x" * (1 << 20)
        for _ in range(50):
            fh.write(chunk)
        fh.write(b'"}\n')
    t0 = time.monotonic()
    proc = run_cli("info", str(path))
    assert time.monotonic() - t0 < CLI_TIMEOUT
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "big_line.jsonl:line 5: line is longer than the limit of 32 MiB" in proc.stderr
    proc = run_cli("info", "--lenient", str(path))
    assert proc.returncode == 0 and re.search(r"^trajectories\s+2$", proc.stdout, re.M), proc.stderr
    code = ("from crbc_viz.io import load_rollouts, LoadError\n"
            f"try:\n    load_rollouts({str(path)!r})\nexcept LoadError as e:\n    print(e)\n")
    small = tmp_path / "small.jsonl"
    small.write_bytes(ok)
    # Memory is bounded by the limit (at most one limit-sized read), not by the line.
    env = {"CRBC_VIZ_MAX_LINE_MB": "4"}
    base, _ = _peak_rss_mb(code.replace(str(path), str(small)), env=env)
    peak, out = _peak_rss_mb(code, env=env)
    assert "longer than the limit of 4 MiB" in out
    assert peak - base < 16, (base, peak)  # the 50 MiB line is never held whole
    # The limit is a setting; above it, the same line is accepted.
    proc = run_cli("info", str(path), env={"CRBC_VIZ_MAX_LINE_MB": "64"})
    assert proc.returncode == 0, proc.stderr


def test_bad_line_limit_setting_is_an_error_not_a_traceback():
    proc = run_cli("info", str(BAD / "ok.jsonl"), env={"CRBC_VIZ_MAX_LINE_MB": "lots"})
    assert proc.returncode == 2 and "CRBC_VIZ_MAX_LINE_MB" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_very_many_tiny_groups(tmp_path):
    n = 100_000
    path = tmp_path / "tiny.jsonl"
    with open(path, "w") as fh:
        for g in range(n):
            fh.write(f'{{"group_id":"g{g}","traj_id":"t","step_idx":0,"reward":{g % 2},'
                     f'"done":true,"anchor_obs":"s"}}\n')
    t0 = time.monotonic()
    b = load_rollouts(path)
    graph = crbc_viz.build_graph(b)
    for name in ("grpo", "crbc", "gigpo"):
        r = crbc_viz.score(graph, name, backend="numpy")
        assert np.isfinite(r.advantage).all(), name
    assert b.num_groups == n and graph.num_nodes == n
    assert time.monotonic() - t0 < 120


def test_very_long_anchor_and_ids(tmp_path):
    rows = [json.loads(x) for x in (BAD / "ok.jsonl").read_text().splitlines()]
    for r in rows:
        r["anchor_obs"] = "a" * 2_000_000 + r["anchor_obs"]
        r["group_id"] = "g" * 100_000
    b = load_rollouts(write_jsonl(tmp_path / "long.jsonl", rows))
    g = crbc_viz.build_graph(b)
    assert g.num_nodes == 3
    from crbc_viz.views.graph_view import graph_html

    html = graph_html(g, crbc_viz.score(g, "crbc", backend="numpy"))
    ref = crbc_viz.build_graph(load_rollouts(BAD / "ok.jsonl"))
    base = graph_html(ref, crbc_viz.score(ref, "crbc", backend="numpy"))
    assert len(html) - len(base) < 20_000  # tooltips are capped; ids are not repeated whole


# ---------------------------------------------------------------- unicode
def test_lone_surrogates_hash_render_and_write(tmp_path):
    b = load_rollouts(BAD / "lone_surrogates.jsonl")
    assert any("U+FFFD" in w for w in b.warnings)
    assert "le\ufffdft" in set(b.steps["action"])
    for col in b.steps.columns:
        assert "\ud800" not in str(col)
    res = crbc_viz.score(b, "crbc", backend="numpy")
    from crbc_viz.io.write import write_frame
    from crbc_viz.views.graph_view import graph_html

    graph_html(res.graph, res).encode("utf-8")
    for ext in (".parquet", ".csv", ".jsonl"):
        write_frame(res.to_frame(), tmp_path / f"out{ext}")
    b.steps.astype(str).to_parquet(tmp_path / "steps.parquet")
    proc = run_cli("score", str(BAD / "lone_surrogates.jsonl"), "-o", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr


def test_nul_and_bidi_text_round_trips(tmp_path):
    b = load_rollouts(BAD / "nul_escape.jsonl")
    assert "le\x00ft" in set(b.steps["action"])
    r = crbc_viz.score(b, "crbc", backend="numpy")
    from crbc_viz.io.write import write_frame

    write_frame(r.to_frame(), tmp_path / "o.parquet")
    back = pd.read_parquet(tmp_path / "o.parquet")
    assert "le\x00ft" in set(back["action"])
    b = load_rollouts(BAD / "rtl_marks.jsonl")
    assert "\u202eright\u200f" in set(b.steps["action"])


def test_same_traj_id_in_two_groups_is_two_trajectories(tmp_path):
    # Legal (SCHEMA.md: traj_id is unique only within its group) and the usual convention
    # (r0..r7 in every group), so it is neither an error nor a warning.
    b = load_rollouts(BAD / "traj_split_across_groups.jsonl")
    assert b.num_groups == 2 and b.num_trajectories == 4
    assert not any("group_id" in w for w in b.warnings)


def test_user_fields_named_like_internals_are_kept():
    b = load_rollouts(BAD / "extra_fields.jsonl")
    assert set(b.steps["_line"]) == {"kept"}


# ---------------------------------------------------------------- nothing lost
def _digest(path: Path) -> tuple[str, int]:
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns


def test_loading_never_modifies_inputs():
    before = {n: _digest(BAD / n) for n in MANIFEST}
    for n in MANIFEST:
        for lenient in (False, True):
            try:
                load_rollouts(BAD / n, lenient=lenient)
            except LoadError:
                pass
    assert {n: _digest(BAD / n) for n in MANIFEST} == before
    assert sorted(p.name for p in BAD.iterdir()) == sorted([*MANIFEST, "MANIFEST.json"])


def test_failed_write_keeps_the_previous_file_and_no_temp(tmp_path, monkeypatch):
    from crbc_viz.io.write import write_frame

    df = pd.DataFrame({"a": [1.0, 2.0]})
    for ext in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"r{ext}"
        write_frame(df, out)
        before = out.read_bytes()

        def boom(self, path, *a, **k):
            Path(path).write_bytes(b"half-written")
            raise OSError("disk full")

        with monkeypatch.context() as m:
            for meth in ("to_parquet", "to_csv", "to_json"):
                m.setattr(pd.DataFrame, meth, boom)
            with pytest.raises(OSError, match="disk full"):
                write_frame(pd.DataFrame({"a": [9.0]}), out)
        assert out.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # A real failure inside pyarrow (a column it cannot convert), not a mock.
    bad = pd.DataFrame({"x": [object(), object()]})
    with pytest.raises(Exception):
        write_frame(bad, tmp_path / "r.parquet")
    assert pd.read_parquet(tmp_path / "r.parquet")["a"].tolist() == [1.0, 2.0]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_score_failure_leaves_previous_output(tmp_path):
    out = tmp_path / "o.parquet"
    assert run_cli("score", str(BAD / "ok.jsonl"), "-o", str(out)).returncode == 0
    before = out.read_bytes()
    proc = run_cli("score", str(BAD / "reward_nan.jsonl"), "-o", str(out))
    assert proc.returncode == 2 and out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["o.parquet"]


# ---------------------------------------------------------------- code and paths
_FORBIDDEN = [
    (r"\bimport\s+pickle\b|\bfrom\s+pickle\b|\bpickle\.loads?\(", "pickle"),
    (r"(?<![\w.])eval\(", "eval"),
    (r"(?<![\w.])exec\(", "exec"),
    (r"\byaml\.load\(", "yaml.load"),
    (r"\bmarshal\.loads?\(", "marshal"),
    (r"\bshelve\.open\(", "shelve"),
    (r"read_pickle\(", "pandas.read_pickle"),
    (r"allow_pickle\s*=\s*True", "numpy allow_pickle"),
    (r"torch\.load\(", "torch.load"),
]


def test_no_unsafe_deserialisation_or_eval_in_the_source():
    files = [p for p in (ROOT / "crbc_viz").rglob("*.py")]
    files += [ROOT / "app.py", *(ROOT / "app_pages").glob("*.py")]
    hits = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for pat, what in _FORBIDDEN:
            for m in re.finditer(pat, text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{f.relative_to(ROOT)}:{line}: {what}")
    assert not hits, hits


def test_server_paths_are_confined(tmp_path, monkeypatch):
    from crbc_viz.ui import files

    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_bytes((BAD / "ok.jsonl").read_bytes())
    (root / "good.jsonl").write_bytes((BAD / "ok.jsonl").read_bytes())
    (root / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv(files.ENV_ROOTS, str(root))
    assert files.resolve_data_path(str(root / "good.jsonl")) == (root / "good.jsonl").resolve()
    escapes = [str(root / "link.jsonl"), str(root / "dirlink" / "secret.jsonl"),
               str(root / ".." / "outside" / "secret.jsonl"), str(outside / "secret.jsonl"),
               "../../../../../../etc/passwd", "/etc/passwd", "sample_rollouts/../README.md",
               str(root) + "/../outside/secret.jsonl", "~/../../etc/shadow"]
    for ref in escapes:
        with pytest.raises(ValueError):
            files.resolve_data_path(ref)
    for ref in ("", "a\x00b.jsonl", str(root / "nope.jsonl"), str(root)):
        with pytest.raises(ValueError):
            files.resolve_data_path(ref)
    # A prefix of an allowed root is not inside it (root-evil vs root).
    evil = tmp_path / "root-evil"
    evil.mkdir()
    (evil / "x.jsonl").write_bytes(b"{}\n")
    with pytest.raises(ValueError):
        files.resolve_data_path(str(evil / "x.jsonl"))


def test_uploads_have_a_size_limit_and_safe_names(tmp_path, monkeypatch):
    from crbc_viz.ui import files

    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    monkeypatch.setattr(files, "MAX_UPLOAD_MB", 1)
    with pytest.raises(ValueError, match="limit is 1 MB"):
        files.save_upload("big.jsonl", b"x" * (2 * 2**20))
    with pytest.raises(ValueError, match="unsupported file type"):
        files.save_upload("evil.py", b"print(1)")
    out = files.save_upload("../../etc/x.jsonl", b"{}\n")
    assert out.parent == tmp_path / "up" and out.name.endswith(".jsonl") and ".." not in out.name
    assert not [p for p in (tmp_path / "up").iterdir() if p.suffix == ".tmp" or p.name.startswith("tmp")]


# ---------------------------------------------------------------- rendering (no browser)
def test_markup_in_every_field_is_escaped_in_views():
    from crbc_viz.views.graph_view import graph_html
    from crbc_viz.views.trajectories import trajectory_table

    b = load_rollouts(BAD / "markup_everywhere.jsonl")
    g = crbc_viz.build_graph(b)
    results = {n: crbc_viz.score(g, n, backend="numpy") for n in ("crbc", "grpo")}
    html = graph_html(g, results["crbc"])
    table = trajectory_table(g, results)
    for text in (html, table):
        for p in PAYLOADS:
            assert p not in text
        assert "<img" not in text and "<script>alert" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in table
    # In the pyvis page the payload only appears inside JSON strings with < escaped.
    assert "\\u003cimg" in html or "&lt;img" in html


# ---------------------------------------------------------------- the browser
XSS_FIELDS = ("action", "observation", "response", "anchor_obs", "group_id", "traj_id", "my_note")


def _xss_log(path: Path) -> Path:
    img, script = "<img src=x onerror=window.__xss=1>", "</script><script>window.__xss=2</script>"
    rows = []
    for traj, ok in (("r0", True), (img, False)):
        for i in range(2):
            rows.append({"run_id": "xss", "train_step": 0, "group_id": script, "traj_id": traj,
                         "step_idx": i, "reward": float(ok and i == 1), "done": i == 1, "success": ok,
                         "action": (img if i == 0 else script) + traj, "observation": img + script,
                         "response": script + img, "my_note": img, "anchor_obs": script if i == 0 else img + traj})
    return write_jsonl(path, rows)


@pytest.mark.browser
def test_compare_and_estimators_pages_and_url_params_stay_inert(tmp_path_factory):
    pytest.importorskip("playwright")
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("/usr/bin/chromium is absent")
    import urllib.parse

    from playwright.sync_api import sync_playwright
    from streamlit_server import streamlit_server

    data = tmp_path_factory.mktemp("xss_roots")
    log = _xss_log(data / "xss.jsonl")
    b = load_rollouts(log)
    group = b.group_label(0)
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    from streamlit_server import CHROMIUM, CHROMIUM_ARGS, WAIT_MS as wait, app_idle as idle

    def inert(pg):
        for f in pg.frames:
            assert f.evaluate("() => typeof window.__xss") == "undefined", f.url
        assert pg.locator("img[src='x']").count() == 0

    with streamlit_server(env={"CRBC_VIZ_DATA_ROOTS": str(data)},
                          log_path=out / "streamlit-hostile.log") as url, sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            pg = br.new_page(viewport={"width": 1400, "height": 1800})
            q = {"file": str(log), "group": group, "estimator": "crbc"}
            for page, marker in (("compare", ".js-plotly-plot"), ("estimators", "text=registered estimators"),
                                 ("trajectories", "text=chips, top to bottom"), ("", "[data-testid='stMetric']")):
                pg.goto(f"{url}/{page}?" + urllib.parse.urlencode(q))
                pg.locator(marker).first.wait_for(timeout=wait)
                idle(pg)
                # Hover the scatter points / tables so that hover text is rendered too.
                for el in pg.locator(".js-plotly-plot").all()[:2]:
                    box = el.bounding_box()
                    if box:
                        pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                inert(pg)
                pg.screenshot(path=str(out / f"xss_{page or 'data'}.png"))
            # Reflected: hostile values in the URL itself.
            for page in ("graph", "compare", "estimators", ""):
                bad = {"file": "<img src=x onerror=window.__xss=3>", "group": "</script><img src=x "
                       "onerror=window.__xss=4>", "estimator": "<img src=x onerror=window.__xss=5>"}
                pg.goto(f"{url}/{page}?" + urllib.parse.urlencode(bad))
                pg.wait_for_selector("[data-testid='stApp']", timeout=wait)
                idle(pg)
                inert(pg)
        finally:
            br.close()
