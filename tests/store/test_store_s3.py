"""A log store on S3 (``--store s3://BUCKET/PREFIX``), against a real S3 server (SeaweedFS's
``weed mini``, started here: `s3_server`): the commands give what they give on a local store;
a reader never sees a half-written part (a writer killed mid-ingest); two writers on one
prefix: exactly one is let in (a lease created by a conditional write); hostile keys and
URLs are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from crbc_viz.cli import main
from crbc_viz.store import LogStore, StoreError, ingest
from crbc_viz.store.ingest import IngestSession
from crbc_viz.store.s3 import S3Path, s3_filesystem
from crbc_viz.synthetic import batch_to_rows, random_mdp_batch
from helpers import ROOT, write_jsonl

pytestmark = pytest.mark.timeout(600)


def _logs(folder: Path) -> list[Path]:
    """Three logs: two runs, three train steps, text columns, and an extra field whose type
    differs between logs (an integer in one, text in another: united as read_parquet unites)."""
    out = []
    folder.mkdir(parents=True, exist_ok=True)
    for k, (run, step, seed) in enumerate([("alpha", 0, 1), ("alpha", 1, 2), ("beta", 0, 3)]):
        rows = batch_to_rows(random_mdp_batch(4, 4, 8, seed=seed))
        for i, r in enumerate(rows):
            r["run_id"], r["train_step"] = run, step
            r["observation"], r["response"] = f"obs {i} of {run}", f"resp {i}"
            r["extra_note"] = i if k == 0 else f"note-{i}"
        out.append(write_jsonl(folder / f"{run}_{step}.jsonl", rows))
    return out


def _objects(url: str) -> list[str]:
    """The keys under the store's prefix (as listed by the server)."""
    import pyarrow.fs as pafs

    root = S3Path.from_url(url)
    sel = pafs.FileSelector(root.location, recursive=True, allow_not_found=True)
    cut = len(root.location) + 1
    return sorted(i.path[cut:] for i in s3_filesystem().get_file_info(sel) if i.type == pafs.FileType.File)


def _run(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _info(store: str, capsys) -> dict:
    doc = json.loads(_run(["info", "--store", store, "--json"], capsys))
    doc.pop("store", None)
    return doc


def test_commands_on_s3_equal_the_local_store(s3, tmp_path, monkeypatch, capsys):
    """ingest into s3:// and into a folder: info, score, export and trends give the same; the
    store's objects are in the bucket (no local folder named s3: was made)."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    logs = [str(p) for p in _logs(tmp_path / "logs")]
    url, local = s3.url(), str(tmp_path / "local-store")
    for store in (url, local):
        _run(["ingest", *logs, "--store", store, "--part-rows", "40", "-q"], capsys)
    assert not (tmp_path / "s3:").exists()
    keys = _objects(url)
    assert "store.json" in keys and sum(k.startswith("manifest/") for k in keys) == 3
    assert any(k.startswith("steps/run_id=alpha/train_step=1/") for k in keys)
    assert not any(k.startswith(".ingest-tmp/") or k == ".lease" for k in keys)

    assert _info(url, capsys) == _info(local, capsys)
    for flt in ([], ["--run", "alpha"], ["--group", "alpha/1/task-00001"], ["--success", "mixed"]):
        outs = []
        for store in (url, local):
            out = tmp_path / f"score-{len(outs)}.csv"
            _run(
                ["score", "--store", store, *flt, "-e", "crbc", "-e", "shortest_path", "--out", str(out)],
                capsys,
            )
            outs.append(pd.read_csv(out))
        pd.testing.assert_frame_equal(outs[0], outs[1])
    exp = []
    for store in (url, local):
        out = tmp_path / f"export-{len(exp)}.parquet"
        _run(["export", "--store", store, "-e", "crbc", "--out", str(out)], capsys)
        exp.append(pd.read_parquet(out))
    assert len(exp[0]) == 3 * 4 * 4 * 8 or len(exp[0]) > 0
    pd.testing.assert_frame_equal(exp[0], exp[1])
    trends = [json.loads(_run(["trends", "--store", s, "--json", "-q"], capsys)) for s in (url, local)]
    assert trends[0] == trends[1] and trends[0]
    # the trends cache went to the bucket; a second run reads it and agrees
    assert any(k.startswith("cache/") for k in _objects(url))
    assert json.loads(_run(["trends", "--store", url, "--json", "-q"], capsys)) == trends[0]

    # the joined text and the extra field of mixed types read back as from the folder
    traj = str(LogStore(local).load_batch(run="alpha", train_step=1).steps["traj_id"].iloc[0])
    a = LogStore(url).find_trajectory(traj)
    b = LogStore(local).find_trajectory(traj)
    assert len(a) == 3 * 8 or len(a) > 0  # the same trajectory id in each log
    pd.testing.assert_frame_equal(a.drop(columns=["_part"]), b.drop(columns=["_part"]))
    assert set(a["observation"].dropna()) and "extra_note" in a.columns
    # ingesting the same logs again adds nothing
    out = _run(["ingest", *logs, "--store", url, "-q"], capsys)
    assert "0 source(s) ingested, 3 already in the store" in out


def _writer(url: str, log: str, env: dict, **extra) -> subprocess.Popen:
    code = f"import sys; from crbc_viz.store import ingest; ingest({url!r}, [{log!r}], part_rows=30)"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT), **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _consistent(url: str) -> int:
    """Open the store as a reader: every part a manifest names is whole (its row count read
    from the object itself); the rows read equal the parts' counts. Returns the rows."""
    import pyarrow.parquet as pq

    st = LogStore(url)
    for m in st.manifests.values():
        for p in m["parts"]:
            for rel in filter(None, (p["path"], p["text"])):
                meta = pq.read_metadata((st.root / rel).location, filesystem=st.root.filesystem)
                assert meta.num_rows == p["rows"], rel
    n = sum(p.rows for p in st.parts)
    if st.parts:
        assert st.load_batch(text=True).num_steps == n
    return n


def test_a_reader_never_sees_a_half_written_part(s3, tmp_path):
    """A writer is killed (SIGKILL) in the middle of an ingest of many parts, while a reader
    opens the store again and again: every state the reader sees, and the one left behind, is
    whole parts only; the next writer (once the dead one's lease expired) resumes the source
    and the store then equals a local one."""
    rows = batch_to_rows(random_mdp_batch(60, 4, 10, seed=7))
    for i, r in enumerate(rows):
        r["observation"] = f"obs {i}"
    log = str(write_jsonl(tmp_path / "big.jsonl", rows))
    url = s3.url()
    env = {**s3.env, "CRBC_VIZ_S3_LEASE_S": "5"}
    proc = _writer(url, log, env)
    seen, parts = [], 0
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                seen.append(_consistent(url))
            except StoreError as exc:
                assert "not a crbc-viz store" in str(exc)  # before its marker is written
                continue
            parts = len(LogStore(url).parts)
            if parts >= 3:
                proc.send_signal(signal.SIGKILL)  # mid-ingest: some parts in, others uploading
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    assert parts >= 3 and proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    left = _consistent(url)
    st = LogStore(url)
    assert len(st.manifests) == 1 and not next(iter(st.manifests.values()))["complete"]
    assert 0 < left < len(rows)
    # the dead writer's lease holds for its ttl, then the next writer resumes
    with pytest.raises(StoreError, match="another ingest is writing to this store"):
        ingest(url, [log])
    time.sleep(6)
    os.environ["CRBC_VIZ_S3_LEASE_S"] = "5"
    try:
        rep = ingest(url, [log], part_rows=30)
    finally:
        del os.environ["CRBC_VIZ_S3_LEASE_S"]
    assert rep.sources[0]["status"] == "resumed"
    assert _consistent(url) == len(rows)
    local = tmp_path / "local"
    ingest(local, [log], part_rows=30)
    a, b = LogStore(url).load_batch(), LogStore(local).load_batch()
    assert a.steps.drop(columns=["_part"]).equals(b.steps.drop(columns=["_part"]))
    assert not any(k.startswith(".ingest-tmp/") for k in _objects(url))


def test_an_upload_that_never_completes_is_never_named(s3, tmp_path, monkeypatch):
    """The copy of an uploaded part to its key fails (a crash between the two): the part's key
    does not exist, the manifest does not name it, the store reads whole; nothing is left
    under .ingest-tmp/."""
    from crbc_viz.store import s3 as s3mod

    log = str(_logs(tmp_path)[0])
    url = s3.url()

    real = s3mod.S3Path.commit_from

    def boom(self, tmp):  # a part's copy (the marker and manifests are copied too: let them be)
        if "/steps/" in self.location or "/text/" in self.location:
            raise OSError("simulated crash before the copy")
        return real(self, tmp)

    monkeypatch.setattr(s3mod.S3Path, "commit_from", boom)
    with pytest.raises(OSError, match="simulated crash"):
        ingest(url, [log])
    keys = _objects(url)
    assert not any(k.startswith(("steps/", "text/", ".ingest-tmp/")) for k in keys), keys
    assert _consistent(url) == 0


def test_a_crashed_ingest_is_dropped_by_drop_incomplete(s3, tmp_path, capsys):
    """An ingest that exits right after its first part (the crash hook) leaves an incomplete
    source and its lease; once the lease expired, drop-incomplete removes its part objects and
    its manifest, and the store reads empty."""
    from crbc_viz.store import CRASH_ENV

    rows = batch_to_rows(random_mdp_batch(12, 4, 10, seed=5))
    log = str(write_jsonl(tmp_path / "crash.jsonl", rows))
    url = s3.url()
    proc = _writer(url, log, {**s3.env, "CRBC_VIZ_S3_LEASE_S": "4"}, **{CRASH_ENV: "1"})
    proc.communicate(timeout=120)
    assert proc.returncode == 17
    assert ".lease" in _objects(url) and len(LogStore(url).parts) == 1
    assert main(["drop-incomplete", "--store", url]) == 2  # its lease holds until it expires
    time.sleep(5)
    _run(["drop-incomplete", "--store", url], capsys)
    assert not any(k.startswith(("steps/", "text/", "manifest/")) for k in _objects(url))
    assert ".lease" not in _objects(url)
    assert LogStore(url).summary()["sources"] == 0


def test_two_writers_exactly_one_is_let_in(s3, tmp_path):
    """Eight writers open the same store at once (a barrier): exactly one holds it, the others
    are refused with one line; once it is released the next one gets in."""
    url = s3.url()
    ingest(url, [str(_logs(tmp_path)[0])])
    barrier = threading.Barrier(8)
    held, refused, errors = [], [], []
    done = threading.Event()

    def writer():
        barrier.wait()
        try:
            s = IngestSession(url)
        except StoreError as exc:
            refused.append(str(exc))
            return
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
            return
        held.append(s)
        done.wait(30)
        s.close()

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(held) + len(refused) + len(errors) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(60)
    assert not errors and len(held) == 1 and len(refused) == 7, (errors, refused)
    assert all("another ingest is writing to this store" in r for r in refused)
    assert all("\n" not in r for r in refused)
    with IngestSession(url):  # released: the next writer is let in
        assert main(["drop-incomplete", "--store", url]) == 2  # and holds it against the CLI


def test_a_writer_that_lost_its_lease_commits_nothing(s3, tmp_path):
    """Another party replaces the lease (as a writer taking over an expired one does): the
    holder's next renewal is refused, and its next commit stops with a StoreError."""
    from crbc_viz.store.layout import _write_json

    url = s3.url()
    os.environ["CRBC_VIZ_S3_LEASE_S"] = "1"
    try:
        with IngestSession(url) as s:
            lease = s.root.lease
            lease._client.put_object(Bucket=lease.root._store.bucket, Key=lease.obj.key, Body=b"{}")
            time.sleep(1.0)
            with pytest.raises(StoreError, match="lost the store's lease"):
                _write_json(s.root / "manifest" / "x.json", {"digest": "x"})
    finally:
        del os.environ["CRBC_VIZ_S3_LEASE_S"]
    assert "manifest/x.json" not in _objects(url)


@pytest.mark.parametrize(
    "rel",
    [
        "steps/../../other-store/steps/x.parquet",
        "steps/run_id=a/../../x.parquet",
        "steps//x.parquet",
        "steps/./x.parquet",
        "/steps/x.parquet",
        "steps\\..\\x.parquet",
        "text/x.parquet",
        "steps/x\x00.parquet",
        "steps/*.parquet",
        "manifest",
    ],
)
def test_hostile_part_keys_are_refused(s3, tmp_path, rel):
    url = s3.url()
    ingest(url, [str(_logs(tmp_path)[0])])
    root = S3Path.from_url(url)
    (mkey,) = [k for k in _objects(url) if k.startswith("manifest/")]
    m = json.loads((root / mkey).read_text())
    m["parts"][0]["path"] = rel
    (root / mkey).write_text(json.dumps(m))
    with pytest.raises(StoreError, match="part .* (outside|not a plain key|glob|missing)") as e:
        LogStore(url)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "s3://Bad_Bucket/x",
        "s3://ab/x",
        "s3://bucket/a/../b",
        "s3://bucket/a//b",
        "s3://bucket/a\\b",
        "s3:///x",
    ],
)
def test_bad_store_urls_are_refused(url):
    with pytest.raises(StoreError, match="bucket name|prefix"):
        LogStore(url)


def test_whole_store_rescoring_reads_s3_as_it_reads_a_folder(s3, tmp_path, monkeypatch, capsys):
    """``score --store s3://… --all`` (this process, then a local Ray the command starts, whose
    workers read the bucket with the same AWS variables) writes the bytes the local store's
    re-scoring writes."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'crbc-viz[ray]')")
    monkeypatch.chdir(tmp_path)
    logs = [str(p) for p in _logs(tmp_path / "logs")]
    url, local = s3.url(), str(tmp_path / "local-store")
    for store in (url, local):
        _run(["ingest", *logs, "--store", store, "-q"], capsys)
    outs = {}
    for name, store, extra in [
        ("local", local, []),
        ("s3", url, []),
        ("s3-ray", url, ["--engine", "ray", "--workers", "2"]),
    ]:
        out = tmp_path / f"rescored-{name}"
        _run(["score", "--store", store, "--all", "-e", "crbc", "-e", "grpo", *extra, "-o", str(out)], capsys)
        outs[name] = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert len(outs["local"]) == 4  # three train steps and rescore.json
    assert outs["s3"] == outs["local"] and outs["s3-ray"] == outs["local"]
