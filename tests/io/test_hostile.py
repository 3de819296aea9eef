"""Hostile and broken input: every bad log gets a clear error, nothing renders as
code, nothing is lost.

The corpus ``tests/bad_inputs/`` (written by ``tests/make_bad_inputs.py``; ``MANIFEST.json``
maps each file to the substring its error must contain, or ``"accept"``) is run through the
real CLI, one subprocess per file. Big cases are generated here, at test time.
"""

from __future__ import annotations

import gzip as _gzip
import hashlib
import json
import os
import re
import stat as _stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crbc_viz
import make_bad_inputs
from crbc_viz.io import LoadError, load_rollouts
from helpers import ROOT, write_jsonl

BAD = Path(__file__).resolve().parents[1] / "bad_inputs"
MANIFEST = json.loads((BAD / "MANIFEST.json").read_text())
CLI_TIMEOUT = 60
PAYLOADS = ("<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>")


def run_cli(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT):
    return subprocess.run(
        [sys.executable, "-m", "crbc_viz", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


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
    proc = subprocess.run(
        [sys.executable, "-c", wrapper],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
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
    code = (
        "from crbc_viz.io import load_rollouts, LoadError\n"
        f"try:\n    load_rollouts({str(path)!r})\nexcept LoadError as e:\n    print(e)\n"
    )
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
            fh.write(
                f'{{"group_id":"g{g}","traj_id":"t","step_idx":0,"reward":{g % 2},'
                f'"done":true,"anchor_obs":"s"}}\n'
            )
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
    with pytest.raises(ValueError):  # pyarrow's ArrowInvalid
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
]


def _unsafe_torch_loads(text: str, where: str) -> list[str]:
    """Calls of ``torch.load`` without ``weights_only=True`` written in the call: the one safe
    way to read a ``.pt`` (a trainer's dump) is its weights-only unpickler (text that only
    names the function, in a docstring, is not a call)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(text, where)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "load"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "torch"
        ):
            safe = any(
                k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords
            )
            if not safe:
                out.append(f"{where}:{node.lineno}: torch.load without weights_only=True")
    return out


def test_no_unsafe_deserialisation_or_eval_in_the_source():
    files = [p for p in (ROOT / "crbc_viz").rglob("*.py")]
    files += [ROOT / "app.py"]  # the page scripts are in crbc_viz/app/app_pages
    hits = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for pat, what in _FORBIDDEN:
            for m in re.finditer(pat, text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{f.relative_to(ROOT)}:{line}: {what}")
        hits += _unsafe_torch_loads(text, str(f.relative_to(ROOT)))
    assert not hits, hits


def test_the_torch_load_check_finds_an_unsafe_call():
    assert _unsafe_torch_loads("import torch\nx = torch.load(p)\n", "m.py") == [
        "m.py:2: torch.load without weights_only=True"
    ]
    assert _unsafe_torch_loads("x = torch.load(p, weights_only=False)\n", "m.py")
    assert not _unsafe_torch_loads('"""torch.load(x)"""\nx = torch.load(p, weights_only=True)\n', "m.py")


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
    escapes = [
        str(root / "link.jsonl"),
        str(root / "dirlink" / "secret.jsonl"),
        str(root / ".." / "outside" / "secret.jsonl"),
        str(outside / "secret.jsonl"),
        "../../../../../../etc/passwd",
        "/etc/passwd",
        "sample_rollouts/../README.md",
        str(root) + "/../outside/secret.jsonl",
        "~/../../etc/shadow",
    ]
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
            rows.append(
                {
                    "run_id": "xss",
                    "train_step": 0,
                    "group_id": script,
                    "traj_id": traj,
                    "step_idx": i,
                    "reward": float(ok and i == 1),
                    "done": i == 1,
                    "success": ok,
                    "action": (img if i == 0 else script) + traj,
                    "observation": img + script,
                    "response": script + img,
                    "my_note": img,
                    "anchor_obs": script if i == 0 else img + traj,
                }
            )
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
    from streamlit_server import CHROMIUM, CHROMIUM_ARGS, track_browser
    from streamlit_server import WAIT_MS as wait
    from streamlit_server import app_idle as idle

    def inert(pg):
        for f in pg.frames:
            assert f.evaluate("() => typeof window.__xss") == "undefined", f.url
        assert pg.locator("img[src='x']").count() == 0

    with (
        streamlit_server(
            env={"CRBC_VIZ_DATA_ROOTS": str(data)}, log_path=out / "streamlit-hostile.log"
        ) as url,
        sync_playwright() as p,
    ):
        br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
        try:
            pg = br.new_page(viewport={"width": 1400, "height": 1800})
            q = {"file": str(log), "group": group, "estimator": "crbc"}
            for page, marker in (
                ("compare", ".js-plotly-plot"),
                ("estimators", "text=registered estimators"),
                ("trajectories", "text=chips, top to bottom"),
                ("", "[data-testid='stMetric']"),
            ):
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
            # Reflected: hostile values in the URL itself, on every page with the shared sidebar.
            from crbc_viz.ui.pages import page_facts

            facts = page_facts()
            shared = [
                ("" if p is facts[0] else p.get("url_path") or p["name"])
                for p in facts
                if not p.get("own_data")
            ]
            for page in shared:
                bad = {
                    "file": "<img src=x onerror=window.__xss=3>",
                    "group": "</script><img src=x onerror=window.__xss=4>",
                    "estimator": "<img src=x onerror=window.__xss=5>",
                }
                pg.goto(f"{url}/{page}?" + urllib.parse.urlencode(bad))
                pg.wait_for_selector("[data-testid='stApp']", timeout=wait)
                idle(pg)
                inert(pg)
        finally:
            br.close()


# ================================================================ hostile input: files, store, outputs


def _ok_rows() -> list[dict]:
    return [json.loads(x) for x in (BAD / "ok.jsonl").read_text().splitlines()]


def _clean_exit2(proc, *needles: str) -> None:
    """Exit 2, no traceback, one bounded message containing every needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert len(proc.stderr) < 20_000
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr[-2000:])


def _make_special(tmp_path: Path, name: str, kind: str) -> Path:
    p = tmp_path / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind.startswith("link:"):
        p.symlink_to(kind[5:])
    elif kind == "loop":
        p.symlink_to(p.name)
    return p


@pytest.mark.parametrize("name", sorted(make_bad_inputs.special_cases()))
def test_special_files_are_refused_before_reading(tmp_path, name):
    """Item 8 / 2 / 12: a FIFO (no writer: opening it would block), a link to /dev/zero (never
    ends) and a symlink loop are refused from their file type, by `info` and by `ingest`."""
    kind, expect = make_bad_inputs.special_cases()[name]
    path = _make_special(tmp_path, name, kind)
    for args in (
        ("info", str(path)),
        ("info", "--lenient", str(path)),
        ("ingest", "-q", str(path), "--store", str(tmp_path / "s")),
    ):
        proc = run_cli(*args, timeout=60)  # a read of the FIFO would hang past this
        _clean_exit2(proc, expect, name)
    assert not (tmp_path / "s" / "steps").exists()


def test_special_cases_are_not_in_the_committed_corpus():
    for name in make_bad_inputs.special_cases():
        assert name not in MANIFEST and not (BAD / name).exists()
    for name in MANIFEST:
        assert _stat.S_ISREG((BAD / name).lstat().st_mode), name


def _gzip_bomb(path: Path, mib: int, head: bytes, filler: bytes) -> Path:
    with _gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(head)
        block = filler * ((1 << 20) // len(filler))
        for _ in range(mib):
            fh.write(block)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "json"])
def test_gzip_is_capped_after_decompression_in_bounded_memory(tmp_path, fmt):
    """Item 2: the limit counts decompressed bytes (a small .gz expands to 40 MiB here, with the
    limit at 8 MiB): clear exit 2 naming the file, the limit and the variable, before the
    expansion is held in memory."""
    ok = (BAD / "ok.jsonl").read_bytes()
    if fmt == "jsonl":
        path = _gzip_bomb(tmp_path / "bomb.jsonl.gz", 40, ok, b"\n")
    elif fmt == "csv":
        csv = (BAD / "ok.csv").read_bytes()
        path = _gzip_bomb(tmp_path / "bomb.csv.gz", 40, csv, csv.split(b"\n", 1)[1])
    else:
        path = _gzip_bomb(
            tmp_path / "bomb.json.gz", 40, b"[" + ok.replace(b"\n", b",")[:-1] + b"", b" " * 1024
        )
    assert path.stat().st_size < 200_000
    env = {"CRBC_VIZ_MAX_INPUT_MB": "8"}
    proc = run_cli("info", str(path), env=env)
    _clean_exit2(proc, "bomb", "8 MiB", "CRBC_VIZ_MAX_INPUT_MB")
    proc = run_cli("ingest", "-q", str(path), "--store", str(tmp_path / "s"), env=env)
    _clean_exit2(proc, "bomb", "CRBC_VIZ_MAX_INPUT_MB")
    code = (
        "from crbc_viz.io import load_rollouts, LoadError\n"
        f"try:\n    load_rollouts({str(path)!r})\nexcept LoadError as e:\n    print(e)\n"
    )
    base, _ = _peak_rss_mb(code.replace(str(path), str(BAD / "ok.jsonl")), env=env)
    peak, out = _peak_rss_mb(code, env=env)
    assert "CRBC_VIZ_MAX_INPUT_MB" in out
    assert peak - base < 64, (base, peak)  # never the 40 MiB expansion (plus its objects)


def test_row_field_and_cell_limits_are_settings(tmp_path):
    """Item 2: rows, distinct fields and rows x fields are counted as the file expands."""
    rows = []
    for g in range(1500):
        rows += [dict(r, group_id=f"g{g}") for r in _ok_rows()]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    _clean_exit2(
        run_cli("info", str(path), env={"CRBC_VIZ_MAX_ROWS": "1000"}),
        "rows.jsonl:line 1001",
        "more than the limit of 1,000 rows",
        "CRBC_VIZ_MAX_ROWS",
    )
    assert run_cli("info", str(path), env={"CRBC_VIZ_MAX_ROWS": "6000"}).returncode == 0
    _clean_exit2(
        run_cli("info", str(path), env={"CRBC_VIZ_MAX_CELLS": "20000"}), "table cells", "CRBC_VIZ_MAX_CELLS"
    )
    wide = pd.DataFrame(_ok_rows())
    for k in range(40):
        wide[f"extra{k}"] = k
    wide.to_csv(tmp_path / "wide.csv", index=False)
    wide.to_parquet(tmp_path / "wide.parquet")
    for name in ("wide.csv", "wide.parquet"):
        _clean_exit2(
            run_cli("info", str(tmp_path / name), env={"CRBC_VIZ_MAX_FIELDS": "30"}),
            name,
            "more than the limit of 30 distinct field names",
            "CRBC_VIZ_MAX_FIELDS",
        )
        assert run_cli("info", str(tmp_path / name)).returncode == 0


@pytest.mark.parametrize(
    "setting",
    [
        "CRBC_VIZ_MAX_LINE_MB=inf",
        "CRBC_VIZ_MAX_JSON_MB=nan",
        "CRBC_VIZ_MAX_INPUT_MB=-1",
        "CRBC_VIZ_MAX_ROWS=0",
        "CRBC_VIZ_MAX_FIELDS=lots",
        "CRBC_VIZ_MAX_PROBLEMS=inf",
    ],
)
def test_limit_settings_that_are_not_finite_positive_numbers(tmp_path, setting):
    """Item 9: ``CRBC_VIZ_MAX_*=inf`` was an OverflowError traceback."""
    var, val = setting.split("=")
    doc = tmp_path / "ok.json"
    doc.write_text(json.dumps(_ok_rows()))
    _clean_exit2(run_cli("info", str(doc if "JSON" in var else BAD / "ok.jsonl"), env={var: val}), var)


def test_outputs_that_are_inputs_or_in_a_store_are_refused(tmp_path):
    """Item 4 (and 9): ``score LOG -o LOG``, a link to the input, ``export -o`` onto a part or
    into the store, a folder, a file as parent: exit 2, one line, nothing changed."""
    log = tmp_path / "output_is_input.jsonl"
    log.write_bytes((BAD / "output_is_input.jsonl").read_bytes())
    before = log.read_bytes()
    _clean_exit2(run_cli("score", str(log), "-o", str(log)), "is the input", str(log))
    (tmp_path / "alias.jsonl").symlink_to(log)
    _clean_exit2(run_cli("score", str(log), "-o", str(tmp_path / "alias.jsonl")), "is the input")
    _clean_exit2(run_cli("score", str(tmp_path / "alias.jsonl"), "-o", str(log)), "is the input")
    assert log.read_bytes() == before
    store = tmp_path / "store"
    assert run_cli("ingest", "-q", str(log), "--store", str(store)).returncode == 0
    parts = sorted(store.rglob("*.parquet"))
    snap = {p: p.read_bytes() for p in parts}
    _clean_exit2(run_cli("export", "--store", str(store), "-o", str(parts[0])), "inside the log store")
    _clean_exit2(run_cli("export", "--store", str(store), "-o", str(store / "x.csv")), "inside the log store")
    _clean_exit2(
        run_cli("score", "--store", str(store), "-o", str(store / "cache" / "x.parquet")),
        "inside the log store",
    )
    _clean_exit2(run_cli("score", str(BAD / "ok.jsonl"), "-o", str(parts[0])), "inside the log store")
    assert {p: p.read_bytes() for p in sorted(store.rglob("*.parquet"))} == snap
    _clean_exit2(run_cli("score", str(log), "-o", str(tmp_path)), "is a folder")
    (tmp_path / "afile").write_text("x")
    _clean_exit2(
        run_cli("score", str(log), "-o", str(tmp_path / "afile" / "o.csv")), "is a file, not a folder"
    )
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        _clean_exit2(run_cli("score", str(log), "-o", str(ro / "o.csv")), "cannot write")
    ok = run_cli("export", "--store", str(store), "-o", str(tmp_path / "e.parquet"))
    assert ok.returncode == 0, ok.stderr


def test_disk_full_is_one_line(tmp_path, monkeypatch):
    """Item 9: an OSError while writing (ENOSPC) is an OutputError naming the file."""
    import errno

    from crbc_viz.io.write import OutputError, write_frame

    def full(self, path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    with pytest.raises(OutputError, match="o.parquet.*No space left"):
        write_frame(pd.DataFrame({"a": [1]}), tmp_path / "o.parquet")
    assert list(tmp_path.iterdir()) == []


def _ingest(tmp_path: Path, *logs, store: str = "store", extra=()) -> Path:
    root = tmp_path / store
    proc = run_cli("ingest", "-q", *map(str, logs), "--store", str(root), *extra)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return root


def _manifest(store: Path) -> Path:
    (m,) = sorted((store / "manifest").glob("*.json"))
    return m


@pytest.mark.parametrize(
    "attack", ["dotdot", "absolute", "text_dotdot", "symlink_out", "missing", "not_a_list", "garbage"]
)
def test_store_manifests_naming_files_outside_the_store_are_refused(tmp_path, attack):
    """Item 6 (and 9): a manifest naming a part outside the store (../, absolute, a symlinked
    part), a missing part or a damaged manifest: StoreError naming the manifest, exit 2."""
    store = _ingest(tmp_path, BAD / "ok.jsonl")
    outside = tmp_path / "outside.parquet"
    pd.read_parquet(next(store.rglob("steps/**/*.parquet"))).to_parquet(outside)  # a real part
    mpath = _manifest(store)
    man = json.loads(mpath.read_text())
    part = man["parts"][0]
    if attack == "dotdot":
        part["path"] = "steps/../../outside.parquet"
    elif attack == "absolute":
        part["path"] = str(outside)
    elif attack == "text_dotdot":
        part["text"] = "../outside.parquet"
    elif attack == "symlink_out":
        p = store / part["path"]
        p.unlink()
        p.symlink_to(outside)
    elif attack == "missing":
        (store / part["path"]).unlink()
    elif attack == "not_a_list":
        man["parts"] = {"a": 1}
    if attack == "garbage":
        mpath.write_text("{ not json")
    elif attack != "symlink_out" and attack != "missing":
        mpath.write_text(json.dumps(man))
    expect = "unreadable manifest" if attack == "garbage" else mpath.name
    for args in (
        ("info", "--store", str(store)),
        ("info", "--store", str(store), "--group", "g"),
        ("score", "--store", str(store), "-o", str(tmp_path / "o.parquet")),
        ("trends", "-q", "--store", str(store)),
        ("export", "--store", str(store), "-o", str(tmp_path / "e.parquet")),
    ):
        _clean_exit2(run_cli(*args), expect)
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "e.parquet").exists()


def test_damaged_store_files_are_named(tmp_path):
    """Item 9 / 12: a garbage store.json and a corrupt part are one-line errors."""
    store = _ingest(tmp_path, BAD / "ok.jsonl")
    part = next(store.rglob("steps/**/*.parquet"))
    part.write_bytes(part.read_bytes()[:60])
    _clean_exit2(
        run_cli("info", "--store", str(store), "--group", "g"), "cannot read the store's data", "re-ingest"
    )
    (store / "store.json").write_text("garbage")
    _clean_exit2(run_cli("info", "--store", str(store)), "store.json", "not a valid store marker")


def test_path_like_ids_stay_inside_the_store(tmp_path):
    """Item 6: run and group ids that look like paths never become paths: every file the
    store writes (parts, manifests, trends cache) lies under the store folder."""
    escape = Path("/tmp/crbc-escape")
    store = _ingest(tmp_path, BAD / "traversal_ids.jsonl", BAD / "long_unicode_run_id.jsonl")
    for args in (
        ("trends", "-q", "--store", str(store)),
        ("trends", "-q", "--store", str(store), "--run", "../../../../tmp/crbc-escape"),
        ("export", "--store", str(store), "-o", str(tmp_path / "e.parquet")),
        ("info", "--store", str(store), "--group", "../../g"),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    root = store.resolve()
    for p in store.rglob("*"):
        assert root in p.resolve().parents, p
        assert len(p.name.encode()) <= 255
    assert not escape.exists()
    runs = pd.read_parquet(tmp_path / "e.parquet")["run_id"].unique().tolist()
    assert sorted(runs) == sorted(["../../../../tmp/crbc-escape", "\u00fc" * 300])


def test_trends_cache_that_is_corrupt_is_recomputed(tmp_path):
    """Item 12: a damaged cache file was an error on every later `trends`."""
    store = _ingest(tmp_path, BAD / "ok.jsonl")
    first = run_cli("trends", "-q", "--store", str(store), "--json")
    assert first.returncode == 0, first.stderr
    cached = sorted((store / "cache").glob("*.parquet"))
    assert cached
    for p in cached:
        p.write_bytes(b"PAR1 broken")
    again = run_cli("trends", "-q", "--store", str(store), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout), again.stderr
    assert all(pd.read_parquet(p) is not None for p in cached)  # rewritten


def test_interrupted_ingest_is_reported_and_can_be_dropped(tmp_path):
    """Item 12: after a kill -9 the partial source is named as incomplete, and
    `drop-incomplete` removes it (its parts too); a fresh ingest then works."""
    from crbc_viz.store import CRASH_ENV

    rows = []
    for g in range(40):
        rows += [dict(r, group_id=f"g{g}") for r in _ok_rows()]
    log = write_jsonl(tmp_path / "run.jsonl", rows)
    store = tmp_path / "store"
    proc = run_cli("ingest", "-q", str(log), "--store", str(store), "--part-rows", "20", env={CRASH_ENV: "2"})
    assert proc.returncode == 17
    info = run_cli("info", "--store", str(store))
    assert info.returncode == 0
    assert "is incomplete" in info.stderr and "40 of 160 steps" in info.stderr, info.stderr
    assert "drop-incomplete" in info.stderr
    drop = run_cli("drop-incomplete", "--store", str(store))
    assert drop.returncode == 0 and "1 incomplete source(s) removed" in drop.stdout, drop.stderr
    assert not list(store.rglob("*.parquet")) and not list((store / "manifest").glob("*.json"))
    _ingest(tmp_path, log)
    info = run_cli("info", "--store", str(store), "--json")
    assert json.loads(info.stdout)["steps"] == 160 and "incomplete" not in info.stderr


def test_same_file_with_another_run_id_is_ingested_again(tmp_path):
    """Item 12: the same file under another --run-id was silently skipped."""
    store = _ingest(tmp_path, BAD / "ok.jsonl", extra=("--run-id", "first"))
    proc = run_cli("ingest", "-q", str(BAD / "ok.jsonl"), "--store", str(store), "--run-id", "second")
    assert proc.returncode == 0 and "ingested" in proc.stdout, proc.stdout
    again = run_cli("ingest", "-q", str(BAD / "ok.jsonl"), "--store", str(store), "--run-id", "second")
    assert "skipped" in again.stdout
    info = json.loads(run_cli("info", "--store", str(store), "--json").stdout)
    assert info["runs"] == ["first", "second"] and info["steps"] == 8


def test_csv_outputs_escape_formula_cells(tmp_path):
    """Item 7: text cells starting with = + - @ tab or CR get a leading ' (OWASP); numbers
    stay numbers; Parquet/JSONL keep values exact."""
    import csv

    src = BAD / "formula_cells.jsonl"
    store = _ingest(tmp_path, src)
    outs = [tmp_path / "s.csv", tmp_path / "e.csv"]
    assert run_cli("score", str(src), "-o", str(outs[0])).returncode == 0
    assert run_cli("export", "--store", str(store), "-o", str(outs[1])).returncode == 0
    for out in outs:
        with open(out, newline="", encoding="utf-8") as fh:
            cells = [c for row in csv.reader(fh) for c in row]
        risky = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
        for c in risky:
            float(c)  # only numbers (negative advantages) may start with a formula character
        for f in make_bad_inputs.FORMULAS:
            assert any(c.startswith("'" + f) for c in cells), (out.name, f)
    assert run_cli("score", str(src), "-o", str(tmp_path / "s.parquet")).returncode == 0
    back = pd.read_parquet(tmp_path / "s.parquet")
    assert back["group_id"].iloc[0] == make_bad_inputs.FORMULAS[0]


def test_terminal_escapes_in_ids_are_not_printed_raw(tmp_path):
    """Item 11: ESC / C1 control characters from a log are printed as \\x1b escapes."""
    store = _ingest(tmp_path, BAD / "terminal_escapes.jsonl")
    group = make_bad_inputs.TERMINAL[0] + "g"
    outs = [
        run_cli("info", "--store", str(store), "--group", group),
        run_cli("info", "--store", str(store)),
        run_cli("trends", "-q", "--store", str(store), "--train-step", "0"),
        run_cli("info", str(BAD / "terminal_escapes.jsonl")),
        run_cli("info", "--store", str(store), "--group", group + "\x1b[5m nope"),
    ]
    for proc in outs:
        for text in (proc.stdout, proc.stderr):
            assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text, text
    assert outs[0].returncode == 0 and "\\x1b[2J" in outs[0].stdout, outs[0].stdout
    assert outs[-1].returncode == 2 and "\\x1b[5m" in outs[-1].stderr


def test_ingest_messages_name_file_and_stay_short(tmp_path):
    """Item 12: deep JSON in the first record (ingest's format sniff) is named, not
    "maximum recursion depth exceeded"; a 60 KB bad value is not echoed whole."""
    proc = run_cli("ingest", "-q", str(BAD / "deep_first_record.jsonl"), "--store", str(tmp_path / "s"))
    _clean_exit2(proc, "deep_first_record.jsonl", "nested too deeply")
    assert "recursion" not in proc.stderr
    proc = run_cli("ingest", "-q", str(BAD / "big_bad_value.jsonl"), "--store", str(tmp_path / "s"))
    _clean_exit2(proc, "big_bad_value.jsonl", "expected a number")
    assert len(proc.stderr) < 2000


def test_depth_and_similarity_work_are_bounded(tmp_path):
    """Item 10: depth=1e12 is refused up front (it looped in compiled code); GiGPO's
    quadratic similarity mode stops at a work limit with a message naming the setting."""
    out = str(tmp_path / "o.csv")
    _clean_exit2(run_cli("score", str(BAD / "ok.jsonl"), "-o", out, "-p", "depth=1e12"), "depth", "<= 10000")
    for d in ("inf", "10000", "3"):
        assert run_cli("score", str(BAD / "ok.jsonl"), "-o", out, "-p", f"depth={d}").returncode == 0
    sim = str(BAD / "similarity_anchors.jsonl")
    _clean_exit2(
        run_cli(
            "score",
            sim,
            "-e",
            "gigpo",
            "-o",
            out,
            "-p",
            "similarity=true",
            env={"CRBC_VIZ_MAX_SIMILARITY_WORK": "100000"},
        ),
        "similarity",
        "CRBC_VIZ_MAX_SIMILARITY_WORK",
    )
    assert run_cli("score", sim, "-e", "gigpo", "-o", out, "-p", "similarity=true").returncode == 0


def test_colliding_group_labels_are_made_unique():
    """Item 13: run 'a/0' step 1 group 'x' and run 'a' step 0 group '1/x' both read
    'a/0/1/x'; every group keeps a distinct label (so each is reachable in the app)."""
    b = load_rollouts(BAD / "colliding_labels.jsonl")
    labels = b.group_labels()
    assert b.num_groups == 3 and len(set(labels)) == 3
    assert labels[0] == "a/0/1/x" and labels[2] == "a/0/1/x #2" and labels[1] == "a/0/1/x #3"
    assert [b.group_label(g) for g in range(3)] == labels
    assert b.group_labels() is labels  # computed once per batch


def test_sql_field_names_through_every_store_command(tmp_path):
    """Item 1: field names that are DuckDB scripts or hold a double quote are data: every
    store command reads them back, none runs them (the script would write a file)."""
    from crbc_viz.store import LogStore

    pwned = Path("/tmp/crbc-sql-pwned.csv")
    if pwned.exists():
        pwned.unlink()
    src = BAD / "sql_field_names.jsonl"
    store = _ingest(tmp_path, src)
    for args in (
        ("info", "--store", str(store)),
        ("info", "--store", str(store), "--group", "g"),
        ("info", "--store", str(store), "--group", "bad/0/g", "--json"),
        ("score", "--store", str(store), "-o", str(tmp_path / "o.parquet")),
        ("trends", "-q", "--store", str(store)),
        ("export", "--store", str(store), "-o", str(tmp_path / "e.csv")),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr[-3000:])
    assert not pwned.exists()
    with LogStore(store) as st:
        steps = st.load_batch(group="g").steps
        for i, f in enumerate(make_bad_inputs.SQL_FIELDS):
            assert set(steps[f]) == {f"v{i}"}, f
        for f in make_bad_inputs.SQL_FIELDS:
            assert st.search_steps(f[:5]).empty or True
    assert not pwned.exists()


def test_upload_folder_is_private_and_bounded(tmp_path, monkeypatch):
    """Item 6: the upload folder is a fresh 0700 folder of this user (not a shared, predictable
    path another local user could pre-create as a symlink); uploads are pruned oldest-first."""
    from crbc_viz.ui import files

    d = Path(files.UPLOAD_DIR)
    st = d.lstat()
    assert _stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and _stat.S_IMODE(st.st_mode) == 0o700
    assert d.name != "crbc-viz-uploads" and d.name.startswith("crbc-viz-uploads-")
    target = tmp_path / "attacker"
    target.mkdir()
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "link")
    with pytest.raises(ValueError, match="not a private folder"):
        files.save_upload("a.jsonl", b"{}\n")
    assert list(target.iterdir()) == []
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    monkeypatch.setattr(files, "MAX_UPLOADS_KEPT", 3)
    saved = []
    for i in range(5):
        saved.append(files.save_upload(f"u{i}.jsonl", f'{{"i": {i}}}\n'.encode()))
        os.utime(saved[-1], (1_000_000 + i, 1_000_000 + i))  # distinct ages, oldest first
    left = sorted(p.name for p in (tmp_path / "up").iterdir())
    assert len(left) == 3 and saved[-1].name in left and saved[0].name not in left
    assert _stat.S_IMODE((tmp_path / "up").stat().st_mode) == 0o700


# ---------------------------------------------------------------- hostile input: the app
EVIL = (
    "[click](http://evil.invalid/x)",
    "![img](http://evil.invalid/a.png)",
    "<img src=http://evil.invalid/b.png>",
    "www.evil.invalid :red[red] **bold**",
)
_LINK = re.compile(r"(?<!\\)!?\[[^\]]*(?<!\\)\]\(|(?<!\\)<img|https?://evil|(?<!\\)www\.evil")


def _app(query: dict, page: str | None = None, env: dict | None = None):
    from streamlit.testing.v1 import AppTest

    for k, v in (env or {}).items():
        os.environ[k] = v
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        if page:
            at.switch_page(page)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
    finally:
        for k in env or {}:
            os.environ.pop(k, None)
    assert not at.exception, [e.value for e in at.exception]
    return at


def _shown(at) -> list[str]:
    out = []
    for root in (at, at.sidebar):
        for kind in ("error", "warning", "info", "success", "markdown", "caption", "title", "subheader"):
            out += [str(el.value) for el in getattr(root, kind)]
    return out


@pytest.mark.parametrize("evil", EVIL)
def test_app_url_values_and_load_errors_render_as_text(evil):
    """Item 5: ?file= / ?group= / ?estimator= / ?store= values and the load errors quoting
    them reach st.error / st.warning escaped: no link, image or HTML of the sender's choice."""
    pages = [
        (None, {"file": evil + ".jsonl", "estimator": evil}),
        (None, {"group": evil, "estimator": evil}),
        ("crbc_viz/app/app_pages/training.py", {"store": evil}),
    ]
    for page, q in pages:
        at = _app(q, page)
        texts = _shown(at)
        assert any("evil" in t for t in texts), texts  # the value is shown ...
        for t in texts:
            assert not _LINK.search(t), t  # ... as text


def test_app_log_values_render_as_text_and_tables_are_formula_safe(tmp_path):
    """Items 5 and 7: markdown in group / trajectory ids and actions stays text on every
    page; the tables whose "Download as CSV" writes cells verbatim hold no formula cell."""
    data = tmp_path / "roots"
    data.mkdir()
    for name in ("markdown_ids.jsonl", "formula_cells.jsonl"):
        (data / name).write_bytes((BAD / name).read_bytes())
    env = {"CRBC_VIZ_DATA_ROOTS": str(data)}
    at = _app({"file": str(data / "markdown_ids.jsonl")}, env=env)
    for page in (
        None,
        "crbc_viz/app/app_pages/graph.py",
        "crbc_viz/app/app_pages/trajectories.py",
        "crbc_viz/app/app_pages/compare.py",
    ):
        at = _app({"file": str(data / "markdown_ids.jsonl")}, page, env=env)
        for t in _shown(at):
            assert not _LINK.search(t), (page, t)
    cells = []
    for page in (
        None,
        "crbc_viz/app/app_pages/graph.py",
        "crbc_viz/app/app_pages/trajectories.py",
        "crbc_viz/app/app_pages/compare.py",
    ):
        at = _app({"file": str(data / "formula_cells.jsonl")}, page, env=env)
        for df in at.dataframe:
            table = df.value
            cells += [v for col in table.columns for v in table[col].tolist() if isinstance(v, str)]
    assert any(c[:1] == "'" and c[1:2] in "=+-@\t\r" for c in cells), cells
    assert not [c for c in cells if c[:1] in "=+-@\t\r"], cells


def test_app_long_or_odd_file_paths_are_short_errors():
    """Item 9: a very long ?file= (ENAMETOOLONG) is a short error, not an exception box."""
    for ref in (
        "/tmp/" + "a" * 5000 + ".jsonl",
        "/tmp/" + "b" * 300 + "/x.jsonl",
        "sample_rollouts/" + "../" * 50 + "etc/passwd",
    ):
        at = _app({"file": ref})
        errors = [str(e.value) for e in at.sidebar.error]
        assert errors and all(len(e) < 1500 for e in errors), errors


@pytest.mark.browser
def test_url_values_in_the_browser_fetch_nothing_and_link_nowhere(tmp_path_factory):
    """Item 5 in Chromium: hostile ?file= / ?group= / ?estimator= / ?store= values and a log
    whose ids are markdown links produce no <a href> or <img> to the sender's host, and the
    browser requests nothing from it."""
    pytest.importorskip("playwright")
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("/usr/bin/chromium is absent")
    import urllib.parse

    from playwright.sync_api import sync_playwright

    from streamlit_server import CHROMIUM, CHROMIUM_ARGS, streamlit_server, track_browser
    from streamlit_server import WAIT_MS as wait
    from streamlit_server import app_idle as idle

    data = tmp_path_factory.mktemp("md_roots")
    log = data / "markdown_ids.jsonl"
    log.write_bytes((BAD / "markdown_ids.jsonl").read_bytes())
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    with (
        streamlit_server(
            env={"CRBC_VIZ_DATA_ROOTS": str(data)}, log_path=out / "streamlit-hostile-md.log"
        ) as url,
        sync_playwright() as p,
    ):
        br = track_browser(p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))
        try:
            pg = br.new_page(viewport={"width": 1400, "height": 1600})
            asked, shown = [], []
            pg.on(
                "request",
                lambda r: (
                    asked.append(r.url)
                    if "evil.invalid" in (urllib.parse.urlparse(r.url).hostname or "")
                    else None
                ),
            )
            visits = [
                ("", {"file": EVIL[0] + ".jsonl", "group": EVIL[1], "estimator": EVIL[2]}),
                ("training", {"store": EVIL[1]}),
                ("training", {"store": EVIL[0]}),
                ("", {"file": str(log)}),
                ("graph", {"file": str(log)}),
                ("trajectories", {"file": str(log)}),
                ("compare", {"file": str(log)}),
            ]
            for page, q in visits:
                pg.goto(f"{url}/{page}?" + urllib.parse.urlencode(q))
                pg.wait_for_selector("[data-testid='stApp']", timeout=wait)
                if "file" in q and q["file"] != str(log) or "store" in q:  # an error quoting it
                    pg.locator("[data-testid='stAlert']").first.wait_for(timeout=wait)
                idle(pg)
                shown.append(pg.locator("[data-testid='stApp']").inner_text())
                for f in pg.frames:  # links to this app may carry the query; none leaves it
                    hosts = f.evaluate(
                        "() => [...document.querySelectorAll('a[href], img[src], "
                        "link[href], iframe[src]')].map(e => { try { return new "
                        "URL(e.href || e.src, location.href).hostname } catch (x) "
                        "{ return 'bad' } })"
                    )
                    assert not [h for h in hosts if "evil" in h or h == "bad"], (page, q, hosts)
                pg.screenshot(path=str(out / f"md_{page or 'data'}.png"))
            assert not asked, asked
            assert "evil.invalid" in shown[0] and "evil.invalid" in shown[1]  # shown, as text
            assert "[click](http://evil.invalid/x)" in shown[2].replace("\u2060", ""), shown[2][:2000]
        finally:
            br.close()
