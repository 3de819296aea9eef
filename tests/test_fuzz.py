"""Fuzzing the loaders (ISSUE 8).

- hypothesis: valid step tables, then corrupted ones (byte flips, truncation, hostile tokens,
  wrong types in known fields), through every reader; the only allowed failure is a
  `LoadError` (or, for malformed optional signals, an estimator's `ValueError` naming the field).
  Whatever loads runs through every estimator with finite credits.
- atheris (coverage-guided libFuzzer): ``python tests/test_fuzz.py --atheris [libFuzzer flags]``
  runs the JSONL loader on mutated bytes; `test_atheris_jsonl_bounded` runs it for
  `ATHERIS_SECONDS` seconds in a subprocess, seeded with the bad-input corpus. Skipped when
  atheris is not installed (it is in requirements-dev.txt for Linux / CPython < 3.13).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ATHERIS_SECONDS = 15


def _check_file(path: str) -> None:
    """Load ``path`` strictly and leniently; whatever loads must score finitely."""
    import crbc_viz
    from crbc_viz.estimators import MissingSignalError, names
    from crbc_viz.io import LoadError, load_rollouts

    for lenient in (False, True):
        try:
            batch = load_rollouts(path, lenient=lenient)
        except LoadError as exc:
            assert exc.problems and str(exc)
            continue
        graph = crbc_viz.build_graph(batch)
        for name in names():
            try:
                r = crbc_viz.score(graph, name, backend="numpy")
            except MissingSignalError:
                continue
            except ValueError as exc:  # malformed optional signal: named, not a crash
                assert name in str(exc) or "field" in str(exc), (name, exc)
                continue
            assert np.isfinite(r.advantage).all() and np.isfinite(r.credit).all(), name


if __name__ != "__main__":
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from test_properties import step_tables

    FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    HOSTILE = [b"NaN", b"Infinity", b"-1", b"1e400", b"null", b"true", b'"x"', b"[]", b"{}",
               b"\\ud800", b"\x00", b"\xff", b"<img src=x onerror=alert(1)>", b"9" * 30,
               b'"steps": 3', b"[" * 200, b"\n", b'"', b",", b"}"]
    FIELDS = ["group_id", "traj_id", "step_idx", "reward", "done", "success", "anchor_obs", "action",
              "train_step", "run_id", "episode_return", "anchor_key", "judge_score", "gold_logprob",
              "influence_edges", "rubric_active", "steps"]
    VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.floats(allow_nan=True),
                       st.text(max_size=8), st.lists(st.integers(0, 3), max_size=3),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))

    @st.composite
    def corrupted_jsonl(draw):
        rows = draw(step_tables(max_groups=2, max_trajs=3, max_len=4))
        # Field-level damage: a wrong type, a deleted key, a foreign value.
        for _ in range(draw(st.integers(0, 3))):
            r = draw(st.sampled_from(rows))
            f = draw(st.sampled_from(FIELDS))
            if draw(st.booleans()):
                r.pop(f, None)
            else:
                r[f] = draw(VALUES)
        data = bytearray("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows).encode())
        # Byte-level damage: flips, hostile insertions, truncation.
        for _ in range(draw(st.integers(0, 4))):
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            kind = draw(st.sampled_from(["flip", "insert", "delete"]))
            if kind == "flip" and data:
                data[at] ^= 1 << draw(st.integers(0, 7))
            elif kind == "insert":
                data[at:at] = draw(st.sampled_from(HOSTILE))
            elif data:
                del data[at:at + draw(st.integers(1, 40))]
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
        return bytes(data)

    @FUZZ
    @given(rows=step_tables(max_groups=2, max_trajs=3, max_len=4),
           fmt=st.sampled_from(["jsonl", "json", "csv", "parquet", "jsonl.gz"]))
    def test_valid_tables_load_in_every_format(tmp_path, rows, fmt):
        import gzip

        import pandas as pd

        path = tmp_path / f"t.{fmt}"
        if fmt in ("jsonl", "jsonl.gz"):
            text = "".join(json.dumps(r) + "\n" for r in rows).encode()
            path.write_bytes(gzip.compress(text) if fmt.endswith("gz") else text)
        elif fmt == "json":
            path.write_text(json.dumps(rows))
        else:
            df = pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict))}
                               for r in rows])
            df.to_csv(path, index=False) if fmt == "csv" else df.to_parquet(path)
        from crbc_viz.io import load_rollouts

        b = load_rollouts(path)
        assert b.num_steps == len(rows)
        _check_file(str(path))

    @FUZZ
    @given(data=corrupted_jsonl(), fmt=st.sampled_from(["jsonl", "json", "csv"]))
    def test_corrupted_tables_fail_cleanly(tmp_path, data, fmt):
        path = tmp_path / f"c.{fmt}"
        if fmt == "json":
            data = b"[" + b",".join(line for line in data.split(b"\n") if line) + b"]"
        elif fmt == "csv":
            import pandas as pd

            try:
                rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
                data = pd.DataFrame([r for r in rows if isinstance(r, dict)]).to_csv(index=False).encode()
            except (ValueError, UnicodeDecodeError, RecursionError):
                pass  # then the damaged bytes themselves are the CSV
        path.write_bytes(data)
        _check_file(str(path))

    @FUZZ
    @given(data=st.binary(max_size=400), fmt=st.sampled_from(["jsonl", "json", "csv", "parquet",
                                                               "jsonl.gz"]))
    def test_random_bytes_fail_cleanly(tmp_path, data, fmt):
        path = tmp_path / f"r.{fmt}"
        path.write_bytes(data)
        _check_file(str(path))

    def test_atheris_jsonl_bounded(tmp_path):
        pytest.importorskip("atheris")
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for p in sorted((HERE / "bad_inputs").glob("*.jsonl")):
            if p.stat().st_size < 8192:
                shutil.copy(p, corpus / p.name)
        proc = subprocess.run(
            [sys.executable, str(Path(__file__)), "--atheris", f"-max_total_time={ATHERIS_SECONDS}",
             "-rss_limit_mb=3072", "-max_len=4096", "-timeout=10", f"-artifact_prefix={tmp_path}/",
             str(corpus)],
            cwd=ROOT, capture_output=True, text=True, timeout=ATHERIS_SECONDS + 90,
            env={**os.environ, "CRBC_FUZZ_TMP": str(tmp_path)})
        tail = (proc.stdout + proc.stderr)[-4000:]
        assert proc.returncode == 0, tail
        assert "Traceback" not in proc.stderr, tail
        assert "Done" in proc.stderr or "pulse" in proc.stderr or "INITED" in proc.stderr, tail


def _atheris_main(argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["crbc_viz"]):
        import crbc_viz.io.readers  # noqa: F401
        import crbc_viz.io.schema  # noqa: F401
    # libFuzzer exits the process itself, so the scratch file lives where the caller cleans up.
    fd, path = tempfile.mkstemp(suffix=".jsonl", dir=os.environ.get("CRBC_FUZZ_TMP"))
    os.close(fd)

    def one_input(data: bytes) -> None:
        with open(path, "wb") as fh:
            fh.write(data)
        _check_file(path)

    atheris.Setup([sys.argv[0], *argv], one_input)
    try:
        atheris.Fuzz()
    finally:
        os.unlink(path)


if __name__ == "__main__":
    if "--atheris" in sys.argv:
        sys.path.insert(0, str(ROOT))
        _atheris_main([a for a in sys.argv[1:] if a != "--atheris"])
