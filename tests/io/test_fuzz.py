"""Fuzzing the loaders.

- hypothesis: valid step tables, then corrupted ones (byte flips, truncation, hostile tokens,
  wrong types in known fields), through every reader; the only allowed failure is a
  `LoadError` (or, for malformed optional signals, an estimator's `ValueError` naming the field).
  Whatever loads runs through every estimator with finite credits.
- atheris (coverage-guided libFuzzer): ``python tests/io/test_fuzz.py --atheris [libFuzzer flags]``
  runs the JSONL loader on mutated bytes; `test_atheris_jsonl_bounded` runs it for
  `ATHERIS_SECONDS` seconds in a subprocess, seeded with the bad-input corpus. Skipped when
  atheris is not installed (it is in requirements-dev.txt for Linux / CPython < 3.13).
- the store's read side (no SQL from data): field names and values of a log, drawn by
  hypothesis (`test_store_reads_field_names_and_values_as_data`) and by atheris
  (``--atheris-store``, `test_atheris_store_bounded`), are ingested and read back through every
  read path (groups, load_batch, search, trajectory lookup, summary); names and values must
  come back as data, and no statement may run (a script in a name would write a sentinel file).
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

HERE = Path(__file__).resolve().parents[1]  # tests/
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


#: Field names an attacker would try: DuckDB scripts, quotes, comments, and table functions.
SQL_NAMES = [
    'a"b',
    '"',
    '""',
    "'",
    "a'b",
    "x; SELECT 1; --",
    '"); COPY (SELECT 1) TO \'{pwn}\'; --',
    "') TO '{pwn}' (FORMAT csv); --",
    "read_text('/etc/passwd')",
    "* EXCLUDE (x)",
    "a\nb",
    "SELECT",
    "FROM",
    "?",
    "$1",
    "\\",
    "`x`",
    "[x]",
    "x\x00y",
    "é",
    "\u202eevil",
]
_RESERVED = {
    "run_id",
    "train_step",
    "group_id",
    "traj_id",
    "step_idx",
    "reward",
    "action",
    "anchor_obs",
    "anchor_key",
    "state_hash",
    "done",
    "success",
    "episode_return",
    "is_action_valid",
    "env_name",
    "split",
    "observation",
    "response",
    "steps",
    "advantage",
}


def _usable_name(name: str) -> bool:
    """Field names the loader keeps as user columns (reserved names are schema fields; a
    leading ``_`` is the store's own namespace; a ``__json`` suffix is its encoding)."""
    return bool(name) and name not in _RESERVED and not name.startswith("_") and not name.endswith("__json")


def _store_round_trip(tmp: Path, fields: dict) -> None:
    """Ingest two rollouts carrying ``fields`` and read them back through every read path of
    the store; the only allowed failure is a LoadError naming the input."""
    from crbc_viz.io import LoadError
    from crbc_viz.store import LogStore, ingest

    pwn = tmp / "pwned.csv"
    fields = {k.replace("{pwn}", str(pwn)): v for k, v in fields.items() if _usable_name(k)}
    rows = []
    for traj, ok in (("r0", True), ("r1", False)):
        for i in range(2):
            rows.append(
                {
                    "run_id": "fz",
                    "train_step": 0,
                    "group_id": "g",
                    "traj_id": traj,
                    "step_idx": i,
                    "anchor_obs": "s0" if i == 0 else f"s1{traj}",
                    "action": "a" if ok else "b",
                    "reward": float(ok and i == 1),
                    "done": i == 1,
                    "success": ok,
                    **fields,
                }
            )
    log = tmp / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp / "store"
    try:
        ingest(root, [str(log)])
    except LoadError as exc:
        assert exc.problems and str(exc)
        return
    with LogStore(root) as st:
        assert len(st.groups()) == 1 and len(st.groups(group="fz/0/g")) == 1
        b = st.load_batch(group="g", text=True)
        assert b.num_steps == 4
        for k, v in fields.items():
            if k in b.steps.columns and isinstance(v, str):
                assert set(b.steps[k]) == {v}, k
        for k in list(fields)[:3]:
            st.search_steps(k, limit=5)
        assert len(st.find_trajectory("r0")) == 2
        st.summary()
    assert not pwn.exists(), "a field name ran as SQL"


if __name__ != "__main__":
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from strategies import step_tables

    FUZZ = settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    HOSTILE = [
        b"NaN",
        b"Infinity",
        b"-1",
        b"1e400",
        b"null",
        b"true",
        b'"x"',
        b"[]",
        b"{}",
        b"\\ud800",
        b"\x00",
        b"\xff",
        b"<img src=x onerror=alert(1)>",
        b"9" * 30,
        b'"steps": 3',
        b"[" * 200,
        b"\n",
        b'"',
        b",",
        b"}",
    ]
    FIELDS = [
        "group_id",
        "traj_id",
        "step_idx",
        "reward",
        "done",
        "success",
        "anchor_obs",
        "action",
        "train_step",
        "run_id",
        "episode_return",
        "anchor_key",
        "judge_score",
        "gold_logprob",
        "influence_edges",
        "rubric_active",
        "steps",
    ]
    VALUES = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 2**40),
        st.floats(allow_nan=True),
        st.text(max_size=8),
        st.lists(st.integers(0, 3), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )

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
                del data[at : at + draw(st.integers(1, 40))]
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
        return bytes(data)

    @FUZZ
    @given(
        rows=step_tables(max_groups=2, max_trajs=3, max_len=4),
        fmt=st.sampled_from(["jsonl", "json", "csv", "parquet", "jsonl.gz"]),
    )
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
            df = pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict))} for r in rows])
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
    @given(data=st.binary(max_size=400), fmt=st.sampled_from(["jsonl", "json", "csv", "parquet", "jsonl.gz"]))
    def test_random_bytes_fail_cleanly(tmp_path, data, fmt):
        path = tmp_path / f"r.{fmt}"
        path.write_bytes(data)
        _check_file(str(path))

    FIELD_NAMES = st.one_of(
        st.sampled_from(SQL_NAMES),
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24),
        st.text(alphabet='"\';()-*/\\ ?$`[]{}', min_size=1, max_size=12),
    )
    FIELD_VALUES = st.one_of(
        st.sampled_from(SQL_NAMES),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=24),
        st.integers(-(2**40), 2**40),
        st.booleans(),
        st.none(),
        st.lists(st.text(max_size=4), max_size=3),
    )

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(fields=st.dictionaries(FIELD_NAMES, FIELD_VALUES, min_size=1, max_size=4))
    def test_store_reads_field_names_and_values_as_data(tmp_path_factory, fields):
        _store_round_trip(tmp_path_factory.mktemp("st"), fields)

    def test_store_sql_names_all_at_once(tmp_path):
        _store_round_trip(tmp_path, {n: f"v{i}" for i, n in enumerate(SQL_NAMES)})

    def _run_atheris(tmp_path, mode: str, *flags: str, timeout: float = 90) -> None:
        """``python tests/io/test_fuzz.py <mode>`` for `ATHERIS_SECONDS`: it must end cleanly."""
        pytest.importorskip("atheris")
        proc = subprocess.run(
            [
                sys.executable,
                str(Path(__file__)),
                mode,
                f"-max_total_time={ATHERIS_SECONDS}",
                "-rss_limit_mb=3072",
                f"-artifact_prefix={tmp_path}/",
                *flags,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=ATHERIS_SECONDS + timeout,
            env={**os.environ, "CRBC_FUZZ_TMP": str(tmp_path)},
        )
        tail = (proc.stdout + proc.stderr)[-4000:]
        assert proc.returncode == 0, tail
        assert "Traceback" not in proc.stderr, tail
        assert "Done" in proc.stderr or "pulse" in proc.stderr or "INITED" in proc.stderr, tail

    def test_atheris_store_bounded(tmp_path):
        _run_atheris(tmp_path, "--atheris-store", "-max_len=512", "-timeout=20", timeout=120)

    def test_atheris_jsonl_bounded(tmp_path):
        pytest.importorskip("atheris")
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for p in sorted((HERE / "bad_inputs").glob("*.jsonl")):
            if p.stat().st_size < 8192:
                shutil.copy(p, corpus / p.name)
        _run_atheris(tmp_path, "--atheris", "-max_len=4096", "-timeout=10", str(corpus))


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


def _atheris_store_main(argv: list[str]) -> None:
    """libFuzzer over the store's read side: each input becomes up to three (field name,
    value) pairs of a small log that is ingested into a fresh store and read back."""
    import atheris

    with atheris.instrument_imports(include=["crbc_viz"]):
        import crbc_viz.store.ingest  # noqa: F401
        import crbc_viz.store.query  # noqa: F401
    base = Path(tempfile.mkdtemp(dir=os.environ.get("CRBC_FUZZ_TMP")))
    count = [0]

    def one_input(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        fields = {}
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            name = fdp.ConsumeUnicodeNoSurrogates(24)
            if fdp.ConsumeBool():
                name = SQL_NAMES[fdp.ConsumeIntInRange(0, len(SQL_NAMES) - 1)] + name
            fields[name] = fdp.ConsumeUnicodeNoSurrogates(24) if fdp.ConsumeBool() else fdp.ConsumeInt(4)
        count[0] += 1
        tmp = base / str(count[0])
        tmp.mkdir()
        try:
            _store_round_trip(tmp, fields)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    if "--atheris-store" in sys.argv:
        sys.path.insert(0, str(ROOT))
        _atheris_store_main([a for a in sys.argv[1:] if a != "--atheris-store"])
    elif "--atheris" in sys.argv:
        sys.path.insert(0, str(ROOT))
        _atheris_main([a for a in sys.argv[1:] if a != "--atheris"])
